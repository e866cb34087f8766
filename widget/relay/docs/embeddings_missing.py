"""The warning when hybrid docs search is configured but the ``embeddings`` extra is not installed (kept apart
from ``embeddings.py``, which needs numpy to be imported at all)."""

from __future__ import annotations

import logging

log = logging.getLogger("widget.relay.docs")


def warn_missing(exc: ImportError) -> None:
    """Say that docs search is BM25 alone, and what to install."""
    log.warning("embeddings_model is set but %s is not installed: hybrid docs search needs the embeddings extra "
                "(pip install 'autopilot-widget[embeddings]'); docs search is BM25 alone", exc.name or exc)

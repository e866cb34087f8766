"""The site's documentation on the relay: an index of its sections per app, searched by the model's ``search_docs``.

This package owns everything about the docs (extracting sections from built HTML and Markdown, the incremental
index in SQLite FTS5 or PostgreSQL full-text search, the ``search_docs`` reply, the ``index``/``search`` commands).
The turn loop uses only what this module exports: ``DocHit``, ``DocsIndex`` and ``open_docs_index``.
"""

from __future__ import annotations

from typing import Any

from .search import DocHit, DocsIndex


def open_docs_index(database_url: str | None, db_path: str, *, embeddings_model: str | None = None,
                    embeddings_max_windows: int | None = None, models: dict[str, Any] | None = None,
                    embeddings_threads: int | None = None) -> DocsIndex:
    """The relay's docs index: PostgreSQL full-text search when ``database_url`` is set, else SQLite FTS5 in the
    relay's database file ``db_path``. Connects on first use; ``close()`` when done. With ``embeddings_model`` (a
    folder made by ``autopilot-relay embeddings fetch``, or ``endpoint:NAME`` for the OpenAI-compatible endpoint of
    ``models[NAME]``, a relay config's ``[models.NAME]``), hybrid search (``hybrid.py``); when the model cannot
    be loaded (the ``embeddings`` extra missing, the folder wrong) a warning says why and BM25 alone serves."""
    engine: DocsIndex
    if database_url:
        from .pg_index import PgDocsIndex

        engine = PgDocsIndex(database_url)
    else:
        from .sqlite_index import SqliteDocsIndex

        engine = SqliteDocsIndex(db_path)
    if embeddings_model:
        try:
            from .hybrid import open_hybrid
        except ImportError as exc:  # numpy, which the embeddings extra brings
            from .embeddings_missing import warn_missing

            warn_missing(exc)
            return engine
        return open_hybrid(engine, database_url, db_path, embeddings_model, embeddings_max_windows, models,
                           threads=embeddings_threads)
    return engine


__all__ = ["DocHit", "DocsIndex", "open_docs_index"]

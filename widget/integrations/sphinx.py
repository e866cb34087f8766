"""The Sphinx extension: the widget on every HTML page, and the built site indexed for the relay.

``conf.py``::

    extensions = ["widget.integrations.sphinx"]
    html_baseurl = "https://docs.example.com/"
    autopilot_relay = "https://relay.example.com"
    autopilot_app = "my-docs"
    autopilot_index = "relay/autopilot-relay.sqlite3"   # the relay's SQLite file; None: do not index
    autopilot_options = {"theme": "auto", "position": "bottom-right"}
    autopilot_embeddings_model = "relay/embeddings"   # hybrid search (default: $AUTOPILOT_EMBEDDINGS_MODEL)

Every page of an HTML builder (``html``, ``dirhtml``; tested with the Alabaster and Furo themes) gets the loader's
tag (``app.add_js_file`` on ``html-page-context``, so the tag is the page's own, with its ``data-*`` options) and a
script that sets the page context ``{page: {title, url}}``. On ``build-finished`` of a successful HTML build the
output folder is indexed with ``html_baseurl`` as its base URL (with ``autopilot_embeddings_model``, with the
sections' vectors for hybrid search; a model that cannot be used is a warning and the index BM25 alone, or with
``-W`` the build's failure before anything is written). Other builders (LaTeX, man, ...) are left alone.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ConfigError, ExtensionError
from sphinx.util import logging

from .common import (
    IntegrationError,
    PageContext,
    check_app,
    check_options,
    check_relay,
    context_script,
    index_site,
    indexed_line,
    plain_title,
    resolve_embeddings_model,
    resolve_index_path,
    tag_attributes,
)

log = logging.getLogger(__name__)


_SETTINGS: weakref.WeakKeyDictionary[Sphinx, dict[str, Any]] = weakref.WeakKeyDictionary()


def _config_inited(app: Sphinx, config: Config) -> None:
    """Check the ``autopilot_*`` values once (``ConfigError`` naming the value)."""
    try:
        relay = check_relay(config.autopilot_relay)
        app_id = check_app(config.autopilot_app)
        options = check_options(config.autopilot_options)
        if config.autopilot_index is True:
            raise IntegrationError("index must be the relay's SQLite database file or None, not True")
        index = resolve_index_path(config.autopilot_index, Path(app.confdir))
        model = resolve_embeddings_model(config.autopilot_embeddings_model, Path(app.confdir), os.environ)
    except IntegrationError as exc:
        raise ConfigError(f"autopilot: {exc}") from None
    _SETTINGS[app] = {"relay": relay, "app": app_id, "options": options, "index": index, "embeddings_model": model}


def _warnings_fail(app: Sphinx) -> bool:
    """Whether ``-W`` makes warnings the build's failure (Sphinx 8.1+ keeps it private; before, ``warningiserror``)."""
    return bool(getattr(app, "_fail_on_warnings", False) or getattr(app, "warningiserror", False))


def _page_context(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    """The widget's tags on one page (per-page ``add_js_file``: Sphinx resets the list for every page)."""
    if app.builder.format != "html":
        return
    settings = _SETTINGS[app]
    if app.config.autopilot_context:
        title = plain_title(context.get("title") or app.config.project)
        url = context.get("pageurl") or "/" + app.builder.get_target_uri(pagename)
        body = context_script(PageContext(title=title, url=url))
        app.add_js_file(None, body=body.removeprefix("<script>").removesuffix("</script>"))
    attrs: dict[str, Any] = dict(tag_attributes(settings["relay"], settings["app"], settings["options"]))
    app.add_js_file(attrs.pop("src"), loading_method="defer", **attrs)


def _build_finished(app: Sphinx, exception: BaseException | None) -> None:
    """Index the HTML output after a successful build."""
    settings = _SETTINGS[app]
    if exception is not None or settings["index"] is None or app.builder.format != "html":
        return
    base_url = app.config.html_baseurl or "/"
    if not app.config.html_baseurl:
        log.warning("autopilot: html_baseurl is not set, so the index links pages by their paths from /")
    try:
        summary = index_site(Path(app.outdir), app=settings["app"], db_path=settings["index"], base_url=base_url,
                             selector=app.config.autopilot_selector,
                             excludes=tuple(app.config.autopilot_exclude),
                             embeddings_model=settings["embeddings_model"], strict=_warnings_fail(app),
                             warn=lambda line: log.warning("autopilot: %s", line))
    except Exception as exc:  # any failure of the run fails the build, with its reason
        raise ExtensionError(f"autopilot: indexing {app.outdir} failed: {exc}") from exc
    log.info("%s", indexed_line(settings["app"], settings["index"], summary))


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the ``autopilot_*`` config values and the extension's events."""
    app.add_config_value("autopilot_relay", "", "html", str)
    app.add_config_value("autopilot_app", "", "html", str)
    app.add_config_value("autopilot_options", {}, "html", dict)
    app.add_config_value("autopilot_context", True, "html", bool)
    app.add_config_value("autopilot_index", None, "", (str, type(None)))
    app.add_config_value("autopilot_selector", None, "", (str, type(None)))
    app.add_config_value("autopilot_exclude", [], "", list)
    app.add_config_value("autopilot_embeddings_model", None, "", (str, bool, type(None)))
    app.connect("config-inited", _config_inited)
    app.connect("html-page-context", _page_context)
    app.connect("build-finished", _build_finished)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}

"""The MkDocs plugin ``autopilot``: the widget on every page, and the built site indexed for the relay.

``mkdocs.yml``::

    site_url: https://docs.example.com/
    plugins:
      - search
      - autopilot:
          relay: https://relay.example.com
          app: my-docs
          index: relay/autopilot-relay.sqlite3   # the relay's SQLite file; false: do not index
          options: {theme: auto, position: bottom-right}
          embeddings_model: relay/embeddings  # hybrid search: the model folder (default: $AUTOPILOT_EMBEDDINGS_MODEL)

Every built page gets the loader's tag (``options`` are the loader's ``data-*`` options, docs/embedding.md) and a
script that sets the page context ``{page: {title, url}}``. After ``mkdocs build`` (and ``gh-deploy``) the site
folder is indexed with ``site_url`` as its base URL; ``mkdocs serve`` keeps the widget on but indexes only with
``index_on_serve: true`` (its rebuilds would otherwise re-index on every saved file; with it, a rebuild embeds only
the sections whose text changed). With ``embeddings_model`` the index has the sections' vectors too (hybrid search);
a model that cannot be used is a warning and the index BM25 alone (``--strict``: the build fails, the index is not
written).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Literal

from mkdocs.config import base
from mkdocs.config import config_options as c
from mkdocs.exceptions import PluginError
from mkdocs.plugins import BasePlugin
from mkdocs.structure.pages import Page

from .common import (
    IntegrationError,
    PageContext,
    check_app,
    check_options,
    check_relay,
    index_site,
    indexed_line,
    insert_before_body_end,
    plain_title,
    resolve_embeddings_model,
    resolve_index_path,
    widget_tags,
)

log = logging.getLogger("mkdocs.plugins.autopilot")


class AutopilotPluginConfig(base.Config):  # type: ignore[no-untyped-call]  # mkdocs' __init_subclass__ is unannotated
    """The plugin's settings in ``mkdocs.yml``."""

    enabled = c.Type(bool, default=True)
    #: The relay's base URL (the loader comes from ``<relay>/widget/autopilot.js``).
    relay = c.Type(str, default="")
    #: The app's id on the relay.
    app = c.Type(str, default="")
    #: The loader's options by their ``data-*`` names (``theme``, ``position``, ``boot``, ``labels``, ...).
    options = c.Type(dict, default={})
    #: Set the page context ``{page: {title, url}}`` on every page.
    context = c.Type(bool, default=True)
    #: The relay's SQLite database file to index the built site into (relative to ``mkdocs.yml``), or false.
    index = c.Type((str, bool), default=False)
    #: The embedding model's folder (``autopilot-relay embeddings fetch DIR``) for hybrid search; not given: the
    #: environment's ``AUTOPILOT_EMBEDDINGS_MODEL``, as the relay; false: BM25 alone.
    embeddings_model = c.Optional(c.Type((str, bool)))
    #: Index after the rebuilds of ``mkdocs serve`` too.
    index_on_serve = c.Type(bool, default=False)
    #: CSS selector of the pages' main content (default: the generators' landmarks).
    selector = c.Optional(c.Type(str))
    #: Globs of built files not to index (relative to the site folder).
    exclude = c.Type(list, default=[])


class AutopilotPlugin(BasePlugin[AutopilotPluginConfig]):  # type: ignore[no-untyped-call]  # as above
    """Puts the widget on every page and indexes the built site (see the module's docstring)."""

    def __init__(self) -> None:
        self.command: Literal["build", "gh-deploy", "serve"] | None = None
        self.relay = self.app = ""
        self.loader_options: dict[str, Any] = {}
        self.index_path: Path | None = None
        self.embeddings_model: str | None = None

    def on_startup(self, *, command: Literal["build", "gh-deploy", "serve"], dirty: bool) -> None:
        """Remember the command: ``serve`` indexes only with ``index_on_serve``."""
        self.command = command

    def on_config(self, config: Any) -> Any:
        """Check the settings once per build, with errors that name the setting."""
        if not self.config.enabled:
            return config
        try:
            self.relay = check_relay(self.config.relay)
            self.app = check_app(self.config.app)
            self.loader_options = check_options(self.config.options)
            root = Path(config.config_file_path or ".").absolute().parent
            if self.config.index is True:
                raise IntegrationError("index must be the relay's SQLite database file or false, not true")
            self.index_path = resolve_index_path(self.config.index, root)
            self.embeddings_model = resolve_embeddings_model(self.config.embeddings_model, root, os.environ)
        except IntegrationError as exc:
            raise PluginError(f"autopilot: {exc}") from None
        return config

    def on_post_page(self, output: str, /, *, page: Page, config: Any) -> str:
        """The widget's tags before ``</body>`` of every built page."""
        if not self.config.enabled:
            return output
        context: PageContext | None = None
        if self.config.context:
            url = page.canonical_url or page.abs_url or "/" + page.url
            context = PageContext(title=plain_title(page.title or config.site_name), url=url)
        return insert_before_body_end(output, widget_tags(self.relay, self.app, self.loader_options, context))

    def on_post_template(self, output_content: str, /, *, template_name: str, config: Any) -> str:
        """The widget on the theme's own HTML pages too (404.html: a reader who landed there may well ask)."""
        if not self.config.enabled or not template_name.endswith(".html"):
            return output_content
        return insert_before_body_end(output_content, widget_tags(self.relay, self.app, self.loader_options, None))

    def on_post_build(self, *, config: Any) -> None:
        """Index the built site (not on ``mkdocs serve`` unless ``index_on_serve``)."""
        if not self.config.enabled or self.index_path is None:
            return
        if self.command == "serve" and not self.config.index_on_serve:
            return
        if not config.site_url:
            log.warning("autopilot: site_url is not set, so the index links pages by their paths from /")
        try:
            summary = index_site(Path(config.site_dir), app=self.app, db_path=self.index_path,
                                 base_url=config.site_url or "/", selector=self.config.selector,
                                 excludes=tuple(str(g) for g in self.config.exclude),
                                 embeddings_model=self.embeddings_model, strict=bool(config.strict),
                                 warn=lambda line: log.warning("autopilot: %s", line))
        except Exception as exc:  # any failure of the run fails the build, with its reason
            raise PluginError(f"autopilot: indexing {config.site_dir} failed: {exc}") from exc
        log.info("%s", indexed_line(self.app, self.index_path, summary))

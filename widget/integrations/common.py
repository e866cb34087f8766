"""What the MkDocs plugin and the Sphinx extension share: the widget's tags for a page, and indexing a built site.

The tags are the loader's ``<script>`` with its ``data-*`` options (docs/embedding.md, "Options") and a small inline
script that queues ``Autopilot.setContext({page: {title, url}})`` (the JS API's queue works in any tag order), so
the model knows which page the reader is on. Indexing runs the same incremental, atomic index run as
``autopilot-relay index`` into the relay's SQLite database file, and stores the same per-app settings, so
``autopilot-relay index --app ID`` alone re-indexes the site the same way. With an embedding model (the
``embeddings_model`` setting, else the relay's own ``AUTOPILOT_EMBEDDINGS_MODEL``) the run is the hybrid one: each
section's vectors are stored beside its BM25 entry, as ``autopilot-relay index`` does with the relay's
``embeddings_model`` set, so a relay with the model searches the site hybrid.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import re
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypedDict, TypeVar
from urllib.parse import urlsplit

from ..relay.docs.indexer import IndexOptions, Summary, run_index
from ..relay.docs.limits import MAX_PAGES
from ..relay.docs.walk import Source, collect, normalize_base

#: The loader's options a docs config may set (docs/embedding.md, "Options"), by their ``data-*`` names; the
#: value kinds are checked here so a typo fails the docs build instead of a console warning on every page.
LOADER_OPTIONS: dict[str, type | tuple[type, ...]] = {
    "boot": str, "open": bool, "position": str, "theme": str, "title": str, "labels": dict, "python": (str, list),
    "tools": dict, "webmcp": bool, "prewarm": (bool, str), "snapshot-cache": bool,
}
#: The environment variable the relay reads its ``embeddings_model`` from (widget/relay/config.py): a docs build
#: that does not name a model uses the relay's, so one setting makes both the index and the search hybrid.
EMBEDDINGS_ENV = "AUTOPILOT_EMBEDDINGS_MODEL"
#: ``embeddings_model = "endpoint:NAME"`` names a relay's ``[models.NAME]`` (hybrid.ENDPOINT_PREFIX; not imported
#: from there: hybrid.py needs numpy, which a BM25-only docs build need not have).
ENDPOINT_PREFIX = "endpoint:"
_TAG = re.compile(r"<[^>]+>")
_APP_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class IntegrationError(ValueError):
    """A docs config's autopilot settings are wrong; the message names the setting and what to change."""


class PageContext(TypedDict):
    """What a built page tells the model about itself (``Autopilot.setContext({page: ...})``)."""

    title: str
    url: str


def plain_title(title: Any) -> str:
    """A generator's page title as text (MkDocs and Sphinx give it as HTML: tags dropped, entities decoded)."""
    return html.unescape(_TAG.sub("", str(title or ""))).strip()


def check_relay(relay: Any) -> str:
    """The relay's base URL without a trailing ``/`` (``IntegrationError`` unless an http(s) URL)."""
    if not isinstance(relay, str) or urlsplit(relay.strip()).scheme not in ("http", "https") \
            or not urlsplit(relay.strip()).netloc:
        raise IntegrationError(f"relay must be the relay's http(s) base URL (https://relay.example.com), "
                               f"not {relay!r}")
    return relay.strip().rstrip("/")


def check_app(app: Any) -> str:
    """The app id (``IntegrationError`` unless letters, digits, ``-``, ``_``, ``.``)."""
    if not isinstance(app, str) or not _APP_ID.match(app):
        raise IntegrationError(f"app must be the app's id on the relay (letters, digits, '-', '_' or '.'), "
                               f"not {app!r}")
    return app


def check_options(options: Any) -> dict[str, Any]:
    """The loader options, by their ``data-*`` names (``snapshot_cache`` is accepted for ``snapshot-cache``)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise IntegrationError(f"options must be a mapping of loader options, not {options!r}")
    out: dict[str, Any] = {}
    for key, value in options.items():
        name = str(key).replace("_", "-")
        kind = LOADER_OPTIONS.get(name)
        if kind is None:
            raise IntegrationError(f"unknown loader option {key!r}; known: {', '.join(sorted(LOADER_OPTIONS))}")
        if value is None:
            continue
        if not isinstance(value, kind):
            raise IntegrationError(f"loader option {key!r} has the wrong kind of value: {value!r}")
        out[name] = value
    return out


def tag_attributes(relay: str, app: str, options: Mapping[str, Any]) -> dict[str, str]:
    """The loader tag's attributes: ``src``, ``data-app`` and one ``data-*`` per option (JSON for objects)."""
    attrs = {"src": f"{relay}/widget/autopilot.js", "data-app": app}
    for name, value in options.items():
        if isinstance(value, bool):
            attrs[f"data-{name}"] = "true" if value else "false"
        elif isinstance(value, dict):
            attrs[f"data-{name}"] = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        elif isinstance(value, list):
            attrs[f"data-{name}"] = ",".join(str(v) for v in value)
        else:
            attrs[f"data-{name}"] = str(value)
    return attrs


def _script_json(value: Any) -> str:
    # Inside <script>, "</script>" or "<!--" in a title must not end or change the script: escape < > & as \uXXXX.
    text = json.dumps(value, ensure_ascii=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def context_script(context: PageContext) -> str:
    """An inline script that queues ``Autopilot.setContext({page: context})``."""
    return ("<script>(window.Autopilot=window.Autopilot||[]).push(function(A){A.setContext({page:"
            f"{_script_json(context)}}})}});</script>")


def widget_tags(relay: str, app: str, options: Mapping[str, Any], context: PageContext | None) -> str:
    """The HTML a built page gets before ``</body>``: the context script (when given) and the loader's tag."""
    attrs = " ".join(f'{k}="{html.escape(v, quote=True)}"' for k, v in tag_attributes(relay, app, options).items())
    tags = f"<script {attrs} defer></script>"
    return (context_script(context) + "\n" + tags) if context else tags


def insert_before_body_end(page_html: str, snippet: str) -> str:
    """``snippet`` before the page's last ``</body>`` (appended when it has none)."""
    at = page_html.lower().rfind("</body>")
    return page_html + snippet if at < 0 else page_html[:at] + snippet + "\n" + page_html[at:]


def resolve_index_path(value: Any, root: Path) -> Path | None:
    """The ``index`` setting: ``False``/``None`` for none, else the SQLite file (relative to the docs config)."""
    if value is None or value is False:
        return None
    if not isinstance(value, str | Path) or not str(value).strip():
        raise IntegrationError(f"index must be the relay's SQLite database file or false, not {value!r}")
    path = Path(value).expanduser()
    return path if path.is_absolute() else (root / path)


def resolve_embeddings_model(value: Any, root: Path, env: Mapping[str, str]) -> str | None:
    """The ``embeddings_model`` setting: a model folder (relative to the docs config); not given (``None`` or
    empty): the environment's ``AUTOPILOT_EMBEDDINGS_MODEL`` as the relay reads it (relative to the working folder;
    empty: none); ``False``: no model even when that is set."""
    if value is False:
        return None
    if value is not None and (value is True or not isinstance(value, str | Path)):
        raise IntegrationError(f"embeddings_model must be a model folder (autopilot-relay embeddings fetch DIR) or "
                               f"false, not {value!r}")
    text = str(value or "").strip()
    if not text:
        raw = env.get(EMBEDDINGS_ENV, "").strip()
        # An endpoint the relay's config names is passed on: the index run says it cannot use it.
        return None if not raw else raw if raw.startswith(ENDPOINT_PREFIX) else str(Path(raw).expanduser().absolute())
    if text.startswith(ENDPOINT_PREFIX):
        raise IntegrationError(f"embeddings_model {text!r} names a relay's [models] endpoint, which a docs build "
                               "cannot use: give a model folder (autopilot-relay embeddings fetch DIR), or leave "
                               "index off and run autopilot-relay index --config RELAY.toml --app ID SITE_DIR=URL "
                               "after the build")
    path = Path(text).expanduser()
    return str(path if path.is_absolute() else root / path)


class SiteIndexed(Summary):
    """What indexing the built site did: the run's summary, and whether the sections got their vectors."""

    hybrid: bool


class _Collect(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


@contextmanager
def _relay_warnings(into: list[str]) -> Iterator[None]:
    """The relay's docs warnings (why a model cannot be loaded) collected meanwhile, not printed: the build says
    them as its own warning, with what it means for the site."""
    logger = logging.getLogger("widget.relay.docs")
    handler, propagate = _Collect(into), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


async def _open_index(db_path: Path, app: str, model: str | None, *, strict: bool,
                      warn: Callable[[str], None]) -> tuple[Any, bool]:
    """The relay's docs index in ``db_path`` (hybrid with ``model``), and whether it is hybrid. A model that
    cannot be used is a warning (the site is indexed BM25 alone), or, when ``strict``, the build's failure."""
    from ..relay.docs import open_docs_index
    from ..relay.docs.sqlite_index import SqliteDocsIndex

    if model is None:
        return open_docs_index(None, str(db_path)), False
    reasons: list[str] = []
    if model.startswith(ENDPOINT_PREFIX):
        index: Any = open_docs_index(None, str(db_path))
        reasons.append(f"{EMBEDDINGS_ENV}={model} names a relay's [models] endpoint, which a docs build cannot "
                       "use; set embeddings_model (autopilot_embeddings_model in Sphinx's conf.py) to a model "
                       "folder (autopilot-relay embeddings fetch DIR), or to false")
    else:
        with _relay_warnings(reasons):
            index = open_docs_index(None, str(db_path), embeddings_model=model)
        if not isinstance(index, SqliteDocsIndex):
            return index, True
    why = "; ".join(r.removesuffix("; docs search is BM25 alone") for r in reasons) or "see the log above"
    if strict:
        # The build fails anyway (warnings are errors): it must not replace a hybrid index by a BM25 one first.
        await index.close()
        raise IntegrationError(f"embeddings_model {model} cannot be used: {why}. App {app} was not indexed "
                               "(a strict build); its previous index still serves")
    warn(f"embeddings_model {model} cannot be used: {why}. App {app} is indexed with BM25 alone, so the relay "
         "searches it with BM25 alone until a build with the model indexes it again")
    return index, False


def index_site(folder: Path, *, app: str, db_path: Path, base_url: str, selector: str | None = None,
               excludes: tuple[str, ...] = (), max_pages: int = MAX_PAGES, embeddings_model: str | None = None,
               strict: bool = False, warn: Callable[[str], None] = lambda line: None) -> SiteIndexed:
    """Index the built site in ``folder`` (served under ``base_url``) as the app's whole documentation, in the
    relay's SQLite file ``db_path``: incremental and atomic, as ``autopilot-relay index`` (hybrid with
    ``embeddings_model``, a model folder; see ``_open_index`` for one that cannot be used)."""
    try:
        source = Source(folder.absolute(), normalize_base(base_url or "/"), "directory")
    except ValueError as exc:
        raise IntegrationError(str(exc)) from None
    db_path.parent.mkdir(parents=True, exist_ok=True)
    files, walk_warnings = collect([source], max_pages=max_pages, excludes=excludes)
    for line in walk_warnings:
        warn(line)
    opts = IndexOptions(max_pages=max_pages, selector=selector, excludes=excludes)
    settings = {"sources": [{"path": str(source.path), "base_url": source.base_url, "url_style": source.url_style}],
                "selector": selector, "excludes": list(excludes)}

    async def go() -> SiteIndexed:
        index, hybrid = await _open_index(db_path, app, embeddings_model, strict=strict, warn=warn)
        try:
            summary = await run_index(index, app, files, options=opts, settings=settings, warn=warn)
        finally:
            await index.close()
        return SiteIndexed(**summary, hybrid=hybrid)

    return _run_sync(go)


def indexed_line(app: str, db_path: Path, done: SiteIndexed) -> str:
    """The build's log line of an index run."""
    return (f"autopilot: indexed app {app} into {db_path}{' with vectors (hybrid search)' if done['hybrid'] else ''}: "
            f"{done['pages']} pages, {done['sections']} sections ({done['added']} added, {done['changed']} changed, "
            f"{done['removed']} removed)")


_T = TypeVar("_T")


def _run_sync(fn: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run a coroutine function to the end from synchronous code, also when the caller's thread runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(fn())
    out: dict[str, Any] = {}

    def work() -> None:
        try:
            out["value"] = asyncio.run(fn())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread below
            out["error"] = exc

    t = threading.Thread(target=work, name="autopilot-index")
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    value: _T = out["value"]
    return value

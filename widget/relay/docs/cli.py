"""``autopilot-relay index`` and ``autopilot-relay search``: build an app's docs index, and see what the model
would get for a question.

Both read the relay's settings as the relay does (``--config``, ``--db``, ``--database-url`` and the
``AUTOPILOT_*`` environment), so they write and read the index the relay searches: SQLite FTS5 in the relay's
database file, or PostgreSQL when ``database_url`` is set.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from ...errors import ConfigError
from . import open_docs_index
from .indexer import DocsWriter, IndexBusy, IndexOptions, IndexRunError, run_index
from .limits import MAX_PAGE_BYTES, MAX_PAGES, MAX_SEARCH_LIMIT
from .tool import DEFAULT_HITS, build_reply
from .walk import URL_STYLES, Source, UrlStyle, WalkError, collect, normalize_base


def _store_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--app", required=True, metavar="ID", help="the app whose index this is")
    p.add_argument("--db", dest="db_path", help="the relay's SQLite database (default ./autopilot-relay.sqlite3; "
                                                "env AUTOPILOT_DB)")
    p.add_argument("--database-url", dest="database_url",
                   help="PostgreSQL instead of SQLite, as the relay's (env AUTOPILOT_DATABASE_URL)")
    p.add_argument("--config", help="the relay's TOML config file (env AUTOPILOT_CONFIG)")


def index_parser() -> argparse.ArgumentParser:
    """``autopilot-relay index``'s options."""
    p = argparse.ArgumentParser(
        prog="autopilot-relay index",
        description="Index an app's documentation: folders of built HTML (mkdocs build, sphinx-build, VitePress, "
                    "Docusaurus, hand-written) and of Markdown sources. Incremental (unchanged pages are not "
                    "touched, pages no longer there leave the index) and atomic (searches see the old index "
                    "until the new one is complete). Prints one JSON summary line.",
    )
    p.add_argument("paths", nargs="*", metavar="PATH[=BASE_URL]",
                   help="a folder (or page) to index, optionally with the URL its pages are served under "
                        "(site=https://docs.example.com/); none: the folders of the app's last run")
    _store_flags(p)
    p.add_argument("--base-url", help='base URL of PATHs given without one (default "/", or what the last run '
                                      "stored for that folder)")
    p.add_argument("--url-style", choices=URL_STYLES,
                   help="Markdown sources' URLs: guide/x.md as guide/x/ (directory, MkDocs' default) or "
                        "guide/x.html (html)")
    p.add_argument("--selector", help="CSS selector of the pages' main content (default: the generators' "
                                      "landmarks: [role=main], main article, article, main)")
    p.add_argument("--exclude", action="append", default=None, metavar="GLOB",
                   help="leave out files or folders matching GLOB, relative to their PATH (repeatable)")
    p.add_argument("--max-pages", type=int, default=None,
                   help=f"stop before changing anything when there are more pages (default {MAX_PAGES})")
    p.add_argument("--max-page-bytes", type=int, default=None,
                   help=f"skip larger pages with a warning (default {MAX_PAGE_BYTES})")
    p.add_argument("--drop", action="store_true", help="remove the app's whole index instead")
    return p


def search_parser() -> argparse.ArgumentParser:
    """``autopilot-relay search``'s options."""
    p = argparse.ArgumentParser(
        prog="autopilot-relay search",
        description="Print, as JSON, what the model's search_docs gets for QUERY (sections with ids s1, s2 …).",
    )
    p.add_argument("query", metavar="QUERY")
    _store_flags(p)
    p.add_argument("--limit", type=int, default=DEFAULT_HITS, help=f"sections (default {DEFAULT_HITS})")
    p.add_argument("--hits", action="store_true", help="print the raw hits with their scores instead")
    p.add_argument("--scope", metavar="PATH", help="only sections of pages under this URL path (a site's version "
                                                   "or language, like /en/3.11/)")
    return p


def _config(args: argparse.Namespace) -> Any:
    from ..config import load_config

    # Only the store is used: no join token is issued here, so a PostgreSQL deployment's shared secret is not needed.
    return load_config(args.config, db_path=args.db_path, database_url=args.database_url,
                       secret=secrets.token_urlsafe(24))


class Progress:
    """A one-line progress bar on a terminal (nothing otherwise)."""

    def __init__(self, stream: TextIO, label: str) -> None:
        self.stream, self.label = stream, label
        self.on = stream.isatty()
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.on or (now - self._last < 0.1 and done < total):
            return
        self._last = now
        filled = int(30 * done / max(total, 1))
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} pages")
        self.stream.flush()

    def end(self) -> None:
        if self.on:
            self.stream.write("\r\033[K")
            self.stream.flush()


def _sources(args: argparse.Namespace, stored: dict[str, Any] | None) -> list[Source]:
    old = {s["path"]: s for s in (stored or {}).get("sources", [])}
    if not args.paths:
        if not old:
            raise ConfigError(f"app {args.app!r} has no index yet: give the folders to index (PATH ...)")
        return [Source(Path(s["path"]), s["base_url"], args.url_style or s.get("url_style", "directory"))
                for s in old.values()]
    out = []
    for spec in args.paths:
        path_text, base = spec, None
        if "=" in spec and not Path(spec).exists():
            path_text, base = spec.split("=", 1)
        path = Path(path_text).expanduser().absolute()
        prev = old.get(str(path), {})
        base = base or args.base_url or prev.get("base_url") or "/"
        style: UrlStyle = args.url_style or prev.get("url_style") or "directory"
        try:
            out.append(Source(path, normalize_base(base), style))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return out


async def _index(args: argparse.Namespace, writer: DocsWriter) -> int:
    stored = await writer.index_settings(args.app)
    if args.drop:
        n = await writer.drop_index(args.app)
        print(json.dumps({"app": args.app, "dropped_sections": n}))
        return 0
    sources = _sources(args, stored)
    prev = stored or {}
    selector = args.selector if args.selector is not None else prev.get("selector")
    excludes = tuple(args.exclude if args.exclude is not None else prev.get("excludes", []))
    opts = IndexOptions(max_pages=args.max_pages or MAX_PAGES, max_page_bytes=args.max_page_bytes or MAX_PAGE_BYTES,
                        selector=selector or None, excludes=excludes)
    if opts.max_pages < 1 or opts.max_page_bytes < 1:
        raise ConfigError("--max-pages and --max-page-bytes must be positive")

    def warn(line: str) -> None:
        progress.end()
        print(f"autopilot relay index: warning: {line}", file=sys.stderr, flush=True)

    progress = Progress(sys.stderr, f"indexing {args.app}")
    files, walk_warnings = collect(sources, max_pages=opts.max_pages, excludes=opts.excludes)
    for line in walk_warnings:
        warn(line)
    settings = {"sources": [{"path": str(s.path), "base_url": s.base_url, "url_style": s.url_style}
                            for s in sources],
                "selector": opts.selector, "excludes": list(opts.excludes)}
    summary = await run_index(writer, args.app, files, options=opts, settings=settings, warn=warn, progress=progress)
    progress.end()
    summary["warnings"] += len(walk_warnings)
    print(json.dumps(summary), flush=True)
    return 0


def index_main(argv: list[str]) -> int:
    """Run ``autopilot-relay index``."""
    args = index_parser().parse_args(argv)
    try:
        config = _config(args)
        if args.selector:
            from .extract import compile_selector

            try:
                compile_selector(args.selector)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        if args.app not in config.apps:
            print(f"autopilot relay index: warning: app {args.app!r} is not in the relay's config; its index is "
                  "kept for when it is", file=sys.stderr)
    except ConfigError as exc:
        print(f"autopilot relay index: {exc}", file=sys.stderr)
        return 2
    return _run(args, config, _index, "index")


def _run(args: argparse.Namespace, config: Any, fn: Any, what: str) -> int:
    async def go() -> int:
        index: Any = open_docs_index(config.database_url, config.db_path)
        try:
            return int(await fn(args, index))
        finally:
            await index.close()

    try:
        return asyncio.run(go())
    except ConfigError as exc:
        print(f"autopilot relay {what}: {exc}", file=sys.stderr)
        return 2
    except (WalkError, IndexBusy, IndexRunError, ValueError) as exc:
        print(f"autopilot relay {what}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"autopilot relay {what}: interrupted; the previous index still serves", file=sys.stderr)
        return 130


async def _search(args: argparse.Namespace, index: Any) -> int:
    if not 1 <= args.limit <= MAX_SEARCH_LIMIT:
        raise ConfigError(f"--limit must be 1-{MAX_SEARCH_LIMIT}")
    if not await index.has_index(args.app):
        print(f"autopilot relay search: app {args.app!r} has no index (autopilot-relay index --app {args.app} "
              "PATH ...)", file=sys.stderr)
        return 1
    hits = await index.search(args.app, args.query, limit=args.limit, scope=args.scope)
    if args.hits:
        print(json.dumps(hits, indent=2, ensure_ascii=False))
        return 0
    counter = iter(range(1, len(hits) + 1))
    print(json.dumps(build_reply(hits, lambda _hit: f"s{next(counter)}", args.query), indent=2, ensure_ascii=False))
    return 0


def search_main(argv: list[str]) -> int:
    """Run ``autopilot-relay search``."""
    args = search_parser().parse_args(argv)
    try:
        config = _config(args)
    except ConfigError as exc:
        print(f"autopilot relay search: {exc}", file=sys.stderr)
        return 2
    return _run(args, config, _search, "search")

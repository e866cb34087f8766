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
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

from ...errors import ConfigError
from . import open_docs_index
from .crawl import CrawlError, CrawlOptions, CrawlStats, Site, crawl, looks_like_url, parse_site
from .indexer import DocsWriter, IndexBusy, IndexOptions, IndexRunError, PageInput, run_index
from .limits import (
    CRAWL_CONCURRENCY,
    CRAWL_MAX_DEPTH,
    CRAWL_TIMEOUT_S,
    MAX_CRAWL_CONCURRENCY,
    MAX_CRAWL_DELAY_S,
    MAX_PAGE_BYTES,
    MAX_PAGES,
    MAX_SEARCH_LIMIT,
)
from .tool import DEFAULT_HITS, build_reply
from .walk import URL_STYLES, Source, UrlStyle, WalkError, collect, normalize_base


def store_flags(p: argparse.ArgumentParser) -> None:
    """The flags naming the app and the relay's store, shared by ``index``, ``search`` and ``eval``."""
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
                    "Docusaurus, hand-written), of Markdown sources, and sites that are online (crawled: their "
                    "sitemap, else their links, same origin and folder, robots.txt honoured). Incremental "
                    "(unchanged pages are not touched, pages no longer there leave the index) and atomic "
                    "(searches see the old index until the new one is complete). Prints one JSON summary line.",
    )
    p.add_argument("paths", nargs="*", metavar="PATH[=BASE_URL] | URL",
                   help="a folder (or page) to index, optionally with the URL its pages are served under "
                        "(site=https://docs.example.com/), or the URL of a site to crawl "
                        "(https://docs.example.com/docs/: that folder of that origin); none: the folders and sites "
                        "of the app's last run")
    store_flags(p)
    p.add_argument("--base-url", help='base URL of PATHs given without one (default "/", or what the last run '
                                      "stored for that folder)")
    p.add_argument("--url-style", choices=URL_STYLES,
                   help="Markdown sources' URLs: guide/x.md as guide/x/ (directory, MkDocs' default) or "
                        "guide/x.html (html)")
    p.add_argument("--selector", help="CSS selector of the pages' main content (default: the generators' "
                                      "landmarks: [role=main], main article, VitePress' home and page layouts, "
                                      "article, main)")
    p.add_argument("--markdown-anyway", action="store_true",
                   help="index Markdown sources of a Docusaurus or VitePress site (an error otherwise: their URLs "
                        "and anchors are not MkDocs'; index the built site instead) with MkDocs' URLs and anchors")
    p.add_argument("--exclude", action="append", default=None, metavar="GLOB",
                   help="leave out files or folders matching GLOB, relative to their PATH, or a site's pages by their "
                        "path under its start URL (repeatable)")
    p.add_argument("--max-pages", type=int, default=None,
                   help=f"stop before changing anything when there are more pages (default {MAX_PAGES})")
    p.add_argument("--max-page-bytes", type=int, default=None,
                   help=f"skip larger pages with a warning (default {MAX_PAGE_BYTES})")
    crawling = p.add_argument_group("crawling a site (URL arguments)")
    crawling.add_argument("--max-depth", type=int, default=None,
                          help=f"link hops followed from the start page (default {CRAWL_MAX_DEPTH}, or what the "
                               "last run stored); a sitemap's pages are all taken")
    crawling.add_argument("--concurrency", type=int, default=CRAWL_CONCURRENCY,
                          help=f"requests in flight at once, 1-{MAX_CRAWL_CONCURRENCY} (default {CRAWL_CONCURRENCY})")
    crawling.add_argument("--timeout", type=float, default=CRAWL_TIMEOUT_S,
                          help=f"seconds one request may take, body included (default {CRAWL_TIMEOUT_S:g})")
    crawling.add_argument("--max-crawl-delay", type=float, default=MAX_CRAWL_DELAY_S,
                          help="the longest robots.txt Crawl-delay honoured, in seconds; a longer one is shortened "
                               f"to it with a warning (default {MAX_CRAWL_DELAY_S:g})")
    p.add_argument("--drop", action="store_true", help="remove the app's whole index instead")
    return p


def search_parser() -> argparse.ArgumentParser:
    """``autopilot-relay search``'s options."""
    p = argparse.ArgumentParser(
        prog="autopilot-relay search",
        description="Print, as JSON, what the model's search_docs gets for QUERY (sections with ids s1, s2 …).",
    )
    p.add_argument("query", metavar="QUERY")
    store_flags(p)
    p.add_argument("--limit", type=int, default=DEFAULT_HITS, help=f"sections (default {DEFAULT_HITS})")
    p.add_argument("--hits", action="store_true", help="print the raw hits with their scores instead (and, with "
                   "hybrid search, each one's similarity: the cosine of its best window)")
    p.add_argument("--scope", metavar="PATH", help="only sections of pages under this URL path (a site's version "
                                                   "or language, like /en/3.11/)")
    return p


def relay_config(args: argparse.Namespace) -> Any:
    """The relay's configuration as the command's store flags and config file say (a ``ConfigError`` if not)."""
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


def _plan(args: argparse.Namespace, stored: dict[str, Any] | None) -> tuple[list[Source], list[Site]]:
    """The folders and the sites to index: the arguments, else what the app's last run stored."""
    old = {s["path"]: s for s in (stored or {}).get("sources", [])}
    old_sites = [s["url"] for s in (stored or {}).get("sites", [])]
    try:
        if not args.paths:
            if not old and not old_sites:
                raise ConfigError(f"app {args.app!r} has no index yet: give the folders or site URLs to index "
                                  "(PATH or URL ...)")
            return ([Source(Path(s["path"]), s["base_url"], args.url_style or s.get("url_style", "directory"))
                     for s in old.values()], [parse_site(url) for url in old_sites])
        sources, sites = [], []
        for spec in args.paths:
            if looks_like_url(spec):
                sites.append(parse_site(spec))
                continue
            path_text, base = spec, None
            if "=" in spec and not Path(spec).exists():
                path_text, base = spec.split("=", 1)
            path = Path(path_text).expanduser().absolute()
            prev = old.get(str(path), {})
            base = base or args.base_url or prev.get("base_url") or "/"
            style: UrlStyle = args.url_style or prev.get("url_style") or "directory"
            sources.append(Source(path, normalize_base(base), style))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return sources, list({site.start: site for site in sites}.values())


def _crawl_options(args: argparse.Namespace, opts: IndexOptions, max_depth: int) -> CrawlOptions:
    if not 1 <= args.concurrency <= MAX_CRAWL_CONCURRENCY:
        raise ConfigError(f"--concurrency must be 1-{MAX_CRAWL_CONCURRENCY}")
    if max_depth < 0:
        raise ConfigError("--max-depth must be 0 or more")
    if not 0 < args.timeout <= 600:
        raise ConfigError("--timeout must be more than 0 and at most 600 seconds")
    if not 0 <= args.max_crawl_delay <= 600:
        raise ConfigError("--max-crawl-delay must be 0-600 seconds")
    return CrawlOptions(max_pages=opts.max_pages, max_depth=max_depth, concurrency=args.concurrency,
                        timeout_s=args.timeout, max_page_bytes=opts.max_page_bytes,
                        max_crawl_delay_s=args.max_crawl_delay, excludes=opts.excludes)


async def _index(args: argparse.Namespace, writer: DocsWriter) -> int:
    stored = await writer.index_settings(args.app)
    if args.drop:
        n = await writer.drop_index(args.app)
        print(json.dumps({"app": args.app, "dropped_sections": n}))
        return 0
    sources, sites = _plan(args, stored)
    prev = stored or {}
    selector = args.selector if args.selector is not None else prev.get("selector")
    excludes = tuple(args.exclude if args.exclude is not None else prev.get("excludes", []))
    opts = IndexOptions(max_pages=args.max_pages or MAX_PAGES, max_page_bytes=args.max_page_bytes or MAX_PAGE_BYTES,
                        selector=selector or None, excludes=excludes)
    if opts.max_pages < 1 or opts.max_page_bytes < 1:
        raise ConfigError("--max-pages and --max-page-bytes must be positive")
    max_depth = args.max_depth if args.max_depth is not None else int(prev.get("max_depth", CRAWL_MAX_DEPTH))
    crawl_opts = _crawl_options(args, opts, max_depth)
    crawl_warnings = 0

    def warn(line: str) -> None:
        progress.end()
        print(f"autopilot relay index: warning: {line}", file=sys.stderr, flush=True)

    def crawl_warn(line: str) -> None:
        nonlocal crawl_warnings
        crawl_warnings += 1
        warn(line)

    progress = Progress(sys.stderr, f"indexing {args.app}")
    files, walk_warnings = collect(sources, max_pages=opts.max_pages, excludes=opts.excludes,
                                   markdown_anyway=args.markdown_anyway)
    for line in walk_warnings:
        warn(line)
    settings: dict[str, Any] = {
        "sources": [{"path": str(s.path), "base_url": s.base_url, "url_style": s.url_style} for s in sources],
        "sites": [{"url": site.start} for site in sites], "max_depth": max_depth,
        "selector": opts.selector, "excludes": list(opts.excludes)}
    pages: list[PageInput] = list(files)
    crawled: list[CrawlStats] = []
    # A crawl's pages wait on disk, not in memory, until the index run has read them.
    with tempfile.TemporaryDirectory(prefix="autopilot-crawl-") as spool:
        for n, site in enumerate(sites):
            folder = Path(spool) / str(n)
            folder.mkdir()
            progress = Progress(sys.stderr, f"crawling {site.start}")
            result = await crawl(site, folder, crawl_opts, warn=crawl_warn, progress=progress)
            progress.end()
            pages += result.pages
            crawled.append(result.stats)
        progress = Progress(sys.stderr, f"indexing {args.app}")
        summary = await run_index(writer, args.app, pages, options=opts, settings=settings, warn=warn,
                                  progress=progress)
    progress.end()
    summary["warnings"] += len(walk_warnings) + crawl_warnings
    out: dict[str, Any] = dict(summary)
    if crawled:
        out["crawl"] = crawled
    print(json.dumps(out), flush=True)
    return 0


def index_main(argv: list[str]) -> int:
    """Run ``autopilot-relay index``."""
    args = index_parser().parse_args(argv)
    try:
        config = relay_config(args)
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
    return run_command(args, config, _index, "index")


def run_command(args: argparse.Namespace, config: Any, fn: Any, what: str) -> int:
    """Run ``fn`` (one of the commands) against the app's docs index; its exit code, errors said in one line."""
    async def go() -> int:
        index: Any = open_docs_index(config.database_url, config.db_path, embeddings_model=config.embeddings_model,
                                     embeddings_max_windows=config.embeddings_max_windows, models=config.models,
                                     embeddings_threads=config.embeddings_threads)
        try:
            return int(await fn(args, index))
        finally:
            await index.close()

    try:
        return asyncio.run(go())
    except ConfigError as exc:
        print(f"autopilot relay {what}: {exc}", file=sys.stderr)
        return 2
    except (WalkError, CrawlError, IndexBusy, IndexRunError, ValueError) as exc:
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
        config = relay_config(args)
    except ConfigError as exc:
        print(f"autopilot relay search: {exc}", file=sys.stderr)
        return 2
    return run_command(args, config, _search, "search")

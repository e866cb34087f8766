"""One index run: pages in, the app's index replaced incrementally and atomically, a summary out.

Engine-neutral: the engines (``sqlite_index``, ``pg_index``) give an ``IndexJob`` for one app and run; this
module reads each page, hashes it (the bytes and what extraction depends on: its URL, kind, the selector and the
extractor's version), extracts only pages whose hash changed, and tells the job what to add, replace and
remove. Nothing a reader searches changes until ``commit``; an exception anywhere aborts the job and the
previous index keeps serving. A page skipped for a problem (too large, unreadable, no text) keeps its previous
version when it had one, so a bad build never empties the index; the warning says so. A file that is no page
(``extract.NotAPage``: a template fragment) is skipped too, and a copy an older version indexed leaves.

A crawler or a push endpoint brings pages from elsewhere: anything with ``url``, ``kind`` and a ``read()``
giving the bytes (``PageInput``) goes through the same run.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypedDict

from .extract import NotAPage, Selector, compile_selector, extract_html
from .limits import EXTRACTOR_VERSION, MAX_PAGE_BYTES, MAX_PAGES, SQLITE_BATCH_PAGES
from .markdown_source import extract_markdown, title_from_path
from .page import Page, PageSkipped
from .walk import Kind, SourceFile


class IndexBusy(Exception):
    """Another index run of the same app holds its lock."""


class IndexRunError(Exception):
    """An index run stopped before changing anything a reader sees; the message says why."""


class PageInput(Protocol):
    """A page to index from any origin: a file (``walk.SourceFile``), a crawled or a pushed page."""

    @property
    def url(self) -> str: ...

    @property
    def kind(self) -> Kind: ...


class IndexJob(Protocol):
    """One engine's side of one run for one app (``begin_index`` gives it, holding the app's lock)."""

    async def existing(self) -> dict[str, str]:
        """The hash of every page the app's index serves now, by page URL."""
        ...

    async def write(self, pages: list[tuple[str, Page]]) -> None:
        """Add or replace pages, each with its hash (not visible to searches before ``commit``)."""
        ...

    async def remove(self, urls: list[str]) -> None:
        """Remove pages by URL (still visible to searches until ``commit``)."""
        ...

    async def commit(self, settings: dict[str, Any]) -> tuple[int, int]:
        """Make the run's changes visible at once and store the app's index settings; live (pages, sections)."""
        ...

    async def abort(self) -> None:
        """Drop the run's changes (best effort: what is left is cleaned by the next run) and the lock."""
        ...


class DocsWriter(Protocol):
    """What an engine offers an index run."""

    async def begin_index(self, app_id: str) -> IndexJob:
        """Take the app's lock (``IndexBusy`` when another run holds it) and start a run."""
        ...

    async def index_settings(self, app_id: str) -> dict[str, Any] | None:
        """The settings the app's last run stored (sources, selector), or None for an app never indexed."""
        ...

    async def drop_index(self, app_id: str) -> int:
        """Remove the app's whole index at once; how many sections it had."""
        ...


class Summary(TypedDict):
    """What an index run did (the CLI prints it as one JSON line)."""

    app: str
    pages: int
    sections: int
    added: int
    changed: int
    removed: int
    unchanged: int
    skipped: int
    warnings: int
    seconds: float


@dataclass
class IndexOptions:
    """Bounds and extraction settings of a run."""

    max_pages: int = MAX_PAGES
    max_page_bytes: int = MAX_PAGE_BYTES
    #: CSS selector of the main content (else the generators' landmarks).
    selector: str | None = None
    #: Pages written per ``IndexJob.write`` call.
    batch_pages: int = SQLITE_BATCH_PAGES
    excludes: tuple[str, ...] = field(default_factory=tuple)


def page_hash(data: bytes, url: str, kind: str, selector: str | None) -> str:
    """What decides whether a page must be extracted again."""
    h = hashlib.sha256()
    for part in (EXTRACTOR_VERSION, kind, url, selector or ""):
        h.update(part.encode("utf-8") + b"\0")
    h.update(data)
    return h.hexdigest()


def read_page(page: Any, max_bytes: int) -> bytes:
    """A page's bytes (``PageSkipped`` over ``max_bytes`` or unreadable); files are checked before they are read."""
    path = getattr(page, "path", None)
    if isinstance(path, Path):
        try:
            size = path.stat().st_size
            if size > max_bytes:
                raise PageSkipped(f"{size / 1e6:.1f} MB is over the page limit of {max_bytes / 1e6:.1f} MB "
                                  "(--max-page-bytes)")
            with path.open("rb") as fh:
                data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise PageSkipped(f"cannot read ({exc.strerror or exc})") from None
    else:
        data = page.read()
    if len(data) > max_bytes:
        raise PageSkipped(f"over the page limit of {max_bytes / 1e6:.1f} MB (--max-page-bytes)")
    return bytes(data)


def extract(data: bytes, url: str, kind: Kind, selector: Selector | None, name: str = "") -> Page:
    """A page's sections from its bytes (``PageSkipped`` when it has nothing to index)."""
    if kind == "markdown":
        return extract_markdown(data, url, fallback_title=name)
    return extract_html(data, url, selector=selector)


def _prepare(page: Any, known: dict[str, str], opts: IndexOptions,
             selector: Selector | None) -> tuple[str, Page | None]:
    """(hash, page) for a changed page, (hash, None) for an unchanged one; runs in a worker thread."""
    data = read_page(page, opts.max_page_bytes)
    digest = page_hash(data, page.url, page.kind, opts.selector)
    if known.get(page.url) == digest:
        return digest, None
    name = title_from_path(getattr(page, "rel", "") or "")
    return digest, extract(data, page.url, page.kind, selector, name)


async def run_index(
    writer: DocsWriter,
    app_id: str,
    pages: Sequence[PageInput] | Sequence[SourceFile],
    *,
    options: IndexOptions | None = None,
    settings: dict[str, Any] | None = None,
    warn: Callable[[str], None] = lambda line: None,
    progress: Callable[[int, int], None] | None = None,
) -> Summary:
    """Index ``pages`` as the app's whole documentation (pages not among them leave the index)."""
    opts = options or IndexOptions()
    if len(pages) > opts.max_pages:
        raise IndexRunError(f"{len(pages)} pages is more than --max-pages {opts.max_pages}")
    selector = compile_selector(opts.selector) if opts.selector else None
    t0 = time.monotonic()
    job = await writer.begin_index(app_id)
    counts = {"added": 0, "changed": 0, "unchanged": 0, "skipped": 0, "warnings": 0}

    def warning(line: str) -> None:
        counts["warnings"] += 1
        warn(line)

    try:
        known = await job.existing()
        seen: set[str] = set()
        batch: list[tuple[str, Page]] = []
        for n, page in enumerate(pages, 1):
            where = str(getattr(page, "path", page.url))
            if page.url in seen:
                warning(f"{where}: another page already has the URL {page.url}; skipped")
                continue
            seen.add(page.url)
            try:
                digest, extracted = await asyncio.to_thread(_prepare, page, known, opts, selector)
            except PageSkipped as exc:
                counts["skipped"] += 1
                kept = "; its previous version stays" if page.url in known else ""
                if isinstance(exc, NotAPage):  # never a page: a copy an older version indexed leaves the index
                    seen.discard(page.url)
                    kept = ""
                warning(f"{where}: {exc}; skipped{kept}")
                continue
            if extracted is None:
                counts["unchanged"] += 1
            else:
                counts["changed" if page.url in known else "added"] += 1
                for note in extracted.notes:
                    warning(f"{where}: {note}")
                batch.append((digest, extracted))
                if len(batch) >= opts.batch_pages:
                    await job.write(batch)
                    batch = []
            if progress is not None:
                progress(n, len(pages))
        if batch:
            await job.write(batch)
        gone = sorted(set(known) - seen)
        if gone:
            await job.remove(gone)
        live_pages, live_sections = await job.commit(settings or {})
    except BaseException:
        await asyncio.shield(job.abort())
        raise
    return Summary(app=app_id, pages=live_pages, sections=live_sections, added=counts["added"],
                   changed=counts["changed"], removed=len(gone), unchanged=counts["unchanged"],
                   skipped=counts["skipped"], warnings=counts["warnings"],
                   seconds=round(time.monotonic() - t0, 3))

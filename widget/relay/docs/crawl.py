"""A documentation site that is online → the pages to index (``autopilot-relay index --app ID https://…/``).

**Scope.** The start URL's origin (scheme, host and port) and its folder: ``https://x/docs/`` (or
``https://x/docs``) keeps to ``https://x/docs/…``. A URL is normalised before anything else (scheme and host in
lower case, default port, ``.``/``..`` segments and percent-escapes resolved, fragment and query string dropped),
so a page is fetched once whatever links to it; its URL in the index is that absolute URL (after same-site
redirects), with the section's anchor. Links to other hosts and folders, to files that are not pages by their
name (images, archives, stylesheets …) and to what ``--exclude`` or ``walk.DEFAULT_EXCLUDES`` names (matched
against the URL's path under the start folder) are not fetched.

**Which pages.** robots.txt is read first (user agent ``autopilot-relay``; RFC 9309: a 4xx answer allows all, a
5xx or 429 one stops the crawl). Then the sitemaps: those robots.txt names, else ``sitemap.xml`` in the start
folder, else at the site's root (sitemap indexes followed, gzip read; parsed by ``defusedxml`` with DTDs and
entities refused, so a hostile sitemap is a warning, never an entity expansion). When they list pages under the
start URL, those are the pages. Otherwise links are followed from the start page (``<a>``/``<area>`` ``href``,
``<base>`` honoured; not a link with ``rel="nofollow"``, nor any of a page marked ``nofollow`` in its robots meta
tag or ``X-Robots-Tag``) breadth first, at most ``--max-depth`` hops. URLs robots.txt disallows are never
fetched; its ``Crawl-delay`` (whole seconds: ``urllib.robotparser``) or ``Request-rate`` spaces requests out
(at most ``--max-crawl-delay``). A page whose ``X-Robots-Tag`` (for every crawler or for ours) says ``noindex``
is not indexed.

**Fetching.** ``--concurrency`` requests at once, each within ``--timeout`` seconds and ``--max-page-bytes``;
redirects are followed by hand: to another origin refused (counted, a warning each), out of the start folder
not followed, at most ``MAX_REDIRECTS`` hops, and a chain that comes back on itself is a loop (a warning). Only
``text/html`` (and XHTML) answers are pages (one with no type or ``application/octet-stream``: when its bytes
are HTML); identical pages under two URLs are kept once (the shorter URL). A 429 or 5xx answer is tried once
more after its ``Retry-After`` (at most ``--max-crawl-delay``). ``HTTP(S)_PROXY``/``NO_PROXY`` are honoured.

**Into the index.** Pages are kept in a temporary folder and go through ``indexer.run_index`` like files
(``CrawledPage`` is a ``PageInput``): the same extraction, hashing and atomic commit. A page that could not be
fetched this time (timeout, 5xx, over the byte limit) is handed over as skipped, so its previous version stays;
a page that is gone (404, 410, other 4xx) or no longer linked leaves the index.

**Errors** (``CrawlError``, nothing changed): the site cannot be reached, robots.txt cannot be read (5xx),
more pages than ``--max-pages`` (the sitemaps' count, or the URLs a link crawl would fetch), more than
``MAX_CRAWL_BYTES`` downloaded, or not one HTML page to index. A bad start URL is a ``ValueError``.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import re
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit
from urllib.robotparser import RobotFileParser

import aiohttp
import lxml.etree as etree
from defusedxml import DefusedXmlException
from defusedxml.ElementTree import ParseError, fromstring

from ... import __version__
from .extract import parse_html
from .limits import (
    CRAWL_CONCURRENCY,
    CRAWL_MAX_DEPTH,
    CRAWL_TIMEOUT_S,
    MAX_CRAWL_BYTES,
    MAX_CRAWL_DELAY_S,
    MAX_PAGE_BYTES,
    MAX_PAGES,
    MAX_REDIRECTS,
    MAX_ROBOTS_BYTES,
    MAX_SITEMAP_BYTES,
    MAX_SITEMAPS,
    MAX_URL_CHARS,
)
from .page import PageSkipped
from .walk import DEFAULT_EXCLUDES, Kind

#: The name robots.txt rules are matched against.
ROBOTS_AGENT = "autopilot-relay"
USER_AGENT = f"{ROBOTS_AGENT}/{__version__} (documentation indexer)"
#: Link targets that are not pages by their name: never fetched.
_NOT_PAGES = frozenset(
    ".png .jpg .jpeg .gif .svg .webp .avif .ico .bmp .tif .tiff .pdf .zip .gz .tgz .bz2 .xz .7z .tar .whl .egg "
    ".exe .dmg .msi .deb .rpm .apk .iso .css .js .mjs .map .json .xml .txt .csv .woff .woff2 .ttf .otf .eot .mp3 "
    ".mp4 .webm .ogg .wav .mov .avi .ipynb .py .rst .epub .doc .docx .xls .xlsx .ppt .pptx".split()
)
#: Counts that say why a crawl found nothing (in its error).
_REASONS: tuple[Literal["gone", "failed", "not_html", "robots_disallowed", "noindex", "excluded",
                        "redirects_refused", "redirects_outside", "redirect_loops"], ...] = (
    "gone", "failed", "not_html", "robots_disallowed", "noindex", "excluded", "redirects_refused",
    "redirects_outside", "redirect_loops")
#: ``X-Robots-Tag`` directives written ``name: value`` (any other ``name:`` names a crawler).
_VALUED_DIRECTIVES = frozenset({"unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"})
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_DEFAULT_PORTS = {"http": 80, "https": 443}
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_ESCAPE = re.compile(r"%[0-9a-fA-F]{2}")
#: Characters a URL path keeps as they are; anything else is percent-escaped (so two spellings are one URL).
_PATH_SAFE = "/:@!$&'()*+,;=-._~"
_LINKS = etree.XPath("//a[@href] | //area[@href]")
_BASE = etree.XPath("string((//base/@href)[1])")
_ROBOTS_META = etree.XPath("//meta[translate(@name, 'ROBTS', 'robts')='robots']/@content")


class CrawlError(Exception):
    """A site cannot be crawled as asked (unreachable, nothing to index, over a bound); nothing was changed."""


def looks_like_url(text: str) -> bool:
    """Whether a command-line argument is a URL (``scheme://…``) rather than a folder."""
    return bool(_SCHEME.match(text))


def normalize_url(url: str, base: str | None = None) -> str | None:
    """``url`` (resolved against ``base``) as the crawl keys pages: absolute http(s), no fragment or query, scheme
    and host in lower case, no default port, dot segments and percent-escapes resolved; None when it is not an
    http(s) URL of a host (``mailto:``, ``javascript:``, credentials, a bad port)."""
    try:
        parts = urlsplit(urljoin(base, url.strip()) if base else url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname
    if scheme not in _DEFAULT_PORTS or not host or parts.username is not None or parts.password is not None:
        return None
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port in (None, _DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    path = "/" + (parts.path or "/").lstrip("/")  # a path starting "//" would read as a host below
    path = urlsplit(urljoin(f"{scheme}://{netloc}/", path)).path  # RFC 3986 dot-segment removal
    path = _canonical_escapes(path)
    return urlunsplit((scheme, netloc, path, "", ""))


def _canonical_escapes(path: str) -> str:
    """One spelling of a path: escapes of unreserved characters decoded, others upper case, the rest escaped."""
    def unescape(m: re.Match[str]) -> str:
        char = chr(int(m.group()[1:], 16))
        return char if char.isascii() and (char.isalnum() or char in "-._~") else m.group().upper()

    path = _ESCAPE.sub(unescape, path)
    out = []
    for ch in path:
        if ch == "%" or ch in _PATH_SAFE or (ch.isascii() and ch.isalnum()):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Site:
    """What a crawl may fetch: the start URL, its origin and the folder under it."""

    start: str
    #: ``scheme://host[:port]``.
    origin: str
    #: The start URL's folder, starting and ending with ``/``.
    prefix: str

    def contains(self, url: str) -> bool:
        """Whether a normalised URL is in the crawl's scope."""
        return url == self.start or url.startswith(self.origin + self.prefix)

    def relative(self, url: str) -> str:
        """A URL's path under the start folder, decoded (what ``--exclude`` globs match)."""
        return unquote(url[len(self.origin) + len(self.prefix):]) if self.contains(url) else ""


def parse_site(text: str) -> Site:
    """The scope of a start URL (``ValueError`` saying what is wrong with it)."""
    raw = text.strip()
    parts = urlsplit(raw) if raw else None
    if parts is None or parts.scheme.lower() not in _DEFAULT_PORTS:
        raise ValueError(f"{text!r} is not an http(s) URL (a site to crawl starts with http:// or https://)")
    if any(c.isspace() for c in raw) or len(raw) > MAX_URL_CHARS:
        raise ValueError(f"{text!r} is not a URL (spaces, or longer than {MAX_URL_CHARS} characters)")
    if parts.query:
        raise ValueError(f"{text!r} has a query string: give the URL of the documentation's folder")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{text!r} has credentials in it: the crawler fetches public pages only")
    start = normalize_url(raw)
    if start is None:
        raise ValueError(f"{text!r} is not a URL of a host (check the host name and port)")
    split = urlsplit(start)
    origin = f"{split.scheme}://{split.netloc}"
    folder, _, last = split.path.rpartition("/")
    # ``https://x/docs`` means the docs folder; ``https://x/docs/index.html`` a page in it.
    prefix = folder + "/" if "." in last else split.path.rstrip("/") + "/"
    return Site(start=start, origin=origin, prefix=prefix)


@dataclass(frozen=True)
class CrawlOptions:
    """A crawl's bounds (the ``index`` command's flags)."""

    max_pages: int = MAX_PAGES
    max_depth: int = CRAWL_MAX_DEPTH
    concurrency: int = CRAWL_CONCURRENCY
    timeout_s: float = CRAWL_TIMEOUT_S
    max_page_bytes: int = MAX_PAGE_BYTES
    max_crawl_delay_s: float = MAX_CRAWL_DELAY_S
    max_bytes: int = MAX_CRAWL_BYTES
    #: Globs of paths under the start folder not to fetch (as ``--exclude`` for folders).
    excludes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CrawledPage:
    """A crawled page (an ``indexer.PageInput``): its bytes in the crawl's folder, or why there are none."""

    url: str
    file: Path | None
    #: Why the page could not be fetched this time (the index keeps its previous version).
    problem: str = ""
    kind: Kind = "html"

    def read(self) -> bytes:
        """The page's bytes (``PageSkipped`` when it could not be fetched)."""
        if self.file is None:
            raise PageSkipped(self.problem)
        try:
            return self.file.read_bytes()
        except OSError as exc:
            raise PageSkipped(f"cannot read the fetched page ({exc.strerror or exc})") from None


class CrawlStats(TypedDict):
    """What a crawl did (in the ``index`` command's JSON line under ``crawl``, one per site)."""

    url: str
    #: Pages the sitemaps listed under the start URL (0: links were followed from the start page).
    sitemap_pages: int
    #: Answers received (redirect hops included).
    requests: int
    #: HTML pages brought to the index, and pages that could not be fetched this time.
    pages: int
    failed: int
    #: Not fetched or not indexed: not HTML, gone (4xx), disallowed by robots.txt or marked noindex by header,
    #: excluded, deeper than --max-depth, the same bytes as another URL.
    not_html: int
    gone: int
    robots_disallowed: int
    noindex: int
    excluded: int
    too_deep: int
    duplicates: int
    #: Redirects refused (another origin), out of the start folder, and redirect loops or too long chains.
    redirects_refused: int
    redirects_outside: int
    redirect_loops: int
    bytes: int
    crawl_delay_s: float


Outcome = Literal["page", "not_html", "gone", "failed", "skip"]


@dataclass(slots=True)
class _Answer:
    outcome: Outcome
    url: str
    data: bytes = b""
    reason: str = ""
    nofollow: bool = False


@dataclass(slots=True)
class _Kept:
    url: str
    file: Path
    digest: str


@dataclass
class _Crawl:
    site: Site
    opts: CrawlOptions
    spool: Path
    http: aiohttp.ClientSession
    warn: Callable[[str], None]
    progress: Callable[[int, int], None] | None
    robots: RobotFileParser = field(default_factory=RobotFileParser)
    delay: float = 0.0
    stats: CrawlStats = field(init=False)
    excluded: Callable[[str], bool] = field(init=False)
    #: Every URL in scope considered (fetched, refused or queued), and how many of them are fetched as pages.
    seen: set[str] = field(default_factory=set)
    claimed: int = 0
    too_deep: set[str] = field(default_factory=set)
    kept: list[_Kept] = field(default_factory=list)
    failed: list[CrawledPage] = field(default_factory=list)
    first_problem: str = ""
    fatal: BaseException | None = None
    visited: int = 0
    files: int = 0
    _next_at: float = 0.0
    _pace_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        self.stats = CrawlStats(url=self.site.start, sitemap_pages=0, requests=0, pages=0, failed=0, not_html=0,
                                gone=0, robots_disallowed=0, noindex=0, excluded=0, too_deep=0, duplicates=0,
                                redirects_refused=0, redirects_outside=0, redirect_loops=0, bytes=0,
                                crawl_delay_s=0.0)
        self.excluded = _excluder(DEFAULT_EXCLUDES + self.opts.excludes)

    # -- requests ------------------------------------------------------------------------------------------

    async def _pace(self) -> None:
        """Space request starts by the robots.txt delay (nothing to wait for without one)."""
        if self.delay <= 0:
            return
        async with self._pace_lock:
            wait = self._next_at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self._next_at = time.monotonic() + self.delay

    async def _get(self, url: str, cap: int, *, page: bool, truncate: bool = False,
                   retry: bool = True) -> _Answer:
        """GET ``url`` following same-origin redirects by hand; a page's hops are checked and claimed as pages."""
        chain = [url]
        current = url
        for _hop in range(MAX_REDIRECTS + 1):
            await self._pace()
            wait: float | None = None
            try:
                async with self.http.get(current, allow_redirects=False) as resp:
                    self.stats["requests"] += 1
                    if resp.status in _REDIRECTS:
                        target = normalize_url(resp.headers.get("Location", ""), current)
                        if target is None:
                            return _Answer("failed", current, reason=f"HTTP {resp.status} without a usable Location")
                        stop = self._redirect(current, target, chain, page=page)
                        if stop is not None:
                            return stop
                        chain.append(target)
                        current = target
                        continue
                    if (resp.status == 429 or resp.status >= 500) and retry:
                        wait = _retry_after(resp.headers.get("Retry-After"), self.opts.max_crawl_delay_s)
                    elif resp.status >= 400:
                        kind: Outcome = "failed" if resp.status == 429 or resp.status >= 500 else "gone"
                        return _Answer(kind, current, reason=f"HTTP {resp.status}")
                    else:
                        return await self._answer(resp, current, cap, page=page, truncate=truncate)
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                return _Answer("failed", current, reason=self._describe(exc))
            await asyncio.sleep(wait)  # the connection is back in the pool meanwhile
            return await self._get(current, cap, page=page, truncate=truncate, retry=False)
        self.stats["redirect_loops"] += 1
        self.warn(f"{url}: more than {MAX_REDIRECTS} redirects; not indexed")
        return _Answer("skip", current, reason="too many redirects")

    async def _answer(self, resp: aiohttp.ClientResponse, url: str, cap: int, *, page: bool,
                      truncate: bool) -> _Answer:
        """A final answer (not an error, not a redirect): a page, or why it is not one."""
        tags = _robots_tags(resp.headers.getall("X-Robots-Tag", []))
        if page and "noindex" in tags:
            self.stats["noindex"] += 1
            return _Answer("skip", url, reason="marked noindex by its X-Robots-Tag header")
        # No type, or the generic one some servers give files they cannot place: the bytes decide.
        declared = "Content-Type" in resp.headers and resp.content_type != "application/octet-stream"
        if page and declared and resp.content_type not in _HTML_TYPES:
            return _Answer("not_html", url, reason=f"not HTML ({resp.content_type})")
        data = await _body(resp, cap, truncate=truncate)
        if data is None:
            limit = f"the page limit of {cap / 1e6:.1f} MB (--max-page-bytes)" if page else f"{cap / 1e6:.1f} MB"
            return _Answer("failed", url, reason=f"over {limit}")
        self.stats["bytes"] += len(data)
        if self.stats["bytes"] > self.opts.max_bytes:
            raise CrawlError(f"{self.site.start}: more than {self.opts.max_bytes / 1e9:.1f} GB downloaded; crawl "
                             "a smaller folder or --exclude some")
        if page and not declared and not _sniff_html(data):
            return _Answer("not_html", url, reason="not HTML (by its bytes)")
        return _Answer("page", url, data=data, nofollow="nofollow" in tags)

    def _redirect(self, current: str, target: str, chain: list[str], *, page: bool) -> _Answer | None:
        """Whether a redirect may be followed (None) or what it ends in."""
        if not target.startswith(self.site.origin + "/"):
            self.stats["redirects_refused"] += 1
            self.warn(f"{current}: redirects to another host ({target}); refused")
            return _Answer("skip", current, reason=f"redirects to another host ({target})")
        if target in chain:
            self.stats["redirect_loops"] += 1
            self.warn(f"{chain[0]}: a redirect loop ({' -> '.join([*chain, target])}); not indexed")
            return _Answer("skip", current, reason="a redirect loop")
        if not page:
            return None
        if not self.site.contains(target):
            self.stats["redirects_outside"] += 1
            return _Answer("skip", current, reason=f"redirects out of {self.site.origin + self.site.prefix}")
        if target in self.seen:  # fetched (or to be) under that URL, or refused already
            return _Answer("skip", current, reason=f"redirects to {target}, crawled or refused already")
        self.seen.add(target)
        refusal = self._refusal(target)
        if refusal is not None:
            return _Answer("skip", current, reason=f"redirects to a page {refusal}")
        self._claim()
        return None

    def _claim(self) -> None:
        """Count one more URL to fetch as a page (``CrawlError`` over ``--max-pages``)."""
        self.claimed += 1
        if self.claimed > self.opts.max_pages:
            raise CrawlError(f"more than {self.opts.max_pages} pages at {self.site.start} (--max-pages); crawl a "
                             "smaller folder, --exclude some, lower --max-depth or raise --max-pages")

    def _describe(self, exc: BaseException) -> str:
        if isinstance(exc, TimeoutError):
            return f"no answer within {self.opts.timeout_s:g} s (--timeout)"
        if isinstance(exc, aiohttp.ClientConnectorError):
            return f"cannot connect ({exc.os_error.strerror or exc.os_error})"
        return str(exc) or type(exc).__name__

    def _refusal(self, url: str) -> str | None:
        """Why a URL in scope is not fetched (excluded or disallowed by robots.txt), counted; None to fetch it."""
        if self.excluded(self.site.relative(url)):
            self.stats["excluded"] += 1
            return "excluded"
        if not self.robots.can_fetch(ROBOTS_AGENT, url):
            self.stats["robots_disallowed"] += 1
            return "disallowed by robots.txt"
        return None

    # -- robots.txt and sitemaps ---------------------------------------------------------------------------

    async def read_robots(self) -> None:
        """robots.txt's rules and delay (``CrawlError`` when the site cannot be reached or answers 5xx)."""
        url = self.site.origin + "/robots.txt"
        answer = await self._get(url, MAX_ROBOTS_BYTES, page=False, truncate=True, retry=False)
        if answer.outcome == "page":
            self.robots.parse(answer.data.decode("utf-8", errors="replace").splitlines())
        elif answer.outcome == "failed" and answer.reason.startswith("HTTP "):
            raise CrawlError(f"{url} answered {answer.reason}: the whole site counts as disallowed until it can "
                             "be read (RFC 9309); try again later")
        elif answer.outcome == "failed":
            raise CrawlError(f"cannot reach {self.site.origin}: {answer.reason}")
        else:  # missing (4xx) or redirected elsewhere: no rules
            self.robots.parse([])
        delay = float(self.robots.crawl_delay(ROBOTS_AGENT) or 0)
        rate = self.robots.request_rate(ROBOTS_AGENT)
        if rate is not None and rate.requests > 0:
            delay = max(delay, rate.seconds / rate.requests)
        if delay > self.opts.max_crawl_delay_s:
            self.warn(f"{url}: a crawl delay of {delay:g} s is over --max-crawl-delay; "
                      f"{self.opts.max_crawl_delay_s:g} s between requests instead")
            delay = self.opts.max_crawl_delay_s
        self.delay = self.stats["crawl_delay_s"] = delay

    async def sitemap_pages(self) -> list[str]:
        """The pages the site's sitemaps list under the start URL (empty: follow links instead): those robots.txt
        names, else ``sitemap.xml`` in the start folder, else at the root, the first that lists any."""
        robots = self.site.origin + "/robots.txt"
        named = [u for u in (normalize_url(s, robots) for s in self.robots.site_maps() or []) if u]
        for url in [u for u in named if not u.startswith(self.site.origin + "/")]:
            self.warn(f"robots.txt names a sitemap on another host ({url}); not read")
        named = [u for u in named if u.startswith(self.site.origin + "/")]
        own = [self.site.origin + self.site.prefix + "sitemap.xml", self.site.origin + "/sitemap.xml"]
        groups = ([named] if named else []) + [[u] for u in dict.fromkeys(own) if u not in named]
        budget = [MAX_SITEMAPS]
        read: list[str] = []
        elsewhere = 0
        for n, group in enumerate(groups):
            pages, outside, any_read = await self._read_sitemaps(group, budget, quiet_missing=n > 0 or not named)
            if pages:
                return list(dict.fromkeys(pages))
            if any_read:
                read += group
                elsewhere += outside
        if read:
            self.warn(f"{', '.join(read)}: no page under {self.site.start} ({elsewhere} URLs elsewhere); "
                      "following links from the start page instead")
        return []

    async def _read_sitemaps(self, urls: list[str], budget: list[int],
                             *, quiet_missing: bool) -> tuple[list[str], int, bool]:
        """(pages in scope, count of URLs out of scope, whether any sitemap was read) from sitemap files and the
        indexes among them."""
        queue = list(urls)
        done: set[str] = set()
        pages: list[str] = []
        elsewhere = 0
        read = False
        while queue:
            url = queue.pop(0)
            if url in done:
                continue
            done.add(url)
            if budget[0] <= 0:
                left = len(set(queue) - done) + 1
                self.warn(f"more than {MAX_SITEMAPS} sitemap files; {left} more from {url} on not read")
                break
            budget[0] -= 1
            answer = await self._get(url, MAX_SITEMAP_BYTES, page=False)
            if answer.outcome != "page":
                if not (quiet_missing and answer.outcome == "gone"):
                    self.warn(f"{url}: sitemap not read ({answer.reason})")
                continue
            try:
                kind, locs = await asyncio.to_thread(parse_sitemap, answer.data)
            except ValueError as exc:
                self.warn(f"{url}: sitemap refused: {exc}")
                continue
            read = True
            for loc in locs:
                target = normalize_url(loc, url)
                if target is None:
                    continue
                if kind == "index":
                    if target.startswith(self.site.origin + "/"):
                        queue.append(target)
                    else:
                        self.warn(f"{url}: names a sitemap on another host ({target}); not read")
                elif self.site.contains(target):
                    pages.append(target)
                else:
                    elsewhere += 1
        return pages, elsewhere, read

    # -- the crawl -----------------------------------------------------------------------------------------

    def admit(self, url: str, depth: int, queue: asyncio.Queue[tuple[str, int, bool]], follow: bool) -> None:
        """Queue a URL found at ``depth`` when it is in scope, new, allowed and a page by its name."""
        if len(url) > MAX_URL_CHARS or not self.site.contains(url) or url in self.seen:
            return
        name = url.rsplit("/", 1)[-1]
        if "." in name and "." + name.rsplit(".", 1)[-1].lower() in _NOT_PAGES:
            return
        if depth > self.opts.max_depth:
            self.too_deep.add(url)
            return
        self.seen.add(url)
        self.too_deep.discard(url)
        refusal = self._refusal(url)
        if refusal is not None:
            if url == self.site.start:
                self.first_problem = f"the start page is {refusal}"
            return
        self._claim()
        queue.put_nowait((url, depth, follow))

    async def worker(self, queue: asyncio.Queue[tuple[str, int, bool]]) -> None:
        """Fetch queued pages until the crawl is done."""
        while True:
            url, depth, follow = await queue.get()
            try:
                if self.fatal is None:
                    await self.visit(url, depth, follow, queue)
            except Exception as exc:  # noqa: BLE001 - any failure ends the crawl, raised by run() once it stops
                self.fatal = exc
            finally:
                queue.task_done()

    async def visit(self, url: str, depth: int, follow: bool, queue: asyncio.Queue[tuple[str, int, bool]]) -> None:
        """Fetch one page, keep it, queue its links."""
        answer = await self._get(url, self.opts.max_page_bytes, page=True)
        self.visited += 1
        if self.progress is not None:
            self.progress(self.visited, self.claimed)
        if url == self.site.start and not self.first_problem and answer.outcome != "page":
            self.first_problem = f"the start page: {answer.reason}"
        if answer.outcome == "not_html":
            self.stats["not_html"] += 1
        elif answer.outcome == "gone":
            self.stats["gone"] += 1
            self.warn(f"{answer.url}: {answer.reason}; not indexed")
        elif answer.outcome == "failed":
            self.stats["failed"] += 1
            self.failed.append(CrawledPage(answer.url, None, problem=answer.reason))
        if answer.outcome != "page":
            return
        digest = hashlib.sha256(answer.data).hexdigest()
        self.files += 1
        path = self.spool / f"{self.files}.html"
        try:
            await asyncio.to_thread(path.write_bytes, answer.data)
        except OSError as exc:
            raise CrawlError(f"cannot keep the fetched pages in {self.spool} ({exc.strerror or exc})") from None
        self.kept.append(_Kept(answer.url, path, digest))
        if not follow or answer.nofollow:
            return
        links = await asyncio.to_thread(page_links, answer.data, answer.url)
        for link in links:
            self.admit(link, depth + 1, queue, follow)

    async def run(self, seeds: list[str], follow: bool) -> None:
        """Crawl from ``seeds`` with ``concurrency`` workers until nothing is queued."""
        queue: asyncio.Queue[tuple[str, int, bool]] = asyncio.Queue()
        for url in seeds:
            self.admit(url, 0, queue, follow)
        workers = [asyncio.create_task(self.worker(queue)) for _ in range(self.opts.concurrency)]
        try:
            await queue.join()
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        if self.fatal is not None:
            raise self.fatal

    def pages(self) -> list[CrawledPage]:
        """The crawl's pages in a stable order: one per content (the shortest URL), then the failed ones."""
        out: list[CrawledPage] = []
        digests: set[str] = set()
        for kept in sorted(self.kept, key=lambda k: (len(k.url), k.url)):
            if kept.digest in digests:
                self.stats["duplicates"] += 1
                continue
            digests.add(kept.digest)
            out.append(CrawledPage(kept.url, kept.file))
        self.stats["pages"] = len(out)
        self.stats["too_deep"] = len(self.too_deep - self.seen)
        return sorted(out, key=lambda p: p.url) + sorted(self.failed, key=lambda p: p.url)


@dataclass(frozen=True, slots=True)
class CrawlResult:
    """A crawl's pages (for ``indexer.run_index``) and what it did."""

    pages: list[CrawledPage]
    stats: CrawlStats


async def crawl(site: Site, spool: Path, options: CrawlOptions | None = None, *,
                warn: Callable[[str], None] = lambda line: None,
                progress: Callable[[int, int], None] | None = None) -> CrawlResult:
    """Crawl ``site`` (see the module's docstring), keeping the pages' bytes in the folder ``spool`` (the caller
    deletes it after indexing); ``CrawlError`` when there is nothing to index or a bound is passed."""
    opts = options or CrawlOptions()
    timeout = aiohttp.ClientTimeout(total=opts.timeout_s)
    connector = aiohttp.TCPConnector(limit=opts.concurrency, limit_per_host=opts.concurrency)
    headers = {"User-Agent": USER_AGENT, "Accept": "text/html,application/xhtml+xml;q=0.9,*/*;q=0.5"}
    async with aiohttp.ClientSession(timeout=timeout, connector=connector, headers=headers, trust_env=True,
                                     cookie_jar=aiohttp.DummyCookieJar()) as http:
        job = _Crawl(site, opts, spool, http, warn, progress)
        await job.read_robots()
        sitemap = await job.sitemap_pages()
        if len(sitemap) > opts.max_pages:
            raise CrawlError(f"the sitemaps list {len(sitemap)} pages under {site.start}, more than --max-pages "
                             f"{opts.max_pages}; crawl a smaller folder or raise --max-pages")
        job.stats["sitemap_pages"] = len(sitemap)
        await job.run(sitemap or [site.start], follow=not sitemap)
    pages = job.pages()
    if job.stats["too_deep"]:
        warn(f"{site.start}: {job.stats['too_deep']} linked pages deeper than --max-depth {opts.max_depth}; "
             "not indexed")
    if job.stats["robots_disallowed"]:
        warn(f"{site.start}: {job.stats['robots_disallowed']} pages disallowed by robots.txt; not fetched")
    if not job.stats["pages"]:
        counts = ", ".join(f"{job.stats[k]} {k.replace('_', ' ')}" for k in _REASONS if job.stats[k])
        why = job.first_problem or f"no HTML page among {job.claimed} fetched" + (f": {counts}" if counts else "")
        raise CrawlError(f"{site.start}: no page to index ({why}); nothing was changed")
    return CrawlResult(pages, job.stats)


def _excluder(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    """Whether a URL path under the start folder is excluded, as ``--exclude`` excludes files of a folder: a glob
    with ``/`` matches the path (or a folder above it), one without matches a name in it; a folder URL (``x/``)
    is also its file, ``x/index.html``."""
    whole = [re.compile(fnmatch.translate(p)) for p in patterns if "/" in p]
    names = [re.compile(fnmatch.translate(p.rstrip("/"))) for p in patterns if "/" not in p.rstrip("/")]

    def excluded(rel: str) -> bool:
        segments = rel.split("/")
        folders = ["/".join(segments[:i]) + "/" for i in range(1, len(segments))]
        file = rel + "index.html" if rel.endswith("/") or not rel else rel
        paths = [*folders, file]
        if any(rx.match(p) or rx.match(p.rstrip("/")) for rx in whole for p in paths):
            return True
        parts = [s for s in segments if s] + [file.rsplit("/", 1)[-1]]
        return any(rx.match(part) for rx in names for part in parts)

    return excluded


async def _body(resp: aiohttp.ClientResponse, cap: int, *, truncate: bool) -> bytes | None:
    """An answer's body up to ``cap`` bytes (None over it, or its first ``cap`` bytes with ``truncate``)."""
    if not truncate and resp.content_length is not None and resp.content_length > cap:
        return None
    buf = bytearray()
    async for chunk in resp.content.iter_chunked(1 << 16):
        buf += chunk
        if len(buf) > cap:
            return bytes(buf[:cap]) if truncate else None
    return bytes(buf)


def _robots_tags(values: list[str]) -> set[str]:
    """The ``X-Robots-Tag`` directives meant for every crawler or for ours (``otherbot: noindex`` is not)."""
    out: set[str] = set()
    for value in values:
        head, sep, rest = value.partition(":")
        agent = head.strip().lower()
        if sep and agent not in _VALUED_DIRECTIVES and not any(c in agent for c in " ,"):
            if agent != ROBOTS_AGENT:
                continue
            value = rest
        out.update(d.strip().lower() for d in value.split(","))
    return out


def _sniff_html(data: bytes) -> bool:
    head = data[:1024].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html")) or b"<html" in head


def _retry_after(value: str | None, bound: float) -> float:
    """Seconds to wait before the one retry: ``Retry-After`` in seconds, else 1, never over ``bound``."""
    try:
        wait = float(value) if value else 1.0
    except ValueError:
        wait = 1.0
    return max(0.0, min(wait, bound))


def page_links(data: bytes, url: str) -> list[str]:
    """The normalised URLs a page links to (none when it is marked ``nofollow``)."""
    try:
        doc = parse_html(data)
    except PageSkipped:
        return []
    if any("nofollow" in str(c).lower() for c in _as_list(_ROBOTS_META(doc))):
        return []
    base = normalize_url(str(_BASE(doc)), url) if str(_BASE(doc)).strip() else None
    out: list[str] = []
    for el in _as_list(_LINKS(doc)):
        if "nofollow" in str(el.get("rel") or "").lower().split():
            continue
        target = normalize_url(str(el.get("href")), base or url)
        if target is not None:
            out.append(target)
    return list(dict.fromkeys(out))


def _as_list(result: Any) -> list[Any]:
    return list(result) if isinstance(result, list) else []


SitemapKind = Literal["urlset", "index"]


def parse_sitemap(data: bytes) -> tuple[SitemapKind, list[str]]:
    """A sitemap's kind and ``<loc>`` URLs (``ValueError`` for gzip over the bound, XML with a DTD or entities —
    refused by defusedxml before any expansion — or XML that is not a sitemap)."""
    if data[:2] == b"\x1f\x8b":
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            data = inflater.decompress(data, MAX_SITEMAP_BYTES + 1)
        except zlib.error as exc:
            raise ValueError(f"not gzip ({exc})") from None
        if len(data) > MAX_SITEMAP_BYTES:
            raise ValueError(f"over {MAX_SITEMAP_BYTES // (1024 * 1024)} MiB unpacked")
    try:
        root = fromstring(data, forbid_dtd=True)
    except DefusedXmlException as exc:
        raise ValueError(f"it declares a DTD or entities ({type(exc).__name__}), which a sitemap never needs") from None
    except ParseError as exc:
        raise ValueError(f"not XML ({exc})") from None
    tag = _local(root.tag)
    if tag not in ("urlset", "sitemapindex"):
        raise ValueError(f"<{tag}> is not a sitemap (<urlset> or <sitemapindex>)")
    locs = [(loc.text or "").strip() for entry in root if _local(entry.tag) in ("url", "sitemap")
            for loc in entry if _local(loc.tag) == "loc"]
    return ("index" if tag == "sitemapindex" else "urlset"), [u for u in locs if u]


def _local(tag: Any) -> str:
    return str(tag).rsplit("}", 1)[-1]

"""The crawler (``autopilot-relay index --app ID URL``) against docs sites served in the test on 127.0.0.1 over real
HTTP: sitemaps (indexes, gzip, hostile XML), links, robots.txt, redirects, loops, bounds, and the command's
incremental index that ``search`` then reads. URL normalisation and the sitemap parser alone are unit tests in
test_docs_units.py."""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import os
import socket
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from test_docs_units import BILLION_LAUGHS, sitemap

from widget.relay.docs.crawl import (
    CrawlError,
    CrawlOptions,
    CrawlResult,
    crawl,
    parse_site,
)
from widget.relay.docs.page import PageSkipped

pytestmark = pytest.mark.relay

REPO = Path(__file__).resolve().parent.parent
_SPOOLS = itertools.count()


@dataclass
class Reply:
    """A canned answer of the test site."""

    body: bytes | str = b""
    status: int = 200
    content_type: str | None = "text/html"
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class DocsSite:
    """A site on 127.0.0.1: answers by path from ``routes`` (404 otherwise), every request logged."""

    def __init__(self) -> None:
        self.routes: dict[str, Reply | Handler] = {}
        #: (Host header, path with query, monotonic time) of each request.
        self.log: list[tuple[str, str, float]] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.origin + path

    def hits(self, path: str) -> int:
        return sum(1 for _, p, _ in self.log if p == path)

    def paths(self) -> list[str]:
        return [p for _, p, _ in self.log]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.log.append((request.host, request.path_qs, time.monotonic()))
        route = self.routes.get(request.path)
        if route is None:
            return web.Response(status=404, text="not found")
        if not isinstance(route, Reply):
            return await route(request)
        body = route.body.encode() if isinstance(route.body, str) else route.body
        resp = web.Response(status=route.status, body=body, headers=route.headers)
        if route.content_type is None:
            resp.headers.popall("Content-Type", None)
        else:
            resp.content_type = route.content_type
        return resp

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        tcp = web.TCPSite(self._runner, "127.0.0.1", 0)
        await tcp.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest_asyncio.fixture
async def site() -> AsyncIterator[DocsSite]:
    s = DocsSite()
    await s.start()
    yield s
    await s.stop()


def page(title: str, *sections: tuple[str, str], links: tuple[str, ...] = ()) -> str:
    """A built docs page: a nav with ``links``, a main with an h1 and one h2 section per (anchor, text)."""
    nav = "".join(f'<a href="{href}">{href}</a> ' for href in links)
    body = "".join(f'<h2 id="{a}">{a.replace("-", " ").title()}</h2><p>{text}</p>' for a, text in sections)
    return (f"<!doctype html><html><head><title>{title}</title></head><body><nav>{nav}</nav><main>"
            f"<h1>{title}</h1><p>{title} introduction.</p>{body}</main></body></html>")


async def run_crawl(site: DocsSite, start: str, tmp_path: Path, **options: Any) -> tuple[CrawlResult, list[str]]:
    warnings: list[str] = []
    spool = tmp_path / f"spool-{next(_SPOOLS)}"
    spool.mkdir()
    result = await crawl(parse_site(site.url(start)), spool, CrawlOptions(**options), warn=warnings.append)
    return result, warnings


def crawled(result: CrawlResult, site: DocsSite) -> list[str]:
    return [p.url.removeprefix(site.origin) for p in result.pages if p.file is not None]


# -- which pages ---------------------------------------------------------------------------------------------

async def test_sitemap_driven_crawl(site: DocsSite, tmp_path: Path) -> None:
    """The sitemap decides (an index, a gzip sitemap, entries outside the folder ignored): a page it lists that
    nothing links to is crawled, a page linked but not listed is not."""
    site.routes.update({
        "/docs/": Reply(page("Home", ("welcome", "Welcome."), links=("unlisted/", "a/"))),
        "/docs/a/": Reply(page("A", ("colours", "Set the accent colour."))),
        "/docs/hidden/": Reply(page("Hidden", ("orphan", "Only the sitemap knows me."))),
        "/docs/unlisted/": Reply(page("Unlisted", ("x", "Linked but not in the sitemap."))),
        "/docs/sitemap.xml": Reply(sitemap(site.url("/docs/part-1.xml.gz"), site.url("/docs/part-2.xml"),
                                           "http://elsewhere.example/sitemap.xml", index=True),
                                   content_type="application/xml"),
        "/docs/part-1.xml.gz": Reply(gzip.compress(sitemap(site.url("/docs/"), site.url("/docs/a/")).encode()),
                                     content_type="application/gzip"),
        "/docs/part-2.xml": Reply(sitemap(site.url("/docs/hidden/"), site.url("/other/"),
                                          "http://elsewhere.example/docs/x/"), content_type="application/xml"),
    })
    result, warnings = await run_crawl(site, "/docs/", tmp_path)
    assert crawled(result, site) == ["/docs/", "/docs/a/", "/docs/hidden/"]
    assert site.hits("/docs/unlisted/") == 0 and site.hits("/other/") == 0
    assert result.stats["sitemap_pages"] == 3
    assert any("names a sitemap on another host (http://elsewhere.example/sitemap.xml)" in w for w in warnings)
    assert site.paths()[:2] == ["/robots.txt", "/docs/sitemap.xml"]  # robots.txt first, then the folder's sitemap


async def test_sitemap_named_by_robots_and_a_sitemap_outside_the_folder(site: DocsSite, tmp_path: Path) -> None:
    site.routes.update({
        "/robots.txt": Reply("User-agent: *\nAllow: /\nSitemap: /maps/all.xml\n", content_type="text/plain"),
        "/maps/all.xml": Reply(sitemap(site.url("/docs/"), site.url("/docs/b/"), site.url("/blog/post/"))),
        "/docs/": Reply(page("Home", ("welcome", "Welcome."))),
        "/docs/b/": Reply(page("B", ("b", "Bee."))),
    })
    result, _ = await run_crawl(site, "/docs/", tmp_path)
    assert crawled(result, site) == ["/docs/", "/docs/b/"]
    assert site.hits("/blog/post/") == 0 and site.hits("/sitemap.xml") == 0


async def test_sitemap_files_are_bounded(site: DocsSite, tmp_path: Path) -> None:
    """A sitemap index naming 150 sitemaps: 100 files are read (the index counts), the rest warned about once."""
    async def part(request: web.Request) -> web.Response:
        n = request.path.removeprefix("/many/s").removesuffix(".xml")
        return web.Response(text=sitemap(site.url(f"/many/p{n}/")), content_type="application/xml")

    async def a_page(request: web.Request) -> web.Response:
        return web.Response(text=page(request.path, ("p", "A page.")), content_type="text/html")

    site.routes["/many/sitemap.xml"] = Reply(sitemap(*(site.url(f"/many/s{n}.xml") for n in range(150)), index=True))
    for n in range(150):
        site.routes[f"/many/s{n}.xml"] = part
        site.routes[f"/many/p{n}/"] = a_page
    result, warnings = await run_crawl(site, "/many/", tmp_path, concurrency=8)
    assert result.stats["sitemap_pages"] == 99 and result.stats["pages"] == 99
    assert sum(1 for p in site.paths() if p.startswith("/many/s")) == 100  # the index and 99 sitemaps
    assert [w for w in warnings if "sitemap files" in w] == [
        f"more than 100 sitemap files; 51 more from {site.url('/many/s99.xml')} on not read"]


async def test_link_driven_crawl_without_sitemap(site: DocsSite, tmp_path: Path) -> None:
    """No robots.txt, no sitemap: links from the start page, each page fetched once whatever its spelling
    (fragment, query, dot segments, escapes); loops end; other hosts, folders and non-pages are not fetched."""
    home = page("Home", ("welcome", "Welcome."), links=(
        "a/", "a/#top", "a/?utm=1", "./a/index.html", "../docs/b/", "b/?x=1#y", "%62/", "/outside/",
        f"http://localhost:{site.port}/docs/c/", "mailto:x@example.com", "javascript:void(0)", "logo.png",
        "data", "missing/", "self/", "index.html", "tagged/", "otherbot/", "nofollow/", "meta-nofollow/"))
    site.routes.update({
        "/docs/": Reply(home),
        "/docs/index.html": Reply(home),  # the same page under another URL: indexed once
        "/docs/a/": Reply(page("A", ("a", "Ay."), links=("../b/", "../", "/docs/a/"))),
        "/docs/a/index.html": Reply(page("A", ("a", "Ay."), links=("../b/", "../", "/docs/a/"))),
        "/docs/b/": Reply(page("B", ("b", "Bee."), links=("../a/", "../b/#again", "../self/"))),
        "/docs/self/": Reply(page("Self", ("s", "Me."), links=("./", "../self/", "../self/?v=2"))),
        "/docs/data": Reply('{"not": "a page"}', content_type="application/json"),
        "/docs/logo.png": Reply(b"\x89PNG", content_type="image/png"),
        "/outside/": Reply(page("Outside", ("o", "Not docs."))),
        # X-Robots-Tag for every crawler or ours is honoured, another crawler's is not; nofollow in a header,
        # a meta tag or a link's rel keeps its links unfetched.
        "/docs/tagged/": Reply(page("Tagged", ("t", "No index.")), headers={"X-Robots-Tag": "noindex"}),
        "/docs/otherbot/": Reply(page("Other", ("o", "Indexed.")), headers={"X-Robots-Tag": "otherbot: noindex"}),
        "/docs/nofollow/": Reply(page("Nofollow", ("n", "Kept."), links=("../behind-1/",)),
                                 headers={"X-Robots-Tag": "autopilot-relay: nofollow"}),
        "/docs/meta-nofollow/": Reply(page("Meta", ("m", "Kept."), links=("../behind-2/",)).replace(
            "<head>", '<head><meta name="robots" content="nofollow">').replace(
            "<main>", '<main><a rel="external nofollow" href="../behind-3/">x</a>')),
    })
    for n in (1, 2, 3):
        site.routes[f"/docs/behind-{n}/"] = Reply(page("Behind", ("b", "Never reached.")))
    result, warnings = await run_crawl(site, "/docs/", tmp_path)
    assert crawled(result, site) == sorted(["/docs/", "/docs/a/", "/docs/b/", "/docs/self/", "/docs/nofollow/",
                                            "/docs/otherbot/", "/docs/meta-nofollow/"])
    assert not any(p.startswith("/docs/behind-") for p in site.paths())
    for path in ("/docs/", "/docs/a/", "/docs/b/", "/docs/self/", "/docs/index.html", "/docs/data"):
        assert site.hits(path) == 1, path
    assert site.hits("/outside/") == 0 and site.hits("/docs/logo.png") == 0 and site.hits("/docs/c/") == 0
    assert not any(host.startswith("localhost") for host, _, _ in site.log)
    stats = result.stats
    assert (stats["sitemap_pages"], stats["not_html"], stats["gone"], stats["duplicates"]) == (0, 1, 1, 2)
    assert stats["noindex"] == 1
    assert any(w.endswith("/docs/missing/: HTTP 404; not indexed") for w in warnings)


async def test_robots_txt_is_honoured(site: DocsSite, tmp_path: Path) -> None:
    """Our group (not the ``*`` one, which disallows everything) applies; its Disallow is never fetched, its
    Crawl-delay spaces the requests out."""
    site.routes.update({
        "/robots.txt": Reply("User-agent: *\nDisallow: /\n\nUser-agent: autopilot-relay\nDisallow: /docs/private/\n"
                             "Crawl-delay: 1\n", content_type="text/plain"),
        "/docs/": Reply(page("Home", ("welcome", "Welcome."), links=("a/", "private/", "private/deep/"))),
        "/docs/a/": Reply(page("A", ("a", "Ay."))),
        "/docs/private/": Reply(page("Private", ("p", "Secret."))),
    })
    result, warnings = await run_crawl(site, "/docs/", tmp_path, concurrency=4)
    assert crawled(result, site) == ["/docs/", "/docs/a/"]
    assert not any(p.startswith("/docs/private/") for p in site.paths())
    assert result.stats["robots_disallowed"] == 2 and result.stats["crawl_delay_s"] == 1.0
    assert any("2 pages disallowed by robots.txt" in w for w in warnings)
    times = [t for _, p, t in site.log if p != "/robots.txt"]  # sitemap probes and pages, all paced
    assert len(times) >= 4
    assert all(b - a >= 0.95 for a, b in zip(times, times[1:], strict=False)), times
    # A delay over the bound is shortened to it, with a warning.
    site.routes["/robots.txt"] = Reply("User-agent: *\nCrawl-delay: 3600\n", content_type="text/plain")
    result, warnings = await run_crawl(site, "/docs/", tmp_path, max_crawl_delay_s=0.05)
    assert result.stats["crawl_delay_s"] == 0.05
    assert any("a crawl delay of 3600 s is over --max-crawl-delay; 0.05 s between requests instead" in w
               for w in warnings)


async def test_robots_txt_errors(site: DocsSite, tmp_path: Path) -> None:
    site.routes["/docs/"] = Reply(page("Home", ("welcome", "Welcome.")))
    site.routes["/robots.txt"] = Reply("down", status=503, content_type="text/plain")
    with pytest.raises(CrawlError, match=r"robots.txt answered HTTP 503: the whole site counts as disallowed"):
        await run_crawl(site, "/docs/", tmp_path)
    assert site.hits("/robots.txt") == 1 and site.hits("/docs/") == 0
    site.routes["/robots.txt"] = Reply("no", status=403, content_type="text/plain")  # 4xx: no rules (RFC 9309)
    result, _ = await run_crawl(site, "/docs/", tmp_path)
    assert crawled(result, site) == ["/docs/"]
    site.routes["/robots.txt"] = Reply("User-agent: *\nDisallow: /docs/\n", content_type="text/plain")
    with pytest.raises(CrawlError, match=r"no page to index \(the start page is disallowed by robots.txt\)"):
        await run_crawl(site, "/docs/", tmp_path)


async def test_redirects(site: DocsSite, tmp_path: Path) -> None:
    """Same-site redirects are followed (the page keeps its real URL), another host's refused and counted, loops
    and long chains stopped; the start page redirecting elsewhere is a clear error."""
    def redirect(to: str, status: int = 302) -> Reply:
        return Reply("", status=status, content_type=None, headers={"Location": to})

    site.routes.update({
        "/docs/": Reply(page("Home", ("welcome", "Welcome."), links=("moved", "away", "loop-1", "chain-0", "out"))),
        "/docs/moved": redirect("/docs/new/", 301),
        "/docs/new/": Reply(page("New", ("n", "Moved here."))),
        "/docs/away": redirect(f"http://localhost:{site.port}/docs/new/"),
        "/docs/loop-1": redirect("loop-2", 307),
        "/docs/loop-2": redirect("/docs/loop-1#x", 308),
        "/docs/out": redirect("/blog/"),
        "/blog/": Reply(page("Blog", ("b", "Not docs."))),
        **{f"/docs/chain-{i}": redirect(f"chain-{i + 1}") for i in range(15)},
    })
    result, warnings = await run_crawl(site, "/docs/", tmp_path)
    assert crawled(result, site) == ["/docs/", "/docs/new/"]
    stats = result.stats
    assert (stats["redirects_refused"], stats["redirect_loops"], stats["redirects_outside"]) == (1, 2, 1)
    assert not any(host.startswith("localhost") for host, _, _ in site.log)
    assert site.hits("/blog/") == 0 and site.hits("/docs/new/") == 1
    assert site.hits("/docs/loop-1") == 1 and site.hits("/docs/loop-2") == 1
    assert sum(1 for p in site.paths() if p.startswith("/docs/chain-")) == 11  # the first hop and 10 redirects
    assert any(f"/docs/away: redirects to another host (http://localhost:{site.port}/docs/new/); refused" in w
               for w in warnings)
    assert any("a redirect loop" in w and "loop-2" in w for w in warnings)
    assert any("more than 10 redirects" in w for w in warnings)
    site.routes["/start/"] = redirect(f"http://localhost:{site.port}/start/")
    with pytest.raises(CrawlError, match=r"no page to index \(the start page: redirects to another host "
                                         rf"\(http://localhost:{site.port}/start/\)\)"):
        await run_crawl(site, "/start/", tmp_path)


async def test_page_and_depth_limits(site: DocsSite, tmp_path: Path) -> None:
    site.routes["/docs/"] = Reply(page("Home", ("h", "Home."), links=tuple(f"p{i}/" for i in range(30)) + ("d1/",)))
    for i in range(30):
        site.routes[f"/docs/p{i}/"] = Reply(page(f"P{i}", ("p", f"Page {i}.")))
    for d in range(1, 6):
        site.routes[f"/docs/d{d}/"] = Reply(page(f"D{d}", ("d", f"Depth {d}."), links=(f"../d{d + 1}/",)))
    with pytest.raises(CrawlError, match=r"more than 10 pages at .*/docs/ \(--max-pages\)"):
        await run_crawl(site, "/docs/", tmp_path, max_pages=10)
    site.log.clear()
    result, warnings = await run_crawl(site, "/docs/", tmp_path, max_depth=2)
    assert [u for u in crawled(result, site) if u.startswith("/docs/d")] == ["/docs/d1/", "/docs/d2/"]
    assert result.stats["too_deep"] == 1 and site.hits("/docs/d3/") == 0
    assert any("1 linked pages deeper than --max-depth 2; not indexed" in w for w in warnings)
    result, _ = await run_crawl(site, "/docs/", tmp_path, max_depth=0)
    assert crawled(result, site) == ["/docs/"]
    # The sitemap's count is checked before any page is fetched.
    site.routes["/docs/sitemap.xml"] = Reply(sitemap(*(site.url(f"/docs/p{i}/") for i in range(30))))
    site.log.clear()
    with pytest.raises(CrawlError, match="the sitemaps list 30 pages under .* more than --max-pages 10"):
        await run_crawl(site, "/docs/", tmp_path, max_pages=10)
    assert not any(p.startswith("/docs/p") for p in site.paths())


async def test_bytes_timeouts_and_kinds(site: DocsSite, tmp_path: Path) -> None:
    """A page over the byte limit or slower than the timeout is handed over as skipped (the index keeps its
    previous version); only HTML is a page (by Content-Type, or by its bytes when there is none)."""
    async def slow(_request: web.Request) -> web.Response:
        await asyncio.sleep(10)  # cancelled when the site stops
        return web.Response(text=page("Slow", ("s", "Late.")), content_type="text/html")

    async def endless(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/html"})
        await resp.prepare(request)
        for _ in range(200):
            await resp.write(b"<p>" + b"x" * 1000 + b"</p>")
        return resp

    site.routes.update({
        "/docs/": Reply(page("Home", ("h", "Home."), links=("big/", "slow/", "stream/", "bare/", "pdf/", "xhtml/",
                                                                 "zip/"))),
        "/docs/big/": Reply("<html><body><main><p>" + "word " * 2000 + "</p></main></body></html>"),
        "/docs/slow/": slow,
        "/docs/stream/": endless,
        "/docs/bare/": Reply(page("Bare", ("b", "No content type.")), content_type="application/octet-stream"),
        "/docs/zip/": Reply(b"PK\x03\x04", content_type="application/octet-stream"),
        "/docs/pdf/": Reply(b"%PDF-1.4", content_type="application/pdf"),
        "/docs/xhtml/": Reply(page("X", ("x", "XHTML.")), content_type="application/xhtml+xml"),
    })
    result, _ = await run_crawl(site, "/docs/", tmp_path, max_page_bytes=5000, timeout_s=3)
    assert crawled(result, site) == ["/docs/", "/docs/bare/", "/docs/xhtml/"]
    problems = {p.url.removeprefix(site.origin): p.problem for p in result.pages if p.file is None}
    assert problems == {"/docs/big/": "over the page limit of 0.0 MB (--max-page-bytes)",
                        "/docs/slow/": "no answer within 3 s (--timeout)",
                        "/docs/stream/": "over the page limit of 0.0 MB (--max-page-bytes)"}
    with pytest.raises(PageSkipped, match="no answer within"):
        next(p for p in result.pages if p.url.endswith("/slow/")).read()
    assert result.stats["not_html"] == 2 and result.stats["failed"] == 3


# -- hostile sitemaps ----------------------------------------------------------------------------------------

async def test_a_hostile_sitemap_is_refused_and_links_are_followed(site: DocsSite, tmp_path: Path) -> None:
    site.routes.update({
        "/sitemap.xml": Reply(BILLION_LAUGHS, content_type="application/xml"),
        "/docs/": Reply(page("Home", ("h", "Home."), links=("a/",))),
        "/docs/a/": Reply(page("A", ("a", "Ay."))),
    })
    t0 = time.monotonic()
    result, warnings = await run_crawl(site, "/docs/", tmp_path)
    assert time.monotonic() - t0 < 10
    assert crawled(result, site) == ["/docs/", "/docs/a/"] and result.stats["sitemap_pages"] == 0
    assert any(w.endswith("/sitemap.xml: sitemap refused: it declares a DTD or entities (DTDForbidden), which a "
                          "sitemap never needs") for w in warnings)


# -- the command: index, re-index, search ----------------------------------------------------------------------

async def relay_cli(*args: str, cwd: Path) -> tuple[int, str, str]:
    """``python -m widget.relay ARGS`` while the test's loop keeps serving the site."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("AUTOPILOT_CONFIG", None)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "widget.relay", *args, cwd=cwd, env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_index_command_crawls_incrementally_and_search_finds_it(site: DocsSite, tmp_path: Path) -> None:
    site.routes.update({
        "/docs/": Reply(page("Home", ("welcome", "Welcome to the widget docs."), links=("theming/", "deploy/",
                                                                                       "api/"))),
        "/docs/theming/": Reply(page("Theming", ("colours", "Set the accent colour with a custom property."),
                                     ("dark-mode", "The bar follows the page's dark scheme."))),
        "/docs/deploy/": Reply(page("Deployment", ("proxy", "Put nginx in front as a reverse proxy."))),
        "/docs/api/": Reply(page("API", ("ask", "client.ask sends a question and streams the answer."))),
    })
    folder = tmp_path / "extra"
    folder.mkdir()
    (folder / "faq.html").write_text(page("FAQ", ("pricing", "The widget is free of charge.")))
    db = str(tmp_path / "relay.sqlite3")
    code, out, err = await relay_cli("index", "--app", "crawl", site.url("/docs/"), f"{folder}=/local/", "--db", db,
                                     cwd=tmp_path)
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["pages"], summary["added"], summary["removed"]) == (5, 5, 0)
    assert summary["crawl"][0]["url"] == site.url("/docs/") and summary["crawl"][0]["pages"] == 4
    code, out, err = await relay_cli("search", "--app", "crawl", "--db", db, "accent colour", cwd=tmp_path)
    assert code == 0, err
    first = json.loads(out)["sections"][0]
    assert first["url"] == site.url("/docs/theming/#colours") and first["title"] == "Theming › Colours"
    code, out, _ = await relay_cli("search", "--app", "crawl", "--db", db, "free of charge", cwd=tmp_path)
    assert json.loads(out)["sections"][0]["url"] == "/local/faq.html#pricing"

    # Again, from the stored settings: the site changed (a page edited, one gone, one failing for now).
    ids = dict(sqlite3.connect(db).execute("SELECT url, id FROM docs_pages").fetchall())
    site.routes["/docs/deploy/"] = Reply(page("Deployment", ("proxy", "Use Caddy as the reverse proxy.")))
    site.routes["/docs/"] = Reply(page("Home", ("welcome", "Welcome to the widget docs."),
                                       links=("theming/", "deploy/", "changelog/")))
    site.routes["/docs/changelog/"] = Reply("busy", status=503, content_type="text/plain")
    site.routes.pop("/docs/api/")
    code, out, err = await relay_cli("index", "--app", "crawl", "--db", db, cwd=tmp_path)
    assert code == 0, err
    summary = json.loads(out)
    assert {k: summary[k] for k in ("pages", "added", "changed", "removed", "unchanged", "skipped")} == {
        "pages": 4, "added": 0, "changed": 2, "removed": 1, "unchanged": 2, "skipped": 1}
    assert "changelog/: HTTP 503; skipped" in err
    after = dict(sqlite3.connect(db).execute("SELECT url, id FROM docs_pages").fetchall())
    theming, deploy = site.url("/docs/theming/"), site.url("/docs/deploy/")
    assert after[theming] == ids[theming] and after[deploy] != ids[deploy]  # unchanged pages not rewritten
    assert site.url("/docs/api/") not in after
    code, out, _ = await relay_cli("search", "--app", "crawl", "--db", db, "client ask streams", cwd=tmp_path)
    assert not any(s["url"].startswith(site.url("/docs/api/")) for s in json.loads(out)["sections"])
    code, out, _ = await relay_cli("search", "--app", "crawl", "--db", db, "Caddy", cwd=tmp_path)
    assert json.loads(out)["sections"][0]["url"] == site.url("/docs/deploy/#proxy")


async def test_index_command_errors(site: DocsSite, tmp_path: Path) -> None:
    db = str(tmp_path / "relay.sqlite3")
    site.routes["/docs/"] = Reply(page("Home", ("welcome", "Welcome.")))
    code, _, err = await relay_cli("index", "--app", "c", site.url("/docs/"), "--db", db, cwd=tmp_path)
    assert code == 0, err
    code, _, err = await relay_cli("index", "--app", "c", "ftp://example.com/", "--db", db, cwd=tmp_path)
    assert code == 2 and "'ftp://example.com/' is not an http(s) URL" in err
    code, _, err = await relay_cli("index", "--app", "c", site.url("/docs/"), "--concurrency", "99", "--db", db,
                                   cwd=tmp_path)
    assert code == 2 and "--concurrency must be 1-16" in err
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    code, _, err = await relay_cli("index", "--app", "c", f"http://127.0.0.1:{closed}/", "--db", db, cwd=tmp_path)
    assert code == 1 and f"cannot reach http://127.0.0.1:{closed}: cannot connect" in err
    code, _, err = await relay_cli("index", "--app", "c", site.url("/nothing/"), "--db", db, cwd=tmp_path)
    assert code == 1 and "/nothing/: no page to index (the start page: HTTP 404); nothing was changed" in err
    code, out, err = await relay_cli("search", "--app", "c", "--db", db, "welcome", cwd=tmp_path)
    assert json.loads(out)["sections"][0]["url"] == site.url("/docs/#welcome")  # the index before is intact

"""``PUT /api/apps/{app_id}/docs``: CI pushes the built docs as a tar archive with the app's secret, and the running
relay's index follows at once (incremental, atomic, the index run of ``autopilot-relay index``); without the secret,
with a bad archive or past the bounds it is refused with its error and the index stays as it was."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from relay_helpers import SHOP_SECRET, launch
from test_docs_units import archive

from widget.relay.http import docs_push

pytestmark = pytest.mark.relay

PAGE = ("<html><head><title>{t}</title></head><body><nav>Menu Zebra</nav><main><h1 id='top'>{t}</h1><p>{body}</p>"
        "<h2 id='more'>More</h2><p>Details about {t}.</p></main></body></html>")
SITE = {
    "index.html": PAGE.format(t="Welcome", body="The copilot answers questions."),
    "guide/theming/index.html": PAGE.format(t="Theming", body="Set the accent custom property for colours."),
    "_static/x.html": PAGE.format(t="Static", body="not a page"),
    ".hidden/y.html": PAGE.format(t="Hidden", body="not a page"),
    "search.html": PAGE.format(t="Search", body="not a page"),
}


@pytest_asyncio.fixture(scope="module")
async def relay(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    h = await launch(tmp_path_factory.mktemp("push"))
    yield h
    await h.stop()


@pytest_asyncio.fixture(scope="module")
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def push(http: aiohttp.ClientSession, relay: Any, body: bytes, app: str = "shop", secret: str = SHOP_SECRET,
               query: str = "?base_url=https://docs.shop.example/") -> tuple[int, dict[str, Any]]:
    r = await http.put(f"{relay.url}/api/apps/{app}/docs{query}", data=body,
                       headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/gzip"})
    return r.status, await r.json()


async def test_a_push_indexes_and_a_second_one_is_incremental(relay: Any, http: aiohttp.ClientSession) -> None:
    status, body = await push(http, relay, archive(SITE))
    assert status == 200, body
    assert body["ok"] and body["pages"] == 2 and body["added"] == 2 and body["sections"] == 4
    hits = await relay.hub.docs.search("shop", "accent colours")
    assert hits[0]["url"] == "https://docs.shop.example/guide/theming/#top"
    assert all("Zebra" not in h["text"] for h in hits)
    status, body = await push(http, relay, archive(SITE))
    assert status == 200 and body["unchanged"] == 2 and body["added"] == body["changed"] == 0
    # A page left out of the next archive leaves the index; a changed one is changed.
    site = {"index.html": SITE["index.html"].replace("answers questions", "answers every question")}
    status, body = await push(http, relay, archive(site, "w"))
    assert status == 200 and body["pages"] == 1 and body["removed"] == 1 and body["changed"] == 1
    assert await relay.hub.docs.search("shop", "accent colours") == []


@pytest.mark.parametrize("app, secret", [("shop", "wrong-secret"), ("demo", ""), ("nobody", SHOP_SECRET)])
async def test_only_the_apps_secret_may_push(relay: Any, http: aiohttp.ClientSession, app: str, secret: str) -> None:
    status, body = await push(http, relay, archive(SITE), app=app, secret=secret)
    assert status == 401 and body["error"]["code"] == "unauthorized"
    assert "Bearer <app secret>" in body["error"]["message"]


@pytest.mark.parametrize("files, query, message", [
    (None, "", "The body is not a tar archive"),
    ({"../evil.html": SITE["index.html"]}, "", "The archive names a file outside itself"),
    ({"readme.txt": "no page"}, "", "The archive has no pages"),
    ({"index.html": SITE["index.html"]}, "?base_url=/x?y", "must be a path or an http(s) URL"),
    ({"index.html": SITE["index.html"]}, "?url_style=flat", "url_style must be one of directory, html"),
    ({"index.html": SITE["index.html"]}, "?markdown_anyway=yes", "markdown_anyway must be true or false"),
    # The Markdown sources of a Docusaurus or VitePress site: their anchors and URLs are not MkDocs'.
    ({"docs/intro.md": "# Intro\n\nHello.\n", "docusaurus.config.js": "module.exports = {};"}, "",
     "The archive holds the Markdown sources of a Docusaurus site (docusaurus.config.js): Docusaurus makes its own"),
    ({"guide/x.md": "# X\n\nHello.\n", ".vitepress/config.mts": "export default {}"}, "",
     "Markdown sources of a VitePress site (.vitepress/config.mts)"),
    ({"intro.md": "# Intro\n", "page.mdx": "# Page\n"}, "", "Markdown sources of an MDX site (page.mdx)"),
])
async def test_bad_pushes_are_refused_and_change_nothing(relay: Any, http: aiohttp.ClientSession,
                                                         files: dict[str, str] | None, query: str,
                                                         message: str) -> None:
    before = await relay.hub.docs.search("shop", "copilot")
    status, body = await push(http, relay, b"not a tar" if files is None else archive(files), query=query)
    assert status == 400 and body["error"]["code"] == "bad_request" and message in body["error"]["message"]
    assert await relay.hub.docs.search("shop", "copilot") == before


async def test_foreign_markdown_goes_in_when_asked_and_a_built_site_beside_a_config_always(
        relay: Any, http: aiohttp.ClientSession) -> None:
    sources = {"guide/x.md": "# Guide\n\nThe quokka feeds at dawn.\n", ".vitepress/config.mts": "export default {}"}
    status, body = await push(http, relay, archive(sources), query="?base_url=https://docs.shop.example/"
                              "&markdown_anyway=true")
    assert status == 200 and body["pages"] == 1, body
    assert (await relay.hub.docs.search("shop", "quokka dawn"))[0]["url"] == "https://docs.shop.example/guide/x/#guide"
    # Built pages are never refused, whatever config file rides along.
    built = {**SITE, "docusaurus.config.js": "module.exports = {};"}
    status, body = await push(http, relay, archive(built))
    assert status == 200 and body["pages"] == 2, body


async def test_the_push_body_has_its_own_bound(relay: Any, http: aiohttp.ClientSession,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # Over the API's max_body_bytes (256 KiB), under the push bound: accepted.
    big = {"index.html": PAGE.format(t="Big", body="word " * 80_000)}
    raw = archive(big, "w")
    assert len(raw) > relay.config.max_body_bytes
    status, body = await push(http, relay, raw)
    assert status == 200 and body["pages"] == 1, body
    monkeypatch.setattr(docs_push, "MAX_PUSH_BYTES", 100_000)
    status, body = await push(http, relay, raw)
    assert status == 413 and body["error"]["code"] == "body_too_large"

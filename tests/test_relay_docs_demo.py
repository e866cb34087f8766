"""The demo's docs site (``--demo-docs DIR``, what ``bash dev demo`` runs): the folder's Markdown indexed for the demo
app at start (the real SQLite FTS5 index in the relay's file) and served at ``/docs/<name>.html`` with the index's
anchors, so the demo model's cited answer opens the right section; a question the docs do not answer gets the
not-found text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import aiohttp
import pytest
import pytest_asyncio
from relay_helpers import Recorder, joined, launch
from test_docs_units import GUIDE

from widget.relay.config import DEFAULT_NOT_FOUND_TEXT

pytestmark = pytest.mark.relay

ROOT = Path(__file__).resolve().parent.parent


async def ask(rec: Recorder, text: str) -> list[tuple[str, Any]]:
    mark = len(rec.events)
    ack = await rec.call("user_message", {"text": text, "idempotency_key": f"k-{mark}"})
    assert ack["ok"], ack
    await rec.wait("user_input", pred=lambda d: d["reason"] == "message", start=mark)
    return rec.events[mark:]


def final(events: list[tuple[str, Any]]) -> dict[str, Any]:
    return [d for e, d in events if e == "completion.ended"][-1]["message"]


@pytest_asyncio.fixture(scope="module")
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest_asyncio.fixture(scope="module")
async def small(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    folder = tmp_path_factory.mktemp("site")
    (folder / "guide.md").write_text(GUIDE)
    (folder / "other.md").write_text("# Other\n\n## Setup and more\n\nNothing to see.\n")
    (folder / "sub").mkdir()
    (folder / "sub" / "hidden.md").write_text("# Hidden\n\nNot served, not indexed.\n")
    h = await launch(tmp_path_factory.mktemp("relay"), demo_docs=folder)
    yield h
    await h.stop()


async def test_the_small_site_is_indexed_served_and_answers(small: Any, http: aiohttp.ClientSession) -> None:
    r = await http.get(small.url + "/docs/guide.html")
    page = await r.text()
    assert r.status == 200 and r.headers["content-type"].startswith("text/html")
    assert '<h2 id="setup-and-more">' in page and 'data-app="demo"' in page
    listing = await (await http.get(small.url + "/docs/")).text()
    assert 'href="guide.html"' in listing and 'href="other.html"' in listing and "hidden" not in listing
    for path in ("/docs/missing.html", "/docs/sub/hidden.html", "/docs/..%2Fsecret.html", "/docs/guide.md"):
        assert (await http.get(small.url + path)).status == 404, path
    rec, _, url = await joined(http, small.url, app="demo")
    msg = final(await ask(rec, "How do I install the package?"))
    assert msg["content"].startswith("From the documentation (Guide › Setup and more):\n\n> Install the package")
    (src,) = msg["sources"]
    # absolute, on the relay's own host (a client links http(s) URLs only)
    assert src["url"].startswith(f"{small.url}/docs/guide.html#setup-and-more:~:text=")
    start = unquote(src["url"].split(":~:text=", 1)[1].split(",", 1)[0])
    assert start in page  # the fragment's passage is on the served page
    gone = final(await ask(rec, "zzqx wibble"))
    assert gone["content"] == DEFAULT_NOT_FOUND_TEXT and "sources" not in gone
    await rec.disconnect()


async def test_the_projects_own_docs_answer_the_colours_question(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    """What a newcomer sees in ``bash dev demo``: "how do I change the bar's colours?" cites docs/theming.md's
    Colours section, and the source opens it (its anchor on the served page, its passage highlighted)."""
    h = await launch(tmp_path, demo_docs=ROOT / "docs")
    try:
        rec, _, url = await joined(http, h.url, app="demo")
        msg = final(await ask(rec, "How do I change the bar's colours?"))
        (src,) = msg["sources"]
        assert src["title"] == "Theming the bar › Colours" and msg["content"].endswith("[s1]")
        page_url, _, fragment = src["url"].partition("#")
        assert page_url == f"{h.url}/docs/theming.html" and fragment.startswith("colours:~:text=")
        page = await (await http.get(page_url)).text()
        assert '<h3 id="colours">' in page
        assert unquote(fragment.split("text=", 1)[1].split(",", 1)[0]) in page
        # The search finds a section for any question; one that is not about it is not quoted (docs/demo-model.md).
        other = final(await ask(rec, "What is the capital of France?"))
        assert other["content"] == DEFAULT_NOT_FOUND_TEXT and "sources" not in other
        await rec.disconnect()
    finally:
        await h.stop()

"""What ``bash dev demo`` shows a newcomer, in Chromium: the relay started with ``--demo-docs docs`` (this project's
documentation indexed for the demo app and served at ``/docs/<name>.html``), the demo page's bar asked "How do I change
the bar's colours?", a cited answer whose source row links to docs/theming.md's Colours section, and that link
opening the served page at that heading."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from conftest import require_build
from support import RelayServer, open_page, start_relay
from test_bar import open_bar, py, q, send

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def demo_relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayServer]:
    require_build()
    server = start_relay(tmp_path_factory.mktemp("demo-docs"),
                         extra=["--demo-docs", str(ROOT / "docs"), "--demo-chunk-delay-ms", "2"])
    yield server
    server.stop()


@pytest_asyncio.fixture(scope="module")
async def demo_page(browser: Any, demo_relay: RelayServer) -> AsyncIterator[tuple[Any, Any]]:
    ctx, page, log = await open_page(browser, demo_relay.url + "/")
    yield page, log
    await ctx.close()


async def test_the_colours_question_opens_the_colours_section(demo_page: tuple[Any, Any],
                                                              demo_relay: RelayServer) -> None:
    page, log = demo_page
    await open_bar(page)
    await send(page, "How do I change the bar's colours?")
    answer = await py(page, "[m for m in store.messages if m.get('role') == 'assistant'][-1]")
    assert answer["content"].startswith("From the documentation (Theming the bar › Colours)")
    (source,) = answer["sources"]
    link = page.locator(q(f'[data-key="{answer["id"]}"] ol.sources > li a'))
    await link.wait_for()
    assert await link.get_attribute("href") == source["url"] and source["url"].startswith(demo_relay.url + "/docs/")
    assert await link.get_attribute("target") is None  # the relay's own host: opens in place
    await link.click()
    await page.wait_for_url(f"{demo_relay.url}/docs/theming.html#colours*")
    assert await page.evaluate("() => location.pathname + location.hash") == "/docs/theming.html#colours"
    assert await page.evaluate("() => document.getElementById('colours').tagName") == "H3"
    passage = await page.locator("#colours + p").inner_text()
    assert passage.startswith("To change the bar's colours")
    # The page scrolled to the section: Chromium targets the text fragment's passage (or, without it, the heading).
    target = await page.evaluate("() => { const t = document.querySelector(':target'); "
                                 "return t && (t.id || t.textContent); }")
    assert " ".join(str(target).split()) in ("colours", " ".join(passage.split())), target
    assert await page.evaluate("() => window.scrollY") > 0
    assert log.page_errors == []

"""destroy() leaves nothing (Chromium): no host elements, no listeners on the document or window, no JS proxies,
no store subscription on the client, no confirmation handler of ours; enable_bar(client) mounts it again."""

from __future__ import annotations

from typing import Any

import pytest
from test_bar import TOGGLE, fixture_bar_page, fixture_bar_relay, open_bar, py, q, send  # noqa: F401

pytestmark = pytest.mark.browser


async def listeners(page: Any) -> dict[str, list[str]]:
    """Event listeners on window and document, by target, via the DevTools protocol."""
    cdp = await page.context.new_cdp_session(page)
    out = {}
    try:
        for name in ("window", "document"):
            obj = await cdp.send("Runtime.evaluate", {"expression": name})
            got = await cdp.send("DOMDebugger.getEventListeners", {"objectId": obj["result"]["objectId"]})
            out[name] = sorted(entry["type"] for entry in got["listeners"])
    finally:
        await cdp.detach()
    return out


async def test_destroy_leaves_nothing_and_enable_bar_mounts_again(bar_page):
    page = bar_page.page
    await open_bar(page)
    await send(page, 'add_to_cart {"sku": "nimbus"}')
    await page.click(q("button.activity-button"))
    before = await listeners(page)
    # Ours: the shortcut key on the document.
    assert "keydown" in before["document"]
    state = await py(page, """
from widget.ui.bar import live_proxies
[live_proxies(), client.events.listener_count("messagesChanged"), client._confirmation_handler is not None]""")
    assert state[0] > 0 and state[1] >= 1 and state[2] is True
    # From Python (page code holds the handle): in JS, ``proxy.destroy()`` would destroy the PyProxy itself.
    await py(page, "bar.destroy()\nTrue")
    after = await listeners(page)
    assert "keydown" not in after["document"]
    assert after["window"] == [t for t in before["window"]]  # nothing of the bar's on window (there never was)
    assert await page.evaluate("document.querySelectorAll('[data-autopilot], #autopilot-bar-host, "
                               "#autopilot-toggle-host').length") == 0
    state = await py(page, """
from widget.ui.bar import live_proxies
[live_proxies(), bar.proxy_count, client.events.listener_count("messagesChanged"),
 client._confirmation_handler is None]""")
    # The boot's store stays subscribed (the handle owns it); the bar's proxies are all gone.
    assert state[0] == 0 and state[1] == 0 and state[3] is True
    # A page can mount a bar on the client again: a toggle of its own, the same skin.
    await py(page, """
from widget.ui.bar import enable_bar
import pyodide.http
css = await (await pyodide.http.pyfetch(js.window.Autopilot.config.root + "skin.css")).string()
AGAIN = enable_bar(client, css=css, title="Again")
True""")
    await page.click(TOGGLE)
    await page.wait_for_selector(q("section.panel"), state="visible")
    assert await page.text_content(q(".title")) == "Again"
    assert await page.locator(q(".message.user")).count() >= 1  # the conversation is still there
    await page.keyboard.press("Escape")
    # Its destroy() undoes it all too, including the store it made.
    subscribed = await py(page, "client.events.listener_count('messagesChanged')")
    await py(page, "AGAIN.destroy()\nTrue")
    state = await py(page, """
from widget.ui.bar import live_proxies
[live_proxies(), client.events.listener_count("messagesChanged")]""")
    assert state == [0, subscribed - 1]
    assert await page.evaluate("document.querySelectorAll('[data-autopilot]').length") == 0
    assert "keydown" not in (await listeners(page))["document"]
    assert bar_page.log.page_errors == []


async def test_a_destroyed_bar_is_freed_without_the_cycle_collector(bar_page):
    # Python's cycle collector only runs when Python allocates: an interpreter that goes quiet after destroy()
    # (the page's Python done, or a whole widget destroyed) would keep a bar caught in a reference cycle, and with
    # it every element it rendered, for good. Reference counting alone must free it.
    state = await py(bar_page.page, """
import gc, weakref
from widget.ui.bar import enable_bar, live_proxies
proxies = live_proxies()
gc.collect()
gc.disable()
try:
    handle = enable_bar(client, css="")
    ref = weakref.ref(handle.bar)
    handle.destroy()
    del handle
    alive = ref() is not None
finally:
    gc.enable()
[alive, live_proxies() - proxies]""")
    assert state == [False, 0]
    assert bar_page.log.page_errors == []

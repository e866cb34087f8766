"""The early connection: while Python starts, the loader reads the conversation and opens the socket.

The loader makes the same requests Python's client would make (create the conversation on a first visit, read
it, open the socket) as soon as a start begins, and the JS bridge hands each answer, and the socket, to Python's
first request and connect() of the same kind. The relay sees one of each, earlier; where an early answer failed
or does not match, Python asks the network as before. Also here: the pre-warm worker stores its snapshot copy
only once the page is quiet, not while the reader's first question is answered.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from support import open_page, py_eval, wait_mark

pytestmark = pytest.mark.browser

TOGGLE = "#autopilot-toggle-host >> button.toggle"
ANSWERS = "#autopilot-bar-host >> .messages > .message.assistant"

# Each fetch of the conversation API the page made, with its start time, and the boot marks.
TIMES = """() => ({
  api: performance.getEntriesByType('resource').filter(e => e.name.includes('/api/'))
    .map(e => [e.initiatorType, e.name, e.startTime]),
  marks: Object.fromEntries(performance.getEntriesByType('mark').map(m => [m.name, m.startTime])),
})"""


def api_log(page: Any) -> list[str]:
    """Every request of the page to the relay's API, as ``METHOD path``, and every socket, as ``WS``."""
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.method + " " + r.url.split("/api/", 1)[1]) if "/api/" in r.url else None)
    page.on("websocket", lambda ws: seen.append("WS"))
    return seen


def site_page(page_server: Any, relay: Any, name: str) -> str:
    """A page on its own origin with the default tag."""
    html = ('<!doctype html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
            f"<title>{name}</title></head><body><h1>{name}</h1>"
            f'<script src="{relay.url}/widget/autopilot.js" data-app="demo" defer></script></body></html>')
    return page_server.add(f"/__early__/{name}.html", html)


async def test_a_first_view_connects_while_python_starts(browser: Any, relay_server: Any, page_server: Any) -> None:
    """A first view: the conversation is created and read, and the socket opened, before Python is restored;
    Python's client uses them: one POST, one GET and one socket on the relay."""
    ctx = await browser.new_context()
    page = await ctx.new_page()
    seen = api_log(page)
    try:
        await page.goto(site_page(page_server, relay_server, "first"))
        await wait_mark(page, "autopilot:prepared")
        assert seen == []  # nothing before the reader reaches for the widget
        await page.hover(TOGGLE)
        await wait_mark(page, "autopilot:joined")
        t = await page.evaluate(TIMES)
        fetched = [(kind, url) for kind, url, _ in t["api"]]
        assert [s.split(" ", 1)[0] for s in seen if s != "WS"] == ["POST", "GET"], seen
        assert seen.count("WS") == 1, seen
        assert len(fetched) == 2 and all(kind == "fetch" for kind, _ in fetched), t["api"]
        # Both were sent while Python started: before the restore ended (the "pyodide" mark).
        assert all(start < t["marks"]["autopilot:pyodide"] for _, _, start in t["api"]), t
        conv_url = await py_eval(page, "from widget import get_client\nget_client().conversation_url")
        assert conv_url == fetched[1][1]
        assert await page.evaluate("localStorage.getItem('autopilot:conversation:demo')") == conv_url
        token = "early-" + secrets.token_hex(4)
        assert await page.evaluate("t => window.Autopilot.send(t)", token) is True
        await page.locator(ANSWERS).filter(has_text=token).first.wait_for(state="attached", timeout=30_000)
        assert seen.count("WS") == 1, seen
    finally:
        await ctx.close()


async def test_a_later_view_reads_the_stored_conversation_early(browser: Any, relay_server: Any,
                                                                 page_server: Any) -> None:
    """A later view of the tab: no POST; the stored conversation is read once and the socket opened once."""
    ctx, page, _ = await open_page(browser, site_page(page_server, relay_server, "one"))
    try:
        conv_url = await py_eval(page, "from widget import get_client\nget_client().conversation_url")
        seen = api_log(page)
        await page.goto(site_page(page_server, relay_server, "two"))
        await page.hover(TOGGLE)
        await wait_mark(page, "autopilot:joined")
        assert [s for s in seen if s != "WS"] == ["GET " + conv_url.split("/api/", 1)[1]], seen
        assert seen.count("WS") == 1, seen
        t = await page.evaluate(TIMES)
        assert t["api"][0][2] < t["marks"]["autopilot:pyodide"], t
        assert await py_eval(page, "from widget import get_client\nget_client().conversation_url") == conv_url
    finally:
        await ctx.close()


async def test_a_stale_stored_conversation_is_replaced_as_before(browser: Any, relay_server: Any,
                                                                  page_server: Any) -> None:
    """The stored conversation is gone on the relay (retention, say): the early read gets a 404 and is not used;
    Python reads it itself, creates a new conversation and joins it (the early step opened no socket). The page
    is on another origin than the relay: the 404 must be readable there, not a CORS failure."""
    gone = relay_server.url + "/api/conversations/c_" + "Z" * 32
    ctx = await browser.new_context()
    await ctx.add_init_script(f"localStorage.setItem('autopilot:conversation:demo', {gone!r});")
    page = await ctx.new_page()
    seen = api_log(page)
    try:
        await page.goto(site_page(page_server, relay_server, "stale"))
        await page.evaluate("() => { window.Autopilot.boot(); }")
        await wait_mark(page, "autopilot:joined")
        old = "GET " + gone.split("/api/", 1)[1]
        assert seen[:2] == [old, old], seen  # the early read, then Python's own (a 404 is not handed over)
        assert [s.split(" ", 1)[0] for s in seen[2:] if s != "WS"] == ["POST", "GET"], seen
        assert seen.count("WS") == 1, seen
        conv_url = await py_eval(page, "from widget import get_client\nget_client().conversation_url")
        assert conv_url != gone
        assert await page.evaluate("localStorage.getItem('autopilot:conversation:demo')") == conv_url
    finally:
        await ctx.close()

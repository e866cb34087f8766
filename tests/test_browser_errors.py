"""Bad input in the browser: wrong relay URL, relay down, bad token, protocol mismatch.

Each must give a clear, visible error in the bar and the console, and a Retry that really retries.
"""

from __future__ import annotations

import re

import pytest
from support import free_port, start_relay, wait_mark

pytestmark = pytest.mark.browser

NOTICE = "#autopilot-bar-host >> .notice"
RETRY = "#autopilot-bar-host >> .notice >> button.retry"
CONN = "#autopilot-bar-host >> .connection"


def page_html(relay: str, extra: str = "") -> str:
    attr = f' data-relay="{relay}"'
    return f"""<!doctype html><html><head><link rel="icon" href="data:,"><title>t</title></head>
<body><p>test page</p>
<script src="/widget/autopilot.js"{attr} data-app="demo" data-boot="eager" data-open="true" {extra}></script>
</body></html>"""


async def open_test_page(browser, page_server, name: str, html: str):
    ctx = await browser.new_context()
    page = await ctx.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    url = page_server.add(f"/__test__/{name}.html", html)
    return ctx, page, console, url


async def test_relay_down_then_up_retry_connects(browser, page_server, tmp_path):
    port = free_port()
    ctx, page, console, url = await open_test_page(browser, page_server, "down", page_html(f"http://127.0.0.1:{port}"))
    try:
        await page.goto(url)
        await page.wait_for_selector(NOTICE, state="visible", timeout=60000)
        text = await page.text_content(NOTICE)
        assert "Cannot reach the relay" in text and str(port) in text
        assert await page.text_content(CONN) == "Connection error"
        assert any("[autopilot] could not connect" in c for c in console)
        # Now the relay comes up (allowing the page's origin) and Retry connects.
        other = start_relay(tmp_path, port=port,
                            extra=["--app", f"demo={page_server.origin}", "--demo-chunk-delay-ms", "0"])
        try:
            await page.click(RETRY)
            await wait_mark(page, "autopilot:joined", 20000)
            await page.wait_for_selector(f"{CONN}:text('Connected')", timeout=10000)
            assert await page.is_hidden(NOTICE)
        finally:
            other.stop()
        # The relay went away under a live page: the bar says so instead of pretending.
        await page.wait_for_selector(f"{CONN}:text('Reconnecting…')", timeout=10000)
    finally:
        await ctx.close()


async def test_boot_failure_is_owned_by_the_loader_with_retry(browser, relay_server, page_server):
    ctx = await browser.new_context()
    page = await ctx.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    fail = {"on": True}

    async def maybe_fail(route):
        if fail["on"]:
            await route.fulfill(status=503, body="down for maintenance")
        else:
            await route.continue_()

    await page.route(re.compile(r".*/bundle\.zip$"), maybe_fail)
    url = page_server.add("/__test__/bootfail.html", page_html(relay_server.url))
    try:
        await page.goto(url)
        status = "#autopilot-toggle-host >> .status"
        await page.wait_for_selector(f"{status} >> button", timeout=60000)
        text = await page.text_content(status)
        assert "could not start" in text and "HTTP 503" in text
        assert any("could not start" in c for c in console)
        fail["on"] = False
        await page.click(f"{status} >> button")
        await wait_mark(page, "autopilot:joined", 60000)
    finally:
        await ctx.close()


async def test_a_wrong_app_id_rejects_ready_and_names_the_app(browser, relay_server, page_server):
    """A data-app the relay does not have: the loader's card says so, naming the app, and Autopilot.ready rejects
    (a page that awaits it learns that the widget will not work, instead of a bar that fails on the first send)."""
    html = page_html(relay_server.url).replace('data-app="demo"', 'data-app="no-such-app"')
    ctx, page, console, url = await open_test_page(browser, page_server, "wrongapp", html)
    try:
        await page.goto(url)
        outcome = await page.evaluate("""() => new Promise((resolve) => {
            const wait = () => window.Autopilot && window.Autopilot.ready
                ? window.Autopilot.ready.then(() => resolve("resolved"), (e) => resolve("rejected: " + e.message))
                : setTimeout(wait, 50);
            wait();
        })""")
        assert outcome.startswith("rejected: ") and "no-such-app" in outcome, outcome
        status = "#autopilot-toggle-host >> .status"
        await page.wait_for_selector(f"{status} >> button", timeout=10000)
        assert "no-such-app" in (await page.text_content(status) or "")
        assert any("no-such-app" in c for c in console)
    finally:
        await ctx.close()


async def _tamper_join(page, pattern: str, repl: str, state: dict) -> None:
    """Rewrite the Socket.IO join frame on its way to the relay while state['on'] is true."""

    def handler(ws):
        server = ws.connect_to_server()

        def to_server(message):
            if state["on"] and isinstance(message, str) and '"join"' in message:
                message = re.sub(pattern, repl, message)
                state["tampered"] += 1
            server.send(message)

        ws.on_message(to_server)
        server.on_message(lambda m: ws.send(m))

    await page.route_web_socket(re.compile(r".*/socket\.io/.*"), handler)


async def test_bad_token_is_refused_visibly_and_retry_recovers(browser, relay_server, page_server):
    ctx, page, console, url = await open_test_page(browser, page_server, "token", page_html(relay_server.url))
    state = {"on": True, "tampered": 0}
    await _tamper_join(page, r'"token":"[^"]*"', '"token":"forged.token.value"', state)
    try:
        await page.goto(url)
        await page.wait_for_selector(NOTICE, state="visible", timeout=60000)
        assert state["tampered"] >= 1
        text = await page.text_content(NOTICE)
        assert "token" in text.lower()
        assert any("could not connect" in c for c in console)
        state["on"] = False
        await page.click(RETRY)
        await page.wait_for_selector(f"{CONN}:text('Connected')", timeout=20000)
    finally:
        await ctx.close()


async def test_protocol_version_mismatch_is_a_clear_error(browser, relay_server, page_server):
    ctx, page, console, url = await open_test_page(browser, page_server, "version", page_html(relay_server.url))
    state = {"on": True, "tampered": 0}
    await _tamper_join(page, r'"version":1\b', '"version":99', state)
    try:
        await page.goto(url)
        await page.wait_for_selector(NOTICE, state="visible", timeout=60000)
        text = await page.text_content(NOTICE)
        assert "99" in text and "version" in text.lower()
        assert await page.is_visible(RETRY)
    finally:
        await ctx.close()


async def test_typing_while_connecting_is_kept_and_sent_once_connected(browser, relay_server, page_server):
    """A slow relay: what the reader types and sends before the connection is up is neither lost nor refused."""
    ctx, page, console, url = await open_test_page(browser, page_server, "slowjoin", page_html(relay_server.url))
    release = await hold_first_conversation_get(page)
    field = "#autopilot-bar-host >> textarea.input"
    try:
        await page.goto(url)
        await page.wait_for_selector(field, timeout=60000)
        assert await page.text_content(CONN) != "Connected"
        await page.focus(field)
        await page.keyboard.type("hello while connecting")
        await page.keyboard.press("Enter")
        assert await page.input_value(field) == "hello while connecting"  # kept, not sent yet
        form = page.locator("#autopilot-bar-host >> form.composer")
        assert await form.get_attribute("data-held") == "true"
        assert "once connected" in await page.text_content("#autopilot-bar-host >> .hint")
        await release()
        await page.wait_for_selector(f"{CONN}:text('Connected')", timeout=20000)
        user = page.locator("#autopilot-bar-host >> .message.user")
        await user.first.wait_for(timeout=20000)
        assert "hello while connecting" in await user.first.text_content()
        assert await page.input_value(field) == ""
        assert await form.get_attribute("data-held") == "false"
    finally:
        await ctx.close()


async def test_starter_pressed_while_connecting_is_held_like_a_typed_message(browser, relay_server, page_server):
    html = page_html(relay_server.url).replace(
        "</body>", '<script>window.Autopilot.setStarters(["Starter while connecting"]);</script></body>')
    ctx, page, console, url = await open_test_page(browser, page_server, "slowstarter", html)
    release = await hold_first_conversation_get(page)
    field = "#autopilot-bar-host >> textarea.input"
    try:
        await page.goto(url)
        starter = page.locator("#autopilot-bar-host >> button.starter")
        await starter.wait_for(timeout=60000)
        assert await page.text_content(CONN) != "Connected"
        await starter.click()
        assert await page.input_value(field) == "Starter while connecting"
        assert await page.locator("#autopilot-bar-host >> form.composer").get_attribute("data-held") == "true"
        await release()
        user = page.locator("#autopilot-bar-host >> .message.user")
        await user.first.wait_for(timeout=20000)
        assert "Starter while connecting" in await user.first.text_content()
        assert await page.input_value(field) == ""
    finally:
        await ctx.close()


async def hold_first_conversation_get(page):
    """Hold the page's first GET of its conversation (the widget stays "connecting"); returns the release."""
    held: list = []

    async def hold(route):
        if route.request.method == "GET" and not held:
            held.append(route)
        else:
            await route.continue_()

    await page.route(re.compile(r".*/api/conversations/c_[^/]+$"), hold)

    async def release() -> None:
        for _ in range(400):  # the GET may not have been asked for yet
            if held:
                break
            await page.wait_for_timeout(25)
        assert held, "the conversation GET never came"
        await held[0].continue_()

    return release

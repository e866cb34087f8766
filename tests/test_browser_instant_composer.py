"""The reader never waits to type and never loses a key (issue 32): the composer at the click.

Before Python runs, a click on the toggle (or Alt+Shift+A, or a bar left open on the previous page) shows the bar's
frame with a focused composer at once (static/loader/composer.mjs); when Python mounts the bar it takes over the
text, the caret and the focus, and a message the reader sent with Enter before the relay was joined is sent once.
Each test types at once and compares what the relay got with what was typed.
"""

from __future__ import annotations

from typing import Any

import pytest
from support import wait_mark

pytestmark = pytest.mark.browser

TOGGLE = "#autopilot-toggle-host >> button.toggle"
# The element that has the focus, through the shadow roots: "early" (the loader's composer), "bar" (the bar's), or
# what else.
FOCUSED = """() => {
  const t = document.getElementById('autopilot-toggle-host'), b = document.getElementById('autopilot-bar-host');
  if (t && t.shadowRoot.activeElement && t.shadowRoot.activeElement.classList.contains('early-input')) return 'early';
  if (b && b.shadowRoot.activeElement && b.shadowRoot.activeElement.classList.contains('input')) return 'bar';
  return document.activeElement ? document.activeElement.tagName : null;
}"""
# The user messages the bar shows (what the relay took: the bar renders the conversation it joined).
SENT = """() => { const b = document.getElementById('autopilot-bar-host');
  return b ? [...b.shadowRoot.querySelectorAll('.message.user .content')].map(e => e.textContent) : []; }"""
BAR_OPEN = """() => { const b = document.getElementById('autopilot-bar-host');
  const p = b && b.shadowRoot.querySelector('.panel');
  return !!p && !p.hidden && p.getBoundingClientRect().height > 0; }"""
BAR_INPUT = "() => document.getElementById('autopilot-bar-host').shadowRoot.querySelector('.input').value"

QUESTION = "what are your opening hours on sunday mo"  # 40 characters


def site_page(page_server: Any, relay: Any, name: str) -> str:
    html = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
            f"<title>{name}</title></head><body><main><h1>{name}</h1><p>Reading.</p></main>"
            f'<script src="{relay.url}/widget/autopilot.js" data-app="demo" defer></script></body></html>')
    return page_server.add(f"/__instant__/{name}.html", html)


async def sent_once(page: Any, text: str) -> None:
    """The relay got ``text`` as the conversation's one user message (and never twice)."""
    await page.wait_for_function(f"() => ({SENT})().length > 0", timeout=60_000)
    await wait_mark(page, "autopilot:joined")
    await page.wait_for_timeout(1500)  # a second send would have shown by now
    assert await page.evaluate(SENT) == [text]


async def test_typing_at_once_after_the_click_on_a_cold_view(browser: Any, relay_server: Any, page_server: Any) -> None:
    ctx = await browser.new_context()
    try:
        page = await ctx.new_page()
        await page.goto(site_page(page_server, relay_server, "cold-click"))
        await page.wait_for_selector(TOGGLE, state="visible")
        await page.click(TOGGLE)
        # Within the click's task: the frame shows and the composer has the focus (Python is not there yet).
        assert await page.evaluate(FOCUSED) == "early"
        assert await page.evaluate("() => !window.Autopilot.pyodide")
        assert await page.get_attribute(TOGGLE, "aria-expanded") == "true"
        # Worded as the bar's composer (the labels table): it says it is connecting, and takes the keys.
        early = "#autopilot-toggle-host >> textarea.early-input"
        assert await page.get_attribute(early, "aria-label") == "Message"
        assert await page.get_attribute(early, "placeholder") == "Connecting…"
        assert await page.get_attribute("#autopilot-toggle-host >> section.early", "role") == "dialog"
        assert (await page.get_attribute(TOGGLE, "aria-label") or "").startswith("Close")  # as the bar's, open
        # A reader's 60 ms a key: typing goes on while Python starts and mounts the bar (the takeover).
        await page.keyboard.type(QUESTION, delay=60)
        await page.keyboard.press("Enter")
        await sent_once(page, QUESTION)
        assert await page.evaluate(BAR_OPEN)
        assert await page.evaluate(FOCUSED) == "bar"
        assert await page.get_attribute(TOGGLE, "aria-expanded") == "true"
        # One dialog, one composer: the loader's frame is gone.
        assert await page.evaluate("() => !document.getElementById('autopilot-toggle-host').shadowRoot"
                                   ".querySelector('.early')")
    finally:
        await ctx.close()


async def test_the_pointer_on_the_toggle_prepares_an_invisible_frame(browser: Any, relay_server: Any,
                                                                      page_server: Any) -> None:
    """The reader's intent makes the frame ahead of the click (so the click only shows it), invisible and out of
    the accessibility tree; a reader who never clicks gets no frame, no dialog and no open bar when Python
    mounts it."""
    ctx = await browser.new_context()
    try:
        page = await ctx.new_page()
        await page.goto(site_page(page_server, relay_server, "hover-only"))
        await page.wait_for_selector(TOGGLE, state="visible")
        await page.hover(TOGGLE)
        frame = page.locator("#autopilot-toggle-host >> section.early")
        await frame.wait_for(state="attached")
        assert await frame.get_attribute("data-prepared") == ""
        assert not await frame.is_visible()
        assert await page.get_by_role("dialog").count() == 0  # nothing announced
        assert await page.get_attribute(TOGGLE, "aria-expanded") != "true"
        await page.mouse.move(5, 5)
        await wait_mark(page, "autopilot:mounted")  # the intent started Python too
        assert await frame.count() == 0  # the bar took nothing over: the prepared frame is gone
        assert not await page.evaluate(BAR_OPEN)
        assert await page.get_attribute(TOGGLE, "aria-expanded") == "false"
        await page.click(TOGGLE)  # Python's bar now
        await page.wait_for_function(BAR_OPEN)
        assert await page.evaluate(FOCUSED) == "bar"
    finally:
        await ctx.close()


async def test_text_caret_and_held_message_pass_to_the_bar(browser: Any, relay_server: Any, page_server: Any) -> None:
    ctx = await browser.new_context()
    try:
        page = await ctx.new_page()
        await page.goto(site_page(page_server, relay_server, "cold-held"))
        await page.wait_for_selector(TOGGLE, state="visible")
        await page.click(TOGGLE)
        await page.keyboard.type("opening hours sunday")
        # The caret moved back into the text: the bar keeps it there.
        for _ in range(6):
            await page.keyboard.press("ArrowLeft")
        await page.keyboard.type("on ")
        assert await page.evaluate("() => !window.Autopilot.pyodide")  # all before Python
        await wait_mark(page, "autopilot:mounted")
        assert await page.evaluate(BAR_INPUT) == "opening hours on sunday"
        assert await page.evaluate(FOCUSED) == "bar"
        assert await page.evaluate("() => { const i = document.getElementById('autopilot-bar-host').shadowRoot"
                                   ".querySelector('.input'); return [i.selectionStart, i.selectionEnd]; }") == [17, 17]
        await page.keyboard.type("x")
        assert await page.evaluate(BAR_INPUT) == "opening hours on xsunday"
    finally:
        await ctx.close()


async def test_typing_at_once_after_the_shortcut(browser: Any, relay_server: Any, page_server: Any) -> None:
    ctx = await browser.new_context()
    try:
        page = await ctx.new_page()
        await page.goto(site_page(page_server, relay_server, "cold-shortcut"))
        await page.wait_for_selector(TOGGLE, state="visible")
        await page.click("h1")
        await page.keyboard.press("Alt+Shift+KeyA")
        assert await page.evaluate(FOCUSED) == "early"
        await page.keyboard.type(QUESTION)
        await page.keyboard.press("Enter")  # before the relay is joined: held, sent once it is
        assert await page.evaluate("() => !performance.getEntriesByName('autopilot:joined').length")
        await sent_once(page, QUESTION)
    finally:
        await ctx.close()


async def test_typing_at_once_in_a_new_tab_of_the_site(browser: Any, relay_server: Any, page_server: Any) -> None:
    """A second tab of a site whose first tab started the widget (its snapshot stored, the same browser profile): the
    click there shows the composer focused at once too, and what the reader types arrives once, whole."""
    ctx = await browser.new_context()
    try:
        first = await ctx.new_page()
        await first.goto(site_page(page_server, relay_server, "tab-1"))
        await first.wait_for_selector(TOGGLE, state="visible")
        await first.click(TOGGLE)
        await wait_mark(first, "autopilot:joined")
        tab = await ctx.new_page()
        await tab.goto(site_page(page_server, relay_server, "tab-2"))
        await tab.wait_for_selector(TOGGLE, state="visible")
        await tab.click(TOGGLE)
        assert await tab.evaluate(FOCUSED) in ("early", "bar")  # the frame, or the bar if Python was that quick
        await tab.keyboard.type(QUESTION, delay=60)
        await tab.keyboard.press("Enter")
        await sent_once(tab, QUESTION)
        assert await tab.evaluate(FOCUSED) == "bar"
    finally:
        await ctx.close()


async def test_a_second_view_with_the_bar_left_open(browser: Any, relay_server: Any, page_server: Any) -> None:
    """The bar reopens by itself at once, focused; the reader's click at that moment keeps it open (20 of 20 in the
    issue's goal: here each of three later views)."""
    ctx = await browser.new_context()
    try:
        page = await ctx.new_page()
        viewport = page.viewport_size
        first = site_page(page_server, relay_server, "left-open-1")
        await page.goto(first)
        await page.wait_for_selector(TOGGLE, state="visible")
        await page.click(TOGGLE)
        await wait_mark(page, "autopilot:joined")
        assert await page.evaluate("sessionStorage.getItem('autopilot:open:demo')") == "1"
        for n in (2, 3, 4):
            await page.goto(site_page(page_server, relay_server, f"left-open-{n}"))
            # The early click, at once after the load: it meets the bar reopening by itself. The mouse at the
            # toggle's place (bottom right, 20 px off the edges, 56 px wide), not page.click or a look at the page
            # first: those wait until a page busy restoring Python is idle again, later than a reader's click.
            await page.mouse.click(viewport["width"] - 48, viewport["height"] - 48)
            text = f"question {n} typed at once"
            await page.keyboard.type(text)  # at once too: the bar (the loader's, then Python's) has the focus
            await wait_mark(page, "autopilot:mounted")
            await page.wait_for_timeout(300)
            assert await page.evaluate(BAR_OPEN), n
            assert await page.get_attribute(TOGGLE, "aria-expanded") == "true"
            assert await page.evaluate(BAR_INPUT) == text
            # A click well after the bar showed closes it, as a toggle does.
            await page.wait_for_timeout(1000)
            await page.click(TOGGLE)
            assert not await page.evaluate(BAR_OPEN)
            await page.click(TOGGLE)
            assert await page.evaluate(BAR_OPEN)
    finally:
        await ctx.close()


async def test_escape_closes_the_early_frame_and_keeps_the_text(browser: Any, relay_server: Any,
                                                                  page_server: Any) -> None:
    ctx = await browser.new_context()
    try:
        page = await ctx.new_page()
        await page.goto(site_page(page_server, relay_server, "cold-escape"))
        await page.wait_for_selector(TOGGLE, state="visible")
        await page.click(TOGGLE)
        await page.keyboard.type("kept for later")
        await page.keyboard.press("Escape")
        assert await page.get_attribute(TOGGLE, "aria-expanded") == "false"
        assert await page.evaluate(
            "() => document.getElementById('autopilot-toggle-host').shadowRoot.activeElement.className") == "toggle"
        # Python mounts the bar closed (the reader closed it), with the text in its composer.
        await wait_mark(page, "autopilot:mounted")
        assert not await page.evaluate(BAR_OPEN)
        assert await page.evaluate(BAR_INPUT) == "kept for later"
        assert await page.evaluate(SENT) == []
    finally:
        await ctx.close()


async def test_a_throttled_cold_view_loses_no_key(browser: Any, relay_server: Any, page_server: Any) -> None:
    """10 Mbit/s, 40 ms RTT, CPU 4× slower: the composer is there at the click all the same."""
    ctx = await browser.new_context()
    try:
        page = await ctx.new_page()
        cdp = await ctx.new_cdp_session(page)
        await cdp.send("Network.enable")
        await cdp.send("Network.emulateNetworkConditions", {
            "offline": False, "latency": 40, "downloadThroughput": 10e6 / 8, "uploadThroughput": 10e6 / 8})
        await cdp.send("Emulation.setCPUThrottlingRate", {"rate": 4})
        await page.goto(site_page(page_server, relay_server, "cold-throttled"), timeout=120_000)
        await page.wait_for_selector(TOGGLE, state="visible")
        await page.click(TOGGLE)
        assert await page.evaluate(FOCUSED) == "early"
        await page.keyboard.type(QUESTION, delay=60)
        await page.keyboard.press("Enter")
        await page.wait_for_function(f"() => ({SENT})().length > 0", timeout=180_000)
        await page.wait_for_timeout(1500)
        assert await page.evaluate(SENT) == [QUESTION]
    finally:
        await ctx.close()


@pytest.mark.parametrize("key", ["Enter", "Space"])
async def test_keyboard_only_enter_or_space_on_the_toggle(browser: Any, relay_server: Any, page_server: Any,
                                                           key: str) -> None:
    """Tab to the toggle, Enter or Space: the composer has the focus at once, so the keys that follow (a second
    Enter or Space among them) go into it and never close the bar just opened."""
    ctx = await browser.new_context()
    try:
        page = await ctx.new_page()
        await page.goto(site_page(page_server, relay_server, f"keyboard-{key.lower()}"))
        await page.wait_for_selector(TOGGLE, state="visible")
        for _ in range(5):
            await page.keyboard.press("Tab")
            if await page.evaluate("() => document.activeElement && document.activeElement.id") == \
                    "autopilot-toggle-host":
                break
        await page.keyboard.press(key)
        assert await page.evaluate(FOCUSED) == "early"
        await page.keyboard.press(key)  # the same key again, at once: it types, it does not close
        await page.keyboard.type(QUESTION)
        assert await page.get_attribute(TOGGLE, "aria-expanded") == "true"
        await page.keyboard.press("Enter")
        text = QUESTION if key == "Enter" else " " + QUESTION
        await page.wait_for_function(f"() => ({SENT})().length > 0", timeout=60_000)
        await page.wait_for_timeout(1500)
        assert [s.strip() for s in await page.evaluate(SENT)] == [text.strip()]
        assert await page.evaluate(BAR_OPEN)
    finally:
        await ctx.close()


async def test_a_toggle_click_after_working_in_the_bar_closes_it(browser: Any, relay_server: Any,
                                                                  page_server: Any) -> None:
    """A click that meets the bar showing keeps it open (the just-opened second); once the reader clicked or typed in
    the bar, the toggle closes it at once, however soon after it opened."""
    ctx = await browser.new_context()
    try:
        page = await ctx.new_page()
        await page.goto(site_page(page_server, relay_server, "worked-in"))
        await page.wait_for_selector(TOGGLE, state="visible")
        await page.click(TOGGLE)
        await wait_mark(page, "autopilot:joined")
        await page.wait_for_function(BAR_OPEN)
        await page.wait_for_timeout(1100)
        await page.click(TOGGLE)  # a second after it showed: the toggle closes it
        assert not await page.evaluate(BAR_OPEN)
        await page.click(TOGGLE)  # open again (Python's bar now): the just-opened second starts
        t0 = await page.evaluate("() => performance.now()")
        await page.click("#autopilot-bar-host >> textarea.input")
        await page.keyboard.type("x")
        await page.click(TOGGLE)
        assert await page.evaluate("() => performance.now()") - t0 < 1000  # within the just-opened second
        assert not await page.evaluate(BAR_OPEN)
        assert await page.get_attribute(TOGGLE, "aria-expanded") == "false"
    finally:
        await ctx.close()


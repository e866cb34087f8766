"""The bar on a host site's own pages (Chromium): it follows the site's theme switch, stays open across the site's
pages, keeps its keys from a host search overlay and does not reopen it on close, shows bidi text without letting
an override reverse a line, shows a stopped call as stopped, and takes the documented theming hooks."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import test_bar
from support import open_page, wait_mark
from test_bar import js_root, last_message, open_bar, py, q, send, user_count, wait_turn_done

pytestmark = pytest.mark.browser

bar_relay, bar_page = test_bar.fixture_bar_relay, test_bar.fixture_bar_page  # the fixtures, shared with test_bar

SCRIPT = '<script src="/widget/autopilot.js" data-relay="{relay}" data-app="demo" {extra}></script>'


def host_page(relay: Any, body: str, *, head: str = "", extra: str = "") -> str:
    return ('<!doctype html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
            f"<title>host</title>{head}</head><body>{body}"
            + SCRIPT.replace("{relay}", relay.url).replace("{extra}", extra) + "</body></html>")


async def scheme(page: Any) -> str:
    """The bar's colour scheme now ("light" or "dark"), from its computed text colour."""
    color = await js_root(page, "return getComputedStyle(r.querySelector('.panel')).color;")
    r, g, b = (int(x) for x in color[color.index("(") + 1:color.index(")")].split(",")[:3])
    return "dark" if min(r, g, b) > 150 else "light"


async def test_the_bar_follows_the_pages_theme_switch_and_data_theme_overrides_it(browser, page_server, bar_relay):
    url = page_server.add("/__test__/host-theme.html", host_page(
        bar_relay, '<main><p>A MkDocs-like page.</p></main>', extra='data-open="true"'))
    ctx = await browser.new_context(color_scheme="dark")
    _, page, log = await open_page(browser, url, context=ctx)
    try:
        await page.wait_for_selector(q("section.panel"), state="visible")
        # The page says nothing: the browser's (dark) preference.
        assert await scheme(page) == "dark"
        # MkDocs-Material's palette switch, both ways, in a dark browser.
        await page.evaluate("document.body.setAttribute('data-md-color-scheme', 'default')")
        await page.wait_for_function("document.getElementById('autopilot-bar-host').dataset.pageTheme === 'light'")
        assert await scheme(page) == "light"
        await page.evaluate("document.body.setAttribute('data-md-color-scheme', 'slate')")
        await page.wait_for_function("document.getElementById('autopilot-bar-host').dataset.pageTheme === 'dark'")
        assert await scheme(page) == "dark"
        # A class on <html> (Tailwind's `dark`, here `light`), and an opaque page background.
        await page.evaluate("document.body.removeAttribute('data-md-color-scheme');"
                            "document.documentElement.classList.add('light')")
        await page.wait_for_function("document.getElementById('autopilot-bar-host').dataset.pageTheme === 'light'")
        await page.evaluate("document.documentElement.classList.remove('light');"
                            "document.body.style.background = 'rgb(250, 250, 245)'")
        await page.wait_for_function("document.getElementById('autopilot-bar-host').dataset.pageTheme === 'light'")
        assert await scheme(page) == "light"
        await page.evaluate("document.body.style.background = 'rgb(18, 18, 24)'")
        await page.wait_for_function("document.getElementById('autopilot-bar-host').dataset.pageTheme === 'dark'")
        # The page's own color-scheme naming one scheme.
        await page.evaluate("document.body.style.background = ''; document.documentElement.style.colorScheme = 'light'")
        await page.wait_for_function("document.getElementById('autopilot-bar-host').dataset.pageTheme === 'light'")
        assert await scheme(page) == "light"
        # data-theme on the host wins over the page.
        await page.evaluate("document.getElementById('autopilot-bar-host').dataset.theme = 'dark'")
        assert await scheme(page) == "dark"
        # Back to saying nothing: the browser's preference again.
        await page.evaluate("delete document.getElementById('autopilot-bar-host').dataset.theme;"
                            "document.documentElement.style.colorScheme = ''")
        await page.wait_for_function("!('pageTheme' in document.getElementById('autopilot-bar-host').dataset)")
        assert await scheme(page) == "dark"
        assert log.page_errors == []
    finally:
        await ctx.close()


async def test_the_open_bar_stays_open_across_the_sites_pages_per_tab(browser, page_server, bar_relay):
    one = page_server.add("/__test__/site-one.html", host_page(bar_relay, "<main><h1>One</h1></main>"))
    two = page_server.add("/__test__/site-two.html", host_page(bar_relay, "<main><h1>Two</h1></main>"))
    ctx = await browser.new_context()
    _, page, log = await open_page(browser, one, context=ctx)
    try:
        assert await page.is_hidden(q("section.panel"))
        await open_bar(page)
        await page.goto(two)
        await wait_mark(page, "autopilot:mounted")
        await page.wait_for_selector(q("section.panel"), state="visible")
        # Closed on this page: the next one starts closed.
        await page.click(q("button.close"))
        await page.goto(one)
        await page.hover("#autopilot-toggle-host >> button.toggle")  # a later page view starts on intent
        await wait_mark(page, "autopilot:joined")
        assert await page.is_hidden(q("section.panel"))
        # Per tab: opening it here does not open it in another tab of the same site.
        await open_bar(page)
        other = await ctx.new_page()
        await other.goto(two)
        await other.hover("#autopilot-toggle-host >> button.toggle")  # a first view starts on intent too
        await wait_mark(other, "autopilot:joined")
        assert await other.is_hidden(q("section.panel"))
        assert log.page_errors == []
    finally:
        await ctx.close()


#: A search box like MkDocs-Material's: focusing it opens an overlay; while the overlay is open, any key typed
#: anywhere goes to the search box (a keydown listener on window refocuses it); Escape closes the overlay.
SEARCH = """
<main><button id="opener" type="button">Page button</button>
<div class="search"><input id="search" type="search" aria-label="Search">
<div id="overlay" hidden>results</div></div></main>
<script>
  window.__opened = 0;
  const search = document.getElementById('search'), overlay = document.getElementById('overlay');
  search.addEventListener('focus', () => { overlay.hidden = false; window.__opened += 1; });
  window.addEventListener('keydown', (e) => {
    if (overlay.hidden) return;
    if (e.key === 'Escape') { overlay.hidden = true; search.blur(); return; }
    if (document.activeElement !== search) search.focus();
  });
</script>"""


async def test_a_host_search_overlay_gets_no_keys_from_the_bar_and_is_not_reopened(browser, page_server, bar_relay):
    url = page_server.add("/__test__/host-search.html", host_page(bar_relay, SEARCH))
    _, page, log = await open_page(browser, url)
    try:
        await page.focus("#search")
        assert await page.evaluate("window.__opened") == 1
        await page.keyboard.press("Alt+Shift+KeyA")
        await page.wait_for_selector(q("section.panel"), state="visible")
        await page.keyboard.type("hello")
        # The keys stayed in the bar: the composer has them, the search box none, and focus is still in the bar.
        assert await page.input_value(q("textarea.input")) == "hello"
        assert await page.input_value("#search") == ""
        assert await page.evaluate("document.activeElement.id") == "autopilot-bar-host"
        await page.keyboard.press("Escape")
        assert await page.is_hidden(q("section.panel"))
        # Focus went to the toggle, not back to the search box (which would have reopened its overlay).
        assert await page.evaluate("document.activeElement.id") == "autopilot-toggle-host"
        assert await page.evaluate("window.__opened") == 1
        # A page button that opened the bar gets the focus back (the overlay closed first: while it is open, it
        # takes the focus back on any key, Alt and Shift included).
        await page.focus("#search")
        await page.keyboard.press("Escape")
        await page.focus("#opener")
        await page.keyboard.press("Alt+Shift+KeyA")
        await page.wait_for_selector(q("section.panel"), state="visible")
        await page.keyboard.press("Escape")
        assert await page.evaluate("document.activeElement.id") == "opener"
        assert log.page_errors == []
    finally:
        await page.context.close()


#: x positions of each character of ``needle`` in the first text node under ``sel`` (in the bar) containing it.
GLYPHS = """
const [sel, needle] = arg;
const root = r.querySelector(sel);
const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
for (let n = walker.nextNode(); n; n = walker.nextNode()) {
  const at = n.data.indexOf(needle);
  if (at < 0) continue;
  const out = [];
  for (let i = at; i < at + needle.length; i++) {
    const range = document.createRange();
    range.setStart(n, i); range.setEnd(n, i + 1);
    out.push(range.getBoundingClientRect().left);
  }
  return out;
}
return null;"""


async def reads_left_to_right(page: Any, sel: str, needle: str) -> bool:
    xs = await js_root(page, GLYPHS, [sel, needle])
    assert xs is not None, (sel, needle)
    return all(a < b for a, b in itertools.pairwise(xs))


THEMED = """<style>
  :root { --autopilot-radius-small: 3px; --autopilot-radius-bubble-tail: 0px; --autopilot-radius-pill: 4px;
          --autopilot-radius-code: 2px; }
  #autopilot-bar-host::part(logo) { background: rgb(1, 2, 3); }
  #autopilot-bar-host::part(logo-icon) { display: none; }
  #autopilot-toggle-host::part(toggle-icon) { display: none; }
  #autopilot-bar-host::part(header-button-pressed) { background: rgb(250, 0, 0); }
</style>"""


async def test_bidi_isolation_and_the_theming_hooks(browser, page_server, bar_relay):
    url = page_server.add("/__test__/host-bidi.html", host_page(bar_relay, "<main><p>Host</p></main>", head=THEMED,
                                                                extra='data-open="true"'))
    _, page, log = await open_page(browser, url)
    try:
        await page.wait_for_selector(q("section.panel"), state="visible")
        # A right-to-left override in the reader's text, in the model's Markdown and in a function's name.
        await send(page, "abc \u202edef ghi")
        await py(page, r"""
client.session.add_message({"id": "bidi-1", "role": "assistant",
    "content": "Last *words* \u202e<img src=x onerror=alert(1)> and `more` after",
    "function_calls": [{"id": "bidi-call", "name": "\u202eevil", "arguments": {}, "status": "success",
                        "result": {"ok": True}, "duration_ms": 1.0, "total_ms": 2.0}]})
client.events.emit("messagesChanged", None)
bar.flush()
True""")
        assert await reads_left_to_right(page, ".messages", "def ghi")
        answer = '[data-key="bidi-1"] .content'
        assert await reads_left_to_right(page, answer, "img src")
        assert await reads_left_to_right(page, answer, " and ")
        assert await reads_left_to_right(page, '[data-key="bidi-1"] .call', "Done")
        # Every message's content is an isolate with its own base direction.
        dirs = await js_root(page, "return [...r.querySelectorAll('.message .content')].map(c => c.dir);")
        assert dirs and set(dirs) == {"auto"}
        # Theming hooks: the send button, the bubble's tail corner, pills, code chips, the logo, the toggle icon,
        # a pressed header button.
        styles = await js_root(page, """
            const s = (sel, p) => getComputedStyle(r.querySelector(sel)).getPropertyValue(p);
            return [s('button.send', 'border-top-left-radius'),
                    s('.message.user .bubble', 'border-bottom-right-radius'),
                    s('[data-key="bidi-1"] .call-summary', 'border-top-left-radius'),
                    s('[data-key="bidi-1"] .content code', 'border-top-left-radius'),
                    s('.logo', 'background-color'), s('.logo svg', 'display')];""")
        assert styles == ["3px", "0px", "4px", "2px", "rgb(1, 2, 3)", "none"]
        toggle_icon = await page.evaluate("getComputedStyle(document.getElementById('autopilot-toggle-host')"
                                          ".shadowRoot.querySelector('button svg')).display")
        assert toggle_icon == "none"
        await page.click(q("button.activity-button"))
        assert await js_root(page, "return r.querySelector('button.activity-button').getAttribute('part');") \
            == "activity-button header-button header-button-pressed"
        await page.wait_for_function("""() => getComputedStyle(document.getElementById('autopilot-bar-host')
            .shadowRoot.querySelector('button.activity-button')).backgroundColor === 'rgb(250, 0, 0)'""")
        await page.click(q("button.activity-button"))
        assert await js_root(page, "return r.querySelector('button.activity-button').getAttribute('part');") \
            == "activity-button header-button"
        assert log.page_errors == []
    finally:
        await page.context.close()


async def test_a_stopped_call_says_stopped_without_a_console_warning_and_the_dialog_is_named_once(bar_page):
    page = bar_page.page
    warnings: list[str] = []
    page.on("console", lambda m: warnings.append(m.text) if m.type in ("warning", "error") else None)
    await open_bar(page)
    assert await js_root(page, "return r.querySelector('.panel').getAttribute('aria-label');") == "Lumen assistant"
    await py(page, """
SENT = []
def _sent(p):
    SENT.append(p["ack"])
    js.window.__sent = True
OFF = client.on("functionResponseSent", _sent)
True""")
    n = await user_count(page)
    await send(page, 'check_stock {"sku": "nimbus"}', wait=False)
    await page.wait_for_selector(q('.call[data-status="running"]'))
    await page.click(q("button.stop"))
    await wait_turn_done(page, n + 1)
    call = (await last_message(page, "assistant")).locator(".call").last
    assert await call.locator(".call-status").text_content() == "Stopped"
    assert await call.get_attribute("data-stopped") == "true"
    assert "call-stopped" in (await call.get_attribute("part")).split()
    colors = await js_root(page, """const c = [...r.querySelectorAll('.call[data-stopped="true"]')].pop();
        return [getComputedStyle(c.querySelector('.call-status')).color,
                getComputedStyle(r.querySelector('.panel')).getPropertyValue('--_danger').trim()];""")
    assert colors[0] != colors[1]
    # The page's handler finished after the stop; the relay refused its response (the call had ended): no warning.
    await page.wait_for_function("window.__sent === true")
    acks = await py(page, "OFF()\nSENT")
    assert acks and acks[0]["ok"] is False and acks[0]["error"]["code"] == "call_not_pending"
    assert [w for w in warnings if "call_not_pending" in w or "refused function response" in w] == []
    assert bar_page.log.page_errors == []

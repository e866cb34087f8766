"""Later page views of a multi-page site: Python starts only when the reader wants the widget.

The first page view of a tab prepares Python in the pre-warm worker when the browser is idle (the default boot)
and starts it on the page on the reader's intent; once it started or prepared in this tab, the next pages of the
site wait for the reader's intent (hover or focus on the toggle, a click, the shortcut) without preparing again,
unless the bar was open or a turn is still running. A new tab is a first view again.
"""

from __future__ import annotations

from typing import Any

import pytest
from support import open_page, py_eval, wait_mark

pytestmark = pytest.mark.browser

TOGGLE = "#autopilot-toggle-host >> button.toggle"

# Resolves once the browser has run an idle callback queued after the page's load event: the loader's idle boot
# (queued on load) has had its turn by then.
AFTER_IDLE = """() => new Promise((resolve) => {
  const idle = () => requestIdleCallback(() => resolve(), { timeout: 2000 });
  if (document.readyState === "complete") idle(); else window.addEventListener("load", idle, { once: true });
})"""

MARKS = "() => performance.getEntriesByType('mark').map(m => m.name)"

FUNCTION = """<script type="autopilot-python">
from widget import get_client

@get_client().function
def page_title() -> str:
    \"\"\"The page's title.\"\"\"
    return "later views"
</script>"""


def site_page(page_server: Any, relay: Any, n: int) -> str:
    """Page ``n`` of a small site with the default tag (idle boot) and a page function."""
    html = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
            f"<title>site {n}</title></head><body><main><h1>Page {n}</h1></main>{FUNCTION}"
            f'<script src="{relay.url}/widget/autopilot.js" data-app="demo" defer></script></body></html>')
    return page_server.add(f"/__later__/{n}.html", html)


async def not_started_after_idle(page: Any) -> None:
    await page.wait_for_selector(TOGGLE, state="visible")
    await page.evaluate(AFTER_IDLE)
    assert "autopilot:boot" not in await page.evaluate(MARKS)
    assert await page.evaluate("() => !window.Autopilot.pyodide")


async def test_later_page_views_start_python_on_intent_only(browser: Any, relay_server: Any, page_server: Any) -> None:
    urls = [site_page(page_server, relay_server, n) for n in (1, 2, 3)]
    ctx, page, log = await open_page(browser, urls[0])  # first view: idle boot, joined
    try:
        assert await page.evaluate("sessionStorage.getItem('autopilot:started:demo')") == "1"
        # A later page view: nothing starts until the reader shows intent.
        await page.goto(urls[1])
        await not_started_after_idle(page)
        await page.hover(TOGGLE)
        await wait_mark(page, "autopilot:joined")
        # The page's function is registered before anything can be sent.
        registered = "from widget import get_client\nget_client().registry.get('page_title') is not None"
        assert await py_eval(page, registered) is True
        # A running turn marks the tab busy (the next view starts at once); its end clears the mark.
        await page.evaluate("""() => { window.__busy = [];
          window.Autopilot.on('completion.started', () =>
            window.__busy.push(sessionStorage.getItem('autopilot:busy:demo'))); }""")
        assert await page.evaluate("window.Autopilot.send('hello')") is True
        await page.wait_for_function("() => window.__busy.length > 0")
        assert await page.evaluate("window.__busy[0]") == "1"
        await page.wait_for_function("() => sessionStorage.getItem('autopilot:busy:demo') === null")
        # Busy when the reader navigates: the next page view starts without intent. The turn ended on the relay
        # while the reader was away: once joined to the idle conversation, that view clears the marker.
        await page.evaluate("sessionStorage.setItem('autopilot:busy:demo', '1')")
        await page.goto(urls[2])
        await wait_mark(page, "autopilot:joined")
        await page.wait_for_function("() => sessionStorage.getItem('autopilot:busy:demo') === null")
        # A new tab of the same site is a first view again (per-tab marker): prepared on idle, started on intent.
        other = await ctx.new_page()
        await other.goto(urls[1])
        await wait_mark(other, "autopilot:prepared")
        await other.hover(TOGGLE)
        await wait_mark(other, "autopilot:joined")
        assert log.page_errors == []
    finally:
        await ctx.close()


async def test_the_shortcut_on_a_later_page_view_starts_and_opens(browser: Any, relay_server: Any,
                                                                   page_server: Any) -> None:
    urls = [site_page(page_server, relay_server, n) for n in (4, 5)]
    ctx, page, _ = await open_page(browser, urls[0])
    try:
        await page.goto(urls[1])
        await not_started_after_idle(page)
        await page.keyboard.press("Alt+Shift+A")
        await page.wait_for_selector("#autopilot-bar-host >> section.panel", state="visible", timeout=60_000)
    finally:
        await ctx.close()

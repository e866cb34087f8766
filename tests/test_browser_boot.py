"""In a real browser: one script tag boots Python offline, mounts the bar, joins the relay."""

from __future__ import annotations

import asyncio
import re

import pytest
from support import PageLog, open_page, py_eval, wait_mark

from widget.relay.storage import SQLiteStore

pytestmark = pytest.mark.browser

TOGGLE = "#autopilot-toggle-host >> button.toggle"
PANEL = "#autopilot-bar-host >> section.panel"


async def held_page(browser, pattern: str):
    """A fresh page whose requests matching ``pattern`` wait until the returned event is set."""
    ctx = await browser.new_context()
    page = await ctx.new_page()
    release = asyncio.Event()

    async def hold(route):
        await release.wait()
        await route.continue_()

    await page.route(re.compile(pattern), hold)
    return ctx, page, release


async def test_toggle_paints_before_python_and_boot_joins(browser, relay_server):
    # Python cannot finish booting before the toggle has been checked.
    ctx, page, release = await held_page(browser, r".*/pyodide/pyodide\.mjs$")
    log = PageLog()
    page.on("request", lambda r: log.requests.append(r.url))
    page.on("websocket", lambda ws: log.websockets.append(ws.url))
    page.on("console", lambda m: log.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: log.page_errors.append(str(e)))
    try:
        await page.goto(relay_server.url + "/")
        await page.wait_for_selector(TOGGLE, state="visible", timeout=5000)
        # The toggle is up while Python is still booting.
        before = await page.evaluate("performance.getEntriesByName('autopilot:pyodide').length")
        assert before == 0
        release.set()
        await page.hover(TOGGLE)  # a first view prepares on idle and starts on the reader's intent
        await wait_mark(page, "autopilot:joined")
        marks = await page.evaluate(
            "Object.fromEntries(performance.getEntriesByType('mark').map(m => [m.name, m.startTime]))"
        )
        assert marks["autopilot:toggle"] < marks["autopilot:pyodide"] < marks["autopilot:mounted"]
        assert marks["autopilot:toggle"] - marks["autopilot:loader"] < 50
        # Python mounted the bar in its own shadow root.
        has_shadow = await page.evaluate(
            "!!document.getElementById('autopilot-bar-host').shadowRoot.querySelector('section.panel')"
        )
        assert has_shadow
        assert await py_eval(page, "from widget import get_client\nget_client().connection_state") == "connected"
        # No request left the local host, and nothing went wrong on the console.
        assert log.foreign_hosts({"127.0.0.1"}) == []
        assert any(ws.startswith("ws://127.0.0.1") for ws in log.websockets)
        assert log.console_errors == [] and log.page_errors == []
    finally:
        await ctx.close()


async def test_page_functions_reach_the_relays_stored_state(demo_page):
    conv_id = await py_eval(demo_page.page, "from widget import get_client\nget_client().conversation['id']")
    names = await py_eval(
        demo_page.page,
        "from widget import get_client\nsorted(f['name'] for f in get_client().get_registered_functions())",
    )
    assert {"get_selection", "add_to_cart", "empty_cart", "list_products"} <= set(names)
    # Read the relay's own database through its store: the page's functions and context are stored there.
    store = SQLiteStore(str(demo_page.relay.db))
    await store.open()
    try:
        doc = await store.get_state(conv_id)
    finally:
        await store.close()
    assert set(doc["autopilot"]["functions"]) >= {"get_selection", "add_to_cart"}
    assert doc["autopilot"]["functions"]["empty_cart"]["sensitive"] is True
    assert doc["autopilot"]["context"]["page"] == "home"


async def test_host_styles_do_not_leak_in_and_ours_do_not_leak_out(demo_page):
    page = demo_page.page
    host_font = await page.evaluate("getComputedStyle(document.body).fontFamily")
    assert "Georgia" in host_font
    panel_font = await page.evaluate(
        "getComputedStyle(document.getElementById('autopilot-bar-host').shadowRoot.querySelector('.panel')).fontFamily"
    )
    assert "Georgia" not in panel_font
    # The page's own buttons keep the page's look next to ours.
    bg = await page.evaluate("getComputedStyle(document.querySelector('.product button')).backgroundColor")
    assert bg == "rgb(43, 33, 24)"


async def test_reload_resumes_the_same_conversation(browser, relay_server):
    ctx, page, log = await open_page(browser, relay_server.url + "/")
    try:
        first = await py_eval(page, "from widget import get_client\nget_client().conversation['id']")
        await page.reload()
        await page.hover(TOGGLE)  # a later page view of this tab starts on the reader's intent
        await wait_mark(page, "autopilot:joined")
        second = await py_eval(page, "from widget import get_client\nget_client().conversation['id']")
        assert first == second
        stored = await page.evaluate("localStorage.getItem('autopilot:conversation:demo')")
        assert stored.endswith(first)
    finally:
        await ctx.close()


async def test_toggle_click_before_ready_is_queued_and_opens(browser, relay_server):
    # Python cannot be ready before the click has happened.
    ctx, page, release = await held_page(browser, r".*/bundle\.zip$")
    try:
        await page.goto(relay_server.url + "/")
        await page.click(TOGGLE)
        status = page.locator("#autopilot-toggle-host >> .status")
        assert "Starting" in (await status.text_content() or "")
        assert await page.get_attribute(TOGGLE, "aria-busy") == "true"
        release.set()
        await page.wait_for_selector(PANEL, state="visible", timeout=60000)
        assert await status.is_hidden()
        assert await page.get_attribute(TOGGLE, "aria-expanded") == "true"
    finally:
        await ctx.close()


async def joined_marks(page, url: str | None = None) -> list[str]:
    """Load ``url`` (or reload), wait until the widget joined, and return the names of the boot marks."""
    if url is None:
        await page.reload()
    else:
        await page.goto(url)
    await page.hover(TOGGLE)  # a later page view of this tab starts on the reader's intent (a first one on idle)
    await wait_mark(page, "autopilot:joined")
    return await page.evaluate("performance.getEntriesByType('mark').map(m => m.name)")


async def test_first_visit_restores_the_prewarm_workers_snapshot(browser, relay_server):
    """prewarm "handoff": a first visit (no pre-warm flag for this build yet) starts Python once, in the worker:
    the page restores its snapshot (with the widget imported and Markdown rendered) and its compiled module, then
    works as usual; a later visit runs no worker."""
    ctx = await browser.new_context()
    await ctx.add_init_script("window.AutopilotConfig = {prewarm: 'handoff'};")
    page = await ctx.new_page()
    try:
        assert "autopilot:handoff" in await joined_marks(page, relay_server.url + "/")
        got = await py_eval(page, "import sys\nfrom widget.core import markdown as m\n"
                                  "[m._md is not None, 'markdown.core' in sys.modules, m.render_markdown('*x*')]")
        assert got == [True, True, "<p><em>x</em></p>"]
        # Each visitor's Python has its own random state (the snapshot's is reseeded).
        a = await py_eval(page, "import random\nrandom.getrandbits(64)")
        assert "autopilot:handoff" not in await joined_marks(page)
        assert await py_eval(page, "import random\nrandom.getrandbits(64)") != a
    finally:
        await ctx.close()


async def test_default_first_visit_starts_python_once_in_a_worker_per_tab(browser, relay_server):
    """The default: a tab's first start runs the worker, which hands the page its started Python; a reload of
    the tab runs none."""
    ctx = await browser.new_context()
    page = await ctx.new_page()
    try:
        marks = await joined_marks(page, relay_server.url + "/")
        assert "autopilot:prewarmed" in marks and "autopilot:handoff" in marks
        assert "autopilot:prewarmed" not in await joined_marks(page)
    finally:
        await ctx.close()


async def test_warm_mode_only_compiles_in_the_worker(browser, relay_server):
    """prewarm "warm": the worker runs on a tab's first start, then the page starts Python itself."""
    ctx = await browser.new_context()
    await ctx.add_init_script("window.AutopilotConfig = {prewarm: 'warm'};")
    page = await ctx.new_page()
    try:
        marks = await joined_marks(page, relay_server.url + "/")
        assert "autopilot:prewarmed" in marks and "autopilot:handoff" not in marks
        assert "autopilot:prewarmed" not in await joined_marks(page)
    finally:
        await ctx.close()


async def test_without_the_worker_the_first_answer_is_prepared_after_the_boot(browser, relay_server):
    """Without the worker's snapshot, Markdown is imported and built in small steps after page Python ran, so
    the first answer does not pay for it in one long task."""
    ctx = await browser.new_context()
    await ctx.add_init_script("window.AutopilotConfig = {prewarm: false};")
    page = await ctx.new_page()
    try:
        assert "autopilot:handoff" not in await joined_marks(page, relay_server.url + "/")
        await page.wait_for_function(
            "() => window.Autopilot.pyodide.runPython(\"import widget.core.markdown as m\\nm._md is not None\")",
            timeout=15_000)
        assert await py_eval(page, "from widget.core.markdown import render_markdown\nrender_markdown('`y`')") == \
            "<p><code>y</code></p>"
    finally:
        await ctx.close()


async def test_a_first_view_prepares_on_idle_and_starts_on_intent(browser, relay_server):
    """The default boot on a tab's first view: on idle the worker starts Python and snapshots it, but nothing
    starts on the page (no Python, no socket) until the reader hovers the toggle; then the page restores the
    snapshot and joins."""
    ctx = await browser.new_context()
    page = await ctx.new_page()
    sockets: list[str] = []
    api: list[str] = []
    page.on("websocket", lambda ws: sockets.append(ws.url))
    page.on("request", lambda r: api.append(r.method + " " + r.url) if "/api/" in r.url else None)
    try:
        await page.goto(relay_server.url + "/")
        # (a start tied to the preparation would have marked its boot by the time this mark is seen)
        await wait_mark(page, "autopilot:prepared")
        names = await page.evaluate("performance.getEntriesByType('mark').map(m => m.name)")
        assert "autopilot:boot" not in names and "autopilot:pyodide" not in names
        # Nothing on the relay for a visitor who has not reached for the widget: no conversation, no socket.
        assert sockets == [] and api == []
        assert await page.evaluate("sessionStorage.getItem('autopilot:started:demo')") == "1"
        await page.hover(TOGGLE)
        await wait_mark(page, "autopilot:joined")
        marks = await page.evaluate("performance.getEntriesByType('mark').map(m => [m.name, m.startTime])")
        at = {name: t for name, t in reversed(marks)}  # each mark's first time
        assert [name for name, _ in marks].count("autopilot:prepared") == 1, marks
        assert at["autopilot:prepared"] < at["autopilot:boot"] <= at["autopilot:handoff"], marks
        assert any(a.startswith("POST ") and a.endswith("/api/apps/demo/conversations") for a in api), api
        assert await py_eval(page, "from widget import get_client\nget_client().connection_state") == "connected"
    finally:
        await ctx.close()


async def first_view_started_alone(browser, relay_server, config: str) -> list[str]:
    """A first view with ``window.AutopilotConfig = config``, joined with nobody touching it: its boot marks."""
    ctx = await browser.new_context()
    await ctx.add_init_script(f"window.AutopilotConfig = {config};")
    page = await ctx.new_page()
    try:
        await page.goto(relay_server.url + "/")
        await wait_mark(page, "autopilot:joined")
        return await page.evaluate("performance.getEntriesByType('mark').map(m => m.name)")
    finally:
        await ctx.close()


async def test_without_the_hand_over_a_first_view_starts_on_idle(browser, relay_server):
    """prewarm "warm" (the worker only compiles): the first view starts Python on idle, as the default did
    before the hand-over, with no reader's intent."""
    assert "autopilot:handoff" not in await first_view_started_alone(browser, relay_server, "{prewarm: 'warm'}")


async def test_ready_boot_starts_on_idle_from_the_workers_snapshot(browser, relay_server):
    """boot "ready": a first view prepares and then starts on idle, without the reader, restoring the worker's
    snapshot: the bar is connected before the reader reaches for it."""
    assert "autopilot:handoff" in await first_view_started_alone(browser, relay_server, "{boot: 'ready'}")

"""The loader's contract with host pages, in a real browser: any tag order, what a page hears when a start
fails (and why), JSON-only payloads, known event names, the shortcut before Python, PyScript variants.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from support import open_page, wait_mark

pytestmark = pytest.mark.browser

HEAD = ('<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,">'
        "<title>{title}</title></head><body>")
CONTEXT = "JSON.parse(window.Autopilot.pyodide.runPython(" \
    "'import json\\nfrom widget import get_client\\njson.dumps(get_client().get_context())'))"


def loader_page(title: str, relay: str, attrs: str = "", body: str = "") -> str:
    """A page with ``body`` and the loader's tag for app demo with ``attrs``."""
    tag = f'<script src="{relay}/widget/autopilot.js" data-app="demo" {attrs}></script>'
    return HEAD.format(title=title) + body + tag + "</body></html>"
TOGGLE = "#autopilot-toggle-host >> button.toggle"
STATUS = "#autopilot-toggle-host >> .status"
PANEL = "#autopilot-bar-host >> section.panel"


def localhost(url: str) -> str:
    """The same page on http://localhost:<port>: another origin than 127.0.0.1, which the relays here allow."""
    return url.replace("http://127.0.0.1:", "http://localhost:", 1)


async def test_refuses_what_is_not_json_data_and_unknown_event_names(browser, relay_server, page_server):
    """Checked in JS at the call, before Python exists: nothing is dropped or stringified on the way."""
    from widget.protocol import SUBSCRIBABLE_EVENTS

    html = loader_page("json", relay_server.url, 'data-boot="intent"')
    url = page_server.add("/__loader__/json.html", html)
    ctx, page, log = await open_page(browser, url, wait_joined=False)
    try:
        errors = await page.evaluate("""() => {
          const A = window.Autopilot, out = {};
          const t = (name, f) => {
            try { f(); out[name] = null; } catch (e) { out[name] = e.constructor.name + ": " + e.message; } };
          const cyc = {}; cyc.self = cyc;
          t("date", () => A.setContext({when: new Date(0)}));
          t("function", () => A.setContext({f: () => 1}));
          t("nan", () => A.setContext({n: NaN}));
          t("infinity", () => A.updateContext({deep: {x: -Infinity}}));
          t("undefined", () => A.updateContext({a: [1, undefined]}));
          t("undefined_value", () => A.setContext({gone: undefined}));
          t("hole", () => A.setContext({a: [1, , 3]}));
          t("map", () => A.setContext({m: new Map()}));
          t("cycle", () => A.setContext(cyc));
          t("bigint", () => A.setContext({"odd key": 1n}));
          t("parameters", () => A.registerFunction({name: "x", handler() {},
                                                    parameters: {type: "object", default: new Date(0)}}));
          t("fine", () => A.setContext({ok: 1.5, list: [1, "a", null, true, {b: []}], "odd key": "x"}));
          t("unknown_event", () => A.on("functionStart", () => {}));
          t("known_event", () => A.on("functionCall", () => {}));
          t("any_event", () => A.on("*", () => {}));
          return out; }""")
        assert errors["date"] == "TypeError: [autopilot] setContext(): context.when is a Date " \
            "(send date.toISOString()), " \
            "not JSON data (plain objects, arrays, strings, finite numbers, booleans, null)"
        assert "context.f is a function, not JSON data" in errors["function"]
        assert "context.n is NaN" in errors["nan"]
        assert "updateContext(): partial.deep.x is -Infinity" in errors["infinity"]
        assert "partial.a[1] is undefined" in errors["undefined"]
        assert "context.gone is undefined" in errors["undefined_value"]
        assert "context.a[1] is a hole" in errors["hole"]
        assert "context.m is a Map" in errors["map"]
        assert "context.self refers back to itself" in errors["cycle"]
        assert 'context["odd key"] is a bigint' in errors["bigint"]
        assert "registerFunction(): parameters.default is a Date" in errors["parameters"]
        assert errors["fine"] is None and errors["known_event"] is None and errors["any_event"] is None
        assert errors["unknown_event"].startswith(
            'TypeError: [autopilot] on(): unknown event "functionStart"; the events are ')
        # The loader knows exactly the names the Python client accepts.
        listed = errors["unknown_event"].split("the events are ", 1)[1].split(", ")
        assert set(listed) == set(SUBSCRIBABLE_EVENTS) and len(listed) == len(set(listed))
        assert not [u for u in log.requests if "pyodide" in u]  # all of it before any boot
        assert log.page_errors == []
    finally:
        await ctx.close()


ORDER_PAGE = HEAD + """<p>queue above a deferred loader</p>
<script>
window.__calls = [];
window.AutopilotConfig = {{
  onReady: (a) => __calls.push(["onReady", a === window.Autopilot]),
  onError: (e) => __calls.push(["onError", e.message]),
}};
window.addEventListener("autopilot:ready", (e) => __calls.push(["event", e.detail === window.Autopilot]));
(window.Autopilot = window.Autopilot || []).push((A) => {{
  __calls.push(["queued", A === window.Autopilot, typeof A.handle]);
  A.setContext({{from: "queue"}});
  A.ready.then((a) => __calls.push(["ready", a === A]));
}});
</script>
<script src="{relay}/widget/autopilot.js" data-app="demo" data-boot="eager" defer></script>
<script>
// Still before the deferred loader: the array is the queue.
window.Autopilot.push((A) => A.updateContext({{second: true}}));
window.__wasArray = Array.isArray(window.Autopilot);
</script>
</body></html>"""


async def test_any_tag_order_queue_event_and_callbacks(browser, relay_server, page_server):
    url = page_server.add("/__loader__/order.html", ORDER_PAGE.format(title="order", relay=relay_server.url))
    ctx, page, log = await open_page(browser, url)
    try:
        assert await page.evaluate("window.__wasArray") is True
        await page.wait_for_function("() => __calls.some(c => c[0] === 'ready')")
        calls = await page.evaluate("window.__calls")
        # The queued function ran as the loader started (before Python), then the widget came up once.
        assert calls[0] == ["queued", True, "undefined"]
        assert sorted(c[0] for c in calls) == ["event", "onReady", "queued", "ready"]
        assert all(c[1] is True for c in calls)
        # Later pushes run at once.
        assert await page.evaluate("window.Autopilot.push(A => window.__late = A.handle !== null)") == 1
        assert await page.evaluate("window.__late") is True
        ctx_value = await page.evaluate(CONTEXT)
        assert ctx_value == {"from": "queue", "second": True}
        assert log.page_errors == [] and log.console_errors == []
    finally:
        await ctx.close()


async def test_shortcut_before_python_is_queued_like_a_click(browser, relay_server, page_server):
    html = loader_page("shortcut", relay_server.url, body="<p>page</p>")
    url = page_server.add("/__loader__/shortcut.html", html)
    ctx = await browser.new_context()
    page = await ctx.new_page()
    release = asyncio.Event()

    async def hold(route):
        await release.wait()
        await route.continue_()

    await page.route(re.compile(r".*/bundle\.zip$"), hold)
    try:
        await page.goto(url)
        await page.wait_for_selector(TOGGLE, state="visible")
        await page.keyboard.press("Alt+Shift+KeyA")
        assert "Starting" in (await page.text_content(STATUS) or "")
        assert await page.get_attribute(TOGGLE, "aria-busy") == "true"
        release.set()
        await page.wait_for_selector(PANEL, state="visible", timeout=90_000)
        assert await page.get_attribute(TOGGLE, "aria-expanded") == "true"
        # Python owns the shortcut now: once, not twice (the loader's listener is gone).
        await page.keyboard.press("Alt+Shift+KeyA")
        await page.wait_for_selector(PANEL, state="hidden")
    finally:
        release.set()
        await ctx.close()


REFUSED_PAGE = HEAD + """<p>an origin the relay does not allow</p>
<script>
window.__events = [];
window.AutopilotConfig = {{onError: (e) => __events.push(["onError", e.message])}};
window.addEventListener("autopilot:error", (e) => __events.push(["event", e.detail.message]));
</script>
<script src="{relay}/widget/autopilot.js" data-app="demo" data-boot="eager"></script>
<script>window.__firstReady = window.Autopilot.ready;</script>
</body></html>"""


async def test_origin_not_allowed_is_said_in_the_card_and_on_the_console(browser, relay_server, page_server):
    html = REFUSED_PAGE.format(title="refused", relay=relay_server.url)
    url = localhost(page_server.add("/__loader__/refused.html", html))
    origin = url.split("/__loader__")[0]
    ctx, page, log = await open_page(browser, url, wait_joined=False)
    try:
        await page.wait_for_selector(f"{STATUS} >> button", timeout=60_000)
        text = await page.text_content(f"{STATUS} >> div")
        expected = (f"Autopilot cannot start: this page's origin {origin} is not allowed for app demo on the relay "
                    f"{relay_server.url}. Add it to the app's allowed origins. "
                    "(localhost, 127.0.0.1 and [::1] are different origins.)")
        assert text == expected
        assert any(expected in c for c in log.console_errors), log.console_errors
        assert not any("could not start" in c for c in log.console_errors)  # the cause, not the browser's words
        # The card holds its text: nothing overflows it or the viewport.
        box = await page.evaluate("""() => {
            const s = document.getElementById('autopilot-toggle-host').shadowRoot.querySelector('.status');
            const r = s.getBoundingClientRect();
            return {over: s.scrollWidth - s.clientWidth, left: r.left, right: r.right, width: innerWidth}; }""")
        assert box["over"] <= 0 and box["left"] >= 0 and box["right"] <= box["width"], box
        # Autopilot.ready: the page's promise rejected with the same text and stayed the one on Autopilot.
        assert await page.evaluate("window.Autopilot.ready === window.__firstReady") is True
        assert await page.evaluate("window.__firstReady.then(() => 'ok', e => e.message)") == expected
        assert await page.evaluate("window.__events") == [["event", expected], ["onError", expected]]
        # Retry tries again (a new start, a new promise) and says the same.
        await page.click(f"{STATUS} >> button")
        await page.wait_for_function("() => window.__events.length === 4", timeout=60_000)
        assert await page.evaluate("window.Autopilot.ready !== window.__firstReady") is True
        assert await page.evaluate("window.Autopilot.ready.then(() => 'ok', e => e.message)") == expected
        assert await page.text_content(f"{STATUS} >> div") == expected
    finally:
        await ctx.close()


async def test_a_relay_that_does_not_answer_is_said(browser, relay_server, page_server):
    html = loader_page("down", relay_server.url, 'data-boot="eager"')
    url = page_server.add("/__loader__/down.html", html)
    ctx = await browser.new_context()
    page = await ctx.new_page()
    # The relay goes away after the loader came: its files and the probe both fail at the network level.
    await page.route(re.compile(r".*/(widget/\w+/pyodide/pyodide\.mjs|widget/manifest\.json|api/apps/demo/origin)$"),
                     lambda route: route.abort())
    try:
        await page.goto(url)
        await page.wait_for_selector(f"{STATUS} >> button", timeout=60_000)
        text = await page.text_content(f"{STATUS} >> div")
        assert text.startswith(f"Autopilot cannot start: the relay {relay_server.url} does not answer (")
    finally:
        await ctx.close()


PYSCRIPT_REFUSED = HEAD + """<p>PyScript page on an origin the relay does not allow</p>
<script type="module" src="{relay}/widget/pyscript/core.js"></script>
<script src="{relay}/widget/autopilot.js" data-app="demo"></script>
<script type="py" config="{relay}/widget/pyscript.json">
from widget import get_client
</script>
</body></html>"""


async def test_pyscript_page_on_a_refused_origin_says_so_with_retry(browser, relay_server, page_server):
    html = PYSCRIPT_REFUSED.format(title="ps refused", relay=relay_server.url)
    url = localhost(page_server.add("/__loader__/ps-refused.html", html))
    ctx, page, log = await open_page(browser, url, wait_joined=False)
    try:
        await page.click(TOGGLE)  # the reader asks for it: never "Starting…" forever
        await page.wait_for_selector(f"{STATUS} >> button", timeout=60_000)
        text = await page.text_content(f"{STATUS} >> div")
        assert "this page's origin http://localhost:" in text and "is not allowed for app demo" in text
        assert await page.evaluate("window.Autopilot.ready.then(() => 'ok', e => e.message)") == text
    finally:
        await ctx.close()


PYSCRIPT_MPY = HEAD + """<p>PyScript with a MicroPython block</p>
<script type="module" src="{relay}/widget/pyscript/core.js"></script>
<script src="{relay}/widget/autopilot.js" data-app="demo"></script>
<script type="py" config="{relay}/widget/pyscript.json">
from widget import get_client

@get_client().function
def from_pyodide() -> str:
    \"\"\"Answers from the Pyodide block.\"\"\"
    return "pyodide"
</script>
<script type="mpy">print("micropython")</script>
</body></html>"""

PYSCRIPT_WORKER = HEAD + """<p>PyScript with worker blocks only</p>
<script type="module" src="{relay}/widget/pyscript/core.js"></script>
<script src="{relay}/widget/autopilot.js" data-app="demo" data-boot="eager"></script>
<script type="py" worker config="{relay}/widget/pyscript.json">print("in a worker")</script>
<script type="autopilot-python">
from widget import get_client
get_client().set_context({{"own": "pyodide"}})
</script>
</body></html>"""


async def test_micropython_and_worker_blocks_are_reported_and_not_waited_for(browser, relay_server, page_server):
    url = page_server.add("/__loader__/mpy.html", PYSCRIPT_MPY.format(title="mpy", relay=relay_server.url))
    ctx = await browser.new_context()
    page = await ctx.new_page()
    warnings: list[str] = []
    page.on("console", lambda m: warnings.append(m.text) if m.type == "warning" else None)
    # MicroPython would come from a CDN (the widget never fetches one): it never arrives here.
    await page.route(re.compile(r"^https?://(?!127\.0\.0\.1|localhost).*"), lambda route: route.abort())
    try:
        await page.goto(url)
        await wait_mark(page, "autopilot:joined", 90_000)
        assert any("MicroPython blocks (<script type=\"mpy\">) are not supported" in w for w in warnings), warnings
        assert await page.evaluate("window.Autopilot.send('from_pyodide')") is True
        await page.wait_for_function(
            """() => JSON.parse(window.Autopilot.pyodide.runPython("import json\\nfrom widget import get_client\\n"
                 + "json.dumps(get_client().get_function_call_history())"))
               .some(r => r.name === 'from_pyodide' && r.status === 'success')""",
            timeout=30_000)
    finally:
        await ctx.close()

    url = page_server.add("/__loader__/worker.html", PYSCRIPT_WORKER.format(title="worker", relay=relay_server.url))
    ctx = await browser.new_context()
    page = await ctx.new_page()
    warnings.clear()
    page.on("console", lambda m: warnings.append(m.text) if m.type == "warning" else None)
    try:
        await page.goto(url)
        await wait_mark(page, "autopilot:joined", 90_000)
        assert any("PyScript worker blocks" in w and "not supported" in w for w in warnings), warnings
        # No main-thread PyScript interpreter to share: the widget started its own and ran the page's Python.
        assert await page.evaluate(CONTEXT) == {"own": "pyodide"}
    finally:
        await ctx.close()

"""Fitting the ecosystem: cross-origin embedding, the JS API on window.Autopilot, configuration and
labels, PyScript pages sharing one Pyodide, strict Content-Security-Policy, and the relay under a path prefix.

Pages come from the page server (one origin) and load the loader, Pyodide, the bundle and Socket.IO from the
relay (another origin), the usual install. The CSP pages come from a small server of this module that sends
headers, with a relay of their own that allows its origin.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import urllib.request
from typing import Any

import pytest
from support import ROOT, PageServer, free_port, open_page, py_eval, start_relay, wait_mark

pytestmark = pytest.mark.browser

HEAD = ('<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,">'
        "<title>{title}</title></head><body>")
BAR = "#autopilot-bar-host"
TOGGLE = "#autopilot-toggle-host"


def _get(url: str, headers: dict[str, str] | None = None, *, redirect: bool = True) -> tuple[int, dict[str, str],
                                                                                             bytes]:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a: Any, **kw: Any) -> None:
            return None

    opener = urllib.request.build_opener() if redirect else urllib.request.build_opener(NoRedirect)
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


async def _history_until(page: Any, name: str, timeout_ms: float = 20_000) -> dict[str, Any]:
    """The newest call record of ``name`` once its response went out."""
    await page.wait_for_function(
        """name => { try { const h = JSON.parse(window.Autopilot.pyodide.runPython(
              "import json\\nfrom widget import get_client\\njson.dumps(get_client().get_function_call_history())"));
            return h.some(r => r.name === name && r.respondedAt !== null); } catch (e) { return false; } }""",
        arg=name, timeout=timeout_ms)
    history = await py_eval(page, "from widget import get_client\nget_client().get_function_call_history()")
    return next(r for r in history if r["name"] == name)


# ------------------------------------------------------------------------------------------------
# 1. Cross-origin: the page on one origin, the relay and the whole bundle on another.

CROSS_PAGE = HEAD + """<p>cross-origin page</p>
<script type="autopilot-python">
from widget import get_client
client = get_client()

@client.function
def add_numbers(a: int, b: int) -> int:
    \"\"\"Adds two numbers.\"\"\"
    return a + b
</script>
<script src="{relay}/widget/autopilot.js" data-app="demo" data-boot="eager"></script>
</body></html>"""


async def test_cross_origin_page_boots_and_calls_end_to_end(browser, relay_server, page_server):
    url = page_server.add("/__eco__/cross.html", CROSS_PAGE.format(title="cross", relay=relay_server.url))
    ctx, page, log = await open_page(browser, url)
    try:
        assert await page.evaluate("window.Autopilot.config.relay") == relay_server.url  # from the script's URL
        sent = await page.evaluate("window.Autopilot.send('add_numbers {\"a\": 2, \"b\": 40}')")
        assert sent is True
        rec = await _history_until(page, "add_numbers")
        assert rec["status"] == "success"
        # Everything of the widget came from the relay's origin; the page origin served only the page.
        widget_requests = [u for u in log.requests if "/widget/" in u]
        assert any(u.endswith("pyodide.asm.wasm") for u in widget_requests)
        assert any(u.endswith("bundle.zip") for u in widget_requests)
        assert any(u.endswith("schema.zip") for u in widget_requests)  # the schema check's lazy zip, cross-origin
        assert all(u.startswith(relay_server.url + "/") for u in widget_requests), widget_requests
        assert [u for u in log.requests if u.startswith(page_server.origin)] == [url]
        assert log.websockets and all(u.startswith(relay_server.url.replace("http", "ws", 1)) for u in log.websockets)
        assert log.console_errors == [] and log.page_errors == []
        assert await ctx.cookies() == []  # nothing needs cookies
    finally:
        await ctx.close()


def test_static_files_carry_cors_for_allowed_origins_only(relay_server, page_server):
    manifest = json.loads(_get(relay_server.url + "/widget/manifest.json")[2])
    bid = manifest["build_id"]
    wasm = f"{relay_server.url}/widget/{bid}/pyodide/pyodide.asm.wasm"
    status, headers, _ = _get(wasm, {"Origin": page_server.origin})
    assert status == 200 and headers["access-control-allow-origin"] == page_server.origin
    assert headers["content-type"] == "application/wasm"  # streaming compile needs it
    assert "origin" in headers["vary"].lower() and "access-control-allow-credentials" not in headers
    assert headers["cross-origin-resource-policy"] == "cross-origin"
    status, headers, _ = _get(wasm, {"Origin": "https://evil.example"})
    assert status == 200 and "access-control-allow-origin" not in headers and "origin" in headers["vary"].lower()
    status, headers, _ = _get(relay_server.url + "/widget/autopilot.js")
    assert status == 200 and "set-cookie" not in headers and headers["cache-control"] == "no-cache"
    # PyScript pages: stable names for our copy of @pyscript/core and an offline config.
    status, headers, _ = _get(relay_server.url + "/widget/pyscript/core.js", {"Origin": page_server.origin},
                              redirect=False)
    assert status == 302 and headers["location"] == f"/widget/{bid}/pyscript/core.js"
    assert headers["access-control-allow-origin"] == page_server.origin
    # Stable names for a PyScript config of the page's own: Pyodide and the bundle of the current build.
    for stable, versioned in (("pyodide/pyodide.mjs", f"{bid}/pyodide/pyodide.mjs"),
                              ("bundle-full.zip", f"{bid}/bundle-full.zip")):
        status, headers, _ = _get(f"{relay_server.url}/widget/{stable}", {"Origin": page_server.origin}, redirect=False)
        assert status == 302 and headers["location"] == f"/widget/{versioned}", (stable, status, headers)
        assert headers["access-control-allow-origin"] == page_server.origin and headers["cache-control"] == "no-cache"
    status, headers, body = _get(relay_server.url + "/widget/pyscript.json", {"Origin": page_server.origin})
    cfg = json.loads(body)
    assert status == 200 and headers["access-control-allow-origin"] == page_server.origin
    assert cfg == {"interpreter": f"{relay_server.url}/widget/{bid}/pyodide/pyodide.mjs",
                   "files": {f"{relay_server.url}/widget/{bid}/bundle-full.zip": "/lib/python3.14/site-packages/*"}}


# ------------------------------------------------------------------------------------------------
# 3. The JS API, called from page JS before Python is ready.

JS_PAGE = HEAD + """<p>js api</p>
<script>
window.AutopilotConfig = {tools: {js_tool: {description: "Echoes q.",
  parameters: {type: "object", properties: {q: {type: "string"}}, required: ["q"]}}}};
</script>
<script src="{relay}/widget/autopilot.js" data-app="demo" data-boot="eager"></script>
<script>
window.__log = [];
const A = window.Autopilot;
window.__queued = !A.handle;  // Python is not there yet: everything below is queued
A.on("functionSuccess", e => __log.push(["success", e.request.name, e.result]));
A.on("functionError", e => __log.push(["error", e.request.name, e.error]));
window.__offSent = A.on("functionResponseSent", e => __log.push(["sent", e.request.name]));
window.__finished = 0;  // turns over: the relay takes the next message only then
A.on("completion.finished", () => window.__finished++);
A.setContext({page: "js-api", order: 1});
A.registerFunction({
  name: "js_add", description: "Adds two numbers.",
  parameters: {type: "object", properties: {a: {type: "number"}, b: {type: "number"}}, required: ["a", "b"]},
  handler: async ({a, b}, ctx) => {
    __log.push(["ctx", ctx.name, typeof ctx.id]); await new Promise(r => setTimeout(r, 5)); return a + b;
  },
});
A.registerFunction({name: "js_fail", description: "Always fails.",
                    handler: () => { throw new Error("nope from JS"); }});
A.updateContext({order: 2});
window.__removeTool = A.registerTool("js_tool", (args, {question, page, signal}) =>
  ({echo: args.q, question, url: page.url, aborted: signal.aborted}));
window.__sent = A.send('js_add {"a": 2, "b": 3}');
</script>
<script type="autopilot-python">
from widget import get_client
client = get_client()

@client.function
def py_twice(n: int) -> int:
    \"\"\"Doubles n.\"\"\"
    return 2 * n
</script>
</body></html>"""


async def test_js_api_from_page_js_queued_before_ready(browser, relay_server, page_server):
    url = page_server.add("/__eco__/js.html",
                          JS_PAGE.replace("{title}", "js api", 1).replace("{relay}", relay_server.url))
    ctx, page, log = await open_page(browser, url)
    try:
        assert await page.evaluate("window.__queued") is True
        assert await page.evaluate("window.__sent") is True  # resolved once connected and sent
        rec = await _history_until(page, "js_add")
        assert rec["status"] == "success"
        await page.wait_for_function("() => __log.some(e => e[0] === 'sent' && e[1] === 'js_add')")
        log_js = await page.evaluate("window.__log")
        assert ["ctx", "js_add", "string"] in log_js and ["success", "js_add", 5] in log_js
        # Applied in call order: setContext, then updateContext.
        assert await py_eval(page, "from widget import get_client\nget_client().get_context()") == {"page": "js-api",
                                                                                                    "order": 2}
        # One registry: JS and Python functions look the same to the relay.
        descs = await py_eval(page, "from widget import get_client\n{d['name']: d for d in "
                                    "get_client().get_registered_functions()}")
        assert set(descs) >= {"js_add", "js_fail", "js_tool", "py_twice"}
        assert descs["js_add"].keys() == descs["py_twice"].keys()
        assert descs["js_add"]["source"] == descs["py_twice"]["source"] == "client"
        assert descs["js_add"]["parameters"]["required"] == ["a", "b"]
        acked = await py_eval(page, "from widget import "
                                    "get_client\nsorted(get_client().state.acked['autopilot']['functions'])")
        assert {"js_add", "py_twice"} <= set(acked)
        async def say(text: str, turns_before: int) -> None:
            await page.wait_for_function(f"() => window.__finished >= {turns_before}", timeout=20_000)
            assert await page.evaluate("t => window.Autopilot.send(t)", text) is True

        # A JS handler that throws: a failed call with its message.
        await say("js_fail", 1)
        rec = await _history_until(page, "js_fail")
        assert rec["status"] == "error"
        await page.wait_for_function("() => __log.some(e => e[0] === 'error' && e[1] === 'js_fail')")
        err = next(e for e in await page.evaluate("window.__log") if e[0] == "error")
        assert "nope from JS" in str(err[2])
        # A declared tool with a JS handler: {question, page, signal}.
        await say('js_tool {"q": "hi"}', 2)
        rec = await _history_until(page, "js_tool")
        assert rec["status"] == "success"
        await page.wait_for_function("() => __log.some(e => e[0] === 'success' && e[1] === 'js_tool')")
        result = next(e[2] for e in await page.evaluate("window.__log") if e[0] == "success" and e[1] == "js_tool")
        assert result == {"echo": "hi", "question": 'js_tool {"q": "hi"}', "url": url, "aborted": False}
        # The remover takes the page handler away again (the tool is then run by nothing: an error).
        await page.evaluate("window.__removeTool()")
        tool = await py_eval(page, "from widget import get_client\nget_client()._tool_handlers.get('js_tool') is None")
        assert tool is True
        # open / close / toggle
        assert await page.evaluate("window.Autopilot.open()") is True
        assert await page.is_visible(f"{BAR} >> .panel")
        assert await page.evaluate("window.Autopilot.toggle()") is False
        assert await page.is_hidden(f"{BAR} >> .panel")
        assert await page.evaluate("window.Autopilot.close()") is False
        # Unsubscribe, then a new conversation.
        await page.evaluate("window.__offSent()")
        await page.wait_for_function("() => window.__finished >= 3", timeout=20_000)
        before = await py_eval(page, "from widget import get_client\nget_client().conversation['id']")
        assert await page.evaluate("window.Autopilot.newConversation()") is True
        after = await py_eval(page, "from widget import get_client\nget_client().conversation['id']")
        assert after != before
        # Bad input is refused at once, with a reason.
        with pytest.raises(Exception, match="registerFunction"):
            await page.evaluate("window.Autopilot.registerFunction({name: 'x'})")
        msg = await page.evaluate("(() => { try { window.Autopilot.setContext({bad: 1n}); return 'ok'; } catch (e) { "
                                  "return e.message; } })()")
        assert "context.bad is a bigint, not JSON data" in msg
        # destroy(): nothing left on the page, later calls refused.
        live = await py_eval(page, "from widget.ui.bar import live_proxies\nlive_proxies()")
        assert live > 0
        assert await page.evaluate("window.Autopilot.destroy()") is True
        assert await page.evaluate(f"!document.querySelector('{BAR}') && !document.querySelector('{TOGGLE}')")
        assert await page.evaluate("window.Autopilot.destroyed && window.Autopilot.handle === null")
        assert "destroyed" in await page.evaluate("window.Autopilot.open().then(() => 'ok', e => e.message)")
        live = await page.evaluate("window.Autopilot.pyodide.runPython('from widget.ui.bar import live_proxies; "
                                   "live_proxies()')")
        assert live == 0
        assert log.console_errors == [] and log.page_errors == []
    finally:
        await ctx.close()


async def test_destroy_before_boot_leaves_nothing(browser, relay_server, page_server):
    html = HEAD + (f'<script src="{relay_server.url}/widget/autopilot.js" data-app="demo" data-boot="intent">'
                   "</script></body></html>")
    url = page_server.add("/__eco__/destroy-early.html", html)
    ctx, page, log = await open_page(browser, url, wait_joined=False)
    try:
        await page.wait_for_selector(TOGGLE, state="attached")
        assert await page.evaluate("window.Autopilot.destroy()") is True
        assert await page.evaluate(f"!document.querySelector('{TOGGLE}')")
        await asyncio.sleep(0.3)
        assert not [u for u in log.requests if "pyodide" in u]  # never booted
    finally:
        await ctx.close()


# ------------------------------------------------------------------------------------------------
# 4 + 5. Configuration (data-* and window.AutopilotConfig), warnings, labels.

CONFIG_PAGE = HEAD + """<p>config</p>
<script>
window.AutopilotConfig = {bogus: 1, prewarm: 3, relay: "{relay}", app: "demo",
  tools: {shout: {description: "Upper-cases a text.",
                  parameters: {type: "object", properties: {text: {type: "string"}}, required: ["text"]}}}};
</script>
<script src="{relay}/widget/autopilot.js" data-boot="sometimes" data-frobnicate="1" data-open
        data-position="bottom-left" data-theme="dark" data-title="Lumen"
        data-python="/__eco__/extra.py, /__eco__/extra2.py"
        data-labels='{"placeholder": "Frag etwas…", "send": "Senden", "open": "{title} öffnen",
                      "starting": "{title} startet…", "nope": "x"}'></script>
</body></html>"""


async def test_configuration_options_warnings_and_labels(browser, relay_server, page_server):
    page_server.add("/__eco__/extra.py",
                    "from widget import get_client\nget_client().set_context({'from': 'extra.py'})\n",
                    "text/x-python")
    page_server.add("/__eco__/extra2.py", "from widget import get_client\nget_client().update_context({'also': 2})\n",
                    "text/x-python")
    url = page_server.add("/__eco__/config.html",
                          CONFIG_PAGE.replace("{title}", "config", 1).replace("{relay}", relay_server.url))
    ctx = await browser.new_context()
    page = await ctx.new_page()
    warnings: list[str] = []
    page.on("console", lambda m: warnings.append(m.text) if m.type == "warning" else None)
    try:
        await page.goto(url)
        # data-open: the loader shows it is starting, with the label override, then boots at once.
        await wait_mark(page, "autopilot:joined")
        cfg = await page.evaluate("window.Autopilot.config")
        assert cfg["boot"] == "idle" and cfg["open"] is True and cfg["position"] == "bottom-left"
        assert cfg["theme"] == "dark" and cfg["title"] == "Lumen" and cfg["prewarm"] is None
        assert cfg["python"] == ["/__eco__/extra.py", "/__eco__/extra2.py"]
        text = "\n".join(warnings)
        for needle in ("data-frobnicate", 'data-boot="sometimes"', "window.AutopilotConfig.bogus",
                       "window.AutopilotConfig.prewarm", "'nope'"):
            assert needle in text, (needle, text)
        # Labels: overridden strings in the bar, defaults elsewhere; position and theme applied.
        assert await page.get_attribute(f"{BAR} >> textarea.input", "placeholder") == "Frag etwas…"
        assert await page.get_attribute(f"{BAR} >> button.send", "aria-label") == "Senden"
        assert await page.evaluate(f"document.querySelector('{BAR}').dataset.theme") == "dark"
        assert await page.evaluate(f"document.querySelector('{BAR}').dataset.position") == "bottom-left"
        assert await page.is_visible(f"{BAR} >> .panel")  # data-open
        await page.evaluate("window.Autopilot.close()")
        assert await page.get_attribute(f"{TOGGLE} >> button.toggle", "aria-label") == "Lumen öffnen"
        # Python files ran in order; the tools config reached the client.
        assert await py_eval(page, "from widget import get_client\nget_client().get_context()") == {"from": "extra.py",
                                                                                                    "also": 2}
        assert await py_eval(page, "from widget import get_client\nget_client().has_function('shout')") is True
    finally:
        await ctx.close()


def test_loader_shares_labels_css_and_event_names_with_python():
    """One source: the built loader carries widget/ui/labels.py's labels, the bar's toggle CSS and
    widget.protocol's event names, as build.py copied them (widget/loader_data.py)."""
    from conftest import require_build
    from support import DIST

    from widget.loader_data import LOADER_LABELS, TOGGLE_CSS
    from widget.protocol import SUBSCRIBABLE_EVENTS
    from widget.ui.bar import TOGGLE_CSS as BAR_TOGGLE_CSS
    from widget.ui.labels import LABELS

    require_build()
    built = (DIST / "autopilot.js").read_text()
    assert "__LOADER_DATA__" not in built
    shared = json.loads(re.search(r"const SHARED = (\{.*?\});\n", built).group(1))
    assert shared["labels"] == {k: LABELS[k] for k in LOADER_LABELS}
    assert shared["toggleCss"] == TOGGLE_CSS == BAR_TOGGLE_CSS
    assert set(shared["events"]) == set(SUBSCRIBABLE_EVENTS)
    # Every label the loader's source uses is one it gets.
    sources = [ROOT / "static" / "autopilot.js", *(ROOT / "static" / "loader").glob("*.mjs")]  # joined by the build
    used = set(re.findall(r'\bL\("(\w+)"', "".join(p.read_text() for p in sources)))
    assert used and used <= set(LOADER_LABELS), used - set(LOADER_LABELS)


async def test_every_visible_string_comes_from_the_labels_table(browser, relay_server, page_server):
    """Override every label with a marker: no default English text is left in the toggle or the bar."""
    from widget.ui.labels import LABELS

    labels = {k: f"§{k}" + ("{title}" if "{title}" in v else "") for k, v in LABELS.items()}
    cfg = json.dumps({"labels": labels, "relay": relay_server.url, "app": "demo", "boot": "eager", "open": True})
    html = HEAD.format(title="labels") + f"<script>window.AutopilotConfig = {cfg};</script>" \
        f'<script src="{relay_server.url}/widget/autopilot.js"></script></body></html>'
    url = page_server.add("/__eco__/labels.html", html)
    ctx, page, log = await open_page(browser, url)
    try:
        texts = await page.evaluate(
            """() => { const out = [];
              for (const id of ['autopilot-bar-host', 'autopilot-toggle-host']) {
                const walk = (n) => {
                  if (n.nodeType === 3 && n.textContent.trim()) out.push(n.textContent.trim());
                  if (n.nodeType === 1) { for (const a of ['aria-label', 'title', 'placeholder'])
                    if (n.getAttribute(a)) out.push(n.getAttribute(a));
                    if (n.hidden) return; }
                  for (const c of (n.shadowRoot ? [n.shadowRoot] : [])) walk(c);
                  for (const c of n.childNodes) walk(c); };
                walk(document.getElementById(id)); }
              return out; }""")
        assert texts
        english = [t for t in texts if not t.startswith("§") and re.search(r"[A-Za-z]{3}", t)]
        assert english == [], english
    finally:
        await ctx.close()


# ------------------------------------------------------------------------------------------------
# 2. PyScript pages: one Pyodide, PyScript's.

PYSCRIPT_PAGE = HEAD + """<p>pyscript page</p>
<script type="module" src="{relay}/widget/pyscript/core.js"></script>
<script src="{relay}/widget/autopilot.js" data-app="demo"></script>
<script type="py" config="{relay}/widget/pyscript.json">
from widget import get_client
import js

client = get_client()

@client.function
def pyscript_square(n: int) -> int:
    \"\"\"Squares n (registered from a PyScript block).\"\"\"
    return n * n

js.window.__block_ran = True
</script>
<script type="py">
from widget import get_client
get_client().update_context({"second_block": True})
</script>
</body></html>"""

PYSCRIPT_OWN_PAGE = HEAD + """<p>py blocks, no PyScript tag: the loader brings its copy</p>
<script type="py">
from widget import get_client
get_client().register_function("own_ping", lambda args, ctx: "pong", description="Answers pong.")
</script>
<script src="{relay}/widget/autopilot.js" data-app="demo"></script>
</body></html>"""


@pytest.mark.parametrize("variant", ["page-loads-pyscript", "loader-loads-pyscript", "own-config-stable-urls"])
async def test_pyscript_page_shares_one_pyodide(browser, relay_server, page_server, variant):
    html = PYSCRIPT_OWN_PAGE if variant == "loader-loads-pyscript" else PYSCRIPT_PAGE
    if variant == "own-config-stable-urls":
        # The page's own config names no build: the stable URLs redirect to the current one.
        own = {"interpreter": f"{relay_server.url}/widget/pyodide/pyodide.mjs",
               "files": {f"{relay_server.url}/widget/bundle-full.zip": "/lib/python3.14/site-packages/*"}}
        page_server.add("/__eco__/own-config.json", json.dumps(own), "application/json")
        html = html.replace('config="{relay}/widget/pyscript.json"', 'config="/__eco__/own-config.json"')
    url = page_server.add(f"/__eco__/{variant}.html",
                          html.replace("{title}", variant, 1).replace("{relay}", relay_server.url))
    ctx, page, log = await open_page(browser, url, timeout_ms=90_000)
    try:
        name = "own_ping" if variant == "loader-loads-pyscript" else "pyscript_square"
        args = ' {"n": 7}' if name == "pyscript_square" else ""
        assert await page.evaluate(f"window.Autopilot.send('{name}{args}')") is True
        rec = await _history_until(page, name)
        assert rec["status"] == "success"
        if variant != "loader-loads-pyscript":
            assert await page.evaluate("window.__block_ran") is True
            context = await py_eval(page, "from widget import get_client\nget_client().get_context()")
            assert context == {"second_block": True}
            # The model's answer quotes the result the PyScript block's function returned.
            await page.wait_for_function(
                "() => window.Autopilot.pyodide.runPython(\"from widget import get_client; "
                "any('49' in str(m.get('content') or '') for m in get_client().messages if m.get('role') == "
                "'assistant')\")",
                timeout=20_000)
        # One interpreter: Pyodide was fetched once, and it is PyScript's (its `pyscript` module is importable).
        # (Counted at the build's own URLs: a stable URL is one more request, its redirect.)
        assert len([u for u in log.requests if re.search(r"/widget/[0-9a-f]{12}/pyodide/pyodide\.asm\.wasm$", u)]) == 1
        assert len([u for u in log.requests if re.search(r"/widget/[0-9a-f]{12}/pyodide/pyodide\.mjs$", u)]) == 1
        assert await py_eval(page, "import pyscript\npyscript.__name__") == "pyscript"
        assert log.foreign_hosts({"127.0.0.1"}) == []  # offline: no CDN
        assert not [u for u in log.requests if "micropip" in u]
        assert not [u for u in log.requests if u.endswith("/origin")]  # nothing went wrong: the relay is not asked
        assert log.page_errors == [], log.page_errors
    finally:
        await ctx.close()


# ------------------------------------------------------------------------------------------------
# 6. Content-Security-Policy.

@pytest.fixture(scope="module")
def csp_setup(tmp_path_factory, relay_server):
    """A header-sending page server and a relay that allows its origin (relay_server: built and running)."""
    pages = PageServer()  # its own origin, which the relay below allows
    relay = start_relay(tmp_path_factory.mktemp("csp-relay"),
                        extra=["--demo-chunk-delay-ms", "2", "--app", f"demo={pages.origin}"])
    yield pages, relay
    relay.stop()
    pages.close()


def strict_csp(relay: str) -> str:
    """The CSP docs/embedding.md documents for a page embedding the widget from ``relay``."""
    ws = relay.replace("http", "ws", 1)
    return (f"default-src 'none'; script-src {relay} 'wasm-unsafe-eval'; connect-src {relay} {ws}; "
            f"worker-src blob:; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


CSP_PAGE = HEAD + """<p>strict CSP</p>
<script type="autopilot-python">
from widget import get_client

@get_client().function
def csp_ok() -> str:
    \"\"\"Proves page Python runs under the strict CSP.\"\"\"
    return "fine"
</script>
<script src="{relay}/widget/autopilot.js" data-app="demo" data-boot="eager"></script>
</body></html>"""

VIOLATIONS = """window.__violations = [];
document.addEventListener('securitypolicyviolation',
                          e => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));"""


async def test_widget_works_under_the_documented_strict_csp(browser, csp_setup):
    pages, relay = csp_setup
    url = pages.add("/strict.html", CSP_PAGE.format(title="csp", relay=relay.url),
                    headers={"Content-Security-Policy": strict_csp(relay.url)})
    ctx = await browser.new_context()
    await ctx.add_init_script(VIOLATIONS)
    ctx2, page, log = await open_page(browser, url, context=ctx)
    try:
        assert await page.evaluate("window.Autopilot.send('csp_ok')") is True
        rec = await _history_until(page, "csp_ok")
        assert rec["status"] == "success"
        # The answer rendered (sanitized Markdown) and the skin applies (adopted stylesheets need no 'unsafe-inline').
        await page.evaluate("window.Autopilot.open()")
        await page.wait_for_selector(f"{BAR} >> .message.assistant .markdown >> nth=-1", timeout=20_000)
        position = await page.evaluate(
            f"getComputedStyle(document.querySelector('{BAR}').shadowRoot.querySelector('.panel')).position")
        assert position == "fixed"
        width = await page.evaluate(
            f"getComputedStyle(document.querySelector('{TOGGLE}').shadowRoot.querySelector('button')).width")
        assert width == "56px"
        assert await page.evaluate("window.__violations") == []
        assert log.console_errors == [] and log.page_errors == []
    finally:
        await ctx.close()


async def test_csp_without_wasm_shows_a_clear_message(browser, csp_setup):
    pages, relay = csp_setup
    csp = strict_csp(relay.url).replace(" 'wasm-unsafe-eval'", "")
    url = pages.add("/nowasm.html",
                    CSP_PAGE.format(title="no wasm", relay=relay.url).replace('data-boot="eager"',
                                                                              'data-boot="intent"'),
                    headers={"Content-Security-Policy": csp})
    ctx, page, log = await open_page(browser, url, wait_joined=False)
    try:
        await page.click(f"{TOGGLE} >> button.toggle")
        status = f"{TOGGLE} >> .status"
        await page.wait_for_selector(status, state="visible", timeout=10_000)
        text = await page.text_content(status)
        assert "Content-Security-Policy blocks WebAssembly" in text and "wasm-unsafe-eval" in text
        assert await page.query_selector(f"{status} >> button") is None  # no Retry that cannot work
        assert "blocks WebAssembly" in await page.evaluate("window.Autopilot.ready.then(() => 'ok', e => e.message)")
        assert not [u for u in log.requests if u.endswith("pyodide.asm.wasm")]  # nothing big was downloaded
    finally:
        await ctx.close()


# ------------------------------------------------------------------------------------------------
# 7 (part). The relay mounted under a path prefix of a host app.

async def test_relay_mounted_under_a_prefix_of_an_asgi_app(browser, page_server, tmp_path):
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from widget.relay import AppConfig, RelayConfig, mount

    async def home(_request: Any) -> PlainTextResponse:
        return PlainTextResponse("the host app")

    port = free_port()
    host_app = Starlette(routes=[Route("/", home), Route("/{rest:path}", home)])
    config = RelayConfig(port=port, db_path=str(tmp_path / "mounted.sqlite3"),
                         apps={"demo": AppConfig(model="demo", allowed_origins=[page_server.origin])})
    mounted = mount(host_app, "/copilot", config)
    server = uvicorn.Server(uvicorn.Config(host_app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            if server.started:
                break
            await asyncio.sleep(0.05)
        assert server.started
        assert (await asyncio.to_thread(_get, base + "/"))[2] == b"the host app"
        status, _, js = await asyncio.to_thread(_get, base + "/copilot/widget/autopilot.js")
        assert status == 200 and b"autopilot-widget loader" in js
        demo = (await asyncio.to_thread(_get, base + "/copilot/"))[2].decode()
        assert 'src="/copilot/widget/autopilot.js"' in demo
        page_html = HEAD.format(title="mounted") + f"""
<script type="autopilot-python">
from widget import get_client

@get_client().function
def under_prefix() -> str:
    \"\"\"Answers from a page whose relay lives under /copilot.\"\"\"
    return "ok"
</script>
<script src="{base}/copilot/widget/autopilot.js" data-app="demo" data-boot="eager"></script></body></html>"""
        url = page_server.add("/__eco__/mounted.html", page_html)
        ctx, page, log = await open_page(browser, url)
        try:
            assert await page.evaluate("window.Autopilot.config.relay") == base + "/copilot"
            conv_url = await py_eval(page, "from widget import get_client\nget_client().conversation_url")
            assert conv_url.startswith(base + "/copilot/api/conversations/")
            status, _, body = await asyncio.to_thread(_get, conv_url, {"Origin": page_server.origin})
            info = json.loads(body)
            assert info["relay_url"] == base and info["relay_path"] == "/copilot/socket.io"
            assert await page.evaluate("window.Autopilot.send('under_prefix')") is True
            assert (await _history_until(page, "under_prefix"))["status"] == "success"
            assert all("/copilot/" in u for u in log.websockets), log.websockets
            assert log.console_errors == []
        finally:
            await ctx.close()
        assert mounted.hub is not None
    finally:
        server.should_exit = True
        await asyncio.to_thread(thread.join, 10)

"""WebMCP and MCP in Chromium with ``--enable-features=WebMCP``: a page that opts in (``data-webmcp``) publishes
its Python and JS functions, tools and actions to ``document.modelContext``; an agent's call (Playwright's
``page.webmcp``) runs through the client's call path (argument check, history with timings, the function
events, the reader's Allow/Deny in the bar for a sensitive function or an action, the denial message);
unregistering and ``destroy()`` remove them; a page without the opt-in publishes nothing. Then a relay with
an MCP server (tests/mcp_test_server.py): a sensitive server tool the model calls is allowed or denied by the
reader in the bar, end to end.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

pytest.importorskip("mcp")

from conftest import require_build
from support import CHROMIUM, CHROMIUM_ARGS, PageServer, RelayServer, open_page, py_eval, start_relay
from test_bar import js_root, open_bar, q, send, user_count, wait_turn_done

from widget import protocol as P

pytestmark = pytest.mark.browser

SERVER = str(Path(__file__).with_name("mcp_test_server.py"))

PAGE = """<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>webmcp</title></head>
<body><p>A shop.</p><ul id="cart"><li>Halo</li></ul>
<script type="autopilot-python">
from widget import get_client
client = get_client()
EVENTS = []
for _name in ("functionCall", "functionSuccess", "functionError", "functionConfirmationRequired"):
    client.on(_name, lambda p, _n=_name: EVENTS.append(_n))

@client.function
def shout(text: str, times: int = 1) -> str:
    \"\"\"Returns the text in capitals, repeated.\"\"\"
    return " ".join([text.upper()] * times)

@client.function(sensitive=True)
def empty_cart() -> str:
    \"\"\"Empties the reader's cart.\"\"\"
    from js import document
    document.getElementById("cart").innerHTML = ""
    return "emptied"

@client.function(webmcp=False)
def private_note() -> str:
    \"\"\"Never shown to in-browser agents.\"\"\"
    return "private"
</script>
<script>
  window.AutopilotConfig = {tools: {
    plan_limits: {description: "Live limits of one plan.", run: {fetch: "/api/plans/{plan}"},
                  parameters: {type: "object", properties: {plan: {type: "string", enum: ["free", "pro"]}},
                               required: ["plan"]}},
    slow_limits: {description: "Never answers.", run: {fetch: "/api/slow"},
                  parameters: {type: "object", properties: {}}},
    open_pricing: {description: "Open the pricing page for one plan.", label: "Open pricing", confirm: true,
                   run: {event: "shop:pricing"},
                   parameters: {type: "object", properties: {plan: {type: "string", enum: ["free", "pro"]}},
                                required: ["plan"]}},
  }};
  window.PRICING = [];
  window.addEventListener("shop:pricing", (e) => window.PRICING.push(e.detail.args.plan));
</script>
<script src="/widget/autopilot.js" data-relay="{relay}" data-app="demo" data-boot="eager" data-open="true"
        {extra}></script>
<script>
  window.addEventListener("load", () => {
    window.Autopilot.registerTool("slow_limits", () => new Promise(() => {}));  // never answers
    window.Autopilot.registerFunction({name: "js_sum", description: "Adds two numbers.",
      parameters: {type: "object", properties: {a: {type: "number"}, b: {type: "number"}}, required: ["a", "b"]},
      handler: ({a, b}) => a + b});
  });
</script>
</body></html>"""


@pytest_asyncio.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    """Chromium with WebMCP on (the session's browser has it off)."""
    from playwright.async_api import async_playwright

    pw = await async_playwright().start()
    b = await pw.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, "--enable-features=WebMCP"])
    yield b
    await b.close()
    await pw.stop()


@pytest.fixture(scope="module")
def mcp_relay(tmp_path_factory: pytest.TempPathFactory, page_server: PageServer) -> Iterator[RelayServer]:
    """A relay whose demo app has the test MCP server (stdio) with a sensitive tool."""
    require_build()
    workdir = tmp_path_factory.mktemp("mcp-relay")
    config = workdir / "relay.toml"
    config.write_text(
        "[apps.demo]\n"
        f'allowed_origins = ["{page_server.origin}"]\n'
        "[apps.demo.mcp.local]\n"
        f'command = ["{sys.executable}", "{SERVER}", "stdio"]\n'
        'tools = ["wipe", "add"]\n'
        "startup_timeout_s = 60\n"
    )
    server = start_relay(workdir, extra=["--config", str(config), "--demo-chunk-delay-ms", "2"])
    yield server
    server.stop()


async def boot(browser: Any, page_server: PageServer, relay: RelayServer, name: str, extra: str) -> Any:
    url = page_server.add(f"/__test__/{name}.html", PAGE.replace("{relay}", relay.url).replace("{extra}", extra))
    ctx = await browser.new_context()
    _, page, log = await open_page(browser, url, context=ctx)
    await page.wait_for_selector(q("section.panel"), state="visible")
    await page.wait_for_function("() => window.Autopilot.pyodide && window.Autopilot.handle")
    return ctx, page, log


async def tool_names(page: Any) -> list[str]:
    return sorted(t["name"] for t in await page.webmcp.tools())


async def wait_for(page: Any, predicate: str, arg: Any = None, timeout_s: float = 30.0) -> None:
    """Until the async JS ``predicate(arg)`` is true (wait_for_function would take its Promise for true)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await page.evaluate(predicate, arg):
        assert asyncio.get_running_loop().time() < deadline, f"not true within {timeout_s} s: {predicate}"
        await page.wait_for_timeout(50)


async def wait_tools(page: Any, want: list[str]) -> None:
    """Until the browser's list is ``want`` (registration settles through Python)."""
    await wait_for(page, "async (want) => JSON.stringify((await document.modelContext.getTools()).map((t) => "
                         "t.name).sort())"
                         " === JSON.stringify(want)", sorted(want))
    assert await tool_names(page) == sorted(want)


def text_of(result: Any) -> str:
    return "".join(c["text"] for c in result["content"])


async def test_published_called_confirmed_and_removed(browser: Any, page_server: PageServer,
                                                      mcp_relay: RelayServer) -> None:
    ctx, page, log = await boot(browser, page_server, mcp_relay, "webmcp-on", "data-webmcp")
    try:
        await wait_tools(page, ["empty_cart", "js_sum", "open_pricing", "plan_limits", "shout", "slow_limits"])
        tools = {t["name"]: t for t in await page.webmcp.tools()}
        assert "private_note" not in tools  # webmcp=False
        assert tools["shout"]["inputSchema"]["required"] == ["text"]
        assert tools["plan_limits"]["annotations"] == {"readOnly": True}
        assert "confirms" in tools["empty_cart"]["description"]

        # A call runs the handler through the client's call path.
        result = await page.webmcp.call_tool("shout", {"text": "hi", "times": 2})
        assert text_of(result) == "HI HI" and not result.get("isError")
        record = await py_eval(page, "from widget import get_client\nget_client().get_function_call_history()[0]")
        assert record["name"] == "shout" and record["status"] == "success" and record["id"].startswith("webmcp-")
        assert record["totalMs"] == record["handlerMs"] >= 0
        assert await py_eval(page, "import sys\nsys.modules[\"__page__\"].EVENTS") == ["functionCall",
                                                                                       "functionSuccess"]
        assert text_of(await page.webmcp.call_tool("js_sum", {"a": 2, "b": 3.5})) == "5.5"
        bad = await page.webmcp.call_tool("shout", {"times": "x"})
        assert bad["isError"] is True and text_of(bad).startswith("Invalid arguments for 'shout'")
        bad = await page.webmcp.call_tool("plan_limits", {"plan": "gold"})
        assert bad["isError"] is True and "plan" in text_of(bad)
        late = await page.webmcp.call_tool("slow_limits", {})  # the tools' 10 s limit
        assert late["isError"] is True and text_of(late) == "'slow_limits' did not finish within 10 s."
        # The activity log shows the agent's calls with their timings.
        await page.click(q("button.activity-button"))
        names = await page.locator(q(".activity-entry .call-name")).all_text_contents()
        assert sorted(names) == ["js_sum", "plan_limits", "shout", "shout", "slow_limits"]
        await page.keyboard.press("Escape")

        # A sensitive function: the reader decides in the bar.
        box = page.locator(q(".confirm"))
        pending = asyncio.ensure_future(page.webmcp.call_tool("empty_cart", {}))
        await box.wait_for()
        assert "empty_cart" in await box.locator(".confirm-title").text_content()
        await box.locator("button.deny").click()
        denied = await pending
        assert denied["isError"] is True and text_of(denied) == P.MSG_SENSITIVE_DENIED
        assert await page.text_content("#cart") == "Halo"
        pending = asyncio.ensure_future(page.webmcp.call_tool("empty_cart", {}))
        await box.wait_for()
        await box.locator("button.allow").click()
        assert text_of(await pending) == "emptied"
        assert await page.text_content("#cart") == ""
        # An action too (the relay's model may only offer it; an agent's call needs the reader).
        pending = asyncio.ensure_future(page.webmcp.call_tool("open_pricing", {"plan": "pro"}))
        await box.wait_for()
        await box.locator("button.allow").click()
        assert not (await pending).get("isError")
        assert await page.evaluate("window.PRICING") == ["pro"]

        # Kept in step with the registry: unregister, re-register changed, destroy.
        await page.evaluate("window.Autopilot.unregisterFunction('js_sum')")
        await wait_tools(page, ["empty_cart", "open_pricing", "plan_limits", "shout", "slow_limits"])
        await page.evaluate("""window.Autopilot.registerFunction({name: "js_sum", description: "Sums (v2).",
            handler: () => 0})""")
        await wait_tools(page, ["empty_cart", "js_sum", "open_pricing", "plan_limits", "shout", "slow_limits"])
        assert next(t for t in await page.webmcp.tools() if t["name"] == "js_sum")["description"] == "Sums (v2)."
        await py_eval(page, "from widget import get_client\nget_client().unregister_function('shout')")
        await wait_tools(page, ["empty_cart", "js_sum", "open_pricing", "plan_limits", "slow_limits"])
        await page.evaluate("window.Autopilot.destroy()")
        await wait_tools(page, [])
        assert not log.page_errors, log.page_errors
    finally:
        await ctx.close()


async def test_agents_find_the_tools_without_the_reader(browser: Any, page_server: PageServer,
                                                       mcp_relay: RelayServer) -> None:
    """With the opt-in the default (idle) boot starts Python by itself on every page view, first and later ones,
    so an agent finds the page's functions without the reader touching the widget."""
    html = (PAGE.replace("{relay}", mcp_relay.url).replace("{extra}", "data-webmcp")
            .replace(' data-boot="eager" data-open="true"', ""))
    url = page_server.add("/__test__/webmcp-idle.html", html)
    ctx = await browser.new_context()
    page = await ctx.new_page()
    want = ["empty_cart", "js_sum", "open_pricing", "plan_limits", "shout", "slow_limits"]
    try:
        await page.goto(url)
        await wait_tools(page, want)
        await page.goto(url)  # a later page view of the tab
        assert await page.evaluate("sessionStorage.getItem('autopilot:started:demo')") == "1"
        await wait_tools(page, want)
    finally:
        await ctx.close()


async def test_no_opt_in_publishes_nothing(browser: Any, page_server: PageServer, mcp_relay: RelayServer) -> None:
    ctx, page, log = await boot(browser, page_server, mcp_relay, "webmcp-off", "")
    try:
        await page.wait_for_function("() => window.Autopilot.pyodide.runPython("
                                     "'from widget import get_client; get_client().has_function(\"js_sum\")')")
        assert await page.webmcp.tools() == []
        assert await page.evaluate("typeof document.modelContext") == "object"  # the API is there, unused
    finally:
        await ctx.close()


async def test_mcp_sensitive_tool_confirmed_in_the_bar(browser: Any, page_server: PageServer,
                                                       mcp_relay: RelayServer) -> None:
    ctx, page, log = await boot(browser, page_server, mcp_relay, "mcp-confirm", "")
    try:
        await open_bar(page)
        n = await user_count(page)
        box = page.locator(q(".confirm"))
        await send(page, "mcp__local__wipe target=drafts", wait=False)
        await box.wait_for(timeout=60_000)
        assert "mcp__local__wipe" in await box.locator(".confirm-title").text_content()
        await box.locator("button.allow").click()
        await wait_turn_done(page, n + 1, timeout=60_000)
        pill = page.locator(q(".call")).filter(has_text="mcp__local__wipe").last
        assert await pill.get_attribute("data-status") == "success"
        answer = await js_root(page, "const m = r.querySelectorAll('.message.assistant'); return m[m.length - "
                                     "1].textContent;")
        assert "wiped drafts" in answer
        await send(page, "mcp__local__wipe target=everything", wait=False)
        await box.wait_for()
        await box.locator("button.deny").click()
        await wait_turn_done(page, n + 2, timeout=60_000)
        pill = page.locator(q(".call")).filter(has_text="mcp__local__wipe").last
        assert await pill.get_attribute("data-status") == "error"
        answer = await js_root(page, "const m = r.querySelectorAll('.message.assistant'); return m[m.length - "
                                     "1].textContent;")
        assert "wiped everything" not in answer
        # A server tool that is not sensitive runs without asking; its pill has timings.
        await send(page, "mcp__local__add a=2 b=5")
        pill = page.locator(q(".call")).filter(has_text="mcp__local__add").last
        assert await pill.get_attribute("data-status") == "success"
        assert await page.locator(q(".confirm")).count() == 0
    finally:
        await ctx.close()


async def test_demo_page_lists_its_webmcp_tools(browser: Any, mcp_relay: RelayServer) -> None:
    ctx, page, log = await open_page(browser, mcp_relay.url + "/")
    try:
        # it follows toolchange
        await wait_for(page, "async () => { const n = (await document.modelContext.getTools()).length;"
                             " return n > 0 && document.querySelectorAll('#webmcp-tools li').length === n; }",
                             timeout_s=60)
        assert await page.is_visible("#webmcp")
        published = sorted(t["name"] for t in await page.webmcp.tools())
        shown = sorted(t.split(" \u2014 ")[0] for t in await page.locator("#webmcp-tools li").all_text_contents())
        assert shown == published and {"list_products", "empty_cart", "care_guide", "stock_level"} <= set(shown)
    finally:
        await ctx.close()

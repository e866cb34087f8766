"""Declarative tool runs in a real browser: a declarative fetch tool called by the demo model, href (own host in place,
another host in a new tab without opener) and a CustomEvent received by page JS."""

from __future__ import annotations

import json

import pytest
from support import py_eval, wait_mark

pytestmark = pytest.mark.browser

PAGE = """<!doctype html><html><head><link rel="icon" href="data:,"><title>Tools page</title></head><body>
<p>tools</p>
<script>window.__events = []; window.addEventListener('acme:open-demo', e => window.__events.push(e.detail));</script>
<script type="autopilot-python">
from widget import get_client
client = get_client()
client.tools({
    "plan_limits": {
        "description": "Live limits of one plan.",
        "parameters": {"type": "object", "properties": {"plan": {"type": "string", "enum": ["free", "pro", "team"]}},
                       "required": ["plan"]},
        "run": {"fetch": "/api/plans/{plan}"},
    },
})
</script>
<script src="/widget/autopilot.js" data-relay="{relay}" data-app="demo" data-boot="eager"></script>
</body></html>"""


async def open_tools_page(browser, relay_server, page_server):
    page_server.add("/api/plans/pro", json.dumps({"plan": "pro", "seats": 10}), "application/json")
    url = page_server.add("/__test__/tools.html", PAGE.replace("{relay}", relay_server.url))
    ctx = await browser.new_context()
    page = await ctx.new_page()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    await page.goto(url)
    await wait_mark(page, "autopilot:joined")
    return ctx, page, requests


async def test_fetch_tool_called_by_the_model(browser, relay_server, page_server):
    ctx, page, requests = await open_tools_page(browser, relay_server, page_server)
    try:
        await py_eval(page, "import asyncio\nfrom widget import get_client\n"
                            "asyncio.ensure_future(get_client().send_message('plan_limits {\"plan\": \"pro\"}'))\nTrue")
        await page.wait_for_function(
            "() => window.Autopilot.pyodide.runPython('from widget import get_client; c = get_client(); "
            "bool(c.get_function_call_history()) and c.get_function_call_history()[0][\"respondedAt\"] is not None')",
            timeout=20000,
        )
        rec = await py_eval(page, "from widget import get_client\nget_client().get_function_call_history()[0]")
        assert rec["name"] == "plan_limits" and rec["status"] == "success"
        assert any(u.endswith("/api/plans/pro") for u in requests)
    finally:
        await ctx.close()


async def test_href_and_event_effects(browser, relay_server, page_server):
    ctx, page, requests = await open_tools_page(browser, relay_server, page_server)
    try:
        # An event: page JS receives {tool, args, context} in detail.
        await py_eval(page, "from widget.browser_env import BrowserEnv\n"
                            "BrowserEnv().dispatch_event('acme:open-demo', {'tool': 'open_demo', 'args': {'x': 1}, "
                            "'context': {'question': 'q', 'page': None}})\nTrue")
        events = await page.evaluate("window.__events")
        assert events == [{"tool": "open_demo", "args": {"x": 1}, "context": {"question": "q", "page": None}}]
        # Another host: a new tab whose window.opener is null.
        other = relay_server.url + "/healthz"
        async with ctx.expect_page() as popup_info:
            how = await py_eval(page, f"from widget.browser_env import BrowserEnv\nBrowserEnv().navigate({other!r})")
        assert how == "new-tab"
        popup = await popup_info.value
        await popup.wait_for_load_state()
        assert await popup.evaluate("window.opener") is None
        # Not http(s): refused.
        refused = await py_eval(page, "from widget.browser_env import BrowserEnv\n"
                                      "try:\n    BrowserEnv().navigate('javascript:alert(1)')\n    r = 'opened'\n"
                                      "except ValueError as e:\n    r = str(e)\nr")
        assert "only http(s)" in refused
        # Own host: in place.
        before = page.url
        await py_eval(page, "from widget.browser_env import BrowserEnv\nBrowserEnv().navigate('/api/plans/pro')")
        await page.wait_for_url("**/api/plans/pro")
        assert page.url != before and page.url.startswith(page_server.origin)
    finally:
        await ctx.close()

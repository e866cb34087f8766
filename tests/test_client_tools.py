"""Tools and actions in the client: run resolution, declarative runs, checked arguments, actions."""

import asyncio

import pytest
from fake_relay import BASE, FakeRelay, MemoryTransport

from widget import AutopilotClient, ConfigError
from widget import protocol as P
from widget.env import MemoryEnv

pytestmark = pytest.mark.unit

TOOLS = {
    "plan_limits": {
        "description": "Live limits of one plan.",
        "parameters": {"type": "object", "properties": {"plan": {"type": "string", "enum": ["free", "pro", "team"]}},
                       "required": ["plan"]},
        "run": {"fetch": "/api/plans/{plan}"},
    },
    "open_pricing": {
        "description": "Open the pricing page for one plan.",
        "label": "Open pricing",
        "parameters": {"type": "object", "properties": {"plan": {"type": "string", "enum": ["free", "pro", "team"]}},
                       "required": ["plan"]},
        "confirm": True,
        "run": {"href": "/pricing?plan={plan}"},
    },
    "contact_support": {
        "title": "Contact support",
        "label": "Write to support",
        "description": "Send the question to the support team.",
        "parameters": {"type": "object", "properties": {
            "email": {"type": "string", "format": "email", "description": "Where support replies"},
            "message": {"type": "string", "format": "multiline", "description": "The problem"}},
            "required": ["email", "message"]},
        "confirm": "form",
        "run": {"fetch": "/api/support", "method": "POST"},
    },
    "open_demo": {"description": "Open the demo booking modal.", "confirm": True, "run": {"event": "acme:open-demo"}},
}


async def connected():
    relay = FakeRelay()
    transport = MemoryTransport(relay)
    env = MemoryEnv()
    client = AutopilotClient(transport, env=env)
    client.tools(TOOLS)
    await client.connect(relay_url=BASE, app_id="demo")
    return relay, transport, client, env


async def settle():
    for _ in range(40):
        await asyncio.sleep(0)


async def test_descriptors_travel_with_kind_and_handler_without_run():
    relay, transport, client, env = await connected()
    funcs = relay.doc["autopilot"]["functions"]
    assert funcs["plan_limits"]["kind"] == "tool" and funcs["plan_limits"]["handler"] == "run"
    assert funcs["open_pricing"]["kind"] == "action" and funcs["open_pricing"]["label"] == "Open pricing"
    assert funcs["contact_support"]["confirm"] == "form"
    assert all("run" not in f for f in funcs.values())
    remove = client.register_tool("plan_limits", lambda args, ctx: {"requests_per_day": 1000})
    await client.sync_registered_functions()
    assert relay.doc["autopilot"]["functions"]["plan_limits"]["handler"] == "page"
    remove()
    await client.sync_registered_functions()
    assert relay.doc["autopilot"]["functions"]["plan_limits"]["handler"] == "run"


async def test_declarative_fetch_tool_and_checked_arguments():
    relay, transport, client, env = await connected()
    env.replies[("GET", "/api/plans/pro")] = (200, "application/json", '{"seats": 10}')
    relay.push(transport, "function_call.begin",
               {"id": "t1", "name": "plan_limits", "arguments": {"plan": "pro"}, "run": True})
    relay.push(transport, "function_call.begin",
               {"id": "t2", "name": "plan_limits", "arguments": {"plan": "premium"}, "run": True})
    relay.push(transport, "function_call.begin",
               {"id": "t3", "name": "open_pricing", "arguments": {"plan": "pro"}, "run": True})
    await settle()
    by_id = {r["id"]: r for r in relay.responses}
    assert by_id["t1"]["result"] == {"seats": 10}
    assert "must be one of" in by_id["t2"]["error"] and len(env.fetches) == 1  # the bad call never ran
    assert "action" in by_id["t3"]["error"] and env.navigations == []


async def test_page_handler_wins_and_gets_question_page_signal(monkeypatch):
    relay, transport, client, env = await connected()
    seen = {}

    async def handler(args, ctx):
        seen.update(args=args, question=ctx["question"], page=ctx["page"], signal=ctx["signal"])
        return {"seats": 3}

    client.register_tool("plan_limits", handler)
    relay.push(transport, "message", {"message": {"id": "u", "role": "user", "content": "limits of pro?"}})
    relay.push(transport, "function_call.begin",
               {"id": "h", "name": "plan_limits", "arguments": {"plan": "pro"}, "run": True})
    await settle()
    assert relay.responses[-1]["result"] == {"seats": 3} and env.fetches == []
    assert seen["question"] == "limits of pro?" and seen["page"]["url"].startswith("https://")
    assert seen["signal"].aborted is False


async def test_tool_limit_aborts_at_ten_seconds(monkeypatch):
    monkeypatch.setattr(P, "TOOL_CALL_TIMEOUT_S", 0.05)
    relay, transport, client, env = await connected()
    signals = []

    async def slow(args, ctx):
        signals.append(ctx["signal"])
        await asyncio.sleep(5)

    client.register_tool("plan_limits", slow)
    relay.push(transport, "function_call.begin",
               {"id": "s", "name": "plan_limits", "arguments": {"plan": "pro"}, "run": True})
    deadline = asyncio.get_running_loop().time() + 10
    while not relay.responses and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)  # the tool's own time limit (50 ms here) is what ends it
    assert "did not finish" in relay.responses[-1]["error"] and signals[0].aborted


def offer(relay, transport, *actions):
    relay.push(transport, "completion.started", {"message_id": "a1"})
    relay.push(transport, "completion.ended", {"message": {
        "id": "a1", "role": "assistant", "content": "Here you go.", "function_calls": [],
        "actions": [{"id": f"act{i}", "name": n, "arguments": a} for i, (n, a) in enumerate(actions)]}})


async def test_button_action_runs_once_and_records_outcome():
    relay, transport, client, env = await connected()
    offered = []
    client.on("actionsOffered", offered.append)
    offer(relay, transport, ("open_pricing", {"plan": "pro"}), ("open_demo", {}))
    assert [a["label"] for a in offered[0]["actions"]] == ["Open pricing", "open_demo"]
    result = await client.run_action("a1", "act0")
    assert result == {"ok": True, "outcome": "Done."}
    assert env.navigations == ["/pricing?plan=pro"]
    assert relay.outcomes[-1]["name"] == "open_pricing" and relay.outcomes[-1]["ok"] is True
    with pytest.raises(ConfigError, match="already done"):
        await client.run_action("a1", "act0")
    await client.run_action("a1", "act1")
    assert env.events == [("acme:open-demo",
                           {"tool": "open_demo", "args": {}, "context": {"question": None, "page": env.page_info()}})]


async def test_form_action_checks_reader_values_and_retries_after_failure():
    relay, transport, client, env = await connected()
    offer(relay, transport, ("contact_support", {"email": "ada@example.com"}))
    with pytest.raises(ConfigError, match="Message is required"):
        await client.run_action("a1", "act0", {"email": "ada@example.com"})
    with pytest.raises(ConfigError, match="email address"):
        await client.run_action("a1", "act0", {"email": "nope", "message": "help"})
    env.replies[("POST", "/api/support")] = (500, "text/plain", "down")
    failed = await client.run_action("a1", "act0", {"email": "ada@example.com", "message": "help"})
    assert failed["ok"] is False and "HTTP 500" in failed["outcome"]
    env.replies[("POST", "/api/support")] = (200, "application/json", '{"message": "We will reply within a day."}')
    done = await client.run_action("a1", "act0", {"email": "ada@example.com", "message": "help"})
    assert done == {"ok": True, "outcome": "We will reply within a day."}
    method, url, body = env.fetches[-1]
    assert body["tool"] == "contact_support" and body["args"] == {"email": "ada@example.com", "message": "help"}
    assert [o["ok"] for o in relay.outcomes] == [False, True]


async def test_restored_conversation_has_no_live_actions():
    relay, transport, client, env = await connected()
    client.session.load([{"id": "old", "role": "assistant", "content": "x",
                          "actions": [{"id": "act0", "name": "open_pricing", "arguments": {"plan": "pro"}}]}])
    with pytest.raises(ConfigError, match="not on offer"):
        await client.run_action("old", "act0")


async def test_tool_names_must_not_clash_with_functions():
    relay = FakeRelay()
    client = AutopilotClient(MemoryTransport(relay))
    client.register_function("plan_limits", lambda a, c: 1)
    with pytest.raises(ConfigError, match="already registered"):
        client.tools({"plan_limits": TOOLS["plan_limits"]})


async def test_navigate_sends_the_response_then_leaves_the_page():
    from widget import Navigate

    relay, transport, client, env = await connected()
    order = []
    client.on("functionResponseSent", lambda p: order.append("response"))
    env_navigate = env.navigate
    env.navigate = lambda url: order.append(("navigate", url)) or env_navigate(url)

    @client.function
    def go_to_cart() -> Navigate:
        """Opens the cart page."""
        return Navigate("/cart", result="Opening the cart.")

    relay.push(transport, "function_call.begin", {"id": "nav", "name": "go_to_cart", "arguments": {}, "run": True})
    await settle()
    assert relay.responses[-1]["result"] == "Opening the cart."
    assert order == ["response", ("navigate", "/cart")]


async def test_href_action_records_the_outcome_before_leaving_and_other_tabs_mark_it_done():
    relay, transport, client, env = await connected()
    order = []
    env_navigate = env.navigate
    env.navigate = lambda url: order.append(("navigate", url, len(relay.outcomes))) or env_navigate(url)
    offer(relay, transport, ("open_pricing", {"plan": "pro"}), ("open_demo", {}))
    await client.run_action("a1", "act0")
    assert order == [("navigate", "/pricing?plan=pro", 1)]  # the outcome reached the relay first
    # Another tab ran open_demo: its recorded outcome marks the offer done here, so it cannot run twice.
    relay.push(transport, "message", {"message": {"id": "o9", "role": "action", "message_id": "a1", "action_id": "act1",
                                                  "name": "open_demo", "ok": True, "outcome": "Done."}})
    with pytest.raises(ConfigError, match="already done"):
        await client.run_action("a1", "act1")
    assert env.events == []


async def test_cancelled_action_can_be_pressed_again():
    relay, transport, client, env = await connected()
    started = asyncio.Event()

    async def slow(args, ctx):
        started.set()
        await asyncio.sleep(10)

    client.register_tool("open_demo", slow)
    offer(relay, transport, ("open_demo", {}))
    task = asyncio.ensure_future(client.run_action("a1", "act0"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert client.get_offered_actions("a1")[0]["status"] == "offered"

"""Starters and follow-up suggestions on the relay: the ``starters`` of an app's config (checked at start, sent with
the conversation) and the relay's own ``suggest_followups`` tool over real Socket.IO (the model's spec, the checks,
what is stored on the answer and restored by a GET, what the model is told, the demo model's suggestions). The
config's checks and the tool's spec and checks themselves, pure: tests/test_relay_config.py and
tests/test_relay_tool_checks.py.

Three apps share one relay: ``demo`` talks to the demo model (suggestions on, starters set), ``shop`` to a
ScriptedModel with suggestions on, ``plain`` to the same model with suggestions off.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from relay_helpers import SHOP_SECRET, Recorder, ScriptedModel, declare, fold, info, joined, launch
from test_relay_tool_checks import SUGGEST

from widget.relay.config import AppConfig, ModelConfig
from widget.relay.models.base import TextDelta, ToolCall
from widget.relay.models.demo import DEMO_SUGGESTIONS
from widget.relay.tools import suggest_followups_spec

pytestmark = pytest.mark.relay

STARTERS = ["What can you do?", "Suggest follow-ups"]


# ---------------------------------------------------------------------------------------------- over Socket.IO


@pytest_asyncio.fixture(scope="module")
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest_asyncio.fixture(scope="module")
async def both(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Any, ScriptedModel]]:
    model = ScriptedModel()
    h = await launch(tmp_path_factory.mktemp("suggestions"), adapters={"script": model},
                     apps={"demo": AppConfig(model="demo", suggestions=True, starters=list(STARTERS)),
                           "shop": AppConfig(model="script", secret=SHOP_SECRET, suggestions=True),
                           "plain": AppConfig(model="script", secret=SHOP_SECRET)},
                     models={"demo": ModelConfig(chunk_delay_ms=0), "script": ModelConfig(chunk_delay_ms=0)})
    yield h, model
    await h.stop()


@pytest.fixture
def relay(both: tuple[Any, ScriptedModel]) -> Any:
    both[1].reset()
    return both[0]


@pytest.fixture
def model(both: tuple[Any, ScriptedModel]) -> ScriptedModel:
    return both[1]


async def turn(rec: Recorder, text: str, key: str) -> list[tuple[str, Any]]:
    """Send a user message; the events of its turn once it finished."""
    mark = len(rec.events)
    ack = await rec.call("user_message", {"text": text, "idempotency_key": key})
    assert ack["ok"], ack
    await rec.wait("user_input", pred=lambda d: d["reason"] == "message", start=mark)
    return rec.events[mark:]


def ended(events: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    return [d for e, d in events if e == "completion.ended"]


async def test_the_conversation_carries_its_apps_starters(relay: Any, http: aiohttp.ClientSession) -> None:
    rec, body, _ = await joined(http, relay.url, app="demo")
    assert body["starters"] == STARTERS
    await rec.disconnect()
    rec, body, _ = await joined(http, relay.url, app="shop")
    assert body["starters"] == []
    await rec.disconnect()


async def test_the_model_gets_the_tool_only_when_the_app_has_suggestions_on(
        relay: Any, model: ScriptedModel, http: aiohttp.ClientSession) -> None:
    for app in ("shop", "plain"):
        rec, _, _ = await joined(http, relay.url, app=app)
        await turn(rec, "hello", f"m-{app}")
        await rec.disconnect()
    on, off = model.requests
    assert [t["name"] for t in on.tools] == [SUGGEST] and on.tools[0] == suggest_followups_spec()
    assert [t["name"] for t in off.tools] == []
    # the last round of a turn offers no tool, the suggestions' included
    model.reset()
    saved = relay.hub.config.max_iterations
    relay.hub.config.max_iterations = 1
    try:
        rec, _, _ = await joined(http, relay.url, app="shop")
        await turn(rec, "again", "m-last")
        await rec.disconnect()
    finally:
        relay.hub.config.max_iterations = saved
    assert model.requests[0].tools == []


async def test_suggestions_are_kept_on_the_answer_and_end_the_turn(
        relay: Any, model: ScriptedModel, http: aiohttp.ClientSession) -> None:
    rec, _, url = await joined(http, relay.url, app="shop")
    model.script([TextDelta("Here is the answer."),
                  ToolCall(SUGGEST, {"suggestions": ["How much?", " How much? ", 5, "x" * 200, "Which plan?", "When?",
                                                     "Why?"]})])
    events = await turn(rec, "tell me", "m1")
    assert len(model.requests) == 1  # answered by the relay within the round: no second model request
    (done,) = ended(events)
    answer = done["message"]
    assert answer["content"] == "Here is the answer." and answer["suggestions"] == ["How much?", "Which plan?", "When?"]
    assert [c["name"] for c in answer["function_calls"]] == [SUGGEST]
    (tool,) = done["tool_messages"]
    assert tool["kind"] == "relay" and tool["status"] == "success" and tool["name"] == SUGGEST
    assert tool["result"] == ('Shown to the reader under your answer: "How much?"; "Which plan?"; "When?". Not shown: '
                              "suggestions[1] is a repeat; suggestions[2] is not a string; suggestions[3] has 200 "
                              "characters (at most 150); suggestions[6]: more than 3 suggestions.")
    assert "function_call.begin" not in [e for e, _ in events]
    # stored: a GET (a reload) restores them, and so does a replay
    stored = [m for m in (await info(http, url))["messages"] if m["role"] == "assistant"]
    assert stored[-1]["suggestions"] == ["How much?", "Which plan?", "When?"]
    assert fold(rec.seqd())[1]["suggestions"] == ["How much?", "Which plan?", "When?"]
    # next turn: the model sees its call and what the relay answered (the call is in the history like any call)
    model.script([TextDelta("Fine.")])
    await turn(rec, "How much?", "m2")
    history = model.requests[-1].messages
    call = next(m for m in history if m.get("tool_calls"))
    assert json.loads(call["tool_calls"][0]["function"]["arguments"])["suggestions"][0] == "How much?"
    reply = next(m for m in history if m["role"] == "tool")
    assert reply["content"] == tool["result"]
    assert "suggestions" not in [m for m in (await info(http, url))["messages"] if m["role"] == "assistant"][-1]
    await rec.disconnect()


async def test_a_call_with_nothing_to_show_is_an_error_the_model_can_fix(
        relay: Any, model: ScriptedModel, http: aiohttp.ClientSession) -> None:
    rec, _, url = await joined(http, relay.url, app="shop")
    model.script([TextDelta("Answer."), ToolCall(SUGGEST, {"suggestions": "How?"})],
                 [ToolCall(SUGGEST, {"suggestions": ["How?"]})])
    events = await turn(rec, "q", "m1")
    assert len(model.requests) == 2  # the failed call did not end the turn
    fed = [m for m in model.requests[1].messages if m["role"] == "tool"]
    assert fed[-1]["content"] == ("Error: Invalid suggest_followups call: the arguments must be an object with a "
                                  "'suggestions' list of strings. Nothing was shown to the reader; fix the arguments "
                                  "and call again, or answer without suggestions.")
    first, second = ended(events)
    assert "suggestions" not in first["message"] and first["tool_messages"][0]["status"] == "error"
    assert second["message"]["content"] == "" and second["message"]["suggestions"] == ["How?"]
    assistant = [m for m in (await info(http, url))["messages"] if m["role"] == "assistant"]
    assert [m.get("suggestions") for m in assistant] == [None, ["How?"]]
    await rec.disconnect()


PLAN = {"type": "object", "properties": {"plan": {"type": "string", "enum": ["free", "pro"]}}, "required": ["plan"],
        "additionalProperties": False}
OPEN_PRICING = {"kind": "action", "description": "Open the pricing page for one plan.", "parameters": PLAN,
                "confirm": "button", "label": "Open pricing", "title": None}


async def test_an_offer_and_suggestions_in_one_response_end_the_turn_together(
        relay: Any, model: ScriptedModel, http: aiohttp.ClientSession) -> None:
    rec, _, url = await joined(http, relay.url, app="shop")
    await declare(rec, {"open_pricing": OPEN_PRICING})
    model.script([TextDelta("Pro fits."), ToolCall("offer_actions", {"actions": [{"name": "open_pricing",
                                                                                  "arguments": {"plan": "pro"}}]}),
                  ToolCall(SUGGEST, {"suggestions": ["What does Pro include?"]})])
    events = await turn(rec, "which plan?", "m1")
    assert len(model.requests) == 1
    assert [t["name"] for t in model.requests[0].tools] == ["offer_actions", SUGGEST]
    (done,) = ended(events)
    assert [a["name"] for a in done["message"]["actions"]] == ["open_pricing"]
    assert done["message"]["suggestions"] == ["What does Pro include?"]
    await rec.disconnect()


async def test_a_page_entry_cannot_take_the_relays_name(
        relay: Any, model: ScriptedModel, http: aiohttp.ClientSession) -> None:
    rec, _, _ = await joined(http, relay.url, app="shop")
    fake = {"kind": "tool", "description": "Not the relay's.", "handler": "page",
            "parameters": {"type": "object", "properties": {}}}
    await declare(rec, {SUGGEST: fake})
    await turn(rec, "hello", "m1")
    tools = [t for t in model.requests[0].tools if t["name"] == SUGGEST]
    assert tools == [suggest_followups_spec()]
    await rec.disconnect()


async def test_without_suggestions_on_the_name_is_an_unknown_function(
        relay: Any, model: ScriptedModel, http: aiohttp.ClientSession) -> None:
    rec, _, url = await joined(http, relay.url, app="plain")
    model.script([TextDelta("A."), ToolCall(SUGGEST, {"suggestions": ["B?"]})], [TextDelta("C.")])
    events = await turn(rec, "q", "m1")
    first = ended(events)[0]
    assert "suggestions" not in first["message"]
    assert first["tool_messages"][0]["error"] == "Unknown function 'suggest_followups'."
    await rec.disconnect()


async def test_the_demo_model_suggests_on_request(relay: Any, http: aiohttp.ClientSession) -> None:
    rec, _, url = await joined(http, relay.url, app="demo")
    events = await turn(rec, "Please suggest follow-ups", "m1")
    (done,) = ended(events)
    assert done["message"]["suggestions"] == list(DEMO_SUGGESTIONS)
    assert done["message"]["content"].startswith("### Demo answer")
    assert 'Say "suggest follow-ups"' in done["message"]["content"]
    events = await turn(rec, "hello", "m2")
    assert "suggestions" not in ended(events)[0]["message"]
    await rec.disconnect()

"""Turn operations over real Socket.IO: retry and regenerate (D3), tool dedupe (D6), ask-user
prompt and answer checks, rate limits on messages and joins, cancel mid-stream, the context hook.

Most tests drive the relay with a ScriptedModel (one scripted round per model request) so every
path — a model failing mid-answer, a repeated call, a malformed ask_user — is exact.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from relay_helpers import (
    FUNC,
    STORE_KINDS,
    Recorder,
    ScriptedModel,
    create,
    declare,
    fixture_store_kind,  # noqa: F401 - a fixture
    fold,
    info,
    joined,
    launch,
    register,
)

from widget import protocol as P
from widget.relay.config import AppConfig, ModelConfig
from widget.relay.hub import RateLimiter
from widget.relay.models.base import ModelError, ModelRequest, TextDelta, ToolCall

pytestmark = pytest.mark.relay


@pytest_asyncio.fixture(scope="module")
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest_asyncio.fixture(scope="module", params=STORE_KINDS)
async def scripted(request: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Any, ScriptedModel]]:
    """A relay whose demo app talks to a ScriptedModel, with Ask User on (once on each store)."""
    model = ScriptedModel()
    h = await launch(tmp_path_factory.mktemp("scripted"), adapters={"script": model}, store=request.param,
                     apps={"demo": AppConfig(model="script", ask_user=True)},
                     models={"demo": ModelConfig(chunk_delay_ms=0), "script": ModelConfig(chunk_delay_ms=0)})
    yield h, model
    await h.stop()


@pytest.fixture
def relay(scripted: tuple[Any, ScriptedModel]) -> Any:
    scripted[1].reset()
    return scripted[0]


@pytest.fixture
def model(scripted: tuple[Any, ScriptedModel]) -> ScriptedModel:
    return scripted[1]


def err(ack: Any) -> str:
    assert isinstance(ack, dict) and ack.get("ok") is False, ack
    return ack["error"]["code"]


def text(*parts: str) -> list[TextDelta]:
    return [TextDelta(p) for p in parts]


async def finished(rec: Recorder, turn_id: str | None = None, start: int = 0) -> dict[str, Any]:
    return await rec.wait("completion.finished", pred=lambda d: turn_id is None or d["turn_id"] == turn_id, start=start)


async def replayed_from_zero(http: aiohttp.ClientSession, url: str) -> list[tuple[str, Any]]:
    """Every sequenced event of the conversation, as a fresh client joining with last_seq 0 gets them."""
    body = await info(http, url)
    rec = await Recorder(body["relay_url"]).connect()
    ack = await rec.join(body["token"], 0)
    assert ack["ok"], ack
    await rec.wait("user_input", pred=lambda d: d["seq"] == ack["seq"])
    events = rec.seqd()
    await rec.disconnect()
    return events


# ---------------------------------------------------------------------------------------------- regenerate


async def test_regenerate_replaces_the_last_answer(relay: Any, model: ScriptedModel,
                                                   http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    await register(rec, "get_selection")
    rec.auto_answer = lambda call: "sel-1"
    model.script([*text("Looking."), ToolCall("get_selection", {})], text("First answer."))
    await rec.call("user_message", {"text": "what is selected?", "idempotency_key": "m1"})
    await finished(rec)
    await rec.wait("user_input")
    before = await info(http, url)
    old = before["messages"]
    assert [m["role"] for m in old] == ["user", "assistant", "tool", "assistant"]

    rec.auto_answer = lambda call: "sel-2"
    model.script([*text("Looking again."), ToolCall("get_selection", {})], text("Second answer."))
    mark = len(rec.events)
    ack = await rec.call("regenerate", {"idempotency_key": "r1"})
    assert ack["ok"] and ack["turn_id"].startswith("t_")
    fin = await finished(rec, ack["turn_id"], start=mark)
    assert fin["status"] == "done"
    await rec.wait("user_input", start=mark)
    new = [(e, d) for e, d in rec.events[mark:] if isinstance(d, dict) and "seq" in d]
    names = [e for e, _ in new]
    # the withdrawal comes first, then the new turn exactly like any other
    assert names[0] == "messages.withdrawn" and names[1] == "completion.started"
    assert names[-2:] == ["completion.finished", "user_input"]
    withdrawn = new[0][1]
    assert withdrawn["message_ids"] == [m["id"] for m in old[1:]]
    assert withdrawn["reason"] == "regenerate" and withdrawn["turn_id"] == ack["turn_id"]
    assert new[1][1]["turn_id"] == ack["turn_id"]
    assert [d["seq"] for _, d in new] == list(range(new[0][1]["seq"], new[0][1]["seq"] + len(new)))
    # the model saw the history without the withdrawn answer, and the page function ran again
    assert [m["role"] for m in model.requests[-2].messages if m["role"] != "system"] == ["user"]
    assert len([e for e in rec.events if e[0] == "function_call.begin"]) == 2

    after = await info(http, url)
    msgs = after["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant"]
    assert msgs[0] == old[0]
    assert not {m["id"] for m in msgs[1:]} & {m["id"] for m in old}
    assert msgs[2]["result"] == "sel-2" and msgs[3]["content"] == "Second answer."
    assert after["conversation"]["status"] == "idle" and after["conversation"]["seq"] == new[-1][1]["seq"]

    # a repeat with the same key: the same ack, nothing applied again
    n_requests = len(model.requests)
    assert await rec.call("regenerate", {"idempotency_key": "r1"}) == ack
    await asyncio.sleep(0.1)
    assert (len(model.requests) == n_requests
            and (await info(http, url))["conversation"]["seq"] == after["conversation"]["seq"])
    # replay from 0 shows the replacement: folding every event gives exactly the GET's messages
    assert fold(await replayed_from_zero(http, url)) == msgs
    await rec.disconnect()


async def test_regenerate_and_retry_refusals(relay: Any, model: ScriptedModel, http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    assert err(await rec.call("regenerate", {"idempotency_key": "r0"})) == "nothing_to_retry"
    assert err(await rec.call("retry", {"idempotency_key": "t0"})) == "nothing_to_retry"
    assert err(await rec.call("retry", {})) == "bad_request"  # the key is required
    assert err(await rec.call("regenerate", "nope")) == "bad_request"
    await register(rec, "get_selection")
    model.script([ToolCall("get_selection", {})])
    await rec.call("user_message", {"text": "go", "idempotency_key": "m1"})
    await rec.wait("function_call.begin")
    assert err(await rec.call("regenerate", {"idempotency_key": "r1"})) == "busy"
    assert err(await rec.call("retry", {"idempotency_key": "t1"})) == "busy"
    await finished(rec)  # the call times out; the turn ends normally
    # a turn that did not fail has nothing to retry (regenerate is the way to a new answer)
    err_ack = await rec.call("retry", {"idempotency_key": "t2"})
    assert err(err_ack) == "nothing_to_retry" and "regenerate" in err_ack["error"]["message"]
    # a refused write stored nothing: the same key works once the operation is possible
    ack = await rec.call("regenerate", {"idempotency_key": "r1"})
    assert ack["ok"]
    await finished(rec, ack["turn_id"])
    # another socket of the conversation may not act as the active client
    other = await Recorder(relay.url).connect()
    assert err(await other.call("regenerate", {"idempotency_key": "x"})) == "not_joined"
    await other.disconnect()
    await rec.disconnect()


async def test_regenerate_after_a_cancelled_answer(relay: Any, model: ScriptedModel,
                                                   http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    await register(rec, "get_selection")
    model.script([*text("Partial"), ToolCall("get_selection", {})])
    await rec.call("user_message", {"text": "go", "idempotency_key": "m1"})
    await rec.wait("function_call.begin")
    assert (await rec.call("cancel", {"idempotency_key": "c1"}))["cancelled"] is True
    await finished(rec)
    body = await info(http, url)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool"]
    model.script(text("A whole answer."))
    ack = await rec.call("regenerate", {"idempotency_key": "r1"})
    await finished(rec, ack["turn_id"])
    body = await info(http, url)
    assert [(m["role"], m.get("content")) for m in body["messages"]][1:] == [("assistant", "A whole answer.")]
    await rec.disconnect()


# ---------------------------------------------------------------------------------------------- retry


async def test_retry_continues_the_failed_turn_from_its_last_completed_round(relay: Any, model: ScriptedModel,
                                                                             http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    await register(rec, "get_selection")
    rec.auto_answer = lambda call: "sel"
    # round 0 calls the page; round 1 fails half-way through its answer
    model.script([*text("Checking."), ToolCall("get_selection", {})],
                 [*text("The sel"), ModelError("model_unavailable", "The model provider is down or overloaded.")])
    await rec.call("user_message", {"text": "what is selected?", "idempotency_key": "m1"})
    fin = await finished(rec)
    assert fin["status"] == "failed"
    error = await rec.wait("message", pred=lambda d: d["message"]["role"] == "error")
    assert error["message"]["code"] == "model_unavailable" and error["message"]["retryable"] is True
    failed = await info(http, url)
    assert failed["conversation"]["status"] == "failed"
    roles = [m["role"] for m in failed["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "error"]
    partial, err_msg = failed["messages"][3], failed["messages"][4]
    assert partial["content"] == "The sel"

    model.script(text("The selection is sel."))
    mark = len(rec.events)
    ack = await rec.call("retry", {"idempotency_key": "t1"})
    assert ack["ok"] and ack["turn_id"] == fin["turn_id"]  # the same turn goes on
    fin2 = await finished(rec, ack["turn_id"], start=mark)
    assert fin2["status"] == "done"
    new = [(e, d) for e, d in rec.events[mark:] if isinstance(d, dict) and "seq" in d]
    assert [e for e, _ in new][:2] == ["messages.withdrawn", "completion.started"]
    assert new[0][1] == {"message_ids": [partial["id"], err_msg["id"]], "reason": "retry", "turn_id": fin["turn_id"],
                         "seq": new[0][1]["seq"]}
    assert "function_call_iteration" not in [e for e, _ in new]  # the retry's withdrawal starts it
    # the completed round was kept: the page function ran once, and the model got its result again
    assert len([e for e in rec.events if e[0] == "function_call.begin"]) == 1
    last = model.requests[-1].messages
    assert last[-1]["role"] == "tool" and last[-1]["content"] == "sel"
    body = await info(http, url)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert body["messages"][:3] == failed["messages"][:3]
    assert body["messages"][3]["content"] == "The selection is sel."
    assert body["conversation"]["status"] == "idle"
    assert fold(await replayed_from_zero(http, url)) == body["messages"]
    # retried once: the turn is not failed any more
    assert err(await rec.call("retry", {"idempotency_key": "t2"})) == "nothing_to_retry"
    await rec.disconnect()


async def test_retry_after_a_failure_in_the_first_round_and_twice(relay: Any, model: ScriptedModel,
                                                                  http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    boom = ModelError("model_rate_limited", "The model provider is rate limiting requests; try again shortly.")
    model.script([boom], [*text("Half"), boom], text("Done."))
    await rec.call("user_message", {"text": "hi", "idempotency_key": "m1"})
    assert (await finished(rec))["status"] == "failed"
    mark = len(rec.events)
    ack = await rec.call("retry", {"idempotency_key": "t1"})
    assert (await finished(rec, ack["turn_id"], start=mark))["status"] == "failed"
    body = await info(http, url)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "error"]  # the first error was withdrawn
    mark = len(rec.events)
    ack = await rec.call("retry", {"idempotency_key": "t2"})
    assert (await finished(rec, ack["turn_id"], start=mark))["status"] == "done"
    body = await info(http, url)
    assert [(m["role"], m.get("content")) for m in body["messages"]] == [("user", "hi"), ("assistant", "Done.")]
    # every model request of the three attempts saw just the user message
    assert all([m["role"] for m in r.messages if m["role"] != "system"] == ["user"] for r in model.requests)
    await rec.disconnect()


async def test_retry_after_relay_restart(http: aiohttp.ClientSession, tmp_path: Path, store_kind: str) -> None:
    """A turn whose relay died is marked failed when the conversation is next opened, with Retry (D3)."""
    h = await launch(tmp_path, store=store_kind, function_call_timeout_s=10.0)
    rec, data, url = await joined(http, h.url)
    await register(rec, "get_selection")
    await rec.call("user_message", {"text": "call get_selection", "idempotency_key": "m1"})
    first_call = await rec.wait("function_call.begin")
    await rec.disconnect()
    await h.stop()

    h2 = await launch(tmp_path, store=store_kind, function_call_timeout_s=10.0)
    try:
        url2 = url.replace(h.url, h2.url)
        body = await info(http, url2)
        assert body["conversation"]["status"] == "failed"
        assert body["messages"][-1]["code"] == "turn_interrupted" and body["messages"][-1]["retryable"] is True
        interrupted = [m["id"] for m in body["messages"][1:]]
        rec2 = await Recorder(h2.url).connect()
        joined_ack = await rec2.join(body["token"], body["conversation"]["seq"])
        # The interrupted call was not cancelled (its answer can still come): the new socket gets it to run
        # (a page that already ran it resends its answer instead), and Retry finishes the round from it.
        assert [c["id"] for c in joined_ack["pending_calls"]] == [first_call["id"]]
        assert (await rec2.call("function_response",
                                {"id": first_call["id"], "status": "success", "result": "after restart",
                                                      "idempotency_key": "r1"}))["ok"]
        ack = await rec2.call("retry", {"idempotency_key": "t1"})
        assert ack["ok"]
        fin = await finished(rec2, ack["turn_id"])
        assert fin["status"] == "done"
        withdrawn = await rec2.wait("messages.withdrawn")
        assert withdrawn["message_ids"] == interrupted and withdrawn["reason"] == "retry"
        assert not [e for e, _ in rec2.events if e == "function_call.begin"]  # the call never runs again
        after = await info(http, url2)
        assert [m["role"] for m in after["messages"]] == ["user", "assistant", "tool", "assistant"]
        assert after["messages"][2]["result"] == "after restart"
        await rec2.disconnect()
    finally:
        await h2.stop()


# ---------------------------------------------------------------------------------------------- D6 dedupe


TOOL = {**FUNC, "name": "lookup", "kind": "tool",
        "parameters": {"type": "object", "properties": {"q": {"type": "integer"}}}}


async def register_tool(rec: Recorder) -> None:
    patch = [{"op": "add", "path": "/autopilot/functions/lookup", "value": TOOL},
             {"op": "add", "path": "/autopilot/functions/get_selection", "value": FUNC}]
    assert (await rec.call("state_patch", {"patch": patch, "idempotency_key": "tools"})) == {"ok": True}


async def test_tool_dedupe_within_a_round(relay: Any, model: ScriptedModel, http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    await register_tool(rec)
    answers = iter(["r1", "r2", "s1", "s2"])
    rec.auto_answer = lambda call: next(answers)
    model.script([ToolCall("lookup", {"q": 1}), ToolCall("lookup", {"q": 2}), ToolCall("lookup", {"q": 1}),
                  ToolCall("get_selection", {}), ToolCall("get_selection", {})], text("ok"))
    await rec.call("user_message", {"text": "go", "idempotency_key": "m1"})
    await finished(rec)
    begins = [d for e, d in rec.events if e == "function_call.begin"]
    # the repeated tool call is not sent to the page; page functions are never deduplicated
    assert [(b["name"], b["arguments"]) for b in begins] == [("lookup", {"q": 1}), ("lookup", {"q": 2}),
                                                             ("get_selection", {}), ("get_selection", {})]
    body = await info(http, url)
    assistant = body["messages"][1]
    tools = body["messages"][2:7]
    assert [t["function_call_id"] for t in tools] == [c["id"] for c in assistant["function_calls"]]  # in call order
    assert [t["result"] for t in tools] == ["r1", "r2", "r1", "s1", "s2"]
    assert tools[2]["answered_from"] == tools[0]["function_call_id"] and "answered_from" not in tools[0]
    assert "answered_from" not in tools[4]
    # the model got an answer for every call
    fed = [m for m in model.requests[-1].messages if m["role"] == "tool"]
    assert [m["content"] for m in fed] == ["r1", "r2", "r1", "s1", "s2"]
    await rec.disconnect()


async def test_tool_dedupe_across_rounds_and_failures(relay: Any, model: ScriptedModel,
                                                      http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    await register_tool(rec)
    answers = iter([("success", "r1"), ("error", "boom"), ("success", "r2-again")])

    async def answer(call: dict[str, Any]) -> None:
        status, value = next(answers)
        payload = {"id": call["id"], "status": status, "idempotency_key": "fr-" + call["id"]}
        payload.update({"result": value} if status == "success" else {"error": value})
        await rec.sio.call("function_response", payload)

    async def on_begin(d: dict[str, Any]) -> None:
        if d.get("run"):
            await answer(d)

    rec.sio.on("function_call.begin", on_begin)
    model.script([ToolCall("lookup", {"q": 1}), ToolCall("lookup", {"q": 2})],
                 # q1 answered from round 0; q2 failed there: asked again
                 [ToolCall("lookup", {"q": 1}), ToolCall("lookup", {"q": 2})],
                 text("done"))
    await rec.call("user_message", {"text": "go", "idempotency_key": "m1"})
    await finished(rec)
    body = await info(http, url)
    tools = [m for m in body["messages"] if m["role"] == "tool"]
    assert [(t["status"], t["result"] or t["error"]) for t in tools] == [("success", "r1"), ("error", "boom"),
                                                                         ("success", "r1"), ("success", "r2-again")]
    assert tools[2]["answered_from"] == tools[0]["function_call_id"]
    # a new turn starts with no memory of the last one's calls
    answers = iter([("success", "fresh")])
    model.script([ToolCall("lookup", {"q": 1})], text("done"))
    mark = len(rec.events)
    await rec.call("user_message", {"text": "again", "idempotency_key": "m2"})
    await finished(rec, start=mark)
    body = await info(http, url)
    assert [m for m in body["messages"] if m["role"] == "tool"][-1]["result"] == "fresh"
    await rec.disconnect()


async def test_tool_replies_cut_for_the_model_and_tool_timeout(relay: Any, model: ScriptedModel,
                                                               http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    await register_tool(rec)
    rec.auto_answer = lambda call: "y" * 5000 if call["name"] == "lookup" else "z" * 5000
    model.script([ToolCall("lookup", {"q": 1}), ToolCall("get_selection", {})], text("ok"))
    await rec.call("user_message", {"text": "go", "idempotency_key": "m1"})
    await finished(rec)
    fed = [m["content"] for m in model.requests[-1].messages if m["role"] == "tool"]
    assert fed[0] == "y" * P.TOOL_REPLY_MAX_CHARS + " [cut]" and fed[1] == "z" * 5000  # functions are not cut
    body = await info(http, url)
    assert [m for m in body["messages"] if m["role"] == "tool"][0]["result"] == "y" * 5000  # stored complete
    await rec.disconnect()


# ---------------------------------------------------------------------------------------------- ask user


async def test_bad_ask_user_call_goes_back_to_the_model_not_the_reader(relay: Any, model: ScriptedModel,
                                                                       http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    model.script([*text("Let me ask."), ToolCall("ask_user", {"type": "slider", "question": "How much?"})],
                 [ToolCall("ask_user", {"type": "bool", "question": "Proceed?"})])
    await rec.call("user_message", {"text": "go", "idempotency_key": "m1"})
    req = await rec.wait("ask_user.request")
    assert [p["question"] for p in req["prompts"]] == ["Proceed?"]  # only the valid one reaches the reader
    assert len([e for e in rec.events if e[0] == "ask_user.request"]) == 1
    fed = [m for m in model.requests[1].messages if m["role"] == "tool"]
    assert len(fed) == 1 and "Invalid ask_user call: type must be one of" in fed[0]["content"]
    body = await info(http, url)
    assert body["pending_ask_user"] == req["prompts"]
    r = await http.post(f"{url}/ask_user", json={"answers": {"id": req["prompts"][0]["id"], "result": True}})
    assert r.status == 200
    await finished(rec)
    await rec.disconnect()


FOUR = [
    ToolCall("ask_user", {"type": "text", "question": "Your name?", "arguments": {"placeholder": "Ada"}}),
    ToolCall("ask_user", {"type": "bool", "question": "Subscribe?"}),
    ToolCall("ask_user", {"type": "radiolist", "question": "Colour?", "arguments": {"options": [
        {"value": "blue", "label": "Blue"}, {"value": "red", "label": "Red"}]}}),
    ToolCall("ask_user", {"type": "checklist", "question": "Toppings?", "arguments": {"options": [
        {"value": "a", "label": "A"}, {"value": "b", "label": "B"}, {"value": "c", "label": "C"}]}}),
]


async def test_ask_user_answers_checked_per_type(relay: Any, model: ScriptedModel, http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    model.script(FOUR, text("Thanks."))
    await rec.call("user_message", {"text": "go", "idempotency_key": "m1"})
    req = await rec.wait("ask_user.request")
    text_id, bool_id, radio_id, check_id = [p["id"] for p in req["prompts"]]
    ask = f"{url}/ask_user"

    async def refused(answers: Any, needle: str) -> None:
        r = await http.post(ask, json={"answers": answers})
        body = await r.json()
        assert r.status == 400 and body["error"]["code"] == "bad_request", body
        assert needle in body["error"]["message"], body["error"]["message"]

    await refused({"id": text_id, "result": 5}, "must be a string")
    await refused({"id": text_id, "result": "x" * (P.MAX_USER_MESSAGE_CHARS + 1)}, "at most 16000 characters")
    await refused({"id": bool_id, "result": "yes"}, "must be true or false")
    await refused({"id": bool_id, "result": 1}, "must be true or false")
    await refused({"id": radio_id, "result": "green"}, "must be one of the option values ['blue', 'red']")
    await refused({"id": radio_id, "result": ["blue"]}, "must be one of the option values")
    await refused({"id": check_id, "result": "a"}, "must be a list of option values")
    await refused({"id": check_id, "result": ["a", "z"]}, "'z' is not one of the option values")
    await refused({"id": check_id, "result": ["a", "a"]}, "lists a value twice")
    await refused([{"id": text_id, "result": "Ada"}, {"id": text_id, "result": "Bob"}],
                  "answered twice in this request")
    await refused({"id": "call_nope", "result": "x"}, "No pending prompt has id 'call_nope'")
    await refused([{"id": text_id, "result": "Ada"}, {"id": bool_id, "result": "no"}], "must be true or false")
    r = await http.post(ask, json={"answers": [{"id": text_id}]})
    assert r.status == 400 and "result" in (await r.json())["error"]["message"]
    # none of the refused requests stored anything: all four are still pending
    assert [p["id"] for p in (await info(http, url))["pending_ask_user"]] == [text_id, bool_id, radio_id, check_id]

    # answered in two requests; the first leaves the rest pending
    r = await http.post(ask, json={"answers": [{"id": text_id, "result": "Ada"}, {"id": bool_id, "result": False}],
                                   "idempotency_key": "a1"})
    body = await r.json()
    assert r.status == 200 and [p["id"] for p in body["pending_ask_user"]] == [radio_id, check_id]
    assert body["conversation"]["status"] == "WAITING_FOR_ASK_USER"
    await refused({"id": text_id, "result": "Bob"}, "was already answered")
    r = await http.post(ask, json={"answers": [{"id": text_id, "result": "Ada"}, {"id": bool_id, "result": False}],
                                   "idempotency_key": "a1"})
    assert r.status == 200  # the same request repeated: answered, not applied again
    r = await http.post(ask, json={"answers": [{"id": radio_id, "result": "red"},
                                               {"id": check_id, "result": ["c", "a"]}]})
    assert r.status == 200 and "pending_ask_user" not in await r.json()
    assert (await finished(rec))["status"] == "done"
    fed = {m["tool_call_id"]: json.loads(m["content"]) if m["content"].startswith(("[", "f", "t")) else m["content"]
           for m in model.requests[-1].messages if m["role"] == "tool"}
    assert fed == {text_id: "Ada", bool_id: False, radio_id: "red", check_id: ["c", "a"]}
    r = await http.post(ask, json={"answers": {"id": radio_id, "result": "red"}})
    assert r.status == 400 and "not waiting" in (await r.json())["error"]["message"]
    await rec.disconnect()


# ---------------------------------------------------------------------------------------------- limits, cancel, hooks


async def test_message_rate_limit(relay: Any, model: ScriptedModel, http: aiohttp.ClientSession) -> None:
    hub = relay.hub
    saved = hub.message_limiter
    hub.message_limiter = RateLimiter(2)
    try:
        rec, data, url = await joined(http, relay.url)
        assert (await rec.call("user_message", {"text": "one", "idempotency_key": "m1"}))["ok"]
        await finished(rec)
        ack = await rec.call("regenerate", {"idempotency_key": "r1"})  # a regeneration counts as a message
        await finished(rec, ack["turn_id"])
        limited = await rec.call("user_message", {"text": "three", "idempotency_key": "m3"})
        assert err(limited) == "rate_limited"
        assert err(await rec.call("regenerate", {"idempotency_key": "r2"})) == "rate_limited"
        # a refused write is not stored: the key is evaluated again once the window allows it
        hub.message_limiter = RateLimiter(10)
        assert (await rec.call("user_message", {"text": "three", "idempotency_key": "m3"}))["ok"]
        await rec.disconnect()
    finally:
        hub.message_limiter = saved


async def test_join_rate_limit_per_address(relay: Any, http: aiohttp.ClientSession) -> None:
    hub = relay.hub
    saved = hub.join_limiter
    hub.join_limiter = RateLimiter(2)
    try:
        url = await create(http, relay.url)
        body = await info(http, url)
        recs = [await Recorder(relay.url).connect() for _ in range(3)]
        acks = [await r.join(body["token"]) for r in recs]
        assert acks[0]["ok"] and acks[1]["ok"]
        assert err(acks[2]) == "rate_limited" and "joins" in acks[2]["error"]["message"]
        await asyncio.sleep(0.05)
        assert recs[2].events == []  # refused: nothing of the conversation
        for r in recs:
            await r.disconnect()
    finally:
        hub.join_limiter = saved


async def test_cancel_stops_a_streaming_answer(http: aiohttp.ClientSession, tmp_path: Path) -> None:
    h = await launch(tmp_path, models={"demo": ModelConfig(adapter="demo", chunk_delay_ms=40)})
    try:
        rec, data, url = await joined(http, h.url)
        await rec.call("user_message", {"text": "tell me something long", "idempotency_key": "m1"})
        await rec.wait("completion_stream")
        await rec.wait("completion_stream",
                       pred=lambda d: len([e for e in rec.events if e[0] == "completion_stream"]) >= 3)
        ack = await rec.call("cancel", {"idempotency_key": "c1"})
        assert ack == {"ok": True, "cancelled": True}
        fin = await rec.wait("completion.finished")
        assert fin["status"] == "cancelled"
        n_chunks = len([e for e in rec.events if e[0] == "completion_stream"])
        await asyncio.sleep(0.3)  # well over the chunk pace: nothing streams after the cancel
        names = rec.names()
        assert names.count("completion_stream") == n_chunks
        assert names[names.index("completion.finished"):] == ["completion.finished", "user_input"]
        ended = [d for e, d in rec.events if e == "completion.ended"][-1]["message"]
        streamed = "".join(d["delta"] for e, d in rec.events if e == "completion_stream")
        assert ended["content"] == streamed and "Demo answer" in streamed and "characters:" not in streamed
        body = await info(http, url)
        assert body["conversation"]["status"] == "idle" and body["messages"][-1]["content"] == streamed
        await rec.disconnect()
    finally:
        await h.stop()


async def test_context_redactor_runs_before_the_model(http: aiohttp.ClientSession, tmp_path: Path) -> None:
    model = ScriptedModel()
    seen: list[tuple[str, dict[str, Any]]] = []

    def redact(app_id: str, context: dict[str, Any]) -> dict[str, Any]:
        seen.append((app_id, dict(context)))
        context.pop("email", None)
        return context

    h = await launch(tmp_path, adapters={"script": model}, context_redactor=redact,
                     apps={"demo": AppConfig(model="script")},
                     models={"demo": ModelConfig(chunk_delay_ms=0), "script": ModelConfig(chunk_delay_ms=0)})
    try:
        rec, data, url = await joined(http, h.url)
        patch = [{"op": "add", "path": "/autopilot/context/email", "value": "ada@example.com"},
                 {"op": "add", "path": "/autopilot/context/page", "value": "/account"}]
        await rec.call("state_patch", {"patch": patch, "idempotency_key": "ctx"})
        await rec.call("user_message", {"text": "hi", "idempotency_key": "m1"})
        await finished(rec)
        system = " ".join(m["content"] for m in model.requests[-1].messages if m["role"] == "system")
        assert "/account" in system and "ada@example.com" not in system
        assert seen == [("demo", {"email": "ada@example.com", "page": "/account"})]
        # the stored state is untouched (the hook sees a copy)
        state = await h.hub.store.get_state(data["conversation"]["id"])
        assert state["autopilot"]["context"]["email"] == "ada@example.com"
        await rec.disconnect()
    finally:
        await h.stop()


async def test_cancel_while_waiting_for_the_reader(relay: Any, model: ScriptedModel,
                                                   http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    model.script([FOUR[1]])
    await rec.call("user_message", {"text": "go", "idempotency_key": "m1"})
    req = await rec.wait("ask_user.request")
    assert (await rec.call("cancel", {"idempotency_key": "c1"})) == {"ok": True, "cancelled": True}
    fin = await finished(rec)
    assert fin["status"] == "cancelled"
    body = await info(http, url)
    assert body["conversation"]["status"] == "idle" and "pending_ask_user" not in body
    r = await http.post(f"{url}/ask_user", json={"answers": {"id": req["prompts"][0]["id"], "result": True}})
    assert r.status == 400
    # the question asked and withdrawn by the cancel can be asked again with regenerate
    model.script([FOUR[1]])
    ack = await rec.call("regenerate", {"idempotency_key": "r1"})
    again = await rec.wait("ask_user.request", pred=lambda d: d["seq"] > fin["seq"])
    assert again["prompts"][0]["question"] == "Subscribe?" and again["prompts"][0]["id"] != req["prompts"][0]["id"]
    assert ack["ok"]
    await rec.call("cancel", {"idempotency_key": "c2"})
    await rec.disconnect()


# ---------------------------------------------------------------------------------------------- turn bounds


class Unbounded(ScriptedModel):
    """Besides scripted rounds: ``endless`` streams one chunk forever, ``pause`` seconds apart."""

    endless: Any = None
    pause = 0.0

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:  # type: ignore[override]
        if self.endless is None:
            async for c in super().stream(request):
                yield c
            return
        self.requests.append(request)
        while True:
            await asyncio.sleep(self.pause)
            yield self.endless


async def test_endless_stalled_and_overcalling_models_end_with_a_clear_error(tmp_path: Path,
                                                                             http: aiohttp.ClientSession) -> None:
    """A model that streams forever is cut at the answer cap; one that sends only empty deltas ends at the
    stall timeout; a response with too many tool calls runs none of them."""
    model = Unbounded()
    h = await launch(tmp_path, adapters={"script": model}, apps={"demo": AppConfig(model="script")},
                     models={"demo": ModelConfig(chunk_delay_ms=0), "script": ModelConfig(chunk_delay_ms=0)},
                     max_answer_chars=200, model_stall_timeout_s=2.0, max_tool_calls_per_response=3)
    try:
        rec, _, _ = await joined(http, h.url)
        await declare(rec, {"count": {"description": "Count.", "parameters": {"type": "object", "properties": {}}}})
        ran: list[Any] = []
        rec.auto_answer = lambda call: ran.append(call) or {"ok": True}

        model.endless = TextDelta("word ")
        assert (await rec.call("user_message", {"text": "go on forever", "idempotency_key": "m1"}))["ok"]
        msg = await rec.wait("message", pred=lambda d: d["message"]["role"] == "error")
        assert msg["message"]["code"] == "answer_too_long"
        assert (await rec.wait("completion.finished"))["status"] == "failed"
        assert len("".join(d["delta"] for e, d in rec.events if e == "completion_stream")) == 200

        model.endless, model.pause = TextDelta(""), 0.02
        n = len(rec.events)
        assert (await rec.call("user_message", {"text": "keep alive", "idempotency_key": "m2"}))["ok"]
        msg = await rec.wait("message", start=n, pred=lambda d: d["message"]["role"] == "error")
        assert msg["message"]["code"] == "model_timeout"

        model.endless = None
        model.script([ToolCall("count", {}) for _ in range(300)])
        n = len(rec.events)
        assert (await rec.call("user_message", {"text": "count a lot", "idempotency_key": "m3"}))["ok"]
        msg = await rec.wait("message", start=n, pred=lambda d: d["message"]["role"] == "error")
        assert msg["message"]["code"] == "too_many_tool_calls"
        assert ran == [] and not [e for e in rec.events[n:] if e[0] == "function_call.begin"]
        await rec.disconnect()
    finally:
        await h.stop()

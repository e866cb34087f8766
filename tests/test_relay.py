"""The relay over real HTTP and real Socket.IO (uvicorn on a free loopback port, python-socketio client)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from relay_helpers import (
    SECRET,
    SHOP_ORIGIN,
    SHOP_SECRET,
    STORE_KINDS,
    Recorder,
    create,
    fixture_store_kind,  # noqa: F401 - a fixture
    info,
    joined,
    launch,
    register,
    turn_log_line,
)

from widget import protocol as P
from widget.relay.ratelimit import RateLimiter
from widget.relay.tokens import TokenSigner

pytestmark = pytest.mark.relay


@pytest_asyncio.fixture(scope="session", params=STORE_KINDS)
async def relay(request: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    """The module's relay, once on each store (the whole module runs against both)."""
    handle = await launch(tmp_path_factory.mktemp("relay"), store=request.param)
    yield handle
    await handle.stop()


@pytest_asyncio.fixture(scope="session")
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def err(ack: Any) -> str:
    assert isinstance(ack, dict) and ack.get("ok") is False, ack
    return ack["error"]["code"]


# ---------------------------------------------------------------------------------------------- HTTP


async def test_create_with_allowed_origin(relay: Any, http: aiohttp.ClientSession) -> None:
    r = await http.post(f"{relay.url}/api/apps/demo/conversations", headers={"Origin": relay.url}, json={})
    assert r.status == 201
    assert r.headers["Access-Control-Allow-Origin"] == relay.url
    body = await r.json()
    assert body["ok"] is True and body["id"].startswith("c_") and len(body["id"]) >= 26
    assert body["url"] == f"{relay.url}/api/conversations/{body['id']}"
    localhost = relay.url.replace("127.0.0.1", "localhost")
    r = await http.post(f"{relay.url}/api/apps/demo/conversations", headers={"Origin": localhost})
    assert r.status == 201


async def test_create_refusals(relay: Any, http: aiohttp.ClientSession) -> None:
    base = f"{relay.url}/api/apps"
    r = await http.post(f"{base}/demo/conversations", headers={"Origin": "https://evil.example"})
    assert r.status == 403 and (await r.json())["error"]["code"] == "forbidden_origin"
    assert "Access-Control-Allow-Origin" not in r.headers
    r = await http.post(f"{base}/demo/conversations")  # no Origin, no secret
    assert r.status == 403
    r = await http.post(f"{base}/shop/conversations", headers={"Authorization": "Bearer wrong-secret-xxxxxxxx"})
    assert r.status == 401 and (await r.json())["error"]["code"] == "unauthorized"
    r = await http.post(f"{base}/nope/conversations", headers={"Origin": relay.url})
    assert r.status == 404 and (await r.json())["error"]["code"] == "not_found"
    r = await http.post(f"{base}/demo/conversations", headers={"Origin": relay.url}, data=b"{not json")
    assert r.status == 400 and "JSON" in (await r.json())["error"]["message"]


async def test_create_with_secret(relay: Any, http: aiohttp.ClientSession) -> None:
    r = await http.post(f"{relay.url}/api/apps/shop/conversations", headers={"Authorization": f"Bearer {SHOP_SECRET}"})
    assert r.status == 201
    r = await http.post(f"{relay.url}/api/apps/shop/conversations", headers={"Origin": SHOP_ORIGIN})
    assert r.status == 201 and r.headers["Access-Control-Allow-Origin"] == SHOP_ORIGIN
    # the demo app's origin is not the shop's
    r = await http.post(f"{relay.url}/api/apps/shop/conversations", headers={"Origin": relay.url})
    assert r.status == 403


async def test_cors_preflight(relay: Any, http: aiohttp.ClientSession) -> None:
    url = f"{relay.url}/api/apps/shop/conversations"
    r = await http.options(url, headers={"Origin": SHOP_ORIGIN, "Access-Control-Request-Method": "POST",
                                         "Access-Control-Request-Headers": "content-type"})
    assert r.status == 204
    assert r.headers["Access-Control-Allow-Origin"] == SHOP_ORIGIN
    assert "POST" in r.headers["Access-Control-Allow-Methods"]
    assert "Content-Type" in r.headers["Access-Control-Allow-Headers"]
    r = await http.options(url, headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert r.status == 403 and "Access-Control-Allow-Origin" not in r.headers


async def test_create_rate_limited(relay: Any, http: aiohttp.ClientSession) -> None:
    api = relay.app.api
    saved = api.create_limiter
    api.create_limiter = RateLimiter(2)
    try:
        codes = [(await http.post(f"{relay.url}/api/apps/demo/conversations",
                                  headers={"Origin": relay.url})).status for _ in range(3)]
        assert codes == [201, 201, 429]
        # the backend with its secret is not limited by browser addresses
        r = await http.post(f"{relay.url}/api/apps/shop/conversations",
                            headers={"Authorization": f"Bearer {SHOP_SECRET}"})
        assert r.status == 201
    finally:
        api.create_limiter = saved


async def test_get_shape_and_cors(relay: Any, http: aiohttp.ClientSession) -> None:
    url = await create(http, relay.url)
    r = await http.get(url, headers={"Origin": relay.url})
    assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == relay.url
    body = await r.json()
    assert body["ok"] is True and body["protocol_version"] == P.PROTOCOL_VERSION
    conv = body["conversation"]
    assert conv["app_id"] == "demo" and conv["status"] == "idle" and conv["seq"] == 0
    assert body["messages"] == []
    assert body["relay_url"] == relay.url and body["relay_path"] == "/socket.io"
    assert body["token_expires_at"] > time.time() + P.JOIN_TOKEN_TTL_S - 5
    assert "pending_ask_user" not in body
    assert TokenSigner(SECRET).verify(body["token"]) == conv["id"]
    r = await http.get(url, headers={"Origin": "https://evil.example"})
    assert r.status == 200 and "Access-Control-Allow-Origin" not in r.headers


async def test_unknown_conversation_404(relay: Any, http: aiohttp.ClientSession) -> None:
    for cid in ("c_" + "x" * 32, "nope", "c_..%2f"):
        r = await http.get(f"{relay.url}/api/conversations/{cid}")
        assert r.status == 404
        assert (await r.json())["error"]["code"] == "not_found"


async def test_delete(relay: Any, http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    r = await http.delete(url)
    assert r.status == 204
    assert (await http.get(url)).status == 404
    assert (await http.delete(url)).status == 404
    for _ in range(100):
        if not rec.sio.connected:
            break
        await asyncio.sleep(0.02)
    assert not rec.sio.connected
    # its token no longer joins
    rec2 = await Recorder(relay.url).connect()
    assert err(await rec2.join(data["token"])) == "not_found"
    await rec2.disconnect()


# ---------------------------------------------------------------------------------------------- join


async def test_join_ack_then_state(relay: Any, http: aiohttp.ClientSession) -> None:
    rec, data, _ = await joined(http, relay.url)
    assert rec.names()[0] == "state"
    assert rec.events[0][1] == {"functions": {}, "context": {}}
    await rec.disconnect()


async def test_bad_tokens_refused_and_socket_gets_nothing(relay: Any, http: aiohttp.ClientSession) -> None:
    owner, data, url = await joined(http, relay.url)
    cid = data["conversation"]["id"]
    intruder = await Recorder(relay.url).connect()
    assert err(await intruder.join("garbage")) == "invalid_token"
    assert err(await intruder.join(data["token"] + "x")) == "invalid_token"
    forged, _ = TokenSigner("another-relay-secret").issue(cid)
    assert err(await intruder.join(forged)) == "invalid_token"
    expired, _ = TokenSigner(SECRET).issue(cid, now=time.time() - P.JOIN_TOKEN_TTL_S - 1)
    ack = await intruder.join(expired)
    assert err(ack) == "token_expired"
    # a token of another conversation joins that one only: it is bound to its own id
    other_url = await create(http, relay.url)
    other = await info(http, other_url)
    assert TokenSigner(SECRET).verify(other["token"]) != cid
    # the refused socket cannot write and receives nothing of the conversation
    assert err(await intruder.call("state_patch", {"patch": [], "idempotency_key": "k"})) == "not_joined"
    assert err(await intruder.call("user_message", {"text": "hi", "idempotency_key": "k"})) == "not_joined"
    assert err(await intruder.call("replay", {"last_seq": 0})) == "not_joined"
    assert (await owner.call("user_message", {"text": "hello", "idempotency_key": "m1"}))["ok"]
    await owner.wait("user_input")
    await asyncio.sleep(0.05)
    assert intruder.events == []
    await intruder.disconnect()
    await owner.disconnect()


async def test_version_mismatch(relay: Any, http: aiohttp.ClientSession) -> None:
    url = await create(http, relay.url)
    data = await info(http, url)
    rec = await Recorder(relay.url).connect()
    ack = await rec.join(data["token"], version=2)
    assert err(ack) == "version_mismatch"
    assert "1" in ack["error"]["message"] and "2" in ack["error"]["message"]
    await asyncio.sleep(0.05)
    assert rec.events == []
    await rec.disconnect()


# ---------------------------------------------------------------------------------------------- state


async def test_patch_applied_and_acked(relay: Any, http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    await register(rec, "get_selection")
    ack = await rec.call("state_patch", {"patch": [{"op": "add", "path": "/autopilot/context/page", "value": "/cart"}],
                                         "idempotency_key": "ctx1"})
    assert ack == {"ok": True}
    cid = data["conversation"]["id"]
    doc = await relay.hub.store.get_state(cid)
    assert doc["autopilot"]["context"] == {"page": "/cart"}
    assert doc["autopilot"]["functions"]["get_selection"]["kind"] == "function"
    # a new joiner gets it in its state snapshot
    rec2, _, _ = await joined(http, relay.url, url=url)
    state = await rec2.wait("state")
    assert state["context"] == {"page": "/cart"} and "get_selection" in state["functions"]
    await rec.disconnect()
    await rec2.disconnect()


async def test_limits_refused_state_unchanged(relay: Any, http: aiohttp.ClientSession) -> None:
    rec, data, _ = await joined(http, relay.url)
    cid = data["conversation"]["id"]
    await rec.call("state_patch",
                   {"patch": [{"op": "add", "path": "/autopilot/context/a", "value": 1}], "idempotency_key": "a"})
    before = await relay.hub.store.get_state(cid)
    big = "x" * (P.MAX_STATE_BYTES - 30)
    ack = await rec.call("state_patch",
                         {"patch": [{"op": "add", "path": "/autopilot/context/big", "value": big}],
                          "idempotency_key": "big"})
    assert err(ack) == "state_too_large"
    # exactly at the limit is fine: measure the compact UTF-8 bytes the way D4 says
    base = len(json.dumps({**before["autopilot"]["context"]}, separators=(",", ":")))
    doc_len = len(json.dumps(before, separators=(",", ":"), ensure_ascii=False).encode())
    fill = P.MAX_STATE_BYTES - doc_len - len(',"f":""')
    assert base > 0
    ok = await rec.call("state_patch",
                        {"patch": [{"op": "add", "path": "/autopilot/context/f", "value": "é" * (fill // 2)}],
                         "idempotency_key": "fit"})
    assert ok == {"ok": True}
    await rec.call("state_patch",
                   {"patch": [{"op": "remove", "path": "/autopilot/context/f"}], "idempotency_key": "unfit"})
    deep: Any = "leaf"
    for _ in range(31):
        deep = {"d": deep}
    ack = await rec.call("state_patch",
                         {"patch": [{"op": "add", "path": "/autopilot/context/deep", "value": deep}],
                          "idempotency_key": "deep"})
    assert err(ack) == "state_too_deep"
    assert await relay.hub.store.get_state(cid) == before
    await rec.disconnect()


async def test_patch_failing_half_way_leaves_no_partial_write(relay: Any, http: aiohttp.ClientSession) -> None:
    rec, data, _ = await joined(http, relay.url)
    cid = data["conversation"]["id"]
    before = await relay.hub.store.get_state(cid)
    patch = [{"op": "add", "path": "/autopilot/context/first", "value": 1},
             {"op": "remove", "path": "/autopilot/context/missing"}]
    ack = await rec.call("state_patch", {"patch": patch, "idempotency_key": "half"})
    assert err(ack) == "patch_failed"
    assert "op 1" in ack["error"]["message"] and "remove" in ack["error"]["message"]
    assert await relay.hub.store.get_state(cid) == before
    assert err(await rec.call("state_patch",
                              {"patch": [{"op": "replace", "path": "/autopilot", "value": 3}],
                               "idempotency_key": "root"})) == "patch_failed"
    assert err(await rec.call("state_patch", {"patch": {"op": "add"}, "idempotency_key": "notlist"})) == "patch_failed"
    assert err(await rec.call("state_patch", {"patch": []})) == "bad_request"  # no idempotency key
    await rec.disconnect()


async def test_same_write_twice_applied_once(relay: Any, http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    cid = data["conversation"]["id"]
    await rec.call("state_patch",
                   {"patch": [{"op": "add", "path": "/autopilot/context/items", "value": []}],
                    "idempotency_key": "init"})
    append = {"patch": [{"op": "add", "path": "/autopilot/context/items/-", "value": "x"}],
              "idempotency_key": "append-1"}
    first = await rec.call("state_patch", append)
    second = await rec.call("state_patch", append)
    assert first == second == {"ok": True}
    assert (await relay.hub.store.get_state(cid))["autopilot"]["context"]["items"] == ["x"]
    # a user message resent after a reconnect with its key: one message, one turn
    m1 = await rec.call("user_message", {"text": "hello", "idempotency_key": "msg-1"})
    await rec.wait("user_input")
    await rec.disconnect()
    rec2, _, _ = await joined(http, relay.url, url=url, last_seq=None)
    m2 = await rec2.call("user_message", {"text": "hello", "idempotency_key": "msg-1"})
    assert m1 == m2 and m1["ok"]
    body = await info(http, url)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"]
    await rec2.disconnect()


# ---------------------------------------------------------------------------------------------- turns


async def test_full_turn_with_function_call(relay: Any, http: aiohttp.ClientSession,
                                            caplog: pytest.LogCaptureFixture) -> None:
    rec, data, url = await joined(http, relay.url)
    await register(rec, "get_selection")
    rec.auto_answer = lambda call: {"text": "hello world", "args": call["arguments"]}
    caplog.set_level(logging.INFO, logger="widget.relay.turns")
    ack = await rec.call("user_message", {"text": 'Please call get_selection {"limit": 3}', "idempotency_key": "m"})
    assert ack["ok"] and ack["message_id"].startswith("m_")
    fin = await rec.wait("completion.finished")
    assert fin["status"] == "done"
    await rec.wait("user_input")
    seqd = rec.seqd()
    names = [e for e, _ in seqd]
    assert names[0] == "message" and names[1] == "completion.started"
    i_begin = names.index("function_call.begin")
    assert names[i_begin:i_begin + 4] == ["function_call.begin", "function_call.end", "completion.ended",
                                          "function_call_iteration"]
    assert names[-3:] == ["completion.ended", "completion.finished", "user_input"]
    assert "completion_stream" in names[:i_begin] and "completion_stream" in names[i_begin:]
    seqs = [d["seq"] for _, d in seqd]
    assert seqs == list(range(1, len(seqs) + 1))
    begin = seqd[i_begin][1]
    assert begin["run"] is True and begin["name"] == "get_selection" and begin["arguments"] == {"limit": 3}
    end = seqd[i_begin + 1][1]
    assert end["status"] == "success" and end["result"]["text"] == "hello world"
    assert end["duration_ms"] == 1.25 and end["total_ms"] == 1.5
    final = seqd[-3][1]["message"]
    assert final["role"] == "assistant" and "hello world" in final["content"] and "###" in final["content"]
    # stored messages (§5), and the GET's seq is the last event
    body = await info(http, url)
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assistant, tool = body["messages"][1], body["messages"][2]
    assert assistant["function_calls"] == [{"id": begin["id"], "name": "get_selection", "arguments": {"limit": 3}}]
    assert tool["function_call_id"] == begin["id"] and tool["status"] == "success"
    assert tool["result"]["text"] == "hello world" and tool["duration_ms"] == 1.25 and tool["total_ms"] == 1.5
    assert body["conversation"]["seq"] == seqs[-1] and body["conversation"]["status"] == "idle"
    # the structured turn log: one line, call names and timings, never arguments or results
    line = await turn_log_line(caplog, data["conversation"]["id"])
    assert line["status"] == "done" and line["ms"] >= 0
    assert [c["tool"] for c in line["calls"]] == ["get_selection"] and line["calls"][0]["ok"] is True
    assert "hello world" not in json.dumps(line) and "limit" not in json.dumps(line)
    await rec.disconnect()


async def test_plain_markdown_answer_and_busy(relay: Any, http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    await register(rec, "get_selection")
    ack = await rec.call("user_message", {"text": "hi there, call get_selection", "idempotency_key": "a"})
    assert ack["ok"]
    await rec.wait("function_call.begin")
    assert err(await rec.call("user_message", {"text": "again", "idempotency_key": "b"})) == "busy"
    assert err(await rec.call("user_message",
                              {"text": "x" * (P.MAX_USER_MESSAGE_CHARS + 1),
                               "idempotency_key": "c"})) == "message_too_long"
    assert err(await rec.call("user_message", {"text": "  ", "idempotency_key": "d"})) == "bad_request"
    await rec.wait("completion.finished", timeout=10)  # the call times out (2 s) and the turn ends
    ack = await rec.call("user_message", {"text": "What is this?", "idempotency_key": "e"})
    start = len(rec.events)
    ended = await rec.wait("completion.ended", start=start - 3, pred=lambda d: "Demo answer" in d["message"]["content"])
    assert "`get_selection`" in ended["message"]["content"]
    await rec.disconnect()


async def test_unanswered_call_times_out_and_turn_continues(relay: Any, http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    cid = data["conversation"]["id"]
    await register(rec, "get_selection")
    t0 = time.monotonic()
    await rec.call("user_message", {"text": "call get_selection", "idempotency_key": "m"})
    begin = await rec.wait("function_call.begin")
    end = await rec.wait("function_call.end", timeout=10)
    assert 1.9 < time.monotonic() - t0 < 9
    assert end["status"] == "error" and "did not answer" in end["error"]
    fin = await rec.wait("completion.finished")
    assert fin["status"] == "done"
    final = [d for e, d in rec.events if e == "completion.ended"][-1]["message"]
    assert "did not answer" in final["content"]
    # a late response is refused and recorded
    late = await rec.call("function_response",
                          {"id": begin["id"], "status": "success", "result": 1, "idempotency_key": "late"})
    assert err(late) == "call_not_pending"
    refused = await relay.hub.store.refused(cid)
    assert refused and refused[-1]["payload"]["id"] == begin["id"] and "timed_out" in refused[-1]["reason"]
    assert err(await rec.call("function_response",
                              {"id": "call_nope", "status": "success", "result": 1,
                               "idempotency_key": "u"})) == "call_not_pending"
    await rec.disconnect()


async def test_cancel_stops_turn(relay: Any, http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    await register(rec, "get_selection")
    await rec.call("user_message", {"text": "call get_selection", "idempotency_key": "m"})
    begin = await rec.wait("function_call.begin")
    ack = await rec.call("cancel", {"idempotency_key": "c1"})
    assert ack == {"ok": True, "cancelled": True}
    assert await rec.call("cancel", {"idempotency_key": "c1"}) == ack  # idempotent
    end = await rec.wait("function_call.end")
    assert end["status"] == "error" and end["error"] == "Cancelled."
    fin = await rec.wait("completion.finished")
    assert fin["status"] == "cancelled"
    await rec.wait("user_input")
    assert (await rec.call("cancel", {"idempotency_key": "c2"})) == {"ok": True, "cancelled": False}
    assert err(await rec.call("function_response",
                              {"id": begin["id"], "status": "success", "result": 1,
                               "idempotency_key": "r"})) == "call_not_pending"
    body = await info(http, url)
    assert body["conversation"]["status"] == "idle"
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool"]
    assert body["messages"][2]["error"] == "Cancelled."
    # the conversation goes on
    assert (await rec.call("user_message", {"text": "hello", "idempotency_key": "m2"}))["ok"]
    await rec.wait("completion.finished", pred=lambda d: d["status"] == "done")
    await rec.disconnect()


async def test_model_error_reaches_client(relay: Any, http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    await rec.call("user_message", {"text": "please simulate model error", "idempotency_key": "m"})
    msg = await rec.wait("message", pred=lambda d: d["message"]["role"] == "error")
    assert msg["message"]["retryable"] is True and msg["message"]["code"] == "model_error"
    fin = await rec.wait("completion.finished")
    assert fin["status"] == "failed"
    await rec.wait("user_input")
    body = await info(http, url)
    assert body["conversation"]["status"] == "failed"
    assert (await rec.call("user_message", {"text": "hello again", "idempotency_key": "m2"}))["ok"]
    await rec.wait("completion.finished", pred=lambda d: d["status"] == "done")
    await rec.disconnect()


async def test_ask_user_suspends_and_resumes(relay: Any, http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url, app="ask")
    await rec.call("user_message", {"text": "ask me something", "idempotency_key": "m"})
    req = await rec.wait("ask_user.request")
    prompt = req["prompts"][0]
    assert prompt["type"] == "radiolist" and prompt["question"]
    assert (await rec.wait("user_input", pred=lambda d: d["reason"] == "ask_user"))
    body = await info(http, url)
    assert body["conversation"]["status"] == "WAITING_FOR_ASK_USER"
    assert body["pending_ask_user"] == req["prompts"]
    assert err(await rec.call("user_message", {"text": "other", "idempotency_key": "m2"})) == "busy"
    ask = f"{url}/ask_user"
    r = await http.post(ask, json={"answers": {"id": prompt["id"], "result": "purple"}, "idempotency_key": "a0"})
    assert r.status == 400 and "one of" in (await r.json())["error"]["message"]
    r = await http.post(ask, json={"answers": [{"id": "call_unknown", "result": "blue"}]})
    assert r.status == 400
    r = await http.post(ask, json={"answers": {"id": prompt["id"], "result": "blue"}, "idempotency_key": "a1"})
    assert r.status == 200
    assert "pending_ask_user" not in (await r.json())
    fin = await rec.wait("completion.finished")
    assert fin["status"] == "done"
    final = [d for e, d in rec.events if e == "completion.ended"][-1]["message"]
    assert "blue" in final["content"]
    r = await http.post(ask, json={"answers": {"id": prompt["id"], "result": "blue"}, "idempotency_key": "a1"})
    assert r.status == 200  # a repeat with the same key is answered, not applied again
    body = await info(http, url)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert body["messages"][2]["result"] == "blue"
    await rec.disconnect()


# ---------------------------------------------------------------------------------------------- replay, roles


async def test_reconnect_replays_exactly_missed_events(relay: Any, http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    await rec.call("user_message", {"text": "first", "idempotency_key": "m1"})
    await rec.wait("user_input")
    seen = rec.seqd()
    last_seq = seen[-1][1]["seq"]
    await rec.disconnect()
    # events happen while it is away
    other, _, _ = await joined(http, relay.url, url=url, last_seq=None)
    await other.call("user_message", {"text": "second", "idempotency_key": "m2"})
    await other.wait("user_input", pred=lambda d: d["seq"] > last_seq)
    missed = [(e, d) for e, d in other.seqd() if d["seq"] > last_seq]
    await other.disconnect()
    back, _, _ = await joined(http, relay.url, url=url, last_seq=last_seq)
    await back.wait("user_input")
    await asyncio.sleep(0.05)
    replayed = back.seqd()
    assert [d["seq"] for _, d in replayed] == list(range(last_seq + 1, last_seq + 1 + len(missed)))
    assert replayed == missed
    # replay on request
    ack = await back.call("replay", {"last_seq": last_seq + 2})
    assert ack["ok"] and ack["seq"] == missed[-1][1]["seq"]
    again = back.seqd()[len(replayed):]
    assert again == missed[2:]
    # a reload joining with the GET's seq gets nothing twice
    body = await info(http, url)
    fresh, _, _ = await joined(http, relay.url, url=url, last_seq=body["conversation"]["seq"])
    await asyncio.sleep(0.1)
    assert fresh.seqd() == []
    for r in (back, fresh):
        await r.disconnect()


async def test_second_joiner_becomes_active(relay: Any, http: aiohttp.ClientSession) -> None:
    first, data, url = await joined(http, relay.url)
    second, _, _ = await joined(http, relay.url, url=url, last_seq=None)
    role = await first.wait("client.role")
    assert role == {"active": False, "conversation_id": data["conversation"]["id"]}
    patch = {"patch": [{"op": "add", "path": "/autopilot/context/x", "value": 1}], "idempotency_key": "p1"}
    assert err(await first.call("state_patch", patch)) == "not_active"
    assert (await second.call("state_patch", {**patch, "idempotency_key": "p2"})) == {"ok": True}
    await register(second, "get_selection")
    second.auto_answer = lambda c: "from second"
    first.auto_answer = lambda c: "from first"
    await second.call("user_message", {"text": "call get_selection", "idempotency_key": "m"})
    b1 = await first.wait("function_call.begin")
    b2 = await second.wait("function_call.begin")
    assert b1["run"] is False and b2["run"] is True and b1["seq"] == b2["seq"]
    end = await first.wait("function_call.end")
    assert end["result"] == "from second"
    assert err(await first.call("function_response",
                                {"id": b1["id"], "status": "success", "result": 0,
                                 "idempotency_key": "x"})) == "not_active"
    await second.wait("user_input")
    ack = await first.call("activate", {})
    assert ack["ok"] and ack["active"] is True and ack["pending_calls"] == []
    assert await second.wait("client.role") == {"active": False, "conversation_id": data["conversation"]["id"]}
    assert (await first.call("state_patch", {**patch, "idempotency_key": "p3"})) == {"ok": True}
    await first.disconnect()
    await second.disconnect()


async def test_pending_call_goes_to_the_next_active_client(http: aiohttp.ClientSession, tmp_path: Any,
                                                           store_kind: str) -> None:
    h = await launch(tmp_path, store=store_kind, function_call_timeout_s=10.0)
    try:
        rec, data, url = await joined(http, h.url)
        await register(rec, "get_selection")
        await rec.call("user_message", {"text": "call get_selection", "idempotency_key": "m"})
        begin = await rec.wait("function_call.begin")
        await rec.disconnect()  # a reload before answering
        body = await info(http, url)
        assert body["conversation"]["status"] == "waiting_for_function"
        nxt = await Recorder(h.url).connect()
        ack = await nxt.join(body["token"], body["conversation"]["seq"])
        assert [c["id"] for c in ack["pending_calls"]] == [begin["id"]]
        replayed_begin = await nxt.wait("function_call.begin")
        assert replayed_begin["run"] is False  # replay never runs anything
        r = await nxt.call("function_response",
                           {"id": begin["id"], "status": "success", "result": "late but fine", "idempotency_key": "r"})
        assert r == {"ok": True}
        fin = await nxt.wait("completion.finished")
        assert fin["status"] == "done"
        await nxt.disconnect()
    finally:
        await h.stop()


async def test_restart_keeps_everything(http: aiohttp.ClientSession, tmp_path: Any, store_kind: str) -> None:
    h = await launch(tmp_path, store=store_kind, function_call_timeout_s=10.0)
    rec, data, url = await joined(http, h.url)
    await register(rec, "get_selection")
    await rec.call("state_patch",
                   {"patch": [{"op": "add", "path": "/autopilot/context/page", "value": "/p"}], "idempotency_key": "c"})
    rec.auto_answer = lambda c: "sel"
    await rec.call("user_message", {"text": "call get_selection", "idempotency_key": "m1"})
    await rec.wait("user_input")
    rec.auto_answer = None
    await rec.call("user_message", {"text": "call get_selection again", "idempotency_key": "m2"})
    await rec.wait("function_call.begin",
                   pred=lambda d: len([e for e in rec.events if e[0] == "function_call.begin"]) == 2)
    before = await info(http, url)
    events_before = rec.seqd()
    await rec.disconnect()
    await h.stop()

    h2 = await launch(tmp_path, store=store_kind, function_call_timeout_s=10.0)
    try:
        after = await info(http, url.replace(h.url, h2.url))
        assert after["messages"][: len(before["messages"])] == before["messages"]
        # the turn that was waiting when the relay died is failed, with a retryable error
        assert after["conversation"]["status"] == "failed"
        assert after["messages"][-1]["role"] == "error" and after["messages"][-1]["retryable"] is True
        again = await Recorder(h2.url).connect()
        ack = await again.join(after["token"], 0)
        # the call that was running is not cancelled (its answer may still come; a retry resumes from it)
        interrupted = [d["id"] for e, d in events_before if e == "function_call.begin"][-1]
        assert ack["ok"] and [c["id"] for c in ack["pending_calls"]] == [interrupted]
        state = await again.wait("state")
        assert state["context"] == {"page": "/p"} and "get_selection" in state["functions"]
        await again.wait("user_input", pred=lambda d: d["seq"] == ack["seq"])
        replayed = again.seqd()
        def norun(evs: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
            return [(e, {k: v for k, v in d.items() if k != "run"}) for e, d in evs]

        assert norun(replayed[: len(events_before)]) == norun(events_before)
        assert all(d["run"] is False for e, d in replayed if e == "function_call.begin")
        assert [d["seq"] for _, d in replayed] == list(range(1, ack["seq"] + 1))
        assert (await again.call("user_message", {"text": "hello", "idempotency_key": "m3"}))["ok"]
        await again.wait("completion.finished", pred=lambda d: d["status"] == "done")
        # a new message instead of a retry: the interrupted turn's call is ended, never to be run
        assert (await again.wait("function_call.end", pred=lambda d: d["id"] == interrupted))["status"] == "error"
        assert (await h2.hub.store.get_call(after["conversation"]["id"], interrupted))["status"] == "cancelled"
        # idempotency keys survive the restart too
        assert (await again.call("user_message", {"text": "call get_selection", "idempotency_key": "m1"}))["ok"]
        await again.disconnect()
    finally:
        await h2.stop()


async def test_healthz_and_readyz(relay: Any, http: aiohttp.ClientSession) -> None:
    r = await http.get(f"{relay.url}/healthz")
    body = await r.json()
    assert r.status == 200 and body["ok"] is True and body["instance"] == relay.hub.instance
    r = await http.get(f"{relay.url}/readyz")
    assert r.status == 200 and await r.json() == {"ok": True, "instance": relay.hub.instance, "checks": {"store": "ok"}}


async def test_retention_deletes_idle_conversations(http: aiohttp.ClientSession, tmp_path: Any,
                                                    store_kind: str) -> None:
    h = await launch(tmp_path, store=store_kind)
    url = await create(http, h.url)
    await h.stop()
    await asyncio.sleep(0.15)
    h2 = await launch(tmp_path, store=store_kind, retention_days=0.1 / 86400)  # 0.1 s: the startup sweep deletes it
    try:
        r = await http.get(url.replace(h.url, h2.url))
        assert r.status == 404
    finally:
        await h2.stop()


def test_history_trimming_keeps_whole_recent_exchanges(relay: Any) -> None:
    hub = relay.hub
    msgs = []
    for i in range(5):
        msgs.append({"id": f"u{i}", "role": "user", "content": f"question {i} " + "x" * 100})
        msgs.append({"id": f"a{i}", "role": "assistant", "content": "",
                     "function_calls": [{"id": f"c{i}", "name": "f", "arguments": {}}]})
        msgs.append({"id": f"t{i}", "role": "tool", "function_call_id": f"c{i}", "status": "success",
                     "result": "r" * 50, "kind": "function"})
    saved = hub.config.max_history_chars
    hub.config.max_history_chars = 900
    try:
        out = hub._history(msgs, {})
    finally:
        hub.config.max_history_chars = saved
    assert out[0]["role"] == "user" and out[-1]["role"] == "tool"
    kept = [m["content"].split()[1] for m in out if m["role"] == "user"]
    assert kept == ["3", "4"]
    # every assistant tool call keeps its result right after it
    for i, m in enumerate(out):
        if m.get("tool_calls"):
            assert out[i + 1]["tool_call_id"] == m["tool_calls"][0]["id"]
    # a call without a stored result (interrupted turn) gets one, so the provider accepts the history
    out = hub._history([msgs[0], msgs[1]], {})
    assert out[-1] == {"role": "tool", "tool_call_id": "c0", "content": "Error: no result (the turn was interrupted)."}

"""Bounds on what an outsider can make the relay hold, and protocol rules the relay enforces, on a real relay over
HTTP and Socket.IO (the rate limiter itself, pure: tests/test_relay_limits.py; the bounds' settings:
tests/test_relay_config.py)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from relay_helpers import (
    STORE_KINDS,
    Recorder,
    ScriptedModel,
    create,
    info,
    joined,
    launch,
    register,
)

from widget import protocol as P
from widget.relay.models.base import ModelRequest, TextDelta, ToolCall
from widget.relay.storage.sql import fetch as S_fetch

pytestmark = pytest.mark.relay


# ------------------------------------------------------------------------------------------- the relay
# (a relay in this loop over real HTTP and Socket.IO, on SQLite and on PostgreSQL)


@pytest_asyncio.fixture(scope="module", params=STORE_KINDS)
async def relay(request: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    handle = await launch(tmp_path_factory.mktemp("hardening"), store=request.param)
    yield handle
    await handle.stop()


def err(ack: Any) -> str:
    assert isinstance(ack, dict) and ack.get("ok") is False, ack
    return ack["error"]["code"]


PATCH = [{"op": "add", "path": "/autopilot/context/page", "value": "/cart"}]


async def test_idempotency_key_reused_by_another_event_is_refused(relay: Any, http: aiohttp.ClientSession) -> None:
    """A key already acknowledging a state_patch does not silently 'acknowledge' a user_message (which
    would then be lost): the message is refused with its own code, nothing is stored, and the key still
    answers repeats of the patch."""
    rec, data, url = await joined(http, relay.url)
    try:
        assert await rec.call("state_patch", {"patch": PATCH, "idempotency_key": "k1"}) == {"ok": True}
        ack = await rec.call("user_message", {"text": "hello", "idempotency_key": "k1"})
        assert err(ack) == P.ErrorCode.IDEMPOTENCY_KEY_REUSED and "state_patch" in ack["error"]["message"]
        for event, payload in (("cancel", {}), ("retry", {}), ("regenerate", {}),
                               ("function_response", {"id": "call_x", "status": "success", "result": 1})):
            ack = await rec.call(event, {**payload, "idempotency_key": "k1"})
            assert err(ack) == P.ErrorCode.IDEMPOTENCY_KEY_REUSED, event
        assert [m for m in (await info(http, url))["messages"] if m["role"] == "user"] == []
        assert await rec.call("state_patch", {"patch": PATCH, "idempotency_key": "k1"}) == {"ok": True}  # a repeat
        ok = await rec.call("user_message", {"text": "hello", "idempotency_key": "k2"})
        assert ok["ok"] and ok["message_id"].startswith("m_")
        await rec.wait("completion.finished")
        # and the other way round: a message's key is not a patch's
        ack = await rec.call("state_patch", {"patch": PATCH, "idempotency_key": "k2"})
        assert err(ack) == P.ErrorCode.IDEMPOTENCY_KEY_REUSED
    finally:
        await rec.disconnect()


async def test_idempotency_rows_expire_after_the_window(relay: Any, http: aiohttp.ClientSession) -> None:
    """Acks older than ``idempotency_retention_s`` are forgotten (by the store's sweep), newer ones kept."""
    rec, data, url = await joined(http, relay.url)
    cid = data["conversation"]["id"]
    store = relay.hub.store
    try:
        assert await rec.call("state_patch", {"patch": PATCH, "idempotency_key": "old"}) == {"ok": True}
        assert await store.get_ack(cid, "old") == {"ok": True}
        cut = time.time()
        assert await rec.call("state_patch", {"patch": PATCH, "idempotency_key": "new"}) == {"ok": True}
        await store.expire_acks(cut)
        assert await store.get_ack(cid, "old") is None and await store.get_ack(cid, "new") == {"ok": True}
        # the hub's sweep uses the window: a day later the newer one is gone too
        assert await relay.hub.expire_acks(time.time() + relay.hub.config.idempotency_retention_s + 1) >= 1
        assert await store.get_ack(cid, "new") is None
        # a forgotten key is a new write
        assert await rec.call("state_patch", {"patch": PATCH, "idempotency_key": "new"}) == {"ok": True}
    finally:
        await rec.disconnect()


class GatedModel(ScriptedModel):
    """A ScriptedModel whose rounds may hold an ``asyncio.Event``: the stream waits for it there."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:  # type: ignore[override]
        self.requests.append(request)
        chunks = self.rounds.pop(0) if self.rounds else [TextDelta("(unscripted)")]
        for c in chunks:
            if isinstance(c, asyncio.Event):
                await c.wait()
                continue
            if isinstance(c, BaseException):
                raise c
            await asyncio.sleep(0)
            yield c


@pytest_asyncio.fixture(scope="module", params=STORE_KINDS)
async def gated(request: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Any, GatedModel]]:
    model = GatedModel()
    handle = await launch(tmp_path_factory.mktemp("gated"), adapters={"demo": model}, store=request.param)
    yield handle, model
    await handle.stop()


async def test_a_socket_that_joins_another_conversation_leaves_the_first(gated: tuple[Any, GatedModel],
                                                                         http: aiohttp.ClientSession) -> None:
    """One conversation per socket: after joining a second conversation a socket gets no call, event or
    role change of the first; the first's calls go to the next socket that joins it."""
    relay, model = gated
    model.reset()
    go = asyncio.Event()
    model.script([go, ToolCall("get_selection", {})], [TextDelta("done")])
    rec, data1, url1 = await joined(http, relay.url)
    other = None
    try:
        await register(rec, "get_selection")
        assert (await rec.call("user_message", {"text": "hi", "idempotency_key": "m1"}))["ok"]
        await rec.wait("message")
        url2 = await create(http, relay.url)
        data2 = await info(http, url2)
        ack = await rec.join(data2["token"], 0)
        assert ack["ok"] and ack["conversation_id"] == data2["conversation"]["id"]
        mark = len(rec.events)
        go.set()  # conversation 1 now calls its page function: nobody there is active
        deadline = time.monotonic() + 5
        while (await info(http, url1))["conversation"]["status"] != "waiting_for_function":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        other = await Recorder(data1["relay_url"], data1["relay_path"]).connect()
        fresh = await info(http, url1)
        ack1 = await other.join(fresh["token"], 0)
        assert [c["name"] for c in ack1["pending_calls"]] == ["get_selection"]  # the call goes to the newcomer
        assert (await other.call("function_response", {"id": ack1["pending_calls"][0]["id"], "status": "success",
                                                       "result": "x", "idempotency_key": "r1"}))["ok"]
        await other.wait("completion.finished")
        seen = rec.events[mark:]
        assert [e for e, _ in seen if e == "client.role"] == []  # no role change of a conversation it left
        assert [e for e, d in seen if e == "function_call.begin"] == []
        # its writes go to the conversation it joined last
        assert (await rec.call("state_patch", {"patch": PATCH, "idempotency_key": "p2"})) == {"ok": True}
        second = await relay.hub.store.get_state(data2["conversation"]["id"])
        assert second["autopilot"]["context"] == {"page": "/cart"}
        assert (await relay.hub.store.get_state(data1["conversation"]["id"]))["autopilot"]["context"] == {}
    finally:
        await rec.disconnect()
        if other is not None:
            await other.disconnect()


async def test_client_role_names_its_conversation_and_activate_sends_state(relay: Any,
                                                                          http: aiohttp.ClientSession) -> None:
    a, data, url = await joined(http, relay.url)
    b = None
    try:
        await register(a, "get_selection")
        b = await Recorder(data["relay_url"], data["relay_path"]).connect()
        assert (await b.join((await info(http, url))["token"], 0))["ok"]
        role = await a.wait("client.role")
        assert role == {"active": False, "conversation_id": data["conversation"]["id"]}
        mark = len(a.events)
        ack = await a.call("activate", {})
        assert ack["ok"] and ack["active"] is True
        state = await a.wait("state", start=mark)
        assert list(state["functions"]) == ["get_selection"]
        assert (await b.wait("client.role"))["conversation_id"] == data["conversation"]["id"]
    finally:
        await a.disconnect()
        if b is not None:
            await b.disconnect()


@pytest.mark.parametrize("store_kind", STORE_KINDS)
@pytest.mark.parametrize("answered_before_restart", [False, True])
async def test_retry_after_a_restart_mid_call_uses_the_result_of_the_call_that_ran(
        store_kind: str, answered_before_restart: bool, tmp_path: Path, http: aiohttp.ClientSession) -> None:
    """The relay stops while the page runs a call. Opening the conversation again (its GET recovers the
    turn) does not cancel the call: the page's answer — stored just before the relay died, or resent
    after the restart — is kept, and Retry finishes the interrupted round from it: the model is not asked
    to call the function again and the page runs it once."""
    model = GatedModel()
    model.script([TextDelta("Let me look. "), ToolCall("get_selection", {})])
    relay = await launch(tmp_path, adapters={"demo": model}, store=store_kind)
    rec, data, url = await joined(http, relay.url)
    cid = data["conversation"]["id"]
    try:
        await register(rec, "get_selection")
        assert (await rec.call("user_message", {"text": "what is selected?", "idempotency_key": "m1"}))["ok"]
        begin = await rec.wait("function_call.begin", lambda d: d.get("run") is True)
    finally:
        await rec.disconnect()
        await relay.stop()  # the turn is left as it was, like a relay that died
    response = {"id": begin["id"], "status": "success", "result": "the selection", "idempotency_key": "r1",
                "duration_ms": 2.0, "total_ms": 3.0}
    model.reset()
    model.script([TextDelta("It says: the selection.")])
    old_base = relay.url
    relay = await launch(tmp_path, adapters={"demo": model}, store=store_kind)
    url = relay.url + url[len(old_base):]  # the same conversation on the restarted relay (another port)
    rec2 = None
    try:
        if answered_before_restart:  # the answer was stored, then the relay died before the turn went on
            assert await relay.hub.store.finish_call(cid, begin["id"], "answered", result="the selection",
                                                     duration_ms=2.0, total_ms=3.0)
        body = await info(http, url)  # the GET recovers the turn: failed, with Retry
        assert body["conversation"]["status"] == "failed"
        call = await relay.hub.store.get_call(cid, begin["id"])
        assert call["status"] == ("answered" if answered_before_restart else "pending")
        rec2 = await Recorder(body["relay_url"], body["relay_path"]).connect()
        ack = await rec2.join(body["token"], 0)
        assert ack["ok"]
        await rec2.wait("user_input", lambda d: d["seq"] == ack["seq"])  # the join's replay is over
        if not answered_before_restart:
            assert [c["id"] for c in ack["pending_calls"]] == [begin["id"]]
            assert await rec2.call("function_response", response) == {"ok": True}  # the resent answer is kept
        else:
            assert ack["pending_calls"] == []
        mark = len(rec2.events)
        assert (await rec2.call("retry", {"idempotency_key": "t1"}))["ok"]
        fin = await rec2.wait("completion.finished", start=mark)
        assert fin["status"] == "done"
        after = rec2.events[mark:]
        assert [d for e, d in after if e == "function_call.begin"] == []  # nothing asked of the page again
        ends = [d for e, d in after if e == "function_call.end"]
        assert [(d["id"], d["status"], d["result"]) for d in ends] == [(begin["id"], "success", "the selection")]
        assert len(model.requests) == 1  # the model was asked only for the round after the call
        last = model.requests[0].messages[-1]
        assert last == {"role": "tool", "tool_call_id": begin["id"], "content": "the selection"}
        msgs = (await info(http, url))["messages"]
        assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant"]
        assert msgs[1]["content"] == "Let me look. " and msgs[1]["function_calls"][0]["id"] == begin["id"]
        assert msgs[2]["result"] == "the selection" and msgs[3]["content"] == "It says: the selection."
    finally:
        if rec2 is not None:
            await rec2.disconnect()
        await relay.stop()


# --------------------------------------------------------------------------- bounds on what one socket costs


class RawSocket:
    """A Socket.IO client over a bare WebSocket: packets in the order they arrive, and a reader that can
    stop reading (the transport's flow control then holds the relay's writes)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.next_id = 0

    @classmethod
    async def connect(cls, http: aiohttp.ClientSession, base: str) -> RawSocket:
        url = base.replace("http", "ws", 1) + "/socket.io/?EIO=4&transport=websocket"
        ws = await http.ws_connect(url, max_msg_size=0)
        raw = cls(ws)
        assert (await raw.frame()).startswith("0")  # Engine.IO open
        await ws.send_str("40")
        assert (await raw.frame()).startswith("40")  # Socket.IO connect
        return raw

    async def frame(self, timeout: float = 5.0) -> str:
        while True:
            msg = await asyncio.wait_for(self.ws.receive(), timeout)
            if msg.type != aiohttp.WSMsgType.TEXT:
                raise ConnectionError(f"the relay closed the socket ({msg.type})")
            if msg.data == "2":  # Engine.IO ping
                await self.ws.send_str("3")
                continue
            return msg.data

    async def send(self, event: str, data: Any) -> int:
        """Send an event asking for an ack; its ack id."""
        self.next_id += 1
        await self.ws.send_str(f"42{self.next_id}" + json.dumps([event, data]))
        return self.next_id

    async def packets(self, until: Callable[[list[tuple[str, Any]]], bool],
                      timeout: float = 5.0) -> list[tuple[str, Any]]:
        """``("ack:<id>", payload)`` and ``(event, payload)`` in arrival order, until ``until`` holds."""
        out: list[tuple[str, Any]] = []
        deadline = time.monotonic() + timeout
        while not until(out):
            text = await self.frame(max(0.01, deadline - time.monotonic()))
            if text.startswith("43"):
                i = text.index("[")
                out.append((f"ack:{text[2:i]}", json.loads(text[i:])[0]))
            elif text.startswith("42"):
                name, *rest = json.loads(text[2:])
                out.append((name, rest[0] if rest else None))
        return out


@pytest_asyncio.fixture(scope="module")
async def tight(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    """A relay with small socket bounds (SQLite)."""
    handle = await launch(tmp_path_factory.mktemp("tight"), unjoined_socket_timeout_s=0.3, replay_rate_per_minute=3,
                          state_patch_rate_per_minute=4, max_events_per_conversation=30,
                          socket_send_queue_bytes=300_000)
    handle.hub.send_queues.drain_timeout_s = 1.0
    yield handle
    await handle.stop()


async def test_a_socket_that_never_joins_is_closed(tight: Any, http: aiohttp.ClientSession) -> None:
    """``unjoined_socket_timeout_s``: a socket that has not joined by then is disconnected; a joined one stays."""
    member, _, _ = await joined(http, tight.url)
    idle = await Recorder(tight.url).connect()
    try:
        t0 = time.monotonic()
        while idle.sio.connected:
            assert time.monotonic() - t0 < 5, "the unjoined socket is still open"
            await asyncio.sleep(0.02)
        assert member.sio.connected  # joined before the other connected, so past the timeout too
        assert tight.hub.membership.closed_unjoined >= 1
    finally:
        await idle.disconnect()
        await member.disconnect()


async def test_replay_and_state_patch_are_rate_limited(tight: Any, http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, tight.url)
    try:
        acks = [await rec.call("replay", {"last_seq": 0}) for _ in range(4)]
        assert all(a["ok"] for a in acks[:3])
        assert err(acks[3]) == P.ErrorCode.RATE_LIMITED and 0 < acks[3]["error"]["retry_after"] <= 60
        patches = [await rec.call("state_patch", {"patch": PATCH, "idempotency_key": f"p{i}"}) for i in range(5)]
        assert patches[:4] == [{"ok": True}] * 4
        assert err(patches[4]) == P.ErrorCode.RATE_LIMITED and patches[4]["error"]["retry_after"] > 0
        # a repeat of an acknowledged patch is answered from its key, not counted
        assert await rec.call("state_patch", {"patch": PATCH, "idempotency_key": "p0"}) == {"ok": True}
    finally:
        await rec.disconnect()


async def test_a_full_conversation_refuses_new_turns(tight: Any, http: aiohttp.ClientSession) -> None:
    """``max_events_per_conversation``: once the log holds that many events, no new turn starts."""
    rec, data, url = await joined(http, tight.url)
    try:
        for i in range(20):
            ack = await rec.call("user_message", {"text": f"hello {i}", "idempotency_key": f"m{i}"})
            if not ack["ok"]:
                break
            while (await info(http, url))["conversation"]["status"] != "idle":
                await asyncio.sleep(0.02)
        assert err(ack) == P.ErrorCode.CONVERSATION_FULL
        assert (await info(http, url))["conversation"]["seq"] >= 30
        assert err(await rec.call("regenerate", {"idempotency_key": "g"})) == P.ErrorCode.CONVERSATION_FULL
    finally:
        await rec.disconnect()


async def test_join_order_and_the_end_of_its_replay(relay: Any, http: aiohttp.ClientSession) -> None:
    """A join is answered in this order: its ack, ``state``, the replayed events (``seq`` > ``last_seq``),
    ``replay.done {last_seq}``, then live events. A write's ack follows the events the write stored."""
    rec, data, url = await joined(http, relay.url)
    raw = None
    try:
        assert (await rec.call("user_message", {"text": "hello", "idempotency_key": "m1"}))["ok"]
        await rec.wait("user_input")
        seq = (await info(http, url))["conversation"]["seq"]
        raw = await RawSocket.connect(http, relay.url)
        fresh = await info(http, url)
        jid = await raw.send("join", {"token": fresh["token"], "version": 1, "last_seq": 2})
        got = await raw.packets(lambda out: any(e == "replay.done" for e, _ in out))
        names = [e for e, _ in got]
        assert names[0] == f"ack:{jid}" and got[0][1]["seq"] == seq
        assert names[1] == "state"
        assert [d["seq"] for _, d in got[2:-1]] == list(range(3, seq + 1))
        assert got[-1] == ("replay.done", {"last_seq": seq})
        # a write's ack comes after the event it stored: the message, then the ack, then the turn
        mid = await raw.send("user_message", {"text": "again", "idempotency_key": "m2"})
        got = await raw.packets(lambda out: any(e == "user_input" for e, _ in out))
        names = [e for e, _ in got]
        assert names[0] == "message" and got[0][1]["message"]["content"] == "again"
        assert names[1] == f"ack:{mid}" and got[1][1]["message_id"] == got[0][1]["message"]["id"]
        assert names[-1] == "user_input"
        # and an empty replay still ends with its marker
        again = await RawSocket.connect(http, relay.url)
        top = (await info(http, url))["conversation"]["seq"]
        jid = await again.send("join", {"token": (await info(http, url))["token"], "version": 1, "last_seq": top})
        got = await again.packets(lambda out: any(e == "replay.done" for e, _ in out))
        assert [e for e, _ in got] == [f"ack:{jid}", "state", "replay.done"] and got[-1][1] == {"last_seq": top}
        await again.ws.close()
    finally:
        await rec.disconnect()
        if raw is not None:
            await raw.ws.close()


async def test_replayed_calls_never_run(gated: tuple[Any, GatedModel], http: aiohttp.ClientSession) -> None:
    """``run: true`` is only on the live copy sent to the socket the call is dispatched to; a ``replay``
    re-sends every copy with ``run: false`` and its ack lists the pending calls this socket is to run."""
    relay, model = gated
    model.reset()
    model.script([ToolCall("get_selection", {})], [TextDelta("ok")])
    rec, data, url = await joined(http, relay.url)
    try:
        await register(rec, "get_selection")
        assert (await rec.call("user_message", {"text": "hi", "idempotency_key": "m1"}))["ok"]
        live = await rec.wait("function_call.begin")
        assert live["run"] is True
        mark = len(rec.events)
        ack = await rec.call("replay", {"last_seq": 0})
        copies = [d for e, d in rec.events[mark:] if e == "function_call.begin"]
        assert [c["id"] for c in copies] == [live["id"]] and copies[0]["run"] is False
        assert [c["id"] for c in ack["pending_calls"]] == [live["id"]]
        assert (await rec.call("function_response", {"id": live["id"], "status": "success", "result": 1,
                                                     "idempotency_key": "r1"}))["ok"]
        await rec.wait("completion.finished")
        assert (await rec.call("replay", {"last_seq": 0}))["pending_calls"] == []
    finally:
        await rec.disconnect()


async def test_a_socket_that_stops_reading_is_disconnected(tight: Any, http: aiohttp.ClientSession) -> None:
    """A socket asking for replays of a large conversation and reading nothing: the relay's queue for it
    stays within ``socket_send_queue_bytes`` and the socket is disconnected; others are served."""
    hub = tight.hub
    rec, data, url = await joined(http, tight.url)
    cid = data["conversation"]["id"]
    big = "x" * 15_000
    for i in range(20):  # 20 stored messages of 15 KB: each replay sends ~300 KB
        msg = {"id": f"m_big{i}", "role": "user", "content": big, "created_at": time.time()}
        await hub.store.append_event(cid, "message", {"message": msg}, messages=[msg])
    hub.replay_limiter.limit = 1000
    raw = await RawSocket.connect(http, tight.url)
    try:
        fresh = await info(http, url)
        jid = await raw.send("join", {"token": fresh["token"], "version": 1, "last_seq": fresh["conversation"]["seq"]})
        got = await raw.packets(lambda out: any(e == "replay.done" for e, _ in out))
        assert got[0][0] == f"ack:{jid}"
        sid = got[0][1]["client_id"]
        before = hub.send_queues.disconnected
        peak = 0
        for _ in range(60):  # ~18 MB asked for, nothing read
            await raw.send("replay", {"last_seq": 0})
        t0 = time.monotonic()
        while sid in hub.clients:
            peak = max(peak, hub.send_queues.queued(sid))
            assert time.monotonic() - t0 < 15, "the socket that does not read is still connected"
            await asyncio.sleep(0.005)
        assert hub.send_queues.disconnected == before + 1
        assert peak <= hub.config.socket_send_queue_bytes
        # the relay goes on serving the others
        assert (await rec.call("replay", {"last_seq": fresh["conversation"]["seq"]}))["ok"]
    finally:
        hub.replay_limiter.limit = 3
        await raw.ws.close()
        await rec.disconnect()


async def test_hub_entries_of_conversations_are_dropped_when_unused(gated: tuple[Any, GatedModel],
                                                                   http: aiohttp.ClientSession) -> None:
    """Opening conversations, and a socket that leaves while its turn runs, leave no per-conversation
    entry behind in the hub once the turn is over."""
    relay, model = gated
    hub = relay.hub
    before = set(hub.convs)
    for _ in range(5):
        await info(http, await create(http, relay.url))  # the GET runs the recovery check
    model.reset()
    go = asyncio.Event()
    model.script([go, TextDelta("late answer")])
    rec, data, url = await joined(http, relay.url)
    cid = data["conversation"]["id"]
    assert (await rec.call("user_message", {"text": "hello", "idempotency_key": "m1"}))["ok"]
    await rec.wait("message")
    sid = rec.sio.get_sid()
    assert hub.clients.get(sid) == cid
    await rec.disconnect()  # the turn still runs
    t0 = time.monotonic()
    while sid in hub.clients:
        assert time.monotonic() - t0 < 5
        await asyncio.sleep(0.02)
    assert cid in hub.convs  # its turn keeps it
    go.set()
    while cid in hub.convs:
        assert time.monotonic() - t0 < 10, "the conversation's entry stayed after its turn ended"
        await asyncio.sleep(0.02)
    assert (await info(http, url))["conversation"]["status"] == "idle"
    assert set(hub.convs) <= before


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_streamed_chunks_are_packed_at_the_turn_end_and_replay_is_unchanged(
        store_kind: str, tmp_path: Path, http: aiohttp.ClientSession) -> None:
    """A long streamed answer costs the event log one row once its turn ends; a replay from 0 still gives every
    chunk with its own seq, exactly as it went out live."""
    model = ScriptedModel()
    model.script([TextDelta(f"w{i} ") for i in range(60)], [TextDelta("a"), TextDelta("b")])
    relay = await launch(tmp_path, adapters={"demo": model}, store=store_kind)
    try:
        rec, data, url = await joined(http, relay.url)
        cid = data["conversation"]["id"]
        for key in ("m1", "m2"):
            n = len(rec.events)
            assert (await rec.call("user_message", {"text": "talk", "idempotency_key": key}))["ok"]
            await rec.wait("user_input", start=n, pred=lambda d: d["reason"] == "message")
        live = rec.seqd()
        assert len([e for e, _ in live if e == "completion_stream"]) == 62
        store = relay.hub.store
        deadline = time.monotonic() + 10
        while True:  # the packing runs as the turn task ends, just after its last event
            rows = await store._one(S_fetch("SELECT name FROM events WHERE conversation_id = ?", cid), "read")
            names = [r[0] for r in rows]
            if names.count("completion_stream") == 0 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert names.count("completion_stream") == 0 and names.count("completion_stream.packed") == 2
        again = await Recorder(data["relay_url"], data["relay_path"]).connect()
        fresh = await info(http, url)
        assert (await again.join(fresh["token"], 0))["ok"]
        await again.wait("replay.done")
        assert again.seqd() == live
        # a replay from the middle of a packed run starts at the right chunk
        middle = [d["seq"] for e, d in live if e == "completion_stream"][30]
        third = await Recorder(data["relay_url"], data["relay_path"]).connect()
        assert (await third.join((await info(http, url))["token"], middle))["ok"]
        await third.wait("replay.done")
        assert third.seqd() == [x for x in live if x[1]["seq"] > middle]
        for r in (rec, again, third):
            await r.disconnect()
    finally:
        await relay.stop()

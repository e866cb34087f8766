"""The headless store (no DOM) under CPython, against the in-memory relay: what it holds and what it announces."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fake_relay import BASE, FakeRelay, MemoryTransport

from widget import AutopilotClient
from widget import protocol as P
from widget.store import WAIT_ASK_USER, WAIT_CONFIRMATION, WAIT_FUNCTION, Store

pytestmark = pytest.mark.unit


class Relay(FakeRelay):
    """The fake relay plus what the store's actions need: user messages, cancel, ask-user answers."""

    def __init__(self) -> None:
        super().__init__()
        self.user_messages: list[str] = []
        self.refuse_messages: dict[str, Any] | None = None
        self.answers: list[Any] = []
        self.cancels = 0
        self.ops: list[str] = []

    async def _handle(self, transport: MemoryTransport, event: str, data: Any) -> Any:
        if event == P.Event.USER_MESSAGE:
            if self.refuse_messages:
                return {"ok": False, "error": self.refuse_messages}
            self.user_messages.append(data["text"])
            return P.ok(message_id=f"u{len(self.user_messages)}")
        if event == P.Event.CANCEL:
            self.cancels += 1
            return P.ok(cancelled=True)
        if event in (P.Event.RETRY, P.Event.REGENERATE):
            self.ops.append(event)
            if event == P.Event.RETRY and not any(p.get("message", {}).get("role") == "error" for _, p in self.events):
                return P.error("nothing_to_retry", "The last turn did not fail.")
            return P.ok(turn_id="t2")
        return await super()._handle(transport, event, data)

    async def handle_request(self, method: str, url: str, body: Any) -> tuple[int, Any]:
        if method == "POST" and url.endswith("/ask_user"):
            self.answers.append(body["answers"])
            return 200, {"ok": True, "pending_ask_user": []}
        return await super().handle_request(method, url, body)


async def settle(n: int = 30) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def connected() -> tuple[Relay, MemoryTransport, AutopilotClient, Store, list[str]]:
    relay = Relay()
    transport = MemoryTransport(relay)
    client = AutopilotClient(transport)
    store = Store(client)
    changes: list[str] = []
    store.subscribe(changes.append)
    await client.connect(relay_url=BASE, app_id="demo")
    return relay, transport, client, store, changes


def stream(relay: Relay, t: MemoryTransport, mid: str, *deltas: str) -> None:
    relay.push(t, "completion.started", {"turn_id": "t1", "message_id": mid})
    for d in deltas:
        relay.push(t, "completion_stream", {"message_id": mid, "delta": d})


def finish(relay: Relay, t: MemoryTransport, mid: str, content: str, status: str = "done", **extra: Any) -> None:
    message = {"id": mid, "role": "assistant", "content": content, **extra}
    relay.push(t, "completion.ended", {"message": message, "tool_messages": extra.pop("tool_messages", [])})
    relay.push(t, "completion.finished", {"turn_id": "t1", "status": status})


async def test_the_revision_moves_with_every_change_and_derived_lists_follow_it():
    relay, t, client, store, changes = await connected()
    relay.push(t, "message", {"message": {"id": "u1", "role": "user", "content": "hi"}})
    first, rev = store.messages, store.revision
    # A message that is already there changes nothing: same revision, same list.
    relay.push(t, "message", {"message": {"id": "u1", "role": "user", "content": "hi"}})
    assert store.revision == rev and store.messages is first
    # A change of the list in place of one message (the same length) is seen too: a withdrawal and a new message.
    relay.push(t, "messages.withdrawn", {"message_ids": ["u1"]})
    relay.push(t, "message", {"message": {"id": "u2", "role": "user", "content": "hello"}})
    assert store.revision > rev and [m["id"] for m in store.messages] == ["u2"]
    # A change made by the store itself (a local error) moves it as well, and is shown.
    rev, before = store.revision, store.messages
    relay.refuse_messages = {"code": "busy", "message": "Busy."}
    assert await store.send("again") is False
    assert store.revision > rev and store.messages is not before
    assert [m.get("content") for m in store.messages][-1] == "Busy."
    # Chunks do not move it: the activity log is not rebuilt per chunk either.
    activity = store.activity
    rev = store.revision
    stream(relay, t, "a1", "one", "two")
    assert store.revision == rev and store.activity is activity


async def test_connection_state_and_role_are_announced():
    relay, t, client, store, changes = await connected()
    assert store.connection_state == "connected" and store.connection_error is None
    assert "connection" in changes
    assert store.active and store.can_send


async def test_a_boot_that_connects_next_shows_connecting_from_the_first_frame():
    """The widget's boot mounts the bar, then connects: the bar says "Connecting…" at once, never "Not connected"
    first; a store whose client is already past idle is left as it is."""
    relay = Relay()
    client = AutopilotClient(MemoryTransport(relay))
    store = Store(client)
    changes: list[str] = []
    store.subscribe(changes.append)
    assert store.connection_state == "idle"
    store.expect_connect()
    assert store.connection_state == "connecting" and changes == ["connection"]
    await client.connect(relay_url=BASE, app_id="demo")
    assert store.connection_state == "connected"
    store.expect_connect()
    assert store.connection_state == "connected"


async def test_streaming_chunks_do_not_recompute_committed_messages():
    relay, t, client, store, changes = await connected()
    relay.push(t, "message", {"message": {"id": "u1", "role": "user", "content": "hi"}})
    assert [m["id"] for m in store.messages] == ["u1"]
    committed = store.messages
    changes.clear()
    stream(relay, t, "a1", "Hello", ", ", "world")
    # Chunks only say "streaming"; the committed list is the very same object (not rebuilt per chunk).
    assert "messages" not in changes and changes.count("streaming") >= 3
    assert store.messages is committed
    assert store.is_streaming and store.streaming_message["content"] == "Hello, world"
    assert not store.can_send
    finish(relay, t, "a1", "Hello, world")
    assert "messages" in changes
    assert [m["id"] for m in store.messages] == ["u1", "a1"]
    assert store.streaming_message is None and not store.is_streaming and store.can_send


async def test_calls_get_timings_and_make_the_composer_wait():
    relay, t, client, store, changes = await connected()
    client.register_function("slow", lambda a, c: asyncio.sleep(0.05, "ok"), description="Slow.")
    await client.sync_registered_functions()
    stream(relay, t, "a1", "Calling")
    relay.push(t, "function_call.begin", {"id": "c1", "name": "slow", "arguments": {"x": 1}, "message_id": "a1",
                                          "run": True})
    await settle(5)
    assert store.waiting_for == WAIT_FUNCTION and "waiting" in changes
    calls = store.function_calls
    assert calls[0]["id"] == "c1" and calls[0]["status"] == "running" and calls[0]["arguments"] == {"x": 1}
    await asyncio.sleep(0.1)
    await settle()
    assert relay.responses and relay.responses[0]["status"] == "success"
    # Before the relay echoes the end, the store uses this tab's own measurement.
    duration, total = store.call_timing({"id": "c1"})
    assert duration is not None and duration >= 40 and total is not None and total >= duration
    relay.push(t, "function_call.end", {"id": "c1", "name": "slow", "status": "success", "result": "ok",
                                        "duration_ms": 51.5, "total_ms": 52.25})
    assert store.waiting_for is None
    entry = store.function_calls[0]
    assert (entry["status"], entry["result"], entry["duration_ms"], entry["total_ms"]) == ("success", "ok", 51.5, 52.25)
    assert entry["started_at"] is not None
    assert store.activity[0] is not None and "calls" in changes and "activity" in changes


async def test_confirmation_round_trip_and_expiry():
    relay, t, client, store, changes = await connected()
    ran = []
    client.register_function("wipe", lambda a, c: ran.append(a) or "wiped", sensitive=True)
    client.set_confirmation_handler(store.confirmation_handler)
    await client.sync_registered_functions()
    stream(relay, t, "a1")
    relay.push(t, "function_call.begin", {"id": "c1", "name": "wipe", "arguments": {"all": True}, "run": True})
    await settle()
    assert [c["request"]["name"] for c in store.pending_confirmations] == ["wipe"]
    assert store.pending_confirmations[0]["request"]["arguments"] == {"all": True}
    assert store.waiting_for == WAIT_CONFIRMATION and "confirmations" in changes
    store.resolve_confirmation(store.pending_confirmations[0]["id"], "allow")
    await settle()
    assert ran == [{"all": True}] and store.pending_confirmations == []
    # A second call that the relay ends while the prompt is open: the prompt goes away by itself, never runs.
    relay.push(t, "function_call.begin", {"id": "c2", "name": "wipe", "arguments": {}, "run": True})
    await settle()
    assert len(store.pending_confirmations) == 1
    relay.push(t, "function_call.end", {"id": "c2", "name": "wipe", "status": "error", "error": "Timed out."})
    await settle()
    assert store.pending_confirmations == [] and ran == [{"all": True}]
    assert store.notice and "expired" in store.notice["message"]


async def test_close_denies_pending_confirmations_and_unsubscribes():
    relay, t, client, store, changes = await connected()
    fut = store.confirmation_handler({"id": "x", "name": "wipe", "arguments": {}})
    before = {ev: client.events.listener_count(ev) for ev in ("messagesChanged", "connectionStateChanged")}
    assert all(before.values())
    store.close()
    assert fut.result() == "deny"
    assert client.events.listener_count("messagesChanged") == before["messagesChanged"] - 1
    assert client.events.listener_count("connectionStateChanged") == before["connectionStateChanged"] - 1


async def test_ask_user_prompts_answers_and_clear():
    relay, t, client, store, changes = await connected()
    prompts = [
        {"id": "p1", "type": "text", "question": "Name?"},
        {"id": "p2", "type": "bool", "question": "Gift wrap?"},
        {"id": "p3", "type": "radiolist", "question": "Colour?",
         "arguments": {"options": [{"value": "b", "label": "Blue"}, {"value": "g", "label": "Green"}]}},
        {"id": "p4", "type": "checklist", "question": "Extras?",
         "arguments": {"options": [{"value": "bulb", "label": "Bulb"}, {"value": "cable", "label": "Cable"}]}},
    ]
    relay.push(t, "ask_user.request", {"prompts": prompts})
    assert [p["id"] for p in store.pending_ask_user] == ["p1", "p2", "p3", "p4"]
    assert store.waiting_for == WAIT_ASK_USER and "ask_user" in changes
    # An invalid answer is refused before anything is sent; the store says why and does not raise.
    bad = [{"id": "p1", "result": "Ann"}, {"id": "p2", "result": True}, {"id": "p3", "result": "purple"},
           {"id": "p4", "result": []}]
    assert await store.submit_ask_user(bad) is False
    assert "one of" in store.ask_user_error and relay.answers == []
    good = [{"id": "p1", "result": "Ann"}, {"id": "p2", "result": False}, {"id": "p3", "result": "g"},
            {"id": "p4", "result": ["bulb", "cable"]}]
    assert await store.submit_ask_user(good) is True
    assert relay.answers == [good]
    assert store.pending_ask_user == [] and store.waiting_for is None and store.ask_user_error is None


async def test_send_failure_becomes_a_local_error_with_retry_that_resends():
    relay, t, client, store, changes = await connected()
    relay.push(t, "message", {"message": {"id": "u0", "role": "user", "content": "earlier"}})
    relay.refuse_messages = {"code": "busy", "message": "A turn is already running."}
    assert await store.send("hello") is False
    err = store.messages[-1]
    assert err["role"] == "error" and err["local"] and "already running" in err["content"] and err["retryable"]
    assert store.messages[0]["id"] == "u0"
    relay.refuse_messages = None
    assert await store.retry(err["id"]) is True
    assert relay.user_messages == ["hello"]
    assert all(not m.get("local") for m in store.messages)


async def test_retry_and_regenerate_are_relay_operations_and_failures_show():
    relay, t, client, store, changes = await connected()
    relay.push(t, "message", {"message": {"id": "u1", "role": "user", "content": "what lamps?"}})
    assert await store.retry("nothing-failed") is False  # the relay refuses: shown as a local error, no raise
    assert store.messages[-1]["local"] and "did not fail" in store.messages[-1]["content"]
    assert not store.messages[-1]["retryable"]
    relay.push(t, "message", {"message": {"id": "e1", "role": "error", "content": "Model down.",
                                          "code": "model_error", "retryable": True}})
    assert await store.retry("e1") is True
    assert await store.regenerate() is True
    assert relay.ops == [P.Event.RETRY, P.Event.RETRY, P.Event.REGENERATE] and relay.user_messages == []
    # The relay withdraws what a retry/regenerate replaces; the store's list follows.
    relay.push(t, "messages.withdrawn", {"message_ids": ["e1"], "reason": "retry", "turn_id": "t2"})
    assert "e1" not in [m["id"] for m in store.messages]


async def test_stop_cancels_and_marks_the_answer_stopped():
    relay, t, client, store, changes = await connected()
    stream(relay, t, "a1", "Half an ans")
    assert await store.stop() is True and relay.cancels == 1
    finish(relay, t, "a1", "Half an ans", status="cancelled")
    assert store.messages[-1]["id"] == "a1" and store.messages[-1].get("stopped") is True


async def test_page_and_state_errors_reach_the_activity_log():
    relay, t, client, store, changes = await connected()
    client.events.emit("pageError", {"source": "<page script 1>", "traceback": "Traceback: boom"})
    client.events.emit("stateError", {"code": "state_too_large", "message": "too big"})
    kinds = [(e["kind"], e["name"]) for e in store.activity]
    assert ("error", "Page Python <page script 1>") in kinds and ("error", "State sync") in kinds
    assert store.function_calls == []


async def test_a_broken_subscriber_does_not_break_the_others():
    relay, t, client, store, changes = await connected()
    store.subscribe(lambda what: 1 / 0)
    seen: list[str] = []
    store.subscribe(seen.append)
    stream(relay, t, "a1", "x")
    assert "streaming" in seen


async def test_new_conversation_clears_what_was_shown():
    relay, t, client, store, changes = await connected()
    relay.refuse_messages = {"code": "busy", "message": "busy"}
    await store.send("hello")
    assert store.messages
    relay.refuse_messages = None
    assert await store.new_chat() is True
    assert store.messages == [] and store.connection_state == "connected"


async def test_stop_during_a_confirmation_clears_it_without_an_expired_notice():
    relay, t, client, store, changes = await connected()
    client.register_function("wipe", lambda a, c: "wiped", sensitive=True)
    client.set_confirmation_handler(store.confirmation_handler)
    await client.sync_registered_functions()
    stream(relay, t, "a1")
    relay.push(t, "function_call.begin", {"id": "c1", "name": "wipe", "arguments": {}, "run": True})
    await settle()
    assert store.pending_confirmations
    assert await store.stop() is True
    relay.push(t, "function_call.end", {"id": "c1", "name": "wipe", "status": "error", "error": "Cancelled."})
    await settle()
    assert store.pending_confirmations == [] and store.notice is None
    finish(relay, t, "a1", "", status="cancelled")
    assert store.waiting_for is None and not store.is_streaming

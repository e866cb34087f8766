"""The flows of docs/protocol.md, each checked packet by packet against a running relay.

A flow gets the relay (``Relay``) and the suite's options; it raises ``Mismatch`` at the first packet that is
not what the protocol says, and returns a note (or None). The relay's model must be the demo model
(docs/demo-model.md): the flows drive it with its grammar. Expected values (statuses, roles, codes) are written
as the literal wire strings on purpose: a suite that took them from ``widget.protocol`` would follow a renamed
value instead of catching it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..protocol import MAX_STATE_BYTES, MAX_STATE_DEPTH, MAX_USER_MESSAGE_CHARS, Event
from .peer import Peer, Relay, accepted, check, refused


@dataclass
class Options:
    """What the suite must know about the relay's configuration."""

    #: The relay's ``function_call_timeout_s`` (the timeout flow waits this long).
    call_timeout_s: float = 30.0
    #: An app with the ask-user preset on (and its secret, when creating needs one); None skips that flow.
    ask_app: str | None = None
    ask_secret: str | None = None
    #: Stops the relay gracefully (SIGTERM: its drain) and starts it again on the same store, returning once it
    #: answers; None skips the ``rolling_deploy`` flow. The relay's ``drain_timeout_s`` must be below its call timeout.
    restart: Callable[[], Awaitable[None]] | None = None
    #: An app with a docs index whose model is the demo model (and its secret, when creating needs one); None skips
    #: the ``sources`` and ``uncited`` flows.
    docs_app: str | None = None
    docs_secret: str | None = None
    #: A question the docs app's documentation answers (the ``sources`` flow asks it).
    docs_question: str = "How do I change the colours?"


Flow = Callable[[Relay, Options], Awaitable[str | None]]
FLOWS: dict[str, tuple[Flow, str]] = {}


def flow(name: str) -> Callable[[Flow], Flow]:
    """Register a flow under ``name`` (its docstring's first line is its summary)."""

    def mark(fn: Flow) -> Flow:
        FLOWS[name] = (fn, (fn.__doc__ or "").strip().splitlines()[0].replace("``", "`"))
        return fn

    return mark


FUNC = {
    "name": "get_selection",
    "description": "Returns the selected text.",
    "parameters": {"type": "object", "properties": {}},
    "kind": "function",
    "sensitive": False,
    "source": "client",
}
TOOL = {
    "name": "plan_limits",
    "kind": "tool",
    "description": "Live limits of one plan.",
    "parameters": {
        "type": "object",
        "properties": {"plan": {"type": "string", "enum": ["free", "pro", "team"]}},
        "required": ["plan"],
        "additionalProperties": False,
    },
    "sensitive": False,
    "source": "client",
    "handler": "page",
}
ACTION = {
    "name": "open_pricing",
    "kind": "action",
    "description": "Open the pricing page for one plan.",
    "parameters": {
        "type": "object",
        "properties": {"plan": {"type": "string", "enum": ["free", "pro", "team"]}},
        "required": ["plan"],
        "additionalProperties": False,
    },
    "confirm": "button",
    "label": "Open pricing",
    "title": None,
    "sensitive": False,
    "source": "client",
}

_keys = iter(range(1, 10**9))


def key(prefix: str = "k") -> str:
    """A fresh idempotency key."""
    return f"{prefix}-{time.time_ns()}-{next(_keys)}"


async def declare(peer: Peer, *entries: dict[str, Any]) -> None:
    """Put ``entries`` into ``/autopilot/functions`` (one patch, acked ``{"ok": true}``)."""
    patch = [{"op": "add", "path": f"/autopilot/functions/{e['name']}", "value": e} for e in entries]
    ack = await peer.call(Event.STATE_PATCH, {"patch": patch, "idempotency_key": key("decl")})
    check(ack == {"ok": True}, f"state_patch: expected exactly {{'ok': True}}, got {ack!r}")


async def send(peer: Peer, text: str) -> tuple[str, dict[str, Any]]:
    """Send a user message; read its ``message`` event. ``(message_id, event payload)``."""
    ack = accepted(await peer.call(Event.USER_MESSAGE, {"text": text, "idempotency_key": key("msg")}), "user_message")
    check(set(ack) == {"ok", "message_id"} and isinstance(ack["message_id"], str), f"user_message ack: {ack!r}")
    ev = await peer.expect(Event.MESSAGE)
    msg = ev["message"]
    check(
        msg.get("id") == ack["message_id"] and msg.get("role") == "user" and msg.get("content") == text,
        f"message event of the user message: {ev!r}",
    )
    return ack["message_id"], ev


async def round_start(peer: Peer, turn_id: str | None = None) -> tuple[str, str, str]:
    """``completion.started`` then its ``completion_stream``s: ``(turn_id, message_id, text)``."""
    started = await peer.expect(Event.COMPLETION_STARTED)
    if turn_id is not None:
        check(
            started.get("turn_id") == turn_id, f"completion.started of turn {started.get('turn_id')!r}, not {turn_id!r}"
        )
    text = await peer.stream(started["message_id"])
    return started["turn_id"], started["message_id"], text


async def round_end(peer: Peer, message_id: str, text: str) -> dict[str, Any]:
    """``completion.ended`` of ``message_id``, its content exactly the streamed text; its payload."""
    ended = await peer.expect(Event.COMPLETION_ENDED)
    msg = ended.get("message") or {}
    check(
        msg.get("id") == message_id and msg.get("role") == "assistant",
        f"completion.ended of {msg.get('id')!r}, expected assistant message {message_id!r}",
    )
    check(msg.get("content") == text, f"completion.ended content {msg.get('content')!r} is not the streamed {text!r}")
    check(isinstance(ended.get("tool_messages"), list), f"completion.ended without tool_messages: {ended!r}")
    return ended


async def turn_end(peer: Peer, turn_id: str, status: str = "done") -> None:
    """``completion.finished {turn_id, status}`` then ``user_input {reason: message}``."""
    await peer.expect(Event.COMPLETION_FINISHED, turn_id=turn_id, status=status)
    await peer.expect(Event.USER_INPUT, reason="message")


async def plain_round(peer: Peer, turn_id: str | None = None) -> tuple[str, str, dict[str, Any]]:
    """One round without calls: ``(turn_id, message_id, completion.ended payload)``."""
    tid, mid, text = await round_start(peer, turn_id)
    ended = await round_end(peer, mid, text)
    check(ended["tool_messages"] == [], f"a round without calls has no tool_messages: {ended!r}")
    return tid, mid, ended


def consecutive(events: list[tuple[str, dict[str, Any]]], first: int) -> None:
    """The events' ``seq`` are ``first, first+1, ...``."""
    seqs = [d.get("seq") for _, d in events]
    check(seqs == list(range(first, first + len(seqs))), f"seq must increase by 1 from {first}: {seqs}")


# ----------------------------------------------------------------------------------------------- HTTP
@flow("http")
async def http_flow(r: Relay, o: Options) -> None:
    """Create, get and delete a conversation; health; every HTTP refusal with its status and code."""
    base = r.urls[0]
    status, body, _ = await r.request(
        "POST", f"{base}/api/apps/{r.app}/conversations", headers=r.create_headers(), json={}
    )
    check(status == 201, f"create: 201 expected, got {status} {body!r}")
    check(
        set(body) == {"ok", "id", "url"}
        and body["ok"] is True
        and body["url"].endswith(f"/api/conversations/{body['id']}"),
        f"create body: {body!r}",
    )
    info = await r.get(body["url"])
    conv = info["conversation"]
    check(
        info["protocol_version"] == 1 and conv["id"] == body["id"] and conv["app_id"] == r.app,
        f"GET conversation: {info!r}",
    )
    check(conv["status"] == "idle" and conv["seq"] == 0 and info["messages"] == [], f"a new conversation: {conv!r}")
    check(
        isinstance(info["token"], str) and info["token_expires_at"] > time.time(), "GET: a token that has not expired"
    )
    check("pending_ask_user" not in info, "GET: pending_ask_user only while suspended")
    for method, path, headers, want, code in (
        ("GET", "/api/conversations/c_" + "x" * 32, {}, 404, "not_found"),
        ("POST", "/api/apps/no-such-app-0/conversations", r.create_headers(), 404, "not_found"),
        ("POST", f"/api/apps/{r.app}/conversations", {}, 403, "forbidden_origin"),
        (
            "POST",
            f"/api/apps/{r.app}/conversations",
            {"Origin": "https://not-allowed.invalid"},
            403,
            "forbidden_origin",
        ),
        (
            "POST",
            f"/api/apps/{r.app}/conversations",
            {"Authorization": "Bearer wrong-secret-0123456789"},
            401,
            "unauthorized",
        ),
        ("GET", "/api/no/such/endpoint", {}, 404, "not_found"),
    ):
        status, err, _ = await r.request(method, base + path, headers=headers)
        check(
            status == want and (err or {}).get("error", {}).get("code") == code,
            f"{method} {path}: expected {want} {code}, got {status} {err!r}",
        )
    status, health, _ = await r.request("GET", f"{base}/healthz")
    check(status == 200 and health.get("ok") is True and health.get("protocol_version") == 1, f"/healthz: {health!r}")
    url = await r.create()
    status, _, _ = await r.request("DELETE", url)
    check(status == 204, f"DELETE: 204 expected, got {status}")
    status, err, _ = await r.request("GET", url)
    check(status == 404 and err["error"]["code"] == "not_found", f"GET after DELETE: {status} {err!r}")


# ----------------------------------------------------------------------------------------------- join
@flow("join")
async def join_flow(r: Relay, o: Options) -> None:
    """Join: the ack, then one ``state`` and ``replay.done``; refusals: version, token, not joined, malformed."""
    url = await r.create()
    info = await r.get(url)
    peer = await Peer(info["relay_url"], info["relay_path"], r.timeout).connect()
    try:
        for event in (Event.USER_MESSAGE, Event.STATE_PATCH, Event.RETRY):
            refused(
                await peer.call(event, {"text": "x", "patch": [], "idempotency_key": key()}),
                "not_joined",
                f"{event} before join",
            )
        ack = await peer.call(Event.JOIN, {"token": info["token"], "version": 99, "last_seq": 0})
        refused(ack, "version_mismatch", "join with version 99")
        check(
            "99" in ack["error"]["message"] and "1" in ack["error"]["message"], "version_mismatch names both versions"
        )
        refused(
            await peer.call(Event.JOIN, {"token": "not-a-token", "version": 1}), "invalid_token", "join, forged token"
        )
        refused(
            await peer.call(Event.JOIN, {"token": info["token"], "version": 1, "last_seq": 2**63}),
            "bad_request",
            "join, last_seq over 2**63-1",
        )
        ack = accepted(await peer.join(info["token"], 0), "join")
        check(
            set(ack) >= {"ok", "conversation_id", "seq", "active", "client_id", "pending_calls"}, f"join ack: {ack!r}"
        )
        check(
            ack["conversation_id"] == info["conversation"]["id"]
            and ack["seq"] == 0
            and ack["active"] is True
            and ack["pending_calls"] == []
            and isinstance(ack["client_id"], str),
            f"join ack: {ack!r}",
        )
        state = await peer.expect(Event.STATE)
        check(state == {"functions": {}, "context": {}}, f"state of a new conversation: {state!r}")
        deadline = time.monotonic() + r.timeout
        while not peer.replay_done and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        check(
            peer.replay_done == [(peer.cursor, {"last_seq": 0})],
            f"the join's replay ends with one replay.done {{last_seq: 0}} after state: {peer.replay_done!r}",
        )
        refused(
            await peer.call(Event.USER_MESSAGE, ({"text": "a", "idempotency_key": key()}, 2)),
            "bad_request",
            "an event with two arguments",
        )
        refused(
            await peer.call(Event.USER_MESSAGE, {"text": "\ud800", "idempotency_key": key()}),
            "bad_request",
            "a lone surrogate",
        )
        refused(await peer.call(Event.USER_MESSAGE, {"text": "hi"}), "bad_request", "a write without idempotency_key")
        await peer.quiet()
    finally:
        await peer.close()


# ---------------------------------------------------------------------------------------------- state
def _doc_size(doc: Any) -> int:
    return len(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def _nested(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


@flow("state_patch")
async def state_patch_flow(r: Relay, o: Options) -> None:
    """Patches: applied and shown to the next joiner; exactly at and one over the size and depth limits; atomic."""
    url = await r.create()
    a, _ = await r.peer(url)
    b = c = None
    try:
        await declare(a, FUNC)
        ack = await a.call(
            Event.STATE_PATCH,
            {"patch": [{"op": "add", "path": "/autopilot/context/page", "value": "/cart"}], "idempotency_key": key()},
        )
        check(ack == {"ok": True}, f"state_patch ack: {ack!r}")
        b, _ = await r.peer(url, expect_state=False)
        state = await b.expect(Event.STATE)
        check(
            state == {"functions": {"get_selection": FUNC}, "context": {"page": "/cart"}},
            f"state after patches: {state!r}",
        )
        await a.expect(Event.CLIENT_ROLE, active=False)
        refused(
            await a.call(Event.STATE_PATCH, {"patch": [], "idempotency_key": key()}),
            "not_active",
            "patch from a passive socket",
        )
        # Size: the whole stored document's compact UTF-8 JSON, exactly at the limit, then one byte over.
        doc = {"autopilot": {"functions": {"get_selection": FUNC}, "context": {"pad": ""}}}
        room = MAX_STATE_BYTES - _doc_size(doc)
        pad = "é" * (room // 2) + "x" * (room % 2)  # two bytes per "é": measured in bytes, not characters
        ok = await b.call(
            Event.STATE_PATCH,
            {
                "patch": [{"op": "replace", "path": "/autopilot/context", "value": {"pad": pad}}],
                "idempotency_key": key(),
            },
        )
        check(ok == {"ok": True}, f"a document of exactly {MAX_STATE_BYTES} bytes must be stored, got {ok!r}")
        refused(
            await b.call(
                Event.STATE_PATCH,
                {
                    "patch": [{"op": "replace", "path": "/autopilot/context/pad", "value": pad + "x"}],
                    "idempotency_key": key(),
                },
            ),
            "state_too_large",
            f"{MAX_STATE_BYTES + 1} bytes",
        )
        # Depth: root object 1, autopilot 2, context 3, so the value may nest MAX_STATE_DEPTH - 3 levels.
        ok = await b.call(
            Event.STATE_PATCH,
            {
                "patch": [
                    {"op": "replace", "path": "/autopilot/context", "value": {"d": _nested(MAX_STATE_DEPTH - 3)}}
                ],
                "idempotency_key": key(),
            },
        )
        check(ok == {"ok": True}, f"depth {MAX_STATE_DEPTH} must be stored, got {ok!r}")
        refused(
            await b.call(
                Event.STATE_PATCH,
                {
                    "patch": [{"op": "replace", "path": "/autopilot/context/d", "value": _nested(MAX_STATE_DEPTH - 2)}],
                    "idempotency_key": key(),
                },
            ),
            "state_too_deep",
            f"depth {MAX_STATE_DEPTH + 1}",
        )
        refused(
            await b.call(
                Event.STATE_PATCH,
                {
                    "patch": [
                        {"op": "add", "path": "/autopilot/context/e", "value": 1},
                        {"op": "remove", "path": "/autopilot/context/missing"},
                    ],
                    "idempotency_key": key(),
                },
            ),
            "patch_failed",
            "a patch whose second op fails",
        )
        refused(
            await b.call(Event.STATE_PATCH, {"patch": {"op": "add"}, "idempotency_key": key()}),
            "patch_failed",
            "a patch that is not a list",
        )
        c, _ = await r.peer(url, expect_state=False)
        state = await c.expect(Event.STATE)
        check(
            state["context"] == {"d": _nested(MAX_STATE_DEPTH - 3)},
            f"refused patches changed nothing: {state['context']!r}",
        )
    finally:
        for p in (a, b, c):
            if p is not None:
                await p.close()


# ------------------------------------------------------------------------------------- messages, replay
@flow("message_turn")
async def message_turn_flow(r: Relay, o: Options) -> None:
    """A user message and its turn, event by event, to every socket; GET, join and ``replay`` agree with it."""
    url = await r.create()
    a, join_ack = await r.peer(url)
    b, _ = await r.peer(url)
    await a.expect(Event.CLIENT_ROLE, active=False)
    try:
        mid, first = await send(a, "hello conformance")
        check(first["seq"] == join_ack["seq"] + 1, f"the first event's seq follows the join ack's: {first!r}")
        tid, aid, ended = await plain_round(a)
        await turn_end(a, tid)
        live = a.sequenced()
        consecutive(live, first["seq"])
        await b.expect(Event.MESSAGE)
        while len(b.sequenced()) < len(live):
            await b.next()
        check([(e, d) for e, d in b.sequenced()] == live, "every socket of the conversation gets the same events")
        refused(
            await a.call(Event.USER_MESSAGE, {"text": "x" * (MAX_USER_MESSAGE_CHARS + 1), "idempotency_key": key()}),
            "message_too_long",
            "a message over the limit",
        )
        refused(
            await a.call(Event.USER_MESSAGE, {"text": "", "idempotency_key": key()}), "bad_request", "an empty message"
        )
        info = await r.get(url)
        msgs = info["messages"]
        check([(m["id"], m["role"]) for m in msgs] == [(mid, "user"), (aid, "assistant")], f"GET messages: {msgs!r}")
        check(msgs[1]["content"] == ended["message"]["content"], "GET shows the streamed answer")
        check(
            info["conversation"]["status"] == "idle" and info["conversation"]["seq"] >= ended["seq"],
            f"GET after the turn: {info['conversation']!r}",
        )
        fresh, ack = await r.peer(url, info["conversation"]["seq"])
        check(ack["seq"] == live[-1][1]["seq"], f"join ack seq is the conversation's last: {ack!r}")
        await fresh.quiet()
        await fresh.close()
        whole, _ = await r.peer(url, 0)
        for expected in live:
            got = await whole.next()
            check(got == expected, f"join from 0 replays the log exactly: expected {expected!r}, got {got!r}")
        await whole.close()
        before = len(a.events)
        ack = accepted(await a.call(Event.REPLAY, {"last_seq": first["seq"]}), "replay")
        check(ack == {"ok": True, "seq": live[-1][1]["seq"], "pending_calls": []}, f"replay ack: {ack!r}")
        replayed = [ev for ev in a.events[before:] if ev[0] in {e for e, _ in live}]
        check(replayed == live[1:], f"replay re-sends the events after last_seq, in order: {[e for e, _ in replayed]}")
        refused(await a.call(Event.REPLAY, {"last_seq": "3"}), "bad_request", "replay with a string last_seq")
    finally:
        await a.close()
        await b.close()


# ----------------------------------------------------------------------------------------- calls
async def _call_begins(r: Relay, text: str, *entries: dict[str, Any]) -> tuple[Peer, str, str, dict[str, Any]]:
    """A conversation whose page declares ``entries``; ``text`` is sent. Up to the first ``function_call.begin``:
    ``(peer, turn_id, message_id, begin payload)``."""
    url = await r.create()
    peer, _ = await r.peer(url)
    await declare(peer, *entries)
    await send(peer, text)
    tid, mid, _ = await round_start(peer)
    begin = await peer.expect(Event.FUNCTION_CALL_BEGIN, message_id=mid, run=True)
    check(
        isinstance(begin.get("id"), str) and begin.get("kind") in ("function", "tool"),
        f"function_call.begin: {begin!r}",
    )
    return peer, tid, mid, begin


async def _after_call(
    peer: Peer, tid: str, mid: str, begin: dict[str, Any], end: dict[str, Any], streamed: str | None = None
) -> None:
    """From ``completion.ended`` of the calling round to the end of the turn."""
    ended = await peer.expect(Event.COMPLETION_ENDED)
    msg = ended["message"]
    check(
        msg["id"] == mid and [c["id"] for c in msg.get("function_calls", [])] == [begin["id"]],
        f"completion.ended lists the call: {ended!r}",
    )
    [tool] = ended["tool_messages"]
    check(
        tool["role"] == "tool"
        and tool["function_call_id"] == begin["id"]
        and tool["status"] == end["status"]
        and tool.get("duration_ms") == end["duration_ms"]
        and tool.get("total_ms") == end["total_ms"],
        f"the tool message matches function_call.end: {tool!r} vs {end!r}",
    )
    await peer.expect(Event.FUNCTION_CALL_ITERATION, turn_id=tid, iteration=1)
    _, mid2, _ = await plain_round(peer, tid)
    check(mid2 != mid, "each round streams a new message")
    await turn_end(peer, tid)


@flow("function_success")
async def function_success_flow(r: Relay, o: Options) -> None:
    """A page function called, answered, its timings kept as ``duration_ms``/``total_ms``; a repeat is not applied."""
    peer, tid, mid, begin = await _call_begins(r, "please get_selection", FUNC)
    try:
        check(
            begin["name"] == "get_selection" and begin["arguments"] == {} and begin["kind"] == "function", f"{begin!r}"
        )
        response = {
            "id": begin["id"],
            "status": "success",
            "result": {"text": "hi"},
            "idempotency_key": key("fr"),
            "duration_ms": 3.5,
            "total_ms": 4.25,
        }
        ack = await peer.call(Event.FUNCTION_RESPONSE, response)
        check(ack == {"ok": True}, f"function_response ack: {ack!r}")
        check(await peer.call(Event.FUNCTION_RESPONSE, response) == ack, "a repeat with the same key gets the same ack")
        end = await peer.expect(
            Event.FUNCTION_CALL_END,
            id=begin["id"],
            name="get_selection",
            status="success",
            result={"text": "hi"},
            duration_ms=3.5,
            total_ms=4.25,
        )
        await _after_call(peer, tid, mid, begin, end)
        refused(
            await peer.call(Event.FUNCTION_RESPONSE, {**response, "idempotency_key": key()}),
            "call_not_pending",
            "a second answer to an answered call",
        )
        await peer.quiet()
    finally:
        await peer.close()


@flow("function_error")
async def function_error_flow(r: Relay, o: Options) -> None:
    """A page function that fails: its error text reaches ``function_call.end`` and the model; the turn goes on."""
    peer, tid, mid, begin = await _call_begins(r, "get_selection", FUNC)
    try:
        ack = await peer.call(
            Event.FUNCTION_RESPONSE, {"id": begin["id"], "status": "error", "error": "boom", "idempotency_key": key()}
        )
        check(ack == {"ok": True}, f"function_response ack: {ack!r}")
        end = await peer.expect(Event.FUNCTION_CALL_END, id=begin["id"], status="error", error="boom")
        await _after_call(peer, tid, mid, begin, end)
    finally:
        await peer.close()


@flow("function_timeout")
async def function_timeout_flow(r: Relay, o: Options) -> None:
    """A call nobody answers ends after the relay's timeout (``--call-timeout``), saying so; a late answer is
    ``call_not_pending``."""
    peer, tid, mid, begin = await _call_begins(r, "get_selection", FUNC)
    try:
        t0 = time.monotonic()
        end = await peer.expect(
            Event.FUNCTION_CALL_END, timeout=o.call_timeout_s + r.timeout, id=begin["id"], status="error"
        )
        waited = time.monotonic() - t0
        expected = f"The page did not answer within {o.call_timeout_s:g} s."
        check(end.get("error") == expected, f"a timed-out call says {expected!r}, got {end.get('error')!r}")
        # The relay's timer started before the begin reached this socket: a little less than the figure may pass.
        check(
            waited >= o.call_timeout_s * 0.9 - 0.2,
            f"the call ended after {waited:.2f} s, before the relay's {o.call_timeout_s:g} s timeout",
        )
        await _after_call(peer, tid, mid, begin, end)
        refused(
            await peer.call(
                Event.FUNCTION_RESPONSE, {"id": begin["id"], "status": "success", "result": 1, "idempotency_key": key()}
            ),
            "call_not_pending",
            "a late answer",
        )
    finally:
        await peer.close()


@flow("cancel")
async def cancel_flow(r: Relay, o: Options) -> None:
    """``cancel`` while a call is pending: the call ends ``Cancelled.``, the round closes, the turn is ``cancelled``."""
    peer, tid, mid, begin = await _call_begins(r, "get_selection", FUNC)
    try:
        refused(
            await peer.call(Event.USER_MESSAGE, {"text": "again", "idempotency_key": key()}),
            "busy",
            "a message while the turn waits for a call",
        )
        ack = await peer.call(Event.CANCEL, {"idempotency_key": key()})
        check(ack == {"ok": True, "cancelled": True}, f"cancel ack: {ack!r}")
        await peer.expect(Event.FUNCTION_CALL_END, id=begin["id"], status="error", error="Cancelled.")
        ended = await peer.expect(Event.COMPLETION_ENDED)
        check(ended["message"]["id"] == mid, f"the cancelled round's message is closed: {ended!r}")
        await turn_end(peer, tid, "cancelled")
        ack = await peer.call(Event.CANCEL, {"idempotency_key": key()})
        check(ack == {"ok": True, "cancelled": False}, f"cancel with no turn running: {ack!r}")
        refused(
            await peer.call(
                Event.FUNCTION_RESPONSE, {"id": begin["id"], "status": "success", "result": 1, "idempotency_key": key()}
            ),
            "call_not_pending",
            "an answer after cancel",
        )
        await peer.quiet()
    finally:
        await peer.close()

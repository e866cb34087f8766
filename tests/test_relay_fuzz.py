"""Bad input on every relay socket event and HTTP endpoint (the fast CI subset of bench/fuzz_relay.py).

One relay per module, on its own event loop in a thread (``serve_in_thread``), so hypothesis can drive it from a
sync test and the async tests can send raw Engine.IO frames. Every test follows one rule:

- the bad connection gets an error acknowledgement (``{"ok": false, "error": {code, message}}`` with a code of
  docs/protocol.md §8, never ``internal``) or an HTTP 4xx, or it is closed;
- a well-behaved client (the *bystander*, in another conversation, connected before the barrage) keeps being
  served: after the barrage it patches its state, sends a message and gets the demo model's whole turn;
- the relay logs no error: records of the relay's loggers, python-socketio/engineio, asyncio and uvicorn at level
  ERROR or with a traceback are collected by a handler on the root and ``uvicorn`` loggers (uvicorn's do not
  propagate), for the relay's thread too.

Payload families, per event (``join``, ``state_patch``, ``user_message``, ``function_response``, ``cancel``,
``replay``, ``activate``, ``retry``, ``regenerate``, ``action_outcome`` — checked to be every handler the relay
registers): not an object, each field missing or
of every wrong type, huge strings, nesting 800 deep (decodable) and 10,000 deep (as text), past the 64 KB state
cap, just under and over the 1,000,000-byte Engine.IO buffer; malformed Socket.IO packets; random JSON with
hypothesis. HTTP: non-JSON, wrong content types, invalid UTF-8, oversized and deeply nested bodies on every
endpoint, bad ids and paths, wrong methods, Engine.IO polling with bad sessions and oversized posts.

Relay bugs found and not fixed yet are ``xfail(strict=True)`` with the reason (docs/security.md keeps the list).
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yarl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from relay_helpers import Recorder, create, info, relay_config
from support import start_relay

from widget import protocol as P
from widget.relay import serve_in_thread

pytestmark = pytest.mark.relay

EVENTS = [
    P.Event.JOIN,
    P.Event.STATE_PATCH,
    P.Event.USER_MESSAGE,
    P.Event.FUNCTION_RESPONSE,
    P.Event.CANCEL,
    P.Event.REPLAY,
    P.Event.ACTIVATE,
    P.Event.RETRY,
    P.Event.REGENERATE,
    P.Event.ACTION_OUTCOME,
]
WRITES = [
    P.Event.STATE_PATCH,
    P.Event.USER_MESSAGE,
    P.Event.FUNCTION_RESPONSE,
    P.Event.CANCEL,
    P.Event.RETRY,
    P.Event.REGENERATE,
    P.Event.ACTION_OUTCOME,
]
CODES = P.ERROR_CODES - {P.ErrorCode.INTERNAL}


# ------------------------------------------------------------------------------------------ log capture


class RelayLog(logging.Handler):
    """Every record at WARNING or above, from any thread. ``problems()``: records carrying a traceback (an exception
    raised out of a handler, the decoder, the ASGI app or a task) and errors of the relay's own loggers. Engine.IO's
    one-line refusals of a bad request (``Invalid session``, ``Invalid transport``, ...; ERROR once, then INFO) carry
    no traceback and are not problems."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []
        self.mark = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def problems(self) -> list[str]:
        return [f"{r.name} {r.levelname}: {r.getMessage()[:200]}"
                + (f" [{r.exc_info[0].__name__}]" if r.exc_info and r.exc_info[0] else "")
                for r in self.records[self.mark:]
                if r.exc_info or (r.levelno >= logging.ERROR and r.name.startswith("widget"))]


#: The relay's loggers (and the libraries'). While this module runs they write only to the RelayLog, which never
#: formats a traceback: CPython 3.11 formats tracebacks with ``ast.parse`` (caret anchors) and its AST state is
#: shared between threads, so a handler formatting one in the relay's thread can race pytest's own ``ast.parse``
#: of a report in the main thread ("SystemError: AST constructor recursion depth mismatch", an INTERNALERROR).
RELAY_LOGGERS = ("widget", "engineio", "socketio", "asyncio", "uvicorn", "uvicorn.error", "uvicorn.access")


@pytest.fixture(scope="module")
def captured_logs(relay: Any) -> Iterator[RelayLog]:
    """Installed after the relay started (uvicorn's start re-applies its own logging configuration)."""
    handler = RelayLog()
    saved = {}
    for name in RELAY_LOGGERS:
        lg = logging.getLogger(name)
        saved[name] = (lg.handlers[:], lg.propagate, lg.level)
        lg.handlers[:] = [handler]
        lg.propagate = False
        if lg.level == logging.NOTSET or lg.level > logging.WARNING:
            lg.setLevel(logging.WARNING)
    yield handler
    for name, (handlers, propagate, level) in saved.items():
        lg = logging.getLogger(name)
        lg.handlers[:] = handlers
        lg.propagate = propagate
        lg.setLevel(level)


@pytest.fixture
def relay_log(captured_logs: RelayLog) -> RelayLog:
    captured_logs.mark = len(captured_logs.records)
    return captured_logs


# ------------------------------------------------------------------------------------------ relay and clients


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    handle = serve_in_thread(relay_config(tmp_path_factory.mktemp("relay-fuzz")))
    yield handle
    handle.close()
    gc.collect()


@pytest_asyncio.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
        yield s


async def join_new(http: aiohttp.ClientSession, relay: Any) -> tuple[Recorder, dict[str, Any]]:
    """A recording client joined to a new conversation; the GET body (``data["url"]`` added)."""
    url = await create(http, relay.url)
    data = {**await info(http, url), "url": url}
    rec = await Recorder(data["relay_url"], data["relay_path"]).connect()
    ack = await rec.join(data["token"])
    assert ack["ok"], ack
    await rec.wait("state")
    return rec, data


def on_relay_loop(relay: Any, coro: Any) -> Any:
    """Run a coroutine (e.g. a store read) on the relay's own loop, from the test's."""
    return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, relay.loop))


class Bystander:
    """A well-behaved client in its own conversation, joined before the barrage."""

    def __init__(self, rec: Recorder, data: dict[str, Any]) -> None:
        self.rec, self.data, self.n = rec, data, 0

    @classmethod
    async def start(cls, http: aiohttp.ClientSession, relay: Any) -> Bystander:
        return cls(*await join_new(http, relay))

    async def round_trip(self, http: aiohttp.ClientSession) -> None:
        self.n += 1
        patch = [{"op": "add", "path": "/autopilot/context/round", "value": self.n}]
        assert await self.rec.call("state_patch", {"patch": patch, "idempotency_key": f"by-p{self.n}"}) == {"ok": True}
        start = len(self.rec.events)
        ack = await self.rec.call("user_message", {"text": f"hello {self.n}", "idempotency_key": f"by-m{self.n}"})
        assert ack["ok"], ack
        done = await self.rec.wait("completion.finished", start=start, timeout=10)
        assert done["status"] == "done"
        body = await info(http, self.data["url"])
        assert body["conversation"]["status"] == "idle"
        await self.rec.disconnect()


def assert_error_ack(ack: Any, *codes: str) -> None:
    assert isinstance(ack, dict) and ack.get("ok") is False, ack
    assert ack["error"]["code"] in (codes or CODES), ack
    assert isinstance(ack["error"].get("message"), str) and ack["error"]["message"], ack


def assert_ack(ack: Any) -> None:
    """A well-formed ack: success, or an error with a documented code other than ``internal``."""
    assert isinstance(ack, dict) and isinstance(ack.get("ok"), bool), ack
    if not ack["ok"]:
        assert_error_ack(ack)


class RawSocket:
    """Engine.IO v4 / Socket.IO v5 over a WebSocket, frame by frame."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.acks: dict[int, Any] = {}
        self.closed = False
        self._next = 100

    @classmethod
    async def open(cls, http: aiohttp.ClientSession, relay: Any) -> RawSocket:
        ws = await http.ws_connect(relay.url.replace("http", "ws") + "/socket.io/?EIO=4&transport=websocket",
                                   max_msg_size=0)
        raw = cls(ws)
        opened = await ws.receive()
        assert opened.data.startswith("0{"), opened
        await ws.send_str("40")
        connected = await ws.receive()
        assert connected.data.startswith("40{"), connected
        return raw

    async def send(self, frame: str | bytes) -> None:
        try:
            if isinstance(frame, bytes):
                await self.ws.send_bytes(frame)
            else:
                await self.ws.send_str(frame)
        except (ConnectionResetError, aiohttp.ClientError):
            self.closed = True

    async def emit(self, event: str, data_json: str) -> int:
        """Send ``42<id>["event", <data_json>]`` (the data as literal JSON text); returns the ack id."""
        self._next += 1
        await self.send(f'42{self._next}["{event}",{data_json}]')
        return self._next

    async def pump(self, until: float) -> None:
        while not self.closed and time.monotonic() < until:
            try:
                msg = await asyncio.wait_for(self.ws.receive(), max(0.01, until - time.monotonic()))
            except TimeoutError:
                return
            if msg.type != aiohttp.WSMsgType.TEXT:
                self.closed = True
                return
            if msg.data == "2":
                await self.send("3")
            elif msg.data.startswith("43"):
                head, _, body = msg.data[2:].partition("[")
                self.acks[int(head)] = json.loads("[" + body)[0]
                return

    async def ack(self, ack_id: int, timeout: float = 5.0) -> Any:
        """The ack for ``ack_id``, or ``"closed"``, or ``None`` when neither came within ``timeout``."""
        until = time.monotonic() + timeout
        while ack_id not in self.acks and not self.closed and time.monotonic() < until:
            await self.pump(until)
        return self.acks.get(ack_id, "closed" if self.closed else None)

    async def close(self) -> None:
        await self.ws.close()


def nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


# ------------------------------------------------------------------------------------------ socket: families


def test_every_client_event_is_fuzzed(relay: Any) -> None:
    handlers = set(relay.hub.sio.handlers["/"]) - {"connect", "disconnect"}
    assert handlers == set(EVENTS)


NON_OBJECTS: list[Any] = [None, 0, -1, 1.5, True, "", "join", [], [1, "a"], "x" * 100_000]
WRONG: list[Any] = [None, True, 0, -1, 2**63 - 1, 1.5, 1e308, "", "x" * 70_000, [], {}, [[[]]], {"a": {"b": {}}}]
FIELDS = {
    P.Event.JOIN: {"token": "t", "version": 1, "last_seq": 0},
    P.Event.STATE_PATCH: {"patch": [{"op": "add", "path": "/autopilot/context/x", "value": 1}], "idempotency_key": "k"},
    P.Event.USER_MESSAGE: {"text": "hi", "idempotency_key": "k"},
    P.Event.FUNCTION_RESPONSE: {"id": "call_nope", "status": "success", "result": 1, "idempotency_key": "k",
                             "duration_ms": 1.0, "total_ms": 1.0, "error": "e"},
    P.Event.CANCEL: {"idempotency_key": "k"},
    P.Event.REPLAY: {"last_seq": 0},
    P.Event.ACTIVATE: {},
    P.Event.RETRY: {"idempotency_key": "k"},
    P.Event.REGENERATE: {"idempotency_key": "k"},
    P.Event.ACTION_OUTCOME: {"message_id": "m_x", "action_id": "a_x", "name": "open", "arguments": {}, "ok": True,
                          "outcome": "done", "idempotency_key": "k"},
}


def families(event: str, n: list[int]) -> Iterator[tuple[str, Any]]:
    """(label, payload) for one event; idempotency keys unique so no ack comes from the store."""
    def key() -> str:
        n[0] += 1
        return f"fz-{n[0]}"

    for v in NON_OBJECTS:
        yield f"non-object {type(v).__name__}", v
    good = FIELDS[event]
    for field in good:
        payload = {k: (key() if k == "idempotency_key" else v) for k, v in good.items() if k != field}
        yield f"missing {field}", payload
        for v in WRONG:
            payload = {k: (key() if k == "idempotency_key" else v) for k, v in good.items()}
            payload[field] = v
            yield f"{field}={str(v)[:12]!s}", payload
    yield "extra fields", {**{k: (key() if k == "idempotency_key" else v) for k, v in good.items()},
                           "__proto__": {"x": 1}, "constructor": "x", "seq": -1}


@pytest.mark.parametrize("event", EVENTS)
async def test_bad_payload_families(event: str, relay: Any, http: aiohttp.ClientSession, relay_log: RelayLog) -> None:
    bystander = await Bystander.start(http, relay)
    bad, _ = await join_new(http, relay)
    stranger = await Recorder(relay.url).connect()  # connected, never joined
    counter = [0]
    sent = 0
    for _label, payload in families(event, counter):
        if event == P.Event.JOIN:
            if isinstance(payload, dict) and payload.get("token") == "t":
                payload = {**payload, "token": "not-a-token"}
        ack = await bad.call(event, payload)
        assert_ack(ack)
        if isinstance(payload, (list, str, int, float, bool)) or payload is None:
            if event in (P.Event.JOIN, *WRITES):
                assert_error_ack(ack, P.ErrorCode.BAD_REQUEST)
        if event != P.Event.JOIN:
            assert_error_ack(await stranger.call(event, payload), P.ErrorCode.NOT_JOINED)
        sent += 1
    # still served, and still the active client of its conversation (refused joins changed nothing)
    assert await bad.call("state_patch", {"patch": [], "idempotency_key": "after"}) == {"ok": True}
    assert sent >= 11
    await bad.disconnect()
    await stranger.disconnect()
    await bystander.round_trip(http)
    assert relay_log.problems() == []


async def test_oversized_payloads(relay: Any, http: aiohttp.ClientSession, relay_log: RelayLog) -> None:
    """Past the 64 KB state cap, the 16,000-character message cap, up to just under the 1 MB buffer: error acks;
    past the buffer: the connection is closed."""
    bystander = await Bystander.start(http, relay)
    bad, data = await join_new(http, relay)
    big = "é" * 40_000  # 80,000 bytes of UTF-8
    ack = await bad.call("state_patch", {"patch": [{"op": "add", "path": "/autopilot/context/big", "value": big}],
                                         "idempotency_key": "big"})
    assert_error_ack(ack, P.ErrorCode.STATE_TOO_LARGE)
    many = [{"op": "add", "path": f"/autopilot/context/k{i}", "value": "x" * 100} for i in range(900)]
    assert_error_ack(
        await bad.call("state_patch", {"patch": many, "idempotency_key": "many"}), P.ErrorCode.STATE_TOO_LARGE
    )
    assert_error_ack(await bad.call("user_message", {"text": "x" * 900_000, "idempotency_key": "long"}),
                     P.ErrorCode.MESSAGE_TOO_LONG)
    assert_error_ack(
        await bad.call("user_message", {"text": "x", "idempotency_key": "k" * 200_000}), P.ErrorCode.BAD_REQUEST
    )
    assert_error_ack(await bad.call("join", {"token": "t" * 900_000, "version": 1}), P.ErrorCode.INVALID_TOKEN)
    assert_error_ack(
        await bad.call("function_response", {"id": "c" * 500_000, "status": "success", "idempotency_key": "fr-big-id"}),
        P.ErrorCode.CALL_NOT_PENDING,
    )
    state = await on_relay_loop(relay, relay.hub.store.get_state(data["conversation"]["id"]))
    assert state["autopilot"]["context"] == {}
    await bad.disconnect()

    raw = await RawSocket.open(http, relay)
    overhead = len('42101["user_message",') + len(json.dumps({"text": "", "idempotency_key": "k"})) + len("]")
    ack_id = await raw.emit("user_message", json.dumps({"text": "x" * (999_900 - overhead), "idempotency_key": "k"}))
    assert_error_ack(await raw.ack(ack_id), P.ErrorCode.NOT_JOINED)  # a 999,900-byte frame: still read and answered
    await raw.emit("user_message", json.dumps({"text": "x" * 1_000_100, "idempotency_key": "k"}))
    assert await raw.ack(0, timeout=5) == "closed"  # past the 1,000,000-byte buffer: closed
    await raw.close()
    await bystander.round_trip(http)
    assert relay_log.problems() == []


async def test_nesting_the_decoder_accepts(relay: Any, http: aiohttp.ClientSession, relay_log: RelayLog) -> None:
    """800 levels of nesting (under the JSON decoder's recursion limit) in every field of every event."""
    bystander = await Bystander.start(http, relay)
    first, data = await join_new(http, relay)
    await first.disconnect()
    raw = await RawSocket.open(http, relay)
    ack = await raw.ack(await raw.emit("join", json.dumps({"token": data["token"], "version": 1, "last_seq": 0})))
    assert ack["ok"], ack
    deep = nested(800)
    frames = {
        "join token": (P.Event.JOIN, '{"token":%s,"version":1}' % deep, P.ErrorCode.INVALID_TOKEN),
        "join version": (P.Event.JOIN, '{"token":"t","version":%s}' % deep, P.ErrorCode.VERSION_MISMATCH),
        "state_patch value": (
            P.Event.STATE_PATCH,
            '{"patch":[{"op":"add","path":"/autopilot/context/d","value":%s}],"idempotency_key":"d1"}' % deep,
            P.ErrorCode.STATE_TOO_DEEP,
        ),
        "state_patch patch": (
            P.Event.STATE_PATCH,
            '{"patch":%s,"idempotency_key":"d2"}' % deep,
            P.ErrorCode.PATCH_FAILED,
        ),
        "state_patch key": (P.Event.STATE_PATCH, '{"patch":[],"idempotency_key":%s}' % deep, P.ErrorCode.BAD_REQUEST),
        "user_message text": (
            P.Event.USER_MESSAGE,
            '{"text":%s,"idempotency_key":"d3"}' % deep,
            P.ErrorCode.BAD_REQUEST,
        ),
        "function_response result": (
            P.Event.FUNCTION_RESPONSE,
            '{"id":"n","status":"success","result":%s,"idempotency_key":"d4"}' % deep,
            P.ErrorCode.CALL_NOT_PENDING,
        ),
        "function_response error": (
            P.Event.FUNCTION_RESPONSE,
            '{"id":"n","status":"error","error":%s,"idempotency_key":"d5"}' % deep,
            P.ErrorCode.CALL_NOT_PENDING,
        ),
        "function_response id": (
            P.Event.FUNCTION_RESPONSE,
            '{"id":%s,"status":"error","idempotency_key":"d6"}' % deep,
            P.ErrorCode.BAD_REQUEST,
        ),
        "cancel": (P.Event.CANCEL, '{"idempotency_key":%s}' % deep, P.ErrorCode.BAD_REQUEST),
        "replay": (P.Event.REPLAY, '{"last_seq":%s}' % deep, P.ErrorCode.BAD_REQUEST),
        "whole payload": (P.Event.USER_MESSAGE, deep, P.ErrorCode.BAD_REQUEST),
    }
    for label, (event, text, code) in frames.items():
        ack = await raw.ack(await raw.emit(event, text))
        assert isinstance(ack, dict), (label, ack)
        assert_error_ack(ack, code)
    assert (await raw.ack(await raw.emit(P.Event.ACTIVATE, '{"extra":%s}' % deep)))["ok"]  # an object; its keys unread
    assert_error_ack(await raw.ack(await raw.emit(P.Event.ACTIVATE, deep)), P.ErrorCode.BAD_REQUEST)  # not an object
    await raw.close()
    await bystander.round_trip(http)
    assert relay_log.problems() == []


async def test_lone_surrogate_in_state_is_refused(relay: Any, http: aiohttp.ClientSession, relay_log: RelayLog) -> None:
    """A string with no UTF-8 form cannot be measured (D4) nor stored: bad_request, state unchanged."""
    bad, data = await join_new(http, relay)
    cid = data["conversation"]["id"]
    before = await on_relay_loop(relay, relay.hub.store.get_state(cid))
    for value in ["\ud800", {"k\udfff": 1}, ["ok", "\udbff\udbff"]]:
        ack = await bad.call("state_patch", {"patch": [{"op": "add", "path": "/autopilot/context/s", "value": value}],
                                             "idempotency_key": f"sur-{len(str(value))}-{type(value).__name__}"})
        assert_error_ack(ack, P.ErrorCode.BAD_REQUEST)
        assert "Unicode" in ack["error"]["message"]
    assert await on_relay_loop(relay, relay.hub.store.get_state(cid)) == before
    assert await bad.call("state_patch", {"patch": [], "idempotency_key": "fine"}) == {"ok": True}
    await bad.disconnect()
    assert relay_log.problems() == []


# ------------------------------------------------------------------------------------------ socket: hypothesis

INT64 = st.integers(-(2**63), 2**63 - 1)
SCALARS = st.one_of(st.none(), st.booleans(), INT64, st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=20), st.sampled_from(["success", "error", "call_x", "/autopilot/context/a",
                                                           "/autopilot", "", "add", "copy", "move", "test"]))
JSON = st.recursive(SCALARS, lambda c: st.lists(c, max_size=4) | st.dictionaries(
    st.text(max_size=6) | st.sampled_from(["op", "path", "from", "value"]), c, max_size=4), max_leaves=15)
FIELD_NAMES = sorted({f for fields in FIELDS.values() for f in fields})
PAYLOADS = st.one_of(
    JSON,
    st.dictionaries(st.sampled_from(FIELD_NAMES), JSON, max_size=6),
    st.fixed_dictionaries({"idempotency_key": st.text(min_size=1, max_size=12)},
                          optional={k: JSON for k in FIELD_NAMES if k != "idempotency_key"}),
)


class LoopThread:
    """An event loop in a thread, so a sync (hypothesis) test can drive an async Socket.IO client."""

    def __init__(self) -> None:
        import threading

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 15) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        """Cancel and await what is left on the loop, stop it, and collect the garbage here: a task finalized later
        by the GC, in the middle of pytest's report, has broken its AST parse (CPython 3.11 SystemError)."""
        async def drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self.run(drain())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()
        gc.collect()


def test_random_payloads(relay: Any, relay_log: RelayLog) -> None:
    """150 random (event, payload) pairs on a joined socket: well-formed acks, nothing logged. Lone surrogates and
    integers beyond 64 bits are left out here: they are the known bugs below."""
    lt = LoopThread()

    async def setup() -> tuple[aiohttp.ClientSession, Recorder]:
        session = aiohttp.ClientSession()
        rec, _ = await join_new(session, relay)
        return session, rec

    session, rec = lt.run(setup())
    seen: dict[str, int] = {}

    @settings(max_examples=int(os.environ.get("RELAY_FUZZ_EXAMPLES", "150")), deadline=None, database=None,
              derandomize=os.environ.get("RELAY_FUZZ_EXAMPLES") is None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.sampled_from(EVENTS), PAYLOADS)
    def one(event: str, payload: Any) -> None:
        assert_ack(lt.run(rec.call(event, payload, timeout=10)))
        seen[event] = seen.get(event, 0) + 1

    try:
        one()
        # Random sampling may miss an event; every event still gets at least one odd payload.
        for event in EVENTS:
            if event not in seen:
                assert_ack(lt.run(rec.call(event, {"unexpected": [None, 1.5, "x"]}, timeout=10)))
                seen[event] = 1
    finally:
        lt.run(rec.disconnect())
        lt.run(session.close())
        lt.close()
    assert set(seen) == set(EVENTS)
    assert relay_log.problems() == []


# ------------------------------------------------------------------------------------------ socket: relay bugs


@pytest.mark.parametrize("event,payload", [
    (P.Event.USER_MESSAGE, {"text": "hi \ud800", "idempotency_key": "s1"}),
    (P.Event.FUNCTION_RESPONSE, {"id": "nope", "status": "success", "result": "\ud800", "idempotency_key": "s2"}),
    (P.Event.FUNCTION_RESPONSE, {"id": "nope", "status": "error", "error": "\udc00", "idempotency_key": "s3"}),
    (P.Event.CANCEL, {"idempotency_key": "\ud800"}),
    (P.Event.STATE_PATCH, {"patch": [], "idempotency_key": "k\ud800"}),
], ids=["user_message-text", "function_response-result", "function_response-error", "cancel-key", "state_patch-key"])
async def test_lone_surrogates_in_writes(event: str, payload: Any, relay: Any, http: aiohttp.ClientSession,
                                         relay_log: RelayLog) -> None:
    bad, _ = await join_new(http, relay)
    try:
        assert_error_ack(await bad.call(event, payload), P.ErrorCode.BAD_REQUEST, P.ErrorCode.CALL_NOT_PENDING)
    finally:
        await bad.disconnect()
    assert relay_log.problems() == []


async def test_replay_last_seq_beyond_int64(relay: Any, http: aiohttp.ClientSession, relay_log: RelayLog) -> None:
    bad, _ = await join_new(http, relay)
    try:
        assert_error_ack(await bad.call(P.Event.REPLAY, {"last_seq": 2**63}), P.ErrorCode.BAD_REQUEST)
    finally:
        await bad.disconnect()
    assert relay_log.problems() == []


async def test_join_last_seq_beyond_int64(relay: Any, http: aiohttp.ClientSession, relay_log: RelayLog) -> None:
    data = await info(http, await create(http, relay.url))
    rec = await Recorder(data["relay_url"], data["relay_path"]).connect()
    try:
        ack = await rec.join(data["token"], last_seq=2**63)
        if ack.get("ok"):
            await rec.wait("state", timeout=2)
        else:
            assert_error_ack(ack, P.ErrorCode.BAD_REQUEST)
    finally:
        await rec.disconnect()
    assert relay_log.problems() == []


async def test_nesting_10000_deep_as_text(relay: Any, http: aiohttp.ClientSession, relay_log: RelayLog) -> None:
    bystander = await Bystander.start(http, relay)
    raw = await RawSocket.open(http, relay)
    ack = await raw.ack(await raw.emit(P.Event.JOIN, nested(10_000)), timeout=1.5)
    await raw.close()
    await bystander.round_trip(http)
    assert ack == "closed" or (isinstance(ack, dict) and ack.get("ok") is False), ack
    assert relay_log.problems() == []


MALFORMED = {
    "truncated JSON": '421["join"',
    "no data": "42",
    "no event": "421",
    "empty array": "421[]",
    "object instead of array": '421{"a":1}',
    "unhashable event name": '421[{"a":1}]',
    "unknown Socket.IO type": "49",
    "bare 4": "4",
    "unknown Engine.IO type": "9",
    "binary junk": b"\x00\x01\x02",
    "integer beyond 4300 digits": '421["join",' + "9" * 5000 + "]",
}


async def test_malformed_packets(relay: Any, http: aiohttp.ClientSession, relay_log: RelayLog) -> None:
    bystander = await Bystander.start(http, relay)

    async def one(frame: str | bytes) -> bool:
        raw = await RawSocket.open(http, relay)
        await raw.send(frame)
        await raw.pump(time.monotonic() + 1.0)
        closed = raw.closed
        await raw.close()
        return closed

    closed = dict(zip(MALFORMED, await asyncio.gather(*(one(f) for f in MALFORMED.values())), strict=True))
    await bystander.round_trip(http)
    assert all(closed.values()) and relay_log.problems() == [], (closed, relay_log.problems())


async def test_refused_responses_are_stored_bounded(relay: Any, http: aiohttp.ClientSession) -> None:
    bad, data = await join_new(http, relay)
    for i in range(8):
        ack = await bad.call(
            P.Event.FUNCTION_RESPONSE,
            {"id": f"gone-{i}", "status": "success", "result": "x" * 500_000, "idempotency_key": f"gone-{i}"},
        )
        assert_error_ack(ack, P.ErrorCode.CALL_NOT_PENDING)
    await bad.disconnect()
    refused = await on_relay_loop(relay, relay.hub.store.refused(data["conversation"]["id"]))
    stored = sum(len(json.dumps(r["payload"])) for r in refused)
    assert len(refused) == 8 and stored < 200_000, stored


# ------------------------------------------------------------------------------------------ HTTP


async def test_http_bad_requests(relay: Any, http: aiohttp.ClientSession, relay_log: RelayLog) -> None:
    """Every endpoint with bad bodies, types, ids, paths and methods: 4xx (JSON errors on /api), never 5xx."""
    bystander = await Bystander.start(http, relay)
    base = relay.url
    url = await create(http, base)
    cid = url.rsplit("/", 1)[1]
    o = {"Origin": base}
    create_url = f"{base}/api/apps/demo/conversations"
    bodies: list[tuple[str, dict[str, str], bytes]] = [
        ("not JSON", {}, b"hello"),
        ("text/plain", {"Content-Type": "text/plain"}, b"hello"),
        ("form", {"Content-Type": "application/x-www-form-urlencoded"}, b"a=1&b=2"),
        ("multipart", {"Content-Type": "multipart/form-data; boundary=x"}, b"--x\r\n\r\nv\r\n--x--"),
        ("a list", {"Content-Type": "application/json"}, b"[1, 2]"),
        ("a number", {"Content-Type": "application/json"}, b"5"),
        ("invalid UTF-8", {"Content-Type": "application/json"}, b'{"a": "\xff\xfe"}'),
        ("UTF-16", {"Content-Type": "application/json; charset=utf-16"}, '{"a": 1}'.encode("utf-16")),
        ("truncated", {"Content-Type": "application/json"}, b'{"answers": ['),
        ("5,000-digit integer", {"Content-Type": "application/json"}, b'{"a": ' + b"9" * 5000 + b"}"),
        ("nested 800 deep", {"Content-Type": "application/json"}, b'{"answers": ' + nested(800).encode() + b"}"),
        ("300 KB", {"Content-Type": "application/json"}, b'{"a": "' + b"x" * 300_000 + b'"}'),
        ("2 MB", {"Content-Type": "application/json"}, b'{"a": "' + b"x" * 2_000_000 + b'"}'),
    ]
    checked = 0
    for label, headers, body in bodies:
        for target, hdrs in ((create_url, {**o, **headers}), (f"{url}/ask_user", headers)):
            async with http.post(target, data=body, headers=hdrs) as r:
                text = await r.text()
                if target == create_url and label in ("UTF-16", "nested 800 deep"):
                    assert r.status == 201, (label, r.status, text)  # a JSON object: the (ignored) body is fine
                else:
                    assert 400 <= r.status < 500, (label, target, r.status, text[:200])
                if r.status >= 400:
                    assert json.loads(text)["error"]["code"] in CODES, (label, text[:200])
                checked += 1
    ask_bodies: list[Any] = [{}, {"answers": None}, {"answers": []}, {"answers": "x"}, {"answers": [1]},
                             {"answers": [{"id": 1, "result": 1}]}, {"answers": [{"id": "a"}]},
                             {"answers": {"id": "a", "result": 1}, "idempotency_key": 5},
                             {"answers": {"id": "a", "result": 1}, "idempotency_key": "k" * 129},
                             {"answers": {"id": "call_x", "result": nested_obj(30)}}]
    for body in ask_bodies:
        async with http.post(f"{url}/ask_user", json=body) as r:
            assert r.status == 400, (body, r.status)
            assert (await r.json())["error"]["code"] == P.ErrorCode.BAD_REQUEST
            checked += 1
    for method, path in [("GET", f"/api/conversations/c_{'A' * 5000}"), ("GET", "/api/conversations/c_%00%00"),
                         ("GET", "/api/conversations/" + "x" * 20_000), ("DELETE", "/api/conversations/zzz"),
                         ("POST", "/api/conversations/c_" + "B" * 30 + "/ask_user"),
                         ("GET", "/api/apps/demo/conversations"),
                         ("POST", "/api/apps/%2e%2e/conversations"),
                         ("POST", "/api/apps/" + "a" * 10_000 + "/conversations"),
                         ("PUT", f"/api/conversations/{cid}"), ("PATCH", "/api/apps/demo/conversations"),
                         ("POST", "/healthz"), ("GET", "/api/unknown"), ("POST", "/api/x/y/z"),
                         ("GET", "/widget/../../etc/passwd"), ("GET", "/widget/%2e%2e/%2e%2e/secret.txt"),
                         ("GET", "/socket.io/?EIO=3&transport=polling"), ("GET", "/socket.io/?EIO=4&transport=xyz"),
                         ("POST", "/socket.io/?EIO=4&transport=polling&sid=nope"),
                         ("GET", "/socket.io/?EIO=4&transport=polling&sid=" + "s" * 5000)]:
        async with http.request(method, yarl.URL(base + path, encoded=True), headers=o,
                                data=b"42[]" if method == "POST" else None) as r:
            assert 400 <= r.status < 500, (method, path[:80], r.status)
            checked += 1
    async with http.options(url, headers={"Origin": "https://evil.example",
                                          "Access-Control-Request-Method": "DELETE"}) as r:
        assert r.status == 403
    assert checked > 40
    await bystander.round_trip(http)
    assert (await info(http, url))["ok"]
    assert relay_log.problems() == []


def nested_obj(depth: int) -> Any:
    v: Any = "leaf"
    for _ in range(depth):
        v = {"d": v}
    return v


@pytest.mark.parametrize("endpoint", ["create", "ask_user"])
async def test_http_deeply_nested_body(endpoint: str, relay: Any, http: aiohttp.ClientSession,
                                       relay_log: RelayLog) -> None:
    url = await create(http, relay.url)
    target = f"{relay.url}/api/apps/demo/conversations" if endpoint == "create" else f"{url}/ask_user"
    async with http.post(target, data=b'{"answers":' + nested(5000).encode() + b"}",
                         headers={"Origin": relay.url, "Content-Type": "application/json"}) as r:
        status = r.status
    assert status == 400 and relay_log.problems() == [], (status, relay_log.problems())


async def test_http_ask_user_surrogate_key(relay: Any, http: aiohttp.ClientSession, relay_log: RelayLog) -> None:
    url = await create(http, relay.url)
    async with http.post(f"{url}/ask_user", data=b'{"answers":{"id":"a","result":1},"idempotency_key":"\\ud800"}',
                         headers={"Content-Type": "application/json"}) as r:
        status = r.status
    assert status == 400 and relay_log.problems() == [], (status, relay_log.problems())


async def test_polling_post_past_the_buffer(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    server = start_relay(tmp_path, extra=["--demo-chunk-delay-ms", "0"])
    try:
        async with http.get(f"{server.url}/socket.io/?EIO=4&transport=polling") as r:
            sid = json.loads((await r.text())[1:])["sid"]
        status: Any = None
        try:
            async with http.post(f"{server.url}/socket.io/?EIO=4&transport=polling&sid={sid}",
                                 data=b'421["join","' + b"x" * 1_200_000 + b'"]',
                                 timeout=aiohttp.ClientTimeout(total=2)) as r:
                status = r.status
        except TimeoutError:
            status = "no answer within 2 s"
        async with http.get(f"{server.url}/healthz") as r:
            assert r.status == 200  # everyone else is still served
        log = server.log.read_text()
        assert status in (400, 413) and "Exception in ASGI application" not in log, (status, log[-500:])
    finally:
        server.proc.kill()
        server.proc.wait(10)

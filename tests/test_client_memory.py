"""The client's connection and call logic against an in-memory relay (no sockets)."""

import asyncio

import pytest
from fake_relay import BASE, FakeRelay, MemoryTransport

from widget import AutopilotClient, ConfigError, ConnectionFailed, ProtocolError
from widget import protocol as P

pytestmark = pytest.mark.unit


async def settle(n: int = 100) -> None:
    """Let every task the client started run to its next real wait (the in-memory relay answers at once):
    a number of event-loop turns, not wall-clock time, so a busy machine cannot make it too short."""
    for _ in range(n):
        await asyncio.sleep(0)


async def until(predicate, timeout: float = 10.0) -> None:
    """Wait (on the event loop) until ``predicate()`` holds; fail after ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await settle()


async def make(**connect):
    relay = FakeRelay()
    transport = MemoryTransport(relay)
    client = AutopilotClient(transport)
    return relay, transport, client


async def connected(**kw):
    relay, transport, client = await make()
    client.register_function("echo", lambda args, ctx: args, description="Echo.")
    client.set_context({"page": "/"})
    await client.connect(relay_url=BASE, app_id="demo", **kw)
    return relay, transport, client


async def test_connect_creates_conversation_stores_it_and_syncs_initial_state():
    relay, transport, client = await connected()
    assert client.connection_state == "connected"
    assert client.storage["autopilot:conversation:demo"] == f"{BASE}/api/conversations/c1"
    assert relay.doc["autopilot"]["functions"]["echo"]["source"] == "client"
    assert relay.doc["autopilot"]["context"] == {"page": "/"}
    # a second client with the same storage resumes instead of creating
    t2 = MemoryTransport(relay)
    c2 = AutopilotClient(t2, storage=client.storage)
    await c2.connect(relay_url=BASE, app_id="demo")
    assert relay.created == 1


async def test_stale_stored_conversation_is_replaced():
    relay, transport, client = await make()
    client.storage["autopilot:conversation:demo"] = f"{BASE}/api/conversations/missing"
    await client.connect(relay_url=BASE, app_id="demo")
    assert relay.created == 1
    assert client.conversation_url.endswith("/c1")


async def test_join_refusal_and_version_errors_are_clear():
    relay, transport, client = await make()
    relay.join_error = {"code": "invalid_token", "message": "Join token is invalid."}
    errors = []
    client.on("error", errors.append)
    with pytest.raises(ProtocolError) as info:
        await client.connect(relay_url=BASE, app_id="demo")
    assert info.value.code == "invalid_token"
    assert client.connection_state == "error"
    assert errors and errors[0]["code"] == "invalid_token"


async def test_unreachable_socket_is_connection_failed():
    relay, transport, client = await make()
    transport.refuse_connect = "connection refused"
    with pytest.raises(ConnectionFailed, match="connection refused"):
        await client.connect(relay_url=BASE, app_id="demo")


async def test_connect_needs_a_target():
    relay, transport, client = await make()
    with pytest.raises(ConfigError):
        await client.connect()


async def test_function_call_runs_once_and_responds_with_timings():
    relay, transport, client = await connected()
    seen = []
    client.on("functionSuccess", seen.append)
    call = {"id": "call1", "name": "echo", "arguments": {"x": 1}, "run": True}
    relay.push(transport, "function_call.begin", call)
    relay.push(transport, "function_call.begin", call)  # a duplicate begin with a new seq never re-runs
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(relay.responses) == 1
    r = relay.responses[0]
    assert r["status"] == "success" and r["result"] == {"x": 1}
    assert r["total_ms"] >= r["duration_ms"] >= 0
    rec = client.get_function_call_history()[0]
    assert rec["id"] == "call1" and rec["respondedAt"] is not None and rec["totalMs"] is not None
    assert seen[0]["durationMs"] >= 0


async def test_replayed_or_not_run_begin_is_not_executed():
    relay, transport, client = await connected()
    relay.push(transport, "function_call.begin", {"id": "c9", "name": "echo", "arguments": {}, "run": False})
    await settle()
    assert relay.responses == []


async def test_unknown_function_bad_args_and_throwing_handler_fail_cleanly():
    relay, transport, client = await connected()

    def boom(args, ctx):
        raise RuntimeError("not allowed in incognito mode")

    client.register_function("boom", boom)
    client.register_function(
        "typed", lambda a, c: a,
        parameters={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    )
    client.register_function("bad_result", lambda a, c: object())
    for i, (name, args) in enumerate([("nope", {}), ("typed", {"n": "x"}), ("boom", {}), ("bad_result", {})]):
        relay.push(transport, "function_call.begin", {"id": f"e{i}", "name": name, "arguments": args, "run": True})
    await settle()
    errors = {r["id"]: r["error"] for r in relay.responses}
    assert "not registered" in errors["e0"]
    assert "Invalid arguments" in errors["e1"] and "n" in errors["e1"]
    assert errors["e2"] == "RuntimeError: not allowed in incognito mode"  # the type reaches the model too
    assert "JSON-serializable" in errors["e3"]
    assert client.connection_state == "connected"


async def test_sensitive_function_fails_closed_and_honours_the_handler():
    relay, transport, client = await connected()
    ran = []
    client.register_function("delete_account", lambda a, c: ran.append(1) or "gone", sensitive=True)
    relay.push(transport, "function_call.begin", {"id": "s1", "name": "delete_account", "arguments": {}, "run": True})
    await until(lambda: len(relay.responses) == 1)
    assert relay.responses[-1]["error"] == P.MSG_SENSITIVE_DENIED and ran == []

    def raising(req):
        raise ValueError("ui broke")

    client.set_confirmation_handler(raising)
    relay.push(transport, "function_call.begin", {"id": "s2", "name": "delete_account", "arguments": {}, "run": True})
    await until(lambda: len(relay.responses) == 2)
    assert relay.responses[-1]["error"] == P.MSG_SENSITIVE_DENIED and ran == []

    async def allow(req):
        assert req["name"] == "delete_account"
        return "allow"

    client.set_confirmation_handler(allow)
    relay.push(transport, "function_call.begin", {"id": "s3", "name": "delete_account", "arguments": {}, "run": True})
    await until(lambda: len(relay.responses) == 3)
    assert relay.responses[-1]["result"] == "gone" and ran == [1]


async def test_gate_withholds_response_until_dirty_state_is_acked():
    relay, transport, client = await connected()

    def handler(args, ctx):
        client.update_context({"after": True})
        return "ok"

    client.register_function("mutate", handler)
    await client.sync_registered_functions()
    relay.push(transport, "function_call.begin", {"id": "g1", "name": "mutate", "arguments": {}, "run": True})
    await settle()  # far less than the 100 ms context debounce
    assert relay.responses and relay.responses[0]["id"] == "g1"
    # the patch with the handler's context reached the relay before the response
    order = [e for e, _ in transport.sent if e in (P.Event.STATE_PATCH, P.Event.FUNCTION_RESPONSE)]
    assert order[-2:] == [P.Event.STATE_PATCH, P.Event.FUNCTION_RESPONSE]
    assert relay.doc["autopilot"]["context"]["after"] is True


async def test_context_resolution_holds_the_response_until_released():
    relay, transport, client = await connected()
    changes = []
    client.on("contextResolutionChanged", changes.append)
    holder = {}

    def navigate(args, ctx):
        holder["release"] = client.begin_context_resolution("page")
        return "navigating"

    client.register_function("navigate", navigate)
    relay.push(transport, "function_call.begin", {"id": "n1", "name": "navigate", "arguments": {}, "run": True})
    await settle()
    assert relay.responses == []
    client.update_context({"users": [1, 2]})
    holder["release"]()
    holder["release"]()  # idempotent
    await settle()
    assert relay.responses[0]["result"] == "navigating"
    assert relay.doc["autopilot"]["context"]["users"] == [1, 2]
    assert [c["pending"] for c in changes] == [1, 0]


async def test_gap_in_sequence_asks_for_replay_and_fills_it():
    relay, transport, client = await connected()
    relay.push(transport, "message", {"message": {"id": "u1", "role": "user", "content": "a"}}, deliver=False)
    relay.push(transport, "message", {"message": {"id": "u2", "role": "user", "content": "b"}})
    await settle()
    assert [m["id"] for m in client.messages] == ["u1", "u2"]
    assert client.seq.last_seq == 2


async def test_reconnect_rejoins_and_resends_unacknowledged_response():
    relay, transport, client = await connected()
    client.register_function("slow", lambda a, c: "done")
    transport.drop()
    assert client.connection_state == "reconnecting"
    relay.pending_calls = [{"id": "p1", "name": "slow", "arguments": {}}]
    transport.restore()
    await settle()
    assert client.connection_state == "connected"
    assert [r["id"] for r in relay.responses] == ["p1"]
    assert relay.doc["autopilot"]["functions"]["slow"]["name"] == "slow"


async def test_decorator_builds_schema_and_calls_with_kwargs():
    relay, transport, client = await connected()

    @client.function
    def weather(city: str, units: str = "c") -> str:
        """Current weather of a city."""
        return f"{city}:{units}"

    d = {f["name"]: f for f in client.get_registered_functions()}["weather"]
    assert d["description"] == "Current weather of a city."
    assert d["parameters"]["required"] == ["city"]
    relay.push(transport, "function_call.begin",
               {"id": "w", "name": "weather", "arguments": {"city": "Oslo"}, "run": True})
    await settle()
    assert relay.responses[-1]["result"] == "Oslo:c"


async def test_bad_registration_is_a_clear_error():
    relay, transport, client = await make()
    with pytest.raises(ConfigError, match="name"):
        client.register_function("bad name!", lambda a, c: 1)
    with pytest.raises(ConfigError, match="callable"):
        client.register_function("x", "not callable")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="type 'object'"):
        client.register_function("x", lambda a, c: 1, parameters={"type": "string"})
    assert client.unregister_function("x") is False


async def test_oversized_context_fires_state_error_and_sends_nothing():
    relay, transport, client = await connected()
    errs = []
    client.on("stateError", errs.append)
    before = len(relay.patches)
    client.set_context({"big": "x" * 70000})
    await client.flush_context_sync()
    assert errs and errs[0]["code"] == "state_too_large"
    assert len(relay.patches) == before
    assert relay.doc["autopilot"]["context"] == {"page": "/"}


async def test_confirmation_is_void_once_the_relay_ended_the_call():
    relay, transport, client = await connected()
    ran = []
    resolved = []
    client.on("functionConfirmationResolved", resolved.append)
    client.register_function("wipe", lambda a, c: ran.append(1), sensitive=True)
    gate = asyncio.get_running_loop().create_future()
    client.set_confirmation_handler(lambda req: gate)
    relay.push(transport, "function_call.begin", {"id": "v1", "name": "wipe", "arguments": {}, "run": True})
    await settle()
    # The relay times the call out while the reader is still looking at the prompt ...
    relay.push(transport, "function_call.end", {"id": "v1", "name": "wipe", "status": "error", "error": "Timed out."})
    await settle()
    # ... the pending answer is withdrawn (a UI drops its prompt), and nothing runs.
    assert gate.cancelled()
    await settle()
    assert ran == []
    assert resolved[-1]["decision"] == "deny" and resolved[-1]["reason"] == "expired"
    assert client._ended_calls == {} and not client.core.call_running("v1")


async def test_confirmation_allows_only_its_own_call():
    relay, transport, client = await connected()
    ran = []
    client.register_function("pay", lambda a, c: ran.append(a["amount"]) or "paid", sensitive=True)
    seen = []

    def handler(req):
        seen.append((req["id"], req["arguments"]))
        return "allow" if req["arguments"] == {"amount": 1} else "deny"

    client.set_confirmation_handler(handler)
    relay.push(transport, "function_call.begin", {"id": "a", "name": "pay", "arguments": {"amount": 1}, "run": True})
    relay.push(transport, "function_call.begin", {"id": "b", "name": "pay", "arguments": {"amount": 999}, "run": True})
    await settle()
    assert ran == [1]
    assert seen == [("a", {"amount": 1}), ("b", {"amount": 999})]
    by_id = {r["id"]: r for r in relay.responses}
    assert by_id["b"]["error"] == P.MSG_SENSITIVE_DENIED


async def test_send_message_flushes_pending_state_first():
    relay, transport, client = await connected()
    client.register_function("late", lambda a, c: 1)
    client.update_context({"cart": 3})
    await client.send_message("hi")
    order = [e for e, _ in transport.sent if e in (P.Event.STATE_PATCH, P.Event.USER_MESSAGE)]
    assert order[-2:] == [P.Event.STATE_PATCH, P.Event.USER_MESSAGE]
    assert "late" in relay.doc["autopilot"]["functions"] and relay.doc["autopilot"]["context"]["cart"] == 3


async def test_new_conversation_keeps_connect_options_and_functions():
    relay, transport, client = await make()
    client.register_function("f", lambda a, c: 1)
    await client.connect(relay_url=BASE, app_id="demo", sync_state_before_function_response=False,
                         function_call_history_limit=7)
    await client.new_conversation()
    assert relay.created == 2
    assert client.conversation_url.endswith("/c2")
    assert client.core.options.sync_state_before_function_response is False
    assert client.core.history.maxlen == 7
    assert "f" in relay.doc["autopilot"]["functions"]


async def test_response_finished_during_a_slow_rejoin_is_resent_not_lost():
    relay, transport, client = await connected()
    gate = asyncio.get_running_loop().create_future()

    async def slow(args, ctx):
        await gate
        return "finished"

    client.register_function("slow", slow)
    await client.sync_registered_functions()
    relay.push(transport, "function_call.begin", {"id": "r1", "name": "slow", "arguments": {}, "run": True})
    await settle()
    relay.hold_gets = asyncio.Event()
    transport.drop()
    relay.joined = False  # the relay forgot the old socket ...
    relay.refused_tokens = {client.core.reusable_token(client._clock())}  # ... and its tokens: the rejoin reads again
    transport.restore()  # the socket is back, but the rejoin is stuck on its GET
    gate.set_result(None)
    await settle()
    assert relay.responses == [] and "r1" in client.pending_responses  # not sent into a not-joined socket, not dropped
    relay.hold_gets.set()
    await settle()
    assert [r["id"] for r in relay.responses] == ["r1"] and client.pending_responses == []


async def test_function_flushed_with_an_oversized_context_reaches_the_relay():
    """The function part is sent although the context next to it is over the cap; the context stays marked and
    goes out once it fits; a skipped sync resolves False."""
    relay, transport, client = await connected()
    errs = []
    client.on("stateError", errs.append)
    client.register_function("later", lambda a, c: 1)
    client.set_context({"big": "x" * 70000})
    assert await client.sync_registered_functions() is False  # the context part was skipped
    assert errs and errs[-1]["code"] == "state_too_large"
    assert "later" in relay.doc["autopilot"]["functions"]
    assert relay.doc["autopilot"]["context"] == {"page": "/"}
    client.set_context({"page": "/small"})
    assert await client.flush_context_sync() is True
    assert relay.doc["autopilot"]["context"] == {"page": "/small"}


async def test_flush_reports_a_sync_skipped_entirely():
    relay, transport, client = await connected()
    client.set_context({"big": "x" * 70000})
    assert await client.flush_context_sync() is False
    client.unregister_function("echo")
    # Still over the cap with the context: the function change goes alone, the sync is reported as partial.
    assert await client.sync_registered_functions() is False
    assert "echo" not in relay.doc["autopilot"]["functions"]


async def test_response_resent_after_rejoin_updates_history_and_fires_the_event():
    relay, transport, client = await connected()
    clock = [1000.0]
    client._clock = lambda: clock[0]
    sent = []
    client.on("functionResponseSent", sent.append)
    gate = asyncio.get_running_loop().create_future()

    async def slow(args, ctx):
        await gate
        return "finished"

    client.register_function("slow", slow)
    await client.sync_registered_functions()
    relay.push(transport, "function_call.begin", {"id": "r2", "name": "slow", "arguments": {}, "run": True})
    await settle()
    transport.drop()
    relay.joined = False
    gate.set_result(None)
    await settle()  # finished while disconnected: kept, not sent
    assert client.get_function_call_history()[0]["respondedAt"] is None and sent == []
    clock[0] += 5.0  # the socket comes back five seconds later
    transport.restore()
    await settle()
    rec = client.get_function_call_history()[0]
    assert [r["id"] for r in relay.responses] == ["r2"]
    assert rec["respondedAt"] is not None and rec["totalMs"] == pytest.approx(5000)
    assert [s["request"]["id"] for s in sent] == ["r2"] and sent[0]["totalMs"] == rec["totalMs"]
    # the total of the send that landed
    assert relay.responses[0]["total_ms"] == pytest.approx(rec["totalMs"], abs=0.01)


async def test_response_refused_for_good_leaves_the_outbox():
    relay, transport, client = await connected()
    relay.response_errors = [P.ErrorCode.CALL_NOT_PENDING]
    relay.push(transport, "function_call.begin", {"id": "g1", "name": "echo", "arguments": {}, "run": True})
    await settle()
    assert relay.responses == [] and client.pending_responses == []


async def test_activate_runs_the_calls_it_hands_over():
    relay, transport, client = await connected()
    ran = []
    client.register_function("handover", lambda a, c: ran.append(a) or "ran here")
    relay.activate_calls = [{"id": "h1", "name": "handover", "arguments": {"k": 1}}]
    await client.activate()
    await settle()
    assert ran == [{"k": 1}] and [r["id"] for r in relay.responses] == ["h1"]
    await client.activate()  # handed over again: never run twice
    await settle()
    assert ran == [{"k": 1}]


async def test_rejoin_sends_stored_results_before_anything_else():
    """After a relay restart, the rejoin's first write is the stored result; the same call handed back as pending
    by the join is not run again."""
    relay, transport, client = await connected()
    runs = []
    gate = asyncio.get_running_loop().create_future()

    async def once(args, ctx):
        runs.append(1)
        await gate
        return "done"

    client.register_function("once", once)
    await client.sync_registered_functions()
    relay.push(transport, "function_call.begin", {"id": "o1", "name": "once", "arguments": {}, "run": True})
    await settle()
    transport.drop()  # the relay crashed mid-call
    relay.joined = False
    gate.set_result(None)
    await settle()
    assert runs == [1] and "o1" in client.pending_responses
    relay.pending_calls = [{"id": "o1", "name": "once", "arguments": {}}]
    client.update_context({"later": True})
    n = len(transport.sent)
    transport.restore()
    await settle()
    writes = [e for e, _ in transport.sent[n:] if e != P.Event.JOIN]
    assert writes[0] == P.Event.FUNCTION_RESPONSE and P.Event.STATE_PATCH in writes
    assert runs == [1] and [r["id"] for r in relay.responses] == ["o1"]


async def test_first_call_handler_time_excludes_the_argument_check(monkeypatch):
    """Loading the schema validator before the first call is the widget's cost, not the handler's."""
    import widget.client.calls as client_module

    relay, transport, client = await connected()
    clock = [100.0]
    client._clock = lambda: clock[0]
    real_validate = client_module.validate_arguments

    def slow_validate(schema, args):
        clock[0] += 0.6  # what importing the validator costs on the first call in the browser
        return real_validate(schema, args)

    monkeypatch.setattr(client_module, "validate_arguments", slow_validate)

    def handler(args, ctx):
        clock[0] += 0.002
        return "ok"

    client.register_function(
        "typed", handler, parameters={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    )
    await client.sync_registered_functions()
    relay.push(transport, "function_call.begin", {"id": "t1", "name": "typed", "arguments": {"n": 1}, "run": True})
    await settle()
    rec = client.get_function_call_history()[0]
    assert rec["handlerMs"] == pytest.approx(2.0, abs=0.01)
    assert relay.responses[0]["duration_ms"] == pytest.approx(2.0, abs=0.01)


async def test_an_oversized_context_does_not_hold_function_responses():
    relay, transport, client = await connected(sync_state_before_function_response_timeout_ms=5000)
    client.set_context({"big": "x" * 70000})
    await client.flush_context_sync()
    relay.push(transport, "function_call.begin", {"id": "q1", "name": "echo", "arguments": {}, "run": True})
    await settle()
    assert [r["id"] for r in relay.responses] == ["q1"]  # not held for the state that cannot go


async def test_subscribing_to_an_unknown_event_is_a_clear_error():
    relay, transport, client = await make()
    with pytest.raises(ConfigError, match="'functionStart'.*functionCall"):
        client.on("functionStart", lambda p: None)
    with pytest.raises(ConfigError, match="callable"):
        client.on("functionCall", "not a listener")  # type: ignore[arg-type]
    off = client.on("completion.finished", lambda p: None)  # relay events re-emitted under their wire names
    off()
    client.on("*", lambda p: None)


async def test_tab_refused_by_the_join_rate_limit_after_a_restart_rejoins_by_itself(monkeypatch):
    import widget.core.session as session_module

    monkeypatch.setattr(session_module, "REJOIN_DELAYS_S", (0.01,))
    relay, transport, client = await connected()
    transport.drop()
    relay.join_error = {"code": P.ErrorCode.RATE_LIMITED, "message": "Too many joins from this address."}
    transport.restore()
    await until(lambda: client.last_error is not None)
    assert client.connection_state == "reconnecting" and client.last_error["code"] == P.ErrorCode.RATE_LIMITED
    relay.join_error = None
    await until(lambda: client.connection_state == "connected")
    assert client.last_error is None


async def test_rejoin_with_a_fresh_token_joins_before_reading_the_conversation():
    """After a relay restart the stored result reaches the relay before any conversation GET (a GET may make the
    relay give up on the call)."""
    relay, transport, client = await connected()
    gate = asyncio.get_running_loop().create_future()

    async def slow(args, ctx):
        await gate
        return "done"

    client.register_function("slow", slow)
    await client.sync_registered_functions()
    relay.push(transport, "function_call.begin", {"id": "t1", "name": "slow", "arguments": {}, "run": True})
    await settle()
    transport.drop()
    relay.joined = False
    gate.set_result(None)
    await settle()
    gets = len(relay.requests)
    transport.restore()
    await until(lambda: relay.responses)
    assert len(relay.requests) == gets  # no GET before the result went out
    assert [r["id"] for r in relay.responses] == ["t1"] and client.connection_state == "connected"


async def test_rejoin_reads_the_conversation_when_the_token_is_refused_or_old():
    relay, transport, client = await connected()
    transport.drop()
    relay.refused_tokens = {client.core.reusable_token(client._clock())}
    gets = len(relay.requests)
    transport.restore()
    await until(lambda: client.connection_state == "connected" and len(relay.requests) == gets + 1)
    clock = [client._clock() + 1000.0]
    client._clock = lambda: clock[0]  # far past the token's reuse window
    transport.drop()
    transport.restore()
    await until(lambda: client.connection_state == "connected" and len(relay.requests) == gets + 2)


async def test_use_here_puts_back_the_functions_another_tab_changed():
    relay, transport, client = await connected()
    transport.deliver(P.Event.CLIENT_ROLE, {"active": False, "conversation_id": "c1"})
    assert not client.active
    # Meanwhile the other tab wrote its own catalogue and context.
    relay.doc = {"autopilot": {"functions": {"other": {"name": "other"}}, "context": {"page": "/other"}}}
    await client.activate()
    await until(lambda: "echo" in relay.doc["autopilot"]["functions"])
    assert relay.doc["autopilot"] == {"functions": {"echo": client.get_registered_functions()[0]},
                                      "context": {"page": "/"}}


async def test_a_role_change_named_for_another_conversation_is_ignored():
    relay, transport, client = await connected()
    transport.deliver(P.Event.CLIENT_ROLE, {"active": False, "conversation_id": "some-other"})
    assert client.active

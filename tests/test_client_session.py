"""The sans-I/O client session: inputs in, effects out, time passed in (no event loop, no sockets, no sleeps)."""

from __future__ import annotations

from typing import Any

import pytest

from widget import protocol as P
from widget.core import session as S
from widget.core.session import ClientSession, EndCall, Notify, Options, Rejoin, RunCall, Send
from widget.protocol import MAX_STATE_BYTES

pytestmark = pytest.mark.unit

INFO = {"conversation": {"id": "c1", "seq": 0}, "messages": [], "token": "tok"}
OK = {"ok": True}


def sends(effects: list[Any], event: str | None = None) -> list[Send]:
    return [e for e in effects if isinstance(e, Send) and (event is None or e.event == event)]


def notes(effects: list[Any], event: str) -> list[Any]:
    return [e.payload for e in effects if isinstance(e, Notify) and e.event == event]


def joined(ack: dict[str, Any] | None = None, now: float = 0.0, **options: Any) -> tuple[ClientSession, list[Any]]:
    """A session through connect, join and its initial sync (acknowledged)."""
    s = ClientSession(instance="t", options=Options(**options))
    s.connecting()
    s.load(INFO)
    s.transport_connected(now)
    ack = {"ok": True, "conversation_id": "c1", "active": True, **(ack or {})}
    result = s.joined_relay(ack, {"functions": {}, "context": {}}, now)
    effects = list(result.effects)
    for send in sends(effects, P.Event.STATE_PATCH):
        effects += s.acked(send.tag, OK, now)
    effects += s.initial_sync_done(ack, INFO["conversation"], now)
    return s, effects


def begin(s: ClientSession, call_id: str, now: float, seq: int | None = None, name: str = "f") -> list[Any]:
    seq = seq if seq is not None else s.seq.last_seq + 1
    payload = {"id": call_id, "name": name, "arguments": {}, "run": True, "seq": seq}
    return s.received(P.Event.FUNCTION_CALL_BEGIN, payload, now)


def run(s: ClientSession, call_id: str, start: float, settle: float, status: str = "success") -> list[Any]:
    """The driver's part of a call: received, ready, settled."""
    s.call_received(call_id, "f", {}, wall_ms=1_000_000.0)
    s.call_ready(call_id, start, wall_ms=1_000_000.0 + start * 1000)
    return s.call_settled(call_id, status, "r" if status == "success" else None,
                          None if status == "success" else "bad", settle)


# --- join, rejoin, role ----------------------------------------------------------------------------------------
def test_join_announces_connected_syncs_and_is_ready():
    s, effects = joined()
    states = [n["state"] for n in notes(effects, "connectionStateChanged")]
    assert states[-1] == "connected" and notes(effects, "joined") == [{"conversation_id": "c1", "active": True}]
    assert notes(effects, "ready") and s.joined and s.active


def test_the_socket_connect_opens_is_no_rejoin_but_a_dropped_one_rejoins():
    s, _ = joined()
    s.closed()
    s.connecting()  # connect() again after disconnect(): its own socket must not trigger a second join
    assert s.transport_connected(1.0) == []
    s, _ = joined()
    effects = s.transport_disconnected(1.0)
    assert notes(effects, "connectionStateChanged") == [{"state": "reconnecting", "error": None}]
    assert not s.joined and not s.active
    assert s.transport_connected(2.0) == [Rejoin()]


def test_closed_session_does_not_rejoin_or_announce_reconnecting():
    s, _ = joined()
    s.closing = True
    assert s.transport_disconnected(1.0) == []
    assert s.transport_connected(2.0) == []


def test_role_changes_follow_the_relay():
    s, _ = joined()
    assert s.received(P.Event.CLIENT_ROLE, {"active": False}, 1.0) == [Notify("roleChanged", {"active": False})]
    assert not s.active and begin(s, "x", 1.0) == [
        Notify(P.Event.FUNCTION_CALL_BEGIN, {"id": "x", "name": "f", "arguments": {}, "run": True, "seq": 1}),
        Notify("messagesChanged", None),
    ]  # a passive client never runs a call


# --- sequence and replay -----------------------------------------------------------------------------------------
def test_gap_asks_for_one_replay_and_duplicates_are_dropped():
    s, _ = joined()
    assert s.received(P.Event.MESSAGE, {"seq": 1, "message": {"id": "u1", "role": "user"}}, 0) != []
    assert s.received(P.Event.MESSAGE, {"seq": 1, "message": {"id": "u1", "role": "user"}}, 0) == []
    gap = s.received(P.Event.MESSAGE, {"seq": 3, "message": {"id": "u3", "role": "user"}}, 0)
    assert [(e.event, e.payload) for e in sends(gap)] == [(P.Event.REPLAY, {"last_seq": 1})]
    assert s.received(P.Event.MESSAGE, {"seq": 4, "message": {"id": "u4", "role": "user"}}, 0) == []  # one at a time
    s.acked("replay", {"ok": True, "seq": 4}, 0)
    assert sends(s.received(P.Event.MESSAGE, {"seq": 5, "message": {}}, 0), P.Event.REPLAY)


# --- run once ----------------------------------------------------------------------------------------------------
def test_a_call_runs_once_however_often_it_is_handed_over():
    s, _ = joined()
    runs = [e for e in begin(s, "c1", 0) if isinstance(e, RunCall)]
    assert runs == [RunCall({"id": "c1", "name": "f", "arguments": {}})]
    assert not [e for e in begin(s, "c1", 0) if isinstance(e, RunCall)]  # the same call under a new seq
    handed = s.activated({"ok": True, "pending_calls": [{"id": "c1", "name": "f"}]}, 0)
    assert not [e for e in handed if isinstance(e, RunCall)]


def test_activate_runs_the_calls_it_hands_over():
    s, _ = joined()
    s.received(P.Event.CLIENT_ROLE, {"active": False}, 0)
    pending = [{"id": "h1", "name": "f", "arguments": {"a": 1}}]
    effects = s.activated({"ok": True, "active": True, "pending_calls": pending}, 0)
    assert s.active and notes(effects, "roleChanged") == [{"active": True}]
    assert [e for e in effects if isinstance(e, RunCall)] == [RunCall({"id": "h1", "name": "f", "arguments": {"a": 1}})]


def test_join_runs_pending_calls_after_its_state_sync():
    s, effects = joined(ack={"pending_calls": [{"id": "p1", "name": "f", "arguments": {}}]})
    kinds = [type(e).__name__ for e in effects if isinstance(e, (RunCall, Notify)) and
             (isinstance(e, RunCall) or e.event == "ready")]
    assert kinds == ["RunCall", "Notify"]


# --- responses: timings, outbox, resend ----------------------------------------------------------------------------
def test_response_goes_out_at_once_with_its_timings_and_updates_history_on_ack():
    s, _ = joined()
    begin(s, "c1", 0)
    effects = run(s, "c1", start=1.0, settle=1.25)
    assert notes(effects, "functionSuccess")[0]["durationMs"] == pytest.approx(250)
    [send] = sends(effects, P.Event.FUNCTION_RESPONSE)
    assert send.payload["duration_ms"] == pytest.approx(250) and send.payload["total_ms"] == pytest.approx(250)
    assert s.outbox == ["c1"]
    done = s.acked(send.tag, OK, 1.3)
    rec = s.history[0]
    assert rec["respondedAt"] == pytest.approx(1_000_000.0 + 1000 + 250) and rec["totalMs"] == pytest.approx(250)
    assert notes(done, "functionResponseSent")[0]["totalMs"] == pytest.approx(250) and s.outbox == []


def test_response_finished_while_disconnected_is_resent_first_on_rejoin_with_its_real_total():
    s, _ = joined()
    begin(s, "c1", 0)
    s.transport_disconnected(1.0)
    assert sends(run(s, "c1", start=0.5, settle=1.5)) == []  # not into a socket that has not joined
    s.state.update_context({"later": True}, 2.0)
    s.transport_connected(3.0)
    result = s.joined_relay({"ok": True, "active": True}, {"functions": {}, "context": {}}, 4.0)
    order = [e.event for e in sends(result.effects)]
    assert order == [P.Event.FUNCTION_RESPONSE, P.Event.STATE_PATCH]  # the stored result before anything else
    [resp] = sends(result.effects, P.Event.FUNCTION_RESPONSE)
    assert resp.payload["total_ms"] == pytest.approx(3500)
    done = s.acked(resp.tag, OK, 4.1)
    assert s.history[0]["totalMs"] == pytest.approx(3500) and notes(done, "functionResponseSent")


def test_internal_refusal_is_resent_with_backoff_until_taken():
    s, _ = joined()
    begin(s, "c1", 0)
    [send] = sends(run(s, "c1", 0.0, 0.1), P.Event.FUNCTION_RESPONSE)
    assert s.acked(send.tag, P.error(P.ErrorCode.INTERNAL, "disk full"), 0.2) == []
    assert s.outbox == ["c1"] and s.next_deadline() == pytest.approx(0.2 + S.RESEND_DELAYS_S[0])
    assert sends(s.tick(0.3)) == []
    [again] = sends(s.tick(0.45), P.Event.FUNCTION_RESPONSE)
    assert again.payload["idempotency_key"] == "fr-c1"
    assert s.acked(send.tag, OK, 0.46) == []  # a stale attempt's ack decides nothing
    s.acked(again.tag, P.error(P.ErrorCode.RATE_LIMITED, "slow down"), 0.5)
    assert s.next_deadline() == pytest.approx(0.5 + S.RESEND_DELAYS_S[1])
    [third] = sends(s.tick(1.0), P.Event.FUNCTION_RESPONSE)
    assert notes(s.acked(third.tag, OK, 1.1), "functionResponseSent") and s.outbox == []
    assert s.history[0]["totalMs"] == pytest.approx(1000)


def test_refusal_for_good_leaves_the_outbox_and_a_refusal_forever_is_dropped():
    s, _ = joined()
    begin(s, "c1", 0)
    [send] = sends(run(s, "c1", 0.0, 0.1), P.Event.FUNCTION_RESPONSE)
    s.acked(send.tag, P.error(P.ErrorCode.CALL_NOT_PENDING, "gone"), 0.2)
    assert s.outbox == [] and s.next_deadline() is None
    begin(s, "c2", 0)
    [send] = sends(run(s, "c2", 0.0, 0.1), P.Event.FUNCTION_RESPONSE)
    s.acked(send.tag, P.error(P.ErrorCode.INTERNAL, "down"), S.RESEND_WINDOW_S + 1)
    assert s.outbox == []


def test_not_joined_refusal_waits_for_the_rejoin():
    s, _ = joined()
    begin(s, "c1", 0)
    [send] = sends(run(s, "c1", 0.0, 0.1), P.Event.FUNCTION_RESPONSE)
    assert s.acked(send.tag, P.error(P.ErrorCode.NOT_JOINED, "join first"), 0.2) == [] and s.outbox == ["c1"]
    assert s.next_deadline() is None  # no timer: the next join resends it
    assert s.send_failed(send.tag, 0.3) == [] and s.outbox == ["c1"]


# --- the state-sync gate and context resolutions ------------------------------------------------------------------
def test_gate_withholds_the_response_until_the_handlers_state_is_acknowledged():
    s, _ = joined()
    begin(s, "c1", 0)
    s.call_received("c1", "f", {}, 0)
    s.call_ready("c1", 1.0, 0)
    s.state.update_context({"after": True}, 1.1)
    effects = s.call_settled("c1", "success", "ok", None, 1.2)
    [patch] = sends(effects)
    assert patch.event == P.Event.STATE_PATCH  # flushed at once, response withheld
    assert s.next_deadline() == pytest.approx(1.2 + P.SYNC_STATE_BEFORE_FUNCTION_RESPONSE_TIMEOUT_MS / 1000)
    [resp] = sends(s.acked(patch.tag, OK, 1.3), P.Event.FUNCTION_RESPONSE)
    assert resp.payload["total_ms"] == pytest.approx(300) and resp.payload["duration_ms"] == pytest.approx(200)


def test_a_lost_patch_ack_cannot_stall_the_response():
    s, _ = joined(sync_state_before_function_response_timeout_ms=60)
    begin(s, "c1", 0)
    s.call_received("c1", "f", {}, 0)
    s.call_ready("c1", 1.0, 0)
    s.state.update_context({"x": 1}, 1.0)
    s.call_settled("c1", "success", "ok", None, 1.0)
    assert sends(s.tick(1.05), P.Event.FUNCTION_RESPONSE) == []
    assert [e.payload["id"] for e in sends(s.tick(1.06), P.Event.FUNCTION_RESPONSE)] == ["c1"]


def test_gate_off_responds_with_dirty_state():
    s, _ = joined(sync_state_before_function_response=False)
    begin(s, "c1", 0)
    s.state.update_context({"x": 1}, 0.5)
    assert [e.event for e in sends(run(s, "c1", 0.5, 0.6))] == [P.Event.FUNCTION_RESPONSE]


def test_resolutions_hold_responses_then_flush_what_they_wrote_even_with_the_gate_off():
    s, _ = joined(sync_state_before_function_response=False, context_resolution_timeout_ms=10_000)
    begin(s, "c1", 0)
    rid, effects = s.begin_resolution("page")
    assert notes(effects, "contextResolutionChanged") == [{"pending": 1}]
    assert sends(run(s, "c1", 0.0, 0.1)) == []
    rid2, _ = s.begin_resolution("next page")  # chained: acquired before the first is released
    assert sends(s.end_resolution(rid, 0.2)) == []
    s.state.update_context({"users": ["ada"]}, 0.3)
    effects = s.end_resolution(rid2, 0.4)
    assert s.end_resolution(rid2, 0.4) == []  # idempotent
    [patch] = sends(effects)
    assert patch.event == P.Event.STATE_PATCH
    assert [e.event for e in sends(s.acked(patch.tag, OK, 0.5))] == [P.Event.FUNCTION_RESPONSE]


def test_a_forgotten_resolution_times_out():
    s, _ = joined(context_resolution_timeout_ms=80)
    begin(s, "c1", 0)
    s.begin_resolution("never released")
    run(s, "c1", 0.0, 0.1)
    assert s.next_deadline() == pytest.approx(0.18)
    assert sends(s.tick(0.17)) == []
    assert [e.event for e in sends(s.tick(0.18))] == [P.Event.FUNCTION_RESPONSE]


# --- confirmation expiry ------------------------------------------------------------------------------------------
def test_the_relay_ending_a_running_call_voids_its_confirmation_only_while_it_runs():
    s, _ = joined()
    begin(s, "c1", 0)
    s.call_received("c1", "f", {}, 0)
    end = s.received(P.Event.FUNCTION_CALL_END, {"id": "c1", "seq": 2, "status": "error"}, 1.0)
    assert EndCall("c1") in end
    s.call_ready("c1", 1.0, 0)
    s.call_settled("c1", "error", None, P.MSG_SENSITIVE_DENIED, 1.1)
    assert EndCall("c1") not in s.received(P.Event.FUNCTION_CALL_END, {"id": "c1", "seq": 3}, 1.2)


# --- state sync -----------------------------------------------------------------------------------------------------
def test_debounced_patches_come_from_tick_and_a_skipped_part_is_reported():
    s, _ = joined()
    s.state.set_functions({"f": {"name": "f"}}, 0.0)
    assert s.next_deadline() == pytest.approx(P.FUNCTIONS_DEBOUNCE_MS / 1000)
    assert [e.event for e in sends(s.tick(0.03))] == [P.Event.STATE_PATCH]
    s.state.set_functions({"f": {"name": "f"}, "g": {"name": "g"}}, 1.0)
    s.state.set_context({"big": "x" * MAX_STATE_BYTES}, 1.0)
    result = s.flush(1.0)
    assert not result.complete and notes(result.effects, "stateError")[0]["code"] == P.ErrorCode.STATE_TOO_LARGE
    [patch] = sends(result.effects)
    assert [op["path"] for op in patch.payload["patch"]] == ["/autopilot/functions/g"]


def test_a_refused_patch_reports_state_error():
    s, _ = joined()
    s.state.set_context({"a": 1}, 0.0)
    [patch] = sends(s.flush(0.0).effects)
    effects = s.acked(patch.tag, P.error(P.ErrorCode.PATCH_FAILED, "no"), 0.1)
    assert notes(effects, "stateError") == [{"code": P.ErrorCode.PATCH_FAILED, "message": "no"}]
    assert s.state.is_dirty()  # re-diffed from what the relay holds


def test_nothing_goes_out_before_the_join():
    s = ClientSession(instance="t")
    s.state.set_context({"a": 1}, 0.0)
    assert s.next_deadline() is None and s.flush(0.0).effects == [] and not s.flush(0.0).complete


# --- offers, ask-user, history -----------------------------------------------------------------------------------
def test_offers_are_recorded_and_an_outcome_from_any_tab_marks_them_done():
    s, _ = joined()
    s.received(P.Event.COMPLETION_STARTED, {"seq": 1, "turn_id": "t", "message_id": "a1"}, 0)
    msg = {"id": "a1", "role": "assistant", "content": "x",
           "actions": [{"id": "o1", "name": "open", "arguments": {}}, {"bad": 1}]}
    effects = s.received(P.Event.COMPLETION_ENDED, {"seq": 2, "message": msg}, 0)
    assert notes(effects, "actionsOffered") == [{"message_id": "a1"}]
    assert [o["id"] for o in s.offers.of("a1")] == ["o1"]
    s.received(P.Event.MESSAGE, {"seq": 3, "message": {"id": "m", "role": "action", "ok": True, "message_id": "a1",
                                                      "action_id": "o1", "outcome": "Done."}}, 0)
    assert s.offers.of("a1")[0]["status"] == "done"


def test_ask_user_prompts_are_required_then_cleared():
    s, _ = joined()
    prompts = [{"id": "q", "type": "text", "question": "?"}]
    effects = s.received(P.Event.ASK_USER_REQUEST, {"seq": 1, "prompts": prompts}, 0)
    assert notes(effects, "askUserRequired")[0]["prompts"][0]["id"] == "q"
    assert s.set_pending_ask_user([]) == [Notify("askUserCleared", None)]
    assert s.set_pending_ask_user([]) == []


def test_history_is_limited_and_kept_newest_first():
    s, _ = joined()
    s.set_history_limit(2)
    for i in range(3):
        begin(s, f"h{i}", 0)
        run(s, f"h{i}", 0.0, 0.1)
    assert [r["id"] for r in s.history] == ["h2", "h1"]


def test_a_handler_that_sets_an_oversized_context_does_not_wait_for_the_gate():
    s, _ = joined()
    begin(s, "c1", 0)
    s.call_received("c1", "f", {}, 0)
    s.call_ready("c1", 1.0, 0)
    s.state.set_context({"big": "x" * MAX_STATE_BYTES}, 1.0)
    effects = s.call_settled("c1", "success", "ok", None, 1.1)
    assert notes(effects, "stateError") and [e.event for e in sends(effects)] == [P.Event.FUNCTION_RESPONSE]


def test_a_rejoin_refused_by_the_rate_limit_is_tried_again_with_backoff():
    s, _ = joined()
    s.transport_disconnected(1.0)
    assert s.transport_connected(2.0) == [Rejoin()]
    limited = {"code": P.ErrorCode.RATE_LIMITED, "message": "Too many joins"}
    effects = s.rejoin_failed(limited, 2.5)
    assert notes(effects, "connectionStateChanged") == [{"state": "reconnecting", "error": limited}]
    assert s.next_deadline() == pytest.approx(2.5 + S.REJOIN_DELAYS_S[0])
    assert Rejoin() not in s.tick(3.0)
    assert Rejoin() in s.tick(3.5)
    s.rejoin_failed(limited, 4.0)
    assert s.next_deadline() == pytest.approx(4.0 + S.REJOIN_DELAYS_S[1])
    s.joined_relay({"ok": True, "active": True}, {}, 6.0)
    assert s.next_deadline() is None and s.connection_state == "connected"


def test_a_rejoin_refused_for_good_is_an_error():
    s, _ = joined()
    s.transport_disconnected(1.0)
    s.transport_connected(2.0)
    effects = s.rejoin_failed({"code": P.ErrorCode.NOT_FOUND, "message": "gone"}, 2.5)
    assert notes(effects, "error") == [{"code": P.ErrorCode.NOT_FOUND, "message": "gone"}]
    assert s.connection_state == "error" and s.next_deadline() is None


def test_the_core_imports_no_io():
    """widget.core decides and never performs: no event loop, socket, browser or relay module is imported there."""
    import ast
    from pathlib import Path

    import widget.core

    forbidden = ("asyncio", "js", "pyodide", "socketio", "aiohttp", "widget.client", "widget.transports",
                 "widget.ui", "widget.browser", "widget.relay", "widget.store")
    found = []
    for path in sorted(Path(widget.core.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: widget.core.<x> (level 1) or widget.<x> (level 2)
                    base = ".".join(["widget", "core"][: 3 - node.level] + ([base] if base else []))
                names = [base]
            found += [f"{path.name}: {n}" for n in names if any(n == f or n.startswith(f + ".") for f in forbidden)]
    assert found == []


def test_a_user_message_waits_for_dirty_state_only():
    s, _ = joined()
    assert s.flush_before_message(0.0) is None
    s.state.set_functions({"late": {"name": "late"}}, 0.0)
    result = s.flush_before_message(0.001)
    assert result is not None and [e.event for e in sends(result.effects)] == [P.Event.STATE_PATCH]


def test_a_young_join_token_is_reused_for_a_rejoin_and_an_old_one_is_not():
    s = ClientSession(instance="t")
    assert s.reusable_token(0.0) is None
    s.token_received("tok", 10.0)
    assert s.reusable_token(10.0 + S.TOKEN_REUSE_S - 1) == "tok"
    assert s.reusable_token(10.0 + S.TOKEN_REUSE_S) is None
    assert S.TOKEN_REUSE_S < P.JOIN_TOKEN_TTL_S
    s.new_conversation()
    assert s.reusable_token(10.0) is None


def test_a_call_the_page_made_itself_is_recorded_but_never_sent_to_the_relay():
    s, _ = joined()
    s.call_received("webmcp-1", "f", {}, wall_ms=5000.0)
    s.call_ready("webmcp-1", 1.0, wall_ms=5000.0)
    s.state.update_context({"dirty": True}, 1.0)
    effects = s.local_call_settled("webmcp-1", "success", "ok", None, 1.02)
    assert notes(effects, "functionSuccess")[0]["durationMs"] == pytest.approx(20) and sends(effects) == []
    rec = s.history[0]
    assert rec["totalMs"] == rec["handlerMs"] == pytest.approx(20) and rec["respondedAt"] == rec["settledAt"]
    assert s.outbox == [] and not s.call_running("webmcp-1")


def test_the_state_after_activate_becomes_the_base_and_everything_local_is_due():
    s, _ = joined()
    s.state.set_functions({"mine": {"name": "mine"}}, 0.0)
    [patch] = sends(s.flush(0.0).effects)
    s.acked(patch.tag, OK, 0.0)
    s.received(P.Event.CLIENT_ROLE, {"active": False, "conversation_id": "c1"}, 1.0)
    effects = s.activated({"ok": True, "active": True, "pending_calls": []}, 2.0)
    assert sends(effects) == [] and s.next_deadline() is None  # nothing diffed against the join's snapshot
    s.state_received({"functions": {"theirs": {"name": "theirs"}}, "context": {}}, 2.1)
    [patch] = sends(s.tick(2.1))
    ops = sorted((op["op"], op["path"]) for op in patch.payload["patch"])
    assert ops == [("add", "/autopilot/functions/mine"), ("remove", "/autopilot/functions/theirs")]


def test_a_role_change_for_another_conversation_is_ignored():
    s, _ = joined()
    assert s.received(P.Event.CLIENT_ROLE, {"active": False, "conversation_id": "elsewhere"}, 1.0) == []
    assert s.active
    s.received(P.Event.CLIENT_ROLE, {"active": False, "conversation_id": "c1"}, 1.0)
    assert not s.active


def test_the_end_of_the_joins_replay_asks_again_for_what_was_not_taken():
    s, _ = joined()
    s.received(P.Event.MESSAGE, {"seq": 1, "message": {"id": "u1", "role": "user"}}, 0)
    assert s.received(P.Event.REPLAY_DONE, {"last_seq": 1}, 0) == []
    [replay] = sends(s.received(P.Event.REPLAY_DONE, {"last_seq": 3}, 0))
    assert replay.payload == {"last_seq": 1}
    assert s.received(P.Event.REPLAY_DONE, {"last_seq": "3"}, 0) == []


def test_a_rate_limited_rejoin_waits_at_least_what_the_relay_asks():
    s, _ = joined()
    s.transport_disconnected(1.0)
    s.transport_connected(2.0)
    s.rejoin_failed({"code": P.ErrorCode.RATE_LIMITED, "message": "wait", "retry_after": 7.5}, 2.0)
    assert s.next_deadline() == pytest.approx(9.5)

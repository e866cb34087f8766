"""A rolling deploy: the relay restarted (gracefully, SIGTERM) while the page runs a call never runs it twice."""

from __future__ import annotations

from ..protocol import Event
from .flows import FUNC, Options, declare, flow, key, plain_round, send, turn_end
from .peer import Relay, Skipped, accepted, check


@flow("rolling_deploy")
async def rolling_deploy_flow(r: Relay, o: Options) -> None:
    """A call still pending when the relay restarts stays pending: the late answer is kept, Retry reuses it."""
    if o.restart is None:
        raise Skipped("no --restart-command (how to stop the relay with SIGTERM and start it again)")
    url = await r.create()
    old, _ = await r.peer(url)
    try:
        await declare(old, FUNC)
        await send(old, "get_selection")
        started = await old.expect(Event.COMPLETION_STARTED)
        tid, mid = started["turn_id"], started["message_id"]
        text = await old.stream(mid)
        begin = await old.expect(Event.FUNCTION_CALL_BEGIN, message_id=mid, run=True)
        await o.restart()  # the page is still running the call
    finally:
        await old.close()
    before = (await r.get(url))["conversation"]
    check(before["status"] == "failed", f"after the restart the interrupted turn is failed, not {before['status']!r}")
    peer, ack = await r.peer(url, begin["seq"])
    try:
        pending = [c.get("id") for c in ack.get("pending_calls", [])]
        check(pending == [begin["id"]], f"the join's pending_calls keep the call the page was running: {ack!r}")
        ended = await peer.expect(Event.COMPLETION_ENDED)
        msg = ended["message"]
        check(
            msg["id"] == mid and [c["id"] for c in msg.get("function_calls", [])] == [begin["id"]],
            f"the interrupted round is closed with its call: {ended!r}",
        )
        check(ended["tool_messages"] == [], f"no result is stored for the pending call: {ended!r}")
        ev = await peer.expect(Event.MESSAGE)
        err = ev["message"]
        check(
            err.get("role") == "error" and err.get("code") == "turn_interrupted" and err.get("retryable") is True,
            f"the turn ends with a retryable turn_interrupted error: {err!r}",
        )
        await turn_end(peer, tid, "failed")
        answer = {
            "id": begin["id"],
            "status": "success",
            "result": {"text": "ran once"},
            "idempotency_key": key("fr"),
            "duration_ms": 5.0,
            "total_ms": 6.0,
        }
        check(await peer.call(Event.FUNCTION_RESPONSE, answer) == {"ok": True}, "the page's late answer is accepted")
        retried = accepted(await peer.call(Event.RETRY, {"idempotency_key": key("retry")}), "retry")
        check(retried.get("turn_id") == tid, f"retry goes on with the interrupted turn: {retried!r}")
        await peer.expect(Event.MESSAGES_WITHDRAWN, reason="retry", turn_id=tid)
        again = await peer.expect(Event.COMPLETION_STARTED, turn_id=tid)
        check(await peer.stream(again["message_id"]) == text, "the interrupted round is streamed again, same text")
        end = await peer.expect(
            Event.FUNCTION_CALL_END, id=begin["id"], status="success", result={"text": "ran once"}, duration_ms=5.0
        )
        ended = await peer.expect(Event.COMPLETION_ENDED)
        [tool] = ended["tool_messages"]
        check(
            tool["function_call_id"] == begin["id"] and tool["status"] == end["status"],
            f"the resumed round's tool message is the late answer: {tool!r}",
        )
        await peer.expect(Event.FUNCTION_CALL_ITERATION, turn_id=tid)
        await plain_round(peer, tid)
        await turn_end(peer, tid)
        begins = [d for e, d in peer.events if e == Event.FUNCTION_CALL_BEGIN]
        check(begins == [], f"the page was asked to run a call again: {begins!r}")
    finally:
        await peer.close()

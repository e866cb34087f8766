"""Flows of the rules that make the protocol unambiguous: what ``run`` means, one conversation per socket,
idempotency keys scoped to one kind of write, the end of a join's replay, and acks against events."""

from __future__ import annotations

import asyncio
import time

from ..protocol import Event
from .flows import ACTION, FUNC, Options, declare, flow, key, plain_round, round_start, send, turn_end
from .peer import Peer, Relay, accepted, check, refused


async def _until(peer: Peer, arrival: str) -> None:
    """Wait until ``arrival`` (an ``arrivals`` entry) reached the socket."""
    deadline = time.monotonic() + peer.timeout
    while arrival not in peer.arrivals:
        check(time.monotonic() < deadline, f"no {arrival!r} within {peer.timeout:g} s: {peer.arrivals}")
        await asyncio.sleep(0.01)


@flow("run_flag")
async def run_flag_flow(r: Relay, o: Options) -> None:
    """``run: true`` only on the live copy to run; replays say ``false``; acks hand calls over in ``pending_calls``.

    The steps after the call is made must fit in the relay's call timeout (``Options.call_timeout_s``).
    """
    url = await r.create()
    a, _ = await r.peer(url)
    b: Peer | None = None
    try:
        await declare(a, FUNC)
        await send(a, "get_selection")
        await round_start(a)
        begin = await a.expect(Event.FUNCTION_CALL_BEGIN, run=True)
        await a.close()  # the socket running the call goes away without answering
        b, ack = await r.peer(url, 0, expect_state=False)
        await _until(b, f"event {Event.REPLAY_DONE}")
        check(
            [c["id"] for c in ack["pending_calls"]] == [begin["id"]],
            f"the next active client's join ack hands the call over: {ack['pending_calls']!r}",
        )
        await b.expect(Event.STATE)
        replayed = b.events[b.cursor : b.replay_done[-1][0]]
        b.cursor = b.replay_done[-1][0]
        copies = [d for e, d in replayed if e == Event.FUNCTION_CALL_BEGIN]
        check(
            len(copies) == 1 and copies[0]["id"] == begin["id"] and copies[0]["run"] is False,
            f"a join's replay never says run: true: {copies!r}",
        )
        check(
            bool(b.replay_done) and b.replay_done[-1][1] == {"last_seq": ack["seq"]},
            f"replay.done names the last seq the replay sent: {b.replay_done!r}",
        )
        # A replay the socket asks for says run: false too, and its ack lists the calls for it to run.
        ack2 = accepted(await b.call(Event.REPLAY, {"last_seq": 0}), "replay")
        check(
            [c["id"] for c in ack2.get("pending_calls", [])] == [begin["id"]],
            f"the replay ack lists the call this socket is to run: {ack2!r}",
        )
        again = [d for e, d in b.events[b.cursor :] if e == Event.FUNCTION_CALL_BEGIN]
        check(bool(again) and all(d["run"] is False for d in again), f"a replay's copies say run: false: {again!r}")
        b.cursor = len(b.events)
        response = {"id": begin["id"], "status": "success", "result": "moved", "idempotency_key": key()}
        check(await b.call(Event.FUNCTION_RESPONSE, response) == {"ok": True}, "the handed-over call is answered")
        await b.expect(Event.FUNCTION_CALL_END, id=begin["id"], status="success", result="moved")
    finally:
        await a.close()
        if b is not None:
            await b.close()


@flow("one_conversation_per_socket")
async def one_conversation_flow(r: Relay, o: Options) -> None:
    """A socket that joins a second conversation leaves the first: none of its events or role changes any more."""
    first, second = await r.create(), await r.create()
    s, ack1 = await r.peer(first)
    others: list[Peer] = []
    try:
        info = await r.get(second)
        ack2 = accepted(await s.join(info["token"], 0), "join of a second conversation")
        check(
            ack2["conversation_id"] == info["conversation"]["id"] != ack1["conversation_id"] and ack2["active"] is True,
            f"the second join: {ack2!r}",
        )
        await s.expect(Event.STATE)
        t, _ = await r.peer(first)  # would have taken the role from s in the first conversation
        others.append(t)
        await send(t, "hello first")
        tid, _, _ = await plain_round(t)
        await turn_end(t, tid)
        await s.quiet()
        mid, _ = await send(s, "hello second")  # goes to the conversation joined last
        tid, _, _ = await plain_round(s)
        await turn_end(s, tid)
        check([m["id"] for m in (await r.get(second))["messages"]][:1] == [mid], "the write went to the second")
        check(all(m["id"] != mid for m in (await r.get(first))["messages"]), "nothing went to the first")
        u, _ = await r.peer(second)
        others.append(u)
        await s.expect(Event.CLIENT_ROLE, active=False, conversation_id=ack2["conversation_id"])
    finally:
        await s.close()
        for p in others:
            await p.close()


@flow("idempotency_scope")
async def idempotency_scope_flow(r: Relay, o: Options) -> None:
    """A key belongs to one kind of write: a message with a patch's key is ``idempotency_key_reused``, not stored."""
    url = await r.create()
    peer, _ = await r.peer(url)
    try:
        shared = key("shared")
        patch = {"patch": [{"op": "add", "path": "/autopilot/context/a", "value": 1}], "idempotency_key": shared}
        check(await peer.call(Event.STATE_PATCH, patch) == {"ok": True}, "the patch")
        refused(
            await peer.call(Event.USER_MESSAGE, {"text": "lost?", "idempotency_key": shared}),
            "idempotency_key_reused",
            "a message with a patch's key",
        )
        check(await peer.call(Event.STATE_PATCH, patch) == {"ok": True}, "the patch's own repeat still gets its ack")
        await peer.quiet()
        check((await r.get(url))["messages"] == [], "the refused message was not stored")
    finally:
        await peer.close()


@flow("ack_order")
async def ack_order_flow(r: Relay, o: Options) -> None:
    """Acks against events: a write's stored event before its ack; ``join``/``activate`` acked before ``state``."""
    url = await r.create()
    peer, _ = await r.peer(url)
    other: Peer | None = None
    try:
        await _until(peer, f"event {Event.REPLAY_DONE}")
        check(
            peer.arrivals.index(f"ack {Event.JOIN}")
            < peer.arrivals.index(f"event {Event.STATE}")
            < peer.arrivals.index(f"event {Event.REPLAY_DONE}"),
            f"join: ack, state, replay.done: {peer.arrivals}",
        )
        await declare(peer, ACTION)
        mark = len(peer.arrivals)
        await send(peer, 'offer open_pricing {"plan": "pro"}')
        peer.order(f"event {Event.MESSAGE}", f"ack {Event.USER_MESSAGE}", mark)
        tid, mid, ended = await plain_round(peer)
        await turn_end(peer, tid)
        [offer] = ended["message"]["actions"]
        mark = len(peer.arrivals)
        outcome = {
            "message_id": mid,
            "action_id": offer["id"],
            "name": "open_pricing",
            "arguments": {"plan": "pro"},
            "ok": True,
            "outcome": "Done.",
            "idempotency_key": key(),
        }
        accepted(await peer.call(Event.ACTION_OUTCOME, outcome), "action_outcome")
        await peer.expect(Event.MESSAGE)
        peer.order(f"event {Event.MESSAGE}", f"ack {Event.ACTION_OUTCOME}", mark)
        mark = len(peer.arrivals)
        regen = accepted(await peer.call(Event.REGENERATE, {"idempotency_key": key()}), "regenerate")
        await peer.expect(Event.MESSAGES_WITHDRAWN)
        peer.order(f"event {Event.MESSAGES_WITHDRAWN}", f"ack {Event.REGENERATE}", mark)
        await plain_round(peer, regen["turn_id"])
        await turn_end(peer, regen["turn_id"])
        other, _ = await r.peer(url)
        await peer.expect(Event.CLIENT_ROLE, active=False)
        mark = len(peer.arrivals)
        accepted(await peer.call(Event.ACTIVATE, {}), "activate")
        await peer.expect(Event.STATE)
        peer.order(f"ack {Event.ACTIVATE}", f"event {Event.STATE}", mark)
    finally:
        await peer.close()
        if other is not None:
            await other.close()

"""Fan-out across relay processes that share a store (and Redis).

With ``redis_url`` the Socket.IO server uses python-socketio's Redis manager, so an event emitted by one
process reaches the sockets joined on the others; function responses reach the waiting turn through the
store (its signal wakes the waiter; polling is the fallback). Whatever a process's sockets missed (a
Redis outage, a join racing an emit elsewhere) is read back from the stored event log and sent again;
clients drop what they already have by ``seq``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from ... import protocol as P
from ..storage import store as S
from .context import Spawn
from .runtime import LIVE_STATUSES, POLL_DEGRADED_S, POLL_S, ConvRuntime, Runtimes

log = logging.getLogger("widget.relay")


class EmitStored(Protocol):
    """Send stored events to one socket of this process (``CallDispatch.emit_stored``)."""

    def __call__(self, cid: str, sid: str, events: list[tuple[int, str, dict[str, Any]]], *,
                 active: Any = ...) -> Awaitable[bool]: ...


@dataclass(frozen=True)
class FanoutContext:
    """What the fan-out uses."""

    store: S.Store
    runtimes: Runtimes
    #: this relay process's instance id (a turn run by another, dead one is recovered)
    instance: str
    spawn: Spawn
    #: the Redis manager (None: no Redis); its ``healthy`` sets the poll's pace
    redis: Any
    emit_stored: EmitStored
    #: close a turn whose relay died (``Lifecycle.recover``)
    recover: Callable[[dict[str, Any]], Awaitable[bool]]
    #: drop a deleted conversation's sockets and turn here (``Lifecycle.disconnect_conversation``)
    disconnect_conversation: Callable[[str, bool], Coroutine[Any, Any, None]]


class Fanout:
    """Keeps this process's sockets gap-free when other processes write the same conversations."""

    def __init__(self, ctx: FanoutContext) -> None:
        self._ctx = ctx

    @staticmethod
    def in_order(rt: ConvRuntime, seq: int) -> bool:
        """Whether an event about to be emitted to the ready sockets follows every event they have
        (decided before the emit starts: Socket.IO queues packets in the order emits start)."""
        return seq == rt.seen_seq + 1

    def delivered(self, cid: str, rt: ConvRuntime, seq: int, in_order: bool) -> None:
        """An event reached this process's ready sockets; ``in_order``: from ``in_order`` before it
        was emitted. After a gap, what was missed is resent now (the catch-up), not at a later poll:
        the event that overtook the missed ones may be the last of a turn, or a call to run, and the
        client drops it (a seq gap) until it has the ones before."""
        if seq <= rt.seen_seq:
            return
        if in_order or not rt.ready or not self._ctx.store.shared:
            # No socket here to have missed anything; or only this process writes the conversation
            # (every event is emitted under its lock, in seq order).
            rt.seen_seq = seq
        else:
            self.want_catch_up(cid, rt)

    def want_catch_up(self, cid: str, rt: ConvRuntime) -> None:
        """Spawn a catch-up for the conversation unless one is already waiting to start."""
        if not rt.catch_up_queued:
            rt.catch_up_queued = True
            self._ctx.spawn(self.catch_up_quietly(cid))

    def seen_remote(self, event: str, room: Any, data: Any, skip_sid: Any = None) -> Callable[[], None] | None:
        """The Redis manager is about to deliver another process's event to this process's sockets in
        ``room`` (a conversation; or one socket, for a call's ``run: true`` copy). Returns what to call
        once it has, or None."""
        ctx = self._ctx
        if event not in P.SEQUENCED_EVENTS or not isinstance(room, str) or not isinstance(data, dict):
            return None
        seq = data.get("seq")
        cid = room if room in ctx.runtimes.convs else ctx.runtimes.clients.get(room)
        rt = ctx.runtimes.convs.get(cid) if cid is not None else None
        if cid is None or rt is None or not isinstance(seq, int) or isinstance(seq, bool):
            return None
        in_order = self.in_order(rt, seq)
        if room != cid:  # the runner's copy of a call: it stands in for that socket's copy of the room event
            rt.direct = (room, seq) if in_order else None
            return None
        skipped = skip_sid if isinstance(skip_sid, list) else [skip_sid]
        if any(s in rt.ready and rt.direct != (s, seq) for s in skipped):
            in_order = False  # a socket here got neither copy in order (its own copy was lost or late)
        rt.direct = None
        return lambda: self.delivered(cid, rt, seq, in_order)

    def on_redis_back(self) -> None:
        """Redis is reachable again: what this process's sockets missed meanwhile comes from the store."""
        for cid, rt in list(self._ctx.runtimes.convs.items()):
            if rt.ready:
                self._ctx.spawn(self.catch_up_quietly(cid))

    def on_signal(self, message: dict[str, Any]) -> None:
        """A store signal (from this or another process): a call was answered, a turn is to be
        cancelled, a conversation was deleted; ``resync`` after signals may have been lost."""
        ctx = self._ctx
        kind = message.get("t")
        if kind == "resync":
            for each in ctx.runtimes.convs.values():
                for waiter in each.call_events.values():
                    waiter.set()
            return
        cid = message.get("c")
        if not isinstance(cid, str):
            return
        rt = ctx.runtimes.convs.get(cid)
        if rt is None:
            return
        if kind == "call":
            ev = rt.call_events.get(str(message.get("id")))
            if ev is not None:
                ev.set()
        elif kind == "cancel":
            if rt.turn is not None and not rt.turn.done():
                rt.turn.cancel()
        elif kind == "deleted":
            ctx.spawn(ctx.disconnect_conversation(cid, False))

    async def catch_up(self, cid: str) -> int:
        """Send this process's ready sockets of ``cid`` the stored events after ``seen_seq`` (those
        they already have they drop by seq). The number of events sent."""
        ctx = self._ctx
        rt = ctx.runtimes.convs.get(cid)
        if rt is None:
            return 0
        async with rt.lock:
            rt.catch_up_queued = False  # a gap found from now on may be after what this one reads
            events = await ctx.store.events_after(cid, rt.seen_seq)
            if not events:
                return 0
            conv = await ctx.store.get_conversation(cid)
            active = conv["active_sid"] if conv else None
            for sid in list(rt.ready):
                await ctx.emit_stored(cid, sid, events, active=active)
            rt.seen_seq = max(rt.seen_seq, events[-1][0])  # all of them, in order, after those it had
            rt.lag = 0
            return len(events)

    async def catch_up_quietly(self, cid: str) -> None:
        """``catch_up``, a failure logged (the next poll tries again)."""
        try:
            await self.catch_up(cid)
        except Exception as exc:  # noqa: BLE001 - the next poll tries again
            log.warning("catching up %s failed: %s", cid, exc)

    async def poll_forever(self) -> None:
        """``poll`` every ``POLL_S`` (``POLL_DEGRADED_S`` while Redis is down)."""
        while True:
            degraded = self._ctx.redis is None or not self._ctx.redis.healthy
            await asyncio.sleep(POLL_DEGRADED_S if degraded else POLL_S)
            try:
                await self.poll(degraded)
            except Exception as exc:  # noqa: BLE001 - the store reconnects; poll again
                log.warning("relay poll failed: %s", exc)

    async def poll(self, degraded: bool = False) -> None:
        """With a shared store: for the conversations this process has sockets in, send what they
        missed (at once while Redis is down, else when still missing one poll later: it may just be
        on its way through Redis), and close turns whose relay died."""
        ctx = self._ctx
        ids = [cid for cid, rt in ctx.runtimes.convs.items() if rt.ready]
        brief = await ctx.store.conversations_brief(ids)
        for cid, b in brief.items():
            rt = ctx.runtimes.convs.get(cid)
            if rt is None:
                continue
            if b["seq"] > rt.seen_seq:
                if degraded or (rt.lag and rt.seen_seq < rt.lag):
                    await self.catch_up(cid)
                else:
                    rt.lag = b["seq"]
            else:
                rt.lag = 0
            if (
                b["status"] in LIVE_STATUSES
                and b["runner"] != ctx.instance
                and (b["runner"] is None or not await ctx.store.instance_alive(b["runner"]))
            ):
                conv = await ctx.store.get_conversation(cid)
                if conv is not None:
                    await ctx.recover(conv)

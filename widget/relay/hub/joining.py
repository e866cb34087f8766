"""Socket membership: connect, join (ack, state, replay), activate, replay, disconnect."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ... import protocol as P
from ...errors import ProtocolError
from ..config import RelayConfig
from ..sio import RelaySocketServer
from ..storage import store as S
from ..tokens import TokenSigner
from .context import Limiters, Spawn, Switches
from .dispatch import CallDispatch
from .runtime import MAX_SEQ, Runtimes
from .sendqueue import SendQueues
from .skeleton import Ack, Ctx, check_rate, socket_event

log = logging.getLogger("widget.relay")


def _last_seq(value: Any, what: str) -> int:
    last_seq = value or 0
    if not isinstance(last_seq, int) or isinstance(last_seq, bool) or not 0 <= last_seq <= MAX_SEQ:
        raise ProtocolError(P.ErrorCode.BAD_REQUEST, what)
    return last_seq


@dataclass(frozen=True)
class MembershipContext:
    """What socket membership uses."""

    config: RelayConfig
    store: S.Store
    runtimes: Runtimes
    sio: RelaySocketServer
    #: this relay process's instance id
    instance: str
    spawn: Spawn
    signer: TokenSigner
    limiters: Limiters
    switches: Switches
    send_queues: SendQueues
    #: which socket runs a call, and the replays
    dispatch: CallDispatch
    #: close a turn whose relay died before a socket joins (``Lifecycle.recover``)
    recover: Callable[[dict[str, Any]], Awaitable[bool]]
    #: socket -> client address (the join rate limit is per address)
    addresses: dict[str, str]
    #: sockets of this process whose leaving the store is still recording (``Hub.leaving``)
    leaving: dict[str, asyncio.Event]


class Membership:
    """Which conversation each socket of this process joined, and what it is sent on joining."""

    def __init__(self, ctx: MembershipContext) -> None:
        self._ctx = ctx
        #: Engine.IO connections whose socket has not joined yet -> the timer that closes them. Keyed by the
        #: connection, not the Socket.IO session: a namespace connected again on the same connection does not
        #: start the budget again.
        self._unjoined: dict[str, asyncio.TimerHandle] = {}
        #: sockets closed for not joining in time (since start)
        self.closed_unjoined = 0
        #: a socket's replays go one at a time
        self._replaying: dict[str, asyncio.Lock] = {}

    async def on_connect(self, sid: str, environ: dict[str, Any], auth: Any = None) -> bool:
        """A socket connected: remember its address (the join rate limit is per address) and close it if
        it has not joined a conversation within ``unjoined_socket_timeout_s``."""
        deps = self._ctx
        client = (environ.get("asgi.scope") or {}).get("client")
        deps.addresses[sid] = str(client[0]) if client else str(environ.get("REMOTE_ADDR") or "?")
        deps.send_queues.bound(sid)
        self._start_budget(sid)
        return True

    def _start_budget(self, sid: str) -> None:
        """Start the join budget of the socket's Engine.IO connection, unless it runs already (a namespace
        connected again on the same connection counts against the budget it had)."""
        timeout = self._ctx.config.unjoined_socket_timeout_s
        eio = self._ctx.sio.manager.eio_sid_from_sid(sid, "/")
        if timeout > 0 and eio is not None and eio not in self._unjoined:
            self._unjoined[eio] = asyncio.get_running_loop().call_later(timeout, self._close_unjoined, eio)

    def _close_unjoined(self, eio: str) -> None:
        self._unjoined.pop(eio, None)
        sid = self._ctx.sio.manager.sid_from_eio_sid(eio, "/")
        if sid is not None and sid in self._ctx.runtimes.clients:
            return
        if eio in self._ctx.sio.eio.sockets:
            self.closed_unjoined += 1
            # The Engine.IO connection itself: a namespace disconnect alone leaves it (and its descriptor) to a
            # client that answers pings and connects the namespace again.
            self._ctx.spawn(self._ctx.sio.close_connection(eio, sid))

    def connection_closed(self, eio: str) -> None:
        """An Engine.IO connection ended: its join budget with it."""
        timer = self._unjoined.pop(eio, None)
        if timer is not None:
            timer.cancel()

    async def on_disconnect(self, sid: str, *args: Any) -> None:
        """A socket left: record it in the store (a call it held goes to the next active client)."""
        deps = self._ctx
        deps.addresses.pop(sid, None)
        deps.limiters.replay.forget(sid)
        deps.limiters.cancel.forget(sid)
        deps.limiters.refused.forget(sid)
        self._replaying.pop(sid, None)
        if deps.sio.manager.eio_sid_from_sid(sid, "/") in deps.sio.eio.sockets:
            self._start_budget(sid)  # only the namespace left: the connection must join again in time
        if deps.runtimes.leave(sid) is not None:
            recorded = deps.leaving[sid] = asyncio.Event()
            try:
                await deps.store.remove_member(sid)
            except Exception:  # noqa: BLE001 - the store is down: the socket's row dies with this instance
                log.warning("could not record that socket %s left", sid)
            finally:
                deps.leaving.pop(sid, None)
                recorded.set()

    @socket_event(P.Event.JOIN, joined=False)
    async def join(self, ctx: Ctx, data: Any) -> Ack:
        """Join a conversation: the ack (with the calls this socket is to run), then its state and the
        events after ``last_seq``, then live events."""
        deps = self._ctx
        sid = ctx.sid
        deps.switches.refuse_new_work()
        check_rate(
            deps.limiters.join,
            deps.addresses.get(sid, "?"),
            "Too many joins from this address; wait a moment and join again.",
        )
        if not isinstance(data, dict):
            raise ProtocolError(P.ErrorCode.BAD_REQUEST, "join expects {token, version, last_seq}")
        version = data.get("version")
        if version != P.PROTOCOL_VERSION:
            raise ProtocolError(
                P.ErrorCode.VERSION_MISMATCH,
                f"This relay speaks protocol version {P.PROTOCOL_VERSION}; the client sent version {version!r}. "
                "Reload the page to update the widget.",
            )
        cid = deps.signer.verify(data.get("token"))
        last_seq = _last_seq(data.get("last_seq"), "last_seq must be a non-negative integer or null")
        conv = await deps.store.get_conversation(cid)
        if conv is None:
            raise ProtocolError(P.ErrorCode.NOT_FOUND, "The conversation no longer exists.")
        await deps.recover(conv)
        old = deps.runtimes.clients.get(sid)
        if old is not None:  # a socket re-joining: it gets its replay before live events again
            await deps.sio.leave_room(sid, old)
            if old != cid:
                # One conversation per socket: it leaves the first (no more of its events, calls or role).
                deps.runtimes.leave(sid)
                await deps.store.release_active(old, sid)
        rt = deps.runtimes.rt(cid)
        async with rt.lock:
            fresh = not rt.sids
            rt.sids.add(sid)
            rt.ready.discard(sid)
            deps.runtimes.clients[sid] = cid
            await deps.store.add_member(cid, sid, deps.instance)
            try:
                previous = await deps.store.set_active(cid, sid)
            except KeyError:
                raise ProtocolError(P.ErrorCode.NOT_FOUND, "The conversation no longer exists.") from None
            conv = await deps.store.get_conversation(cid)
            if conv is None:
                raise ProtocolError(P.ErrorCode.NOT_FOUND, "The conversation no longer exists.")
            seq = conv["seq"]
            if fresh:
                rt.seen_seq = max(rt.seen_seq, seq)
            pending = await deps.dispatch.pending_for(rt, cid, sid)
        if previous is not None and previous != sid:
            await deps.sio.emit(P.Event.CLIENT_ROLE, {"active": False, "conversation_id": cid}, to=previous)
        timer = self._unjoined.pop(deps.sio.manager.eio_sid_from_sid(sid, "/") or "", None)
        if timer is not None:
            timer.cancel()
        # Runs after this handler returns, i.e. after the ack is queued: ack, state, replay.
        deps.spawn(self.finish_join(sid, cid, last_seq, seq))
        return P.ok(conversation_id=cid, seq=seq, active=True, client_id=sid, pending_calls=pending)

    async def finish_join(self, sid: str, cid: str, last_seq: int, ack_seq: int) -> None:
        """After the join ack: the state, the events after ``last_seq``, ``replay.done``, then live
        events. The bulk of the replay goes at the socket's pace without holding the conversation; what
        was stored meanwhile follows under its lock, and the socket enters the room."""
        deps = self._ctx
        with deps.runtimes.using(cid) as rt:
            if deps.runtimes.clients.get(sid) != cid:
                return
            try:
                doc = await deps.store.get_state(cid)
            except KeyError:
                return
            await self._emit_state(sid, doc)
            # Events emitted after the join ack are live for this client: a call among them runs here
            # if still pending; those before went with the ack's pending_calls.
            sent = await deps.dispatch.replay_paged(cid, sid, last_seq, run_after=ack_seq)
            if sent is None:
                return
            async with rt.lock:
                if deps.runtimes.clients.get(sid) != cid:
                    return
                events = await deps.store.events_after(cid, sent)
                await deps.dispatch.emit_stored(cid, sid, events, run_after=ack_seq)
                sent = events[-1][0] if events else sent
                try:
                    await deps.sio.enter_room(sid, cid)
                except KeyError:  # the socket left during the catch-up (Socket.IO forgets it before on_disconnect)
                    return
                rt.ready.add(sid)
                if deps.store.shared:
                    # Another process may have emitted an event after the read above and before this socket
                    # entered the room: read again (what it already has, it drops by seq).
                    more = await deps.store.events_after(cid, sent)
                    await deps.dispatch.emit_stored(cid, sid, more, run_after=ack_seq)
                    sent = more[-1][0] if more else sent
                await deps.sio.emit(P.Event.REPLAY_DONE, {"last_seq": sent}, to=sid, ignore_queue=True)

    async def _emit_state(self, sid: str, doc: dict[str, Any]) -> None:
        root = doc.get(P.STATE_ROOT, {})
        await self._ctx.sio.emit(
            P.Event.STATE,
            {"functions": root.get("functions", {}), "context": root.get("context", {})},
            to=sid,
            ignore_queue=True,
        )

    async def state_after_activate(self, sid: str, cid: str) -> None:
        """After an activate ack: the stored state, so the new active client can put its own functions
        back (another tab may have written them meanwhile)."""
        deps = self._ctx
        with deps.runtimes.using(cid) as rt:
            async with rt.lock:
                if deps.runtimes.clients.get(sid) != cid:
                    return
                try:
                    doc = await deps.store.get_state(cid)
                except KeyError:
                    return
                await self._emit_state(sid, doc)

    @socket_event(P.Event.ACTIVATE)
    async def activate(self, ctx: Ctx, data: Any) -> Ack:
        """This socket becomes the conversation's active client (and gets the calls it is to run)."""
        deps = self._ctx
        rt = ctx.conv_rt
        async with rt.lock:
            previous = await deps.store.set_active(ctx.cid, ctx.sid)
            pending = await deps.dispatch.pending_for(rt, ctx.cid, ctx.sid)
        if previous is not None and previous != ctx.sid:
            await deps.sio.emit(P.Event.CLIENT_ROLE, {"active": False, "conversation_id": ctx.cid}, to=previous)
        deps.spawn(self.state_after_activate(ctx.sid, ctx.cid))  # runs after the ack is queued
        return P.ok(active=True, pending_calls=pending)

    @socket_event(P.Event.REPLAY)
    async def replay(self, ctx: Ctx, data: Any) -> Ack:
        """Send the stored events after ``last_seq`` to this socket again (every ``function_call.begin``
        copy with ``run: false``), then ack with the current ``seq`` and the pending calls this socket
        is to run."""
        deps = self._ctx
        last_seq = _last_seq(
            data.get("last_seq") if isinstance(data, dict) else None, "replay expects {last_seq: integer}"
        )
        check_rate(deps.limiters.replay, ctx.sid, "Too many replays from this socket; wait a moment.")
        lock = self._replaying.setdefault(ctx.sid, asyncio.Lock())
        async with lock:  # one replay of a socket at a time: what it holds in memory is one page
            await deps.dispatch.replay_paged(ctx.cid, ctx.sid, last_seq, replayed=True)
        conv = await deps.store.get_conversation(ctx.cid)
        return P.ok(
            seq=conv["seq"] if conv else last_seq, pending_calls=await deps.dispatch.dispatched_to(ctx.cid, ctx.sid)
        )

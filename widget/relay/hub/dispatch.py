"""Call dispatch: which socket runs a page call (``run: true``), getting its answer back, and the
relay's own config functions.

A call runs at most once: it is dispatched to one socket (the active client's, on whichever process it
is joined), recorded in the store; every copy of its ``function_call.begin`` another socket gets says
``run: false``, and a socket gets the same ``run`` on every path (live, join replay, replay, catch-up).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from ... import protocol as P
from ...protocol import CallState
from ..config import RelayConfig, ToolConfig
from ..mcp.servers import McpTool, ToolHost
from ..sio import RelaySocketServer
from ..storage import store as S
from ..tools import ToolError
from .context import EmitEvent, Switches
from .prompts import RoundInfo
from .runtime import CALL_POLL_S, ConvRuntime, Runtimes
from .sendqueue import SendQueues

log = logging.getLogger("widget.relay")

Event = tuple[int, str, dict[str, Any]]
#: Stored events read at a time for a replay (a replay of a long log holds one page in memory).
REPLAY_PAGE = 200


@dataclass(frozen=True)
class DispatchContext:
    """What call dispatch uses."""

    config: RelayConfig
    store: S.Store
    runtimes: Runtimes
    sio: RelaySocketServer
    send_queues: SendQueues
    emit_event: EmitEvent
    switches: Switches
    #: sockets of this process whose leaving the store is still recording (``Hub.leaving``)
    leaving: dict[str, asyncio.Event]


class CallDispatch:
    """The hub's call dispatch (one per hub)."""

    def __init__(self, ctx: DispatchContext) -> None:
        self._ctx = ctx
        #: what an MCP tool's call uses (``McpTool.run``)
        self.tool_host = ToolHost(ctx.store, ctx.emit_event, self._expect_call, self._await_unannounced,
                                  lambda: ctx.switches.closing)

    def _expect_call(self, cid: str, call_id: str) -> None:
        self._ctx.runtimes.rt(cid).call_events[call_id] = asyncio.Event()

    async def _await_unannounced(self, cid: str, c: dict[str, Any]) -> tuple[dict[str, Any], float]:
        return await self.await_call(cid, self._ctx.runtimes.rt(cid), c, announce=False)

    async def send_call(self, rt: ConvRuntime, cid: str, payload: dict[str, Any]) -> None:
        """Emit a stored ``function_call.begin`` live (caller holds ``rt.lock``): with ``run: true`` to
        the socket it is dispatched to, ``run: false`` to the others. A socket of this process still
        replaying its join gets it from that replay instead."""
        ctx = self._ctx
        owner = await ctx.store.claim_call(cid, payload["id"])
        local = owner is not None and ctx.runtimes.clients.get(owner) == cid
        if owner is not None and (not local or owner in rt.ready):
            await ctx.sio.emit(P.Event.FUNCTION_CALL_BEGIN, {**payload, "run": True}, to=owner, ignore_queue=local)
        else:
            owner = None
        await ctx.sio.emit(P.Event.FUNCTION_CALL_BEGIN, payload, room=cid, skip_sid=owner)

    async def pending_for(self, rt: ConvRuntime, cid: str, sid: str) -> list[dict[str, Any]]:
        """Pending calls this (active) socket should run: not those already sent to another socket
        that is still joined on a live relay (a call runs at most once)."""
        ctx = self._ctx
        out = []
        for c in await ctx.store.pending_calls(cid):
            leaving = ctx.leaving.get(c["dispatched_to"])
            if leaving is not None:
                # The socket holding the call has left this process, but the store does not know yet
                # (a reload's new socket can join before that write commits): the claim below reads
                # the store's members, so let the write land first or the call would stay with a
                # socket that is gone.
                await leaving.wait()
            if c["dispatched_to"] != sid and await ctx.store.claim_call(cid, c["id"], sid) != sid:
                continue
            out.append(
                {"id": c["id"], "name": c["name"], "arguments": c["arguments"], "seq": c["seq"], "kind": c["kind"]}
            )
        return out

    async def run_flag(self, cid: str, call_id: str, sid: str, active: str | None) -> bool:
        """Whether a copy of a call's ``function_call.begin`` sent to ``sid`` says ``run: true``: the
        call is pending and dispatched to that socket (claimed for it when it is the active client and
        no other live socket holds the call). Every copy a socket gets says the same, whichever path
        (live, join replay, replay, catch-up) it takes."""
        store = self._ctx.store
        call = await store.get_call(cid, call_id)
        if call is None or call["status"] != CallState.PENDING:
            return False
        if call["dispatched_to"] == sid:
            return True
        return sid == active and await store.claim_call(cid, call_id, sid) == sid

    async def emit_stored(
        self,
        cid: str,
        sid: str,
        events: list[Event],
        *,
        run_after: int = 0,
        active: Any = ...,
        replayed: bool = False,
        paced: bool = False,
    ) -> bool:
        """Send stored events to one socket of this process, a call's ``run`` decided per socket for
        those after ``run_after`` (those up to it went with the join ack's ``pending_calls``);
        ``replayed``: copies the socket asked for again, which never say ``run: true``. ``paced``: wait
        while the socket has not read what it was sent (False: the socket is gone, nothing more sent)."""
        ctx = self._ctx
        if active is ... and not replayed:
            conv = await ctx.store.get_conversation(cid)
            active = conv["active_sid"] if conv else None
        limit = ctx.config.socket_send_queue_bytes
        for seq, name, payload in events:
            if paced and limit and ctx.send_queues.queued(sid) > limit // 4 and not await ctx.send_queues.drained(sid):
                return False
            if (
                name == P.Event.FUNCTION_CALL_BEGIN
                and not replayed
                and seq > run_after
                and await self.run_flag(cid, payload["id"], sid, active)
            ):
                payload = {**payload, "run": True}
            await ctx.sio.emit(name, payload, to=sid, ignore_queue=True)
        return True

    async def replay_paged(
        self, cid: str, sid: str, after: int, *, run_after: int = 0, replayed: bool = False
    ) -> int | None:
        """Send the stored events after ``after`` to one socket, ``REPLAY_PAGE`` at a time and at the pace
        it reads them (see ``emit_stored``); the last seq sent, or None when the socket went away."""
        while True:
            events = await self._ctx.store.events_after(cid, after, REPLAY_PAGE)
            if not events:
                return after
            if not await self.emit_stored(cid, sid, events, run_after=run_after, replayed=replayed, paced=True):
                return None
            after = events[-1][0]
            if len(events) < REPLAY_PAGE:
                return after

    async def dispatched_to(self, cid: str, sid: str) -> list[dict[str, Any]]:
        """The pending calls already dispatched to ``sid`` (none is claimed for it here)."""
        return [
            {"id": c["id"], "name": c["name"], "arguments": c["arguments"], "seq": c["seq"], "kind": c["kind"]}
            for c in await self._ctx.store.pending_calls(cid)
            if c["dispatched_to"] == sid
        ]

    async def await_call(
        self, cid: str, rt: ConvRuntime, c: dict[str, Any], announce: bool = True
    ) -> tuple[dict[str, Any], float]:
        """Wait for a call's response through the store (the in-process Event only wakes us early);
        ``announce``: emit its ``function_call.end`` (an MCP tool's confirmation emits its own)."""
        ctx = self._ctx
        config = ctx.config
        timeout = config.tool_call_timeout_s if c["kind"] == P.Kind.TOOL else config.function_call_timeout_s
        t0 = time.monotonic()
        deadline = t0 + timeout
        ev = rt.call_events.setdefault(c["id"], asyncio.Event())
        try:
            while True:
                row = await ctx.store.get_call(cid, c["id"])
                if row is None:
                    raise KeyError(cid)
                if row["status"] != CallState.PENDING:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    await ctx.store.finish_call(
                        cid, c["id"], CallState.TIMED_OUT, error=f"The page did not answer within {timeout:g} s."
                    )
                    continue
                try:
                    await asyncio.wait_for(ev.wait(), min(remaining, CALL_POLL_S))
                except TimeoutError:
                    pass
        finally:
            rt.call_events.pop(c["id"], None)
        ms = round((time.monotonic() - t0) * 1000, 1)
        end: dict[str, Any] = {"id": c["id"], "name": c["name"]}
        if row["status"] == CallState.ANSWERED and row["error"] is None:
            end.update(status=P.CallStatus.SUCCESS, result=row["result"])
        else:
            end.update(status=P.CallStatus.ERROR, error=row["error"] or "The function failed.")
        end.update(duration_ms=row["duration_ms"], total_ms=row["total_ms"])
        if row["status"] == CallState.CANCELLED:
            raise asyncio.CancelledError  # the turn is being cancelled; its abort emits the end events
        if announce:
            await ctx.emit_event(cid, P.Event.FUNCTION_CALL_END, end)
        return end, ms

    async def run_relay_tool(self, cid: str, c: dict[str, Any], info: RoundInfo) -> tuple[dict[str, Any], float]:
        """Run a relay config function (§8) with its checked arguments, within the tool timeout; an
        exception becomes an error result for the model (a ``ToolError``'s message, otherwise only
        the exception's type — the traceback goes to the log)."""
        if isinstance(c["tool"], McpTool):  # an MCP server's tool has its own call path
            return await c["tool"].run(self.tool_host, cid, c)
        tool: ToolConfig = c["tool"]
        func = tool.func
        assert func is not None
        timeout = self._ctx.config.tool_call_timeout_s
        context = {
            "question": info.question,
            "page": copy.deepcopy(info.page),
            "conversation_id": cid,
            "app_id": info.app_id,
        }
        args = dict(c["arguments"])
        t0 = time.monotonic()
        end: dict[str, Any] = {"id": c["id"], "name": c["name"]}

        async def call() -> Any:
            if inspect.iscoroutinefunction(func):
                result = await func(args, context)
            else:
                result = await asyncio.to_thread(func, args, context)
            if inspect.isawaitable(result):
                result = await result
            return result

        try:
            result = await asyncio.wait_for(call(), timeout)
            try:
                result = json.loads(json.dumps(result, ensure_ascii=False))
            except (TypeError, ValueError):
                raise ToolError("the tool returned a value that is not JSON") from None
            end.update(status=P.CallStatus.SUCCESS, result=result)
        except TimeoutError:
            end.update(
                status=P.CallStatus.ERROR, error=f"The tool did not answer within {timeout:g} s.", timed_out=True
            )
        except ToolError as exc:
            end.update(status=P.CallStatus.ERROR, error=str(exc) or "The tool failed.")
        except Exception as exc:
            log.exception("relay tool %r of app %r failed", c["name"], info.app_id)
            end.update(status=P.CallStatus.ERROR, error=f"The tool failed on the server ({type(exc).__name__}).")
        ms = round((time.monotonic() - t0) * 1000, 1)
        end.update(duration_ms=ms, total_ms=ms)
        return end, ms

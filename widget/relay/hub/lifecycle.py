"""Conversation-level operations: cancelling a turn, recovering one whose relay died, dropping a
deleted conversation."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from ... import protocol as P
from ...protocol import CallState, ConversationStatus, Kind, Role, TurnErrorCode, TurnStatus, UserInputReason
from ..sio import RelaySocketServer
from ..storage import store as S
from .context import EmitLocked
from .rounds import tool_message
from .runtime import LIVE_STATUSES, ConvRuntime, Runtimes, new_id

log = logging.getLogger("widget.relay")

#: How long a cancel waits for another relay process to end the turn it runs. Clients wait 10 s for the cancel's
#: acknowledgement; 5 s was not always enough for a loaded runner to write the turn's end (a cancel that stopped
#: the turn then answered ``cancelled: false``), so this waits as long as it can while still answering in time.
REMOTE_CANCEL_WAIT_S = 8.0

NEVER_SENT = "The relay restarted before the call was sent to the page."
#: A call the relay itself was running (an MCP tool) when its relay stopped.
CUT_OFF = "Cancelled: the relay restarted during the call."
#: A call of an interrupted turn still pending when the reader moves on (a new message, regenerate).
ABANDONED = "Cancelled: the interrupted turn it belonged to was not retried."


@dataclass(frozen=True)
class LifecycleContext:
    """What the conversation-level operations use."""

    store: S.Store
    runtimes: Runtimes
    sio: RelaySocketServer
    #: this relay process's instance id
    instance: str
    emit_locked: EmitLocked


class Lifecycle:
    """The hub's conversation-level operations (one per hub)."""

    def __init__(self, ctx: LifecycleContext) -> None:
        self._ctx = ctx

    async def disconnect_conversation(self, cid: str, everywhere: bool = True) -> None:
        """Drop a deleted conversation's sockets and turn (on every process sharing the store)."""
        ctx = self._ctx
        if everywhere and ctx.store.shared:
            try:
                await ctx.store.signal({"t": "deleted", "c": cid})
            except Exception:  # noqa: BLE001 - their sockets fail on their next write instead
                log.warning("could not tell the other relay processes that %s was deleted", cid)
        rt = ctx.runtimes.convs.get(cid)
        if rt is None:
            return
        if rt.turn and not rt.turn.done():
            rt.turn.cancel()
        for sid in list(rt.sids):
            ctx.runtimes.clients.pop(sid, None)
            await ctx.sio.disconnect(sid, ignore_queue=True)
        ctx.runtimes.convs.pop(cid, None)

    async def cancel_turn(self, cid: str) -> bool:
        """Stop the conversation's turn (wherever it runs) or its wait for ask-user answers."""
        with self._ctx.runtimes.using(cid):
            return await self._cancel_turn(cid)

    async def _cancel_turn(self, cid: str) -> bool:
        ctx = self._ctx
        rt = ctx.runtimes.rt(cid)
        task = rt.turn
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return True
        conv = await ctx.store.get_conversation(cid)
        if conv is not None and conv["status"] in LIVE_STATUSES and conv["runner"] != ctx.instance:
            if not await self.runner_alive(conv):
                return await self.recover(conv)
            # The turn runs in another process: ask it (through the store) and wait for the turn to end.
            await ctx.store.signal({"t": "cancel", "c": cid, "turn": conv["turn_id"]})
            deadline = time.monotonic() + REMOTE_CANCEL_WAIT_S
            while time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                now = await ctx.store.get_conversation(cid)
                if now is None or now["status"] not in LIVE_STATUSES or now["turn_id"] != conv["turn_id"]:
                    return True
            return False
        async with rt.lock:
            conv = await ctx.store.get_conversation(cid)
            if conv is None or conv["status"] != ConversationStatus.WAITING_FOR_ASK_USER:
                return False
            if not await ctx.store.claim_status(
                cid, [ConversationStatus.WAITING_FOR_ASK_USER], status=ConversationStatus.IDLE
            ):
                return False  # answered or cancelled through another process meanwhile
            await ctx.store.cancel_prompts(cid)
            await ctx.emit_locked(
                rt,
                cid,
                P.Event.COMPLETION_FINISHED,
                {"turn_id": conv["turn_id"], "status": TurnStatus.CANCELLED},
                conversation={"status": ConversationStatus.IDLE},
            )
            await ctx.emit_locked(rt, cid, P.Event.USER_INPUT, {"reason": UserInputReason.MESSAGE})
            return True

    async def close_leftover_calls(self, rt: ConvRuntime, cid: str) -> None:
        """End the calls an interrupted turn left pending (caller holds ``rt.lock``): the reader moved on
        without retrying it, so their results are no longer wanted."""
        ctx = self._ctx
        for c in await ctx.store.pending_calls(cid):
            if await ctx.store.finish_call(cid, c["id"], CallState.CANCELLED, error=ABANDONED):
                end = {
                    "id": c["id"],
                    "name": c["name"],
                    "status": P.CallStatus.ERROR,
                    "error": ABANDONED,
                    "duration_ms": None,
                    "total_ms": None,
                }
                await ctx.emit_locked(rt, cid, P.Event.FUNCTION_CALL_END, end)

    async def runner_alive(self, conv: dict[str, Any]) -> bool:
        """Whether the relay instance running the conversation's turn is alive (this process: its
        task is running; another: its heartbeat is recent)."""
        ctx = self._ctx
        runner = conv.get("runner")
        if runner == ctx.instance:
            rt = ctx.runtimes.convs.get(conv["id"])
            return rt is not None and rt.turn is not None and not rt.turn.done()
        if runner is None:
            return False
        return await ctx.store.instance_alive(runner)

    async def recover(self, conv: dict[str, Any]) -> bool:
        """A turn whose relay process died is marked failed when the conversation is next opened (or,
        with a shared store, when a process holding one of its sockets notices)."""
        if conv["status"] not in LIVE_STATUSES:
            return False
        with self._ctx.runtimes.using(conv["id"]):
            return await self._recover(conv["id"])

    async def _recover(self, cid: str) -> bool:
        ctx = self._ctx
        store = ctx.store
        rt = ctx.runtimes.rt(cid)
        if rt.turn is not None and not rt.turn.done():
            return False
        async with rt.lock:
            conv2 = await store.get_conversation(cid)
            if conv2 is None or conv2["status"] not in LIVE_STATUSES or await self.runner_alive(conv2):
                return False
            # Several processes may notice at once: the one that takes the turn over closes it.
            if conv2["runner"] != ctx.instance and not await store.claim_status(
                cid, LIVE_STATUSES, runner_was=conv2["runner"], runner=ctx.instance
            ):
                return False
            turn_id = conv2["turn_id"]
            # Reconstruct the message that was streaming, if any, and close it.
            events = await store.events_after(cid, conv2["msg_seq"])
            message_id: str | None = None
            text: list[str] = []
            calls: list[dict[str, Any]] = []
            ended: set[str] = set()
            for _s, name, p in events:
                if name == P.Event.COMPLETION_STARTED:
                    message_id, text, calls = p.get("message_id"), [], []
                elif name == P.Event.COMPLETION_STREAM:
                    text.append(p.get("delta") or "")
                elif name == P.Event.FUNCTION_CALL_BEGIN:
                    calls.append({"id": p["id"], "name": p["name"], "arguments": p.get("arguments")})
                elif name == P.Event.FUNCTION_CALL_END:
                    ended.add(p["id"])
            # A call sent to the page stays pending: the page may have run it and will resend its answer
            # (stored, and used by a retry of the turn). One never sent cannot have run: it is cancelled.
            begun = {c["id"] for c in calls}
            tools = []
            for c in await store.pending_calls(cid):
                if c["seq"] or c["id"] in begun:
                    continue
                if await store.finish_call(cid, c["id"], CallState.CANCELLED, error=NEVER_SENT):
                    end = {
                        "id": c["id"],
                        "name": c["name"],
                        "status": P.CallStatus.ERROR,
                        "error": NEVER_SENT,
                        "duration_ms": None,
                        "total_ms": None,
                    }
                    await ctx.emit_locked(rt, cid, P.Event.FUNCTION_CALL_END, end)
                    tools.append(tool_message(c["id"], c["name"], c.get("kind", Kind.FUNCTION), end))
            # A call the relay ran itself (an MCP tool) is stored only when it ends: one begun and neither ended
            # nor stored was cut off with its relay. Its pill ends; Retry tells the model it did not run.
            for c in calls:
                if c["id"] not in ended and await store.get_call(cid, c["id"]) is None:
                    end = {"id": c["id"], "name": c["name"], "status": P.CallStatus.ERROR, "error": CUT_OFF,
                           "duration_ms": None, "total_ms": None}
                    await ctx.emit_locked(rt, cid, P.Event.FUNCTION_CALL_END, end)
            if message_id is not None:
                msg = {"id": message_id, "role": Role.ASSISTANT, "content": "".join(text), "created_at": time.time()}
                if calls:
                    msg["function_calls"] = calls
                await ctx.emit_locked(
                    rt, cid, P.Event.COMPLETION_ENDED, {"message": msg, "tool_messages": tools}, messages=[msg, *tools]
                )
            err = {
                "id": new_id("m_"),
                "role": Role.ERROR,
                "content": "The answer was interrupted because the relay restarted. Try again.",
                "code": TurnErrorCode.TURN_INTERRUPTED,
                "retryable": True,
                "created_at": time.time(),
            }
            await ctx.emit_locked(rt, cid, P.Event.MESSAGE, {"message": err}, messages=[err])
            await ctx.emit_locked(
                rt,
                cid,
                P.Event.COMPLETION_FINISHED,
                {"turn_id": turn_id, "status": TurnStatus.FAILED},
                conversation={"status": ConversationStatus.FAILED},
            )
            await ctx.emit_locked(rt, cid, P.Event.USER_INPUT, {"reason": UserInputReason.MESSAGE})
            return True

"""Socket writes: state patches, user messages, retry/regenerate, function responses, action outcomes,
cancel. Each is idempotent by its ``idempotency_key`` (the skeleton answers a repeat)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ... import protocol as P
from ...core.limits import check_state
from ...core.tools import check_tool_arguments
from ...errors import ProtocolError, StateLimitError
from ...protocol import CallState, ConversationStatus, Event, Role
from ..config import RelayConfig
from ..storage import store as S
from .context import EmitLocked, Limiters, Spawn, Switches
from .lifecycle import Lifecycle
from .patching import PatchFailed, apply_patch_atomic
from .resume import ResumePlan, resume_plan
from .runtime import BUSY_STATUSES, IDLE_STATUSES, ConvRuntime, new_id
from .skeleton import Ack, Ctx, check_rate, socket_event
from .turns import TurnRunner

BUSY_MESSAGE = "A turn is running or waiting on the reader; wait or cancel it."


def _busy(conv: dict[str, Any], rt: ConvRuntime) -> bool:
    return conv["status"] in BUSY_STATUSES or (rt.turn is not None and not rt.turn.done())


def _check_room(config: RelayConfig, conv: dict[str, Any]) -> None:
    """A new turn needs room in the conversation's event log (``max_events_per_conversation``)."""
    cap = config.max_events_per_conversation
    if cap and conv["seq"] >= cap:
        raise ProtocolError(
            P.ErrorCode.CONVERSATION_FULL,
            f"This conversation holds its maximum of {cap} events; start a new conversation.",
        )


@dataclass(frozen=True)
class WritesContext:
    """What the socket writes use."""

    config: RelayConfig
    store: S.Store
    #: this relay process's instance id (it runs the turns started here)
    instance: str
    spawn: Spawn
    limiters: Limiters
    switches: Switches
    emit_locked: EmitLocked
    #: cancel, recovery, the calls an interrupted turn left
    recovery: Lifecycle
    #: runs the turns the writes start
    turns: TurnRunner


class Writes:
    """The conversation-changing socket events (one per hub)."""

    def __init__(self, ctx: WritesContext) -> None:
        self._ctx = ctx

    @socket_event(
        P.Event.STATE_PATCH, shape="state_patch expects {patch, idempotency_key}", idempotent=True, locked=True
    )
    async def state_patch(self, ctx: Ctx, data: dict[str, Any]) -> Ack:
        """Apply an RFC 6902 patch to the state, all or nothing (active client only)."""
        check_rate(self._ctx.limiters.patch, ctx.cid, "Too many state patches in this conversation; wait a moment.")
        patch = data.get("patch")

        def patched(doc: dict[str, Any]) -> dict[str, Any]:
            try:
                new = apply_patch_atomic(doc, patch)
                check_state(new)
            except PatchFailed as exc:
                raise ProtocolError(P.ErrorCode.PATCH_FAILED, str(exc)) from None
            except StateLimitError as exc:
                raise ProtocolError(exc.code, str(exc)) from None
            return new

        ack = P.ok()
        try:  # read, patch and write in one transaction: no lost update across processes
            stored = await self._ctx.store.update_state(ctx.cid, patched, ctx.idempotency(ack), active_sid=ctx.sid)
        except S.NotActive:
            raise ProtocolError(
                P.ErrorCode.NOT_ACTIVE, "Another tab is the active client; send activate to use this one."
            ) from None
        return stored if stored is not None else ack

    @socket_event(
        P.Event.USER_MESSAGE, shape="user_message expects {text, idempotency_key}", idempotent=True, locked=True
    )
    async def user_message(self, ctx: Ctx, data: dict[str, Any]) -> Ack:
        """Store the reader's message and start a turn answering it."""
        deps = self._ctx
        deps.switches.refuse_new_work()
        cid, rt = ctx.cid, ctx.conv_rt
        text = data.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ProtocolError(P.ErrorCode.BAD_REQUEST, "text must be a non-empty string")
        if len(text) > P.MAX_USER_MESSAGE_CHARS:
            raise ProtocolError(
                P.ErrorCode.MESSAGE_TOO_LONG,
                f"A message may have at most {P.MAX_USER_MESSAGE_CHARS} characters; this one has {len(text)}.",
            )
        conv = await deps.store.get_conversation(cid)
        if conv is None:
            raise ProtocolError(P.ErrorCode.NOT_FOUND, "The conversation no longer exists.")
        if _busy(conv, rt):
            raise ProtocolError(P.ErrorCode.BUSY, BUSY_MESSAGE)
        _check_room(deps.config, conv)
        check_rate(deps.limiters.message, cid, "Too many messages; wait a moment.")
        if conv["status"] == ConversationStatus.FAILED:
            await deps.recovery.close_leftover_calls(rt, cid)
        message = {"id": new_id("m_"), "role": Role.USER, "content": text, "created_at": time.time()}
        turn_id = new_id("t_")
        ack = P.ok(message_id=message["id"])
        try:  # conditional: a message sent through another process at the same moment loses
            await deps.emit_locked(
                rt,
                cid,
                P.Event.MESSAGE,
                {"message": message},
                messages=[message],
                conversation={
                    "status": ConversationStatus.RUNNING,
                    "turn_id": turn_id,
                    "iteration": 0,
                    "runner": deps.instance,
                },
                idempotency=ctx.idempotency(ack),
                require_status=IDLE_STATUSES,
            )
        except S.StatusConflict:
            raise ProtocolError(P.ErrorCode.BUSY, BUSY_MESSAGE) from None
        rt.turn = deps.spawn(deps.turns.run_turn(cid, turn_id, 0))
        return ack

    async def _recover_first(self, ctx: Ctx) -> None:
        """A turn whose relay died becomes failed (and retryable) before retry/regenerate look at it."""
        conv = await self._ctx.store.get_conversation(ctx.cid)
        if conv is not None:
            await self._ctx.recovery.recover(conv)

    @socket_event(
        P.Event.RETRY, shape="retry expects {idempotency_key}", idempotent=True, locked=True, before=_recover_first
    )
    async def retry(self, ctx: Ctx, data: dict[str, Any]) -> Ack:
        """The failed turn goes on from its last completed round."""
        return await self._redo(ctx, regenerate=False)

    @socket_event(
        P.Event.REGENERATE,
        shape="regenerate expects {idempotency_key}",
        idempotent=True,
        locked=True,
        before=_recover_first,
    )
    async def regenerate(self, ctx: Ctx, data: dict[str, Any]) -> Ack:
        """A new answer to the last user message."""
        return await self._redo(ctx, regenerate=True)

    async def _redo(self, ctx: Ctx, regenerate: bool) -> Ack:
        """Both withdraw the messages they replace with one ``messages.withdrawn`` event, stored with
        the new status and the ack, then run the turn."""
        deps = self._ctx
        deps.switches.refuse_new_work()
        cid, rt = ctx.cid, ctx.conv_rt
        op = P.Event.REGENERATE if regenerate else P.Event.RETRY
        snap = await deps.store.snapshot(cid)
        if snap is None:
            raise ProtocolError(P.ErrorCode.NOT_FOUND, "The conversation no longer exists.")
        conv, messages = snap
        if _busy(conv, rt):
            raise ProtocolError(P.ErrorCode.BUSY, BUSY_MESSAGE)
        _check_room(deps.config, conv)
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        if not users:
            raise ProtocolError(P.ErrorCode.NOTHING_TO_RETRY, "There is no user message to answer yet.")
        after = messages[users[-1] + 1 :]
        plan: ResumePlan | None = None
        if regenerate:
            turn_id, iteration = new_id("t_"), 0
            withdraw = after
        else:
            if conv["status"] != ConversationStatus.FAILED or not conv["turn_id"]:
                raise ProtocolError(
                    P.ErrorCode.NOTHING_TO_RETRY, "The last turn did not fail; send regenerate for a new answer."
                )
            # Keep the rounds the failed turn completed (their calls ran: a call runs at most once);
            # withdraw what the failing round stored, and the error message.
            turn_id, iteration = conv["turn_id"], 0
            boundary = messages[users[-1]]["seq"]
            for seq, name, payload in await deps.store.events_after(cid, boundary):
                if name == P.Event.FUNCTION_CALL_ITERATION and payload.get("turn_id") == turn_id:
                    boundary, iteration = seq, int(payload.get("iteration") or 0)
            withdraw = [m for m in after if m.get("seq", 0) > boundary]
            plan = await resume_plan(deps.store, cid, turn_id, withdraw)
        check_rate(deps.limiters.message, cid, "Too many messages; wait a moment.")
        ack = P.ok(turn_id=turn_id)
        ids = [m["id"] for m in withdraw]
        try:
            await deps.emit_locked(
                rt,
                cid,
                P.Event.MESSAGES_WITHDRAWN,
                {"message_ids": ids, "reason": op, "turn_id": turn_id},
                withdraw=ids,
                idempotency=ctx.idempotency(ack),
                require_status=[conv["status"]],
                conversation={
                    "status": ConversationStatus.RUNNING,
                    "turn_id": turn_id,
                    "iteration": iteration,
                    "runner": deps.instance,
                },
            )
        except S.StatusConflict:
            raise ProtocolError(P.ErrorCode.BUSY, BUSY_MESSAGE) from None
        if regenerate and conv["status"] == ConversationStatus.FAILED:
            await deps.recovery.close_leftover_calls(rt, cid)
        rt.turn = deps.spawn(deps.turns.run_turn(cid, turn_id, iteration, announce=False, resume_from=plan))
        return ack

    @socket_event(
        P.Event.FUNCTION_RESPONSE,
        shape="function_response expects {id, status, result | error, idempotency_key}",
        idempotent=True,
        locked=True,
    )
    async def function_response(self, ctx: Ctx, data: dict[str, Any]) -> Ack:
        """The page's answer to a call it was sent with ``run: true``."""
        store = self._ctx.store
        cid, sid = ctx.cid, ctx.sid
        call_id = data.get("id")
        status = data.get("status")
        if not isinstance(call_id, str) or status not in (P.CallStatus.SUCCESS, P.CallStatus.ERROR):
            raise ProtocolError(
                P.ErrorCode.BAD_REQUEST, "function_response needs an id and status 'success' or 'error'"
            )

        def timing(name: str) -> float | None:
            """A client timing as stored: a finite number from 0 to MAX_CLIENT_MS, else null (it feeds the stats)."""
            v = data.get(name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v <= P.MAX_CLIENT_MS:
                return None  # (NaN fails the comparison too)
            return float(v)

        duration_ms, total_ms = timing("duration_ms"), timing("total_ms")
        conv = await store.get_conversation(cid)
        if conv is not None and conv["active_sid"] != sid:
            call = await store.get_call(cid, call_id)
            if call is None or call["dispatched_to"] != sid:
                raise ProtocolError(P.ErrorCode.NOT_ACTIVE, "Another tab is the active client.")
        ack = P.ok()
        if status == P.CallStatus.ERROR:
            err = data.get("error")
            err = err if isinstance(err, str) and err else "The function failed."
            done = await store.finish_call(
                cid,
                call_id,
                CallState.ANSWERED,
                error=err,
                idempotency=ctx.idempotency(ack),
                duration_ms=duration_ms,
                total_ms=total_ms,
            )
        else:
            done = await store.finish_call(
                cid,
                call_id,
                CallState.ANSWERED,
                result=data.get("result"),
                idempotency=ctx.idempotency(ack),
                duration_ms=duration_ms,
                total_ms=total_ms,
            )
        if not done:
            call = await store.get_call(cid, call_id)
            reason = f"call is {call['status']}" if call else "unknown call"
            await self._record_refused(ctx, Event.FUNCTION_RESPONSE, data, reason)
            raise ProtocolError(
                P.ErrorCode.CALL_NOT_PENDING, f"The relay is not waiting for call {call_id!r} ({reason})."
            )
        ev = ctx.conv_rt.call_events.get(call_id)
        if ev is not None:
            ev.set()
        return ack

    @socket_event(
        P.Event.ACTION_OUTCOME,
        idempotent=True,
        locked=True,
        shape="action_outcome expects {message_id, action_id, name, arguments, ok, outcome, idempotency_key}",
    )
    async def action_outcome(self, ctx: Ctx, data: dict[str, Any]) -> Ack:
        """§8.1: the reader ran an offered action; record its outcome as an ``action`` message (any
        joined socket: the reader pressed the button in that tab)."""
        deps = self._ctx
        cid = ctx.cid
        message_id, action_id, name = data.get("message_id"), data.get("action_id"), data.get("name")
        for field_name, value in (("message_id", message_id), ("action_id", action_id), ("name", name)):
            if not isinstance(value, str) or not value:
                raise ProtocolError(P.ErrorCode.BAD_REQUEST, f"action_outcome needs {field_name}, a non-empty string")
        ok = data.get("ok")
        if not isinstance(ok, bool):
            raise ProtocolError(P.ErrorCode.BAD_REQUEST, "ok must be true or false")
        outcome = data.get("outcome")
        if outcome is None:
            outcome = "Done." if ok else "The action failed."
        if not isinstance(outcome, str):
            raise ProtocolError(P.ErrorCode.BAD_REQUEST, "outcome must be a string")
        if len(outcome) > P.TOOL_REPLY_MAX_CHARS:
            outcome = outcome[: P.TOOL_REPLY_MAX_CHARS] + " [cut]"
        args = data.get("arguments")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise ProtocolError(P.ErrorCode.BAD_REQUEST, "arguments must be an object")
        offer = await deps.store.get_offer(cid, str(message_id))
        action = next((a for a in offer["actions"] if a["id"] == action_id), None) if offer else None
        if action is None:
            await self._record_refused(ctx, Event.ACTION_OUTCOME, data, "not offered")
            raise ProtocolError(
                P.ErrorCode.NOT_FOUND, f"No action {action_id!r} was offered on message {message_id!r}."
            )
        if action["name"] != name:
            raise ProtocolError(P.ErrorCode.BAD_REQUEST, f"Action {action_id!r} is {action['name']!r}, not {name!r}.")
        clean, problem = check_tool_arguments(action["parameters"], args)
        if problem is not None:
            raise ProtocolError(P.ErrorCode.BAD_REQUEST, f"The arguments of {name} do not pass its schema: {problem}")
        if await deps.store.action_succeeded(cid, str(action_id)):
            await self._record_refused(ctx, Event.ACTION_OUTCOME, data, "already succeeded")
            raise ProtocolError(P.ErrorCode.BAD_REQUEST, f"Action {action_id!r} already succeeded; it is done.")
        check_rate(deps.limiters.message, cid, "Too many messages; wait a moment.")
        msg = {
            "id": new_id("m_"),
            "role": Role.ACTION,
            "message_id": message_id,
            "action_id": action_id,
            "name": name,
            "arguments": clean,
            "ok": ok,
            "outcome": outcome,
            "created_at": time.time(),
        }
        ack = P.ok(message_id=msg["id"])
        await deps.emit_locked(
            ctx.conv_rt, cid, P.Event.MESSAGE, {"message": msg}, messages=[msg], idempotency=ctx.idempotency(ack)
        )
        return ack

    @socket_event(P.Event.CANCEL, shape="cancel expects {idempotency_key}", idempotent=True)
    async def cancel(self, ctx: Ctx, data: dict[str, Any]) -> Ack:
        """Stop the running turn (or the wait for ask-user answers)."""
        deps = self._ctx
        # Each new key stores an ack: bounded per socket (rate) and per conversation (the newest kept).
        check_rate(deps.limiters.cancel, ctx.sid, "Too many cancels from this socket; wait a moment.")
        cancelled = await deps.recovery.cancel_turn(ctx.cid)
        ack = P.ok(cancelled=cancelled)
        await deps.store.put_ack(ctx.cid, ctx.key, ack, ctx.event, keep=deps.config.max_cancel_acks_per_conversation)
        return ack

    async def _record_refused(self, ctx: Ctx, kind: str, data: dict[str, Any], reason: str) -> None:
        """Record a refused write (an excerpt, for the operator): at most ``refused_write_rate_per_minute`` a socket
        (past it the write is refused ``rate_limited`` and nothing is recorded), the conversation's newest
        ``max_refused_writes_per_conversation`` kept."""
        deps = self._ctx
        check_rate(deps.limiters.refused, ctx.sid, "Too many refused writes from this socket; wait a moment.")
        keep = deps.config.max_refused_writes_per_conversation
        await deps.store.record_refused(ctx.cid, kind, data, reason, keep=keep)

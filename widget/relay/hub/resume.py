"""Retry after an interruption: the interrupted round is finished from its calls' stored results, not
asked of the model again (a page function runs at most once per request).

A relay that dies while a round's calls run leaves them pending (recovery does not cancel a call whose
result can still arrive: the page may have run it and resend its answer). ``retry`` then resumes that
round: the calls already answered give their results, those still pending are waited for (the active
client got them in its join's ``pending_calls``), and the turn goes on with the next round.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol

from ... import protocol as P
from ...protocol import CallState, ConversationStatus, Role, ToolMessageKind
from ..storage import store as S
from .context import EmitEvent
from .rounds import Round, tool_message
from .runtime import ConvRuntime, new_id

NOT_RUN = "The relay restarted before this call ran; nothing ran. Call it again if it is still needed."


@dataclass
class ResumePlan:
    """The interrupted round of a failed turn: its streamed text and calls, with their stored rows."""

    text: str
    calls: list[dict[str, Any]]
    rows: dict[str, dict[str, Any]]


async def resume_plan(store: S.Store, cid: str, turn_id: str, withdrawn: list[dict[str, Any]]) -> ResumePlan | None:
    """The plan for resuming, when the interrupted round (the last assistant message ``retry`` withdraws)
    made a call that ran or may still answer; None when the round should be asked of the model again."""
    msg = next((m for m in reversed(withdrawn) if m.get("role") == Role.ASSISTANT and m.get("function_calls")), None)
    if msg is None:
        return None
    rows = {c["id"]: c for c in await store.turn_calls(cid, turn_id)}
    if not any(
        rows.get(c["id"], {}).get("status") in (CallState.PENDING, CallState.ANSWERED) for c in msg["function_calls"]
    ):
        return None
    return ResumePlan(text=msg.get("content") or "", calls=[dict(c) for c in msg["function_calls"]], rows=rows)


class AwaitCall(Protocol):
    """Wait for a call's answer through the store, emitting its ``function_call.end`` (``CallDispatch.await_call``):
    ``(end, ms)``."""

    def __call__(self, cid: str, rt: ConvRuntime, c: dict[str, Any], announce: bool = True
                 ) -> Awaitable[tuple[dict[str, Any], float]]: ...


@dataclass(frozen=True)
class ResumeContext:
    """What resuming an interrupted round uses."""

    store: S.Store
    emit_event: EmitEvent
    await_call: AwaitCall


async def resume_round(
    ctx: ResumeContext, cid: str, rt: ConvRuntime, turn_id: str, plan: ResumePlan, log_calls: list[dict[str, Any]]
) -> Round:
    """Stream the interrupted round again as a new message with the same text and calls; each call's
    result is its stored one (waited for while pending). Returns the round, ready to commit."""
    cur = Round(message_id=new_id("m_"), text=[plan.text] if plan.text else [], calls=plan.calls, started=True)
    await ctx.emit_event(cid, P.Event.COMPLETION_STARTED, {"turn_id": turn_id, "message_id": cur.message_id})
    if plan.text:
        await ctx.emit_event(cid, P.Event.COMPLETION_STREAM, {"message_id": cur.message_id, "delta": plan.text})
    # Calls sent to the page that ran or may still answer: their results, with a function_call.end. (A pending
    # one was sent: recovery cancels those never sent. An answered one without a seq was run by the relay,
    # or its seq was not written before the relay died: its result is used without an end event.)
    waiting = {
        c["id"]
        for c in plan.calls
        if (row := plan.rows.get(c["id"])) is not None
        and (row["status"] == CallState.PENDING or (row["status"] == CallState.ANSWERED and row["seq"]))
    }
    if any(plan.rows[i]["status"] == CallState.PENDING for i in waiting):
        await ctx.store.update_conversation(cid, status=ConversationStatus.WAITING_FOR_FUNCTION)
    for c in plan.calls:
        row = plan.rows.get(c["id"])
        if c["id"] in waiting:
            assert row is not None
            end, ms = await ctx.await_call(cid, rt, {"id": c["id"], "name": c["name"], "kind": row["kind"]})
            log_calls.append(
                {"tool": c["name"], "ok": end["status"] == P.CallStatus.SUCCESS, "ms": ms, "resumed": True}
            )
            cur.tools.append(tool_message(c["id"], c["name"], row["kind"], end))
        elif row is None:
            not_run = {"status": P.CallStatus.ERROR, "error": NOT_RUN}
            cur.tools.append(tool_message(c["id"], c["name"], ToolMessageKind.RELAY, not_run))
        elif row["status"] == CallState.ANSWERED and row["error"] is None:  # run by the relay itself
            cur.tools.append(
                tool_message(
                    c["id"],
                    c["name"],
                    row["kind"],
                    {
                        "status": P.CallStatus.SUCCESS,
                        "result": row["result"],
                        "duration_ms": row["duration_ms"],
                        "total_ms": row["total_ms"],
                    },
                )
            )
        else:
            cur.tools.append(
                tool_message(
                    c["id"],
                    c["name"],
                    row["kind"],
                    {
                        "status": P.CallStatus.ERROR,
                        "error": row["error"] or NOT_RUN,
                        "duration_ms": row["duration_ms"],
                        "total_ms": row["total_ms"],
                    },
                )
            )
    if waiting:
        await ctx.store.update_conversation(cid, status=ConversationStatus.RUNNING)
    return cur

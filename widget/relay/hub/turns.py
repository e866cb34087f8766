"""The turn loop: rounds of model output, the calls each round makes, and how a turn ends.

A turn is a sequence of rounds. Each round streams one assistant message (``completion.started``,
``completion_stream``...), runs the calls the model asked for (page calls through call dispatch, relay
config functions here, ``ask_user`` by suspending the turn, ``offer_actions`` and ``suggest_followups`` answered by
the relay),
then commits the message with its tool messages (``completion.ended``). The turn ends with
``completion.finished`` and ``user_input``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ... import protocol as P
from ...core.tools import check_tool_arguments
from ...protocol import (
    MSG_CALL_CANCELLED,
    CallState,
    ConversationStatus,
    Role,
    ToolMessageKind,
    TurnErrorCode,
    TurnStatus,
    UserInputReason,
    WithdrawReason,
)
from ...protocol.messages import AskUserPrompt, CallRecord
from ..config import AppConfig, RelayConfig
from ..docs import DocsIndex
from ..mcp.servers import McpTools
from ..models.base import ASK_USER_TOOL, ModelAdapter, ModelError, ModelRequest, StreamLimits, TextDelta, ToolCall
from ..storage import store as S
from ..storage.base import UsageRow
from ..tools import check_offer, check_suggestions, docs_query, suggestions_note
from .ask_user import prompt_from
from .citations import exempt_reason, search_key
from .context import EmitEvent, Switches, app_of
from .prompts import RoundInfo, build_request, search_sections
from .resume import AwaitCall, ResumeContext, ResumePlan, resume_round
from .rounds import Round, tool_message
from .runtime import ConvRuntime, Runtimes, new_id
from .steps import ModelSteps

log = logging.getLogger("widget.relay")
turn_log = logging.getLogger("widget.relay.turns")


def cache_key(name: str, arguments: Any) -> str:
    """Calls with the same name and arguments have the same key."""
    return name + "\x00" + json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


async def answers_withdrawn(store: Any, cid: str) -> int:
    """How many answers to the conversation's last user message were withdrawn by retry or regenerate
    (the model request's ``attempt``)."""
    snap = await store.snapshot(cid)
    users = [m for m in (snap[1] if snap else []) if m.get("role") == "user"]
    if not users:
        return 0
    events = await store.events_after(cid, int(users[-1].get("seq") or 0))
    return sum(1 for _seq, name, _payload in events if name == P.Event.MESSAGES_WITHDRAWN)


def release(rt: ConvRuntime) -> None:
    """The turn's status is stored: let the next write start a turn. Done before the final ``user_input``, so a
    reader who answers it at once is never refused ``busy`` by a turn task that is only tidying up."""
    if rt.turn is asyncio.current_task():
        rt.turn = None


@dataclass(frozen=True)
class TurnsContext:
    """What the turn loop uses."""

    config: RelayConfig
    store: S.Store
    runtimes: Runtimes
    #: the model adapters by name
    models: dict[str, ModelAdapter]
    emit_event: EmitEvent
    switches: Switches
    #: the apps' MCP servers
    mcp: McpTools
    #: the site documentation's index, read when a turn starts (None: none)
    docs: Callable[[], DocsIndex | None]
    #: wait for a page call's answer (``CallDispatch.await_call``)
    await_call: AwaitCall
    #: run a relay config function or an MCP tool (``CallDispatch.run_relay_tool``)
    run_relay_tool: Callable[[str, dict[str, Any], RoundInfo], Awaitable[tuple[dict[str, Any], float]]]
    #: a round's usage as the model reported it, for the tracing spans (``Tracing.usage``; a no-op when off)
    on_usage: Callable[[str, UsageRow], None] = lambda _cid, _row: None


class TurnRunner:
    """Runs the hub's turns (one task per running turn, ``ConvRuntime.turn``)."""

    def __init__(self, ctx: TurnsContext) -> None:
        self._ctx = ctx

    async def run_turn(self, cid: str, turn_id: str, iteration: int, resume: bool = False, announce: bool = True,
                       resume_from: ResumePlan | None = None) -> None:
        """Run (or resume) a turn from round ``iteration``. ``resume``: feed the ask-user answers
        first. ``announce``: start with ``function_call_iteration`` when ``iteration > 0`` (a retry
        does not: its ``messages.withdrawn`` starts it). ``resume_from``: round ``iteration`` was
        interrupted after its calls were sent; it is finished from their results, not asked again."""
        ctx = self._ctx
        rt = ctx.runtimes.rt(cid)
        rt.users += 1
        t0 = time.monotonic()
        log_calls: list[dict[str, Any]] = []
        status: str = TurnStatus.DONE  # the turn log also says suspended or interrupted
        cur = Round()
        steps: ModelSteps | None = None
        try:
            conv = await ctx.store.get_conversation(cid)
            if conv is None:
                return
            app = app_of(ctx.config, conv)
            steps = ModelSteps(app.model, ctx.models, app.fallback_model,
                               on_usage=functools.partial(ctx.on_usage, cid))
            cfg = ctx.config
            limits = StreamLimits(deadline=t0 + cfg.turn_timeout_s, stall_s=cfg.model_stall_timeout_s,
                                  max_answer_chars=cfg.max_answer_chars, max_tool_calls=cfg.max_tool_calls_per_response)
            attempt = await answers_withdrawn(ctx.store, cid)
            docs = await self.docs_of(conv, app)
            info: RoundInfo | None = None
            rounds = 0  # model rounds this run of the turn asked for
            if resume:
                answers = await ctx.store.take_answers(cid)
                for prompt, answer in answers:
                    end = {"status": P.CallStatus.SUCCESS, "result": answer}
                    tm = tool_message(prompt["id"], ASK_USER_TOOL, ToolMessageKind.RELAY, end)
                    await ctx.emit_event(cid, P.Event.MESSAGE, {"message": tm}, messages=[tm])
            first = True
            if resume_from is not None:
                again = ResumeContext(ctx.store, ctx.emit_event, ctx.await_call)
                cur = await resume_round(again, cid, rt, turn_id, resume_from, log_calls)
                await self.end_message(cid, cur)
                iteration += 1
                first = False  # the next round is announced
            while True:
                if iteration > 0 and (announce or not first):
                    await ctx.emit_event(cid, P.Event.FUNCTION_CALL_ITERATION,
                                         {"turn_id": turn_id, "iteration": iteration},
                                         conversation={"iteration": iteration, "status": ConversationStatus.RUNNING})
                last_round = iteration >= ctx.config.max_iterations - 1
                first = False
                rounds += 1
                cur = Round(message_id=new_id("m_"))
                raw_calls: list[ToolCall] = []
                built: list[RoundInfo] = []

                async def start(cur: Round = cur) -> None:  # this round's (a closure would see the next one)
                    if not cur.started:
                        cur.started = True
                        await ctx.emit_event(cid, P.Event.COMPLETION_STARTED,
                                             {"turn_id": turn_id, "message_id": cur.message_id})

                async def build(model: ModelAdapter, last_round: bool = last_round,
                                start: Callable[[], Awaitable[None]] = start,
                                built: list[RoundInfo] = built) -> ModelRequest:
                    """The round's request for the model that answers it (again for a fallback model)."""
                    request, round_info = await build_request(ctx.store, ctx.config, cid, conv, app, turn_id,
                                                              with_tools=not last_round, model=model, docs=docs)
                    # MCP servers that must start first: the round starts (the turn shows as running) before that wait.
                    await ctx.mcp.extend(app, round_info, request, model, with_tools=not last_round,
                                         before_wait=start)
                    request.attempt = attempt
                    built.append(round_info)
                    return request

                async for chunk in steps.stream(build, limits):
                    await start()
                    if isinstance(chunk, TextDelta):
                        if chunk.text:
                            cur.text.append(chunk.text)
                            await ctx.emit_event(cid, P.Event.COMPLETION_STREAM,
                                                 {"message_id": cur.message_id, "delta": chunk.text})
                    elif isinstance(chunk, ToolCall):
                        raw_calls.append(chunk)
                info = built[-1]
                await start()
                suspended = await self.run_calls(cid, rt, turn_id, cur, raw_calls, info, app, log_calls)
                await self.end_message(cid, cur, info)
                if suspended:
                    status = "suspended"
                    await ctx.emit_event(cid, P.Event.ASK_USER_REQUEST, {"prompts": suspended},
                                         conversation={"status": ConversationStatus.WAITING_FOR_ASK_USER,
                                                       "iteration": iteration})
                    release(rt)
                    await ctx.emit_event(cid, P.Event.USER_INPUT, {"reason": UserInputReason.ASK_USER})
                    return
                # An offer or accepted suggestions are answered by the relay within the round: alone they end the turn.
                if info.one_shot or all(self.answered_in_round(c, info, app, cur) for c in raw_calls):
                    break
                iteration += 1
            if docs is not None and app.docs.require_citations and info is not None and cur.ended is not None:
                cur = await self.withdraw_uncited(cid, turn_id, cur, info, app, after_prompt=resume and rounds == 1)
            await ctx.emit_event(cid, P.Event.COMPLETION_FINISHED, {"turn_id": turn_id, "status": TurnStatus.DONE},
                                 conversation={"status": ConversationStatus.IDLE})
            release(rt)
            await ctx.emit_event(cid, P.Event.USER_INPUT, {"reason": UserInputReason.MESSAGE})
        except asyncio.CancelledError:
            if ctx.switches.closing:
                # The relay is shutting down: leave the turn as it is; the next open of the
                # conversation (here or in the next process) marks it failed with Retry.
                status = "interrupted"
            elif ctx.switches.draining:  # the drain deadline passed: end it now, Retry goes on elsewhere
                status = "interrupted"
                await self.abort(cid, turn_id, cur, TurnStatus.FAILED, {
                    "content": "The answer was interrupted because the relay restarted. Try again.",
                    "code": TurnErrorCode.TURN_INTERRUPTED, "retryable": True})
            else:
                status = TurnStatus.CANCELLED
                await self.abort(cid, turn_id, cur, TurnStatus.CANCELLED, None)
        except ModelError as exc:
            status = TurnStatus.FAILED
            error: dict[str, Any] = {"content": exc.message, "code": exc.code, "retryable": exc.retryable}
            if exc.retry_after is not None:
                error["retry_after"] = exc.retry_after
            await self.abort(cid, turn_id, cur, TurnStatus.FAILED, error)
        except Exception:
            status = TurnStatus.FAILED
            log.exception("turn %s of %s failed", turn_id, cid)
            await self.abort(cid, turn_id, cur, TurnStatus.FAILED,
                             {"content": "The relay failed while answering. Try again.",
                              "code": TurnErrorCode.INTERNAL, "retryable": True})
        finally:
            if rt.turn is asyncio.current_task():
                rt.turn = None
            if status != "interrupted":
                await self.pack_stream(cid)
            rt.users -= 1
            ctx.runtimes.release(cid)
            line: dict[str, Any] = {
                "event": "turn", "conversation": cid, "turn_id": turn_id, "status": status,
                "ms": round((time.monotonic() - t0) * 1000, 1), "calls": log_calls,
            }
            if steps is not None:
                line.update(model=steps.name, usage=steps.usage, tokens=steps.totals())
                if steps.fallback_used is not None:
                    line["fallback"] = steps.fallback_used
                if steps.usage:
                    await self.keep_usage(cid, turn_id, steps)
            turn_log.info(json.dumps(line))

    async def keep_usage(self, cid: str, turn_id: str, steps: ModelSteps) -> None:
        """Store what the turn's rounds cost (for ``stats``); a store that fails loses the counts, not the turn."""
        try:
            await self._ctx.store.add_usage(cid, turn_id, steps.usage)
        except Exception:
            log.exception("usage of turn %s of %s not stored", turn_id, cid)

    async def docs_of(self, conv: dict[str, Any], app: AppConfig) -> DocsIndex | None:
        """The docs index when the conversation's app has docs this turn (``docs.enabled`` and sections in the
        index), else None. An index that fails to answer counts as none (logged): the turn goes on without docs."""
        docs = self._ctx.docs()
        if docs is None or not app.docs.enabled:
            return None
        try:
            return docs if await docs.has_index(conv["app_id"]) else None
        except Exception:
            log.exception("the docs index did not answer for app %r; answering without docs", conv["app_id"])
            return None

    async def withdraw_uncited(self, cid: str, turn_id: str, cur: Round, info: RoundInfo, app: AppConfig,
                               after_prompt: bool = False) -> Round:
        """The final answer of a turn in an app with docs cites nothing: unless it is exempt (a short answer to a
        greeting, a short answer that offers an action, or a short answer right after the reader answered an
        ``ask_user`` prompt), withdraw it (``messages.withdrawn``, reason
        ``uncited``) and say the app's ``not_found_text`` instead, with its ``fallback_actions`` offered.
        Returns the round now in progress (for a cancel meanwhile)."""
        assert cur.ended is not None
        msg, tools, offered = cur.ended
        if msg.get("sources") or exempt_reason(info.question,
                                               msg.get("content") or "", offered, after_prompt) is not None:
            return cur
        ctx = self._ctx
        ids = [msg["id"], *(t["id"] for t in tools)]
        await ctx.emit_event(cid, P.Event.MESSAGES_WITHDRAWN,
                             {"message_ids": ids, "reason": WithdrawReason.UNCITED, "turn_id": turn_id}, withdraw=ids)
        log.info(json.dumps({"event": "answer_withdrawn", "reason": WithdrawReason.UNCITED.value, "conversation": cid,
                             "turn_id": turn_id, "message_id": msg["id"]}))
        new = Round(message_id=new_id("m_"), text=[app.docs.not_found_text])
        await ctx.emit_event(cid, P.Event.COMPLETION_STARTED, {"turn_id": turn_id, "message_id": new.message_id})
        new.started = True
        await ctx.emit_event(cid, P.Event.COMPLETION_STREAM,
                             {"message_id": new.message_id, "delta": app.docs.not_found_text})
        fallback = [{"name": n, "arguments": {}} for n in app.docs.fallback_actions if n in info.actions]
        if fallback:
            assert new.message_id is not None
            new.offer = self.offer(cid, new.message_id, [{"actions": fallback}], info)
        await self.end_message(cid, new)
        return new

    @staticmethod
    def answered_in_round(call: ToolCall, info: RoundInfo, app: AppConfig, cur: Round) -> bool:
        """Whether a call needs no further model round: an offer of actions, or follow-up suggestions shown."""
        if call.name == P.RelayTool.OFFER_ACTIONS:
            return bool(info.actions)
        return call.name == P.RelayTool.SUGGEST_FOLLOWUPS and app.suggestions and not cur.suggestions_failed

    async def pack_stream(self, cid: str) -> None:
        """The turn's answers are complete: pack their streamed chunks into one stored row each (replay unchanged)."""
        try:
            await self._ctx.store.pack_stream(cid)
        except KeyError:
            pass  # the conversation was deleted meanwhile
        except Exception:
            log.exception("packing the streamed chunks of %s failed (they stay as they are)", cid)

    async def end_message(self, cid: str, cur: Round, info: RoundInfo | None = None) -> None:
        """Commit the round's assistant message with its tool messages. Offered actions are stored with
        it but only the emitted copy carries them as ``actions``: the stored message (GET) never does (§8).
        In a turn with citable ids, the ids its text cites become its ``sources`` (stored with it)."""
        assert cur.message_id is not None
        msg: dict[str, Any] = {"id": cur.message_id, "role": Role.ASSISTANT,
                               "content": "".join(cur.text), "created_at": time.time()}
        if cur.calls:
            msg["function_calls"] = cur.calls
        if cur.suggestions:
            msg["suggestions"] = cur.suggestions
        if info is not None and info.cites is not None:
            sources = info.cites.sources(msg["content"])
            if sources:
                msg["sources"] = sources
        tools = cur.tools
        offer = cur.offer
        cur.ended = (msg, tools, bool(offer and offer["actions"]))
        cur.message_id = None
        cur.offer = None
        cur.suggestions = []
        shown = msg
        kw: dict[str, Any] = {}
        if offer is not None:
            kw["offer"] = {"message_id": msg["id"], **offer}
            if offer["actions"]:
                shown = {**msg, "actions": [{"id": a["id"], "name": a["name"], "arguments": a["arguments"]}
                                            for a in offer["actions"]]}
        await self._ctx.emit_event(cid, P.Event.COMPLETION_ENDED,
                                   {"message": shown, "tool_messages": tools}, messages=[msg, *tools], **kw)

    async def abort(self, cid: str, turn_id: str, cur: Round, status: TurnStatus, error: dict[str, Any] | None) -> None:
        """Close a turn that was cancelled or failed: pending calls cancelled, the streaming message
        committed as far as it got, an error message, ``completion.finished``, ``user_input``."""
        ctx = self._ctx
        try:
            rt = ctx.runtimes.rt(cid)
            for c in await ctx.store.pending_calls(cid):
                if await ctx.store.finish_call(cid, c["id"], CallState.CANCELLED, error=MSG_CALL_CANCELLED):
                    end = {"id": c["id"], "name": c["name"], "status": P.CallStatus.ERROR,
                           "error": MSG_CALL_CANCELLED, "duration_ms": None, "total_ms": None}
                    await ctx.emit_event(cid, P.Event.FUNCTION_CALL_END, end)
                    cur.tools.append(tool_message(c["id"], c["name"], c["kind"], end))
                    ev = rt.call_events.get(c["id"])
                    if ev:
                        ev.set()
            cur.offer = None  # a cancelled or failed round offers nothing
            cur.suggestions = []  # ... and suggests nothing
            if cur.message_id and cur.started:
                await self.end_message(cid, cur)
            if error is not None:
                msg = {"id": new_id("m_"), "role": Role.ERROR, "created_at": time.time(), **error}
                await ctx.emit_event(cid, P.Event.MESSAGE, {"message": msg}, messages=[msg])
            await ctx.emit_event(cid, P.Event.COMPLETION_FINISHED, {"turn_id": turn_id, "status": status},
                                 conversation={"status": ConversationStatus.FAILED if status == TurnStatus.FAILED
                                               else ConversationStatus.IDLE})
            release(rt)
            await ctx.emit_event(cid, P.Event.USER_INPUT, {"reason": UserInputReason.MESSAGE})
        except KeyError:
            pass  # the conversation was deleted meanwhile
        except Exception:
            log.exception("closing turn %s of %s failed", turn_id, cid)

    async def run_calls(
        self, cid: str, rt: ConvRuntime, turn_id: str, cur: Round, raw_calls: list[ToolCall],
        info: RoundInfo, app: AppConfig, log_calls: list[dict[str, Any]],
    ) -> list[AskUserPrompt]:
        """Run one round's calls. Returns the ask-user prompts when the turn must suspend.

        Page tools: arguments are checked against the tool's schema first (a failing call never runs;
        the model is told why) and ``null`` for an optional one is dropped. A call with the same name
        and arguments as an earlier call of the turn is answered from it — from the first call of the
        same round whatever its outcome (both were asked at once), from an earlier round's call when
        that one succeeded (a failed call may be retried). A tool backed by a relay config function
        runs here, without ``function_call.begin``. ``offer_actions`` is answered here too: its offers
        go onto ``cur.offer`` and never into ``function_calls``."""
        ctx = self._ctx
        catalogue = info.catalogue
        client_calls: list[dict[str, Any]] = []
        relay_calls: list[dict[str, Any]] = []
        prompts: list[AskUserPrompt] = []
        offered: list[Any] = []
        in_round: dict[str, dict[str, Any]] = {}  # cache key -> the round's first call of it
        dupes: list[tuple[dict[str, Any], dict[str, Any]]] = []
        earlier: dict[str, dict[str, Any]] | None = None  # cache key -> an earlier round's successful call
        for tc in raw_calls:
            if tc.name == P.RelayTool.OFFER_ACTIONS and info.actions:
                offered.append(tc.arguments)
                continue
            call = {"id": new_id("call_"), "name": tc.name, "arguments": tc.arguments}
            cur.calls.append(call)
            if tc.name == ASK_USER_TOOL and app.ask_user and not info.one_shot:
                prompt, wrong = prompt_from(call)
                if prompt is None:
                    cur.tools.append(tool_message(call["id"], tc.name, ToolMessageKind.RELAY,
                                                  {"status": P.CallStatus.ERROR,
                                                   "error": f"Invalid ask_user call: {wrong}. Nothing was shown to "
                                                            "the reader; fix the arguments and call again."}))
                else:
                    prompts.append(prompt)
            elif tc.name == P.RelayTool.SUGGEST_FOLLOWUPS and app.suggestions:
                cur.tools.append(self.suggest(cid, cur, call))
            elif tc.name == P.RelayTool.SEARCH_DOCS and info.cites is not None and not info.one_shot:
                cur.tools.append(await self.search_docs(call, info, log_calls))
            elif tc.name not in catalogue:
                cur.tools.append(
                    tool_message(
                        call["id"],
                        tc.name,
                        ToolMessageKind.RELAY,
                        {"status": P.CallStatus.ERROR, "error": f"Unknown function {tc.name!r}."},
                    )
                )
            elif info.one_shot:  # a one-shot answer calls nothing (the model was given no function tools)
                cur.tools.append(tool_message(call["id"], tc.name, ToolMessageKind.RELAY, {
                    "status": P.CallStatus.ERROR,
                    "error": f"{tc.name!r} cannot be called in a one-shot answer; nothing ran."}))
            elif not isinstance(tc.arguments, dict):
                cur.tools.append(tool_message(call["id"], tc.name, catalogue[tc.name]["kind"],
                                              {"status": P.CallStatus.ERROR,
                                               "error": "The arguments were not a JSON object."}))
            else:
                entry = catalogue[tc.name]
                kind = entry["kind"]
                if kind == P.Kind.TOOL:
                    clean, problem = check_tool_arguments(entry["parameters"], tc.arguments)
                    if problem is not None:
                        cur.tools.append(tool_message(call["id"], tc.name, kind, {
                            "status": P.CallStatus.ERROR,
                            "error": f"Invalid arguments: {problem}. The call did not run; fix the arguments and call "
                                     "again."}))
                        continue
                    call["arguments"] = clean
                    key = cache_key(tc.name, clean)
                    if key in in_round:
                        dupes.append((call, in_round[key]))
                        continue
                    if earlier is None:
                        earlier = {
                            cache_key(c["name"], c["arguments"]): c
                            for c in reversed(await ctx.store.turn_calls(cid, turn_id))
                            if c["kind"] == P.Kind.TOOL and c["status"] == CallState.ANSWERED and c["error"] is None
                        }
                    prior = earlier.get(key)
                    if prior is not None:
                        end = {"status": P.CallStatus.SUCCESS, "result": prior["result"],
                               "duration_ms": prior["duration_ms"], "total_ms": prior["total_ms"]}
                        cur.tools.append({**tool_message(call["id"], tc.name, kind, end), "answered_from": prior["id"]})
                        continue
                    in_round[key] = call
                    if entry.get("relay") is not None:
                        relay_calls.append({**call, "kind": kind, "tool": entry["relay"],
                                            "message_id": cur.message_id, "turn_id": turn_id})
                        continue
                client_calls.append({**call, "kind": kind})
        if offered:
            assert cur.message_id is not None
            cur.offer = self.offer(cid, cur.message_id, offered, info)
        if client_calls or relay_calls:
            if client_calls:
                await ctx.store.add_calls(cid, turn_id, client_calls)
                for c in client_calls:
                    rt.call_events[c["id"]] = asyncio.Event()
                for c in client_calls:
                    seq = await ctx.emit_event(cid, P.Event.FUNCTION_CALL_BEGIN,
                                               {"id": c["id"], "name": c["name"], "arguments": c["arguments"],
                                                "message_id": cur.message_id,
                                                "kind": c["kind"]},
                                               conversation={"status": ConversationStatus.WAITING_FOR_FUNCTION})
                    await ctx.store.set_call_seq(cid, c["id"], seq)
            results = await asyncio.gather(*(ctx.await_call(cid, rt, c) for c in client_calls),
                                           *(ctx.run_relay_tool(cid, c, info) for c in relay_calls))
            if relay_calls:
                await ctx.store.add_calls(cid, turn_id, [
                    {"id": c["id"], "name": c["name"], "kind": c["kind"], "arguments": c["arguments"],
                     "status": CallState.TIMED_OUT if end.get("timed_out") else CallState.ANSWERED,
                     "result": end.get("result"), "error": end.get("error"),
                     "duration_ms": end["duration_ms"], "total_ms": end["total_ms"]}
                    for c, (end, _ms) in zip(relay_calls, results[len(client_calls):], strict=True)
                    if not end.get("stored")
                ])
            by_id: dict[str, CallRecord] = {}
            for c, (end, ms) in zip(client_calls + relay_calls, results, strict=True):
                tm = tool_message(c["id"], c["name"], c["kind"], end)
                by_id[c["id"]] = tm
                cur.tools.append(tm)
                log_calls.append({"tool": c["name"], "ok": end["status"] == P.CallStatus.SUCCESS, "ms": ms})
            for call, first in dupes:
                cur.tools.append({**by_id[first["id"]], "id": new_id("m_"), "function_call_id": call["id"],
                                  "created_at": time.time(), "answered_from": first["id"]})
            if client_calls:
                await ctx.store.update_conversation(cid, status=ConversationStatus.RUNNING)
        order = {c["id"]: i for i, c in enumerate(cur.calls)}
        cur.tools.sort(key=lambda t: order.get(t.get("function_call_id"), len(order)))
        if prompts:
            await ctx.store.add_prompts(cid, turn_id, prompts)
        return prompts

    async def search_docs(self, call: dict[str, Any], info: RoundInfo, log_calls: list[dict[str, Any]]) -> CallRecord:
        """A ``search_docs`` call, answered by the relay: the sections its query finds, each under its citable id.
        The same query a second time in the turn (ignoring case and spacing) is answered from the first search
        (``answered_from``), without searching again."""
        assert info.cites is not None
        query, problem = docs_query(call["arguments"])
        if query is None:
            return tool_message(call["id"], call["name"], ToolMessageKind.RELAY, {
                "status": P.CallStatus.ERROR,
                "error": f"Invalid search_docs call: {problem}. Nothing was searched; fix the arguments and call "
                         "again."})
        key = search_key(call["arguments"])
        first = info.cites.searches.get(key)
        if first is not None:
            tm = tool_message(call["id"], call["name"], ToolMessageKind.RELAY,
                              {"status": P.CallStatus.SUCCESS, "result": first[1]})
            return {**tm, "answered_from": first[0]}
        docs = self._ctx.docs()
        assert docs is not None
        t0 = time.monotonic()
        try:
            reply = await search_sections(docs, info, query)
            end: dict[str, Any] = {"status": P.CallStatus.SUCCESS, "result": reply}
            info.cites.searches[key] = (call["id"], reply)
        except Exception:
            log.exception("searching the docs of app %r failed", info.app_id)
            end = {"status": P.CallStatus.ERROR, "error": "The documentation search failed. Answer from what you have, "
                                                      "or say that you could not search the documentation."}
        ms = round((time.monotonic() - t0) * 1000, 1)
        log_calls.append({"tool": call["name"], "ok": end["status"] == P.CallStatus.SUCCESS, "ms": ms})
        return tool_message(call["id"], call["name"], ToolMessageKind.RELAY, {**end, "duration_ms": ms, "total_ms": ms})

    @staticmethod
    def suggest(cid: str, cur: Round, call: dict[str, Any]) -> CallRecord:
        """A ``suggest_followups`` call: its valid suggestions go onto the round's message (at most
        ``MAX_SUGGESTIONS`` in the round); the tool message tells the model what was shown and what was dropped and
        why (an error when nothing was shown, so the model may try again)."""
        kept, problems = check_suggestions(call["arguments"], cur.suggestions)
        cur.suggestions += kept
        note = suggestions_note(kept, problems)
        if problems:
            log.info(json.dumps({"event": "suggestions_dropped", "conversation": cid, "message_id": cur.message_id,
                                 "dropped": problems}, ensure_ascii=False))
        if not kept:
            cur.suggestions_failed = True
            return tool_message(call["id"], call["name"], ToolMessageKind.RELAY,
                                {"status": P.CallStatus.ERROR, "error": note})
        return tool_message(call["id"], call["name"], ToolMessageKind.RELAY,
                            {"status": P.CallStatus.SUCCESS, "result": note})

    def offer(self, cid: str, message_id: str, offered: list[Any], info: RoundInfo) -> dict[str, Any]:
        """The offer of a round's ``offer_actions`` call(s): at most ``MAX_ACTIONS`` declared actions
        whose arguments pass their schema (a form may lack required values), each with an id; the
        others are dropped and logged, never shown. ``note`` is what the model is told."""
        items: list[Any] = []
        dropped: list[str] = []
        for args in offered:
            listed = args.get("actions") if isinstance(args, dict) else None
            if isinstance(listed, list):
                items.extend(listed)
            else:
                dropped.append("an offer_actions call without an 'actions' list")
        kept, more = check_offer({"actions": items}, info.actions)
        dropped += more
        actions = [{"id": new_id("act_"), "name": k["name"], "arguments": k["arguments"],
                    "parameters": info.actions[k["name"]]["parameters"], "confirm": info.actions[k["name"]]["confirm"]}
                   for k in kept]
        if dropped:
            log.info(json.dumps({"event": "offer_dropped", "conversation": cid,
                                 "message_id": message_id, "dropped": dropped},
                                ensure_ascii=False))
        shown = "; ".join(f"{a['name']} {json.dumps(a['arguments'], ensure_ascii=False)}" for a in actions)
        note = f"Shown to the reader: {shown}." if actions else "Nothing was shown to the reader."
        if dropped:
            note += " Not shown: " + "; ".join(dropped) + "."
        note += " The reader decides whether to run an action; you are told the outcome when they do."
        return {"call_id": new_id("call_"), "actions": actions, "note": note}

"""Ask-user prompts: the prompt a model's ``ask_user`` call asks for, and the reader's answers to it."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, cast

from ... import protocol as P
from ...core.ask_user import answer_problem, short
from ...errors import ProtocolError
from ...protocol import AskUserType, CallState, ConversationStatus
from ...protocol.messages import AskUserArguments, AskUserPrompt
from ..storage import store as S
from .context import Spawn
from .runtime import Runtimes
from .skeleton import key_reused_message, unstorable

#: The kind an ask-user answer's idempotency key is stored for (the other kinds are socket event names).
ASK_USER_WRITE = "ask_user"
PROMPT_TYPES = tuple(AskUserType)
#: Bounds on an ask-user prompt the model writes (a prompt over them is refused to the model).
PROMPT_MAX_QUESTION_CHARS = 2000
PROMPT_MAX_OPTIONS = 50
PROMPT_MAX_LABEL_CHARS = 200


def prompt_from(call: dict[str, Any]) -> tuple[AskUserPrompt | None, str]:
    """The reader-facing prompt of a model's ``ask_user`` call, keeping only known fields; or ``None``
    and what is wrong with the call (answered to the model, never shown)."""
    a = call["arguments"]
    if not isinstance(a, dict):
        return None, "the arguments must be a JSON object"
    t = a.get("type")
    if t not in PROMPT_TYPES:
        return None, f"type must be one of {', '.join(PROMPT_TYPES)} (got {short(t)})"
    q = a.get("question")
    if not isinstance(q, str) or not q.strip():
        return None, "question must be a non-empty string"
    if len(q) > PROMPT_MAX_QUESTION_CHARS:
        return None, f"question must be at most {PROMPT_MAX_QUESTION_CHARS} characters"
    extra = a.get("arguments")
    if extra is None:
        extra = {}
    if not isinstance(extra, dict):
        return None, "arguments must be an object"
    args: dict[str, Any] = {}
    allowed = {AskUserType.BOOL: ("yes_label", "no_label"), AskUserType.TEXT: ("placeholder",)}.get(t, ())
    for k in allowed:
        if extra.get(k) is not None:
            if not isinstance(extra[k], str) or len(extra[k]) > PROMPT_MAX_LABEL_CHARS:
                return None, f"arguments.{k} must be a string of at most {PROMPT_MAX_LABEL_CHARS} characters"
            args[k] = extra[k]
    if t == AskUserType.TEXT and extra.get("multiline") is not None:
        if not isinstance(extra["multiline"], bool):
            return None, "arguments.multiline must be true or false"
        args["multiline"] = extra["multiline"]
    if t in (AskUserType.RADIOLIST, AskUserType.CHECKLIST):
        options = extra.get("options")
        if not isinstance(options, list) or not options:
            return None, f"a {t} prompt needs arguments.options, a non-empty list of {{value, label}}"
        if len(options) > PROMPT_MAX_OPTIONS:
            return None, f"a {t} prompt may have at most {PROMPT_MAX_OPTIONS} options"
        clean, seen = [], set()
        for i, o in enumerate(options):
            if not isinstance(o, dict):
                return None, f"arguments.options[{i}] must be an object {{value, label}}"
            value, label = o.get("value"), o.get("label")
            if not isinstance(value, str) or not value:
                return None, f"arguments.options[{i}].value must be a non-empty string"
            if not isinstance(label, str) or not label.strip() or len(label) > PROMPT_MAX_LABEL_CHARS:
                return (
                    None,
                    f"arguments.options[{i}].label must be a non-empty string of at most "
                    f"{PROMPT_MAX_LABEL_CHARS} characters",
                )
            if value in seen:
                return None, f"option value {short(value)} appears twice; values must be unique"
            seen.add(value)
            clean.append({"value": value, "label": label})
        args["options"] = clean
    prompt: AskUserPrompt = {"id": call["id"], "type": AskUserType(t), "question": q}
    if args:
        prompt["arguments"] = cast(AskUserArguments, args)  # only the type's known keys, each checked above
    return prompt, ""


def check_answer(prompt: dict[str, Any], result: Any) -> None:
    """Refuse an answer that does not fit its prompt (the client's own check, as ``bad_request``)."""
    problem = answer_problem(prompt, result)
    if problem is not None:
        raise ProtocolError(P.ErrorCode.BAD_REQUEST, problem)


@dataclass(frozen=True)
class AnswersContext:
    """What storing the reader's answers uses."""

    store: S.Store
    runtimes: Runtimes
    #: this relay process's instance id (it runs the resumed turn)
    instance: str
    spawn: Spawn
    #: the turn resumed with the answers, from round ``iteration`` (``TurnRunner.run_turn`` with ``resume=True``)
    resume_turn: Callable[[str, str, int], Coroutine[Any, Any, None]]


async def answer_prompts(
    ctx: AnswersContext, cid: str, answers: list[dict[str, Any]], idempotency: S.Ack | None = None
) -> None:
    """Check and store ask-user answers (all or none); resume the turn once every pending prompt is
    answered."""
    problem = unstorable([answers, idempotency[0] if idempotency is not None else None])
    if problem is not None:  # the HTTP entry point: the same check the socket handlers get
        raise ProtocolError(P.ErrorCode.BAD_REQUEST, problem)
    store = ctx.store
    if idempotency is not None:
        idempotency = (idempotency[0], idempotency[1], ASK_USER_WRITE)
    with ctx.runtimes.using(cid) as rt:
        async with rt.lock:
            try:
                if idempotency is not None and await store.get_ack(cid, idempotency[0], ASK_USER_WRITE) is not None:
                    return  # a repeat of a POST already applied
            except S.IdempotencyConflict as exc:
                raise ProtocolError(
                    P.ErrorCode.IDEMPOTENCY_KEY_REUSED, key_reused_message(exc.kind, ASK_USER_WRITE)
                ) from None
            conv = await store.get_conversation(cid)
            if conv is None:
                raise ProtocolError(P.ErrorCode.NOT_FOUND, "Unknown conversation.")
            pending = {p["id"]: p for p in await store.pending_prompts(cid)}
            if conv["status"] != ConversationStatus.WAITING_FOR_ASK_USER or not pending:
                raise ProtocolError(P.ErrorCode.BAD_REQUEST, "The conversation is not waiting for ask-user answers.")
            seen: set[str] = set()
            for a in answers:
                if a["id"] in seen:
                    raise ProtocolError(
                        P.ErrorCode.BAD_REQUEST,
                        f"Prompt {a['id']!r} is answered twice in this request; answer each prompt once.",
                    )
                seen.add(a["id"])
            unknown = [a["id"] for a in answers if a["id"] not in pending]
            if unknown:
                statuses = await store.prompt_statuses(cid, unknown)
                pid = unknown[0]
                if statuses.get(pid) in (CallState.ANSWERED, S.PROMPT_TAKEN):
                    raise ProtocolError(
                        P.ErrorCode.BAD_REQUEST, f"Prompt {pid!r} was already answered; each prompt is answered once."
                    )
                raise ProtocolError(
                    P.ErrorCode.BAD_REQUEST,
                    f"No pending prompt has id {pid!r} (pending: {', '.join(sorted(pending))}).",
                )
            for a in answers:
                check_answer(pending[a["id"]], a["result"])
            if not await store.answer_prompts(cid, [(a["id"], a["result"]) for a in answers], idempotency):
                raise ProtocolError(P.ErrorCode.BAD_REQUEST, "Those prompts are no longer pending.")
            if await store.pending_prompts(cid):
                return
            # Conditional: when the last answers reach two processes at once, one of them resumes.
            if not await store.claim_status(
                cid, [ConversationStatus.WAITING_FOR_ASK_USER], status=ConversationStatus.RUNNING, runner=ctx.instance
            ):
                return
            rt.turn = ctx.spawn(ctx.resume_turn(cid, conv["turn_id"], conv["iteration"] + 1))

"""Model adapters: the interface the model loop streams from, and the guard every stream runs through.

An adapter turns a :class:`ModelRequest` (OpenAI-style chat messages plus a tool catalogue) into an async
stream of :class:`TextDelta` and :class:`ToolCall` chunks, or raises :class:`ModelError`. The relay never
consumes an adapter's stream directly: :func:`guarded` bounds it (turn deadline, stalls, answer length, tool
calls per response) and always closes it, so a Stop or a limit never leaves a provider connection open.
The adapters live in :mod:`.demo_model` (offline, deterministic) and :mod:`.openai_model`; :mod:`.adapters`
picks one by configuration.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from ...errors import WidgetError
from ...protocol.names import AskUserType, RelayTool, TurnErrorCode
from ..tools import COMMON_KEYWORDS

log = logging.getLogger("widget.relay")

ASK_USER_TOOL = RelayTool.ASK_USER.value

#: The relay's own ``ask_user`` tool (the prompt shape of the client's ask-user API; one call = one prompt).
ASK_USER_SPEC: dict[str, Any] = {
    "name": ASK_USER_TOOL,
    "description": (
        "Ask the reader a question and wait for the answer. Use it only when you need a decision or "
        "information only the reader has. type: text | bool | radiolist | checklist; radiolist and "
        "checklist need arguments.options [{value, label}]."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": [t.value for t in AskUserType]},
            "question": {"type": "string"},
            "arguments": {
                "type": "object",
                "properties": {
                    "yes_label": {"type": "string"},
                    "no_label": {"type": "string"},
                    "placeholder": {"type": "string"},
                    "multiline": {"type": "boolean"},
                    "options": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"value": {"type": "string"}, "label": {"type": "string"}},
                            "required": ["value", "label"],
                        },
                    },
                },
            },
        },
        "required": ["type", "question"],
    },
}


@dataclass
class TextDelta:
    """A piece of the answer's text (empty pieces are keep-alives: they carry nothing)."""

    text: str


@dataclass
class ToolCall:
    """One tool call of a model response."""

    name: str
    arguments: Any  # a dict when the model produced valid JSON, else the raw string
    provider_id: str | None = None


@dataclass
class Usage:
    """What one model response cost, from the provider's usage fields (None: the provider did not say).

    An adapter yields it once, at the end of a response, when the provider reports usage; counts only,
    never text (it goes to the turn log, ``stats`` and the tracing spans)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    #: Input tokens the provider read from its prompt cache (part of ``input_tokens``).
    cached_input_tokens: int | None = None
    #: Output tokens spent on reasoning the reader never sees (part of ``output_tokens``).
    reasoning_tokens: int | None = None
    #: Input tokens the provider wrote to its prompt cache (part of ``input_tokens``; Anthropic bills them above the
    #: base price). The turn log shows them; the ``usage`` table and ``stats`` count them in ``input_tokens`` only.
    #: (Last, so that the fields before it keep their positions.)
    cache_write_tokens: int | None = None


Chunk = TextDelta | ToolCall | Usage


@dataclass
class ModelRequest:
    """What one model request carries."""

    #: OpenAI Chat Completions messages (system, user, assistant with tool_calls, tool).
    messages: list[dict[str, Any]]
    #: ``[{name, description, parameters}]`` — the client's functions plus the relay's own tools.
    tools: list[dict[str, Any]] = field(default_factory=list)
    conversation_id: str = ""
    turn_id: str = ""
    #: How many answers to the current user message were withdrawn before (by retry or regenerate): 0 for
    #: the first answer. Real models ignore it; the demo model answers differently for each attempt.
    attempt: int = 0


class ModelError(WidgetError):
    """A model failure the reader should see (rate limit, overflow, provider down, bad key...)."""

    def __init__(self, code: TurnErrorCode, message: str, retryable: bool = True,
                 retry_after: float | None = None) -> None:
        super().__init__(message, code=code)
        self.retryable = retryable
        #: Seconds the provider asked to wait before the next request (its ``Retry-After``), when it said.
        self.retry_after = retry_after


#: What the reader reads when a provider's reply cannot be read (``model_bad_response``).
UNREADABLE_REPLY = "The model sent a reply the relay could not read."
#: What a reply that cannot be read raises: a chunk the SDK or the adapter could not read (bad JSON, a missing field).
UNREADABLE = (ValueError, TypeError, AttributeError, KeyError)


def unreadable_reply(model: str, exc: BaseException) -> ModelError:
    """The error for a provider reply the adapter could not read: one log line (no traceback), a clear error."""
    log.warning("model %s sent a reply the relay could not read: %s: %s", model, type(exc).__name__, str(exc)[:200])
    return ModelError(TurnErrorCode.MODEL_BAD_RESPONSE, UNREADABLE_REPLY)


class ModelAdapter(abc.ABC):
    """The interface of a model: one streamed response per request."""

    name: str = "model"
    #: Constraint keywords this provider's strict tool schemas may carry besides types and nullability
    #: (docs/protocol.md §8); the relay leaves the others out of what the model sees (and says them in
    #: the property's description). ``enum`` is taken by every strict mode.
    schema_keywords: frozenset[str] = COMMON_KEYWORDS
    #: The ``format`` values a kept ``format`` keyword may have.
    schema_formats: frozenset[str] = frozenset()

    @abc.abstractmethod
    def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        """Yield the answer's text deltas and tool calls, in order; close the provider connection when
        the iterator is closed early."""

    async def aclose(self) -> None:
        """Release the adapter's resources (the relay calls it at shutdown)."""
        return None


@dataclass(frozen=True)
class StreamLimits:
    """The bounds one model response is held to (settings in ``RelayConfig``; docs/security.md)."""

    #: ``time.monotonic()`` by which the whole turn must have ended (None: no deadline).
    deadline: float | None = None
    #: The longest wait for a chunk that carries something; keep-alives and empty deltas do not count.
    stall_s: float = 60.0
    #: Characters of answer text one response may stream.
    max_answer_chars: int = 100_000
    #: Tool calls one response may make; a response over it runs none of them.
    max_tool_calls: int = 16


async def guarded(stream: AsyncIterator[Chunk], limits: StreamLimits,
                  clock: Callable[[], float] = time.monotonic) -> AsyncIterator[Chunk]:
    """``stream`` within ``limits``: a :class:`ModelError` when a bound is passed, and the stream closed in
    every case (done, failed, cancelled by Stop), so the provider's connection never outlives the turn.

    Text past ``max_answer_chars`` is cut at the bound before the error; tool calls are held back until
    the response ends, so a response over ``max_tool_calls`` runs none of them."""
    calls: list[ToolCall] = []
    chars = 0
    it = stream.__aiter__()
    try:
        last_progress = clock()
        while True:
            now = clock()
            wait = last_progress + limits.stall_s - now
            if limits.deadline is not None:
                wait = min(wait, limits.deadline - now)
            if wait <= 0:
                raise _timeout(limits, clock())
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation (Stop) that
                # arrives together with a chunk, and the stream would go on.
                async with asyncio.timeout(wait):
                    chunk = await it.__anext__()
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise _timeout(limits, clock()) from None
            if isinstance(chunk, ToolCall):
                calls.append(chunk)
                if len(calls) > limits.max_tool_calls:
                    raise ModelError(
                        TurnErrorCode.TOO_MANY_TOOL_CALLS,
                        f"The model asked for more than {limits.max_tool_calls} tool calls in one response; none were "
                        "run.",
                    )
                last_progress = clock()
            elif isinstance(chunk, Usage):
                yield chunk
            elif chunk.text:
                room = limits.max_answer_chars - chars
                if len(chunk.text) >= room:
                    if room > 0:
                        yield TextDelta(chunk.text[:room])
                    raise ModelError(TurnErrorCode.ANSWER_TOO_LONG,
                                     f"The answer passed {limits.max_answer_chars} characters and was cut there.")
                chars += len(chunk.text)
                yield chunk
                last_progress = clock()  # time the relay spends on a chunk is not the model stalling
        for call in calls:
            yield call
    finally:
        aclose = getattr(it, "aclose", None)
        if aclose is not None:
            await aclose()


def _timeout(limits: StreamLimits, now: float) -> ModelError:
    if limits.deadline is not None and now >= limits.deadline - 1e-3:
        return ModelError(TurnErrorCode.MODEL_TIMEOUT, "The answer took longer than the relay allows for one turn.")
    return ModelError(TurnErrorCode.MODEL_TIMEOUT, f"The model sent nothing for {limits.stall_s:g} s.")

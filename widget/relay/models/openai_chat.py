"""The OpenAI-compatible Chat Completions adapter (any compatible host: set ``base_url``).

Besides OpenAI itself it talks to the local and self-hosted servers that speak the same API (Ollama, llama.cpp's
``llama-server``, vLLM, LM Studio), reading their streams as their docs and issue trackers describe them
(docs/deployment.md, "Local servers"):

- Tool-call pieces are put together whatever the server marks: ``index`` missing (Ollama before 0.4.7) or the
  same ``index`` for every call with a new ``id`` for each (Ollama with several calls), ``id`` only on the first
  piece (OpenAI, vLLM, llama.cpp), a whole call in one chunk (Ollama), the name repeated on every piece (older
  llama.cpp), arguments sent as an object instead of a string, the legacy ``function_call`` delta.
- ``finish_reason`` is not relied upon (``tool_calls``, ``stop`` with calls, ``function_call``, ``length``, none):
  the calls are what the stream carried; a call cut short (``length``) has arguments that do not parse, which the
  relay refuses and tells the model.
- Usage: ``stream_options.include_usage`` is asked for (OpenAI and vLLM send usage only then; llama.cpp sends it
  in its last chunk anyway); usage in a chunk of its own with no choices or in the last chunk, fields missing or
  null, all read; a server that refuses ``stream_options`` is asked again without it (logged once).
- ``tool_choice`` is never sent (OpenAI's default is ``auto``; Ollama ignores it; vLLM refuses ``auto`` unless
  started with ``--enable-auto-tool-choice``, which is the tools refusal below).
- A server or model that refuses ``tools`` (Ollama's "... does not support tools", llama.cpp's "tools param
  requires --jinja flag" or "Unsupported param: tools", vLLM's '"auto" tool choice requires
  --enable-auto-tool-choice') switches the model to tools as text (:mod:`.tools_text`) for the rest of the
  process, logged once, and the request is sent again that way.
- The system messages a request starts with (the relay's prompt, citation rules, page context) go as one to any
  host but OpenAI: many chat templates of local models take a single system message.
- ``max_tokens`` goes as ``max_completion_tokens`` to OpenAI (its reasoning models refuse ``max_tokens``) and as
  ``max_tokens`` to any other host (what the local servers read).
"""

from __future__ import annotations

import email.utils
import json
import logging
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from ...errors import ConfigError
from ...protocol import TurnErrorCode
from ..config import ModelConfig
from .base import (
    UNREADABLE,
    Chunk,
    ModelAdapter,
    ModelError,
    ModelRequest,
    TextDelta,
    ToolCall,
    Usage,
    unreadable_reply,
)
from .tools_text import parse_calls, text_request

log = logging.getLogger("widget.relay")

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: How the servers word a refusal of ``tools`` (Ollama, llama.cpp, vLLM, and the generic wordings).
_TOOLS_REFUSED = re.compile(
    r"does not support tools|tools param requires --jinja|unsupported param: tools|"
    r"tool choice requires --enable-auto-tool-choice|tools? (?:are|is) not supported|"
    r"does not support (?:function|tool)[ _-]?call",
    re.IGNORECASE,
)
#: The longest wait a provider's ``Retry-After`` is taken at, seconds (a larger one is a broken header).
MAX_RETRY_AFTER_S = 3600.0


def retry_after_s(headers: Any) -> float | None:
    """Seconds from a response's ``retry-after-ms`` or ``Retry-After`` header (seconds or an HTTP date), or None."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return min(max(float(ms) / 1000, 0.0), MAX_RETRY_AFTER_S)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER_S)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return min(max(when.timestamp() - time.time(), 0.0), MAX_RETRY_AFTER_S)


def _error_text(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    return f"{exc} {json.dumps(body, default=str) if body is not None else ''}"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def usage_of(raw: Any) -> Usage | None:
    """A :class:`Usage` from a chunk's ``usage`` (an SDK object or a dict; fields may be missing or null), or None
    when it says nothing."""
    if raw is None:
        return None

    def get(obj: Any, key: str) -> Any:
        return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)

    usage = Usage(
        input_tokens=_int(get(raw, "prompt_tokens")),
        output_tokens=_int(get(raw, "completion_tokens")),
        cached_input_tokens=_int(get(get(raw, "prompt_tokens_details"), "cached_tokens")),
        reasoning_tokens=_int(get(get(raw, "completion_tokens_details"), "reasoning_tokens")),
    )
    return None if usage == Usage() else usage


#: How a local reasoning model whose server does not separate its reasoning starts its answer, and ends the reasoning.
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
#: The most reasoning text held back before the answer: past it the response is cut (``answer_too_long``).
MAX_THINK_CHARS = 200_000


async def without_reasoning(chunks: AsyncIterator[Chunk]) -> AsyncGenerator[Chunk, None]:
    """``chunks`` without a leading ``<think>...</think>`` block (DeepSeek-R1, Qwen3 and the like on a server that
    leaves their reasoning in the answer): it is held back, never shown, and the answer starts after it. Text that
    does not start so streams as it comes (only what could still be the opening tag waits)."""
    held, deciding, thinking = "", True, False
    try:
        async for chunk in chunks:
            if not isinstance(chunk, TextDelta) or not (deciding or thinking):
                if deciding and held:  # calls or usage: the text is over, and it was not the opening tag
                    yield TextDelta(held)
                    held, deciding = "", False
                yield chunk
                continue
            held += chunk.text
            if deciding:
                start = held.lstrip()
                if THINK_OPEN.startswith(start):
                    continue  # still possibly the opening tag
                deciding = False
                if not start.startswith(THINK_OPEN):
                    yield TextDelta(held)
                    held = ""
                    continue
                thinking = True
            end = held.find(THINK_CLOSE)
            if end < 0:
                if len(held) > MAX_THINK_CHARS:
                    raise ModelError(TurnErrorCode.ANSWER_TOO_LONG,
                                     f"The model reasoned for more than {MAX_THINK_CHARS} characters without "
                                     "answering.")
                continue
            thinking = False
            rest = held[end + len(THINK_CLOSE):].lstrip()
            held = ""
            if rest:
                yield TextDelta(rest)
        if deciding and held:  # the whole answer was a prefix of the tag
            yield TextDelta(held)
    finally:  # closing this closes the provider's stream under it (Stop, a bound)
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()


def one_system_message(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with the system messages they start with joined into one (a blank line between): many local
    servers' chat templates take one system message only, and refuse or drop the others."""
    n = 0
    while n < len(messages) and messages[n].get("role") == "system" and isinstance(messages[n].get("content"), str):
        n += 1
    if n < 2:
        return messages
    joined = "\n\n".join(m["content"] for m in messages[:n] if m["content"])
    return [{"role": "system", "content": joined}, *messages[n:]]


class ToolCallPieces:
    """Puts the streamed pieces of a response's tool calls together, whatever the server marks (module doc)."""

    def __init__(self) -> None:
        self.slots: list[dict[str, Any]] = []  # {"id", "name", "arguments"} in the order the calls began
        self._by_index: dict[Any, int] = {}  # the server's index -> the slot its pieces go to now

    def _new(self, key: Any) -> dict[str, Any]:
        self.slots.append({"id": None, "name": "", "arguments": ""})
        self._by_index[key] = len(self.slots) - 1
        return self.slots[-1]

    def _slot(self, index: Any, call_id: str | None, name: str | None) -> dict[str, Any]:
        if index is not None:
            pos = self._by_index.get(index)
            if pos is None:
                return self._new(index)
            slot = self.slots[pos]
            if call_id and slot["id"] and call_id != slot["id"]:
                return self._new(index)  # the same index for every call (Ollama): a new id is a new call
            return slot
        last = self.slots[-1] if self.slots else None
        if last is None:
            return self._new(None)
        if call_id and last["id"] and call_id != last["id"]:
            return self._new(None)
        if call_id and not last["id"] and last["name"] and last["arguments"]:
            return self._new(None)
        if not call_id and name and last["name"] and name != last["name"]:
            return self._new(None)
        return last

    def add(self, index: Any, call_id: str | None, name: str | None, arguments: Any) -> None:
        """One piece of a call."""
        slot = self._slot(index, call_id, name)
        if call_id:
            slot["id"] = call_id
        if name and name != slot["name"]:  # a name sent again on each piece is not appended
            slot["name"] += name
        if arguments is not None and arguments != "":
            slot["arguments"] += arguments if isinstance(arguments, str) else json.dumps(arguments)

    def calls(self) -> list[ToolCall]:
        """The calls, arguments parsed (the raw string when they are not JSON: the relay refuses them)."""
        out = []
        for slot in self.slots:
            raw = slot["arguments"] or "{}"
            try:
                args: Any = json.loads(raw)
            except ValueError:
                args = raw
            out.append(ToolCall(slot["name"], args, provider_id=slot["id"]))
        return out


class OpenAIAdapter(ModelAdapter):
    """Streams Chat Completions with tool calls through the official ``openai`` SDK."""

    name = "openai"

    def __init__(self, cfg: ModelConfig) -> None:
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ConfigError("the openai adapter needs the 'openai' package (pip install "
                              "autopilot-widget[openai])") from exc
        self._openai = openai
        self.cfg = cfg
        #: Tools as text (configured, or switched on when the server refused ``tools``).
        self.text_tools = cfg.tool_calling == "text"
        #: Ask for usage with ``stream_options`` (off once a server refused it).
        self.ask_usage = True
        #: OpenAI itself (not a compatible host): ``max_completion_tokens``.
        self.official = cfg.base_url is None or "api.openai.com" in cfg.base_url
        if cfg.strict_tools:
            # What OpenAI's strict mode (Structured Outputs) takes besides types: enum; format (of ours:
            # email, date, date-time); minimum/maximum; maxItems. Not minLength/maxLength.
            self.schema_keywords = frozenset({"enum", "format", "minimum", "maximum", "maxItems"})
            self.schema_formats = frozenset({"email", "date", "date-time"})
        self.client = openai.AsyncOpenAI(
            base_url=cfg.base_url,
            api_key=cfg.api_key or "unused",
            timeout=cfg.request_timeout_s,
            max_retries=cfg.max_retries,
        )

    async def aclose(self) -> None:
        await self.client.close()

    def _error(self, exc: Exception) -> ModelError:
        o = self._openai
        after = retry_after_s(getattr(getattr(exc, "response", None), "headers", None))
        if isinstance(exc, o.RateLimitError):
            return ModelError(TurnErrorCode.MODEL_RATE_LIMITED,
                              "The model provider is rate limiting requests; try again shortly.", retry_after=after)
        if isinstance(exc, (o.AuthenticationError, o.PermissionDeniedError)):
            return ModelError(TurnErrorCode.MODEL_AUTH,
                              "The relay's model API key was refused by the provider.", retryable=False)
        if isinstance(exc, o.BadRequestError):
            text = str(exc).lower()
            if getattr(exc, "code", None) == "context_length_exceeded" or (
                "context" in text and ("length" in text or "window" in text or "too long" in text)):
                return ModelError(TurnErrorCode.CONTEXT_OVERFLOW,
                                  "The conversation is too long for the model's context window.")
            return ModelError(TurnErrorCode.MODEL_ERROR, "The model provider refused the request.")
        if isinstance(exc, (o.APIConnectionError, o.APITimeoutError)):
            return ModelError(TurnErrorCode.MODEL_UNAVAILABLE, "The model provider could not be reached.")
        if isinstance(exc, o.InternalServerError):
            return ModelError(TurnErrorCode.MODEL_UNAVAILABLE, "The model provider is down or overloaded.",
                              retry_after=after)
        return ModelError(TurnErrorCode.MODEL_ERROR, "The model request failed.")

    def _request_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        messages = request.messages if self.official else one_system_message(request.messages)
        kwargs: dict[str, Any] = {"model": self.cfg.model, "messages": messages, "stream": True}
        tools = []
        for t in request.tools:
            if not _TOOL_NAME.match(t["name"]):
                continue
            fn: dict[str, Any] = {
                "name": t["name"],
                "description": t.get("description") or "",
                "parameters": t.get("parameters") or {"type": "object", "properties": {}},
            }
            if t.get("strict") and self.cfg.strict_tools:
                fn["strict"] = True
            tools.append({"type": "function", "function": fn})
        if tools:
            kwargs["tools"] = tools
        if self.cfg.temperature is not None:
            kwargs["temperature"] = self.cfg.temperature
        if self.cfg.max_tokens is not None:
            kwargs["max_completion_tokens" if self.official else "max_tokens"] = self.cfg.max_tokens
        if self.ask_usage:
            kwargs["stream_options"] = {"include_usage": True}
        return kwargs

    async def _open(self, request: ModelRequest) -> tuple[bool, Any]:
        """``(tools as text, the SDK's stream)``; a refusal of ``tools`` or ``stream_options`` is answered by
        switching it off for this model and asking again (each at most once, so this ends)."""
        while True:
            text = self.text_tools
            kwargs = self._request_kwargs(text_request(request) if text else request)
            try:
                return text, await self.client.chat.completions.create(**kwargs)
            except self._openai.APIStatusError as exc:
                said = _error_text(exc)
                if not text and "tools" in kwargs and exc.status_code in (400, 422, 500, 501) \
                        and _TOOLS_REFUSED.search(said):
                    self.text_tools = True
                    log.warning("model %s: the server refused tools (HTTP %s: %s); switched to tool_calling = "
                                "\"text\" until the relay restarts (set it in [models.<name>] to skip the refusal)",
                                self.cfg.model, exc.status_code, str(exc)[:200])
                    continue
                if "stream_options" in kwargs and exc.status_code in (400, 422) and "stream_options" in said:
                    self.ask_usage = False
                    log.warning("model %s: the server refused stream_options (HTTP %s); asking without it "
                                "(no usage unless the server sends it anyway)", self.cfg.model, exc.status_code)
                    continue
                raise self._error(exc) from exc
            except self._openai.APIError as exc:
                raise self._error(exc) from exc

    async def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        text, stream = await self._open(request)
        chunks = without_reasoning(self._read(stream))
        if text:
            chunks = parse_calls(chunks)
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            await chunks.aclose()

    async def _read(self, stream: Any) -> AsyncGenerator[Chunk, None]:
        pieces = ToolCallPieces()
        usage: Usage | None = None
        try:
            async for chunk in stream:
                usage = usage_of(getattr(chunk, "usage", None)) or usage
                choices = getattr(chunk, "choices", None)
                if not choices:
                    continue
                delta = getattr(choices[0], "delta", None)
                if delta is None:
                    continue
                content = getattr(delta, "content", None)
                if content:
                    yield TextDelta(content)
                for tc in getattr(delta, "tool_calls", None) or []:
                    fn = getattr(tc, "function", None)
                    pieces.add(getattr(tc, "index", None), getattr(tc, "id", None), getattr(fn, "name", None),
                               getattr(fn, "arguments", None))
                legacy = getattr(delta, "function_call", None)  # the deprecated functions API
                if legacy is not None:
                    pieces.add("function_call", None, getattr(legacy, "name", None),
                               getattr(legacy, "arguments", None))
        except self._openai.APIError as exc:
            raise self._error(exc) from exc
        except UNREADABLE as exc:
            raise unreadable_reply(self.cfg.model, exc) from exc
        finally:
            # Closing the response ends the provider's generation (and its billing) when the turn stops
            # early: on Stop, a deadline or a limit the relay's guard closes this generator.
            await stream.close()
        for call in pieces.calls():
            yield call
        if usage is not None:
            yield usage

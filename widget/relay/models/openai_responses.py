"""The OpenAI Responses API adapter (``adapter = "openai-responses"``): function tools together with reasoning.

Requests are stateless (``store: false``): each request carries the whole conversation as ``input`` items,
converted from the relay's Chat-style messages (system messages → ``instructions``; user and assistant
messages; an assistant's ``tool_calls`` → ``function_call`` items; tool results → ``function_call_output``).

Reasoning (``reasoning_effort`` set, for reasoning models): the adapter asks for ``reasoning.effort`` and for the
encrypted reasoning (``include: ["reasoning.encrypted_content"]``). Reasoning is never shown to the reader and
never stored in the conversation: a response's output items (its reasoning, text and function calls as the
provider returned them) are kept in a bounded cache in this adapter, keyed by conversation and turn, and put
back in place of the relay's rebuilt tool-call messages in the turn's next requests, so the model goes on from
its own reasoning after a tool result (OpenAI's documented way for reasoning with tool calls and
``store: false``). A round is put back only when the relay's message has exactly the calls of the cached
response (by name); otherwise, after a relay restart, or once the cache evicted the turn, the request carries
the plain calls and results, which the API takes too (the model reasons again from them).
The cache keeps at most ``CACHE_TURNS`` turns and ``CACHE_CHARS`` characters (least recently used turns go first).
Reasoning summaries are not requested in this version: the wire protocol has no event that could show one to
the reader, so the adapter never sends ``reasoning.summary`` and ignores reasoning and summary events. While a
reasoning model thinks, the stream carries nothing for the reader: the relay's stall bound
(``model_stall_timeout_s``) counts that silence, so a high effort may need a longer one.

A response cut short (``response.incomplete``: ``max_output_tokens`` or the content filter) keeps its text; a
call cut inside it never runs; with neither text nor calls it is a ``model_error``.
"""

from __future__ import annotations

import json
import logging
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
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
from .openai_chat import retry_after_s

log = logging.getLogger("widget.relay")

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: Turns whose responses the reasoning cache keeps (least recently used ones go first) ...
CACHE_TURNS = 256
#: ... and the characters of output items it keeps across them (encrypted reasoning is a few KB an item).
CACHE_CHARS = 8_000_000
#: Events that end a response.
_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


@dataclass
class _Call:
    """A function call being streamed (one ``function_call`` output item)."""

    item_id: str | None = None
    call_id: str | None = None
    name: str = ""
    arguments: str = ""
    done: bool = False
    status: str | None = None


@dataclass
class _Round:
    """One response of a turn that made function calls: its output items as input items, and its calls."""

    items: list[dict[str, Any]]
    #: ``(name, call_id)`` of each function call, in output order.
    calls: list[tuple[str, str]]
    chars: int = 0


@dataclass
class _Output:
    """What one streamed response produced, by output index."""

    calls: dict[int, _Call] = field(default_factory=dict)
    #: Output items to pass back (reasoning, assistant message, function call), by output index.
    items: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: A reasoning item came without its encrypted content (it cannot be passed back with ``store: false``).
    opaque_reasoning: bool = False
    usage: Usage | None = None
    terminal: str | None = None
    incomplete_reason: str | None = None
    #: The response streamed some answer text.
    text: bool = False


def _get(obj: Any, key: str) -> Any:
    """A field of an SDK model or of a plain dict (the SDK builds unknown shapes as dicts)."""
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _text(content: Any) -> str:
    """A Chat message's content as text (a string, None, or a list of text parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, Mapping))
    return json.dumps(content, ensure_ascii=False)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def error_for_code(code: str | None, message: str, wait: float | None = None) -> ModelError:
    """Our error for an error the provider named by its ``code`` (an ``error`` event, a failed response, an
    error body); the provider's own text goes to the log, never to the reader."""
    code = (code or "").lower()
    text = message.lower()
    if code == "insufficient_quota":
        return ModelError(TurnErrorCode.MODEL_AUTH, "The relay's account with the model provider has no quota left.",
                          retryable=False)
    if code in ("rate_limit_exceeded", "rate_limit_error") or "rate limit" in text:
        return ModelError(TurnErrorCode.MODEL_RATE_LIMITED,
                          "The model provider is rate limiting requests; try again shortly.", retry_after=wait)
    if code in ("invalid_api_key", "authentication_error", "permission_denied"):
        return ModelError(TurnErrorCode.MODEL_AUTH, "The relay's model API key was refused by the provider.",
                          retryable=False)
    if code == "context_length_exceeded" or ("context" in text and (
            "length" in text or "window" in text or "too long" in text)):
        return ModelError(TurnErrorCode.CONTEXT_OVERFLOW,
                          "The conversation is too long for the model's context window.")
    if code in ("server_error", "server_is_overloaded", "overloaded", "service_unavailable"):
        return ModelError(TurnErrorCode.MODEL_UNAVAILABLE, "The model provider is down or overloaded.",
                          retry_after=wait)
    return ModelError(TurnErrorCode.MODEL_ERROR, "The model provider could not answer.")


class OpenAIResponsesAdapter(ModelAdapter):
    """Streams OpenAI's Responses API (function tools, parallel calls, reasoning) through the official SDK."""

    name = "openai-responses"

    def __init__(self, cfg: ModelConfig) -> None:
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ConfigError("the openai-responses adapter needs the 'openai' package (pip install "
                              "autopilot-widget[openai])") from exc
        self._openai = openai
        self.cfg = cfg
        if cfg.strict_tools:
            # What OpenAI's strict mode (Structured Outputs) takes besides types, as in the chat adapter.
            self.schema_keywords = frozenset({"enum", "format", "minimum", "maximum", "maxItems"})
            self.schema_formats = frozenset({"email", "date", "date-time"})
        self.client = openai.AsyncOpenAI(
            base_url=cfg.base_url,
            api_key=cfg.api_key or "unused",
            timeout=cfg.request_timeout_s,
            max_retries=cfg.max_retries,
        )
        #: (conversation id, turn id) -> the turn's responses with function calls, oldest first.
        self._rounds: OrderedDict[tuple[str, str], list[_Round]] = OrderedDict()
        self._cached_chars = 0

    async def aclose(self) -> None:
        await self.client.close()

    # --- the request ---------------------------------------------------------------------------------------

    def _tools(self, request: ModelRequest) -> list[dict[str, Any]]:
        tools = []
        for t in request.tools:
            if not _TOOL_NAME.match(t["name"]):
                continue
            tools.append({
                "type": "function",
                "name": t["name"],
                "description": t.get("description") or "",
                "parameters": t.get("parameters") or {"type": "object", "properties": {}},
                # Always said: the Responses API takes a function tool as strict when ``strict`` is left out,
                # and the relay's own and MCP tools have schemas strict mode refuses.
                "strict": bool(t.get("strict")) and self.cfg.strict_tools,
            })
        return tools

    def _input(self, request: ModelRequest) -> tuple[str | None, list[dict[str, Any]]]:
        """``instructions`` and ``input`` items of a request; a turn's cached responses put back in place."""
        messages = request.messages
        start = 0
        system: list[str] = []
        while start < len(messages) and messages[start].get("role") == "system":
            system.append(_text(messages[start].get("content")))
            start += 1
        replaced = self._matched_rounds(request)
        provider_ids: dict[str, str] = {}  # the relay's call id -> the provider's, in a put-back round
        items: list[dict[str, Any]] = []
        for index in range(start, len(messages)):
            m = messages[index]
            role = m.get("role")
            if role in ("system", "user"):
                items.append({"role": role, "content": _text(m.get("content"))})
            elif role == "assistant":
                if index in replaced:
                    cached, ids = replaced[index]
                    items.extend(cached.items)
                    provider_ids.update(ids)
                    continue
                text = _text(m.get("content"))
                if text:
                    items.append({"role": "assistant", "content": text})
                for tc in m.get("tool_calls") or []:
                    fn = tc.get("function") or {}
                    items.append({"type": "function_call", "call_id": tc["id"], "name": fn.get("name") or "",
                                  "arguments": fn.get("arguments") or "{}"})
            elif role == "tool":
                call_id = str(m.get("tool_call_id"))
                items.append({"type": "function_call_output", "call_id": provider_ids.get(call_id, call_id),
                              "output": _text(m.get("content"))})
        return ("\n\n".join(system) if system else None), items

    def _matched_rounds(self, request: ModelRequest) -> dict[int, tuple[_Round, dict[str, str]]]:
        """Message index -> (cached response, relay call id -> provider call id) for the assistant messages of
        the current turn that match its cached responses. Matched from the latest back: the cache holds the
        turn's most recent responses (after a restart, only those since)."""
        key = (request.conversation_id, request.turn_id)
        rounds = self._rounds.get(key)
        if not rounds or not request.turn_id:
            return {}
        self._rounds.move_to_end(key)
        messages = request.messages
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        first = users[-1] + 1 if users else 0
        asked = [i for i in range(first, len(messages))
                 if messages[i].get("role") == "assistant" and messages[i].get("tool_calls")]
        out: dict[int, tuple[_Round, dict[str, str]]] = {}
        for index, cached in zip(reversed(asked), reversed(rounds), strict=False):
            ids = _pair(cached, messages[index]["tool_calls"])
            if ids is None:
                break
            out[index] = (cached, ids)
        return out

    def _request_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        instructions, items = self._input(request)
        kwargs: dict[str, Any] = {"model": self.cfg.model, "input": items, "stream": True, "store": False}
        if instructions is not None:
            kwargs["instructions"] = instructions
        tools = self._tools(request)
        if tools:
            kwargs["tools"] = tools
        if self.cfg.temperature is not None:
            kwargs["temperature"] = self.cfg.temperature
        if self.cfg.max_tokens is not None:
            kwargs["max_output_tokens"] = self.cfg.max_tokens
        if self.cfg.reasoning_effort is not None:
            kwargs["reasoning"] = {"effort": self.cfg.reasoning_effort}
            kwargs["include"] = ["reasoning.encrypted_content"]
        return kwargs

    # --- errors --------------------------------------------------------------------------------------------

    def _error(self, exc: Exception) -> ModelError:
        o = self._openai
        response = getattr(exc, "response", None)
        wait = retry_after_s(getattr(response, "headers", None))
        code = getattr(exc, "code", None)
        if isinstance(exc, o.RateLimitError):
            if code == "insufficient_quota":
                return error_for_code(code, str(exc))
            return ModelError(TurnErrorCode.MODEL_RATE_LIMITED,
                              "The model provider is rate limiting requests; try again shortly.", retry_after=wait)
        if isinstance(exc, (o.AuthenticationError, o.PermissionDeniedError)):
            return ModelError(TurnErrorCode.MODEL_AUTH,
                              "The relay's model API key was refused by the provider.", retryable=False)
        if isinstance(exc, o.BadRequestError):
            found = error_for_code(code, str(exc))
            if found.code == TurnErrorCode.CONTEXT_OVERFLOW:
                return found
            return ModelError(TurnErrorCode.MODEL_ERROR, "The model provider refused the request.")
        if isinstance(exc, o.NotFoundError):
            return ModelError(TurnErrorCode.MODEL_ERROR, "The model provider does not know the configured model.",
                              retryable=False)
        if isinstance(exc, (o.APIConnectionError, o.APITimeoutError)):
            return ModelError(TurnErrorCode.MODEL_UNAVAILABLE, "The model provider could not be reached.")
        if isinstance(exc, o.InternalServerError):
            return ModelError(TurnErrorCode.MODEL_UNAVAILABLE, "The model provider is down or overloaded.",
                              retry_after=wait)
        if isinstance(exc, o.APIStatusError):
            return ModelError(TurnErrorCode.MODEL_ERROR, "The model request failed.")
        # An error inside the stream (the SDK raises one for an event with an ``error`` body).
        body = getattr(exc, "body", None)
        if isinstance(body, Mapping):
            return error_for_code(body.get("code") or body.get("type"), str(body.get("message") or ""))
        return error_for_code(code, str(exc))

    # --- the stream ----------------------------------------------------------------------------------------

    async def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        out = _Output()
        stream = None
        try:
            stream = await self.client.responses.create(**self._request_kwargs(request))
            async for event in stream:
                kind = _get(event, "type")
                if kind in ("response.output_text.delta", "response.refusal.delta"):
                    # A refusal is the model's answer to the reader too.
                    delta = _get(event, "delta")
                    if delta:
                        out.text = True
                        yield TextDelta(str(delta))
                elif kind in ("response.output_item.added", "response.output_item.done"):
                    self._item(out, _get(event, "output_index"), _get(event, "item"), kind.endswith("done"))
                elif kind == "response.function_call_arguments.delta":
                    _slot(out, event).arguments += str(_get(event, "delta") or "")
                elif kind == "response.function_call_arguments.done":
                    slot = _slot(out, event)
                    slot.arguments = str(_get(event, "arguments") or slot.arguments)
                elif kind in _TERMINAL:
                    self._end(out, kind, _get(event, "response"))
                    break
                elif kind == "error":
                    message = str(_get(event, "message") or "")
                    log.warning("model %s sent an error event: %s: %s", self.cfg.model, _get(event, "code"),
                                message[:200])
                    raise error_for_code(_get(event, "code"), message)
                # Reasoning text and summary events, created / in_progress and the rest carry nothing for the
                # reader: reasoning reaches the next request through the finished output items only.
        except self._openai.APIError as exc:
            log.warning("model %s request failed: %s: %s", self.cfg.model, type(exc).__name__, str(exc)[:200])
            raise self._error(exc) from exc
        except UNREADABLE as exc:
            raise unreadable_reply(self.cfg.model, exc) from exc
        finally:
            # Closing the response ends the provider's generation (and its billing) when the turn stops
            # early: on Stop, a deadline or a limit the relay's guard closes this generator.
            if stream is not None:
                await stream.close()
        if out.terminal is None:
            raise ModelError(TurnErrorCode.MODEL_BAD_RESPONSE,
                             "The model's reply ended before the provider said it was complete.")
        calls = self._finished_calls(out)
        if out.terminal == "response.incomplete" and not calls and not out.text:
            raise ModelError(TurnErrorCode.MODEL_ERROR, _incomplete_text(out.incomplete_reason))
        if (calls and out.terminal == "response.completed" and self.cfg.reasoning_effort is not None
                and not out.opaque_reasoning):
            self._remember(request, out, calls)
        for call in calls:
            raw = call.arguments or "{}"
            try:
                args: Any = json.loads(raw)
            except ValueError:
                args = raw
            yield ToolCall(call.name, args, provider_id=call.call_id)
        if out.usage is not None:
            yield out.usage

    def _item(self, out: _Output, index: Any, item: Any, done: bool) -> None:
        """An output item added or done: a function call's slot; a finished item kept to pass back."""
        if not isinstance(index, int):
            raise TypeError("an output item without output_index")
        kind = _get(item, "type")
        if kind == "function_call":
            slot = out.calls.setdefault(index, _Call())
            slot.item_id = _get(item, "id") or slot.item_id
            slot.call_id = _get(item, "call_id") or slot.call_id
            slot.name = str(_get(item, "name") or slot.name)
            if done or not slot.arguments:
                slot.arguments = str(_get(item, "arguments") or slot.arguments)
            if done:
                slot.done = True
                slot.status = _get(item, "status")
                out.items[index] = _function_call_item(slot)
        elif done and kind == "reasoning":
            encrypted = _get(item, "encrypted_content")
            if not encrypted or not _get(item, "id"):
                out.opaque_reasoning = True  # with ``store: false`` it can only go back whole
                return
            out.items[index] = {"type": "reasoning", "id": _get(item, "id"), "encrypted_content": encrypted,
                                "summary": [{"type": "summary_text", "text": str(_get(s, "text") or "")}
                                            for s in _get(item, "summary") or []]}
        elif done and kind == "message":
            parts = []
            for part in _get(item, "content") or []:
                if _get(part, "type") == "output_text":
                    parts.append({"type": "output_text", "text": str(_get(part, "text") or ""), "annotations": []})
                elif _get(part, "type") == "refusal":
                    parts.append({"type": "refusal", "refusal": str(_get(part, "refusal") or "")})
            if _get(item, "id"):
                out.items[index] = {"type": "message", "role": "assistant", "id": _get(item, "id"),
                                    "status": "completed", "content": parts}
            else:  # an input message without an id takes plain text
                text = "".join(str(_get(p, "text") or _get(p, "refusal") or "") for p in parts)
                out.items[index] = {"role": "assistant", "content": text}

    def _end(self, out: _Output, kind: str, response: Any) -> None:
        """The terminal event: usage; a failed response raised as our error; calls the events missed."""
        out.terminal = kind
        if kind == "response.failed":
            error = _get(response, "error")
            message = str(_get(error, "message") or "")
            log.warning("model %s response failed: %s: %s", self.cfg.model, _get(error, "code"), message[:200])
            raise error_for_code(_get(error, "code"), message)
        if kind == "response.incomplete":
            out.incomplete_reason = _get(_get(response, "incomplete_details"), "reason")
        usage = _get(response, "usage")
        if usage is not None:
            out.usage = Usage(
                input_tokens=_int(_get(usage, "input_tokens")),
                output_tokens=_int(_get(usage, "output_tokens")),
                cached_input_tokens=_int(_get(_get(usage, "input_tokens_details"), "cached_tokens")),
                reasoning_tokens=_int(_get(_get(usage, "output_tokens_details"), "reasoning_tokens")),
            )
        for index, item in enumerate(_get(response, "output") or []):
            # A server that sends the finished response without the item events still gives its calls.
            if _get(item, "type") == "function_call" and index not in out.calls:
                self._item(out, index, item, done=True)

    def _finished_calls(self, out: _Output) -> list[_Call]:
        """The response's calls in output order; a call the provider cut short (an incomplete response) is never
        run half-parsed."""
        calls = []
        for index in sorted(out.calls):
            call = out.calls[index]
            if out.terminal == "response.incomplete" and (not call.done or call.status == "incomplete"):
                log.warning("model %s: call %r left out, cut short (%s)", self.cfg.model, call.name,
                            out.incomplete_reason)
                continue
            calls.append(call)
        return calls

    # --- the reasoning cache -------------------------------------------------------------------------------

    def _remember(self, request: ModelRequest, out: _Output, calls: list[_Call]) -> None:
        """Keep a response with calls for the turn's next requests (within ``CACHE_TURNS`` / ``CACHE_CHARS``)."""
        if not request.turn_id or any(c.call_id is None for c in calls):
            return
        items = [out.items[i] for i in sorted(out.items)]
        chars = sum(len(json.dumps(i, ensure_ascii=False)) for i in items)
        if chars > CACHE_CHARS:
            return
        key = (request.conversation_id, request.turn_id)
        self._rounds.setdefault(key, []).append(
            _Round(items=items, calls=[(c.name, str(c.call_id)) for c in calls], chars=chars))
        self._rounds.move_to_end(key)
        self._cached_chars += chars
        while len(self._rounds) > CACHE_TURNS or self._cached_chars > CACHE_CHARS:
            _, dropped = self._rounds.popitem(last=False)
            self._cached_chars -= sum(r.chars for r in dropped)


def _slot(out: _Output, event: Any) -> _Call:
    """The call an arguments event is about (by output index, else by item id)."""
    index = _get(event, "output_index")
    if isinstance(index, int):
        return out.calls.setdefault(index, _Call(item_id=_get(event, "item_id")))
    item_id = _get(event, "item_id")
    for call in out.calls.values():
        if call.item_id == item_id:
            return call
    raise KeyError(f"arguments for an unknown function call item {item_id!r}")


def _function_call_item(call: _Call) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "function_call", "call_id": call.call_id, "name": call.name,
                            "arguments": call.arguments}
    if call.item_id:
        item["id"] = call.item_id
    return item


def _pair(cached: _Round, tool_calls: list[dict[str, Any]]) -> dict[str, str] | None:
    """The relay's call id -> the provider's, when ``tool_calls`` are exactly the cached response's calls (by
    name, in order per name; the relay stores an offer's call at the end); None otherwise."""
    pool = list(cached.calls)
    ids: dict[str, str] = {}
    for tc in tool_calls:
        name = (tc.get("function") or {}).get("name")
        at = next((i for i, (n, _) in enumerate(pool) if n == name), None)
        if at is None:
            return None
        ids[str(tc.get("id"))] = pool.pop(at)[1]
    return ids if not pool else None


def _incomplete_text(reason: str | None) -> str:
    if reason == "max_output_tokens":
        return "The model used up its answer length (max_tokens) before it answered."
    if reason == "content_filter":
        return "The model provider's content filter stopped the answer."
    return "The model stopped before it answered."

"""The Anthropic Messages adapter (``adapter = "anthropic"``), on the official ``anthropic`` SDK (the optional extra
``autopilot-widget[anthropic]``, imported only when a model uses this adapter).

Configuration (``[models.<name>]``): ``model`` (e.g. ``claude-sonnet-4-5``), ``api_key_env`` (or ``api_key``; the
SDK sends it as the API's key header), ``base_url`` (default ``https://api.anthropic.com``; the SDK posts to
``{base_url}/v1/messages``),
``max_tokens`` (Anthropic requires one: 4096 when unset), ``temperature`` (0 to 1 here), ``request_timeout_s``,
``max_retries`` (the SDK's own retries of 408/409/429/5xx/529 and dropped connections, before the turn fails; a
429's wait is its ``retry-after``), ``prompt_cache`` (on unless ``false``: :func:`mark_cache`),
``tool_calling = "text"`` (tools as text, :mod:`.tools_text`, through :func:`.adapters.make_adapter`).
``strict_tools`` does not apply: tools go without Anthropic's ``strict`` flag (not every Claude model or gateway
takes it), their schemas keep every constraint keyword the relay knows (``enum``,
``format`` email / uri / date / date-time, bounds, lengths, ``maxItems``) as guidance, and the relay checks the
arguments in code as for every provider.

What the relay's OpenAI-style request becomes (:func:`to_messages`):

- the leading ``system`` messages become the request's ``system`` prompt (joined by blank lines); a ``system``
  message later in the conversation becomes a user-role text (Anthropic has no mid-conversation system role);
- an assistant message's ``tool_calls`` become ``tool_use`` blocks after its text (their JSON arguments the
  ``input`` object); ``tool`` messages become ``tool_result`` blocks of a user message, ahead of any text there;
- consecutive messages of one role are merged into one (Anthropic wants user and assistant to alternate, and all
  results of a response's parallel calls in the next user message); empty texts are left out (Anthropic refuses
  them); a conversation that would start with the assistant starts with a short user note;
- ids are made of ``[A-Za-z0-9_-]`` (Anthropic's pattern for ``tool_use`` ids), the same mapping on both sides.

Prompt caching (:func:`mark_cache`, unless ``prompt_cache = false``): Anthropic reads a request as tools → system →
messages and caches the prefix up to each block marked ``cache_control: {"type": "ephemeral"}`` (at most 4 marks a
request, kept 5 minutes from their last use). Every round of a turn resends the same tools and system prompt and the
conversation so far plus one response, so the marks go on the last tool, on the system prompt (one text block), on
the last block of the conversation (what the next round or turn finds in the cache) and on the last block of the
message the previous request ended with (the message before the last assistant one: the entry that request wrote is
read even when the new round adds more than the 20 blocks Anthropic looks back from a mark). A prefix shorter than
the model's minimum cacheable length (Anthropic lists it per model: 1,024 to 4,096 tokens) is not cached, with no
error and nothing extra to pay.

The stream (``stream: true``, its SSE events read through the SDK): ``text_delta`` pieces become
:class:`TextDelta`; a ``tool_use`` block's ``input_json_delta`` pieces are joined and become one :class:`ToolCall`
(its ``id`` the ``provider_id``), yielded once the response ended whole; the usage of ``message_start`` and
``message_delta`` (cumulative) becomes one :class:`Usage` at ``message_stop``: ``input_tokens`` = input + cache
creation + cache read tokens, ``cached_input_tokens`` = cache read tokens, ``cache_write_tokens`` = cache creation
tokens.

Stop reasons: ``end_turn``, ``stop_sequence``, ``tool_use`` and ``pause_turn`` end the response;
``max_tokens`` is ``answer_too_long`` (the text so far stays, a tool call cut short never runs);
``model_context_window_exceeded`` is ``context_overflow``; ``refusal`` is ``model_error`` (not retryable: the same
conversation is refused again). A stream that ends before ``message_stop`` is ``model_unavailable``.

Errors (HTTP status, or the ``error`` event in the stream, by its ``error.type``): 429 ``rate_limit_error`` →
``model_rate_limited`` with the ``retry-after`` header's seconds; 401 ``authentication_error`` / 403
``permission_error`` → ``model_auth`` (not retryable); 400 whose message says the prompt is too long, and 413
``request_too_large`` → ``context_overflow``; other 4xx → ``model_error``; 529 ``overloaded_error``, 5xx
``api_error``, a refused or dropped connection, a timeout → ``model_unavailable``; an event the SDK or the adapter
cannot read → ``model_bad_response``. The provider's own wording never reaches the reader (it is logged).
"""

from __future__ import annotations

import email.utils
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from typing import Any

from ...errors import ConfigError
from ...protocol import TurnErrorCode
from ..config import ModelConfig
from ..tools import BOUNDS
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

log = logging.getLogger("widget.relay")

#: Anthropic's limit on ``max_tokens`` is required; this is what a model without ``max_tokens`` gets.
DEFAULT_MAX_TOKENS = 4096
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
#: The constraint keywords a tool schema sent to Anthropic keeps (the relay's others are said in the description).
SCHEMA_KEYWORDS: frozenset[str] = frozenset({"enum", "format", "maxItems", *BOUNDS})
#: The ``format`` values kept (``multiline`` is the relay's own: said in the description).
SCHEMA_FORMATS: frozenset[str] = frozenset({"email", "uri", "date", "date-time"})
#: The user note a conversation that would start with the assistant starts with.
CONTINUED = "(The conversation continues.)"
#: What marks a prompt-cache breakpoint (Anthropic's only kind: 5 minutes, refreshed by each read).
CACHE_CONTROL: dict[str, str] = {"type": "ephemeral"}
#: Anthropic's limit on ``cache_control`` blocks in one request.
MAX_CACHE_BREAKPOINTS = 4
#: Messages of a 400 that mean the conversation does not fit the model's context window.
_OVERFLOW = re.compile(r"prompt is too long|context (window|length)|too many tokens|exceeds? the context", re.I)


def safe_id(raw: Any) -> str:
    """A tool call id in Anthropic's pattern (``^[A-Za-z0-9_-]+$``): other characters become ``_``."""
    return _ID_UNSAFE.sub("_", str(raw or "")) or "call"


def _arguments(raw: Any) -> dict[str, Any]:
    """A stored call's arguments as the ``input`` object of a ``tool_use`` block (Anthropic takes only objects):
    JSON text is parsed; anything else is kept as text under ``_unparsed_arguments`` so the model sees what it sent."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return {"_unparsed_arguments": raw}
        if isinstance(value, dict):
            return value
    return {"_unparsed_arguments": raw if isinstance(raw, str) else json.dumps(raw)}


def _text(content: Any) -> str:
    """A chat message's content as text (a list of OpenAI content parts: their texts joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return str(content)


def to_messages(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """OpenAI Chat Completions messages → Anthropic's ``(system, messages)`` (the rules in the module docstring)."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []  # {"role", "content": [blocks]}
    leading = True
    for m in messages:
        role = m.get("role")
        blocks: list[dict[str, Any]] = []
        if role == "system":
            text = _text(m.get("content"))
            if leading:
                if text:
                    system.append(text)
                continue
            role, blocks = "user", ([{"type": "text", "text": text}] if text else [])
        elif role == "assistant":
            text = _text(m.get("content"))
            if text:
                blocks.append({"type": "text", "text": text})
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or {}
                blocks.append({"type": "tool_use", "id": safe_id(c.get("id")), "name": str(fn.get("name") or ""),
                               "input": _arguments(fn.get("arguments"))})
        elif role == "tool":
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": safe_id(m.get("tool_call_id"))}
            text = _text(m.get("content"))
            if text:
                result["content"] = text
            role, blocks = "user", [result]
        else:  # user, and any role Anthropic does not know, as the reader's words
            text = _text(m.get("content"))
            role, blocks = "user", ([{"type": "text", "text": text}] if text else [])
        leading = False
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for t in turns:
        if t["role"] == "user":  # tool results first: Anthropic reads them as the answer to the previous tool_use
            t["content"].sort(key=lambda b: b["type"] != "tool_result")
    if turns and turns[0]["role"] == "assistant":
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": CONTINUED}]})
    return "\n\n".join(system), turns


def _retry_after(headers: Any) -> float | None:
    """Seconds from a ``retry-after`` header (seconds, or an HTTP date); None when absent or unreadable."""
    if headers is None:
        return None
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(float(raw), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _error_type(body: Any) -> str | None:
    """``error.type`` of an Anthropic error body (``{"type": "error", "error": {"type", "message"}}``)."""
    if isinstance(body, dict):
        err = body.get("error")
        kind = err.get("type") if isinstance(err, dict) else None
        if isinstance(kind, str):
            return kind
    return None


def mark_cache(kwargs: dict[str, Any]) -> None:
    """Put the prompt-cache breakpoints into a built request (the module docstring says where and why): the last
    tool, the system prompt (made one text block), the last block of the message the previous request ended with
    and the last block of the conversation; at most :data:`MAX_CACHE_BREAKPOINTS`, each on its own block."""
    marked: list[dict[str, Any]] = []
    tools = kwargs.get("tools") or []
    if tools:
        marked.append(tools[-1])
    if kwargs.get("system"):
        kwargs["system"] = [{"type": "text", "text": kwargs["system"]}]
        marked.append(kwargs["system"][-1])
    messages = kwargs["messages"]
    answers = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if answers and answers[-1] > 0:  # the previous request's last message: the entry it wrote
        marked.append(messages[answers[-1] - 1]["content"][-1])
    if messages:
        marked.append(messages[-1]["content"][-1])
    for block in marked[-MAX_CACHE_BREAKPOINTS:]:
        block["cache_control"] = dict(CACHE_CONTROL)


def request_kwargs(cfg: ModelConfig, request: ModelRequest) -> dict[str, Any]:
    """The Messages API request for ``request`` (system apart, tools as ``input_schema``; no SDK needed)."""
    system, messages = to_messages(request.messages)
    kwargs: dict[str, Any] = {"model": cfg.model, "messages": messages, "stream": True,
                              "max_tokens": cfg.max_tokens or DEFAULT_MAX_TOKENS}
    if system:
        kwargs["system"] = system
    tools = []
    for t in request.tools:
        if not _TOOL_NAME.match(t["name"]):
            continue
        spec: dict[str, Any] = {
            "name": t["name"],
            "description": t.get("description") or "",
            "input_schema": t.get("parameters") or {"type": "object", "properties": {}},
        }
        tools.append(spec)
    if tools:
        kwargs["tools"] = tools
    if cfg.temperature is not None:
        kwargs["temperature"] = cfg.temperature
    if cfg.prompt_cache is not False:
        mark_cache(kwargs)
    return kwargs


class AnthropicAdapter(ModelAdapter):
    """Streams Anthropic Messages with tool use through the official ``anthropic`` SDK."""

    name = "anthropic"

    def __init__(self, cfg: ModelConfig) -> None:
        try:
            import anthropic
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ConfigError("the anthropic adapter needs the 'anthropic' package (pip install "
                              "autopilot-widget[anthropic])") from exc
        if cfg.temperature is not None and not 0 <= cfg.temperature <= 1:
            raise ConfigError(f"model {cfg.model!r}: the anthropic adapter takes a temperature from 0 to 1, got "
                              f"{cfg.temperature}")
        self._anthropic = anthropic
        self.cfg = cfg
        # No strict mode here: Anthropic reads a tool's input_schema as JSON Schema guidance, so the model sees every
        # constraint as a keyword (the relay's own checks enforce them).
        self.schema_keywords = SCHEMA_KEYWORDS
        self.schema_formats = SCHEMA_FORMATS
        self.client = anthropic.AsyncAnthropic(
            base_url=cfg.base_url,
            api_key=cfg.api_key or "unused",
            timeout=cfg.request_timeout_s,
            max_retries=cfg.max_retries,
        )

    async def aclose(self) -> None:
        await self.client.close()

    def _error(self, exc: Exception) -> ModelError:
        """The relay's error for an SDK error (the provider's wording only in the log)."""
        a = self._anthropic
        log.warning("model %s failed: %s: %s", self.cfg.model, type(exc).__name__, str(exc)[:300])
        if isinstance(exc, (a.APIConnectionError, a.APITimeoutError)):
            return ModelError(TurnErrorCode.MODEL_UNAVAILABLE, "The model provider could not be reached.")
        status = getattr(exc, "status_code", None)
        kind = _error_type(getattr(exc, "body", None))
        text = str(getattr(exc, "message", "") or exc)
        if status == 429 or kind == "rate_limit_error":
            response = getattr(exc, "response", None)
            return ModelError(TurnErrorCode.MODEL_RATE_LIMITED,
                              "The model provider is rate limiting requests; try again shortly.",
                              retry_after=_retry_after(getattr(response, "headers", None)))
        if status in (401, 403) or kind in ("authentication_error", "permission_error"):
            return ModelError(TurnErrorCode.MODEL_AUTH,
                              "The relay's model API key was refused by the provider.", retryable=False)
        if status == 413 or kind == "request_too_large" or (
                (status == 400 or kind == "invalid_request_error") and _OVERFLOW.search(text)):
            return ModelError(TurnErrorCode.CONTEXT_OVERFLOW,
                              "The conversation is too long for the model's context window.")
        if (isinstance(status, int) and status >= 500) or kind in ("overloaded_error", "api_error"):
            return ModelError(TurnErrorCode.MODEL_UNAVAILABLE, "The model provider is down or overloaded.")
        if isinstance(status, int) and 400 <= status < 500:
            return ModelError(TurnErrorCode.MODEL_ERROR, "The model provider refused the request.")
        return ModelError(TurnErrorCode.MODEL_ERROR, "The model request failed.")

    def _request_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        return request_kwargs(self.cfg, request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        stream = None
        blocks: dict[int, dict[str, Any]] = {}  # open tool_use blocks by index: {"id", "name", "json"}
        calls: list[ToolCall] = []  # held until the stop reason says the response is whole
        usage: dict[str, int] = {}
        stopped = False
        stop_reason: str | None = None
        try:
            stream = await self.client.messages.create(**self._request_kwargs(request))
            async for event in stream:
                kind = event.type
                if kind == "message_start":
                    _add_usage(usage, event.message.usage)
                elif kind == "content_block_start":
                    block = event.content_block
                    if block.type == "tool_use":
                        # input comes in input_json_delta pieces; one given whole at the start is kept if none do
                        blocks[event.index] = {"id": block.id, "name": block.name, "json": "",
                                               "input": getattr(block, "input", None)}
                    elif block.type == "text" and block.text:
                        yield TextDelta(block.text)
                elif kind == "content_block_delta":
                    delta = event.delta
                    if delta.type == "text_delta":
                        yield TextDelta(delta.text)
                    elif delta.type == "input_json_delta":
                        blocks[event.index]["json"] += delta.partial_json
                elif kind == "content_block_stop":
                    slot = blocks.pop(event.index, None)
                    if slot is not None:
                        calls.append(_call(slot))
                elif kind == "message_delta":
                    stop_reason = event.delta.stop_reason or stop_reason
                    if event.usage is not None:
                        _add_usage(usage, event.usage)
                elif kind == "message_stop":
                    stopped = True
                    break
                # ping is dropped by the SDK; other events (thinking, citations deltas) carry nothing we show
        except self._anthropic.APIError as exc:
            raise self._error(exc) from exc
        except UNREADABLE as exc:  # (a delta for no block too)
            raise unreadable_reply(self.cfg.model, exc) from exc
        finally:
            # Closing the response ends the provider's generation (and its billing) when the turn stops early: on
            # Stop, a deadline or a limit the relay's guard closes this generator.
            if stream is not None:
                await stream.close()
        if not stopped:
            raise ModelError(TurnErrorCode.MODEL_UNAVAILABLE, "The model provider ended the answer before its end.")
        if usage:
            yield Usage(
                input_tokens=(usage.get("input_tokens", 0) + usage.get("cache_creation_input_tokens", 0)
                              + usage.get("cache_read_input_tokens", 0)) if "input_tokens" in usage else None,
                output_tokens=usage.get("output_tokens"),
                cached_input_tokens=usage.get("cache_read_input_tokens"),
                cache_write_tokens=usage.get("cache_creation_input_tokens"),
            )
        if stop_reason == "max_tokens":
            raise ModelError(TurnErrorCode.ANSWER_TOO_LONG,
                             f"The answer passed the model's limit of {self.cfg.max_tokens or DEFAULT_MAX_TOKENS} "
                             "tokens and was cut there.")
        if stop_reason == "model_context_window_exceeded":
            raise ModelError(TurnErrorCode.CONTEXT_OVERFLOW,
                             "The conversation is too long for the model's context window.")
        if stop_reason == "refusal":
            raise ModelError(TurnErrorCode.MODEL_ERROR, "The model declined to answer this.", retryable=False)
        for call in calls:
            yield call


def _add_usage(into: dict[str, int], usage: Any) -> None:
    """Take the counts of a usage object (``message_delta``'s are cumulative: a later count replaces an earlier)."""
    if usage is None:
        return
    for key in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        value = getattr(usage, key, None)
        if isinstance(value, int):
            into[key] = value


def _call(slot: dict[str, Any]) -> ToolCall:
    """A finished ``tool_use`` block as a call: its input parsed (an empty input is ``{}``; JSON that does not parse
    stays the raw text, and the relay answers the model that its arguments were invalid)."""
    if not slot["json"] and isinstance(slot.get("input"), dict):
        return ToolCall(str(slot["name"]), slot["input"], provider_id=str(slot["id"]))
    raw = slot["json"] or "{}"
    try:
        args: Any = json.loads(raw)
    except ValueError:
        args = raw
    return ToolCall(str(slot["name"]), args, provider_id=str(slot["id"]))

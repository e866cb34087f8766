"""Model adapters: the interface the model loop streams from, the offline demo model and the
OpenAI-compatible Chat Completions adapter.

An adapter turns a :class:`ModelRequest` (OpenAI-style chat messages plus a tool catalogue) into an async
stream of :class:`TextDelta` and :class:`ToolCall` chunks, or raises :class:`ModelError`.
"""

from __future__ import annotations

import abc
import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from .. import protocol as P
from .config import ModelConfig
from .tools import COMMON_KEYWORDS, offer_names

ASK_USER_TOOL = "ask_user"

#: The relay's own ``ask_user`` tool (seed 000 prompt shape; one call = one prompt).
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
            "type": {"type": "string", "enum": ["text", "bool", "radiolist", "checklist"]},
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
    text: str


@dataclass
class ToolCall:
    name: str
    arguments: Any  # a dict when the model produced valid JSON, else the raw string
    provider_id: str | None = None


Chunk = TextDelta | ToolCall


@dataclass
class ModelRequest:
    #: OpenAI Chat Completions messages (system, user, assistant with tool_calls, tool).
    messages: list[dict[str, Any]]
    #: ``[{name, description, parameters}]`` — the client's functions plus the relay's own tools.
    tools: list[dict[str, Any]] = field(default_factory=list)
    conversation_id: str = ""
    turn_id: str = ""


class ModelError(Exception):
    """A model failure the reader should see (rate limit, overflow, provider down, bad key...)."""

    def __init__(self, code: str, message: str, retryable: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable


class ModelAdapter(abc.ABC):
    name: str = "model"
    #: Constraint keywords this provider's strict tool schemas may carry besides types and nullability
    #: (docs/protocol.md §8); the relay leaves the others out of what the model sees (and says them in
    #: the property's description). ``enum`` is taken by every strict mode.
    schema_keywords: frozenset[str] = COMMON_KEYWORDS
    #: The ``format`` values a kept ``format`` keyword may have.
    schema_formats: frozenset[str] = frozenset()

    @abc.abstractmethod
    def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        """Yield the answer's text deltas and tool calls, in order."""

    async def aclose(self) -> None:
        return None


# ---------------------------------------------------------------------------------------------
# The demo model


def _chunks(text: str, words: int = 2) -> list[str]:
    parts = re.findall(r"\s*\S+", text)
    out = ["".join(parts[i : i + words]) for i in range(0, len(parts), words)]
    tail = text[len("".join(parts)) :]
    if tail and out:
        out[-1] += tail
    return out or ([text] if text else [])


def _json_after(text: str, pos: int) -> tuple[Any, bool]:
    """A JSON object starting right after ``pos`` (skipping spaces, ``:``, ``with``), if any."""
    m = re.compile(r"\s*(?::|with)?\s*").match(text, pos)
    start = m.end() if m else pos
    if start < len(text) and text[start] == "{":
        try:
            value, _ = json.JSONDecoder().raw_decode(text, start)
        except ValueError:
            return {}, False
        if isinstance(value, dict):
            return value, True
    return {}, False


def _quote(value: Any, limit: int = 600) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)
    if len(text) > limit:
        text = text[:limit] + "…"
    return text


class DemoModel(ModelAdapter):
    """Deterministic, offline. Answers in Markdown; calls every page function or tool the message names
    (``{...}`` JSON right after the name is the arguments); offers the page's action ``X`` when told
    "offer X" (optionally followed by JSON arguments; several "offer" in one message make one
    ``offer_actions`` call listing them all); asks the reader when told "ask me" (if the app has Ask
    User on); fails on "simulate model error"."""

    name = "demo"

    def __init__(self, chunk_delay_ms: float = 15.0) -> None:
        self.delay = max(0.0, chunk_delay_ms) / 1000.0

    async def _text(self, text: str) -> AsyncIterator[Chunk]:
        for i, piece in enumerate(_chunks(text)):
            if i and self.delay:
                await asyncio.sleep(self.delay)
            yield TextDelta(piece)

    async def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:  # type: ignore[override]
        msgs = request.messages
        tools = {t["name"]: t for t in request.tools}
        last = msgs[-1] if msgs else {"role": "user", "content": ""}
        if last["role"] == "tool":
            async for c in self._answer_results(msgs, tools):
                yield c
            return
        text = str(last.get("content") or "")
        lower = text.lower()
        if "simulate model error" in lower:
            raise ModelError("model_error", "The demo model was asked to fail (\"simulate model error\").", retryable=True)
        if "ask me" in lower and ASK_USER_TOOL in tools:
            async for c in self._text("Let me ask you first."):
                yield c
            yield ToolCall(
                ASK_USER_TOOL,
                {
                    "type": "radiolist",
                    "question": "Which colour do you prefer?",
                    "arguments": {"options": [
                        {"value": "blue", "label": "Blue"},
                        {"value": "green", "label": "Green"},
                        {"value": "red", "label": "Red"},
                    ]},
                },
            )
            return
        calls = []
        names = [n for n in tools if n not in (ASK_USER_TOOL, P.OFFER_ACTIONS_TOOL)]
        if names:
            pattern = re.compile(r"(?<![\w-])(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + r")(?![\w-])")
            for m in pattern.finditer(text):
                args, _ = _json_after(text, m.end())
                calls.append(ToolCall(m.group(1), args))
        actions = offer_names(tools[P.OFFER_ACTIONS_TOOL]) if P.OFFER_ACTIONS_TOOL in tools else []
        offers = []
        if actions:
            pattern = re.compile(r"(?<![\w-])(?i:offer)\s+(" + "|".join(re.escape(n) for n in sorted(actions, key=len, reverse=True)) + r")(?![\w-])")
            for m in pattern.finditer(text):
                args, _ = _json_after(text, m.end())
                offers.append({"name": m.group(1), "arguments": args})
        if calls:
            listed = ", ".join(f"`{c.name}`" for c in calls)
            async for c in self._text(f"Calling {listed} on the page."):
                yield c
            for c in calls:
                yield c
            if offers:
                yield ToolCall(P.OFFER_ACTIONS_TOOL, {"actions": offers})
            return
        if offers:
            listed = ", ".join(f"`{o['name']}`" for o in offers)
            async for c in self._text(f"You can do that from here: I offered {listed} below."):
                yield c
            yield ToolCall(P.OFFER_ACTIONS_TOOL, {"actions": offers})
            return
        async for c in self._text(self._markdown_answer(text, names, ASK_USER_TOOL in tools, actions)):
            yield c

    def _markdown_answer(self, text: str, names: list[str], ask: bool, actions: list[str] | None = None) -> str:
        quoted = " ".join(text.split())[:200] or "(nothing)"
        lines = [
            "### Demo answer",
            "",
            f"You wrote: *{quoted}*",
            "",
            "- I am the **demo model**: offline and deterministic.",
        ]
        if names:
            lines.append("- Name one of the page's functions and I will call it: " + ", ".join(f"`{n}`" for n in names[:12]) + ".")
        else:
            lines.append("- The page has registered no functions yet.")
        if actions:
            lines.append('- Say "offer <action>" and I will offer one of the page\'s actions: ' + ", ".join(f"`{n}`" for n in actions[:12]) + ".")
        if ask:
            lines.append('- Say "ask me" and I will ask you a question.')
        lines += ["", "```text", f"words: {len(text.split())}, characters: {len(text)}", "```"]
        return "\n".join(lines)

    async def _answer_results(self, msgs: list[dict[str, Any]], tools: dict[str, Any]) -> AsyncIterator[Chunk]:
        results = []
        for m in reversed(msgs):
            if m["role"] != "tool":
                break
            results.append(m)
        results.reverse()
        names = {}
        for m in msgs:
            for tc in m.get("tool_calls") or []:
                names[tc["id"]] = tc["function"]["name"]
        parts = ["### Result", ""]
        for r in results:
            name = names.get(r.get("tool_call_id"), "function")
            content = r.get("content") or ""
            try:
                shown = _quote(json.loads(content))
            except ValueError:
                shown = _quote(content)
            if name == ASK_USER_TOOL:
                parts += [f"You answered: **{shown}**.", ""]
            else:
                parts += [f"`{name}` returned:", "", "```json", shown, "```", ""]
        async for c in self._text("\n".join(parts).rstrip()):
            yield c


# ---------------------------------------------------------------------------------------------
# OpenAI-compatible Chat Completions

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class OpenAIAdapter(ModelAdapter):
    """Streams Chat Completions with tool calls through the official ``openai`` SDK (any compatible
    host: set ``base_url``)."""

    name = "openai"

    def __init__(self, cfg: ModelConfig) -> None:
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - depends on the install
            from ..errors import ConfigError

            raise ConfigError("the openai adapter needs the 'openai' package (pip install autopilot-widget[openai])") from exc
        self._openai = openai
        self.cfg = cfg
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
        if isinstance(exc, o.RateLimitError):
            return ModelError("model_rate_limited", "The model provider is rate limiting requests; try again shortly.")
        if isinstance(exc, (o.AuthenticationError, o.PermissionDeniedError)):
            return ModelError("model_auth", "The relay's model API key was refused by the provider.", retryable=False)
        if isinstance(exc, o.BadRequestError):
            text = str(exc).lower()
            if getattr(exc, "code", None) == "context_length_exceeded" or (
                "context" in text and ("length" in text or "window" in text or "too long" in text)):
                return ModelError("context_overflow", "The conversation is too long for the model's context window.")
            return ModelError("model_error", "The model provider refused the request.")
        if isinstance(exc, (o.APIConnectionError, o.APITimeoutError)):
            return ModelError("model_unavailable", "The model provider could not be reached.")
        if isinstance(exc, o.InternalServerError):
            return ModelError("model_unavailable", "The model provider is down or overloaded.")
        return ModelError("model_error", "The model request failed.")

    async def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:  # type: ignore[override]
        kwargs: dict[str, Any] = {"model": self.cfg.model, "messages": request.messages, "stream": True}
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
        calls: dict[int, dict[str, Any]] = {}
        try:
            stream = await self.client.chat.completions.create(**kwargs)
            async for chunk in stream:
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                if delta is None:
                    continue
                if delta.content:
                    yield TextDelta(delta.content)
                for tc in delta.tool_calls or []:
                    slot = calls.setdefault(tc.index if tc.index is not None else len(calls), {"id": None, "name": "", "arguments": ""})
                    if tc.id:
                        slot["id"] = tc.id
                    if tc.function is not None:
                        if tc.function.name:
                            slot["name"] += tc.function.name
                        if tc.function.arguments:
                            slot["arguments"] += tc.function.arguments
        except self._openai.APIError as exc:
            raise self._error(exc) from exc
        for index in sorted(calls):
            slot = calls[index]
            raw = slot["arguments"] or "{}"
            try:
                args: Any = json.loads(raw)
            except ValueError:
                args = raw
            yield ToolCall(slot["name"], args, provider_id=slot["id"])


def make_adapter(cfg: ModelConfig) -> ModelAdapter:
    if cfg.adapter == "demo":
        return DemoModel(chunk_delay_ms=cfg.chunk_delay_ms)
    if cfg.adapter == "openai":
        return OpenAIAdapter(cfg)
    raise ValueError(cfg.adapter)  # config validation prevents this

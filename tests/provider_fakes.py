"""Scripted fake model providers: one aiohttp server on 127.0.0.1 that answers each provider's streaming API in
the provider's documented wire format, so a relay with a REAL adapter (the provider's own SDK) can be driven
through the same scenarios whatever the provider (tests/test_model_scenarios.py).

A test scripts what "the model" does next as a :class:`Reply` (text pieces, tool calls, usage, or a failure) and
the provider's :class:`Encoder` writes it as that provider's HTTP answer: Server-Sent Events for a reply, the
provider's error status, headers and JSON body for a failure.

Registering another provider (the registration API)
--------------------------------------------------------
Write a subclass of :class:`Encoder` in a module of its own named ``tests/provider_fake_<something>.py`` and call
:func:`register` with an instance at import time::

    # tests/provider_fake_responses.py
    from provider_fakes import Encoder, Reply, register

    class ResponsesEncoder(Encoder):
        name = "openai-responses"          # the registry key: test ids, app and model names derive from it
        path = "/v1/responses"             # the POST route the SDK calls, below the encoder's mount
        base_suffix = "/v1"                # what the SDK's base_url adds to the mount URL
        adapter = "openai-responses"       # ModelConfig.adapter of the relay's model
        def frames(self, reply, body): ...         # the SSE of a reply, as bytes (and Pause items)
        def error(self, kind, reply): ...          # (status, headers, JSON body) of a failure
        def garbage(self): ...                     # one frame the SDK cannot read
        def check(self, body): ...                 # optional: what the provider would refuse (400)
        def tool_names(self, body): ...            # what a request carried, provider-neutral
        def tool_results(self, body): ...
        def tool_calls(self, body): ...
        def user_texts(self, body): ...

    register(ResponsesEncoder())

:func:`encoders` imports every ``tests/provider_fake_*.py`` once and returns the registry, so the scenario module
picks a new provider up with no edit. An encoder may override :meth:`Encoder.model_config` (e.g. ``tool_calling =
"text"`` for a tools-as-text model, whose encoder writes the calls as text) and list scenarios that do not apply
to it in ``skip`` (scenario name -> reason, shown as the skip reason; a scenario's name is its test's name in
tests/test_model_scenarios.py without ``test_``, e.g. ``"two_parallel_calls": "the model makes one call at a
time"``). Helpers every encoder shares: :func:`sse` (one event), :func:`pieces` (a string cut into streamed
pieces), :func:`arguments_text`, :class:`Pause`. ``Reply.text`` may be a generator (:func:`endless`, for Stop and
the turn deadline): an encoder iterates it once, lazily, as it writes.

The server (:class:`FakeProviders`) mounts every registered encoder under ``/<name>``, keeps one queue of scripted
replies and one list of received requests per encoder, and counts the responses still being written and those
whose client went away before their end (``open`` / ``ended_early``: what Stop and a stall must cause). A request
with nothing scripted gets the text "(unscripted)". A request the encoder's :meth:`Encoder.check` finds fault with
is answered 400 (``invalid_request_error``) and kept in ``refused``: an adapter that builds a request the real
provider would refuse fails every scenario, not only in production.
"""

from __future__ import annotations

import abc
import asyncio
import importlib
import itertools
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from aiohttp import web

from widget.relay.config import ModelConfig

#: What a scripted failure is. ``rate_limit`` (429 with ``retry-after``), ``auth`` (401), ``context_overflow``
#: (400 with the provider's "too long" wording), ``provider_down`` (the provider's overloaded / unavailable
#: status), ``drop`` (the connection closed without an answer), ``garbage`` (a frame the SDK cannot read, after a
#: first text piece). A stall or an endless stream is scripted with :class:`Pause` items in ``Reply.text``.
FailKind = Literal["rate_limit", "auth", "context_overflow", "provider_down", "drop", "garbage"]


@dataclass(frozen=True)
class Pause:
    """In ``Reply.text``: the server writes nothing for ``seconds`` (it stops early when the client goes away)."""

    seconds: float


@dataclass
class Call:
    """One tool call the model makes (``arguments`` a dict, or a raw string for arguments that do not parse)."""

    name: str
    arguments: Any = field(default_factory=dict)
    id: str = ""


@dataclass
class Reply:
    """What the model answers to one request: ``text`` pieces (``Pause`` items between them), then ``calls`` (two
    or more: parallel calls), with ``usage`` (input, output tokens); or a failure ``fail``. ``text`` may be a
    generator (:func:`endless`): an encoder should iterate it once, lazily, as it writes."""

    text: Iterable[str | Pause] = ()
    calls: list[Call] = field(default_factory=list)
    usage: tuple[int, int] | None = (21, 7)
    fail: FailKind | None = None
    #: Anthropic only: the prompt-cache tokens the reply reports, ``(read, written)`` (its usage's
    #: ``cache_read_input_tokens`` and ``cache_creation_input_tokens``; ``usage``'s input is the uncached rest).
    cache: tuple[int, int] = (0, 0)
    #: Seconds a ``rate_limit`` failure asks to wait (its ``retry-after`` header).
    retry_after: int = 7


def endless(piece: str = "tok ", every_s: float = 0.02, for_s: float = 120.0) -> Iterator[str | Pause]:
    """``Reply.text`` of a stream that does not end while a test runs: a piece every ``every_s`` for ``for_s``
    seconds, or until the client goes away. Bounded (6,000 pieces by default), so an encoder that reads the whole
    text before it writes stays finite."""
    for _ in range(max(int(for_s / every_s), 1)):
        yield piece
        yield Pause(every_s)


def sse(data: Any, event: str | None = None) -> bytes:
    """One Server-Sent Event: ``event:`` line when named, ``data:`` the JSON of ``data`` (a str as it is)."""
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


def pieces(text: str, size: int = 7) -> list[str]:
    """``text`` cut into pieces of ``size`` characters (how providers stream tool-call arguments)."""
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def arguments_text(call: Call) -> str:
    """A call's arguments as the JSON text the model streams."""
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)


class Encoder(abc.ABC):
    """One provider's wire format: how a :class:`Reply` is written, and how a received request is read."""

    #: The registry key (test ids, the fake's mount ``/<name>``, the relay's model and app names).
    name: ClassVar[str]
    #: The POST route the SDK calls, below the mount (``/v1/chat/completions``).
    path: ClassVar[str]
    #: What the SDK's ``base_url`` adds to the mount URL (``/v1`` for OpenAI's SDK, nothing for Anthropic's).
    base_suffix: ClassVar[str] = ""
    #: ``ModelConfig.adapter`` of the relay's model for this provider.
    adapter: ClassVar[str]
    #: Scenarios that do not apply to this provider: scenario name -> why.
    skip: ClassVar[dict[str, str]] = {}

    def model_config(self, base_url: str) -> ModelConfig:
        """The relay's model for this provider, pointed at the fake (no SDK retries: a failure is seen at once)."""
        return ModelConfig(adapter=self.adapter, model="fake-model", base_url=base_url, api_key="sk-test",
                           max_retries=0, request_timeout_s=10)

    @abc.abstractmethod
    def frames(self, reply: Reply, body: dict[str, Any]) -> Iterator[bytes | Pause]:
        """The SSE body of a reply to ``body`` (the request's JSON), frame by frame; ``Pause`` items pass through."""

    @abc.abstractmethod
    def error(self, kind: FailKind, reply: Reply) -> tuple[int, dict[str, str], dict[str, Any]]:
        """The HTTP status, headers and JSON body of a failure (``rate_limit``, ``auth``, ``context_overflow``,
        ``provider_down``)."""

    @abc.abstractmethod
    def garbage(self) -> bytes:
        """One frame the provider's SDK cannot read (broken JSON where an event's data belongs)."""

    def check(self, body: dict[str, Any]) -> list[str]:
        """What the real provider would refuse in this request (its documented rules), one line a problem; the
        fake then answers 400 and records them (``FakeProviders.refused``), and the scenarios fail on any."""
        return []

    @abc.abstractmethod
    def tool_names(self, body: dict[str, Any]) -> list[str]:
        """The names of the tools a request offered."""

    @abc.abstractmethod
    def tool_calls(self, body: dict[str, Any]) -> list[tuple[str, str, Any]]:
        """The tool calls of the history a request carried: ``(id, name, arguments)``, in order."""

    @abc.abstractmethod
    def tool_results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        """The tool results a request carried: ``(call id, text)``, in order."""

    @abc.abstractmethod
    def user_texts(self, body: dict[str, Any]) -> list[str]:
        """The texts of the reader's messages a request carried (not tool results)."""


ENCODERS: dict[str, Encoder] = {}
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def register(encoder: Encoder) -> Encoder:
    """Add a provider to the scenarios (a second encoder of the same name is a mistake)."""
    if encoder.name in ENCODERS and type(ENCODERS[encoder.name]) is not type(encoder):
        raise ValueError(f"an encoder named {encoder.name!r} is registered already")
    ENCODERS[encoder.name] = encoder
    return encoder


def encoders() -> dict[str, Encoder]:
    """Every registered provider: this module's, and those of each ``tests/provider_fake_*.py`` (imported once)."""
    for f in sorted(Path(__file__).parent.glob("provider_fake_*.py")):
        importlib.import_module(f.stem)
    return ENCODERS


# ---------------------------------------------------------------------------------------------- OpenAI Chat


class OpenAIChatEncoder(Encoder):
    """OpenAI Chat Completions streaming (``chat.completion.chunk`` objects as ``data:`` lines, then ``data:
    [DONE]``): text in ``delta.content``; tool calls in ``delta.tool_calls`` by ``index``, the first delta of each
    with ``id`` and ``function.name``, the arguments in pieces after it; the last delta's ``finish_reason``
    (``tool_calls`` or ``stop``); usage in a last chunk with empty ``choices`` when the request asked for it
    (``stream_options.include_usage``)."""

    name = "openai-chat"
    path = "/v1/chat/completions"
    base_suffix = "/v1"
    adapter = "openai"

    @staticmethod
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "fake-model",
                    "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

    def frames(self, reply: Reply, body: dict[str, Any]) -> Iterator[bytes | Pause]:
        yield self.chunk({"role": "assistant", "content": ""})
        for piece in reply.text:
            yield piece if isinstance(piece, Pause) else self.chunk({"content": piece})
        yield from self.call_frames(reply.calls)
        yield self.chunk({}, "tool_calls" if reply.calls else "stop")
        if reply.usage is not None and (body.get("stream_options") or {}).get("include_usage"):
            yield sse({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "fake-model",
                       "choices": [], "usage": {"prompt_tokens": reply.usage[0], "completion_tokens": reply.usage[1],
                                                "total_tokens": sum(reply.usage)}})
        yield b"data: [DONE]\n\n"

    def call_frames(self, calls: list[Call]) -> Iterator[bytes]:
        """The tool calls' deltas (one call after the other, as OpenAI streams parallel calls)."""
        for i, call in enumerate(calls):
            yield self.chunk({"tool_calls": [{"index": i, "id": call.id or f"call_{i}", "type": "function",
                                              "function": {"name": call.name, "arguments": ""}}]})
            for piece in pieces(arguments_text(call)):
                yield self.chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})

    def error(self, kind: FailKind, reply: Reply) -> tuple[int, dict[str, str], dict[str, Any]]:
        def err(message: str, type_: str, code: str | None) -> dict[str, Any]:
            return {"error": {"message": message, "type": type_, "param": None, "code": code}}

        if kind == "rate_limit":
            return 429, {"retry-after": str(reply.retry_after)}, err(
                "Rate limit reached for fake-model on requests per min (RPM): Limit 3, Used 3, Requested 1.",
                "requests", "rate_limit_exceeded")
        if kind == "auth":
            return 401, {}, err("Incorrect API key provided: sk-test.", "invalid_request_error", "invalid_api_key")
        if kind == "context_overflow":
            return 400, {}, err("This model's maximum context length is 8192 tokens. However, your messages "
                                "resulted in 9120 tokens.", "invalid_request_error", "context_length_exceeded")
        return 503, {}, err("The server is overloaded or not ready yet.", "server_error", None)

    def garbage(self) -> bytes:
        return b"data: {not json\n\n"

    def check(self, body: dict[str, Any]) -> list[str]:
        """Chat Completions' rules: known roles; an assistant's ``tool_calls`` each answered by a ``tool`` message
        right after it, and no ``tool`` message for any other id; tool names ``^[a-zA-Z0-9_-]{1,64}$``."""
        problems = [f"tool name {n!r} is not allowed" for n in self.tool_names(body) if not _TOOL_NAME.match(n)]
        pending: set[str] = set()
        for i, m in enumerate(body.get("messages") or []):
            role = m.get("role")
            if role not in ("system", "developer", "user", "assistant", "tool"):
                problems.append(f"messages[{i}]: unknown role {role!r}")
            if role == "tool":
                if m.get("tool_call_id") not in pending:
                    problems.append(f"messages[{i}]: a tool message for no pending call ({m.get('tool_call_id')!r})")
                pending.discard(m.get("tool_call_id"))
                continue
            if pending:
                problems.append(f"messages[{i}]: tool calls {sorted(pending)} were not answered before it")
            pending = {c["id"] for c in m.get("tool_calls") or []} if role == "assistant" else set()
        return problems

    def tool_names(self, body: dict[str, Any]) -> list[str]:
        return [t["function"]["name"] for t in body.get("tools") or []]

    def tool_calls(self, body: dict[str, Any]) -> list[tuple[str, str, Any]]:
        return [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"] or "{}"))
                for m in body["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or []]

    def tool_results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        return [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]

    def user_texts(self, body: dict[str, Any]) -> list[str]:
        return [m["content"] for m in body["messages"] if m["role"] == "user"]


# ---------------------------------------------------------------------------------------------- Anthropic


class AnthropicEncoder(Encoder):
    """Anthropic Messages streaming (named SSE events): ``message_start`` (with the input usage), per content
    block ``content_block_start`` / ``content_block_delta`` (``text_delta``, or a ``tool_use`` block's
    ``input_json_delta`` pieces) / ``content_block_stop``, a ``ping``, then ``message_delta`` (``stop_reason``
    ``end_turn`` or ``tool_use``, the output usage) and ``message_stop``. Failures as Anthropic's error bodies
    (``{"type": "error", "error": {"type", "message"}}``); overloaded is 529. Prompt caching: the reply's scripted
    ``cache`` counts in the usage, and :meth:`cache_prefixes` (what a request's breakpoints would cache)."""

    name = "anthropic"
    path = "/v1/messages"
    adapter = "anthropic"

    def frames(self, reply: Reply, body: dict[str, Any]) -> Iterator[bytes | Pause]:
        usage_in, usage_out = reply.usage or (0, 0)
        yield sse({"type": "message_start", "message": {
            "id": "msg_fake_1", "type": "message", "role": "assistant", "content": [], "model": "fake-model",
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": usage_in, "output_tokens": 1, "cache_creation_input_tokens": reply.cache[1],
                      "cache_read_input_tokens": reply.cache[0]}}}, "message_start")
        index = 0
        text_open = False
        for piece in reply.text:
            if isinstance(piece, Pause):
                yield piece
                continue
            if not text_open:
                yield sse({"type": "content_block_start", "index": index, "content_block": {"type": "text",
                                                                                           "text": ""}},
                          "content_block_start")
                yield sse({"type": "ping"}, "ping")
                text_open = True
            yield sse({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}},
                      "content_block_delta")
        if text_open:
            yield sse({"type": "content_block_stop", "index": index}, "content_block_stop")
            index += 1
        for i, call in enumerate(reply.calls):
            yield sse({"type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": call.id or f"toolu_fake_{i}", "name": call.name, "input": {}}},
                "content_block_start")
            for piece in ["", *pieces(arguments_text(call))]:
                yield sse({"type": "content_block_delta", "index": index,
                           "delta": {"type": "input_json_delta", "partial_json": piece}}, "content_block_delta")
            yield sse({"type": "content_block_stop", "index": index}, "content_block_stop")
            index += 1
        yield sse({"type": "message_delta", "delta": {"stop_reason": "tool_use" if reply.calls else "end_turn",
                                                      "stop_sequence": None},
                   "usage": {"output_tokens": usage_out}}, "message_delta")
        yield sse({"type": "message_stop"}, "message_stop")

    def error(self, kind: FailKind, reply: Reply) -> tuple[int, dict[str, str], dict[str, Any]]:
        def err(type_: str, message: str) -> dict[str, Any]:
            return {"type": "error", "error": {"type": type_, "message": message}}

        if kind == "rate_limit":
            return 429, {"retry-after": str(reply.retry_after)}, err(
                "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit.")
        if kind == "auth":
            return 401, {}, err("authentication_error", "invalid x-api-key")
        if kind == "context_overflow":
            return 400, {}, err("invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum")
        return 529, {}, err("overloaded_error", "Overloaded")

    def garbage(self) -> bytes:
        return b"event: content_block_delta\ndata: {not json\n\n"

    def check(self, body: dict[str, Any]) -> list[str]:
        """The Messages API's rules: ``max_tokens``; the system prompt apart; user first, then user and assistant
        in turn; no empty text block; every ``tool_use`` answered by a ``tool_result`` in the next user message
        (results first in it), no result for any other id; ids ``^[a-zA-Z0-9_-]+$``, tool names
        ``^[a-zA-Z0-9_-]{1,64}$``; a system prompt given as blocks is non-empty text blocks; at most 4 blocks with
        ``cache_control``, each ``{"type": "ephemeral"}`` (with an optional ``ttl`` of ``5m`` or ``1h``)."""
        problems = [f"tool name {n!r} is not allowed" for n in self.tool_names(body) if not _TOOL_NAME.match(n)]
        system = body.get("system")
        if isinstance(system, list) and not all(isinstance(b, dict) and b.get("type") == "text" and b.get("text")
                                                for b in system):
            problems.append("system: text content blocks must be non-empty")
        marks = [b["cache_control"] for _, b in self._prompt_blocks(body) if "cache_control" in b]
        if len(marks) > 4:
            problems.append(f"A maximum of 4 blocks with cache_control may be provided. Found {len(marks)}.")
        for mark in marks:
            if not isinstance(mark, dict) or mark.get("type") != "ephemeral" or set(mark) - {"type", "ttl"} or \
                    mark.get("ttl", "5m") not in ("5m", "1h"):
                problems.append(f"cache_control: {mark!r} is not {{'type': 'ephemeral'}}")
        if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
            problems.append("max_tokens: Field required")
        messages = body.get("messages") or []
        if not messages or messages[0].get("role") != "user":
            problems.append("messages: the first message must use the user role")
        asked: set[str] = set()
        for i, m in enumerate(messages):
            role, content = m.get("role"), m.get("content")
            if role not in ("user", "assistant"):
                problems.append(f"messages[{i}].role: {role!r} (the system prompt goes in the top-level system)")
            if i and messages[i - 1].get("role") == role:
                problems.append(f"messages[{i}]: roles must alternate between user and assistant")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else (content or [])
            if not blocks:
                problems.append(f"messages[{i}]: content must not be empty")
            answered = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
            if role == "user":
                if answered != asked:
                    problems.append(f"messages[{i}]: tool_use ids {sorted(asked)} need their tool_result blocks here "
                                    f"(got {sorted(answered, key=str)})")
                results = [b.get("type") == "tool_result" for b in blocks]
                if results != sorted(results, reverse=True):  # a result after another block
                    problems.append(f"messages[{i}]: tool_result blocks must come first")
            asked = set()
            for b in blocks:
                if b.get("type") == "text" and not b.get("text"):
                    problems.append(f"messages[{i}]: text content blocks must be non-empty")
                if b.get("type") == "tool_use":
                    asked.add(b.get("id"))
                    if not _ID.match(str(b.get("id"))) or not isinstance(b.get("input"), dict):
                        problems.append(f"messages[{i}]: a tool_use needs an id like {_ID.pattern} and an object input")
        return problems

    def tool_names(self, body: dict[str, Any]) -> list[str]:
        return [t["name"] for t in body.get("tools") or []]

    @staticmethod
    def _prompt_blocks(body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        """The request's blocks in the order Anthropic caches them (tools, system, messages), each with where it
        is (``tools``, ``system``, ``<index>:<role>``: a prefix takes the message boundaries with it)."""
        for t in body.get("tools") or []:
            yield "tools", t
        system = body.get("system")
        for b in [{"type": "text", "text": system}] if isinstance(system, str) else system or []:
            yield "system", b
        for i, m in enumerate(body.get("messages") or []):
            content = m.get("content")
            for b in [{"type": "text", "text": content}] if isinstance(content, str) else content or []:
                yield f"{i}:{m.get('role')}", b

    def cache_prefixes(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        """What each ``cache_control`` breakpoint of a request caches, in order: ``(where, prefix)``, the prefix the
        JSON of every block up to and including the marked one, marks left out (Anthropic's cache key is the
        content: a later request finds the entry when its prefix is the same)."""
        out: list[tuple[str, str]] = []
        seen: list[Any] = []
        for where, block in self._prompt_blocks(body):
            seen.append([where, {k: v for k, v in block.items() if k != "cache_control"}])
            if "cache_control" in block:
                out.append((where, json.dumps(seen, sort_keys=True)))
        return out

    @staticmethod
    def _blocks(body: dict[str, Any], role: str) -> Iterator[dict[str, Any]]:
        for m in body["messages"]:
            if m["role"] == role:
                content = m["content"]
                yield from ([{"type": "text", "text": content}] if isinstance(content, str) else content)

    def tool_calls(self, body: dict[str, Any]) -> list[tuple[str, str, Any]]:
        return [(b["id"], b["name"], b["input"]) for b in self._blocks(body, "assistant") if b["type"] == "tool_use"]

    def tool_results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        out = []
        for b in self._blocks(body, "user"):
            if b["type"] == "tool_result":
                content = b.get("content") or ""
                text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
                out.append((b["tool_use_id"], text))
        return out

    def user_texts(self, body: dict[str, Any]) -> list[str]:
        return [b["text"] for b in self._blocks(body, "user") if b["type"] == "text"]


register(OpenAIChatEncoder())
register(AnthropicEncoder())


# ---------------------------------------------------------------------------------------------- the server


@dataclass
class Received:
    """One request the fake received: its JSON body and headers."""

    body: dict[str, Any]
    headers: dict[str, str]


class FakeProviders:
    """The fake providers' HTTP server: every registered encoder under ``/<name>`` (``base_url(name)`` is what
    the relay's model config points at). ``script(name, *replies)`` queues what that provider answers next."""

    def __init__(self, registry: dict[str, Encoder]) -> None:
        self.registry = registry
        self.replies: dict[str, list[Reply]] = {n: [] for n in registry}
        self.requests: dict[str, list[Received]] = {n: [] for n in registry}
        #: Responses being written now, per provider.
        self.open: dict[str, int] = dict.fromkeys(registry, 0)
        #: Responses whose client closed the connection before their end, per provider.
        self.ended_early: dict[str, int] = dict.fromkeys(registry, 0)
        #: Requests the provider would refuse (``Encoder.check``): their problems, per provider.
        self.refused: dict[str, list[list[str]]] = {n: [] for n in registry}
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> FakeProviders:
        app = web.Application()
        for name, enc in self.registry.items():
            app.router.add_post(f"/{name}{enc.path}", self._handler(name))
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def base_url(self, name: str) -> str:
        return f"{self.url}/{name}{self.registry[name].base_suffix}"

    def script(self, name: str, *replies: Reply) -> None:
        self.replies[name].extend(replies)

    def reset(self) -> None:
        for name in self.registry:
            self.replies[name].clear()
            self.requests[name].clear()
            self.refused[name].clear()

    async def wait_closed(self, name: str, count: int = 1, timeout: float = 10.0) -> None:
        """Wait until ``count`` responses of ``name`` were closed by their client and none is still open."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.ended_early[name] < count or self.open[name]:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"{name}: {self.ended_early[name]} responses closed early, {self.open[name]} "
                                     f"open, after {timeout} s")
            await asyncio.sleep(0.02)

    def _handler(self, name: str) -> Any:
        enc = self.registry[name]

        async def handle(request: web.Request) -> web.StreamResponse:
            body = await request.json()
            self.requests[name].append(Received(body, dict(request.headers)))
            problems = enc.check(body)
            if problems:
                self.refused[name].append(problems)
                return web.json_response({"type": "error", "error": {"type": "invalid_request_error",
                                                                     "message": "; ".join(problems)}}, status=400)
            reply = self.replies[name].pop(0) if self.replies[name] else Reply(text=["(unscripted)"])
            if reply.fail == "drop":
                assert request.transport is not None
                request.transport.close()
                return web.Response()
            if reply.fail is not None and reply.fail != "garbage":
                status, headers, payload = enc.error(reply.fail, reply)
                return web.json_response(payload, status=status, headers=headers)
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await resp.prepare(request)
            frames: Iterable[bytes | Pause] = enc.frames(reply, body)
            if reply.fail == "garbage":  # the reply's first frames, then one the SDK cannot read
                frames = [*itertools.islice(frames, 2), enc.garbage()]
            self.open[name] += 1
            try:
                for frame in frames:
                    if isinstance(frame, Pause):
                        if not await self._pause(request, frame.seconds):
                            self.ended_early[name] += 1
                            return resp
                        continue
                    await resp.write(frame)
                await resp.write_eof()
            except (ConnectionError, RuntimeError):  # the client went away mid-stream
                self.ended_early[name] += 1
            finally:
                self.open[name] -= 1
            return resp

        return handle

    @staticmethod
    async def _pause(request: web.Request, seconds: float) -> bool:
        """Sleep ``seconds``; False as soon as the client closed the connection."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while True:
            transport = request.transport
            if transport is None or transport.is_closing():
                return False
            left = end - loop.time()
            if left <= 0:
                return True
            await asyncio.sleep(min(left, 0.02))

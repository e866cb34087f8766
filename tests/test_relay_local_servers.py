"""The OpenAI-compatible adapter against local servers, through the real ``openai`` SDK: scripted fakes of Ollama,
llama.cpp's ``llama-server`` and vLLM, each writing its streams the way its docs and issue trackers show them
(tool calls whole or in pieces, with or without ``index`` / ``id``; usage in its own chunk, in the last one, or
null), and each refusing ``tools`` in its own words, which switches the model to tools as text."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from relay_helpers import joined, launch, register

from widget.relay.config import AppConfig, ModelConfig
from widget.relay.models.base import ModelError, ModelRequest, TextDelta, ToolCall, Usage
from widget.relay.models.openai_chat import OpenAIAdapter

pytestmark = pytest.mark.relay

TOOL = {"name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "strict": True}
ASK = [{"role": "user", "content": "Weather in Oslo and Rome?"}]
TWO_CALLS = [("get_weather", '{"city": "Oslo"}'), ("get_weather", '{"city": "Rome"}')]


@dataclass
class Turn:
    """What the scripted model answers: text pieces, then calls ``(name, arguments as JSON text)``."""

    text: list[str] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)
    usage: tuple[int, int] = (31, 9)


class Server:
    """One fake server: a queue of scripted turns, the requests it got, how it refuses."""

    #: the flavour's mount path
    name = ""

    def __init__(self) -> None:
        self.turns: list[Turn] = []
        self.requests: list[dict[str, Any]] = []
        #: ``False``: the model cannot take tools (the server's own refusal)
        self.tools = True
        self.variant = ""
        #: a (status, headers, body) answer to the next request instead of a stream
        self.fail: tuple[int, dict[str, str], Any] | None = None
        #: raw JSON chunks to send instead of a scripted turn (for shapes no flavour writes)
        self.raw: list[dict[str, Any]] | None = None

    def refusal(self) -> tuple[int, Any]:
        raise NotImplementedError

    def frames(self, turn: Turn, body: dict[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        if self.fail is not None:
            (status, headers, err), self.fail = self.fail, None
            return web.json_response(err, status=status, headers=headers)
        if body.get("tools") and not self.tools:
            status, err = self.refusal()
            return web.json_response(err, status=status)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if self.raw is not None:
            frames, self.raw = self.raw, None
        else:
            frames = self.frames(self.turns.pop(0) if self.turns else Turn(["(unscripted)"]), body)
        for f in frames:
            await resp.write(f"data: {json.dumps(f)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp


def include_usage(body: dict[str, Any]) -> bool:
    return bool((body.get("stream_options") or {}).get("include_usage"))


class Ollama(Server):
    """Ollama's /v1 (docs/openai.md): each tool call whole in one chunk with its id; ``index`` missing before
    0.4.7 (variant ``no-index``), then 0 for every call of a response (variant ``index-0``, ollama#15457);
    ``finish_reason`` ``tool_calls``; usage in a chunk of its own, only when ``stream_options.include_usage``."""

    name = "ollama"

    def refusal(self) -> tuple[int, Any]:
        return 400, {"error": {"message": "registry.ollama.ai/library/gemma3:4b does not support tools",
                               "type": "api_error", "param": None, "code": None}}

    def frames(self, turn: Turn, body: dict[str, Any]) -> list[dict[str, Any]]:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"id": "chatcmpl-811", "object": "chat.completion.chunk", "created": 1730000000,
                    "model": body["model"], "system_fingerprint": "fp_ollama",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        out = [chunk({"role": "assistant", "content": p}) for p in turn.text]
        for i, (name, args) in enumerate(turn.calls):
            call: dict[str, Any] = {"id": f"call_{i}abc", "type": "function",
                                    "function": {"name": name, "arguments": args}}
            if self.variant == "index-0":
                call["index"] = 0
            out.append(chunk({"role": "assistant", "content": "", "tool_calls": [call]}))
        out.append(chunk({"role": "assistant", "content": ""}, "tool_calls" if turn.calls else "stop"))
        if include_usage(body):
            out.append({"id": "chatcmpl-811", "object": "chat.completion.chunk", "created": 1730000000,
                        "model": body["model"], "system_fingerprint": "fp_ollama", "choices": [],
                        "usage": {"prompt_tokens": turn.usage[0], "completion_tokens": turn.usage[1],
                                  "total_tokens": sum(turn.usage)}})
        return out


class LlamaCpp(Server):
    """llama.cpp's llama-server (with ``--jinja``): the first piece of a call carries ``id``, type and name with
    empty arguments, later pieces only ``index`` and arguments (ggml-org/llama.cpp#13800); variant ``early``:
    the builds before that, with the name repeated on every piece and the id inside ``function``. The last chunk
    always carries ``usage`` and ``timings``, asked or not. Without ``--jinja``: a 500 for any ``tools``."""

    name = "llamacpp"

    def refusal(self) -> tuple[int, Any]:
        return 500, {"error": {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}}

    def frames(self, turn: Turn, body: dict[str, Any]) -> list[dict[str, Any]]:
        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
            return {"choices": [{"finish_reason": finish, "index": 0, "delta": delta}], "created": 1730000000,
                    "id": "chatcmpl-Qx1", "model": "gpt-3.5-turbo", "system_fingerprint": "b5501-0cf6725e",
                    "object": "chat.completion.chunk", **extra}

        out = [chunk({"role": "assistant", "content": None})]
        out += [chunk({"content": p}) for p in turn.text]
        for i, (name, args) in enumerate(turn.calls):
            pieces = [args[k:k + 4] for k in range(0, len(args), 4)]
            if self.variant == "early":
                for p in pieces:
                    out.append(chunk({"tool_calls": [{"index": i, "function": {"name": name, "id": f"tc{i}",
                                                                               "arguments": p}}]}))
            else:
                out.append(chunk({"tool_calls": [{"index": i, "id": f"tc{i}", "type": "function",
                                                  "function": {"name": name, "arguments": ""}}]}))
                out += [chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]}) for p in pieces]
        out.append(chunk({}, "tool_calls" if turn.calls else "stop",
                         usage={"completion_tokens": turn.usage[1], "prompt_tokens": turn.usage[0],
                                "total_tokens": sum(turn.usage)},
                         timings={"prompt_n": turn.usage[0], "prompt_ms": 40.2, "predicted_n": turn.usage[1],
                                  "predicted_ms": 120.9}))
        return out


class VLLM(Server):
    """vLLM's OpenAI server: the first piece of a call carries ``id``, type and name (no arguments key), later
    pieces ``index`` and arguments; choices carry ``logprobs`` and ``stop_reason``; with
    ``stream_options.include_usage`` every chunk has ``usage: null`` and a last chunk with no choices has it
    (``prompt_tokens_details`` null). Without ``--enable-auto-tool-choice`` a request with tools is a 400 (its
    error body flat, not under ``error``)."""

    name = "vllm"

    def refusal(self) -> tuple[int, Any]:
        return 400, {"object": "error", "message": "\"auto\" tool choice requires --enable-auto-tool-choice and "
                                                   "--tool-call-parser to be set", "type": "BadRequestError",
                     "param": None, "code": 400}

    def frames(self, turn: Turn, body: dict[str, Any]) -> list[dict[str, Any]]:
        usage = include_usage(body)

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            c: dict[str, Any] = {"id": "chatcmpl-9f2", "object": "chat.completion.chunk", "created": 1730000000,
                                 "model": body["model"],
                                 "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                                              "stop_reason": None}]}
            if usage:
                c["usage"] = None
            return c

        out = [chunk({"role": "assistant", "content": ""})]
        out += [chunk({"content": p}) for p in turn.text]
        for i, (name, args) in enumerate(turn.calls):
            out.append(chunk({"tool_calls": [{"id": f"chatcmpl-tool-{i}f0", "type": "function", "index": i,
                                              "function": {"name": name}}]}))
            out += [chunk({"tool_calls": [{"index": i, "function": {"arguments": args[k:k + 5]}}]})
                    for k in range(0, len(args), 5)]
        out.append(chunk({"content": ""}, "tool_calls" if turn.calls else "stop"))
        if usage:
            out.append({"id": "chatcmpl-9f2", "object": "chat.completion.chunk", "created": 1730000000,
                        "model": body["model"], "choices": [],
                        "usage": {"prompt_tokens": turn.usage[0], "total_tokens": sum(turn.usage),
                                  "completion_tokens": turn.usage[1], "prompt_tokens_details": None}})
        return out


SERVERS: dict[str, Server] = {s.name: s for s in (Ollama(), LlamaCpp(), VLLM())}


@pytest_asyncio.fixture(scope="module")
async def servers() -> AsyncIterator[str]:
    app = web.Application()
    for s in SERVERS.values():
        app.router.add_post(f"/{s.name}/v1/chat/completions", s.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


def server(name: str, variant: str = "", tools: bool = True) -> Server:
    s = SERVERS[name]
    s.turns, s.requests, s.tools, s.variant, s.fail, s.raw = [], [], tools, variant, None, None
    return s


def cfg(base: str, name: str, **kw: Any) -> ModelConfig:
    return ModelConfig(**{"adapter": "openai", "model": "local-model", "base_url": f"{base}/{name}/v1",
                          "max_retries": 0, "request_timeout_s": 5, "strict_tools": False, **kw})


async def answer(adapter: OpenAIAdapter, tools: list[dict[str, Any]] | None = None,
                 messages: list[dict[str, Any]] | None = None) -> list[Any]:
    req = ModelRequest(messages=messages or ASK, tools=[TOOL] if tools is None else tools)
    return [c async for c in adapter.stream(req)]


# ---------------------------------------------------------------------------------------------- stream shapes


@pytest.mark.parametrize("name, variant", [("ollama", "no-index"), ("ollama", "index-0"), ("llamacpp", "jinja"),
                                           ("llamacpp", "early"), ("vllm", "")])
async def test_text_two_calls_and_usage(servers: str, name: str, variant: str) -> None:
    """Text, then two calls of the same tool, then usage: each server's shape gives the same chunks."""
    s = server(name, variant)
    s.turns.append(Turn(["Checking ", "both."], TWO_CALLS, usage=(31, 9)))
    adapter = OpenAIAdapter(cfg(servers, name))
    try:
        out = await answer(adapter)
    finally:
        await adapter.aclose()
    assert out[:2] == [TextDelta("Checking "), TextDelta("both.")]
    assert [(c.name, c.arguments) for c in out[2:4]] == [("get_weather", {"city": "Oslo"}),
                                                          ("get_weather", {"city": "Rome"})]
    ids = [c.provider_id for c in out[2:4]]
    assert len(set(ids)) == 2 or variant == "early"
    assert out[4:] == [Usage(input_tokens=31, output_tokens=9)]
    sent = s.requests[-1]
    assert sent["stream_options"] == {"include_usage": True} and "tool_choice" not in sent
    assert "strict" not in sent["tools"][0]["function"] and "max_tokens" not in sent


async def test_usage_fields_missing_null_or_absent(servers: str) -> None:
    s = server("vllm")
    adapter = OpenAIAdapter(cfg(servers, "vllm"))

    def chunks(usage: Any) -> list[dict[str, Any]]:
        head = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        return [{**head, "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}],
                 "usage": None}, {**head, "choices": [], "usage": usage}]

    try:
        s.raw = chunks({"prompt_tokens": None, "completion_tokens": 4,
                        "completion_tokens_details": {"reasoning_tokens": 2}, "prompt_tokens_details": None})
        assert await answer(adapter) == [TextDelta("ok"), Usage(output_tokens=4, reasoning_tokens=2)]
        s.raw = chunks({"prompt_tokens": 12, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 8}})
        assert await answer(adapter) == [TextDelta("ok"), Usage(12, 3, cached_input_tokens=8)]
        s.raw = chunks({})  # says nothing: no Usage chunk
        assert await answer(adapter) == [TextDelta("ok")]
        s.raw = chunks(None)
        assert await answer(adapter) == [TextDelta("ok")]
    finally:
        await adapter.aclose()


async def test_finish_reasons_and_odd_call_shapes(servers: str) -> None:
    """Calls are what the stream carried, whatever ``finish_reason`` says; a call cut by ``length`` keeps its raw
    arguments (the relay refuses them and tells the model); the legacy ``function_call`` delta is a call too."""
    s = server("ollama")
    adapter = OpenAIAdapter(cfg(servers, "ollama"))
    head = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def ch(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    try:
        # a call with finish_reason "stop" (older Ollama), arguments sent as an object
        s.raw = [ch({"tool_calls": [{"id": "a", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]}),
                 ch({}, "stop")]
        assert await answer(adapter) == [ToolCall("get_weather", {"city": "Oslo"}, provider_id="a")]
        # cut by max_tokens mid-arguments
        s.raw = [ch({"tool_calls": [{"index": 0, "id": "b", "function": {"name": "get_weather", "arguments": ""}}]}),
                 ch({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Os'}}]}), ch({}, "length")]
        assert await answer(adapter) == [ToolCall("get_weather", '{"city": "Os', provider_id="b")]
        # the deprecated functions API
        s.raw = [ch({"function_call": {"name": "get_weather", "arguments": '{"city"'}}),
                 ch({"function_call": {"arguments": ': "Rome"}'}}), ch({}, "function_call")]
        assert await answer(adapter) == [ToolCall("get_weather", {"city": "Rome"})]
        # pieces with neither index nor id after the first: one call; a new name without either: a second
        s.raw = [ch({"tool_calls": [{"id": "c", "function": {"name": "get_weather", "arguments": '{"ci'}}]}),
                 ch({"tool_calls": [{"function": {"arguments": 'ty": "Oslo"}'}}]}),
                 ch({"tool_calls": [{"function": {"name": "get_time", "arguments": "{}"}}]}), ch({}, None)]
        assert await answer(adapter) == [ToolCall("get_weather", {"city": "Oslo"}, provider_id="c"),
                                         ToolCall("get_time", {})]
    finally:
        await adapter.aclose()


# ---------------------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("name", ["ollama", "llamacpp", "vllm"])
async def test_a_server_that_refuses_tools_switches_the_model_to_tools_as_text(
        servers: str, name: str, caplog: pytest.LogCaptureFixture) -> None:
    s = server(name, tools=False)
    s.turns += [Turn(['I will check. <tool_call>{"name": "get_weather", ', '"arguments": {"city": "Oslo"}}</tool',
                      "_call>"]), Turn(["Sunny."])]
    adapter = OpenAIAdapter(cfg(servers, name))
    caplog.set_level(logging.WARNING, logger="widget.relay")
    try:
        out = await answer(adapter)
        assert out[:2] == [TextDelta("I will check. "), ToolCall("get_weather", {"city": "Oslo"})]
        assert [bool(r.get("tools")) for r in s.requests] == [True, False]
        system = s.requests[1]["messages"][0]
        assert system["role"] == "system" and "## get_weather" in system["content"] and "<tool_call>" in system[
            "content"]
        # the next request goes as text at once, and the switch is logged once
        history: list[dict[str, Any]] = [*ASK, {"role": "assistant", "content": "I will check.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
                   {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
        assert (await answer(adapter, messages=history))[0] == TextDelta("Sunny.")
        assert len(s.requests) == 3 and "tools" not in s.requests[2]
        assert s.requests[2]["messages"][-1] == {"role": "user",
                                                 "content": '<tool_result name="get_weather">\nsunny\n</tool_result>'}
        switched = [r for r in caplog.records if "refused tools" in r.getMessage()]
        assert len(switched) == 1 and "tool_calling = \"text\"" in switched[0].getMessage()
    finally:
        await adapter.aclose()


async def test_configured_text_mode_never_sends_tools(servers: str) -> None:
    s = server("ollama")
    s.turns.append(Turn(['<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>']))
    adapter = OpenAIAdapter(cfg(servers, "ollama", tool_calling="text"))
    try:
        out = await answer(adapter)
    finally:
        await adapter.aclose()
    assert out == [ToolCall("get_weather", {"city": "Rome"}), Usage(31, 9)]
    assert len(s.requests) == 1 and "tools" not in s.requests[0]


async def test_a_server_that_refuses_stream_options_is_asked_without(
        servers: str, caplog: pytest.LogCaptureFixture) -> None:
    s = server("ollama")
    s.fail = (400, {}, {"error": {"message": "Unrecognized request argument supplied: stream_options",
                                  "type": "invalid_request_error", "param": None, "code": None}})
    s.turns.append(Turn(["hi"]))
    adapter = OpenAIAdapter(cfg(servers, "ollama"))
    caplog.set_level(logging.WARNING, logger="widget.relay")
    try:
        assert await answer(adapter) == [TextDelta("hi")]  # no usage: not asked for, not sent
    finally:
        await adapter.aclose()
    assert ["stream_options" in r for r in s.requests] == [True, False]
    assert len([r for r in caplog.records if "stream_options" in r.getMessage()]) == 1


async def test_other_refusals_stay_errors(servers: str) -> None:
    s = server("vllm")
    s.fail = (400, {}, {"object": "error", "message": "temperature must be in [0, 2]", "type": "BadRequestError",
                        "param": None, "code": 400})
    adapter = OpenAIAdapter(cfg(servers, "vllm"))
    try:
        with pytest.raises(ModelError) as exc:
            await answer(adapter)
        assert exc.value.code == "model_error" and not adapter.text_tools and len(s.requests) == 1
    finally:
        await adapter.aclose()


@pytest.mark.parametrize("headers, expected", [({"retry-after": "7"}, 7.0), ({"retry-after-ms": "1500"}, 1.5),
                                               ({"retry-after": "soon"}, None), ({}, None), ("date", 30.0)],
                         ids=["seconds", "ms", "unreadable", "none", "http-date"])
async def test_rate_limited_carries_retry_after(servers: str, headers: Any, expected: float | None) -> None:
    s = server("vllm")
    if headers == "date":
        headers = {"retry-after": formatdate(time.time() + 30, usegmt=True)}
    s.fail = (429, headers, {"object": "error", "message": "Too many requests", "type": "RateLimitError",
                             "code": 429})
    adapter = OpenAIAdapter(cfg(servers, "vllm"))
    try:
        with pytest.raises(ModelError) as exc:
            await answer(adapter)
    finally:
        await adapter.aclose()
    assert exc.value.code == "model_rate_limited"
    if expected is None:
        assert exc.value.retry_after is None
    else:
        assert exc.value.retry_after is not None and abs(exc.value.retry_after - expected) < 2


async def test_the_leading_system_messages_go_as_one(servers: str) -> None:
    """Local chat templates often take one system message: the relay's several (prompt, rules, page context) are
    joined for any host but OpenAI, whose request keeps them apart."""
    s = server("llamacpp")
    s.turns.append(Turn(["ok"]))
    messages = [{"role": "system", "content": "You are the copilot."}, {"role": "system", "content": "Cite [s1]."},
                *ASK]
    adapter = OpenAIAdapter(cfg(servers, "llamacpp"))
    try:
        await answer(adapter, messages=messages)
    finally:
        await adapter.aclose()
    assert s.requests[-1]["messages"] == [{"role": "system", "content": "You are the copilot.\n\nCite [s1]."}, *ASK]
    openai = OpenAIAdapter(ModelConfig(adapter="openai", model="gpt-4o-mini", api_key="sk-x"))
    try:
        assert openai._request_kwargs(ModelRequest(messages=messages))["messages"] == messages
    finally:
        await openai.aclose()


async def test_max_tokens_goes_under_each_hosts_name(servers: str) -> None:
    s = server("llamacpp")
    s.turns.append(Turn(["ok"]))
    adapter = OpenAIAdapter(cfg(servers, "llamacpp", max_tokens=256))
    try:
        await answer(adapter)
        assert s.requests[-1]["max_tokens"] == 256 and "max_completion_tokens" not in s.requests[-1]
    finally:
        await adapter.aclose()
    openai = OpenAIAdapter(ModelConfig(adapter="openai", model="gpt-4o-mini", api_key="sk-x", max_tokens=256))
    try:  # OpenAI itself (no base_url): its reasoning models refuse max_tokens
        kwargs = openai._request_kwargs(ModelRequest(messages=ASK))
        assert kwargs["max_completion_tokens"] == 256 and "max_tokens" not in kwargs
    finally:
        await openai.aclose()


# ---------------------------------------------------------------------------------------------- a relay turn


async def test_relay_turn_on_a_model_without_tools(servers: str, tmp_path: Path) -> None:
    """Ollama with a model that does not take tools: the relay's first request is refused, the model is asked
    again with the tools as text, its call runs the page function, and its answer reads the result."""
    s = server("ollama", tools=False)
    s.turns += [Turn(['<tool_call>{"name": "get_selection", "arguments": {"limit": 2}}</tool_call>']),
                Turn(["You selected ", "2 items."])]
    h = await launch(tmp_path, apps={"demo": AppConfig(model="local")},
                     models={"demo": ModelConfig(chunk_delay_ms=0), "local": cfg(servers, "ollama")})
    try:
        async with aiohttp.ClientSession() as http:
            rec, _data, _url = await joined(http, h.url)
            await register(rec, "get_selection")
            rec.auto_answer = lambda call: f"{call['arguments']['limit']} items"
            await rec.call("user_message", {"text": "what is selected?", "idempotency_key": "m"})
            fin = await rec.wait("completion.finished")
            assert fin["status"] == "done"
            final = [d for e, d in rec.events if e == "completion.ended"][-1]["message"]
            assert final["content"] == "You selected 2 items."
            assert [bool(r.get("tools")) for r in s.requests] == [True, False, False]
            assert s.requests[-1]["messages"][-1]["content"] == (
                '<tool_result name="get_selection">\n2 items\n</tool_result>')
            await rec.disconnect()
    finally:
        await h.stop()


# ---------------------------------------------------------------------------------------------- reasoning text


@pytest.mark.parametrize("pieces, shown", [
    (["<thi", "nk>The reader asks about ", "Oslo.</th", "ink>\n\nIt is ", "sunny."], "It is sunny."),
    (["  <think>", "x" * 5000, "</think>", "Done."], "Done."),
    (["<b>Bold</b> first."], "<b>Bold</b> first."),
    (["<th", "is is text."], "<this is text."),
    (["<"], "<"),
    (["Plain, then <think>kept</think> mid-answer."], "Plain, then <think>kept</think> mid-answer."),
], ids=["split-tags", "long-reasoning", "html-first", "tag-prefix-only", "lone-bracket", "not-leading"])
async def test_a_local_reasoning_models_leading_think_block_is_never_shown(servers: str, pieces: list[str],
                                                                           shown: str) -> None:
    """DeepSeek-R1, Qwen3 and the like on a server without a reasoning parser put ``<think>...</think>`` first in
    the answer: the adapter holds it back and the reader sees the answer after it; any other text is left alone."""
    s = server("ollama")
    s.turns.append(Turn(pieces, [], usage=(5, 7)))
    adapter = OpenAIAdapter(cfg(servers, "ollama"))
    try:
        out = await answer(adapter)
    finally:
        await adapter.aclose()
    assert "".join(c.text for c in out if isinstance(c, TextDelta)) == shown
    assert out[-1] == Usage(input_tokens=5, output_tokens=7)


async def test_endless_reasoning_is_cut(servers: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import widget.relay.models.openai_chat as chat

    monkeypatch.setattr(chat, "MAX_THINK_CHARS", 100)
    s = server("ollama")
    s.turns.append(Turn(["<think>", "y" * 60, "y" * 60, "</think>never"], []))
    adapter = OpenAIAdapter(cfg(servers, "ollama"))
    try:
        with pytest.raises(ModelError) as err:
            await answer(adapter)
    finally:
        await adapter.aclose()
    assert err.value.code == "answer_too_long"

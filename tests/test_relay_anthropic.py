"""The Anthropic Messages adapter (widget/relay/models/anthropic.py) through the real ``anthropic`` SDK against a
local server playing Anthropic's SSE events: the conversion of the relay's chat messages, the request it sends,
the usage it reports, its stop reasons and its errors. The conversation scenarios every provider shares are in
tests/test_model_scenarios.py; the conversion and the request alone are unit tests in tests/test_model_units.py."""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from provider_fakes import sse
from relay_helpers import declare, joined, launch
from test_model_units import collect, failure

from widget.errors import ConfigError
from widget.relay.config import AppConfig, ModelConfig
from widget.relay.models.adapters import make_adapter
from widget.relay.models.anthropic import DEFAULT_MAX_TOKENS, AnthropicAdapter
from widget.relay.models.base import ModelError, ModelRequest, TextDelta, ToolCall, Usage
from widget.relay.models.tools_text import TextToolsAdapter

pytestmark = pytest.mark.relay


def test_the_adapter_checks_its_settings_and_is_made_by_name() -> None:
    """Made with the SDK (imported only when an anthropic model is configured): a temperature outside 0..1 is a
    ConfigError naming the model, and make_adapter picks the adapter."""
    with pytest.raises(ConfigError, match="temperature from 0 to 1"):
        AnthropicAdapter(ModelConfig(adapter="anthropic", model="claude-x", temperature=1.5))
    assert isinstance(make_adapter(ModelConfig(adapter="anthropic", model="claude-x")), AnthropicAdapter)


async def test_unreachable() -> None:
    assert (await failure("http://127.0.0.1:9")).code == "model_unavailable"


# ---------------------------------------------------------------------------------------------- the stream


class Server:
    """Plays the next scripted answer: a list of SSE frames, or ``(status, headers, body)``."""

    def __init__(self) -> None:
        self.answers: list[Any] = []
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.json())
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        answer = self.answers.pop(0)
        if isinstance(answer, tuple):
            status, headers, body = answer
            return web.json_response(body, status=status, headers=headers)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for frame in answer:
            await resp.write(frame)
        await resp.write_eof()
        return resp


@pytest_asyncio.fixture(scope="module")
async def server() -> AsyncIterator[tuple[Server, str]]:
    s = Server()
    app = web.Application()
    app.router.add_post("/v1/messages", s.handle)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield s, f"http://127.0.0.1:{port}"
    await runner.cleanup()


def ev(data: dict[str, Any]) -> bytes:
    return sse(data, data["type"])


def start(input_tokens: int = 30, cache_read: int = 0, cache_write: int = 0) -> bytes:
    return ev({"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-x",
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1, "cache_read_input_tokens": cache_read,
                  "cache_creation_input_tokens": cache_write}}})


def text_block(index: int, *parts: str) -> list[bytes]:
    return [ev({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
            *(ev({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": p}})
              for p in parts),
            ev({"type": "content_block_stop", "index": index})]


def tool_block(index: int, id_: str, name: str, *json_parts: str) -> list[bytes]:
    return [ev({"type": "content_block_start", "index": index,
                "content_block": {"type": "tool_use", "id": id_, "name": name, "input": {}}}),
            *(ev({"type": "content_block_delta", "index": index,
                  "delta": {"type": "input_json_delta", "partial_json": p}}) for p in json_parts),
            ev({"type": "content_block_stop", "index": index})]


def end(stop_reason: str, output_tokens: int = 9) -> list[bytes]:
    return [ev({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens}}), ev({"type": "message_stop"})]


async def test_text_parallel_tool_use_and_usage(server: tuple[Server, str]) -> None:
    s, base = server
    s.answers.append([start(30, cache_read=100, cache_write=20), sse({"type": "ping"}, "ping"),
                      *text_block(0, "Let me ", "check."),
                      *tool_block(1, "toolu_1", "get_weather", "", '{"ci', 'ty": "Os', 'lo"}'),
                      *tool_block(2, "toolu_2", "get_time"), *end("tool_use", 42)])
    out = await collect(base)
    assert out == [TextDelta("Let me "), TextDelta("check."),
                   Usage(input_tokens=150, output_tokens=42, cached_input_tokens=100, cache_write_tokens=20),
                   ToolCall("get_weather", {"city": "Oslo"}, provider_id="toolu_1"),
                   ToolCall("get_time", {}, provider_id="toolu_2")]
    body, headers = s.bodies[-1], s.headers[-1]
    assert body["model"] == "claude-x" and body["max_tokens"] == DEFAULT_MAX_TOKENS and body["stream"] is True
    # the conversation's last block is a prompt-cache breakpoint (prompt_cache is on unless false)
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi",
                                                              "cache_control": {"type": "ephemeral"}}]}]
    # the key as the SDK sends it (x-api-key, or a bearer token in newer SDKs)
    assert "sk-ant-test" in headers.get("x-api-key", headers.get("authorization", ""))
    assert "anthropic-version" in headers


@pytest.mark.parametrize("stop, code, retryable", [
    ("max_tokens", "answer_too_long", True),
    ("model_context_window_exceeded", "context_overflow", True),
    ("refusal", "model_error", False),
])
async def test_stop_reasons(server: tuple[Server, str], stop: str, code: str, retryable: bool) -> None:
    """A response cut by its stop reason fails with the relay's code; a tool call cut with it is never yielded."""
    s, base = server
    s.answers.append([start(), *text_block(0, "Half an ans"), *tool_block(1, "toolu_1", "get_weather", '{"ci'),
                      *end(stop)])
    adapter = AnthropicAdapter(ModelConfig(adapter="anthropic", model="claude-x", base_url=base, max_retries=0))
    got: list[Any] = []
    with pytest.raises(ModelError) as exc:
        async for c in adapter.stream(ModelRequest(messages=[{"role": "user", "content": "hi"}])):
            got.append(c)
    await adapter.aclose()
    assert exc.value.code == code and exc.value.retryable is retryable
    assert [c for c in got if not isinstance(c, Usage)] == [TextDelta("Half an ans")]
    assert not any(isinstance(c, ToolCall) for c in got)


@pytest.mark.parametrize("status, headers, kind, message, code, retryable, retry_after", [
    (429, {"retry-after": "12"}, "rate_limit_error", "slow down", "model_rate_limited", True, 12.0),
    (429, {}, "rate_limit_error", "slow down", "model_rate_limited", True, None),
    (401, {}, "authentication_error", "invalid x-api-key", "model_auth", False, None),
    (403, {}, "permission_error", "no access", "model_auth", False, None),
    (400, {}, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum", "context_overflow",
     True, None),
    (413, {}, "request_too_large", "Request exceeds the maximum allowed number of bytes.", "context_overflow", True,
     None),
    (400, {}, "invalid_request_error", "messages: roles must alternate", "model_error", True, None),
    (500, {}, "api_error", "Internal server error", "model_unavailable", True, None),
    (529, {}, "overloaded_error", "Overloaded", "model_unavailable", True, None),
])
async def test_http_errors(server: tuple[Server, str], status: int, headers: dict[str, str], kind: str, message: str,
                           code: str, retryable: bool, retry_after: float | None) -> None:
    s, base = server
    s.answers.append((status, headers, {"type": "error", "error": {"type": kind, "message": message}}))
    err = await failure(base)
    assert (err.code, err.retryable, err.retry_after) == (code, retryable, retry_after)
    assert message not in err.message


async def test_retry_after_as_an_http_date(server: tuple[Server, str]) -> None:
    s, base = server
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    s.answers.append((429, {"retry-after": when}, {"type": "error", "error": {"type": "rate_limit_error",
                                                                              "message": "x"}}))
    err = await failure(base)
    assert err.retry_after is not None and 25 <= err.retry_after <= 30


@pytest.mark.parametrize("kind, code", [("overloaded_error", "model_unavailable"),
                                        ("rate_limit_error", "model_rate_limited"),
                                        ("api_error", "model_unavailable")])
async def test_an_error_event_mid_stream(server: tuple[Server, str], kind: str, code: str) -> None:
    """Anthropic may answer 200 and report an error as an ``error`` event during the stream."""
    s, base = server
    s.answers.append([start(), *text_block(0, "Hel"), sse({"type": "error", "error": {"type": kind,
                                                                                     "message": "Overloaded"}},
                                                        "error")])
    assert (await failure(base)).code == code


@pytest.mark.parametrize("frames", [
    [start(), b"event: content_block_delta\ndata: {not json\n\n"],
    [start(), ev({"type": "content_block_delta", "index": 5, "delta": {"type": "input_json_delta",
                                                                       "partial_json": "{}"}})],
], ids=["broken-json", "delta-for-no-block"])
async def test_unreadable_events(server: tuple[Server, str], frames: list[bytes]) -> None:
    s, base = server
    s.answers.append(frames)
    assert (await failure(base)).code == "model_bad_response"


async def test_a_stream_that_ends_before_message_stop(server: tuple[Server, str]) -> None:
    s, base = server
    s.answers.append([start(), *text_block(0, "Hel")])
    assert (await failure(base)).code == "model_unavailable"


async def test_a_tool_use_with_arguments_that_do_not_parse_stays_raw(server: tuple[Server, str]) -> None:
    """The relay answers the model that the arguments were invalid (it never runs a half-parsed call)."""
    s, base = server
    s.answers.append([start(), *tool_block(0, "toolu_9", "get_weather", '{"city": '), *end("tool_use")])
    out = await collect(base)
    assert out[-1] == ToolCall("get_weather", '{"city": ', provider_id="toolu_9")
    assert json.dumps(s.bodies[-1]["messages"]) == ('[{"role": "user", "content": [{"type": "text", "text": "hi", '
                                                    '"cache_control": {"type": "ephemeral"}}]}]')


async def test_tools_as_text_around_the_adapter(server: tuple[Server, str]) -> None:
    """``tool_calling = "text"``: the tools go in the system prompt, none natively, and a block in the answer's
    text becomes a call (the text around it streams)."""
    s, base = server
    adapter = make_adapter(ModelConfig(adapter="anthropic", model="claude-x", base_url=base, max_retries=0,
                                       tool_calling="text"))
    assert isinstance(adapter, TextToolsAdapter) and isinstance(adapter.inner, AnthropicAdapter)
    s.answers.append([start(), *text_block(0, "Checking. <tool_", 'call>{"name": "get_weather", "arguments": ',
                                           '{"city": "Oslo"}}</tool_call>'), *end("end_turn")])
    tool = {"name": "get_weather", "description": "The weather.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    try:
        out = [c async for c in adapter.stream(ModelRequest(messages=[{"role": "user", "content": "Oslo?"}],
                                                            tools=[tool]))]
    finally:
        await adapter.aclose()
    assert "".join(c.text for c in out if isinstance(c, TextDelta)).strip() == "Checking."
    assert [c for c in out if isinstance(c, ToolCall)] == [ToolCall("get_weather", {"city": "Oslo"})]
    body = s.bodies[-1]
    (system,) = body["system"]  # one text block, a prompt-cache breakpoint
    assert "tools" not in body and "<tool_call>" in system["text"] and "get_weather" in system["text"]


async def test_a_relay_turn_sends_schemas_with_their_constraints(server: tuple[Server, str], tmp_path: Path) -> None:
    """Through a relay: a page tool's schema reaches Anthropic with its constraint keywords (no strict mode to
    refuse them), the relay's own ``multiline`` format said in words; the system prompt apart from the messages."""
    s, base = server
    h = await launch(tmp_path, apps={"demo": AppConfig(model="claude")},
                     models={"demo": ModelConfig(chunk_delay_ms=0),
                             "claude": ModelConfig(adapter="anthropic", model="claude-x", base_url=base,
                                                   max_retries=0)})
    search = {"kind": "tool", "description": "Search orders.", "handler": "page", "parameters": {
        "type": "object", "properties": {
            "email": {"type": "string", "format": "email"},
            "note": {"type": "string", "format": "multiline", "maxLength": 200},
            "limit": {"type": "integer", "minimum": 1, "maximum": 20}},
        "required": ["email"], "additionalProperties": False}}
    s.answers.append([start(), *text_block(0, "Hello."), *end("end_turn")])
    try:
        async with aiohttp.ClientSession() as http:
            rec, _, _ = await joined(http, h.url)
            await declare(rec, {"search_orders": search})
            assert (await rec.call("user_message", {"text": "find my order", "idempotency_key": "m"}))["ok"]
            assert (await rec.wait("completion.finished"))["status"] == "done"
            await rec.disconnect()
    finally:
        await h.stop()
    body = s.bodies[-1]
    (tool,) = [t for t in body["tools"] if t["name"] == "search_orders"]
    props = tool["input_schema"]["properties"]
    assert props["email"] == {"type": "string", "format": "email"}
    assert props["limit"] == {"type": ["integer", "null"], "minimum": 1, "maximum": 20}
    assert props["note"] == {"type": ["string", "null"], "description": "May span several lines", "maxLength": 200}
    assert "strict" not in tool and body["system"] and all(m["role"] != "system" for m in body["messages"])
    assert body["messages"][-1] == {"role": "user", "content": [{"type": "text", "text": "find my order",
                                                                 "cache_control": {"type": "ephemeral"}}]}

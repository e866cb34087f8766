"""The OpenAI-compatible adapter through the real ``openai`` SDK against a local SSE server, alone and
inside a relay turn (an address nothing listens on: test_model_units.py)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from relay_helpers import declare, info, joined, launch, register
from test_model_units import _cfg

from widget.relay.config import AppConfig, ModelConfig
from widget.relay.models.base import ModelError, ModelRequest, StreamLimits, TextDelta, ToolCall, Usage, guarded
from widget.relay.models.openai_chat import OpenAIAdapter

pytestmark = pytest.mark.relay


async def test_adapter_unreachable() -> None:
    adapter = OpenAIAdapter(_cfg("http://127.0.0.1:9/v1"))
    with pytest.raises(ModelError) as exc:
        [c async for c in adapter.stream(ModelRequest(messages=[{"role": "user", "content": "hi"}]))]
    assert exc.value.code == "model_unavailable"
    await adapter.aclose()


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n".encode()


class FakeProvider:
    """Speaks Chat Completions streaming: a tool call (arguments split over deltas) when tools are
    offered and the last message is the user's; a text answer quoting the tool result otherwise."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        #: an HTTP status to fail with, ``(status, error body)``, or ``"drop"`` (close the connection)
        self.fail: Any = None
        #: deltas to stream for the next request instead of the default behaviour (then cleared)
        self.reply: list[dict[str, Any]] | None = None
        #: ``"endless"``: stream a token every 20 ms until the client goes away; ``"garbage"``: an unreadable chunk
        self.mode: str | None = None
        #: requests whose response is still being written
        self.open = 0
        #: ``(prompt, completion, cached, reasoning)`` tokens: a usage chunk (no choices) ends the next stream
        self.usage: tuple[int, int, int, int] | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        if self.fail == "drop":
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        if isinstance(self.fail, tuple):
            return web.json_response({"error": self.fail[1]}, status=self.fail[0])
        if self.fail is not None:
            return web.json_response({"error": {"message": "nope", "type": "x", "code": None}}, status=self.fail)
        assert body["stream"] is True
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if self.mode == "endless":
            self.open += 1
            try:
                while True:
                    await resp.write(_chunk({"content": "tok "}))
                    await asyncio.sleep(0.02)
            except (ConnectionError, RuntimeError, asyncio.CancelledError):
                return resp
            finally:
                self.open -= 1
        if self.mode == "garbage":
            await resp.write(_chunk({"content": "ok "}))
            await resp.write(b"data: {not json\n\n")
            await resp.write(b"data: [DONE]\n\n")
            return resp
        last = body["messages"][-1]
        if self.reply is not None:
            deltas, self.reply = self.reply, None
            for d in deltas:
                await resp.write(_chunk(d))
            await resp.write(_chunk({}, "tool_calls" if any("tool_calls" in d for d in deltas) else "stop"))
        elif body.get("tools") and last["role"] == "user":
            name = body["tools"][0]["function"]["name"]
            await resp.write(_chunk({"role": "assistant", "content": None, "tool_calls": [
                {"index": 0, "id": "call_provider_1", "type": "function",
                 "function": {"name": name, "arguments": ""}}]}))
            for piece in ['{"li', 'mit": ', "3}"]:
                await resp.write(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
            await resp.write(_chunk({}, "tool_calls"))
        else:
            result = last["content"] if last["role"] == "tool" else "nothing"
            for piece in ["The page ", "says: ", result]:
                await resp.write(_chunk({"content": piece}))
            await resp.write(_chunk({}, "stop"))
        if self.usage is not None and (body.get("stream_options") or {}).get("include_usage"):
            (p, c, cached, reasoning), self.usage = self.usage, None
            usage = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
                     "prompt_tokens_details": {"cached_tokens": cached},
                     "completion_tokens_details": {"reasoning_tokens": reasoning}}
            last = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [],
                    "usage": usage}
            await resp.write(f"data: {json.dumps(last)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp


@pytest_asyncio.fixture(scope="module")
async def provider() -> AsyncIterator[tuple[FakeProvider, str]]:
    fake = FakeProvider()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield fake, f"http://127.0.0.1:{port}/v1"
    await runner.cleanup()


async def test_adapter_streams_tool_call_and_text(provider: tuple[FakeProvider, str]) -> None:
    fake, base = provider
    fake.fail = None
    adapter = OpenAIAdapter(_cfg(base))
    tool = {"name": "get_selection", "description": "d", "parameters": {"type": "object", "properties": {}}}
    out = [c async for c in adapter.stream(ModelRequest(messages=[{"role": "user", "content": "hi"}], tools=[tool]))]
    assert out == [ToolCall("get_selection", {"limit": 3}, provider_id="call_provider_1")]
    assert fake.requests[-1]["tools"][0]["function"]["name"] == "get_selection"
    assert fake.requests[-1]["model"] == "test-model"
    msgs = [{"role": "user", "content": "hi"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function",
                             "function": {"name": "get_selection", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "hello"}]
    out = [c async for c in adapter.stream(ModelRequest(messages=msgs, tools=[tool]))]
    assert out == [TextDelta("The page "), TextDelta("says: "), TextDelta("hello")]
    await adapter.aclose()


async def test_adapter_asks_for_usage_and_yields_it_last(provider: tuple[FakeProvider, str]) -> None:
    """OpenAI sends usage only when asked (``stream_options.include_usage``), in a last chunk without choices: one
    Usage chunk after the answer's text and calls."""
    fake, base = provider
    fake.fail = None
    fake.usage = (120, 30, 64, 12)
    adapter = OpenAIAdapter(_cfg(base))
    tool = {"name": "get_selection", "description": "d", "parameters": {"type": "object", "properties": {}}}
    try:
        out = [c async for c in adapter.stream(ModelRequest(messages=[{"role": "user", "content": "hi"}],
                                                            tools=[tool]))]
    finally:
        fake.usage = None
        await adapter.aclose()
    assert fake.requests[-1]["stream_options"] == {"include_usage": True}
    assert out == [ToolCall("get_selection", {"limit": 3}, provider_id="call_provider_1"),
                   Usage(input_tokens=120, output_tokens=30, cached_input_tokens=64, reasoning_tokens=12)]


@pytest.mark.parametrize("status, code, retryable", [(429, "model_rate_limited", True), (401, "model_auth", False),
                                                     (500, "model_unavailable", True)])
async def test_adapter_errors(provider: tuple[FakeProvider, str], status: int, code: str, retryable: bool) -> None:
    fake, base = provider
    fake.fail = status
    adapter = OpenAIAdapter(_cfg(base))
    try:
        with pytest.raises(ModelError) as exc:
            [c async for c in adapter.stream(ModelRequest(messages=[{"role": "user", "content": "hi"}]))]
        assert exc.value.code == code and exc.value.retryable is retryable
    finally:
        fake.fail = None
        await adapter.aclose()


async def test_stopping_a_stream_closes_the_provider_connection(provider: tuple[FakeProvider, str]) -> None:
    """Stop during a fast stream, 50 times: no upstream connection outlives its turn."""
    fake, base = provider
    fake.mode = "endless"
    adapter = OpenAIAdapter(_cfg(base))
    try:
        for _ in range(50):
            got = asyncio.Event()

            async def consume(got: asyncio.Event = got) -> None:  # this iteration's event
                async for _c in guarded(adapter.stream(ModelRequest(messages=[{"role": "user", "content": "go"}])),
                                        StreamLimits()):
                    got.set()

            task = asyncio.ensure_future(consume())
            await asyncio.wait_for(got.wait(), 10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        deadline = time.monotonic() + 5
        while fake.open and time.monotonic() < deadline:  # the provider notices at its next write (20 ms)
            await asyncio.sleep(0.02)
        assert fake.open == 0
    finally:
        fake.mode = None
        await adapter.aclose()


async def test_an_unreadable_chunk_is_a_clear_model_error(provider: tuple[FakeProvider, str]) -> None:
    fake, base = provider
    fake.mode = "garbage"
    adapter = OpenAIAdapter(_cfg(base))
    try:
        with pytest.raises(ModelError) as exc:
            [c async for c in adapter.stream(ModelRequest(messages=[{"role": "user", "content": "hi"}]))]
        assert exc.value.code == "model_bad_response"
    finally:
        fake.mode = None
        await adapter.aclose()


async def test_relay_turn_through_openai_adapter(provider: tuple[FakeProvider, str], tmp_path: Path) -> None:
    fake, base = provider
    fake.fail = None
    h = await launch(tmp_path, apps={"demo": AppConfig(model="gpt")},
                     models={"demo": ModelConfig(chunk_delay_ms=0), "gpt": _cfg(base)})
    try:
        async with aiohttp.ClientSession() as http:
            rec, data, url = await joined(http, h.url)
            await register(rec, "get_selection")
            await rec.call("state_patch",
                           {"patch": [{"op": "add", "path": "/autopilot/context/page", "value": "/cart"}],
                            "idempotency_key": "ctx"})
            rec.auto_answer = lambda call: f"selected {call['arguments']['limit']}"
            await rec.call("user_message", {"text": "what is selected?", "idempotency_key": "m"})
            fin = await rec.wait("completion.finished")
            assert fin["status"] == "done"
            final = [d for e, d in rec.events if e == "completion.ended"][-1]["message"]
            assert final["content"] == "The page says: selected 3"
            first = fake.requests[-2]
            assert first["messages"][0]["role"] == "system"
            assert any("/cart" in m["content"]
                       and "not instructions" in m["content"] for m in first["messages"] if m["role"] == "system")
            second = fake.requests[-1]
            assert second["messages"][-1]["role"] == "tool" and second["messages"][-1]["content"] == "selected 3"
            assert second["messages"][-2]["tool_calls"][0]["id"] == second["messages"][-1]["tool_call_id"]
            await rec.disconnect()
    finally:
        await h.stop()


OVERFLOW = (400, {"message": "This model's maximum context length is 8192 tokens. However, your messages resulted in "
                             "9120 tokens.",
                  "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"})


@pytest.mark.parametrize("failure, code, retryable", [
    (429, "model_rate_limited", True),
    (401, "model_auth", False),
    (OVERFLOW, "context_overflow", True),
    (503, "model_unavailable", True),
    ("drop", "model_unavailable", True),
], ids=["rate-limit", "bad-key", "context-overflow", "provider-down", "connection-dropped"])
async def test_model_errors_reach_the_client_with_a_retry_path(provider: tuple[FakeProvider, str], tmp_path: Path,
                                                                failure: Any, code: str, retryable: bool) -> None:
    """Each provider failure, through the real SDK and a relay turn: an error message with its code, the
    turn failed (never a silent stall), and ``retry`` answering once the provider is back."""
    fake, base = provider
    h = await launch(tmp_path, apps={"demo": AppConfig(model="gpt")},
                     models={"demo": ModelConfig(chunk_delay_ms=0), "gpt": _cfg(base)})
    try:
        async with aiohttp.ClientSession() as http:
            rec, data, url = await joined(http, h.url)
            fake.fail = failure
            await rec.call("user_message", {"text": "hello", "idempotency_key": "m"})
            msg = (await rec.wait("message", pred=lambda d: d["message"]["role"] == "error"))["message"]
            assert msg["code"] == code and msg["retryable"] is retryable
            # no provider internals
            assert msg["content"] and "nope" not in msg["content"] and "8192" not in msg["content"]
            fin = await rec.wait("completion.finished")
            assert fin["status"] == "failed"
            body = await info(http, url)
            assert body["conversation"]["status"] == "failed" and body["messages"][-1]["code"] == code
            fake.fail = None
            mark = len(rec.events)
            ack = await rec.call("retry", {"idempotency_key": "t"})
            assert ack["ok"] and ack["turn_id"] == fin["turn_id"]
            fin = await rec.wait("completion.finished", start=mark)
            assert fin["status"] == "done"
            body = await info(http, url)
            assert [(m["role"], m["content"]) for m in body["messages"]] == [("user", "hello"),
                                                                             ("assistant", "The page says: nothing")]
            await rec.disconnect()
    finally:
        fake.fail = None
        await h.stop()


# ---------------------------------------------------------------------------------------------- tools and actions

SEARCH = {"kind": "tool", "description": "Search orders.", "handler": "page", "parameters": {
    "type": "object", "properties": {
        "email": {"type": "string", "format": "email", "description": "Customer email"},
        "site": {"type": "string", "format": "uri"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 20},
        "q": {"type": "string", "maxLength": 40},
        "plan": {"type": "string", "enum": ["free", "pro"]},
    }, "required": ["email"], "additionalProperties": False}}
OPEN_PRICING = {"kind": "action", "description": "Open the pricing page for one plan.", "confirm": "button",
                "label": "Open pricing",
                "parameters": {"type": "object", "properties": {"plan": {"type": "string", "enum": ["free", "pro"]}},
                               "required": ["plan"], "additionalProperties": False}}
SELECTION = {"kind": "function", "description": "Returns the selected text.",
             "parameters": {"type": "object", "properties": {"limit": {"type": "integer"}}}}


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "strict_tools-off"])
async def test_relay_sends_strict_tools_and_offer_actions(provider: tuple[FakeProvider, str], tmp_path: Path,
                                                          strict: bool) -> None:
    """Through the real SDK: tools, actions and ``offer_actions`` go with ``strict: true`` and only the keywords
    OpenAI's strict mode takes (``strict_tools = false``: neither); the model's offer in the same response as
    its answer becomes the message's actions, with no second provider request."""
    fake, base = provider
    fake.fail = None
    h = await launch(tmp_path, apps={"demo": AppConfig(model="gpt")},
                     models={"demo": ModelConfig(chunk_delay_ms=0),
                             "gpt": ModelConfig(**{**_cfg(base).__dict__, "strict_tools": strict})})
    try:
        async with aiohttp.ClientSession() as http:
            rec, data, url = await joined(http, h.url)
            await declare(rec, {"search_orders": SEARCH, "open_pricing": OPEN_PRICING, "get_selection": SELECTION})
            fake.reply = [{"role": "assistant", "content": "Pro it is. "},
                          {"tool_calls": [{"index": 0, "id": "call_p", "type": "function",
                                           "function": {"name": "offer_actions", "arguments": ""}}]},
                          {"tool_calls": [{"index": 0,
                                           "function": {"arguments": '{"actions": [{"name": "open_pricing", '}}]},
                          {"tool_calls": [{"index": 0, "function": {"arguments": '"arguments": {"plan": "pro"}}]}'}}]}]
            before = len(fake.requests)
            await rec.call("user_message", {"text": "pricing for pro?", "idempotency_key": "m"})
            fin = await rec.wait("completion.finished")
            assert fin["status"] == "done" and len(fake.requests) == before + 1
            msg = [d for e, d in rec.events if e == "completion.ended"][-1]["message"]
            assert msg["content"] == "Pro it is. " and [(a["name"],
                                                         a["arguments"]) for a in msg["actions"]] == [("open_pricing",
                                                                                                       {"plan": "pro"})]
            assert "actions" not in (await info(http, url))["messages"][1]
            tools = {t["function"]["name"]: t["function"] for t in fake.requests[-1]["tools"]}
            assert list(tools) == ["search_orders", "get_selection", "offer_actions"]
            assert ("strict" not in tools["get_selection"]
                    and tools["get_selection"]["parameters"] == SELECTION["parameters"])
            search = tools["search_orders"]
            props = search["parameters"]["properties"]
            assert search["parameters"]["required"] == ["email", "site", "limit", "q", "plan"]
            assert search["parameters"]["additionalProperties"] is False
            assert props["plan"] == {"type": ["string", "null"], "enum": ["free", "pro", None]}
            # no maxLength in strict mode
            assert props["q"] == {"type": ["string", "null"], "description": "At most 40 characters"}
            # OpenAI has no "uri" format
            assert props["site"] == {"type": ["string", "null"], "description": "An http(s) URL"}
            offer = tools["offer_actions"]
            item = offer["parameters"]["properties"]["actions"]["items"]
            assert item["properties"]["name"] == {"type": "string", "enum": ["open_pricing"]}
            assert item["properties"]["arguments"]["properties"]["plan"] == {"type": "string", "enum": ["free", "pro"]}
            if strict:
                assert search["strict"] is True and offer["strict"] is True
                assert props["email"] == {"type": "string", "description": "Customer email", "format": "email"}
                assert props["limit"] == {"type": ["integer", "null"], "minimum": 1, "maximum": 20}
                assert offer["parameters"]["properties"]["actions"]["maxItems"] == 3
            else:
                assert "strict" not in search and "strict" not in offer
                assert props["email"] == {"type": "string", "description": "Customer email (an email address)"}
                assert props["limit"] == {"type": ["integer", "null"], "description": "From 1 to 20"}
                assert "maxItems" not in offer["parameters"]["properties"]["actions"]
            # the next turn's history: the offer as a call with the relay's answer, valid for the provider
            await rec.call("user_message", {"text": "thanks", "idempotency_key": "m2"})
            await rec.wait("completion.finished", pred=lambda d: d["seq"] > fin["seq"])
            sent = fake.requests[-1]["messages"]
            assistant = next(m for m in sent if m["role"] == "assistant")
            assert assistant["tool_calls"][0]["function"]["name"] == "offer_actions"
            assert sent[sent.index(assistant) + 1]["tool_call_id"] == assistant["tool_calls"][0]["id"]
            await rec.disconnect()
    finally:
        await h.stop()

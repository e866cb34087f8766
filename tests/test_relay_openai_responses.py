"""The OpenAI Responses API adapter through the real ``openai`` SDK against a fake server speaking the provider's
documented SSE events (tests/provider_fake_responses.py), alone and inside a relay turn."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from provider_fake_responses import (
    Failure,
    FakeResponses,
    FnCall,
    Parallel,
    Reasoning,
    ResponseEvents,
    Text,
    encode,
    serve,
)
from relay_helpers import info, joined, launch, register

from widget.relay.config import AppConfig, ModelConfig
from widget.relay.models import openai_responses
from widget.relay.models.adapters import make_adapter
from widget.relay.models.base import ModelError, ModelRequest, StreamLimits, TextDelta, ToolCall, Usage, guarded
from widget.relay.models.openai_responses import OpenAIResponsesAdapter

pytestmark = pytest.mark.relay

TOOL = {"name": "get_selection", "description": "d", "parameters": {"type": "object", "properties": {}}}
STRICT = {"name": "search_orders", "description": "s", "strict": True,
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"],
                         "additionalProperties": False}}
HI: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]


@pytest_asyncio.fixture(scope="module")
async def provider() -> AsyncIterator[tuple[FakeResponses, str]]:
    fake = FakeResponses()
    async for base in serve(fake):
        yield fake, base


@pytest.fixture
def fake(provider: tuple[FakeResponses, str]) -> FakeResponses:
    provider[0].replies.clear()
    return provider[0]


def _cfg(base: str, **kw: Any) -> ModelConfig:
    return ModelConfig(**{"adapter": "openai-responses", "model": "test-model", "base_url": base, "api_key": "sk-test",
                          "max_retries": 0, "request_timeout_s": 5, **kw})


async def _run(adapter: OpenAIResponsesAdapter, request: ModelRequest) -> list[Any]:
    return [c async for c in adapter.stream(request)]


async def test_text_usage_and_the_request(provider: tuple[FakeResponses, str], fake: FakeResponses) -> None:
    """Text deltas in order and one Usage at the end (input, output, cached, reasoning tokens); system messages
    become ``instructions``; stateless; tools flat with ``strict`` always said."""
    adapter = make_adapter(_cfg(provider[1], temperature=0.2, max_tokens=300))
    assert isinstance(adapter, OpenAIResponsesAdapter)
    fake.replies.append(encode([Text(["Hel", "lo ", "there"])]))
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "system", "content": "Page context: {}"}, *HI]
    out = await _run(adapter, ModelRequest(messages=msgs, tools=[TOOL, STRICT, {**TOOL, "name": "bad name!"}]))
    assert out == [TextDelta("Hel"), TextDelta("lo "), TextDelta("there"),
                   Usage(input_tokens=12, output_tokens=7, cached_input_tokens=4, reasoning_tokens=3)]
    sent = fake.requests[-1]
    assert sent["model"] == "test-model" and sent["stream"] is True and sent["store"] is False
    assert sent["instructions"] == "Be brief.\n\nPage context: {}"
    assert sent["input"] == [{"role": "user", "content": "hi"}]
    assert sent["temperature"] == 0.2 and sent["max_output_tokens"] == 300
    assert "reasoning" not in sent and "include" not in sent  # models without reasoning refuse them
    assert sent["tools"] == [
        {"type": "function", "name": "get_selection", "description": "d", "parameters": TOOL["parameters"],
         "strict": False},
        {"type": "function", "name": "search_orders", "description": "s", "parameters": STRICT["parameters"],
         "strict": True}]
    await adapter.aclose()
    off = OpenAIResponsesAdapter(_cfg(provider[1], strict_tools=False))
    fake.replies.append(encode([Text(["ok"])], usage=None))
    assert await _run(off, ModelRequest(messages=HI, tools=[STRICT])) == [TextDelta("ok")]
    assert fake.requests[-1]["tools"][0]["strict"] is False and off.schema_keywords != adapter.schema_keywords
    await off.aclose()


async def test_parallel_calls_with_arguments_in_pieces(provider: tuple[FakeResponses, str],
                                                       fake: FakeResponses) -> None:
    """Two calls in one response, their argument pieces interleaved: two ToolCalls in output order, each with its
    own arguments and the provider's call id, after the text; then the usage."""
    adapter = OpenAIResponsesAdapter(_cfg(provider[1]))
    fake.replies.append(encode([Text(["Checking. "]), Parallel([
        FnCall("call_a", "search_orders", ['{"q"', ': "sho', 'es"}']),
        FnCall("call_b", "get_selection", ["{", "}"]),
    ])]))
    out = await _run(adapter, ModelRequest(messages=HI, tools=[TOOL, STRICT]))
    assert out == [TextDelta("Checking. "), ToolCall("search_orders", {"q": "shoes"}, provider_id="call_a"),
                   ToolCall("get_selection", {}, provider_id="call_b"), Usage(12, 7, 4, 3)]
    await adapter.aclose()


async def test_messages_become_input_items(provider: tuple[FakeResponses, str], fake: FakeResponses) -> None:
    """An assistant's tool calls become ``function_call`` items and tool results ``function_call_output`` items
    with the same call ids; the assistant's text a message of its own."""
    adapter = OpenAIResponsesAdapter(_cfg(provider[1]))
    msgs: list[dict[str, Any]] = [
            {"role": "system", "content": "S"}, *HI,
            {"role": "assistant", "content": "Let me look.",
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_selection", "arguments": "{}"}},
                            {"id": "c2", "type": "function",
                             "function": {"name": "search_orders", "arguments": '{"q": "x"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "hello"},
            {"role": "tool", "tool_call_id": "c2", "content": "[]"}]
    out = await _run(adapter, ModelRequest(messages=msgs, tools=[TOOL, STRICT]))
    assert "".join(c.text for c in out if isinstance(c, TextDelta)) == "The page says: []"
    assert fake.requests[-1]["input"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Let me look."},
        {"type": "function_call", "call_id": "c1", "name": "get_selection", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "search_orders", "arguments": '{"q": "x"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "hello"},
        {"type": "function_call_output", "call_id": "c2", "output": "[]"}]
    await adapter.aclose()


def _error(code: str | None, message: str, type_: str = "invalid_request_error") -> dict[str, Any]:
    return {"message": message, "type": type_, "param": None, "code": code}


OVERFLOW = _error("context_length_exceeded", "Your input exceeds the context window of this model (8192 tokens).")


@pytest.mark.parametrize("reply, code, retryable, wait", [
    (Failure(429, _error("rate_limit_exceeded", "Rate limit reached", "requests"), {"retry-after": "7"}),
     "model_rate_limited", True, 7.0),
    (Failure(429, _error(None, "slow down", "requests"), {"retry-after-ms": "1500"}), "model_rate_limited", True, 1.5),
    (Failure(429, _error("insufficient_quota", "You exceeded your current quota", "insufficient_quota")),
     "model_auth", False, None),
    (Failure(401, _error("invalid_api_key", "Incorrect API key provided: sk-test")), "model_auth", False, None),
    (Failure(403, _error(None, "not allowed")), "model_auth", False, None),
    (Failure(400, OVERFLOW), "context_overflow", True, None),
    (Failure(400, _error(None, "Unsupported parameter: 'temperature'")), "model_error", True, None),
    (Failure(404, _error("model_not_found", "The model does not exist")), "model_error", False, None),
    (Failure(500, _error(None, "boom", "server_error")), "model_unavailable", True, None),
    (Failure(503, _error(None, "overloaded", "server_error"), {"retry-after": "2"}), "model_unavailable", True, 2.0),
    ("drop", "model_unavailable", True, None),
], ids=["rate-limit", "rate-limit-ms", "no-quota", "bad-key", "forbidden", "context-overflow", "bad-request",
        "no-model", "server-error", "overloaded", "connection-dropped"])
async def test_http_errors(provider: tuple[FakeResponses, str], fake: FakeResponses, reply: Any, code: str,
                           retryable: bool, wait: float | None) -> None:
    """Each HTTP failure maps to the relay's code, with the provider's ``retry-after`` when it said one; the
    reader's message never carries the provider's text."""
    adapter = OpenAIResponsesAdapter(_cfg(provider[1]))
    fake.replies.append(reply)
    with pytest.raises(ModelError) as exc:
        await _run(adapter, ModelRequest(messages=HI))
    assert (exc.value.code, exc.value.retryable, exc.value.retry_after) == (code, retryable, wait)
    assert "sk-test" not in exc.value.message and "8192" not in exc.value.message
    await adapter.aclose()


def _stream_fail(kind: str) -> list[bytes]:
    enc = ResponseEvents()
    head = [*enc.start(), *enc.steps([Text(["Part"])])]
    return {
        "error-rate": [*head, enc.error("rate_limit_exceeded", "Rate limit reached for requests")],
        "error-overflow": [*head, enc.error("context_length_exceeded", "too long for the context window")],
        "error-other": [*head, enc.error("invalid_prompt", "bad prompt")],
        # the shape some streams use: the error object nested (the SDK raises it as an APIError)
        "error-nested": [*head, b'event: error\ndata: {"type": "error", "sequence_number": 9, "error": '
                                b'{"type": "server_error", "code": "server_error", "message": "oops"}}\n\n'],
        "failed-server": [*head, enc.failed("server_error", "The server had an error")],
        "failed-rate": [*head, enc.failed("rate_limit_exceeded", "Rate limit reached")],
        "failed-prompt": [*head, enc.failed("invalid_prompt", "Invalid prompt")],
        "garbage": [*head, b"event: response.output_text.delta\ndata: {not json\n\n"],
        "no-end": head,
        "incomplete-empty": [*enc.start(), enc.incomplete("max_output_tokens")],
    }[kind]


@pytest.mark.parametrize("kind, code", [
    ("error-rate", "model_rate_limited"), ("error-overflow", "context_overflow"), ("error-other", "model_error"),
    ("error-nested", "model_unavailable"),
    ("failed-server", "model_unavailable"), ("failed-rate", "model_rate_limited"), ("failed-prompt", "model_error"),
    ("garbage", "model_bad_response"), ("no-end", "model_bad_response"), ("incomplete-empty", "model_error"),
])
async def test_errors_inside_the_stream(provider: tuple[FakeResponses, str], fake: FakeResponses, kind: str,
                                        code: str) -> None:
    """An ``error`` event, a ``response.failed``, an unreadable event, a stream that ends without its terminal
    event, and an incomplete response with nothing in it: each our error, after the text already streamed."""
    adapter = OpenAIResponsesAdapter(_cfg(provider[1]))
    fake.replies.append(_stream_fail(kind))
    got: list[Any] = []
    with pytest.raises(ModelError) as exc:
        async for chunk in adapter.stream(ModelRequest(messages=HI)):
            got.append(chunk)
    assert exc.value.code == code
    assert got == ([] if kind == "incomplete-empty" else [TextDelta("Part")])
    await adapter.aclose()


async def test_an_incomplete_response_never_runs_a_cut_call(provider: tuple[FakeResponses, str],
                                                            fake: FakeResponses) -> None:
    """max_output_tokens reached inside a call's arguments: the text stays, the half call is left out."""
    adapter = OpenAIResponsesAdapter(_cfg(provider[1]))
    enc = ResponseEvents()
    events = [*enc.start(), *enc.steps([Text(["Let me see"])])]
    events.append(enc.event("response.output_item.added", output_index=1, item={
        "id": "fc_1", "type": "function_call", "status": "in_progress", "call_id": "call_1",
        "name": "search_orders", "arguments": ""}))
    events.append(enc.event("response.function_call_arguments.delta", item_id="fc_1", output_index=1,
                            delta='{"q": "sh'))
    events.append(enc.incomplete("max_output_tokens"))
    fake.replies.append(events)
    out = await _run(adapter, ModelRequest(messages=HI, tools=[STRICT]))
    assert out == [TextDelta("Let me see"), Usage(12, 7, 4, 3)]
    await adapter.aclose()


async def test_stop_closes_the_provider_connection(provider: tuple[FakeResponses, str], fake: FakeResponses) -> None:
    """Stop during a fast stream, 20 times: no upstream connection outlives its turn."""
    adapter = OpenAIResponsesAdapter(_cfg(provider[1]))
    try:
        for _ in range(20):
            fake.replies.append("endless")
            got = asyncio.Event()

            async def consume(got: asyncio.Event = got) -> None:  # this iteration's event
                async for _c in guarded(adapter.stream(ModelRequest(messages=HI)), StreamLimits()):
                    got.set()

            task = asyncio.ensure_future(consume())
            await asyncio.wait_for(got.wait(), 10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        deadline = time.monotonic() + 5
        while fake.open and time.monotonic() < deadline:  # the server notices at its next write (20 ms)
            await asyncio.sleep(0.02)
        assert fake.open == 0
    finally:
        await adapter.aclose()


def _second_round(turn: str = "t1", names: tuple[str, str] = ("search_orders", "get_selection")) -> ModelRequest:
    """The relay's next request of a turn whose first response called two functions (the relay's own call ids)."""
    msgs: list[dict[str, Any]] = [
            {"role": "system", "content": "S"}, {"role": "user", "content": "earlier"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "call_old", "type": "function",
                             "function": {"name": "search_orders", "arguments": '{"q": "old"}'}}]},
            {"role": "tool", "tool_call_id": "call_old", "content": "old"},
            {"role": "assistant", "content": "Old answer."}, *HI,
            {"role": "assistant", "content": "Checking. ",
             "tool_calls": [{"id": "call_r1", "type": "function",
                             "function": {"name": names[0], "arguments": '{"q": "shoes"}'}},
                            {"id": "call_r2", "type": "function", "function": {"name": names[1], "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_r1", "content": "[1]"},
            {"role": "tool", "tool_call_id": "call_r2", "content": "sel"}]
    return ModelRequest(messages=msgs, tools=[TOOL, STRICT], conversation_id="c1", turn_id=turn)


async def test_reasoning_goes_back_with_the_tool_results(provider: tuple[FakeResponses, str],
                                                         fake: FakeResponses) -> None:
    """With ``reasoning_effort``: the request asks for the effort and the encrypted reasoning; the reasoning (and
    its summary) never reaches the answer; the turn's next request carries the response's reasoning, text and
    calls as the provider returned them, the results under the provider's call ids. Another turn, or calls that
    are not that response's, get the plain items."""
    adapter = OpenAIResponsesAdapter(_cfg(provider[1], reasoning_effort="low"))
    fake.replies.append(encode([Reasoning("rs_1", "ENC-1", summary=["I should ", "search."]), Text(["Checking. "]),
                                Parallel([FnCall("call_a", "search_orders", ['{"q": ', '"shoes"}']),
                                          FnCall("call_b", "get_selection", ["{}"])])]))
    first = ModelRequest(messages=HI, tools=[TOOL, STRICT], conversation_id="c1", turn_id="t1")
    out = await _run(adapter, first)
    assert out == [TextDelta("Checking. "), ToolCall("search_orders", {"q": "shoes"}, provider_id="call_a"),
                   ToolCall("get_selection", {}, provider_id="call_b"), Usage(12, 7, 4, 3)]
    sent = fake.requests[-1]
    assert sent["reasoning"] == {"effort": "low"} and sent["include"] == ["reasoning.encrypted_content"]
    assert sent["store"] is False and "summary" not in sent["reasoning"]

    await _run(adapter, _second_round())
    sent_input = fake.requests[-1]["input"]
    assert sent_input[:5] == [  # the earlier turn: plain items
        {"role": "user", "content": "earlier"},
        {"type": "function_call", "call_id": "call_old", "name": "search_orders", "arguments": '{"q": "old"}'},
        {"type": "function_call_output", "call_id": "call_old", "output": "old"},
        {"role": "assistant", "content": "Old answer."}, {"role": "user", "content": "hi"}]
    assert sent_input[5:] == [
        {"type": "reasoning", "id": "rs_1", "encrypted_content": "ENC-1",
         "summary": [{"type": "summary_text", "text": "I should search."}]},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Checking. ", "annotations": []}]},
        {"type": "function_call", "call_id": "call_a", "name": "search_orders", "arguments": '{"q": "shoes"}',
         "id": "fc_call_a"},
        {"type": "function_call", "call_id": "call_b", "name": "get_selection", "arguments": "{}", "id": "fc_call_b"},
        {"type": "function_call_output", "call_id": "call_a", "output": "[1]"},
        {"type": "function_call_output", "call_id": "call_b", "output": "sel"}]

    for request in (_second_round(turn="t2"), _second_round(names=("search_orders", "search_orders"))):
        await _run(adapter, request)
        sent_input = fake.requests[-1]["input"]
        assert not any(i.get("type") == "reasoning" for i in sent_input)
        assert {"type": "function_call_output", "call_id": "call_r1", "output": "[1]"} in sent_input
    await adapter.aclose()


async def test_the_reasoning_cache_is_bounded(provider: tuple[FakeResponses, str], fake: FakeResponses,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``CACHE_TURNS`` turns the least recently used turn's responses go (and its next request carries the
    plain items); without ``reasoning_effort`` nothing is kept."""
    monkeypatch.setattr(openai_responses, "CACHE_TURNS", 2)
    adapter = OpenAIResponsesAdapter(_cfg(provider[1], reasoning_effort="medium"))
    for turn in ("t1", "t2", "t3"):
        fake.replies.append(encode([Reasoning("rs_" + turn, "ENC"), Parallel([
            FnCall("call_a", "search_orders", ["{}"]), FnCall("call_b", "get_selection", ["{}"])])]))
        await _run(adapter, ModelRequest(messages=HI, tools=[TOOL, STRICT], conversation_id="c1", turn_id=turn))
    assert list(adapter._rounds) == [("c1", "t2"), ("c1", "t3")]
    assert adapter._cached_chars == sum(r.chars for rs in adapter._rounds.values() for r in rs)
    await _run(adapter, _second_round(turn="t1"))
    assert not any(i.get("type") == "reasoning" for i in fake.requests[-1]["input"])
    await _run(adapter, _second_round(turn="t2"))
    assert fake.requests[-1]["input"][5]["id"] == "rs_t2"
    await adapter.aclose()
    plain = OpenAIResponsesAdapter(_cfg(provider[1]))
    fake.replies.append(encode([Reasoning("rs_x", None), FnCall("call_a", "get_selection", ["{}"])]))
    await _run(plain, ModelRequest(messages=HI, tools=[TOOL], conversation_id="c1", turn_id="t1"))
    assert not plain._rounds
    await plain.aclose()


async def test_relay_turn_with_reasoning_and_a_page_function(provider: tuple[FakeResponses, str],
                                                              fake: FakeResponses, tmp_path: Path) -> None:
    """A whole turn through the relay: the model reasons and calls the page's function; the reader sees the
    answer and never the reasoning; the second request puts the reasoning back before the call and its result,
    which the relay stored under its own call id."""
    base = provider[1]
    h = await launch(tmp_path, apps={"demo": AppConfig(model="gpt")},
                     models={"demo": ModelConfig(chunk_delay_ms=0), "gpt": _cfg(base, reasoning_effort="low")})
    try:
        async with aiohttp.ClientSession() as http:
            rec, data, url = await joined(http, h.url)
            await register(rec, "get_selection")
            rec.auto_answer = lambda call: f"selected {call['arguments']['limit']}"
            fake.replies.append(encode([Reasoning("rs_9", "ENC-9", summary=["secret thoughts"]),
                                        FnCall("call_p", "get_selection", ['{"limit"', ": 3}"])]))
            await rec.call("user_message", {"text": "what is selected?", "idempotency_key": "m"})
            fin = await rec.wait("completion.finished")
            assert fin["status"] == "done"
            body = await info(http, url)
            assert body["messages"][-1]["content"] == "The page says: selected 3"
            assert "secret" not in repr(rec.events) and "ENC-9" not in repr(body)
            second = fake.requests[-1]["input"]
            kinds = [i.get("type") or i.get("role") for i in second]
            assert kinds == ["user", "reasoning", "function_call", "function_call_output"]
            assert second[1]["encrypted_content"] == "ENC-9"
            assert second[2]["call_id"] == second[3]["call_id"] == "call_p" and second[3]["output"] == "selected 3"
            stored = [m for m in body["messages"] if m["role"] == "assistant"][0]["function_calls"][0]["id"]
            assert stored != "call_p"  # the relay's own id: the stored conversation keeps its format
            await rec.disconnect()
    finally:
        await h.stop()


async def test_relay_error_through_the_adapter(provider: tuple[FakeResponses, str], fake: FakeResponses,
                                               tmp_path: Path) -> None:
    """A rate limit reaches the reader as ``model_rate_limited``; ``retry`` answers once the provider is back."""
    h = await launch(tmp_path, apps={"demo": AppConfig(model="gpt")},
                     models={"demo": ModelConfig(chunk_delay_ms=0), "gpt": _cfg(provider[1])})
    try:
        async with aiohttp.ClientSession() as http:
            rec, data, url = await joined(http, h.url)
            fake.replies.append(Failure(429, _error("rate_limit_exceeded", "Rate limit reached", "requests"),
                                        {"retry-after": "1"}))
            await rec.call("user_message", {"text": "hello", "idempotency_key": "m"})
            msg = (await rec.wait("message", pred=lambda d: d["message"]["role"] == "error"))["message"]
            assert msg["code"] == "model_rate_limited" and msg["retryable"] is True
            fin = await rec.wait("completion.finished")
            assert fin["status"] == "failed"
            mark = len(rec.events)
            await rec.call("retry", {"idempotency_key": "t"})
            assert (await rec.wait("completion.finished", start=mark))["status"] == "done"
            assert (await info(http, url))["messages"][-1]["content"] == "The page says: nothing"
            await rec.disconnect()
    finally:
        await h.stop()

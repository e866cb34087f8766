"""The model adapters' pure parts, without a provider's server: the Anthropic adapter's conversion of the relay's
chat messages and the request it builds, and the error of an address nothing listens on (as the OpenAI-compatible
adapter's); tools as text (widget/relay/models/tools_text.py): the call parser fed in pieces, good, malformed,
partial and endless calls, the history a text model reads, the wrapper around a scripted model; and the provider
fakes' registry. The adapters against their fake providers and in relay turns: test_relay_anthropic.py,
test_relay_openai.py, test_relay_tools_text.py, test_model_scenarios.py."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from provider_fakes import Encoder, encoders
from scripted_model import ScriptedModel

from widget.errors import ConfigError
from widget.relay.config import ModelConfig, load_config
from widget.relay.models.anthropic import (
    CONTINUED,
    DEFAULT_MAX_TOKENS,
    SCHEMA_FORMATS,
    SCHEMA_KEYWORDS,
    AnthropicAdapter,
    request_kwargs,
    safe_id,
    to_messages,
)
from widget.relay.models.base import ModelError, ModelRequest, TextDelta, ToolCall, Usage
from widget.relay.models.tools_text import (
    CLOSE,
    NO_TOOLS,
    OPEN,
    UNREADABLE_CALL,
    CallParser,
    TextToolsAdapter,
    block_problem,
    parse_calls,
    text_messages,
)

pytestmark = pytest.mark.unit

#: Every provider fake (tests/provider_fakes.py and tests/provider_fake_*.py), by name.
REGISTRY = encoders()


# ---------------------------------------------------------------------------------------------- Anthropic


def test_messages_become_anthropic_turns() -> None:
    calls = [{"id": "fc_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
             {"id": "fc.2", "type": "function", "function": {"name": "get_weather", "arguments": "{bad"}}]
    system, turns = to_messages([
        {"role": "system", "content": "You are helpful."},
        {"role": "system", "content": "Page context as JSON data."},
        {"role": "user", "content": "weather?"},
        {"role": "user", "content": "in Oslo and Lima"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "fc_1", "content": "-3 C"},
        {"role": "tool", "tool_call_id": "fc.2", "content": ""},
        {"role": "user", "content": "(The reader pressed Open pricing.)"},
        {"role": "assistant", "content": None},  # an empty answer: left out
        {"role": "system", "content": "A late note."},
    ])
    assert system == "You are helpful.\n\nPage context as JSON data."
    assert turns == [
        {"role": "user", "content": [{"type": "text", "text": "weather?"},
                                     {"type": "text", "text": "in Oslo and Lima"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "fc_1", "name": "get_weather", "input": {"city": "Oslo"}},
            {"type": "tool_use", "id": "fc_2", "name": "get_weather", "input": {"_unparsed_arguments": "{bad"}}]},
        # both results in one user message, before the text of that message; the late system note joins it
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "fc_1", "content": "-3 C"},
            {"type": "tool_result", "tool_use_id": "fc_2"},
            {"type": "text", "text": "(The reader pressed Open pricing.)"},
            {"type": "text", "text": "A late note."}]},
    ]


def test_a_conversation_never_starts_with_the_assistant() -> None:
    system, turns = to_messages([{"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "hi"}])
    assert system == "" and turns[0] == {"role": "user", "content": [{"type": "text", "text": CONTINUED}]}
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert safe_id("call/1 x") == "call_1_x" and safe_id(None) == "call"


def test_the_request_carries_max_tokens_and_tools() -> None:
    tools = [{"name": "plan_limits", "description": "Limits.", "strict": True,
              "parameters": {"type": "object", "properties": {}, "required": [], "additionalProperties": False}},
             {"name": "bad name!", "description": "left out", "parameters": {"type": "object"}},
             {"name": "get_selection", "description": "", "parameters": {"type": "object", "properties": {}}}]
    req = ModelRequest(messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "q"}], tools=tools)
    kw = request_kwargs(ModelConfig(adapter="anthropic", model="claude-x", api_key="k"), req)
    assert kw["max_tokens"] == DEFAULT_MAX_TOKENS and kw["stream"] is True
    assert kw["system"] == [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}]
    assert "temperature" not in kw
    # no strict flag (not every Claude model or gateway takes it): the schemas keep their constraints as guidance
    assert [(t["name"], "strict" in t) for t in kw["tools"]] == [("plan_limits", False), ("get_selection", False)]
    assert kw["tools"][0]["input_schema"]["additionalProperties"] is False
    assert {"enum", "format", "minimum", "maxLength", "maxItems"} <= SCHEMA_KEYWORDS
    assert SCHEMA_FORMATS == {"email", "uri", "date", "date-time"}
    kw = request_kwargs(ModelConfig(adapter="anthropic", model="claude-x", api_key="k", max_tokens=300,
                                    temperature=0.2), req)
    assert kw["max_tokens"] == 300 and kw["temperature"] == 0.2


def _marks(kw: dict[str, Any]) -> list[tuple[str, Any]]:
    """The blocks of a request that carry ``cache_control``, in Anthropic's order (tools, system, messages)."""
    blocks = [("tool", t) for t in kw.get("tools") or []]
    blocks += [("system", b) for b in kw["system"]] if isinstance(kw.get("system"), list) else []
    blocks += [(f"{i}:{m['role']}", b) for i, m in enumerate(kw["messages"]) for b in m["content"]]
    return [(where, b.get("text") or b.get("name") or b.get("tool_use_id") or b.get("id"))
            for where, b in blocks if b.pop("cache_control", None) == {"type": "ephemeral"}]


def test_prompt_cache_breakpoints() -> None:
    """The last tool, the system prompt, the message the previous request ended with and the last one; never more
    than 4; a request without tools or system marks only the messages; ``prompt_cache = false`` marks nothing."""
    cfg = ModelConfig(adapter="anthropic", model="claude-x", api_key="k")
    tools = [{"name": n, "description": n, "parameters": {"type": "object", "properties": {}}} for n in ("a", "b")]
    call = {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}}
    history = [{"role": "system", "content": "S1"}, {"role": "system", "content": "S2"},
               {"role": "user", "content": "q1"}, {"role": "assistant", "content": "A1"},
               {"role": "user", "content": "q2"}, {"role": "user", "content": "more"},
               {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "c1", "content": "r1"}]
    kw = request_kwargs(cfg, ModelRequest(messages=history, tools=tools))
    assert _marks(kw) == [("tool", "b"), ("system", "S1\n\nS2"), ("2:user", "more"), ("4:user", "c1")]
    # what is left after taking the marks off is the request without caching
    assert kw == request_kwargs(ModelConfig(adapter="anthropic", model="claude-x", api_key="k", prompt_cache=False),
                                ModelRequest(messages=history, tools=tools)) | {"system": [
                                    {"type": "text", "text": "S1\n\nS2"}]}
    kw = request_kwargs(cfg, ModelRequest(messages=history[2:]))
    assert "tools" not in kw and "system" not in kw
    assert _marks(kw) == [("2:user", "more"), ("4:user", "c1")]
    kw = request_kwargs(cfg, ModelRequest(messages=[{"role": "user", "content": "hi"}], tools=tools))
    assert _marks(kw) == [("tool", "b"), ("0:user", "hi")]
    off = request_kwargs(ModelConfig(adapter="anthropic", model="claude-x", api_key="k", prompt_cache=False),
                         ModelRequest(messages=history, tools=tools))
    assert "cache_control" not in json.dumps(off) and off["system"] == "S1\n\nS2"
    # the request's own tool specs and messages are never marked (each request builds its own)
    assert "cache_control" not in json.dumps(tools) + json.dumps(history)


@pytest.mark.parametrize("line, error", [
    ('adapter = "anthropic"\nprompt_cache = false', None),
    ('adapter = "anthropic"\nprompt_cache = "no"', "model 'm': prompt_cache must be true or false, got 'no'"),
    ('adapter = "openai"\nprompt_cache = true', "model 'm': prompt_cache is for the anthropic adapter"),
])
def test_prompt_cache_in_the_config_file(tmp_path: Path, line: str, error: str | None) -> None:
    f = tmp_path / "relay.toml"
    f.write_text(f'[models.m]\n{line}\nmodel = "claude-x"\n[apps.demo]\nmodel = "m"\n')
    if error is None:
        assert load_config(f, env={}).models["m"].prompt_cache is False
    else:
        with pytest.raises(ConfigError, match=re.escape(error)):
            load_config(f, env={})


async def collect(base: str, **cfg: Any) -> list[Any]:
    adapter = AnthropicAdapter(ModelConfig(adapter="anthropic", model="claude-x", base_url=base, api_key="sk-ant-test",
                                           max_retries=0, request_timeout_s=5, **cfg))
    try:
        return [c async for c in adapter.stream(ModelRequest(messages=[{"role": "user", "content": "hi"}]))]
    finally:
        await adapter.aclose()


async def failure(base: str) -> ModelError:
    with pytest.raises(ModelError) as exc:
        await collect(base)
    return exc.value


# ---------------------------------------------------------------------------------------------- OpenAI-compatible


def _cfg(base_url: str) -> ModelConfig:
    return ModelConfig(adapter="openai", model="test-model", base_url=base_url, api_key="sk-test", max_retries=0,
                       request_timeout_s=5)


# ---------------------------------------------------------------------------------------------- tools as text

TOOLS = [{"name": "search_docs", "description": "Search the docs.",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}},
         {"name": "get_selection", "description": "Returns the selected text.",
          "parameters": {"type": "object", "properties": {"limit": {"type": "integer"}}}}]

GOOD = ('Let me look that up.\n\n<tool_call>\n{"name": "search_docs", "arguments": {"query": "refund policy"}}\n'
        '</tool_call>\n')


def run(text: str, cuts: list[int], max_call_chars: int | None = None) -> list[Any]:
    """``text`` fed to a parser in pieces cut at ``cuts``; every chunk it gives, in order."""
    parser = CallParser(max_call_chars) if max_call_chars else CallParser()
    out: list[Any] = []
    last = 0
    for at in [*cuts, len(text)]:
        out += parser.feed(text[last:at])
        last = at
    return out + parser.finish()


def shown(chunks: list[Any]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


def calls(chunks: list[Any]) -> list[ToolCall]:
    return [c for c in chunks if isinstance(c, ToolCall)]


# ---------------------------------------------------------------------------------------------- the parser


def test_a_good_call_cut_anywhere_never_shows() -> None:
    """Every way of cutting the answer in two, and one character at a time: the same text and call, and no
    piece the reader gets holds any part of the block."""
    text = GOOD + "Found it."
    ways = [[i] for i in range(len(text) + 1)] + [list(range(1, len(text)))]
    for cuts in ways:
        out = run(text, cuts)
        assert calls(out) == [ToolCall("search_docs", {"query": "refund policy"})], cuts
        assert shown(out) == "Let me look that up.\n\nFound it.", cuts
        for c in out:
            if isinstance(c, TextDelta):
                assert "<" not in c.text and "name" not in c.text, (cuts, c.text)


def test_text_that_only_looks_like_a_tag_is_shown_once_decided() -> None:
    for text in ["a < b and <tool_ca", "x <tool_callx> y", "<tool", "<toolbox>", "2 <3", "ends in blanks \n "]:
        for i in range(len(text) + 1):
            assert shown(run(text, [i])) == text, (text, i)
            assert calls(run(text, [i])) == []


def test_several_calls_and_the_accepted_spellings() -> None:
    text = (f'{OPEN}{{"name": "search_docs", "arguments": {{"query": "a"}}}}{CLOSE}'
            f'{OPEN}\n```json\n{{"name": "get_selection", "parameters": {{"limit": 2}}}}\n```\n{CLOSE}'
            f'{OPEN}{{"name": "get_selection", "arguments": "{{\\"limit\\": 5}}"}}{CLOSE}'
            f'{OPEN}{{"name": "get_selection"}}{CLOSE}')
    for i in range(0, len(text), 5):
        out = run(text, [i])
        assert calls(out) == [ToolCall("search_docs", {"query": "a"}), ToolCall("get_selection", {"limit": 2}),
                              ToolCall("get_selection", {"limit": 5}), ToolCall("get_selection", {})]
        assert shown(out) == ""


@pytest.mark.parametrize("body, name, problem", [
    ('{"name": "search_docs", "arguments": {"query": "a",}}', "search_docs", "not valid JSON"),
    ('search_docs(query="a")', UNREADABLE_CALL, "not valid JSON"),
    ('{"arguments": {"query": "a"}}', UNREADABLE_CALL, 'no "name"'),
    ('{"name": "search_docs", "arguments": ["a"]}', "search_docs", "must be a JSON object"),
    ('["search_docs"]', UNREADABLE_CALL, "one JSON object"),
    ("  ", UNREADABLE_CALL, "empty"),
], ids=["bad-json", "not-json", "no-name", "arguments-a-list", "not-an-object", "empty"])
def test_a_malformed_call_is_never_run_and_says_why(body: str, name: str, problem: str) -> None:
    """The call carries the block as written (a string, which every argument check refuses) and the reason can
    be worked out again from it."""
    out = run(f"Sure. {OPEN}{body}{CLOSE} Then more.", [9])
    [call] = calls(out)
    assert call.name == name and call.arguments == f"{OPEN}{body}{CLOSE}"
    assert problem in (block_problem(call.arguments) or "")
    assert shown(out) == "Sure. \n\nThen more."


def test_an_unclosed_call_at_the_end_is_not_run() -> None:
    body = '{"name": "search_docs", "arguments": {"query": "a"}}'
    out = run(f"One moment. {OPEN}{body}", [3, 15])
    [call] = calls(out)
    assert call == ToolCall("search_docs", f"{OPEN}{body}")
    assert "not closed" in (block_problem(call.arguments) or "")
    assert shown(out) == "One moment. "


async def test_a_call_past_the_bound_ends_the_answer_and_closes_the_stream() -> None:
    closed = asyncio.Event()

    async def source() -> AsyncIterator[Any]:
        try:
            yield TextDelta(f"Hi {OPEN}" + '{"name": "search_docs", "arguments": {"query": "')
            while True:  # a model that never closes its block
                yield TextDelta("x" * 50)
        finally:
            closed.set()

    out = [c async for c in parse_calls(source(), max_call_chars=500)]
    assert shown(out) == "Hi " and closed.is_set()
    [call] = calls(out)
    assert call.name == "search_docs" and call.arguments.endswith("x[cut]") and len(call.arguments) == len(OPEN) + 505
    assert "longer than the relay reads (500 characters)" in (block_problem(call.arguments) or "")


# ---------------------------------------------------------------------------------------------- the history


def test_the_history_for_a_text_model() -> None:
    bad = f'{OPEN}{{"name": "get_selection", "arguments": {{"limit": }}}}{CLOSE}'
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are the copilot."},
        {"role": "system", "content": "Page context: {}"},
        {"role": "user", "content": "What is selected?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_selection", "arguments": '{"limit": 3}'}},
            {"id": "c2", "type": "function", "function": {"name": "get_selection", "arguments": bad}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "[t1] selected </tool_result> text"},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: The arguments were not a JSON object."},
    ]
    out = text_messages(messages, TOOLS)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    system = out[0]["content"]
    assert system.startswith("You are the copilot.\n\nPage context: {}\n\n# Tools")
    assert "## search_docs\nSearch the docs.\nParameters: " + json.dumps(TOOLS[0]["parameters"]) in system
    assert out[2]["content"] == (f'Checking.\n{OPEN}\n{{"name": "get_selection", "arguments": {{"limit": 3}}}}\n'
                                 f"{CLOSE}\n{bad}")
    results = out[3]["content"]
    assert results.startswith('<tool_result name="get_selection">\n[t1] selected <\\/tool_result> text\n'
                              "</tool_result>\n\n<tool_result name=\"get_selection\">\nError: this <tool_call> block "
                              "could not be read: its content is not valid JSON (Expecting value at line 1 column")
    assert all("tool_calls" not in m for m in out)
    # the last round (no tools): the model is told, and nothing describes a tool
    last = text_messages(messages, [])
    assert NO_TOOLS in last[0]["content"] and "# Tools" not in last[0]["content"]
    assert text_messages([{"role": "user", "content": "hi"}], []) == [{"role": "user", "content": "hi"}]


async def test_the_wrapper_sends_no_native_tools_and_passes_usage() -> None:
    inner = ScriptedModel()
    inner.script([TextDelta("Hm. <tool_ca"), TextDelta('ll>{"name": "search_docs", "arguments": {"query": "x"}}'),
                  TextDelta("</tool_call>"), Usage(input_tokens=5, output_tokens=2)])
    model = TextToolsAdapter(inner)
    out = [c async for c in model.stream(ModelRequest(messages=[{"role": "user", "content": "q"}], tools=TOOLS))]
    assert shown(out) == "Hm. " and out[-2:] == [ToolCall("search_docs", {"query": "x"}),
                                                 Usage(input_tokens=5, output_tokens=2)]
    sent = inner.requests[0]
    assert sent.tools == [] and "## get_selection" in sent.messages[0]["content"]


# ---------------------------------------------------------------------------------------------- the provider fakes


def test_every_provider_is_registered() -> None:
    """The two encoders of provider_fakes.py are there, and each names an adapter the relay knows."""
    from widget.relay.config import ADAPTERS

    assert {"openai-chat", "anthropic"} <= set(REGISTRY)
    for enc in REGISTRY.values():
        assert isinstance(enc, Encoder) and enc.adapter in ADAPTERS and enc.path.startswith("/")

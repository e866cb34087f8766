"""Tools as text (widget/relay/models/tools_text.py): a scripted model that calls tools in its text, with good,
malformed and partial calls, alone and in a real relay turn; the text around a call streams, a call never shows."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from relay_helpers import ScriptedModel, joined, launch, register

from widget.relay.config import AppConfig, ModelConfig
from widget.relay.models.base import ModelRequest, TextDelta, ToolCall, Usage
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

pytestmark = pytest.mark.relay

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


# ---------------------------------------------------------------------------------------------- a relay turn


async def test_relay_turn_with_tools_as_text(tmp_path: Path) -> None:
    """A page function called in text, then a malformed call the model is told about and writes again: the relay
    runs the good calls with the usual checks, the reader never sees a block, the model reads the results."""
    inner = ScriptedModel()
    h = await launch(tmp_path, adapters={"demo": TextToolsAdapter(inner)},
                     models={"demo": ModelConfig(chunk_delay_ms=0, tool_calling="text")},
                     apps={"demo": AppConfig()})
    try:
        async with aiohttp.ClientSession() as http:
            rec, _data, _url = await joined(http, h.url)
            await register(rec, "get_selection")
            rec.auto_answer = lambda call: f"selected {call['arguments']['limit']}"
            inner.script(
                [TextDelta("Let me check. <tool"), TextDelta('_call>{"name": "get_selection", "argu'),
                 TextDelta('ments": {"limit": 3}}</tool_call>')],
                [TextDelta(f'{OPEN}{{"name": "get_selection", "arguments": {{"limit": 4,}}}}{CLOSE}')],
                [TextDelta(f'{OPEN}{{"name": "get_selection", "arguments": {{"limit": 4}}}}{CLOSE}')],
                [TextDelta("It says: selected 3 and selected 4.")],
            )
            await rec.call("user_message", {"text": "what is selected?", "idempotency_key": "m"})
            fin = await rec.wait("completion.finished")
            assert fin["status"] == "done"
            streamed = [d["delta"] for e, d in rec.events if e == "completion_stream"]
            assert "".join(streamed) == "Let me check. It says: selected 3 and selected 4."
            assert not any("<" in s or "name" in s for s in streamed)
            begun = [d["arguments"] for e, d in rec.events if e == "function_call.begin"]
            assert begun == [{"limit": 3}, {"limit": 4}]  # the malformed call never ran
            second, third = inner.requests[1].messages, inner.requests[2].messages
            assert second[-1]["role"] == "user" and second[-1]["content"] == (
                '<tool_result name="get_selection">\nselected 3\n</tool_result>')
            assert second[-2] == {"role": "assistant", "content": "Let me check. \n" + OPEN + "\n" + json.dumps(
                {"name": "get_selection", "arguments": {"limit": 3}}) + "\n" + CLOSE}
            assert "could not be read: its content is not valid JSON" in third[-1]["content"]
            assert all(r.tools == [] for r in inner.requests)
            ended = [d["message"] for e, d in rec.events if e == "completion.ended"]
            assert ended[-1]["content"] == "It says: selected 3 and selected 4."
            await rec.disconnect()
    finally:
        await h.stop()


async def test_relay_turn_ask_user_as_text(tmp_path: Path) -> None:
    """The relay's own ``ask_user`` written as a block: the turn waits for the reader, whose answer goes back to
    the model as that call's result; a block cut off by the end of the answer asked nothing."""
    inner = ScriptedModel()
    h = await launch(tmp_path, adapters={"script": TextToolsAdapter(inner)},
                     apps={"demo": AppConfig(model="script", ask_user=True)},
                     models={"demo": ModelConfig(chunk_delay_ms=0), "script": ModelConfig(tool_calling="text")})
    try:
        async with aiohttp.ClientSession() as http:
            rec, _data, url = await joined(http, h.url)
            ask = {"name": "ask_user", "arguments": {"type": "bool", "question": "Proceed?"}}
            inner.script([TextDelta(f"{OPEN}{json.dumps(ask)[:-5]}")],  # unclosed: never asked
                         [TextDelta(f"One question. {OPEN}{json.dumps(ask)}{CLOSE}")],
                         [TextDelta("Done, as you wished.")])
            await rec.call("user_message", {"text": "go", "idempotency_key": "m1"})
            req = await rec.wait("ask_user.request")
            assert [p["question"] for p in req["prompts"]] == ["Proceed?"]
            assert len([e for e, _ in rec.events if e == "ask_user.request"]) == 1
            assert "## ask_user" in inner.requests[0].messages[0]["content"]
            told = inner.requests[1].messages[-1]["content"]
            assert told.startswith('<tool_result name="ask_user">\nError: this <tool_call> block could not be read: '
                                   "it was not closed with </tool_call>")
            r = await http.post(f"{url}/ask_user", json={"answers": {"id": req["prompts"][0]["id"], "result": True}})
            assert r.status == 200
            fin = await rec.wait("completion.finished")
            assert fin["status"] == "done"
            assert inner.requests[2].messages[-1]["content"] == '<tool_result name="ask_user">\ntrue\n</tool_result>'
            await rec.disconnect()
    finally:
        await h.stop()

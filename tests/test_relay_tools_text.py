"""Tools as text (widget/relay/models/tools_text.py) in a real relay turn: a scripted model that calls tools in its
text, with good and malformed calls, and asks the reader; the text around a call streams, a call never shows. The
parser, the history and the wrapper alone are unit tests in test_model_units.py."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest
from relay_helpers import ScriptedModel, joined, launch, register

from widget.relay.config import AppConfig, ModelConfig
from widget.relay.models.base import TextDelta
from widget.relay.models.tools_text import CLOSE, OPEN, TextToolsAdapter

pytestmark = pytest.mark.relay


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

"""A model without native tool calling behind an OpenAI-compatible server, for the provider scenarios
(tests/test_model_scenarios.py): the relay's model has ``tool_calling = "text"``, so the request carries no
``tools``; the model's calls are written into its streamed text as ``<tool_call>`` blocks (cut into small pieces,
tags included), and the history comes back with the calls as blocks and the results as ``<tool_result>`` blocks
(widget/relay/models/tools_text.py). Calls and results carry no ids in text: they are paired by their order."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from typing import Any

from provider_fakes import Call, OpenAIChatEncoder, Pause, Reply, pieces, register

from widget.relay.config import ModelConfig
from widget.relay.models.tools_text import CLOSE, OPEN

_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.DOTALL)
_RESULT = re.compile(r'<tool_result name="[^"]*">\n(.*?)\n</tool_result>', re.DOTALL)
_TOOL = re.compile(r"^## (\S+)$", re.MULTILINE)


class TextToolsEncoder(OpenAIChatEncoder):
    """Chat Completions streaming with the calls as text blocks (``finish_reason`` ``stop``: no native calls)."""

    name = "tools-as-text"

    def model_config(self, base_url: str) -> ModelConfig:
        cfg = super().model_config(base_url)
        cfg.tool_calling = "text"
        return cfg

    @staticmethod
    def block(call: Call) -> str:
        """A call as the model writes it (raw arguments as they are, so the block does not read)."""
        if isinstance(call.arguments, str):
            return f'{OPEN}\n{{"name": {json.dumps(call.name)}, "arguments": {call.arguments}}}\n{CLOSE}'
        return f"{OPEN}\n{json.dumps({'name': call.name, 'arguments': call.arguments})}\n{CLOSE}"

    def frames(self, reply: Reply, body: dict[str, Any]) -> Iterator[bytes | Pause]:
        assert "tools" not in body, "a tools-as-text model is never sent native tools"
        # reply.text may be endless (a Stop scenario): chained, never listed
        blocks = (p for call in reply.calls for p in pieces("\n" + self.block(call), 5))
        yield from super().frames(Reply(text=itertools.chain(reply.text, blocks), usage=reply.usage), body)

    def tool_names(self, body: dict[str, Any]) -> list[str]:
        system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
        return _TOOL.findall(system)

    def tool_calls(self, body: dict[str, Any]) -> list[tuple[str, str, Any]]:
        out: list[tuple[str, str, Any]] = []
        for m in body["messages"]:
            if m["role"] == "assistant":
                for raw in _BLOCK.findall(m["content"] or ""):
                    obj = json.loads(raw)
                    out.append((f"text-{len(out)}", obj["name"], obj.get("arguments", {})))
        return out

    def tool_results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        texts = [t for m in body["messages"] if m["role"] == "user" for t in _RESULT.findall(m["content"])]
        return [(f"text-{i}", t) for i, t in enumerate(texts)]

    def user_texts(self, body: dict[str, Any]) -> list[str]:
        out = []
        for m in body["messages"]:
            if m["role"] == "user":
                rest = _RESULT.sub("", m["content"]).strip()
                if rest:
                    out.append(rest)
        return out


register(TextToolsEncoder())

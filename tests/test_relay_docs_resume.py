"""Retry after a relay restart in an app with docs (over real Socket.IO, the relay stopped while the page runs a
call of the round that also searched): the page's call is finished from its answer, the interrupted round's search
— answered by the relay and kept nowhere — is not replayed, and the model, which sees the call's result but no
sections, searches again and cites what it finds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from docs_double import SITE, MemoryDocs
from relay_helpers import SHOP_SECRET, Recorder, ScriptedModel, info, joined, launch, register

from widget import protocol as P
from widget.relay.config import AppConfig, ModelConfig
from widget.relay.models.base import TextDelta, ToolCall

pytestmark = pytest.mark.relay

SEARCH = P.RelayTool.SEARCH_DOCS
ANSWER = "The bar's colours come from CSS custom properties on the host element [s1]."


async def relay_with_docs(tmp: Path, model: ScriptedModel, docs: MemoryDocs) -> Any:
    relay = await launch(tmp, adapters={"script": model},
                         apps={"agentic": AppConfig(model="script", secret=SHOP_SECRET, loop="agentic")},
                         models={"demo": ModelConfig(chunk_delay_ms=0), "script": ModelConfig(chunk_delay_ms=0)})
    relay.hub.docs = docs
    return relay


async def test_retry_after_a_restart_in_an_app_with_docs_cites_a_new_search(tmp_path: Path,
                                                                         http: aiohttp.ClientSession) -> None:
    model, docs = ScriptedModel(), MemoryDocs({"agentic": list(SITE)})
    model.script([TextDelta("Let me look. "), ToolCall(SEARCH, {"query": "colours css custom properties"}),
                  ToolCall("get_selection", {})])
    relay = await relay_with_docs(tmp_path, model, docs)
    rec, data, url = await joined(http, relay.url, app="agentic")
    cid = data["conversation"]["id"]
    try:
        await register(rec, "get_selection")
        assert (await rec.call("user_message", {"text": "How do I change the colours?", "idempotency_key": "m1"}))["ok"]
        begin = await rec.wait("function_call.begin", lambda d: d.get("run") is True)
    finally:
        await rec.disconnect()
        await relay.stop()  # the round's search was answered, the page's call is pending: a relay that died
    assert docs.queries == [("agentic", "colours css custom properties")]
    model.reset()
    model.script([ToolCall(SEARCH, {"query": "bar colours"})], [TextDelta(ANSWER)])
    old_base = relay.url
    relay = await relay_with_docs(tmp_path, model, docs)
    url = relay.url + url[len(old_base):]
    rec2 = None
    try:
        body = await info(http, url)  # the GET recovers the turn: failed, with Retry
        assert body["conversation"]["status"] == "failed"
        rec2 = await Recorder(body["relay_url"], body["relay_path"]).connect()
        ack = await rec2.join(body["token"], 0)
        assert ack["ok"] and [c["id"] for c in ack["pending_calls"]] == [begin["id"]]
        await rec2.wait("user_input", lambda d: d["seq"] == ack["seq"])
        response = {"id": begin["id"], "status": "success", "result": "the selection", "idempotency_key": "r1"}
        assert await rec2.call("function_response", response) == {"ok": True}
        mark = len(rec2.events)
        assert (await rec2.call("retry", {"idempotency_key": "t1"}))["ok"]
        fin = await rec2.wait("completion.finished", start=mark)
        assert fin["status"] == "done"
        # the page ran its call once; the model, asked for the round after it, searched again
        assert [d for e, d in rec2.events[mark:] if e == "function_call.begin"] == []
        assert docs.queries == [("agentic", "colours css custom properties"), ("agentic", "bar colours")]
        assert len(model.requests) == 2
        history = model.requests[0].messages
        assert history[-1] == {"role": "tool", "tool_call_id": begin["id"], "content": "[t1] the selection"}
        msgs = (await info(http, url))["messages"]
        assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
        search = msgs[4]
        assert (search["name"], search["status"]) == (SEARCH, "success")
        assert [s["id"] for s in search["result"]["sections"]][:1] == ["s1"]
        final = msgs[-1]
        withdrawn = [d["reason"] for e, d in rec2.events[mark:] if e == "messages.withdrawn"]
        assert final["content"] == ANSWER and withdrawn == ["retry"]  # not withdrawn as uncited
        assert [(s["id"], s["url"].split(":~:")[0]) for s in final["sources"]] == [("s1", "/docs/theming.html#colours")]
        assert cid == body["conversation"]["id"]
    finally:
        if rec2 is not None:
            await rec2.disconnect()
        await relay.stop()

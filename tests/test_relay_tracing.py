"""OpenTelemetry traces of turns and calls: off by default, spans in an in-memory exporter, OTLP over HTTP.

A real relay runs scripted turns (a page function, then a model error); its spans are checked for shape (one turn
span per turn, a model round and call spans under it, status and error code) and for what they must not hold
(arguments, message text, context, the conversation id). A relay configured for OTLP sends its spans to a local
collector stand-in on shutdown.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from relay_helpers import FUNC, ScriptedModel, declare, joined, launch

from widget.errors import ConfigError
from widget.relay.config import AppConfig, ModelConfig, load_config
from widget.relay.models.base import ModelError, TextDelta, ToolCall, Usage

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from widget.relay.tracing import Tracing

pytestmark = pytest.mark.relay

ARG_SECRET = "ARG-SECRET-4711"
CTX_SECRET = "CTX-SECRET-0815"
USER_TEXT = "USER-TEXT-1234"
MODELS = {"demo": ModelConfig(chunk_delay_ms=0), "script": ModelConfig(chunk_delay_ms=0)}



async def run_turns(relay: Any, model: ScriptedModel, http: aiohttp.ClientSession) -> str:
    """A turn with a page function, then a turn the model fails; the conversation id."""
    rec, data, _url = await joined(http, relay.url)
    await declare(rec, {"get_selection": {k: v for k, v in FUNC.items() if k != "name"}})
    patch = [{"op": "add", "path": "/autopilot/context/account", "value": CTX_SECRET}]
    assert (await rec.call("state_patch", {"patch": patch, "idempotency_key": "ctx"})) == {"ok": True}
    rec.auto_answer = lambda call: "the selection"
    model.script([ToolCall("get_selection", {"token": ARG_SECRET}), Usage(100, 5)],
                 [TextDelta("done"), Usage(140, 9, cached_input_tokens=64)])
    assert (await rec.call("user_message", {"text": USER_TEXT, "idempotency_key": "m1"}))["ok"]
    await rec.wait("completion.finished", timeout=15)
    start = len(rec.events)
    model.script([ModelError("model_rate_limited", "The model is busy.")])
    assert (await rec.call("user_message", {"text": "again", "idempotency_key": "m2"}))["ok"]
    await rec.wait("completion.finished", start=start, timeout=15)
    await rec.disconnect()
    return str(data["conversation"]["id"])


async def test_tracing_is_off_by_default_and_checked(tmp_path: Path) -> None:
    relay = await launch(tmp_path)
    try:
        assert relay.hub.tracing is None
    finally:
        await relay.stop()
    with pytest.raises(ConfigError, match="tracing must be"):
        load_config(None, env={}, tracing="jaeger")


async def test_spans_of_turns_rounds_and_calls(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    model = ScriptedModel()
    relay = await launch(tmp_path, adapters={"script": model}, apps={"demo": AppConfig(model="script")}, models=MODELS)
    exporter = InMemorySpanExporter()
    relay.hub.tracing = Tracing.with_exporter(exporter, batch=False)
    try:
        cid = await run_turns(relay, model, http)
    finally:
        await relay.stop()
    spans = exporter.get_finished_spans()
    turns = [s for s in spans if s.name == "autopilot.turn"]
    assert len(turns) == 2
    ok_turn, failed_turn = sorted(turns, key=lambda s: s.start_time)
    assert ok_turn.attributes["autopilot.turn.status"] == "done" and ok_turn.status.status_code != StatusCode.ERROR
    assert failed_turn.attributes["autopilot.turn.status"] == "failed"
    assert ok_turn.attributes["autopilot.turn_id"].startswith("t_") and failed_turn.attributes["autopilot.turn_id"]
    assert failed_turn.attributes["autopilot.error_code"] == "model_rate_limited"
    assert failed_turn.status.status_code == StatusCode.ERROR
    under = [s for s in spans if s.parent is not None and s.parent.span_id == ok_turn.context.span_id]
    rounds = [s for s in under if s.name == "autopilot.model_round"]
    calls = [s for s in under if s.name == "autopilot.call"]
    assert len(rounds) == 2 and len(calls) == 1
    # tokens as the OpenTelemetry GenAI conventions name them: per round, summed on the turn
    assert sorted((r.attributes["gen_ai.usage.input_tokens"], r.attributes["gen_ai.usage.output_tokens"])
                  for r in rounds) == [(100, 5), (140, 9)]
    assert all(r.attributes["autopilot.model"] == "script" for r in rounds)
    assert (ok_turn.attributes["gen_ai.usage.input_tokens"], ok_turn.attributes["gen_ai.usage.output_tokens"],
            ok_turn.attributes["autopilot.usage.cached_input_tokens"]) == (240, 14, 64)
    call = calls[0]
    assert call.attributes["autopilot.call.name"] == "get_selection"
    assert call.attributes["autopilot.call.kind"] == "function"
    assert call.attributes["autopilot.call.status"] == "success"
    assert call.attributes["autopilot.call.duration_ms"] == 1.25
    assert call.context.trace_id == ok_turn.context.trace_id
    assert ok_turn.start_time <= call.start_time <= call.end_time <= ok_turn.end_time
    for span in spans:
        text = repr(dict(span.attributes or {})) + span.name
        for secret in (ARG_SECRET, CTX_SECRET, USER_TEXT, "the selection", cid):
            assert secret not in text, (span.name, secret)


async def test_otlp_exporter_sends_to_the_configured_endpoint(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    bodies: list[tuple[str, bytes]] = []

    async def collect(request: web.Request) -> web.Response:
        bodies.append((request.path, await request.read()))
        return web.Response(status=200, content_type="application/x-protobuf", body=b"")

    app = web.Application()
    app.router.add_post("/v1/traces", collect)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    model = ScriptedModel()
    try:
        relay = await launch(
            tmp_path,
            adapters={"script": model},
            apps={"demo": AppConfig(model="script")},
            models=MODELS,
            tracing="otlp",
            otlp_endpoint=f"http://127.0.0.1:{port}/v1/traces",
        )
        assert relay.hub.tracing is not None
        try:
            await run_turns(relay, model, http)
        finally:
            await relay.stop()  # the hub's shutdown flushes the batch to the collector before it returns
        assert bodies and all(path == "/v1/traces" for path, _ in bodies)
        sent = b"".join(body for _, body in bodies)
        assert b"autopilot.turn" in sent and b"autopilot.call" in sent and b"get_selection" in sent
        assert ARG_SECRET.encode() not in sent and USER_TEXT.encode() not in sent
    finally:
        await runner.cleanup()

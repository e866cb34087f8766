"""MCP servers' secrets and sizes (issue 31, item 4), with real stdio servers (tests/mcp_test_server.py).

A server that prints its token to stderr and crashes — at start, or during a call — must not put the token in the
conversation: it is in none of the database, the page's GET, the model's request or the relay's log (where the
stderr tail goes, the configured secret values masked). The ``mcp_call_failed`` line does not carry a server's
error text (it may echo the arguments). A result over ``max_result_bytes`` is not read (the model is told so) and
the connection goes on."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from relay_helpers import SHOP_ORIGIN, SHOP_SECRET, ScriptedModel, info, joined, launch
from support import free_port, stop_process

from widget.relay.config import AppConfig, ModelConfig
from widget.relay.mcp.bounded import too_large_message
from widget.relay.mcp.config import McpServerConfig
from widget.relay.models.base import TextDelta, ToolCall

pytest.importorskip("mcp")

pytestmark = pytest.mark.relay

SERVER = str(Path(__file__).with_name("mcp_test_server.py"))
TOKEN_VAR = "AUTOPILOT_TEST_EDGES_MCP_TOKEN"
TOKEN = "tok-SECRET-4242-zzq"
ARGUMENT = "ARG-SECRET-777"
LIMIT = 100_000


@pytest.fixture(scope="module")
def http_server() -> Any:
    """The test server over streamable HTTP; its URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, SERVER, "http", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                stop_process(proc)
                raise AssertionError("the streamable-HTTP MCP test server did not start") from None
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    stop_process(proc)


@pytest_asyncio.fixture(scope="module")
async def both(tmp_path_factory: pytest.TempPathFactory,
               http_server: str) -> AsyncIterator[tuple[Any, ScriptedModel, Path]]:
    tmp = tmp_path_factory.mktemp("edges-mcp")
    model = ScriptedModel()
    env = {"MCP_TEST_TOKEN": TOKEN_VAR}
    servers = {
        "leaky": McpServerConfig(command=[sys.executable, SERVER, "stdio", "--mode", "leak-crash"], env=env,
                                 tools=["*"], startup_timeout_s=30),
        "local": McpServerConfig(command=[sys.executable, SERVER, "stdio"], env=env, startup_timeout_s=30,
                                 tools=["leak_and_die", "fail_echo", "big", "add", "sleep_forever"], timeout_s=20,
                                 max_result_bytes=LIMIT),
        "web": McpServerConfig(transport="http", url=http_server, tools=["big", "add"], startup_timeout_s=30,
                               max_result_bytes=LIMIT),
    }
    slow = {"slow": McpServerConfig(command=[sys.executable, SERVER, "stdio", "--mode", "slow-start"],
                                    tools=["add", "no_such_tool"], startup_timeout_s=30)}
    os.environ[TOKEN_VAR] = TOKEN
    try:
        h = await launch(tmp, adapters={"script": model},
                         apps={"shop": AppConfig(model="script", allowed_origins=[SHOP_ORIGIN], secret=SHOP_SECRET,
                                                 mcp=servers),
                               "slowapp": AppConfig(model="script", secret=SHOP_SECRET, mcp=slow)},
                         models={"script": ModelConfig(chunk_delay_ms=0)})
    finally:
        del os.environ[TOKEN_VAR]
    yield h, model, tmp
    await h.stop()


async def test_a_crashing_server_s_secret_reaches_only_the_masked_log(
        both: tuple[Any, ScriptedModel, Path], http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture) -> None:
    relay, model, tmp = both
    caplog.set_level(logging.INFO, logger="widget.relay")
    rec, data, url = await joined(http, relay.url, app="shop")
    model.script([ToolCall("mcp__local__leak_and_die", {})],
                 [ToolCall("mcp__local__fail_echo", {"text": ARGUMENT})],
                 [ToolCall("mcp__local__big", {"n": 3_000_000})],
                 [ToolCall("mcp__local__add", {"a": 1, "b": 2})],
                 [TextDelta("done")])
    try:
        assert (await rec.call("user_message", {"text": "go", "idempotency_key": "m1"}))["ok"]
        await rec.wait("completion.finished", timeout=90)
        ends = {d["name"]: d for e, d in rec.events if e == "function_call.end"}
        assert ends["mcp__local__leak_and_die"]["error"] == "The MCP server 'local' failed during the call."
        assert ends["mcp__local__fail_echo"]["status"] == "error"
        assert ends["mcp__local__big"]["error"] == too_large_message(LIMIT)
        assert ends["mcp__local__add"]["result"] == 3  # the connection went on after the result it did not read
        notes = [m["content"] for m in model.requests[0].messages
                 if m["role"] == "system" and "MCP server" in m["content"]]
        assert notes and "The MCP server 'leaky' is unavailable: it failed to start." in notes[0]

        body = json.dumps(await info(http, url))
        sent = json.dumps([r.messages for r in model.requests])
        logged = "\n".join(r.getMessage() for r in caplog.records)
        stored = b"".join(p.read_bytes() for p in tmp.glob("relay.sqlite3*"))
        for where, text in (("the GET", body), ("the model's requests", sent), ("the log", logged)):
            assert TOKEN not in text, where
        assert TOKEN.encode() not in stored, "the database"
        # The operator still learns what the server said, secrets masked.
        details = [json.loads(r.getMessage()) for r in caplog.records
                   if r.getMessage().startswith(('{"event": "mcp_unavailable"', '{"event": "mcp_server_failed"'))]
        assert {d["event"] for d in details} == {"mcp_unavailable", "mcp_server_failed"}
        assert all("[secret]" in d["detail"] for d in details), details
        failed = [json.loads(r.getMessage()) for r in caplog.records if '"event": "mcp_call_failed"' in r.getMessage()]
        assert {(f["tool"], f["failure"]) for f in failed} == {
            ("leak_and_die", "server_failed"), ("fail_echo", "tool_error"), ("big", "result_too_large")}
        assert ARGUMENT not in "\n".join(r.getMessage() for r in caplog.records if "mcp_" in r.getMessage())
    finally:
        await rec.disconnect()


async def test_an_http_server_s_result_is_read_within_the_limit(
        both: tuple[Any, ScriptedModel, Path], http: aiohttp.ClientSession) -> None:
    relay, model, _ = both
    model.reset()
    rec, _, _ = await joined(http, relay.url, app="shop")
    model.script([ToolCall("mcp__web__big", {"n": 3_000_000})], [ToolCall("mcp__web__add", {"a": 2, "b": 2})],
                 [TextDelta("done")])
    try:
        assert (await rec.call("user_message", {"text": "go", "idempotency_key": "w1"}))["ok"]
        await rec.wait("completion.finished", timeout=90)
        ends = {d["name"]: d for e, d in rec.events if e == "function_call.end"}
        assert ends["mcp__web__big"]["error"] == too_large_message(LIMIT)
        assert ends["mcp__web__add"]["result"] == 4  # the next use connects again
    finally:
        await rec.disconnect()


async def test_stop_during_an_mcp_call_ends_its_pill_also_after_a_reload(
        both: tuple[Any, ScriptedModel, Path], http: aiohttp.ClientSession) -> None:
    relay, model, _ = both
    model.reset()
    rec, _, url = await joined(http, relay.url, app="shop")
    model.script([TextDelta("Looking. "), ToolCall("mcp__local__sleep_forever", {})])
    try:
        assert (await rec.call("user_message", {"text": "wait", "idempotency_key": "s1"}))["ok"]
        begin = await rec.wait("function_call.begin", timeout=60)
        assert (await rec.call("cancel", {"idempotency_key": "c1"}))["cancelled"] is True
        end = await rec.wait("function_call.end", timeout=30)
        assert (end["id"], end["status"], end["error"]) == (begin["id"], "error", "Cancelled.")
        assert (await rec.wait("completion.finished", timeout=30))["status"] == "cancelled"
        assert [e for e, d in rec.events if e == "function_call.end"] == ["function_call.end"]  # one end
        messages = (await info(http, url))["messages"]  # what a reload shows
        tools = [m for m in messages if m["role"] == "tool" and m.get("function_call_id") == begin["id"]]
        assert [(t["status"], t["error"]) for t in tools] == [("error", "Cancelled.")], messages
    finally:
        await rec.disconnect()


async def test_the_turn_runs_from_its_acceptance_while_a_server_starts(
        both: tuple[Any, ScriptedModel, Path], http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture) -> None:
    """The server's handshake takes 2 s: ``completion.started`` (the bar's "Thinking…" and Stop) does not wait for
    it; an allowlisted tool the server does not offer is reported when it starts."""
    relay, model, _ = both
    model.reset()
    caplog.set_level(logging.INFO, logger="widget.relay")
    rec, _, _ = await joined(http, relay.url, app="slowapp")
    model.script([TextDelta("hello")])
    try:
        t0 = time.monotonic()
        assert (await rec.call("user_message", {"text": "hi", "idempotency_key": "q1"}))["ok"]
        await rec.wait("completion.started", timeout=30)
        started = time.monotonic() - t0
        await rec.wait("completion.finished", timeout=60)
        finished = time.monotonic() - t0
        assert started < 1.5 <= finished, (started, finished)
        missing = [json.loads(r.getMessage()) for r in caplog.records
                   if r.getMessage().startswith('{"event": "mcp_tools_missing"')]
        assert [(m["server"], m["tools"]) for m in missing] == [("slow", ["no_such_tool"])]
    finally:
        await rec.disconnect()

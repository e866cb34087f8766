"""MCP servers on the relay over real Socket.IO, with real servers (tests/mcp_test_server.py): a stdio server
and a streamable-HTTP one whose allowed tools join the model's catalogue namespaced, calls shown as pills with
timings and logged without arguments, results cut, secrets from the environment, a server that fails to
start, one that never starts, a call that hangs, a server that dies mid-call, the allowlist, a page entry
that wins over a server tool, and a sensitive tool the reader allows or denies.
"""

from __future__ import annotations

import asyncio
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

pytest.importorskip("mcp")

from relay_helpers import SHOP_ORIGIN, SHOP_SECRET, Recorder, ScriptedModel, declare, joined, launch, turn_log_line
from support import stop_process

from widget import protocol as P
from widget.relay.config import AppConfig, ModelConfig
from widget.relay.mcp.config import McpServerConfig
from widget.relay.models.base import TextDelta, ToolCall

pytestmark = pytest.mark.relay

SERVER = str(Path(__file__).with_name("mcp_test_server.py"))
TOKEN_VAR = "AUTOPILOT_TEST_MCP_TOKEN"
LOCAL_TOOLS = ["add", "echo", "whoami", "wipe", "sleep_forever", "die", "nested"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def http_server() -> Any:
    port = _free_port()
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
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def servers(url: str) -> dict[str, McpServerConfig]:
    return {
        "local": McpServerConfig(command=[sys.executable, SERVER, "stdio"], env={"MCP_TEST_TOKEN": TOKEN_VAR},
                                 tools=LOCAL_TOOLS, timeout_s=1.5, startup_timeout_s=30),
        "web": McpServerConfig(transport="http", url=url, tools=["*"], sensitive={"wipe": False}, startup_timeout_s=30),
        "broken": McpServerConfig(command=[sys.executable, SERVER, "stdio", "--mode", "crash"], tools=["*"],
                                  startup_timeout_s=30),
        "stuck": McpServerConfig(command=[sys.executable, SERVER, "stdio", "--mode", "hang-start"], tools=["*"],
                                 startup_timeout_s=1),
    }


@pytest_asyncio.fixture(scope="module")
async def both(tmp_path_factory: pytest.TempPathFactory, http_server: str) -> AsyncIterator[tuple[Any, ScriptedModel]]:
    model = ScriptedModel()
    os.environ[TOKEN_VAR] = "token-from-the-relay-environment"
    try:
        h = await launch(tmp_path_factory.mktemp("mcp"), adapters={"script": model},
                         function_call_timeout_s=5,
                         apps={"demo": AppConfig(model="demo"),
                               "shop": AppConfig(model="script", allowed_origins=[SHOP_ORIGIN], secret=SHOP_SECRET,
                                                 mcp=servers(http_server))},
                         models={"demo": ModelConfig(chunk_delay_ms=0), "script": ModelConfig(chunk_delay_ms=0)})
    finally:
        del os.environ[TOKEN_VAR]
    yield h, model
    await h.stop()


@pytest.fixture
def relay(both: tuple[Any, ScriptedModel]) -> Any:
    both[1].reset()
    return both[0]


@pytest.fixture
def model(both: tuple[Any, ScriptedModel]) -> ScriptedModel:
    return both[1]


async def turn(rec: Recorder, text: str, key: str, timeout: float = 60) -> list[tuple[str, Any]]:
    mark = len(rec.events)
    ack = await rec.call("user_message", {"text": text, "idempotency_key": key})
    assert ack["ok"], ack
    await rec.wait("user_input", pred=lambda d: d["reason"] == "message", start=mark, timeout=timeout)
    return rec.events[mark:]


def named(events: list[tuple[str, Any]], name: str) -> list[Any]:
    return [d for e, d in events if e == name]


def tool_messages(events: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    return [t for d in named(events, "completion.ended") for t in d["tool_messages"]]


# ---------------------------------------------------------------------------------------------- the relay


async def test_catalogue_allowlist_and_unavailable_servers(relay: Any, model: ScriptedModel,
                                                           http: aiohttp.ClientSession,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="widget.relay")
    rec, _, _ = await joined(http, relay.url, app="shop")
    t0 = time.monotonic()
    await turn(rec, "hello", "m1")
    assert time.monotonic() - t0 < 30  # the stuck server costs its startup limit, not a stalled turn
    req = model.requests[0]
    names = [t["name"] for t in req.tools]
    assert {"mcp__local__add", "mcp__local__echo", "mcp__local__whoami", "mcp__local__wipe", "mcp__web__add",
            "mcp__web__hidden"} <= set(names)
    assert "mcp__local__hidden" not in names  # not on the allowlist
    assert "mcp__local__nested" not in names  # an array parameter: not a flat schema, left out (logged)
    assert any("mcp__local__nested" not in r.getMessage() and "'nested'" in r.getMessage() for r in caplog.records)
    add = next(t for t in req.tools if t["name"] == "mcp__local__add")
    assert add["strict"] is True and add["parameters"]["required"] == ["a", "b"] and "local" in add["description"]
    notes = [m["content"] for m in req.messages if m["role"] == "system" and "MCP server" in m["content"]]
    assert len(notes) == 1
    assert "'broken' is unavailable: it failed to start." in notes[0]
    assert "configuration missing" not in notes[0]  # its stderr is the operator's (the log), never the model's
    assert "'stuck' is unavailable: it did not start within 1 s" in notes[0]
    logged = [json.loads(r.getMessage()) for r in caplog.records
              if r.getMessage().startswith('{"event": "mcp_unavailable"')]
    assert {e["server"] for e in logged} == {"broken", "stuck"}
    assert any("configuration missing" in e["detail"] for e in logged)
    await rec.disconnect()


async def test_calls_pills_timings_results_and_turn_log(relay: Any, model: ScriptedModel, http: aiohttp.ClientSession,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="widget.relay.turns")
    rec, data, _ = await joined(http, relay.url, app="shop")
    long = "x" * 9000
    model.script([ToolCall("mcp__local__add", {"a": 2, "b": 40}), ToolCall("mcp__web__add", {"a": 1, "b": 1}),
                  ToolCall("mcp__local__whoami", {}), ToolCall("mcp__local__echo", {"text": long}),
                  ToolCall("mcp__local__add", {"a": "two"}), ToolCall("mcp__local__hidden", {})],
                 [TextDelta("done")])
    events = await turn(rec, "use the servers", "m2")
    begins = named(events, "function_call.begin")
    assert [(b["name"], b["kind"], b["run"]) for b in begins] == [
        ("mcp__local__add", "tool", False), ("mcp__web__add", "tool", False), ("mcp__local__whoami", "tool", False),
        ("mcp__local__echo", "tool", False)]  # the invalid call and the unknown one never start
    ends = {e["name"]: e for e in named(events, "function_call.end")}
    assert ends["mcp__local__add"]["status"] == "success" and ends["mcp__local__add"]["result"] == 42
    assert ends["mcp__web__add"]["result"] == 2
    assert ends["mcp__local__whoami"]["result"] == "token-from-the-relay-environment"
    assert ends["mcp__local__echo"]["result"] == "x" * P.TOOL_REPLY_MAX_CHARS + " [cut]"
    assert all(isinstance(e["duration_ms"], float) and e["total_ms"] >= e["duration_ms"] for e in ends.values())
    msgs = tool_messages(events)
    assert [m["status"] for m in msgs] == ["success", "success", "success", "success", "error", "error"]
    assert "Invalid arguments" in msgs[4]["error"] and msgs[5]["error"] == "Unknown function 'mcp__local__hidden'."
    seen = [m["content"] for m in model.requests[1].messages if m["role"] == "tool"]
    assert seen[0] == "42" and seen[2] == "token-from-the-relay-environment"
    line = await turn_log_line(caplog, data["conversation"]["id"])
    assert [(c["tool"], c["ok"]) for c in line["calls"]] == [("mcp__local__add", True), ("mcp__web__add", True),
                                                            ("mcp__local__whoami", True), ("mcp__local__echo", True)]
    assert "token-from" not in json.dumps(line) and "xxxx" not in json.dumps(line) and '"a"' not in json.dumps(line)
    await rec.disconnect()


async def test_hanging_call_and_server_dying_mid_call(relay: Any, model: ScriptedModel, http: aiohttp.ClientSession,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="widget.relay")
    rec, _, _ = await joined(http, relay.url, app="shop")
    model.script([ToolCall("mcp__local__sleep_forever", {})], [TextDelta("a")],
                 [ToolCall("mcp__local__die", {})], [TextDelta("b")],
                 [ToolCall("mcp__local__add", {"a": 1, "b": 2})], [TextDelta("c")])
    events = await turn(rec, "hang", "m3")
    end = named(events, "function_call.end")[0]
    assert end["status"] == "error" and end["error"] == "The tool did not answer within 1.5 s."
    assert named(events, "completion.finished")[-1]["status"] == "done"
    events = await turn(rec, "die", "m4")
    end = named(events, "function_call.end")[0]
    assert end["status"] == "error" and end["error"] == "The MCP server 'local' failed during the call."
    assert any('"event": "mcp_call_failed"' in r.getMessage() and '"die"' in r.getMessage() for r in caplog.records)
    events = await turn(rec, "again", "m5")  # the next use starts the server again
    assert named(events, "function_call.end")[0]["result"] == 3
    await rec.disconnect()


async def test_stop_during_a_call_ends_its_pill(relay: Any, model: ScriptedModel, http: aiohttp.ClientSession) -> None:
    rec, _, _ = await joined(http, relay.url, app="shop")
    model.script([ToolCall("mcp__web__sleep_forever", {})])
    mark = len(rec.events)
    assert (await rec.call("user_message", {"text": "wait", "idempotency_key": "m10"}))["ok"]
    begin = await rec.wait("function_call.begin", start=mark, timeout=30)
    assert (await rec.call("cancel", {"idempotency_key": "c10"}))["cancelled"] is True
    end = await rec.wait("function_call.end", start=mark, timeout=30)
    assert end["id"] == begin["id"] and end["status"] == "error" and end["error"] == "Cancelled."
    done = await rec.wait("completion.finished", start=mark, timeout=30)
    assert done["status"] == "cancelled"
    await rec.disconnect()


async def test_page_entry_wins_over_a_server_tool(relay: Any, model: ScriptedModel,
                                                  http: aiohttp.ClientSession) -> None:
    rec, _, _ = await joined(http, relay.url, app="shop")
    await declare(rec, {"mcp__local__add": {"kind": "function", "description": "The page's own.",
                                            "parameters": {"type": "object", "properties": {}}}})
    rec.auto_answer = lambda d: "from the page"
    model.script([ToolCall("mcp__local__add", {})], [TextDelta("ok")])
    events = await turn(rec, "add", "m6")
    spec = next(t for t in model.requests[0].tools if t["name"] == "mcp__local__add")
    assert spec["description"] == "The page's own."
    begin = named(events, "function_call.begin")
    assert begin[-1]["run"] is True and named(events, "function_call.end")[0]["result"] == "from the page"
    await rec.disconnect()


async def test_sensitive_tool_allowed_or_denied_by_the_reader(relay: Any, model: ScriptedModel,
                                                              http: aiohttp.ClientSession) -> None:
    rec, _, _ = await joined(http, relay.url, app="shop")
    answers = iter(["allow", None])

    async def reader(data: dict[str, Any]) -> None:
        if not data.get("run"):
            return
        decision = next(answers)
        body = ({"status": "success", "result": decision} if decision else {"status": "error",
                                                                            "error": P.MSG_SENSITIVE_DENIED})
        await rec.sio.call("function_response", {"id": data["id"], "idempotency_key": "fr-" + data["id"], **body})

    rec.sio.on("function_call.begin",
               lambda d: asyncio.ensure_future(asyncio.gather(rec._any("function_call.begin", d), reader(d))))
    model.script([ToolCall("mcp__local__wipe", {"target": "drafts"})], [TextDelta("a")],
                 [ToolCall("mcp__local__wipe", {"target": "all"})], [TextDelta("b")],
                 [ToolCall("mcp__web__wipe", {"target": "cache"})], [TextDelta("c")])
    events = await turn(rec, "wipe drafts", "m7")
    begin = named(events, "function_call.begin")
    assert [(b["kind"], b["run"]) for b in begin] == [("function", True)]  # sent to the page for the reader
    end = named(events, "function_call.end")
    assert len(end) == 1 and end[0]["status"] == "success" and end[0]["result"] == "wiped drafts"
    assert tool_messages(events)[0]["result"] == "wiped drafts"
    events = await turn(rec, "wipe all", "m8")
    end = named(events, "function_call.end")
    assert len(end) == 1 and end[0]["status"] == "error" and end[0]["error"] == P.MSG_SENSITIVE_DENIED
    assert end[0]["duration_ms"] is None
    events = await turn(rec, "wipe the cache", "m9")  # sensitive = false overrides the server's hint
    begin = named(events, "function_call.begin")
    assert [(b["kind"], b["run"]) for b in begin] == [("tool", False)]
    assert named(events, "function_call.end")[0]["result"] == "wiped cache"
    await rec.disconnect()

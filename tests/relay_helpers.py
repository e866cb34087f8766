"""Helpers for the relay tests: an in-loop relay on a free loopback port and a recording Socket.IO client."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import aiohttp
import socketio

from widget.relay import AppConfig, ModelConfig, RelayConfig, start_relay
from widget.relay.model import ModelAdapter, ModelRequest, TextDelta

SECRET = "test-relay-secret-0123456789"
SHOP_SECRET = "shop-secret-0123456789abcdef"
SHOP_ORIGIN = "https://shop.example"
ASK_SECRET = "ask-secret-0123456789abcdefgh"


def make_dist(root: Path) -> Path:
    """A tiny fake build output: loader, manifest, one versioned build with a demo page."""
    dist = root / "_dist"
    (dist / "b123" / "pyodide").mkdir(parents=True)
    (dist / "b123" / "demo").mkdir(parents=True)
    (dist / "autopilot.js").write_text("/* loader */\n" + "console.log('autopilot');\n" * 200)
    (dist / "manifest.json").write_text('{"build_id": "b123"}')
    (dist / "b123" / "pyodide" / "pyodide.asm.wasm").write_bytes(b"\0asm\x01\0\0\0" + b"\0" * 5000)
    (dist / "b123" / "pyodide" / "random.zip").write_bytes(__import__("os").urandom(6000))
    (dist / "b123" / "demo" / "index.html").write_text("<!doctype html><title>demo</title>" + "<p>hi</p>" * 300)
    (dist / "b123" / "app.py").write_text("print('hi')\n")
    (root / "secret.txt").write_text("outside")
    return dist


def relay_config(tmp: Path, **overrides: Any) -> RelayConfig:
    cfg = RelayConfig(
        port=0,
        db_path=str(tmp / "relay.sqlite3"),
        secret=SECRET,
        dist_dir=make_dist(tmp) if not (tmp / "_dist").exists() else tmp / "_dist",
        function_call_timeout_s=0.6,
        tool_call_timeout_s=0.6,
        create_rate_per_minute=1000,
        message_rate_per_minute=1000,
        apps={
            "demo": AppConfig(),
            "shop": AppConfig(allowed_origins=[SHOP_ORIGIN], secret=SHOP_SECRET),
            "ask": AppConfig(ask_user=True, secret=ASK_SECRET),
        },
        models={"demo": ModelConfig(adapter="demo", chunk_delay_ms=0)},
    )
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


async def launch(tmp: Path, adapters: dict[str, ModelAdapter] | None = None, **overrides: Any) -> Any:
    """A relay in this loop; ``adapters`` replace model adapters by name (e.g. a ScriptedModel)."""
    return await start_relay(relay_config(tmp, **overrides), models=adapters)


class ScriptedModel(ModelAdapter):
    """A test model playing one scripted round per request: its chunks (TextDelta / ToolCall) in
    order; an exception in the list is raised at that point (after the chunks before it). Records
    every request. With no script left it answers "(unscripted)"."""

    name = "scripted"

    def __init__(self) -> None:
        self.rounds: list[list[Any]] = []
        self.requests: list[ModelRequest] = []

    def script(self, *rounds: list[Any]) -> None:
        self.rounds.extend(list(r) for r in rounds)

    def reset(self) -> None:
        self.rounds.clear()
        self.requests.clear()

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:  # type: ignore[override]
        self.requests.append(request)
        chunks = self.rounds.pop(0) if self.rounds else [TextDelta("(unscripted)")]
        for c in chunks:
            if isinstance(c, BaseException):
                raise c
            await asyncio.sleep(0)
            yield c


def fold(events: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """The conversation's messages rebuilt from its sequenced events (what a client replaying from 0
    holds): ``message`` adds one, ``completion.ended`` adds the assistant message and its tool
    messages, ``messages.withdrawn`` removes the listed ones."""
    msgs: list[dict[str, Any]] = []
    for name, d in events:
        if name == "message":
            msgs.append(d["message"])
        elif name == "completion.ended":
            msgs += [d["message"], *d["tool_messages"]]
        elif name == "messages.withdrawn":
            gone = set(d["message_ids"])
            msgs = [m for m in msgs if m["id"] not in gone]
    return msgs


class Recorder:
    """A python-socketio client that records every event it receives."""

    def __init__(self, relay_url: str, relay_path: str = "/socket.io") -> None:
        self.url = relay_url
        self.path = relay_path
        self.sio = socketio.AsyncClient(reconnection=False)
        self.events: list[tuple[str, Any]] = []
        self._changed = asyncio.Event()
        self.auto_answer: Callable[[dict[str, Any]], Any] | None = None
        self.sio.on("*", self._any)
        self.sio.on("function_call.begin", self._begin)

    async def _any(self, event: str, data: Any = None) -> None:
        self.events.append((event, data))
        self._changed.set()

    async def _begin(self, data: Any) -> None:
        await self._any("function_call.begin", data)
        if self.auto_answer is not None and data.get("run"):
            result = self.auto_answer(data)
            await self.sio.call("function_response", {
                "id": data["id"], "status": "success", "result": result,
                "idempotency_key": "fr-" + data["id"], "handler_ms": 1.25, "total_ms": 1.5,
            })

    async def connect(self) -> "Recorder":
        await self.sio.connect(self.url, socketio_path=self.path, transports=["websocket"])
        return self

    async def call(self, event: str, data: Any = None, timeout: float = 5) -> Any:
        return await self.sio.call(event, data, timeout=timeout)

    async def join(self, token: str, last_seq: int | None = 0, version: int = 1) -> Any:
        return await self.call("join", {"token": token, "version": version, "last_seq": last_seq})

    async def disconnect(self) -> None:
        if self.sio.connected:
            await self.sio.disconnect()

    def names(self) -> list[str]:
        return [e for e, _ in self.events]

    def seqd(self) -> list[tuple[str, Any]]:
        return [(e, d) for e, d in self.events if isinstance(d, dict) and "seq" in d]

    async def wait(self, event: str, pred: Callable[[Any], bool] | None = None, timeout: float = 5.0, start: int = 0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            for e, d in self.events[start:]:
                if e == event and (pred is None or pred(d)):
                    return d
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no {event!r} within {timeout} s; got {self.names()}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except asyncio.TimeoutError:
                pass


async def create(http: aiohttp.ClientSession, base: str, app: str = "demo") -> str:
    """Create a conversation: the ``demo`` app by Origin, ``ask`` and any other app by the ``ask`` or ``shop`` secret."""
    headers = {"Origin": base} if app == "demo" else {"Authorization": f"Bearer {ASK_SECRET if app == 'ask' else SHOP_SECRET}"}
    r = await http.post(f"{base}/api/apps/{app}/conversations", headers=headers)
    assert r.status == 201, await r.text()
    return (await r.json())["url"]


async def info(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    r = await http.get(url)
    assert r.status == 200, await r.text()
    return await r.json()


async def joined(http: aiohttp.ClientSession, base: str, app: str = "demo", url: str | None = None,
                 last_seq: int | None = 0) -> tuple[Recorder, dict[str, Any], str]:
    url = url or await create(http, base, app)
    data = await info(http, url)
    rec = await Recorder(data["relay_url"], data["relay_path"]).connect()
    ack = await rec.join(data["token"], last_seq)
    assert ack["ok"], ack
    await rec.wait("state")
    return rec, data, url


FUNC = {"name": "get_selection", "description": "Returns the selected text.",
        "parameters": {"type": "object", "properties": {}}, "kind": "function", "sensitive": False, "source": "client"}


async def declare(rec: Recorder, entries: dict[str, dict[str, Any]], key: str = "decl") -> None:
    """Put catalogue entries (functions, tools, actions; ``name`` filled in) into the state, as a page does."""
    patch = [{"op": "add", "path": f"/autopilot/functions/{n}", "value": {"name": n, "sensitive": False, "source": "client", **d}}
             for n, d in entries.items()]
    ack = await rec.call("state_patch", {"patch": patch, "idempotency_key": key})
    assert ack == {"ok": True}, ack


async def register(rec: Recorder, *names: str, key: str = "reg") -> None:
    patch = [{"op": "add", "path": f"/autopilot/functions/{n}", "value": {**FUNC, "name": n}} for n in names]
    ack = await rec.call("state_patch", {"patch": patch, "idempotency_key": key})
    assert ack == {"ok": True}, ack

"""Helpers for the relay tests: an in-loop relay on a free loopback port and a recording Socket.IO client."""

from __future__ import annotations

import asyncio
import atexit
import glob
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import socketio
from scripted_model import ScriptedModel as ScriptedModel  # the relay tests import it from here too
from support import stop_process

from widget.relay import AppConfig, ModelConfig, RelayConfig, start_relay
from widget.relay.models.base import ModelAdapter

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


def relay_config(tmp: Path, store: str = "sqlite", **overrides: Any) -> RelayConfig:
    """The test relay's config; ``store="postgres"``: on the session's PostgreSQL, in a database of its
    own bound to ``tmp``."""
    cfg = RelayConfig(
        database_url=database_for(tmp) if store == "postgres" else None,
        port=0,
        db_path=str(tmp / "relay.sqlite3"),
        secret=SECRET,
        dist_dir=make_dist(tmp) if not (tmp / "_dist").exists() else tmp / "_dist",
        function_call_timeout_s=2.0,  # answered calls must not time out on a loaded machine
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


async def launch(tmp: Path, adapters: dict[str, ModelAdapter] | None = None, store: str = "sqlite",
                 **overrides: Any) -> Any:
    """A relay in this loop; ``adapters`` replace model adapters by name (e.g. a ScriptedModel);
    ``store``: ``sqlite`` or ``postgres`` (STORE_KINDS)."""
    return await start_relay(relay_config(tmp, store, **overrides), models=adapters)


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
                "idempotency_key": "fr-" + data["id"], "duration_ms": 1.25, "total_ms": 1.5,
            })

    async def connect(self) -> Recorder:
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

    async def wait(self, event: str, pred: Callable[[Any], bool] | None = None, timeout: float = 30.0,
                   start: int = 0) -> Any:
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
            except TimeoutError:
                pass


async def create(http: aiohttp.ClientSession, base: str, app: str = "demo") -> str:
    """Create a conversation: the ``demo`` app by Origin, ``ask`` and any other app by the ``ask`` or ``shop``
    secret."""
    secret = ASK_SECRET if app == "ask" else SHOP_SECRET
    headers = {"Origin": base} if app == "demo" else {"Authorization": f"Bearer {secret}"}
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


async def turn_log_line(caplog: Any, conversation_id: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """The relay's structured log line (``widget.relay.turns``) of the conversation's last turn. It is written when
    the turn's task ends, after its last event and the packing of its stored chunks: a test that saw the last event
    waits for it."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "widget.relay.turns"]
        mine = [x for x in lines if x.get("conversation") == conversation_id]
        if mine or asyncio.get_running_loop().time() > deadline:
            assert mine, f"no turn log line for {conversation_id}"
            return mine[-1]
        await asyncio.sleep(0.05)


async def declare(rec: Recorder, entries: dict[str, dict[str, Any]], key: str = "decl") -> None:
    """Put catalogue entries (functions, tools, actions; ``name`` filled in) into the state, as a page does."""
    patch = [{"op": "add", "path": f"/autopilot/functions/{n}",
              "value": {"name": n, "sensitive": False, "source": "client", **d}}
             for n, d in entries.items()]
    ack = await rec.call("state_patch", {"patch": patch, "idempotency_key": key})
    assert ack == {"ok": True}, ack


async def register(rec: Recorder, *names: str, key: str = "reg") -> None:
    patch = [{"op": "add", "path": f"/autopilot/functions/{n}", "value": {**FUNC, "name": n}} for n in names]
    ack = await rec.call("state_patch", {"patch": patch, "idempotency_key": key})
    assert ack == {"ok": True}, ack


# ---------------------------------------------------------------------------------------------- real servers
# A real Debian PostgreSQL and redis-server on loopback, started once per test session (the first test
# that needs one starts it; atexit stops it). `bash dev test` installs both; a missing binary skips a
# developer's run but fails CI (CI=true), loudly.



def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _missing(what: str) -> None:
    msg = f"{what} is not installed (bash dev test installs it: apt-get install postgresql redis-server)"
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)


def pg_bindir() -> str | None:
    def version(path: str) -> int:
        part = path.split("/")[-2]
        return int(part) if part.isdigit() else 0

    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True):
        if os.path.exists(os.path.join(d, "postgres")):
            return d
    found = shutil.which("postgres") or shutil.which("pg_ctl")
    return os.path.dirname(os.path.realpath(found)) if found else None


class PgServer:
    """PostgreSQL in a temporary data directory on a loopback port, run as the ``postgres`` user when
    we are root (PostgreSQL refuses to run as root). ``dsn(db)``; ``database(name)`` creates one."""

    def __init__(self) -> None:
        bindir = pg_bindir()
        if bindir is None:
            _missing("PostgreSQL")
        self.bindir = bindir
        self.port = _free_port()
        self.data = tempfile.mkdtemp(prefix="autopilot-pg-")
        self.user: str | None = None
        if os.geteuid() == 0:
            import pwd

            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                _missing("the postgres user")
            self.user = "postgres"
            os.chown(self.data, pw.pw_uid, pw.pw_gid)
        self._created: set[str] = set()
        self.proc: subprocess.Popen[bytes] | None = None
        t0 = time.monotonic()
        self._run("initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync",
                  "--no-instructions")
        self.start()
        self.startup_s = time.monotonic() - t0

    def _run(self, tool: str, *args: str) -> str:
        out = subprocess.run([os.path.join(self.bindir, tool), *args], user=self.user, capture_output=True, text=True,
                             timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"{tool} failed: {out.stderr or out.stdout}")
        return out.stdout

    def start(self) -> None:
        log = open(os.path.join(self.data, "server.log"), "ab")
        self.proc = subprocess.Popen(
            [os.path.join(self.bindir, "postgres"), "-D", self.data, "-p", str(self.port), "-k", self.data,
             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
             "-c", "full_page_writes=off", "-c", "max_connections=200"],
            user=self.user, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            ready = [os.path.join(self.bindir, "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"]
            if subprocess.run(ready).returncode == 0:
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                text = Path(self.data, "server.log").read_text()
                raise RuntimeError("postgres did not start: " + text[-2000:])
            time.sleep(0.05)

    def dsn(self, db: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{db}"

    def database(self, name: str) -> str:
        """A database of that name (created once, empty at first); its DSN."""
        if name not in self._created:
            self._run("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-q",
                      "-c", f'CREATE DATABASE "{name}"')
            self._created.add(name)
        return self.dsn(name)

    def fresh_database(self, hint: str = "t") -> str:
        return self.database(f"{hint}_{len(self._created)}_{os.getpid()}")

    def stop(self) -> None:
        stop_process(self.proc, interrupt=True, timeout=15)
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.data, ignore_errors=True)


class RedisServer:
    """redis-server on a loopback port, no persistence; ``restart()`` keeps the port."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None and os.path.exists("/usr/bin/redis-server"):
            binary = "/usr/bin/redis-server"
        if binary is None:
            _missing("redis-server")
        self.binary = binary
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self, down_s: float = 0.0) -> None:
        self.stop()
        if down_s:
            time.sleep(down_s)
        self.start()

    def close(self) -> None:
        self.stop()


_servers: dict[str, Any] = {}


def _stop_servers() -> None:
    for s in _servers.values():
        try:
            s.close()
        except Exception:  # noqa: BLE001
            pass
    _servers.clear()


atexit.register(_stop_servers)


def pg_server() -> PgServer:
    """The session's PostgreSQL (started on first use)."""
    if "pg" not in _servers:
        _servers["pg"] = PgServer()
    return _servers["pg"]


def redis_server() -> RedisServer:
    """The session's redis-server (started on first use)."""
    if "redis" not in _servers:
        _servers["redis"] = RedisServer()
    return _servers["redis"]


#: The stores every store-sensitive relay test runs against (tests/test_relay_store.py and friends).
STORE_KINDS = ["sqlite", "postgres"]


def database_for(tmp: Path) -> str:
    """A PostgreSQL database bound to a test's temporary folder (a relay restarted on the same folder
    finds its data again, like the SQLite file there)."""
    return pg_server().database("t_" + hashlib.sha1(str(tmp).encode()).hexdigest()[:16])


@pytest.fixture(params=STORE_KINDS, name="store_kind")
def fixture_store_kind(request: Any) -> str:
    """Each store kind in turn; a test file imports ``fixture_store_kind`` and takes ``store_kind``."""
    return request.param


class RelayProcess:
    """``python -m widget.relay`` as its own process on a loopback port (several share a PostgreSQL
    database and a Redis: the scale-out deployment). Ready once ``/readyz`` answers 200."""

    def __init__(self, workdir: Path, *, database_url: str | None = None, redis_url: str | None = None,
                 extra: list[str] | None = None, env: dict[str, str] | None = None, port: int | None = None) -> None:
        import sys

        self.port = port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workdir = workdir
        self.log = workdir / f"relay-{self.port}.log"
        cmd = [sys.executable, "-m", "widget.relay", "--host", "127.0.0.1", "--port", str(self.port),
               "--db", str(workdir / f"relay-{self.port}.sqlite3"), "--dist", str(workdir / "nodist"),
               "--log-level", "warning"]
        if database_url:
            cmd += ["--database-url", database_url]
        if redis_url:
            cmd += ["--redis-url", redis_url]
        cmd += extra or []
        self.cmd = cmd
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", "AUTOPILOT_SECRET": SECRET, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.instance = ""
        self.start()

    def start(self, timeout: float = 30.0) -> None:
        import json as _json
        import urllib.request

        root = Path(__file__).resolve().parent.parent
        self.proc = subprocess.Popen(self.cmd, cwd=root, stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
                                     env=self.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"relay exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as r:
                    if r.status == 200:
                        self.instance = _json.loads(r.read())["instance"]
                        return
            except OSError:
                time.sleep(0.05)
        self.proc.kill()
        raise RuntimeError(f"relay did not become ready within {timeout} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        stop_process(self.proc, interrupt=True, timeout=15)
        self.proc = None

"""Relay benchmark (not a test): N concurrent simulated clients against a relay in another process.

The relay runs as ``python -m widget.relay`` (demo model, chunk delay 0, a temporary SQLite file, rate limits
off) on a free loopback port. This process is the load generator: N python-socketio ``AsyncClient``s (WebSocket
transport only, one asyncio loop), each doing what a page does — create a conversation (POST), GET it for a
join token, connect, join, then state patches and user messages that make the demo model call a registered page
function, answered at once.

Phases, printed in order:
  1. HTTP setup: N × (POST create + GET) — rate.
  2. Socket setup: N × (connect + join, waiting for the ``state`` snapshot) — rate, and relay memory per
     connection: (relay VmRSS after − before) / N, from /proc/<pid>/status, after the relay settled.
  3. One active client, N − 1 idle and connected: --solo-calls sequential function calls.
  4. All N clients active at once: each does --calls × (state patch → user message → function call → end of
     turn).

Relay overhead per function call (client-observed): for each call, t0 = the client receives
``function_call.begin`` (run: true); it answers immediately (handler time h = t_emit − t0, the time our code
takes to build and hand the response to the socket); t1 = it receives that call's ``function_call.end``.
overhead = (t1 − t0) − h: the response's trip to the relay, the relay acking and storing it, waking the turn,
storing and emitting ``function_call.end``, and its trip back — plus any scheduling delay in this load
generator's own event loop, so under load it is an upper bound for the relay's share.

    python bench/relay.py [--clients 1000] [--calls 3] [--solo-calls 200] [--timeout 600]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import socketio  # noqa: E402

from widget import protocol as P  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from results import save, stats  # noqa: E402

FUNCTION = {
    "name": "bench_fn",
    "description": "Returns its argument.",
    "parameters": {"type": "object", "properties": {"i": {"type": "integer"}}},
    "kind": "function",
    "sensitive": False,
    "source": "client",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s) + 0.5)) - 1))]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


class Client:
    """One simulated page."""

    def __init__(self, bench: Bench, index: int) -> None:
        self.bench = bench
        self.index = index
        self.sio = socketio.AsyncClient(reconnection=False, request_timeout=60)
        self.url = ""
        self.token = ""
        self.turn_done: asyncio.Event = asyncio.Event()
        self.begins: dict[str, tuple[float, float]] = {}  # call id -> (t0, handler)
        self.keys = 0
        self.sio.on("function_call.begin", self.on_begin)
        self.sio.on("function_call.end", self.on_end)
        self.sio.on("completion.finished", self.on_finished)
        self.state_seen = asyncio.Event()
        self.sio.on("state", self.on_state)

    def key(self) -> str:
        self.keys += 1
        return f"k{self.index}-{self.keys}"

    async def on_state(self, data: Any) -> None:
        self.state_seen.set()

    async def on_begin(self, data: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        if not data.get("run"):
            return
        payload = {"id": data["id"], "status": "success", "result": {"echo": data["arguments"]},
                   "idempotency_key": "fr-" + data["id"], "duration_ms": 0.0, "total_ms": 0.0}
        handler = time.perf_counter() - t0
        self.begins[data["id"]] = (t0, handler)
        await self.sio.emit(P.Event.FUNCTION_RESPONSE, payload)  # the ack is not awaited: the end event is what counts

    async def on_end(self, data: dict[str, Any]) -> None:
        t1 = time.perf_counter()
        got = self.begins.pop(data.get("id"), None)
        if got is None:
            return
        t0, handler = got
        self.bench.overhead_ms.append(((t1 - t0) - handler) * 1000)
        self.bench.duration_ms.append(handler * 1000)
        if data.get("status") != "success":
            self.bench.errors.append(f"call {data.get('id')} ended {data.get('status')}: {data.get('error')}")

    async def on_finished(self, data: dict[str, Any]) -> None:
        if data.get("status") != "done":
            self.bench.errors.append(f"turn ended {data.get('status')}")
        self.turn_done.set()

    async def http_setup(self, http: aiohttp.ClientSession) -> None:
        base = self.bench.base
        async with http.post(f"{base}/api/apps/demo/conversations", headers={"Origin": base}) as r:
            if r.status != 201:
                raise RuntimeError(f"create: {r.status} {await r.text()}")
            self.url = (await r.json())["url"]
        async with http.get(self.url) as r:
            body = await r.json()
            self.token = body["token"]

    async def connect(self) -> None:
        await self.sio.connect(self.bench.base, socketio_path="socket.io", transports=["websocket"], wait_timeout=60)
        ack = await self.sio.call(P.Event.JOIN, {"token": self.token, "version": P.PROTOCOL_VERSION, "last_seq": 0},
                                  timeout=60)
        if not ack.get("ok"):
            raise RuntimeError(f"join refused: {ack}")
        await asyncio.wait_for(self.state_seen.wait(), 60)

    async def register(self) -> None:
        patch = [{"op": "add", "path": "/autopilot/functions/bench_fn", "value": FUNCTION},
                 {"op": "add", "path": "/autopilot/context/page", "value": "/start"}]
        await self.patch(patch)

    async def patch(self, patch: list[dict[str, Any]]) -> None:
        t0 = time.perf_counter()
        ack = await self.sio.call(P.Event.STATE_PATCH, {"patch": patch, "idempotency_key": self.key()}, timeout=60)
        self.bench.patch_ms.append((time.perf_counter() - t0) * 1000)
        if ack != {"ok": True}:
            self.bench.errors.append(f"patch refused: {ack}")

    async def round(self, i: int) -> None:
        await self.patch([{"op": "replace", "path": "/autopilot/context/page", "value": f"/page/{i}"}])
        self.turn_done.clear()
        ack = await self.sio.call(P.Event.USER_MESSAGE,
                                  {"text": f'call bench_fn {{"i": {i}}}', "idempotency_key": self.key()}, timeout=60)
        if not ack.get("ok"):
            self.bench.errors.append(f"user_message refused: {ack}")
            return
        await asyncio.wait_for(self.turn_done.wait(), 120)


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.base = ""
        self.overhead_ms: list[float] = []
        self.duration_ms: list[float] = []
        self.patch_ms: list[float] = []
        self.errors: list[str] = []
        self.relay: subprocess.Popen[bytes] | None = None
        self.tmp = Path(tempfile.mkdtemp(prefix="relay-bench-"))
        self.out: list[str] = []
        self.figures: dict[str, Any] = {}  # what bench/results.py keeps of the run

    def say(self, line: str = "") -> None:
        print(line, flush=True)
        self.out.append(line)

    def start_relay(self) -> None:
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        cfg = self.tmp / "bench.toml"
        cfg.write_text("create_rate_per_minute = 0\nmessage_rate_per_minute = 0\njoin_rate_per_minute = 0\n"
                       "get_rate_per_minute = 0\nask_user_rate_per_minute = 0\nmax_connections_per_address = 0\n"
                       "max_sockets_per_address = 0\nretention_days = 0\n")
        cmd = [sys.executable, "-m", "widget.relay", "--port", str(port), "--db", str(self.tmp / "relay.sqlite3"),
               "--config", str(cfg), "--demo-chunk-delay-ms", "0", "--log-level", "warning"]
        self.relay = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                                      stderr=open(self.tmp / "relay.log", "wb"))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.relay.poll() is not None:
                raise RuntimeError(f"the relay exited: {(self.tmp / 'relay.log').read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the relay did not start within 30 s")

    def stop_relay(self) -> None:
        if self.relay is not None and self.relay.poll() is None:
            self.relay.send_signal(signal.SIGINT)
            try:
                self.relay.wait(15)
            except subprocess.TimeoutExpired:
                self.relay.kill()
                self.relay.wait(5)
        shutil.rmtree(self.tmp, ignore_errors=True)

    async def gather_limited(self, coros: list[Any], limit: int) -> list[Any]:
        sem = asyncio.Semaphore(limit)

        async def one(c: Any) -> Any:
            async with sem:
                return await c

        return await asyncio.gather(*(one(c) for c in coros), return_exceptions=True)

    def failures(self, results: list[Any], what: str) -> int:
        bad = [r for r in results if isinstance(r, BaseException)]
        for r in bad[:3]:
            self.errors.append(f"{what}: {type(r).__name__}: {r}")
        return len(bad)

    def stats(self, values: list[float]) -> str:
        if not values:
            return "no samples"
        return f"p50 {pct(values, 50):.2f} ms, p99 {pct(values, 99):.2f} ms, max {max(values):.2f} ms (n={len(values)})"

    async def run(self) -> None:
        a = self.args
        n = a.clients
        pid = self.relay.pid  # type: ignore[union-attr]
        self.say(f"# Relay benchmark — {datetime.date.today().isoformat()}")
        self.say(f"machine: {os.cpu_count()} cores ({cpu_model()}), Python {platform.python_version()}, "
                 f"python-socketio {getattr(socketio, '__version__', '5.x')} clients over WebSocket, relay on uvicorn "
                 "+ wsproto + SQLite")
        self.say(f"clients: {n} python-socketio AsyncClients in ONE load-generator process; the relay is another "
                 f"process; clients and relay share this machine's {os.cpu_count()} cores (loopback only)")
        self.say("load average before: " + " ".join(f"{x:.2f}" for x in os.getloadavg())
                 + " (other work on the machine skews every number)")
        connector = aiohttp.TCPConnector(limit=a.concurrency)
        async with aiohttp.ClientSession(connector=connector) as http:
            # warm-up: one complete client cycle, so lazy imports and caches are in place before measuring
            warm = Client(self, -1)
            await warm.http_setup(http)
            await warm.connect()
            await warm.register()
            await warm.round(0)
            await warm.sio.disconnect()
            self.overhead_ms.clear(), self.duration_ms.clear(), self.patch_ms.clear()

            clients = [Client(self, i) for i in range(n)]
            t = time.perf_counter()
            bad = self.failures(await self.gather_limited([c.http_setup(http) for c in clients], a.concurrency),
                                "http setup")
            dt = time.perf_counter() - t
            self.say(f"1. HTTP setup (POST create + GET token), {a.concurrency} in flight: {n} in {dt:.2f} s = "
                     f"{n / dt:.0f} conversations/s"
                     + (f" ({bad} failed)" if bad else ""))
        self.figures["http_setup"] = {"conversations_per_s": n / dt, "failed": bad}

        await asyncio.sleep(1.0)
        rss0 = rss_kib(pid)
        t = time.perf_counter()
        bad = self.failures(await self.gather_limited([c.connect() for c in clients], a.concurrency), "connect")
        dt = time.perf_counter() - t
        await asyncio.sleep(2.0)
        rss1 = rss_kib(pid)
        connected = [c for c in clients if c.sio.connected and c.state_seen.is_set()]
        self.say(f"2. Socket setup (connect + join + state snapshot), {a.concurrency} in flight: {len(connected)} in "
                 f"{dt:.2f} s = {len(connected) / dt:.0f} connections/s" + (f" ({bad} failed)" if bad else ""))
        self.say(f"   relay RSS {rss0 / 1024:.1f} MiB before, {rss1 / 1024:.1f} MiB with {len(connected)} idle joined "
                 f"clients: {(rss1 - rss0) / max(1, len(connected)):.1f} KiB per connection")
        self.figures["socket_setup"] = {"connections_per_s": len(connected) / dt, "failed": bad,
                                        "rss_idle_mib": rss0 / 1024, "rss_joined_mib": rss1 / 1024,
                                        "kib_per_connection": (rss1 - rss0) / max(1, len(connected))}

        self.failures(await self.gather_limited([c.register() for c in connected], a.concurrency), "register")
        self.patch_ms.clear()

        # 3. one active client, the others idle
        solo = connected[0]
        for i in range(a.solo_calls):
            await solo.round(i)
        self.say(f"3. One active client ({len(connected) - 1} idle), {a.solo_calls} sequential calls:")
        self.say(f"   relay overhead per function call: {self.stats(self.overhead_ms)}")
        self.say(f"   state patch ack round trip:       {self.stats(self.patch_ms)}")
        self.figures["one_active"] = {"idle_clients": len(connected) - 1, "overhead_ms": stats(self.overhead_ms),
                                      "patch_ack_ms": stats(self.patch_ms)}
        self.overhead_ms.clear(), self.duration_ms.clear(), self.patch_ms.clear()

        # 4. everyone at once
        cpu0, t = cpu_s(pid), time.perf_counter()

        async def work(c: Client) -> None:
            for i in range(a.calls):
                await c.round(i)

        bad = self.failures(await asyncio.gather(*(work(c) for c in connected), return_exceptions=True), "workload")
        dt = time.perf_counter() - t
        cpu = cpu_s(pid) - cpu0
        calls = len(self.overhead_ms)
        self.say(f"4. All {len(connected)} clients active at once, {a.calls} × (patch + message + function call) each: "
                 f"{calls} calls in {dt:.1f} s = {calls / dt:.0f} calls/s"
                 + (f" ({bad} clients failed)" if bad else ""))
        self.say(f"   relay overhead per function call: {self.stats(self.overhead_ms)}")
        self.say(f"   state patch ack round trip:       {self.stats(self.patch_ms)}")
        self.say(f"   client handler time (excluded):   p50 {pct(self.duration_ms, 50) * 1000:.1f} µs")
        self.say(f"   relay CPU {cpu:.1f} s over {dt:.1f} s wall ({cpu / dt * 100:.0f} % of one core): "
                 f"{cpu / max(1, calls) * 1000:.1f} ms of relay CPU per turn (patch + message + call + answer, ~20 "
                 "sequenced events) — the load-independent number; "
                 f"load generator CPU {time.process_time():.1f} s in all")
        self.say(f"   peak relay RSS {rss_kib(pid) / 1024:.1f} MiB")
        self.figures["all_active"] = {"clients": len(connected), "calls": calls, "seconds": dt,
                                      "calls_per_s": calls / dt,
                                      "failed_clients": bad, "overhead_ms": stats(self.overhead_ms),
                                      "patch_ack_ms": stats(self.patch_ms), "relay_cpu_s": cpu,
                                      "relay_cpu_ms_per_turn": cpu / max(1, calls) * 1000,
                                      "peak_relay_rss_mib": rss_kib(pid) / 1024}
        await self.gather_limited([c.sio.disconnect() for c in clients if c.sio.connected], a.concurrency)
        self.say("load average after: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
        if self.errors:
            self.say(f"errors ({len(self.errors)}): " + "; ".join(self.errors[:5]))
        self.say("method: overhead = (client receives function_call.end − client receives function_call.begin) − "
                 "client handler time; it includes loopback transport both ways and this load generator's own "
                 "scheduling delay (an upper bound for the relay's share).")


async def main_async(args: argparse.Namespace) -> int:
    bench = Bench(args)
    bench.start_relay()
    try:
        await asyncio.wait_for(bench.run(), args.timeout)
    except TimeoutError:
        print(f"benchmark stopped after --timeout {args.timeout:g} s", file=sys.stderr)
        return 1
    finally:
        bench.stop_relay()
    save("relay", {"clients": args.clients, "calls": args.calls, "solo_calls": args.solo_calls,
                   "concurrency": args.concurrency, **bench.figures, "errors": bench.errors})
    return 0 if not bench.errors else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=1000, help="concurrent simulated clients (default 1000)")
    p.add_argument("--calls", type=int, default=3,
                   help="function-call rounds per client in the concurrent phase (default 3)")
    p.add_argument("--solo-calls", type=int, default=200,
                   help="sequential calls of one client while the others idle (default 200)")
    p.add_argument("--concurrency", type=int, default=100, help="setup requests in flight (default 100)")
    p.add_argument("--timeout", type=float, default=600, help="stop after this many seconds (default 600)")
    args = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 4 * args.clients + 256))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # inherited by the relay subprocess
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())

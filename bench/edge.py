"""The relay's HTTP edge under abuse (not a test): bounded loops on loopback against a relay subprocess.

Scenarios (each prints one JSON line of numbers; all by default):
  body       an 800 MB create (Content-Length, then the bytes), the same chunked (no length), four concurrent
             500 MB ask-user posts, after a 2 MB warm-up of each kind: the relay's peak RSS growth (VmHWM, reset
             before each case, − VmRSS before), status, seconds
  slowloris  300 connections trickling one header line a second for --slow-s seconds, from 3 addresses
             (100 each), then 300 from one address: how many the relay closed, when, how many it refused
  sessions   8,000 Engine.IO long-polling sessions opened from one address: accepted, refused, RSS growth
  unjoined   8,000 Socket.IO sockets (WebSocket) from 32 addresses (250 each, under the per-address cap) that
             connect the namespace and never join: how many were accepted, how many the relay closed within its
             unjoined_socket_timeout_s (set to --unjoined-s) plus 10 s, RSS growth while they were open
  fdlimit    the relay under a 1,024-descriptor limit and 1,100 idle connections from 11 addresses, with its
             total cap off (max_connections huge: accept() fails) and on (automatic): /healthz answer time,
             log bytes and lines written in the next --fd-s seconds

    python bench/edge.py [--root DIR] [--only body,slowloris,sessions,unjoined,fdlimit] [--slow-s 20] [--fd-s 10]

``--root`` runs the relay from another checkout (e.g. an older commit, for the numbers before a change).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from results import save

ROOT = Path(__file__).resolve().parent.parent
MB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Relay:
    """``python -m widget.relay`` from ``root`` on a free port, with an optional TOML and descriptor limit."""

    def __init__(self, root: Path, tmp: Path, toml: str = "", nofile: int | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = tmp / f"relay-{self.port}.toml"
        cfg.write_text(toml)
        self.log = tmp / f"relay-{self.port}.log"
        env = {**os.environ, "PYTHONPATH": str(root), "PYTHONUNBUFFERED": "1"}

        def limit() -> None:
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "widget.relay", "--port", str(self.port), "--db", str(tmp / f"r{self.port}.sqlite3"),
             "--config", str(cfg)], cwd=root, env=env, stdout=self.log.open("wb"), stderr=subprocess.STDOUT,
            preexec_fn=limit)
        for _ in range(400):
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(self.log.read_text())

    def mem(self) -> dict[str, int]:
        """VmRSS and VmHWM (peak), KB."""
        out = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1])
        return out

    def reset_peak(self) -> None:
        """Start VmHWM again from the current RSS (Linux: ``clear_refs`` 5)."""
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def request(url: str, method: str = "GET", body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.read()


async def send_body(port: int, head: str, total: int, chunked: bool, limit_s: float = 120.0) -> dict[str, Any]:
    """Send a request head then ``total`` bytes (1 MB writes; chunked framing if asked), whatever the relay
    answers meanwhile (as a hostile client would); the status it answered and how much was sent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head.encode())
    status: list[int] = []

    async def read() -> None:
        line = await reader.readline()
        if line:
            status.append(int(line.split()[1]))

    reading = asyncio.ensure_future(read())
    chunk = b"x" * MB
    sent = 0
    t0 = time.monotonic()
    try:
        while sent < total and time.monotonic() - t0 < limit_s:
            writer.write((b"%x\r\n" % len(chunk) + chunk + b"\r\n") if chunked else chunk)
            await writer.drain()
            sent += len(chunk)
        if chunked:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        await asyncio.wait_for(reading, 30)
    except (TimeoutError, ConnectionError):
        pass
    writer.close()
    return {"status": status[0] if status else None, "sent_mb": sent // MB, "s": round(time.monotonic() - t0, 2)}


async def bench_body(root: Path, tmp: Path) -> dict[str, Any]:
    relay = Relay(root, tmp)
    out: dict[str, Any] = {}
    try:
        origin = relay.url
        _, created = request(f"{relay.url}/api/apps/demo/conversations", "POST", b"{}",
                             {"Origin": origin, "Content-Type": "application/json"})
        path = created["url"].split(str(relay.port), 1)[1]
        # Warm up (lazy imports, first-request allocations) with one small refused body of each kind.
        await send_body(relay.port, f"POST {path}/ask_user HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                    f"Content-Length: {2 * MB}\r\n\r\n", 2 * MB, False)
        await send_body(relay.port, f"POST /api/apps/demo/conversations HTTP/1.1\r\nHost: x\r\nOrigin: {origin}\r\n"
                                    "Transfer-Encoding: chunked\r\n\r\n", 2 * MB, True)
        cases = [
            ("create_800MB_length", [f"POST /api/apps/demo/conversations HTTP/1.1\r\nHost: x\r\nOrigin: {origin}\r\n"
                                     f"Content-Type: application/json\r\nContent-Length: {800 * MB}\r\n\r\n"],
             800, False),
            ("create_800MB_chunked", [f"POST /api/apps/demo/conversations HTTP/1.1\r\nHost: x\r\nOrigin: {origin}\r\n"
                                      f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"],
             800, True),
            ("ask_user_4x500MB", [f"POST {path}/ask_user HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                  f"Content-Length: {500 * MB}\r\n\r\n"] * 4, 500, False),
        ]
        for name, heads, mb, chunked in cases:
            await asyncio.sleep(1)
            relay.reset_peak()
            before = relay.mem()
            t0 = time.monotonic()
            results = await asyncio.gather(*(send_body(relay.port, h, mb * MB, chunked) for h in heads))
            await asyncio.sleep(2)
            after = relay.mem()
            alive = request(f"{relay.url}/healthz")[0]
            out[name] = {"statuses": [r["status"] for r in results], "sent_mb": sum(r["sent_mb"] for r in results),
                         "s": round(time.monotonic() - t0, 1),
                         "peak_growth_mb": round((after["VmHWM"] - before["VmRSS"]) / 1024, 1),
                         "rss_after_mb": round(after["VmRSS"] / 1024, 1), "healthz": alive}
    finally:
        relay.stop()
    return out


async def slow_clients(port: int, sources: list[str], seconds: float) -> dict[str, Any]:
    """Each source opens its connections and trickles a header line a second; when did the relay close them."""
    conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    refused = 0
    for src in sources:
        try:
            conns.append(await asyncio.open_connection("127.0.0.1", port, local_addr=(src, 0)))
        except OSError:
            refused += 1
    t0 = time.monotonic()
    closed_at: dict[int, float] = {}
    answered_503 = 0
    for _, w in conns:
        w.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")

    async def watch(i: int, r: asyncio.StreamReader) -> None:
        nonlocal answered_503
        try:
            data = await r.read()
            while data:
                if data.startswith(b"HTTP/1.1 503"):
                    answered_503 += 1
                data = await r.read()
        except ConnectionError:
            pass
        closed_at[i] = time.monotonic() - t0

    watchers = [asyncio.ensure_future(watch(i, r)) for i, (r, _) in enumerate(conns)]
    while time.monotonic() - t0 < seconds and len(closed_at) < len(conns):
        await asyncio.sleep(1)
        for i, (_, w) in enumerate(conns):
            if i not in closed_at and not w.is_closing():
                try:
                    w.write(b"X-Slow: 1\r\n")
                except ConnectionError:
                    pass
    for w in (w for _, w in conns):
        w.close()
    for t in watchers:
        t.cancel()
    times = sorted(v for k, v in closed_at.items())
    deadline_closed = [t for t in times if t > 1]
    return {"opened": len(conns), "connect_refused": refused, "answered_503": answered_503,
            "closed_by_relay": len(closed_at), "still_open_after_s": len(conns) - len(closed_at),
            "closed_at_s_min_max": [round(deadline_closed[0], 1),
                                    round(deadline_closed[-1], 1)] if deadline_closed else None}


async def bench_slowloris(root: Path, tmp: Path, seconds: float) -> dict[str, Any]:
    relay = Relay(root, tmp)
    try:
        spread = await slow_clients(relay.port, [f"127.0.0.{2 + i // 100}" for i in range(300)], seconds)
        one = await slow_clients(relay.port, ["127.0.0.9"] * 300, seconds)
        return {"300_from_3_addresses": spread, "300_from_one_address": one}
    finally:
        relay.stop()


async def bench_sessions(root: Path, tmp: Path, count: int = 8000) -> dict[str, Any]:
    relay = Relay(root, tmp)
    try:
        before = relay.mem()
        statuses: dict[int, int] = {}
        import aiohttp

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=20)) as http:
            async def one() -> None:
                async with http.get(f"{relay.url}/socket.io/?EIO=4&transport=polling",
                                    headers={"Origin": relay.url}) as r:
                    statuses[r.status] = statuses.get(r.status, 0) + 1
                    await r.read()

            for i in range(0, count, 200):
                await asyncio.gather(*(one() for _ in range(min(200, count - i))))
        after = relay.mem()
        return {"opened": count, "statuses": statuses,
                "rss_growth_mb": round((after["VmRSS"] - before["VmRSS"]) / 1024, 1)}
    finally:
        relay.stop()


async def bench_unjoined(root: Path, tmp: Path, timeout_s: float, count: int = 8000,
                         sources: int = 32) -> dict[str, Any]:
    import aiohttp

    relay = Relay(root, tmp, toml=f"unjoined_socket_timeout_s = {timeout_s}\n")
    sessions: list[aiohttp.ClientSession] = []
    closed_at: list[float] = []
    refused = 0
    try:
        before = relay.mem()
        sockets = []
        for k in range(sources):
            connector = aiohttp.TCPConnector(limit=0, local_addr=(f"127.0.2.{1 + k}", 0))
            sessions.append(aiohttp.ClientSession(connector=connector))
        t0 = time.monotonic()

        async def one(http: aiohttp.ClientSession) -> None:
            nonlocal refused
            try:
                ws = await http.ws_connect(f"ws://127.0.0.1:{relay.port}/socket.io/?EIO=4&transport=websocket")
                opened = await ws.receive(timeout=30)
                if not str(opened.data).startswith("0"):
                    refused += 1
                    return
                await ws.send_str("40")  # connect the default namespace, then never join
                sockets.append(ws)
            except (TimeoutError, aiohttp.ClientError):
                refused += 1

        per = count // sources
        for k in range(sources):
            await asyncio.gather(*(one(sessions[k]) for _ in range(per)))
        opened_s = time.monotonic() - t0
        during = relay.mem()

        async def watch(ws: aiohttp.ClientWebSocketResponse) -> None:
            while True:
                msg = await ws.receive()
                if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING,
                                aiohttp.WSMsgType.ERROR):
                    break
                if msg.type == aiohttp.WSMsgType.TEXT and msg.data == "2":
                    await ws.send_str("3")  # answer Engine.IO pings: only the relay's own timeout may close it
                elif msg.type == aiohttp.WSMsgType.TEXT and msg.data.startswith("41"):
                    break  # the namespace disconnect
            closed_at.append(time.monotonic() - t0)

        try:
            await asyncio.wait_for(asyncio.gather(*(watch(ws) for ws in sockets)), timeout_s + opened_s + 10)
        except TimeoutError:
            pass
        return {"tried": count, "accepted": len(sockets), "refused": refused, "open_s": round(opened_s, 1),
                "closed_by_relay": len(closed_at), "last_closed_s": round(max(closed_at, default=0), 1),
                "unjoined_timeout_s": timeout_s, "rss_growth_mb": round((during["VmRSS"] - before["VmRSS"]) / 1024, 1)}
    finally:
        for http in sessions:
            await http.close()
        relay.stop()


async def bench_fdlimit(root: Path, tmp: Path, seconds: float) -> dict[str, Any]:
    out = {}
    for label, toml in (("total_cap_off", "max_connections = 1000000\n"), ("total_cap_auto", "")):
        try:
            relay = Relay(root, tmp, toml, nofile=1024)
        except RuntimeError as exc:
            if "unknown key" not in str(exc):
                raise
            if label != "total_cap_off":
                continue
            relay = Relay(root, tmp, "", nofile=1024)  # a relay without the setting has no total cap
        held = []
        try:
            for i in range(1100):
                try:
                    held.append(await asyncio.open_connection("127.0.0.1", relay.port,
                                                              local_addr=(f"127.0.1.{1 + i // 100}", 0)))
                except OSError:
                    break
            size0 = relay.log.stat().st_size
            lines0 = relay.log.read_text(errors="replace").count("\n")
            t0 = time.monotonic()
            try:
                health = await asyncio.to_thread(request, f"{relay.url}/healthz")
                health_status: Any = health[0]
            except Exception as exc:  # noqa: BLE001 - a timeout is the result
                health_status = type(exc).__name__
            health_s = round(time.monotonic() - t0, 2)
            await asyncio.sleep(max(0.0, seconds - (time.monotonic() - t0)))
            out[label] = {"connections_opened": len(held), "healthz": health_status, "healthz_s": health_s,
                          f"log_bytes_in_{seconds:g}s": relay.log.stat().st_size - size0,
                          f"log_lines_in_{seconds:g}s": relay.log.read_text(errors="replace").count("\n") - lines0}
        finally:
            for _, w in held:
                w.close()
            relay.stop()
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--only", default="body,slowloris,sessions,unjoined,fdlimit")
    ap.add_argument("--unjoined-s", type=float, default=10.0)
    ap.add_argument("--slow-s", type=float, default=20.0)
    ap.add_argument("--fd-s", type=float, default=10.0)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": os.getloadavg(),
                      "root": str(args.root)}), flush=True)
    scenarios: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name in args.only.split(","):
            if name == "body":
                result = await bench_body(args.root, tmp)
            elif name == "slowloris":
                result = await bench_slowloris(args.root, tmp, args.slow_s)
            elif name == "sessions":
                result = await bench_sessions(args.root, tmp)
            elif name == "unjoined":
                result = await bench_unjoined(args.root, tmp, args.unjoined_s)
            elif name == "fdlimit":
                result = await bench_fdlimit(args.root, tmp, args.fd_s)
            else:
                raise SystemExit(f"unknown scenario {name}")
            print(json.dumps({name: result, "load": os.getloadavg()}), flush=True)
            scenarios[name] = result
    save("edge", {"scenarios": scenarios, "unjoined_s": args.unjoined_s, "slow_s": args.slow_s, "fd_s": args.fd_s})


if __name__ == "__main__":
    asyncio.run(main())

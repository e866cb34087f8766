"""What an MCP server tool costs on the relay, and a WebMCP call in the page (not a test).

    python bench/mcp_calls.py [-n 50]

Prints one JSON line per case, milliseconds:
  start_stdio / start_http   starting a link: process start (stdio) or connection, handshake and tool list
  call_stdio / call_http     one ``add`` call through ``McpLink.call`` (median, p90 of -n calls)
  webmcp                     one agent call of the demo page's ``get_cart`` (a Python function) through
                             ``page.webmcp.call_tool`` in Chromium with ``--enable-features=WebMCP`` (median, p90)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SERVER = str(ROOT / "tests" / "mcp_test_server.py")

from results import save  # noqa: E402  (bench/, the script's folder)

#: Each case's printed line, kept for bench/results.py.
CASES: dict[str, dict[str, object]] = {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"port {port} never answered") from None
            time.sleep(0.1)


def summary(name: str, samples: list[float]) -> None:
    samples.sort()
    line = {"case": name, "n": len(samples), "median_ms": round(statistics.median(samples), 2),
            "p90_ms": round(samples[int(len(samples) * 0.9) - 1], 2), "load": round(os.getloadavg()[0], 1)}
    CASES[name] = line
    print(json.dumps(line))


async def links(n: int, url: str) -> None:
    from widget.relay.mcp.config import McpServerConfig, finalize_servers
    from widget.relay.mcp.servers import McpLink

    servers = finalize_servers("bench", {
        "stdio": McpServerConfig(command=[sys.executable, SERVER, "stdio"], tools=["add"], startup_timeout_s=60),
        "http": McpServerConfig(transport="http", url=url, tools=["add"], startup_timeout_s=60),
    }, {})
    for name, cfg in servers.items():
        link = McpLink("bench", name, cfg)
        t0 = time.perf_counter()
        await link.ensure()
        line = {"case": f"start_{name}", "ms": round((time.perf_counter() - t0) * 1000, 1),
                "load": round(os.getloadavg()[0], 1)}
        CASES[f"start_{name}"] = line
        print(json.dumps(line))
        samples = []
        for i in range(n):
            t0 = time.perf_counter()
            ok, value = await link.call("add", {"a": i, "b": 1})
            samples.append((time.perf_counter() - t0) * 1000)
            assert ok and value == i + 1, value
        summary(f"call_{name}", samples)
        await link.aclose()


async def webmcp(n: int) -> None:
    from playwright.async_api import async_playwright

    with tempfile.TemporaryDirectory() as tmp:
        dist = ROOT / "widget" / "_dist"
        port = free_port()
        cmd = [sys.executable, "-m", "widget.relay", "--port", str(port), "--db", f"{tmp}/r.sqlite3",
               "--dist", str(dist)]
        # Started off the event loop: fork and exec block it.
        relay = await asyncio.to_thread(subprocess.Popen, cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        try:
            wait_port(port, relay)
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path="/usr/bin/chromium",
                                                   args=["--headless", "--no-sandbox", "--enable-features=WebMCP"])
                page = await (await browser.new_context()).new_page()
                await page.goto(f"http://127.0.0.1:{port}/")  # the demo page: it opts in with data-webmcp
                deadline = time.monotonic() + 120
                while not await page.evaluate(
                        "async () => (await document.modelContext.getTools()).some((t) => t.name === 'get_cart')"):
                    assert time.monotonic() < deadline, "the demo page published nothing"
                    await page.wait_for_timeout(100)
                samples = []
                for _ in range(n):
                    t0 = time.perf_counter()
                    out = await page.webmcp.call_tool("get_cart", {})
                    samples.append((time.perf_counter() - t0) * 1000)
                    assert not out.get("isError") and "total_eur" in out["content"][0]["text"], out
                summary("webmcp", samples)
                await browser.close()
        finally:
            relay.terminate()
            relay.wait(10)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=50)
    args = ap.parse_args()
    port = free_port()
    http = await asyncio.to_thread(subprocess.Popen, [sys.executable, SERVER, "http", str(port)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, http)
        await links(args.n, f"http://127.0.0.1:{port}/mcp")
    finally:
        http.terminate()
        http.wait(10)
    await webmcp(args.n)
    save("mcp_calls", {"n": args.n, "cases": CASES})


if __name__ == "__main__":
    asyncio.run(main())

"""Function-call overhead benchmark (not a test).

Prints totalMs − handlerMs (the time a response is withheld: state-sync gate, conversions, emit) p50/p99 over
N calls made by the demo model through a real relay, with nothing dirty and with dirty state (the handler
calls ``update_context``), in CPython and in Chromium; and, on the same page, the Socket.IO emit+ack round trip
from Python (through the bridge) vs plain JS.

    python bench/calls.py [-n 1000] [--skip-browser]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from results import save, stats  # noqa: E402
from support import CHROMIUM, CHROMIUM_ARGS, start_relay, wait_mark  # noqa: E402


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    k = min(len(values) - 1, max(0, round(p / 100 * (len(values) - 1))))
    return values[k]


def line(label: str, values: list[float]) -> str:
    return f"{label:44} p50 {pct(values, 50):7.3f} ms   p99 {pct(values, 99):7.3f} ms   (n={len(values)})"


# The same driver runs in CPython and, as source, in the page's Pyodide.
DRIVER = r'''
import asyncio

async def run_calls(client, n, dirty):
    name = "bench_dirty" if dirty else "bench_clean"
    if not client.has_function(name):
        def handler(args, ctx, dirty=dirty):
            if dirty:
                client.update_context({"bench_counter": args.get("i", 0)})
            return {"ok": True}
        client.register_function(name, handler, description="Benchmark function.")
        await client.sync_registered_functions()
    done = asyncio.Event()
    off = client.on("completion.finished", lambda p: done.set())
    out = []
    try:
        for i in range(n):
            if i and i % 100 == 0:
                # Keep conversations at a realistic length: 100 turns each.
                await client.new_conversation()
            done.clear()
            await client.send_message(name + ' {"i": %d}' % i)
            await asyncio.wait_for(done.wait(), 30)
            rec = client.get_function_call_history()[0]
            if rec["name"] == name and rec["totalMs"] is not None:
                out.append(rec["totalMs"] - rec["handlerMs"])
    finally:
        off()
    return out
'''


async def cpython_calls(relay_url: str, n: int) -> dict[str, list[float]]:
    from widget import AutopilotClient
    from widget.transports.python_socketio import PythonSocketIOTransport

    ns: dict = {}
    exec(DRIVER, ns)  # noqa: S102 - our own driver source, the one the browser runs too
    client = AutopilotClient(PythonSocketIOTransport(), headers={"Origin": relay_url})
    # new_conversation() re-creates the client's registered functions on the relay, nothing to redo here.
    await client.connect(relay_url=relay_url, app_id="demo", function_call_history_limit=5)
    try:
        return {
            "clean": await ns["run_calls"](client, n, False),
            "dirty": await ns["run_calls"](client, n, True),
        }
    finally:
        await client.disconnect()


async def browser_calls(relay_url: str, n: int, rtt_n: int) -> dict[str, list[float]]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = await (await browser.new_context()).new_page()
        await page.goto(relay_url + "/")
        await wait_mark(page, "autopilot:joined")
        # The loop runs as an ordinary asyncio task in the page (as page code would), polled from here.
        code = DRIVER + (
            "\nimport asyncio, json\nfrom widget import get_client\n"
            "async def _bench():\n"
            "    global BENCH_RESULT\n"
            f"    _c = get_client()\n"
            f"    BENCH_RESULT = json.dumps({{'clean': await run_calls(_c, {n}, False), 'dirty': await run_calls(_c, "
            f"{n}, True)}})\n"
            "BENCH_RESULT = None\n_task = asyncio.ensure_future(_bench())\n"
        )
        await page.evaluate("code => window.Autopilot.pyodide.runPython(code)", code)
        await page.wait_for_function(
            "() => window.Autopilot.pyodide.globals.get('BENCH_RESULT') || "
            "window.Autopilot.pyodide.globals.get('_task').done()",
            timeout=0, polling=500,
        )
        text = await page.evaluate(
            "() => window.Autopilot.pyodide.runPython('_task.result() if _task.done() else None; BENCH_RESULT')"
        )
        result = json.loads(text)
        # Emit+ack round trips on the same page: `replay` past the last seq is acknowledged with no side effect.
        rtt_code = (
            "import json, time\nfrom widget import get_client\n_c = get_client()\n_t = []\n"
            f"for _ in range({rtt_n}):\n"
            "    _s = time.perf_counter()\n"
            "    await _c.transport.emit('replay', {'last_seq': 10**9})\n"
            "    _t.append((time.perf_counter() - _s) * 1000)\n"
            "json.dumps(_t)"
        )
        result["py_rtt"] = json.loads(await page.evaluate("c => window.Autopilot.pyodide.runPythonAsync(c)", rtt_code))
        result["js_rtt"] = json.loads(
            await page.evaluate(
                """async n => {
                    const bridge = await import(window.Autopilot.config.root + 'bridge.mjs');
                    return bridge.jsEmitAckMs('replay', JSON.stringify({last_seq: 1e9}), n);
                }""",
                rtt_n,
            )
        )
        await browser.close()
    return result


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=1000, help="calls per case")
    ap.add_argument("--rtt", type=int, default=500, help="emit+ack round trips per side")
    ap.add_argument("--skip-browser", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-calls-"))
    # The relay's per-conversation message rate limit would stop a benchmark that sends thousands of turns.
    (work / "relay.toml").write_text("message_rate_per_minute = 1000000\n")
    relay = start_relay(work, extra=["--demo-chunk-delay-ms", "0", "--config", str(work / "relay.toml")])
    try:
        cp = await cpython_calls(relay.url, args.n)
        br = None if args.skip_browser else await browser_calls(relay.url, args.n, args.rtt)
    finally:
        relay.stop()
    print(f"# bench/calls.py  {datetime.date.today()}  {platform.machine()} {os.cpu_count()} cores  N={args.n}")
    print("totalMs - handlerMs (withheld time per function response):")
    print(line("CPython, nothing dirty", cp["clean"]))
    print(line("CPython, dirty state (gate waits for the ack)", cp["dirty"]))
    if br is not None:
        print(line("Chromium, nothing dirty", br["clean"]))
        print(line("Chromium, dirty state (gate waits for the ack)", br["dirty"]))
        py, js = br["py_rtt"], br["js_rtt"]
        print("emit+ack round trip on the same page:")
        print(line("Python (client transport -> bridge)", py))
        print(line("plain JS (socket.io-client)", js))
        print(f"{'ratio Python / JS (p50)':44} {statistics.median(py) / statistics.median(js):.2f}x")
    save("calls", {"n": args.n, "rtt": args.rtt, "withheld_ms": {
        "cpython_clean": stats(cp["clean"]), "cpython_dirty": stats(cp["dirty"]),
        **({"chromium_clean": stats(br["clean"]), "chromium_dirty": stats(br["dirty"])} if br else {})},
        **({"emit_ack_ms": {"python": stats(br["py_rtt"]), "js": stats(br["js_rtt"])},
            "ratio_python_js_p50": statistics.median(br["py_rtt"]) / statistics.median(br["js_rtt"])} if br else {})})


if __name__ == "__main__":
    asyncio.run(main())

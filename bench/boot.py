"""Boot benchmark (not a test): how fast the demo page gets its toggle, Python, bar and relay.

Prints, for N fresh browser contexts (cold: empty HTTP cache) and N reloads in one context (warm disk cache); in
both the reader hovers the toggle as soon as it is there, since the page takes Python over only on the reader's
intent (a first view's pre-warm worker starts it on idle, a later view of a tab waits for intent):
time to toggle painted, Pyodide booted, bar mounted and joined (ms from navigation start); bytes
transferred; the longest main-thread task and total blocking time from a Chrome trace of the visit
(``bench/chrome_trace.py``), and beside them what the Long Tasks API (PerformanceObserver ``longtask``) reported:
it does not see work that runs after ``await WebAssembly.instantiate()``, where Python starts.

    python bench/boot.py [-n 5] [--boot idle|eager]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import CHROMIUM, CHROMIUM_ARGS, start_relay, wait_mark

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chrome_trace import Blocking, main_thread_tasks, tracing
from results import save

LONGTASK_SCRIPT = """
window.__longtasks = [];
try {
  new PerformanceObserver(list => { for (const e of list.getEntries()) window.__longtasks.push(e.duration); })
    .observe({type: 'longtask', buffered: true});
} catch (e) {}
"""

COLLECT = """() => {
  const m = Object.fromEntries(performance.getEntriesByType('mark').map(e => [e.name, e.startTime]));
  const res = performance.getEntriesByType('resource');
  const nav = performance.getEntriesByType('navigation')[0];
  const bytes = res.reduce((a, r) => a + (r.transferSize || 0), 0) + (nav ? nav.transferSize : 0);
  const lt = window.__longtasks || [];
  return {
    toggle: m['autopilot:toggle'], loader: m['autopilot:loader'], pyodide: m['autopilot:pyodide'],
    mounted: m['autopilot:mounted'], joined: m['autopilot:joined'], bytes,
    longest: lt.length ? Math.max(...lt) : 0,
    tbt: lt.reduce((a, d) => a + Math.max(0, d - 50), 0),
    heap: performance.memory ? performance.memory.usedJSHeapSize : null,
  };
}"""

FIELDS = [
    ("toggle", "toggle painted (ms)"),
    ("toggle_after_loader", "toggle after loader ran (ms)"),
    ("pyodide", "Pyodide booted (ms)"),
    ("mounted", "bar mounted (ms)"),
    ("joined", "joined relay (ms)"),
    ("trace_longest", "longest main-thread task, trace (ms)"),
    ("longest", "  the same, Long Tasks API (ms)"),
    ("trace_tbt", "total blocking time, trace (ms)"),
    ("tbt", "  the same, Long Tasks API (ms)"),
    ("trace_busy", "main thread busy, trace (ms)"),
    ("bytes", "bytes transferred"),
]


async def measure(page, url: str, intent: bool = False) -> dict:
    """One visit until joined; ``intent``: hover the toggle once it is there (a later page view of a tab starts
    Python only on the reader's intent)."""
    async with tracing(page.context, page) as trace:
        await page.goto(url)
        if intent:
            await page.hover("#autopilot-toggle-host >> button.toggle", timeout=60_000)
        await wait_mark(page, "autopilot:joined", 120_000)
        await asyncio.sleep(0.3)  # let the longtask observer deliver
        r = await page.evaluate(COLLECT)
    b = Blocking.of(main_thread_tasks(trace, url))
    r.update(trace_longest=b.longest_ms, trace_tbt=b.tbt_ms, trace_busy=b.busy_ms)
    r["toggle_after_loader"] = r["toggle"] - r["loader"]
    return r


def summary(rows: list[dict], key: str) -> str:
    vals = [r[key] for r in rows if r.get(key) is not None]
    if not vals:
        return "n/a"
    med = statistics.median(vals)
    if key == "bytes":
        return f"{med / 1e6:.2f} MB (min {min(vals) / 1e6:.2f}, max {max(vals) / 1e6:.2f})"
    return f"{med:.1f} (min {min(vals):.1f}, max {max(vals):.1f})"


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--boot", default=None, help="override data-boot via ?boot= (demo page default: idle)")
    args = ap.parse_args()
    from playwright.async_api import async_playwright

    work = Path(tempfile.mkdtemp(prefix="bench-boot-"))
    relay = start_relay(work, extra=["--demo-chunk-delay-ms", "0"])
    url = relay.url + "/"
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            cold = []
            for _ in range(args.n):
                ctx = await browser.new_context()
                await ctx.add_init_script(LONGTASK_SCRIPT)
                page = await ctx.new_page()
                cold.append(await measure(page, url, intent=True))
                await ctx.close()
            ctx = await browser.new_context()
            await ctx.add_init_script(LONGTASK_SCRIPT)
            page = await ctx.new_page()
            await measure(page, url, intent=True)  # fill the cache
            warm = [await measure(page, url, intent=True) for _ in range(args.n)]
            await ctx.close()
            await browser.close()
    finally:
        relay.stop()
    load = os.getloadavg()
    print(f"# bench/boot.py  {datetime.datetime.now():%Y-%m-%d %H:%M}  {platform.machine()} {os.cpu_count()} cores  "
          f"load {load[0]:.1f} {load[1]:.1f}  N={args.n}")
    print(f"{'metric':38} | {'cold (fresh context)':34} | warm disk cache")
    print("-" * 38 + "-|-" + "-" * 34 + "-|-" + "-" * 30)
    for key, label in FIELDS:
        print(f"{label:38} | {summary(cold, key):34} | {summary(warm, key)}")
    save("boot", {"n": args.n, "boot": args.boot, "cold": cold, "warm": warm})


if __name__ == "__main__":
    asyncio.run(main())

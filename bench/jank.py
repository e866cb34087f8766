"""What the widget costs the host page's main thread, per kind of visit, from Chrome traces.

For each visit kind it loads a plain host page with the default tag (``data-boot`` idle), records a Chrome
trace from before the navigation until the widget has joined the relay (plus a settle time), and clicks a
host button every 50 ms meanwhile. It prints, side by side, the trace's longest main-thread task and total
blocking time, what the Long Tasks API reported for the same visit (it misses work after
``await WebAssembly.instantiate()``), and the worst host input delay.

Visit kinds: ``cold`` (a fresh profile), ``second``/``third`` (navigations in the same tab), ``newtab`` (a new
tab of the same profile: a new renderer process), ``restart`` (the browser restarted on a persistent profile),
``pages`` (a multi-page site: the cost of page views 2-4 when the reader never touches the widget).

    python bench/jank.py [-n 3] [--kinds cold,second,newtab,restart,pages] [--boot idle|eager|intent]
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import CHROMIUM, CHROMIUM_ARGS, start_relay  # noqa: E402
from chrome_trace import LONGTASK_COLLECT, LONGTASK_SCRIPT, Blocking, main_thread_tasks, probe_input, tracing  # noqa: E402

KINDS = ("cold", "second", "third", "newtab", "restart", "pages")
SETTLE_S = 1.0


def host_page(relay: str, boot: str, n: int) -> str:
    """A plain host page (page ``n`` of a small site) with the widget's default tag."""
    links = " ".join(f'<a href="/site/{i}.html">page {i}</a>' for i in range(1, 5))
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Host page {n}</title>
<link rel="icon" href="data:,"></head><body><h1>Host page {n}</h1><p>{links}</p>
<p>{'Some host content. ' * 40}</p>
<script src="{relay}/widget/autopilot.js" data-app="demo" data-boot="{boot}" defer></script>
</body></html>"""


async def joined(page: Any, timeout_s: float) -> bool:
    """Wait for the widget to have joined the relay (its ``autopilot:joined`` mark)."""
    try:
        await page.wait_for_function(
            "() => performance.getEntriesByName('autopilot:joined').length > 0", timeout=timeout_s * 1000)
        return True
    except Exception:  # noqa: BLE001 - intent boot never joins without intent: the window then ends
        return False


async def visit(context: Any, page: Any, url: str, site: str, wait_join: bool = True) -> dict[str, Any]:
    """One traced visit with the input probe running; the numbers of it."""
    async with tracing(context, page) as trace:
        await page.goto(url, wait_until="domcontentloaded")
        probe = asyncio.ensure_future(probe_input(page, seconds=5.0))
        ok = await joined(page, 60 if wait_join else 6)
        await asyncio.sleep(SETTLE_S)
        delays = await probe
        lt = await page.evaluate(LONGTASK_COLLECT)
    b = Blocking.of(main_thread_tasks(trace, site))
    l = Blocking.of(lt)
    return {
        "trace_longest": b.longest_ms, "trace_tbt": b.tbt_ms, "trace_busy": b.busy_ms,
        "lt_longest": l.longest_ms, "lt_tbt": l.tbt_ms,
        "input_worst": max(delays, default=0.0), "input_over_100": sum(1 for d in delays if d > 100),
        "joined": ok,
    }


async def run(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    from playwright.async_api import async_playwright

    work = Path(tempfile.mkdtemp(prefix="bench-jank-"))
    relay = start_relay(work, extra=["--demo-chunk-delay-ms", "0"])
    site = relay.url + "/site/"
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in args.kinds}

    async def route(context: Any) -> None:
        async def serve(r: Any) -> None:
            n = int(r.request.url.rsplit("/", 1)[1].split(".")[0] or 1)
            await r.fulfill(content_type="text/html", body=host_page(relay.url, args.boot, n))
        await context.route(site + "*", serve)
        await context.add_init_script(LONGTASK_SCRIPT)

    try:
        async with async_playwright() as pw:
            for _ in range(args.n):
                browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                ctx = await browser.new_context()
                await route(ctx)
                page = await ctx.new_page()
                cold = await visit(ctx, page, site + "1.html", site)
                if "cold" in results:
                    results["cold"].append(cold)
                for kind in ("second", "third"):
                    r = await visit(ctx, page, site + "1.html", site)
                    if kind in results:
                        results[kind].append(r)
                if "newtab" in results:
                    tab = await ctx.new_page()
                    results["newtab"].append(await visit(ctx, tab, site + "1.html", site))
                    await tab.close()
                if "pages" in results:
                    for i in (2, 3, 4):
                        r = await visit(ctx, page, site + f"{i}.html", site, wait_join=False)
                        results["pages"].append(r)
                await browser.close()
                if "restart" in results:
                    profile = tempfile.mkdtemp(prefix="bench-jank-profile-")
                    for attempt in range(2):
                        ctx = await pw.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                        await route(ctx)
                        page = ctx.pages[0] if ctx.pages else await ctx.new_page()
                        r = await visit(ctx, page, site + "1.html", site)
                        if attempt == 1:
                            results["restart"].append(r)
                        await ctx.close()
    finally:
        relay.stop()
    return results


def med(rows: list[dict[str, Any]], key: str) -> str:
    vals = [float(r[key]) for r in rows]
    if not vals:
        return "n/a"
    return f"{statistics.median(vals):.0f} ({min(vals):.0f}-{max(vals):.0f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--boot", default="idle", choices=["idle", "eager", "intent"])
    args = ap.parse_args()
    args.kinds = [k for k in args.kinds.split(",") if k]
    unknown = set(args.kinds) - set(KINDS)
    if unknown:
        ap.error(f"unknown kinds: {', '.join(sorted(unknown))}")
    results = asyncio.run(run(args))
    load = os.getloadavg()
    print(f"# bench/jank.py  {datetime.datetime.now():%Y-%m-%d %H:%M}  {platform.machine()} {os.cpu_count()} cores  "
          f"load {load[0]:.1f} {load[1]:.1f}  N={args.n}  boot={args.boot}")
    cols = [("trace_longest", "longest task, trace"), ("lt_longest", "longest, Long Tasks API"),
            ("trace_tbt", "TBT, trace"), ("lt_tbt", "TBT, Long Tasks API"), ("trace_busy", "main thread busy"),
            ("input_worst", "worst input delay"), ("input_over_100", "clicks > 100 ms")]
    print(f"{'visit':8} | " + " | ".join(f"{label:24}" for _, label in cols))
    for kind, rows in results.items():
        print(f"{kind:8} | " + " | ".join(f"{med(rows, key):24}" for key, _ in cols))
    print("(ms: median (min-max); 'pages' are page views 2-4 of a multi-page site, the widget untouched)")


if __name__ == "__main__":
    main()

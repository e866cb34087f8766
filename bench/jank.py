"""What the widget costs the host page's main thread, per kind of visit, from Chrome traces.

For each visit kind it loads a plain host page with the default tag (``data-boot`` idle), records a Chrome
trace from before the navigation until the widget has joined the relay, or, where nobody touches it, has
prepared or stayed idle (plus a settle time), and clicks a host button every 50 ms meanwhile. It prints, side by
side, the trace's longest main-thread task and total blocking time, what the Long Tasks API reported for the same
visit (it misses work after ``await WebAssembly.instantiate()``), and the worst host input delay.

Visit kinds, the widget untouched: ``cold`` (a fresh profile), ``second``/``third`` (navigations in the same
tab), ``newtab`` (a new tab of the same profile: a new renderer process), ``restart`` (the browser restarted on a
persistent profile), ``pages`` (page views 2-4 of a multi-page site). With the reader: ``cold-reader``,
``newtab-reader``, ``restart-reader`` (the same first views, the reader hovering the toggle once the widget is
prepared, which starts Python on the page), ``later-reader`` (a later view of the tab, the reader hovering the
toggle 0.5 s after the page's load).

``--before-dist DIR`` also serves another build folder (an older commit's ``widget/_dist``) from a second relay
and runs it interleaved with this one, round by round: its rows are marked ``(before)``, so a change is measured
as a ratio within one run, under the same load.

    python bench/jank.py [-n 3] [--kinds cold,second,...] [--boot idle|ready|eager|intent] [--before-dist DIR]
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

from chrome_trace import (
    LONGTASK_COLLECT,
    LONGTASK_SCRIPT,
    Blocking,
    main_thread_cpu,
    main_thread_tasks,
    probe_input,
    tracing,
)
from results import save, stats
from support import CHROMIUM, CHROMIUM_ARGS, PageServer, start_relay

KINDS = ("cold", "second", "third", "newtab", "restart", "pages",
         "cold-reader", "later-reader", "newtab-reader", "restart-reader")
TOGGLE = "#autopilot-toggle-host >> button.toggle"
SETTLE_S = 1.0


def host_page(relay: str, boot: str, n: int, site_path: str = "/site/") -> str:
    """A plain host page (page ``n`` of a small site) with the widget's default tag."""
    links = " ".join(f'<a href="{site_path}{i}.html">page {i}</a>' for i in range(1, 5))
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Host page {n}</title>
<link rel="icon" href="data:,"></head><body><h1>Host page {n}</h1><p>{links}</p>
<p>{'Some host content. ' * 40}</p>
<script src="{relay}/widget/autopilot.js" data-app="demo" data-boot="{boot}" defer></script>
</body></html>"""


async def settled(page: Any, timeout_s: float) -> str:
    """Wait until the widget has joined the relay ('joined'), or, not started, has prepared its start ('prepared')
    or has nothing under way 4 s after the page's load event ('idle': a later view waits for the reader);
    'timeout' when none of these came."""
    try:
        state = await page.wait_for_function(
            """() => {
              const has = (n) => performance.getEntriesByName(n).length > 0;
              if (has('autopilot:joined')) return 'joined';
              if (has('autopilot:boot')) return false;
              if (has('autopilot:prepared')) return 'prepared';
              const nav = performance.getEntriesByType('navigation')[0];
              if (nav && nav.loadEventEnd > 0 && performance.now() - nav.loadEventEnd > 4000) return 'idle';
              return false;
            }""", timeout=timeout_s * 1000, polling=100)
        return str(await state.json_value())
    except Exception:  # noqa: BLE001 - a boot that never finished: the window ends
        return "timeout"


async def visit(context: Any, page: Any, url: str, site: str, reader: bool = False) -> dict[str, Any]:
    """One traced visit with the input probe running; with ``reader``, the reader hovers the toggle once the
    widget is prepared (or has nothing under way), which starts it. The numbers of it."""
    async with tracing(context, page) as trace:
        await page.goto(url, wait_until="domcontentloaded")
        stop = asyncio.Event()
        probe = asyncio.ensure_future(probe_input(page, seconds=5.0, until=stop))
        state = await settled(page, 60)
        if reader and state != "joined":
            await page.hover(TOGGLE)
            state = await settled(page, 60)
        await asyncio.sleep(SETTLE_S)
        stop.set()
        delays = await probe
        lt = await page.evaluate(LONGTASK_COLLECT)
    b = Blocking.of(main_thread_tasks(trace, site))
    cpu = Blocking.of(main_thread_cpu(trace, site))
    long_tasks = Blocking.of(lt)
    return {
        "trace_longest": b.longest_ms, "trace_tbt": b.tbt_ms, "trace_busy": b.busy_ms, "cpu_longest": cpu.longest_ms,
        "lt_longest": long_tasks.longest_ms, "lt_tbt": long_tasks.tbt_ms,
        "input_worst": max(delays, default=0.0), "input_over_100": sum(1 for d in delays if d > 100),
        "joined": state == "joined",
    }


async def run(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    from playwright.async_api import async_playwright

    work = Path(tempfile.mkdtemp(prefix="bench-jank-"))
    # The host pages come from a real loopback server of their own origin (a page fulfilled by Playwright has no
    # address, counts as public, and Chromium's local-network-access rules then block its socket to the relay:
    # the widget never joined and every visit waited out the join timeout).
    pages = PageServer()
    allow = ["--app", f"demo={pages.origin}", "--demo-chunk-delay-ms", "0"]
    builds = {"": start_relay(work, extra=allow)}
    if args.before_dist:
        builds[" (before)"] = start_relay(work, extra=[*allow, "--dist", args.before_dist])
    results: dict[str, list[dict[str, Any]]] = {k + b: [] for k in args.kinds for b in builds}
    for i, relay in enumerate(builds.values()):
        for n in range(1, 5):
            pages.add(f"/site{i}/{n}.html", host_page(relay.url, args.boot, n, f"/site{i}/"))
    sites = {label: f"{pages.origin}/site{i}/" for i, label in enumerate(builds)}

    try:
        async with async_playwright() as pw:
            for i in range(args.n):
                order = list(builds)[i % len(builds):] + list(builds)[:i % len(builds)]
                for label in order:
                    await one_round(pw, args, sites[label], label, results)
    finally:
        for relay in builds.values():
            relay.stop()
        pages.close()
    return results


async def one_round(pw: Any, args: argparse.Namespace, site: str, label: str,
                    results: dict[str, list[dict[str, Any]]]) -> None:
    """Every visit kind once, on the host site at ``site``; rows go to ``results[kind + label]``."""
    want = set(args.kinds)

    async def route(context: Any) -> None:
        await context.add_init_script(LONGTASK_SCRIPT)

    async def record(kind: str, r: dict[str, Any]) -> None:
        if kind in want:
            results[kind + label].append(r)

    browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    # The widget untouched: a first view, later views of the tab, a new tab, the site's other pages.
    ctx = await browser.new_context()
    await route(ctx)
    page = await ctx.new_page()
    await record("cold", await visit(ctx, page, site + "1.html", site))
    for kind in ("second", "third"):
        await record(kind, await visit(ctx, page, site + "1.html", site))
    if "newtab" in want:
        tab = await ctx.new_page()
        await record("newtab", await visit(ctx, tab, site + "1.html", site))
        await tab.close()
    if "pages" in want:
        for i in (2, 3, 4):
            await record("pages", await visit(ctx, page, site + f"{i}.html", site))
    await ctx.close()
    # With the reader: the same first views, and a later view, where the reader reaches for the widget.
    if want & {"cold-reader", "later-reader", "newtab-reader"}:
        ctx = await browser.new_context()
        await route(ctx)
        page = await ctx.new_page()
        await record("cold-reader", await visit(ctx, page, site + "1.html", site, reader=True))
        await record("later-reader", await visit(ctx, page, site + "2.html", site, reader=True))
        if "newtab-reader" in want:
            tab = await ctx.new_page()
            await record("newtab-reader", await visit(ctx, tab, site + "1.html", site, reader=True))
        await ctx.close()
    await browser.close()
    if want & {"restart", "restart-reader"}:
        profile = tempfile.mkdtemp(prefix="bench-jank-profile-")
        for attempt in ("first", "restart", "restart-reader"):
            ctx = await pw.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            await route(ctx)
            page = ctx.pages[0] if ctx.pages else await ctx.new_page()
            r = await visit(ctx, page, site + "1.html", site, reader=attempt != "restart")
            if attempt != "first":
                await record(attempt, r)
            await ctx.close()


def med(rows: list[dict[str, Any]], key: str) -> str:
    vals = [float(r[key]) for r in rows]
    if not vals:
        return "n/a"
    return f"{statistics.median(vals):.0f} ({min(vals):.0f}-{max(vals):.0f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--boot", default="idle", choices=["idle", "ready", "eager", "intent"])
    ap.add_argument("--before-dist", help="another build folder, run interleaved with this build (rows '(before)')")
    args = ap.parse_args()
    args.kinds = [k for k in args.kinds.split(",") if k]
    unknown = set(args.kinds) - set(KINDS)
    if unknown:
        ap.error(f"unknown kinds: {', '.join(sorted(unknown))}")
    results = asyncio.run(run(args))
    load = os.getloadavg()
    print(f"# bench/jank.py  {datetime.datetime.now():%Y-%m-%d %H:%M}  {platform.machine()} {os.cpu_count()} cores  "
          f"load {load[0]:.1f} {load[1]:.1f}  N={args.n}  boot={args.boot}")
    # Wall time is what the host page feels; its CPU part shows how much of it is ours when the cores are shared.
    cols = [("trace_longest", "longest task, trace"), ("cpu_longest", "longest task by CPU time"),
            ("lt_longest", "longest, Long Tasks API"),
            ("trace_tbt", "TBT, trace"), ("lt_tbt", "TBT, Long Tasks API"), ("trace_busy", "main thread busy"),
            ("input_worst", "worst input delay"), ("input_over_100", "clicks > 100 ms")]
    print(f"{'visit':17} | " + " | ".join(f"{label:24}" for _, label in cols) + " | joined")
    for kind, rows in results.items():
        # "joined": visits whose widget joined the relay (page views the reader does not touch start nothing)
        print(f"{kind:17} | " + " | ".join(f"{med(rows, key):24}" for key, _ in cols)
              + f" | {sum(1 for r in rows if r['joined'])}/{len(rows)}")
    if args.before_dist:
        print("ratios this build / before (medians):")
        for kind in args.kinds:
            now, was = results[kind], results[kind + " (before)"]
            parts = []
            for key, label in cols[:1] + cols[3:6]:
                a = statistics.median([float(r[key]) for r in now]) if now else None
                b = statistics.median([float(r[key]) for r in was]) if was else None
                parts.append(f"{label} {a / b:.2f}x" if a is not None and b else f"{label} n/a")
            print(f"  {kind:8} " + ", ".join(parts))
    print("(ms: median (min-max); 'pages' are page views 2-4 of a multi-page site, the widget untouched; "
          "'-reader' visits: the reader hovers the toggle)")
    save("jank", {"n": args.n, "boot": args.boot, "before_dist": args.before_dist,
                  "medians": {kind: {key: stats(float(r[key]) for r in rows)["median"] for key, _ in cols}
                              | {"joined": sum(1 for r in rows if r["joined"]), "visits": len(rows)}
                              for kind, rows in results.items()},
                  "visits": results})


if __name__ == "__main__":
    main()

"""A new tab of a site whose first tab stored the snapshot: the reader's click to the first answer.

A new tab (or a new browser session) is a tab's first view: it runs the pre-warm worker on idle. Its reader
either clicks the toggle at once, before the worker is done (then the widget restores the snapshot an earlier tab
stored instead of waiting), or reads first (``dwell``: 3 s after the load; the worker is done, its hand-over is
restored). Each visit: a fresh browser, a first tab that joins and stores its snapshot, then the new tab of the
same site; the reader clicks, the page sends a unique message, and the time from the click to the answer that
echoes it is printed. With ``--before-dist`` an older build is measured interleaved with this checkout's.

    python bench/new_tab.py [-n 3] [--before-dist DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import secrets
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from jank import TOGGLE, host_page
from results import save, stats
from support import CHROMIUM, CHROMIUM_ARGS, PageServer, start_relay

ANSWERS = "#autopilot-bar-host >> .messages > .message.assistant"
DWELLS = (0.0, 3.0)


async def one_visit(pw: Any, site: str, dwell: float) -> dict[str, Any]:
    """A first tab that stores the snapshot, then a new tab whose reader clicks after ``dwell`` s; its timings."""
    browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    try:
        ctx = await browser.new_context()
        first = await ctx.new_page()
        await first.goto(site + "1.html")
        await first.hover(TOGGLE)
        await first.wait_for_function("() => performance.getEntriesByName('autopilot:snapshot-stored').length > 0",
                                      timeout=90_000, polling=100)
        page = await ctx.new_page()
        await page.goto(site + "2.html", wait_until="commit")
        await page.wait_for_selector(TOGGLE, state="visible")
        if dwell:
            await page.wait_for_load_state("load")
            await asyncio.sleep(dwell)
        clicked = await page.evaluate("performance.now()")
        await page.click(TOGGLE)
        token = "nt-" + secrets.token_hex(4)
        await page.evaluate("t => window.Autopilot.send(t)", token)
        await page.locator(ANSWERS).filter(has_text=token).first.wait_for(state="attached", timeout=60_000)
        done = await page.evaluate("performance.now()")
        marks = await page.evaluate("performance.getEntriesByType('mark').map(m => m.name)")
    finally:
        await browser.close()
    how = ("stored copy" if "autopilot:prewarm-abandoned" in marks else
           "hand-over" if "autopilot:handoff" in marks else "other")
    return {"after_click": done - clicked, "clicked": clicked, "how": how}


async def run(args: argparse.Namespace) -> dict[tuple[str, float], list[dict[str, Any]]]:
    from playwright.async_api import async_playwright

    pages = PageServer()
    work = Path(tempfile.mkdtemp(prefix="bench-newtab-"))
    extra = ["--app", f"demo={pages.origin}", "--demo-chunk-delay-ms", "0"]
    relays = {"this build": start_relay(work, extra=extra)}
    if args.before_dist:
        relays["before"] = start_relay(work, extra=[*extra, "--dist", args.before_dist])
    out: dict[tuple[str, float], list[dict[str, Any]]] = {(k, d): [] for k in relays for d in DWELLS}
    try:
        sites = {}
        for i, (label, relay) in enumerate(relays.items()):
            for n in (1, 2):
                pages.add(f"/site{i}/{n}.html", host_page(relay.url, "idle", n, f"/site{i}/"))
            sites[label] = f"{pages.origin}/site{i}/"
        async with async_playwright() as pw:
            for i in range(args.n):  # interleaved, each round in another order
                order = list(relays)[i % len(relays):] + list(relays)[:i % len(relays)]
                for dwell in DWELLS:
                    for label in order:
                        r = await one_visit(pw, sites[label], dwell)
                        out[(label, dwell)].append(r)
                        print(f"[new tab] {label}, click after {dwell:.0f} s: answer {r['after_click']:.0f} ms after "
                              f"the click ({r['how']})", flush=True)
    finally:
        for relay in relays.values():
            relay.stop()
        pages.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--before-dist", default=None, help="also run this build folder, interleaved")
    args = ap.parse_args()
    load = os.getloadavg()
    print(f"# bench/new_tab.py {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
          f"load average {load[0]:.1f} {load[1]:.1f}, n={args.n}")
    results = asyncio.run(run(args))
    print("reader's click → answer, ms, median (min–max):")
    for (label, dwell), rows in results.items():
        vals = [r["after_click"] for r in rows]
        hows = sorted({r["how"] for r in rows})
        print(f"  {label:>10}, click {'at once' if not dwell else f'after {dwell:.0f} s'}: "
              f"{statistics.median(vals):.0f} ({min(vals):.0f}–{max(vals):.0f}); Python from: {', '.join(hows)}")
    load = os.getloadavg()
    print(f"# load average at the end {load[0]:.1f} {load[1]:.1f}")
    save("new_tab", {"n": args.n, "before_dist": args.before_dist, "after_click_ms": {
        f"{label}, click {'at once' if not dwell else f'after {dwell:.0f} s'}":
            stats(r["after_click"] for r in rows) | {"python_from": sorted({r["how"] for r in rows})}
        for (label, dwell), rows in results.items()}, "visits": [
        {"build": label, "dwell_s": dwell, **r} for (label, dwell), rows in results.items() for r in rows]})


if __name__ == "__main__":
    main()

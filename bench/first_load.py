"""Where the bytes of a cold visit go: every request of the demo page and its workers, per file, as served.

One cold visit (a fresh browser context) of the demo page served by a local relay (``python -m widget.relay``, as
built in ``widget/_dist``, or ``--dist``): the bench opens the bar, sends a message and waits for the answer, as
``bench/peer.py`` does; then it prints the bytes of every request the page and its pre-warm worker made (encoded
body + headers, Playwright's sizes; a URL fetched again by the other one counts its headers only: its body came from
the HTTP cache), largest first, and the total.

    python bench/first_load.py [--dist widget/_dist] [-n 1]
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import statistics
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import peer
from peer import BROWSER_ARGS, CHROMIUM, Run, Tab, new_context, start_relay, stop_process
from results import save


async def visit(browser: Any, url: str, token: str) -> list[tuple[str, int, int]]:
    """One cold visit; (url, body bytes, header bytes) per finished request."""
    ctx = await new_context(browser, "ours")
    try:
        foreign: list[str] = []
        tab = await Tab.open(ctx, foreign)
        await peer._run_once(tab, Run("ours", url, 120), token)
        rows = []
        for req in tab.finished:
            try:
                sz = await req.sizes()
            except Exception:  # noqa: BLE001 - a request of a closed worker
                continue
            rows.append((req.url, max(0, sz["responseBodySize"]), max(0, sz["responseHeadersSize"])))
        return rows
    finally:
        await ctx.close()


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dist", help="a build output folder (default: widget/_dist)")
    ap.add_argument("-n", type=int, default=1, help="cold visits (the per-file table is the last one's)")
    args = ap.parse_args()
    from playwright.async_api import async_playwright

    work = Path(tempfile.mkdtemp(prefix="bench-first-load-"))
    relay = start_relay(work, extra=["--demo-chunk-delay-ms", "0"] + (["--dist", args.dist] if args.dist else []))
    totals = []
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
            for i in range(args.n):
                rows = await visit(browser, relay.url + "/", f"bytes-{i}")
                totals.append(sum(b + h for _, b, h in rows))
            await browser.close()
    finally:
        stop_process(relay.proc)
    seen = Counter(u for u, _, _ in rows)
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, load average "
          f"{os.getloadavg()[0]:.2f}")
    for url, b, h in sorted(rows, key=lambda r: -r[1] - r[2]):
        name = url.split("/widget/", 1)[-1] if "/widget/" in url else url.rsplit("/", 1)[-1] or url
        note = "  (again, no body: the HTTP cache)" if seen[url] > 1 and not b else ""
        print(f"{(b + h) / 1e6:9.3f} MB  {name[:90]}{note}")
    print(f"total {statistics.median(totals) / 1e6:.3f} MB (median of {len(totals)}: "
          + ", ".join(f"{t / 1e6:.3f}" for t in totals) + ")")
    save("first_load", {"total_bytes": totals, "median_total_bytes": statistics.median(totals),
                        "requests": [{"url": u, "body": b, "headers": h} for u, b, h in rows]})
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))

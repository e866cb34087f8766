"""Reader benchmark (not a test): a scripted reader meets the widget, and what they type is all there (issue 32).

The reader reads the page (dwell), moves the mouse to the toggle over ~300 ms, clicks, and types a 40-character
question at 60 ms a key, then Enter. Measured per visit, in Chromium, on the demo page served by a local relay
(``widget/_dist``, or ``--dist``):

- click → composer focused: from the click's event time to the first animation frame in which a composer of
  the widget (the loader's early one, or the bar's) has the focus and is editable;
- keys lost: characters of the question missing from (or changed in) the message the relay got;
- Enter → reply: from Enter to the first frame showing the demo model's answer.

Visit kinds: ``cold`` (a fresh context, 3 s of reading), ``cold-now`` (clicks as soon as the toggle shows),
``second`` (the same tab's next page view, 3 s of reading; the bar was closed on the first), ``throttled`` (cold,
clicking as soon as the toggle shows, on 10 Mbit/s with 40 ms RTT and the CPU 4× slower, through CDP).

    python bench/reader.py [-n 3] [--kinds cold,cold-now,second,throttled] [--dist widget/_dist]
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import difflib
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from results import save
from support import CHROMIUM, CHROMIUM_ARGS, start_relay

QUESTION = "what are your opening hours on sunday mo"  # 40 characters
KEY_DELAY_MS = 60

# Times the click and the first frame with a focused, editable composer (the page's own clock).
PROBE = """
window.__reader = { click: null, focused: null };
document.addEventListener('click', (e) => {
  if (window.__reader.click !== null || !e.composedPath().some((n) => n.id === 'autopilot-toggle-host')) return;
  window.__reader.click = e.timeStamp;
  const look = (t) => {
    const hosts = ['autopilot-toggle-host', 'autopilot-bar-host'].map((id) => document.getElementById(id));
    const el = hosts.map((h) => h && h.shadowRoot && h.shadowRoot.activeElement)
      .find((a) => a && a.tagName === 'TEXTAREA');
    if (el && !el.readOnly && !el.disabled) { window.__reader.focused = t; return; }
    requestAnimationFrame(look);
  };
  requestAnimationFrame(look);
}, true);
"""
SENT = """() => { const b = document.getElementById('autopilot-bar-host');
  return b ? [...b.shadowRoot.querySelectorAll('.message.user .content')].map(e => e.textContent) : []; }"""
REPLIED = """() => { const b = document.getElementById('autopilot-bar-host');
  return !!b && b.shadowRoot.querySelectorAll('.message.assistant .content').length > 0
    && b.shadowRoot.querySelector('.message.assistant:last-child .content').textContent.trim().length > 0; }"""


def keys_lost(typed: str, sent: str) -> int:
    """Characters of ``typed`` that are not in ``sent`` in order."""
    matched = sum(b.size for b in difflib.SequenceMatcher(None, typed, sent, autojunk=False).get_matching_blocks())
    return len(typed) - matched


async def visit(page: Any, url: str, dwell_s: float) -> dict[str, float]:
    """One reader's visit of ``url``: dwell, travel, click, type, Enter."""
    await page.goto(url)
    toggle = page.locator("#autopilot-toggle-host >> button.toggle")
    await toggle.wait_for(state="visible")
    await asyncio.sleep(dwell_s)
    box = await toggle.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    await page.mouse.move(x - 300, y - 200)
    await page.mouse.move(x, y, steps=18)  # ~300 ms of travel at 60 Hz
    await page.mouse.click(x, y)
    before = len(await page.evaluate(SENT))
    await page.keyboard.type(QUESTION, delay=KEY_DELAY_MS)
    enter = await page.evaluate("performance.now()")
    await page.keyboard.press("Enter")
    try:
        await page.wait_for_function(f"() => ({SENT})().length > {before}", timeout=60_000)
        sent = (await page.evaluate(SENT))[before]
    except Exception:  # noqa: BLE001 - nothing was sent: every key is lost
        sent = ""
    replied = None
    if sent:
        await page.wait_for_function(REPLIED, timeout=60_000)
        replied = await page.evaluate("performance.now()") - enter
    r = await page.evaluate("window.__reader")
    focused = r["focused"] - r["click"] if r["focused"] is not None and r["click"] is not None else float("nan")
    return {
        "focused": focused,
        "lost": keys_lost(QUESTION, sent),
        "reply": replied if replied is not None else float("nan"),
    }


def med(rows: list[dict[str, float]], key: str) -> str:
    vals = [r[key] for r in rows if r[key] == r[key]]
    if not vals:
        return "n/a"
    return f"{statistics.median(vals):.0f} ({min(vals):.0f}–{max(vals):.0f})"


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--kinds", default="cold,cold-now,second,throttled")
    ap.add_argument("--dist", help="a build output folder (default: widget/_dist)")
    args = ap.parse_args()
    from playwright.async_api import async_playwright

    work = Path(tempfile.mkdtemp(prefix="bench-reader-"))
    extra = ["--demo-chunk-delay-ms", "0"] + (["--dist", args.dist] if args.dist else [])
    relay = start_relay(work, extra=extra)
    results: dict[str, list[dict[str, float]]] = {k: [] for k in args.kinds.split(",")}
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for _ in range(args.n):
                for kind in results:
                    ctx = await browser.new_context()
                    await ctx.add_init_script(PROBE)
                    page = await ctx.new_page()
                    if kind == "throttled":
                        cdp = await ctx.new_cdp_session(page)
                        await cdp.send("Network.enable")
                        await cdp.send("Network.emulateNetworkConditions", {
                            "offline": False, "latency": 40, "downloadThroughput": 10e6 / 8,
                            "uploadThroughput": 10e6 / 8})
                        await cdp.send("Emulation.setCPUThrottlingRate", {"rate": 4})
                    if kind == "second":
                        await visit(page, relay.url + "/", 3.0)
                        await page.keyboard.press("Escape")  # closed: the next view starts on the reader's intent
                        await page.wait_for_timeout(300)
                    dwell = 0.0 if kind in ("cold-now", "throttled") else 3.0
                    results[kind].append(await visit(page, relay.url + "/", dwell))
                    await ctx.close()
            await browser.close()
    finally:
        relay.stop()
    load = os.getloadavg()
    print(
        f"# bench/reader.py  {datetime.datetime.now():%Y-%m-%d %H:%M}  {platform.machine()} {os.cpu_count()} cores  "
        f"load {load[0]:.1f} {load[1]:.1f}  N={args.n}  (median, min–max)"
    )
    print(f"{'visit':10} | {'click → composer focused (ms)':30} | {'keys lost of 40':16} | Enter → reply (ms)")
    for kind, rows in results.items():
        print(f"{kind:10} | {med(rows, 'focused'):30} | {med(rows, 'lost'):16} | {med(rows, 'reply')}")
    save("reader", {"n": args.n, "dist": args.dist, "visits": results})


if __name__ == "__main__":
    asyncio.run(main())

"""Benchmark (not a test): the bar rendering a streamed 4,000-token Markdown answer at 200 tokens/s in Chromium.

The demo page boots as usual (Pyodide, the client, the store, the bar; the relay only serves the page and the
build). Then a Python timer in the page feeds the answer through the client's own event path
(``client._on_sequenced``: the streaming session, the store, the bar's animation-frame rendering with
``StreamingRenderer`` and ``sanitize.mjs``) in real time: ~10 tokens (~40 characters) every 50 ms for ~20 s, the
same synthetic answer as ``bench/render.py``. A Chromium trace (``devtools.timeline``) of the page's main thread
gives the main-thread time and the longest task while streaming; the bar's own frame and event times are
measured in the page. ``--naive`` re-renders the whole answer with ``render_markdown`` on every frame instead, to
show what the incremental path saves. The final DOM is checked against ``sanitize(render_markdown(answer))``.

    python bench/render_browser.py [--naive] [--tokens 4000] [--tokens-per-second 200] [--chunks-per-second 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from render import synthetic_answer  # noqa: E402
from support import CHROMIUM, CHROMIUM_ARGS, start_relay, wait_mark  # noqa: E402

SETUP = '''
import asyncio, json, time
import js
from widget import get_client
from widget.core.markdown import render_markdown

client = get_client()
H = js.window.Autopilot.handle
BAR = H.bar.bar
STATS = {"frames": [], "events": []}
_flush = BAR.flush

def timed_flush():
    t0 = time.perf_counter()
    _flush()
    STATS["frames"].append((time.perf_counter() - t0) * 1000)

BAR.flush = timed_flush

if NAIVE:
    def naive_render(view, text, streaming):
        if view.text == text:
            return
        BAR.sanitizer.setSafeHTML(view.stable, render_markdown(text))
        view.tail.textContent = ""
        view.text = text
    BAR._render_answer = naive_render

def event(name, payload):
    t0 = time.perf_counter()
    client._on_sequenced(name, {**payload, "seq": client.seq.last_seq + 1})
    STATS["events"].append((time.perf_counter() - t0) * 1000)

async def stream(text, ends, interval, mid):
    loop = asyncio.get_event_loop()
    event("completion.started", {"turn_id": "t-" + mid, "message_id": mid})
    start = loop.time()
    prev = 0
    for i, end in enumerate(ends):
        await asyncio.sleep(max(0.0, start + (i + 1) * interval - loop.time()))
        event("completion_stream", {"message_id": mid, "delta": text[prev:end]})
        prev = end
    event("completion.ended", {"message": {"id": mid, "role": "assistant", "content": text}, "tool_messages": []})
    event("completion.finished", {"turn_id": "t-" + mid, "status": "done"})
    await asyncio.sleep(0.2)
    return loop.time() - start

# Warm up outside the measurement: the first Markdown render imports python-markdown.
asyncio.ensure_future(stream("## warm\\n\\nup *now*", [6, 12, 19], 0.01, "bench-warm"))
True
'''


#: Trace events that say what a main-thread task spent its time on (summed for the breakdown).
BREAKDOWN = {
    "FunctionCall": "JS/Python called from tasks (timers, events, frames)",
    "FireAnimationFrame": "animation-frame callbacks (the bar's rendering)",
    "TimerFire": "timers (asyncio's sleeps, socket.io)",
    "UpdateLayoutTree": "style recalculation",
    "Layout": "layout",
    "Paint": "paint",
    "PrePaint": "pre-paint",
    "Layerize": "layerize",
    "MajorGC": "major GC",
    "MinorGC": "minor GC",
}


def main_thread_tasks(trace: Any, t_start: float, t_end: float) -> tuple[list[float], str, dict[str, float]]:
    """Durations (ms) of top-level tasks on the busiest renderer main thread between two trace timestamps (µs),
    and the time of a few inner event kinds (ms)."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    mains = {(e["pid"], e["tid"]) for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name" and e["args"].get("name") == "CrRendererMain"}
    by_thread: dict[tuple[int, int], list[float]] = {}
    inner: dict[tuple[int, int], dict[str, float]] = {}
    for e in events:
        if e.get("ph") != "X" or (e.get("pid"), e.get("tid")) not in mains:
            continue
        if not (t_start <= e["ts"] <= t_end):
            continue
        key = (e["pid"], e["tid"])
        if e.get("name") in ("RunTask", "ThreadControllerImpl::RunTask"):
            by_thread.setdefault(key, []).append(e.get("dur", 0) / 1000)
        elif e.get("name") in BREAKDOWN:
            bucket = inner.setdefault(key, {})
            bucket[e["name"]] = bucket.get(e["name"], 0.0) + e.get("dur", 0) / 1000
    if not by_thread:
        return [], "no tasks found", {}
    key = max(by_thread, key=lambda k: sum(by_thread[k]))
    return by_thread[key], f"pid {key[0]}", inner.get(key, {})


async def run(args: argparse.Namespace) -> int:
    from playwright.async_api import async_playwright

    from build import build

    build(quiet=True)
    text = synthetic_answer(int(args.tokens * args.chars_per_token))
    tokens_per_chunk = args.tokens_per_second / args.chunks_per_second
    chars = max(1, round(tokens_per_chunk * args.chars_per_token))
    ends = list(range(chars, len(text), chars)) + [len(text)]
    interval = 1 / args.chunks_per_second
    relay = start_relay(Path(tempfile.mkdtemp(prefix="bench-bar-")))
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = await browser.new_page(viewport={"width": 1280, "height": 800})
            await page.add_init_script("""window.__longtasks = [];
                new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__longtasks.push(e.duration); })
                  .observe({type: 'longtask', buffered: true});""")
            await page.goto(relay.url + "/")
            await wait_mark(page, "autopilot:joined")
            await page.click("#autopilot-toggle-host >> button.toggle")
            run_py = "code => window.Autopilot.pyodide.runPythonAsync(code)"
            await page.evaluate(run_py, f"NAIVE = {bool(args.naive)!r}\n" + SETUP)
            await page.wait_for_timeout(800)
            await page.evaluate(run_py, "STATS['frames'].clear(); STATS['events'].clear(); True")
            await page.evaluate("window.__longtasks.length = 0")
            t_before = await page.evaluate("performance.timeOrigin + performance.now()")
            await browser.start_tracing(page=page, categories=["devtools.timeline", "disabled-by-default-devtools.timeline"])
            mark = "bench-" + ("naive" if args.naive else "inc")
            await page.evaluate("() => console.timeStamp('bench-start')")
            seconds = await page.evaluate(
                run_py,
                f"import json\nTEXT = json.loads({json.dumps(json.dumps(text))})\n"
                f"await stream(TEXT, {ends!r}, {interval!r}, {mark!r})",
            )
            await page.evaluate("() => console.timeStamp('bench-end')")
            trace = json.loads(await browser.stop_tracing())
            if args.save_trace:
                Path(args.save_trace).write_text(json.dumps(trace))
            t_after = await page.evaluate("performance.timeOrigin + performance.now()")
            stats = json.loads(await page.evaluate(run_py, "json.dumps(STATS)"))
            longtasks = await page.evaluate("window.__longtasks")
            # The final DOM is what sanitize(render_markdown(answer)) gives.
            same = await page.evaluate(run_py, f"""
import autopilot_sanitize
view = BAR._views[{mark!r}]
want = js.document.createElement("div")
autopilot_sanitize.setSafeHTML(want, render_markdown(TEXT))
got = js.document.createElement("div")
got.innerHTML = view.stable.innerHTML + view.tail.innerHTML
want.innerHTML.replace("\\n", "") == got.innerHTML.replace("\\n", "")""")
            await browser.close()
    finally:
        relay.stop()

    stamps = [e["ts"] for e in trace["traceEvents"] if e.get("name") == "TimeStamp"
              and e.get("args", {}).get("data", {}).get("message") in ("bench-start", "bench-end")]
    t0, t1 = (min(stamps), max(stamps)) if len(stamps) >= 2 else (0, float("inf"))
    tasks, where, inner = main_thread_tasks(trace, t0, t1)
    frames, events = stats["frames"], stats["events"]
    wall = (t_after - t_before) / 1000
    busy = sum(tasks)
    mode = "naive: render_markdown(whole answer) per frame" if args.naive else "incremental: StreamingRenderer"
    print(f"Chromium + Pyodide; the bar streaming a {len(text):,}-character (~{args.tokens:,}-token) Markdown answer "
          f"at {args.tokens_per_second:g} tokens/s: {len(ends)} chunks of ~{chars} characters every "
          f"{interval * 1000:.0f} ms, {seconds:.1f} s of streaming ({wall:.1f} s wall)")
    print(f"mode: {mode}")
    print(f"  main thread (trace, {where}): {busy:,.0f} ms busy in {len(tasks)} tasks "
          f"= {busy / max(seconds, 1e-9):.1f} ms per second of streaming ({busy / max(seconds, 1e-9) / 10:.1f} %)")
    print(f"  longest task: {max(tasks) if tasks else 0:.1f} ms; tasks over 50 ms: "
          f"{sum(1 for d in tasks if d > 50)} (PerformanceObserver longtask: {len(longtasks)}"
          f"{', longest %.1f ms' % max(longtasks) if longtasks else ''})")
    if inner:
        print("  of which (nested events can overlap): " + ", ".join(
            f"{BREAKDOWN[k].split(' (')[0]} {v:,.0f} ms" for k, v in sorted(inner.items(), key=lambda kv: -kv[1])))
    if frames:
        print(f"  bar frames rendered: {len(frames)}; render per frame: mean {statistics.mean(frames):.2f} ms, "
              f"p95 {sorted(frames)[int(len(frames) * 0.95) - 1]:.2f} ms, max {max(frames):.2f} ms")
    if events:
        print(f"  client event handling (session + store, no DOM): mean {statistics.mean(events):.3f} ms, "
              f"max {max(events):.2f} ms over {len(events)} events")
    print(f"  final DOM equals sanitize(render_markdown(answer)): {'yes' if same else 'NO'}")
    return 0 if same else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=4000)
    ap.add_argument("--chars-per-token", type=float, default=4.0)
    ap.add_argument("--tokens-per-second", type=float, default=200.0)
    ap.add_argument("--chunks-per-second", type=float, default=20.0)
    ap.add_argument("--naive", action="store_true", help="re-render the whole answer on every frame")
    ap.add_argument("--save-trace", metavar="FILE", help="write the Chromium trace (JSON) for chrome://tracing")
    return asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())

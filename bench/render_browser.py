"""Benchmark (not a test): the bar rendering a streamed 4,000-token Markdown answer at 200 tokens/s in Chromium.

The demo page boots as usual (Pyodide, the client, the store, the bar; the relay only serves the page and the
build). Then the answer streams in real time, ~10 tokens (~40 characters) every 50 ms for ~20 s, the same
synthetic answer as ``bench/render.py``, through one of two paths:

- default: a Python asyncio loop in the page calls the client's own event path (``client._on_sequenced``: the
  streaming session, the store, the bar with ``StreamingRenderer`` and ``sanitize.mjs``). Its asyncio sleeps cost
  the main thread ~1 ms per chunk themselves (Pyodide's event loop: a timer and a few message-channel tasks);
- ``--socket``: each event arrives as a WebSocket message (a Socket.IO text frame) on the page's live socket.io
  connection, from a JS timer, and takes the whole real path: engine.io/socket.io-client decoding,
  static/bridge.mjs (which batches streamed text), ``BrowserTransport``, the client, the store, the bar.

A Chromium trace (``devtools.timeline``) of the page's main thread gives the main-thread time (wall, and the
thread's CPU time, which a loaded machine does not inflate) and the longest task while streaming; the bar's own
frame and event times are measured in the page (``--profile`` also times Markdown, the sanitizer and scrolling).
``--naive`` re-renders the whole answer with ``render_markdown`` on every frame instead, to show what the
incremental path saves. The final DOM is checked against ``sanitize(render_markdown(answer))``.

    python bench/render_browser.py [--socket] [--naive] [--profile] [--tokens 4000] [--tokens-per-second 200]
                                   [--chunks-per-second 20] [--save-trace FILE]
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

from render import add_stream_arguments, synthetic_answer  # noqa: E402
from results import save  # noqa: E402
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
    BAR.messages._answer = naive_render

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

if PROFILE:
    # Time the parts of a frame from outside the bar: Markdown (StreamingRenderer.feed), the sink sanitizer
    # with its DOM insertion (one JS call each), scroll reads/writes; the rest of a frame is DOM bookkeeping.
    PARTS = STATS.setdefault("parts", {})
    def _timed(name, fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                PARTS[name] = PARTS.get(name, 0.0) + (time.perf_counter() - t0) * 1000
                PARTS[name + " (calls)"] = PARTS.get(name + " (calls)", 0) + 1
        return wrapper
    _render, _cls = BAR._markdown()
    class TimedRenderer(_cls):
        feed = _timed("markdown: StreamingRenderer.feed", _cls.feed)
    BAR._renderer_cls = TimedRenderer
    class TimedSanitizer:
        def __init__(self, js_module):
            self._m = js_module
            for name in dir(js_module):
                if not name.startswith("_"):
                    try:
                        fn = getattr(js_module, name)
                    except Exception:
                        continue
                    if callable(fn):
                        setattr(self, name, _timed("sanitizer: " + name, fn))
        def __getattr__(self, name):
            return getattr(self._m, name)
    BAR.sanitizer = TimedSanitizer(BAR.sanitizer)
    BAR._near_end = _timed("scroll: _near_end", BAR._near_end)
    BAR._scroll_to_end = _timed("scroll: _scroll_to_end", BAR._scroll_to_end)

# Warm up outside the measurement: the first Markdown render imports python-markdown.
asyncio.ensure_future(stream("## warm\\n\\nup *now*", [6, 12, 19], 0.01, "bench-warm"))
True
'''


#: ``--socket``: every WebSocket the page opens is kept, so the bench can hand the socket.io connection's one
#: synthetic messages (installed before any page script runs, like the socket.io-client module it serves).
CAPTURE_SOCKETS = """(() => {
  const Native = window.WebSocket;
  window.__benchSockets = [];
  window.WebSocket = class extends Native {
    constructor(...args) { super(...args); window.__benchSockets.push(this); }
  };
})();"""

#: ``--socket``: each event arrives in its own JS timer task as a WebSocket message (an Engine.IO/Socket.IO text
#: frame, ``42["name",{...}]``) on the page's live socket.io connection, and takes the whole real path:
#: engine.io-client and socket.io-client decode it, static/bridge.mjs hands it to BrowserTransport, the client
#: applies it.
SOCKET_STREAM = """async ({frames, interval}) => {
  const ws = window.__benchSockets.find((s) => s.readyState === 1 && s.url.includes("EIO="));
  if (!ws) throw new Error("no open socket.io WebSocket in the page");
  const sleep = (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms)));
  const times = [];
  const send = (data) => {
    const t = performance.now();
    ws.onmessage(new MessageEvent("message", {data}));
    times.push(performance.now() - t);
  };
  await sleep(0);
  const start = performance.now();
  send(frames[0]);
  for (let i = 1; i < frames.length - 2; i++) {
    await sleep(start + i * interval - performance.now());
    send(frames[i]);
  }
  send(frames[frames.length - 2]);
  send(frames[frames.length - 1]);
  await sleep(200);
  return [(performance.now() - start) / 1000, times];
}"""


def socket_frames(text: str, ends: list[int], mid: str, first_seq: int) -> list[str]:
    """The stream's events as Socket.IO event frames (``42`` + ``[name, payload]``), ``seq`` from ``first_seq``."""
    events: list[tuple[str, dict[str, Any]]] = [("completion.started", {"turn_id": "t-" + mid, "message_id": mid})]
    prev = 0
    for end in ends:
        events.append(("completion_stream", {"message_id": mid, "delta": text[prev:end]}))
        prev = end
    events.append(("completion.ended", {"message": {"id": mid, "role": "assistant", "content": text},
                                        "tool_messages": []}))
    events.append(("completion.finished", {"turn_id": "t-" + mid, "status": "done"}))
    return ["42" + json.dumps([name, {**payload, "seq": first_seq + i}], separators=(",", ":"))
            for i, (name, payload) in enumerate(events)]


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


def main_thread_tasks(
    trace: Any, t_start: float, t_end: float
) -> tuple[list[tuple[float, float]], str, dict[str, float]]:
    """``(wall ms, thread CPU ms)`` of top-level tasks on the busiest renderer main thread between two trace
    timestamps (µs), and the time of a few inner event kinds (ms)."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    mains = {(e["pid"], e["tid"]) for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name" and e["args"].get("name") == "CrRendererMain"}
    by_thread: dict[tuple[int, int], list[tuple[float, float]]] = {}
    inner: dict[tuple[int, int], dict[str, float]] = {}
    for e in events:
        if e.get("ph") != "X" or (e.get("pid"), e.get("tid")) not in mains:
            continue
        if not (t_start <= e["ts"] <= t_end):
            continue
        key = (e["pid"], e["tid"])
        if e.get("name") in ("RunTask", "ThreadControllerImpl::RunTask"):
            wall = e.get("dur", 0) / 1000
            by_thread.setdefault(key, []).append((wall, e.get("tdur", e.get("dur", 0)) / 1000))
        elif e.get("name") in BREAKDOWN:
            bucket = inner.setdefault(key, {})
            bucket[e["name"]] = bucket.get(e["name"], 0.0) + e.get("dur", 0) / 1000
    if not by_thread:
        return [], "no tasks found", {}
    key = max(by_thread, key=lambda k: sum(w for w, _ in by_thread[k]))
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
            if args.socket:
                await page.add_init_script(CAPTURE_SOCKETS)
            await page.add_init_script("""window.__longtasks = [];
                new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__longtasks.push(e.duration); })
                  .observe({type: 'longtask', buffered: true});""")
            await page.goto(relay.url + "/")
            await wait_mark(page, "autopilot:joined")
            await page.click("#autopilot-toggle-host >> button.toggle")
            run_py = "code => window.Autopilot.pyodide.runPythonAsync(code)"
            await page.evaluate(run_py, f"NAIVE = {bool(args.naive)!r}\nPROFILE = {bool(args.profile)!r}\n" + SETUP)
            await page.wait_for_timeout(800)
            await page.evaluate(run_py, "STATS['frames'].clear(); STATS['events'].clear(); STATS.get('parts', "
                                        "{}).clear(); True")
            await page.evaluate("window.__longtasks.length = 0")
            mark = "bench-" + ("naive" if args.naive else "inc")
            # The answer and its chunking go to the page before the measurement (parsing them is the bench's cost).
            await page.evaluate(run_py, f"import json\nTEXT = json.loads({json.dumps(json.dumps(text))})\n"
                                        f"ENDS = {ends!r}\nTrue")
            frames = socket_frames(text, ends, mark, await page.evaluate(run_py, "client.seq.last_seq + 1"))
            t_before = await page.evaluate("performance.timeOrigin + performance.now()")
            await browser.start_tracing(page=page,
                                        categories=["devtools.timeline", "disabled-by-default-devtools.timeline"])
            await page.evaluate("() => console.timeStamp('bench-start')")
            if args.socket:
                seconds, event_ms = await page.evaluate(SOCKET_STREAM, {"frames": frames, "interval": interval * 1000})
                stats_events: list[float] | None = event_ms
            else:
                seconds = await page.evaluate(run_py, f"await stream(TEXT, ENDS, {interval!r}, {mark!r})")
                stats_events = None
            await page.evaluate("() => console.timeStamp('bench-end')")
            trace = json.loads(await browser.stop_tracing())
            if args.save_trace:
                await asyncio.to_thread(Path(args.save_trace).write_text, json.dumps(trace))
            t_after = await page.evaluate("performance.timeOrigin + performance.now()")
            stats = json.loads(await page.evaluate(run_py, "json.dumps(STATS)"))
            if stats_events is not None:
                stats["events"] = stats_events
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
    timed, where, inner = main_thread_tasks(trace, t0, t1)
    tasks = [w for w, _ in timed]
    cpu = sum(c for _, c in timed)
    frames, events = stats["frames"], stats["events"]
    wall = (t_after - t_before) / 1000
    busy = sum(tasks)
    mode = "naive: render_markdown(whole answer) per frame" if args.naive else "incremental: StreamingRenderer"
    mode += ("; events arrive as WebSocket messages on the page's socket.io connection" if args.socket
             else "; events fed by a Python asyncio loop to client._on_sequenced")
    print(f"Chromium + Pyodide; the bar streaming a {len(text):,}-character (~{args.tokens:,}-token) Markdown answer "
          f"at {args.tokens_per_second:g} tokens/s: {len(ends)} chunks of ~{chars} characters every "
          f"{interval * 1000:.0f} ms, {seconds:.1f} s of streaming ({wall:.1f} s wall)")
    print(f"mode: {mode}")
    print(f"  main thread (trace, {where}): {busy:,.0f} ms busy in {len(tasks)} tasks "
          f"= {busy / max(seconds, 1e-9):.1f} ms per second of streaming ({busy / max(seconds, 1e-9) / 10:.1f} %)")
    # Wall time includes time the OS gave other processes mid-task (a loaded machine); thread CPU time does not.
    print(f"  main thread CPU (trace tdur): {cpu:,.0f} ms = {cpu / max(seconds, 1e-9):.1f} ms per second "
          f"({cpu / max(seconds, 1e-9) / 10:.1f} %); longest task CPU {max((c for _, c in timed), default=0):.1f} ms")
    print(f"  longest task: {max(tasks) if tasks else 0:.1f} ms; tasks over 50 ms: "
          f"{sum(1 for d in tasks if d > 50)} (PerformanceObserver longtask: {len(longtasks)}"
          f"{', longest %.1f ms' % max(longtasks) if longtasks else ''})")
    if inner:
        print("  of which (nested events can overlap): " + ", ".join(
            f"{BREAKDOWN[k].split(' (')[0]} {v:,.0f} ms" for k, v in sorted(inner.items(), key=lambda kv: -kv[1])))
    if frames:
        print(f"  bar frames rendered: {len(frames)} ({len(frames) / max(seconds, 1e-9):.1f} a second); "
              f"render per frame: mean {statistics.mean(frames):.2f} ms, "
              f"p95 {sorted(frames)[int(len(frames) * 0.95) - 1]:.2f} ms, max {max(frames):.2f} ms")
    if events:
        what = ("WebSocket message: socket.io decoding + bridge + transport + client" if args.socket
                else "client event handling (session, store; the stream's Markdown + sanitizing when it asks for a "
                     "frame)")
        print(f"  {what}: mean {statistics.mean(events):.3f} ms, "
              f"max {max(events):.2f} ms over {len(events)} events")
    for name, value in sorted(stats.get("parts", {}).items()):
        if not name.endswith("(calls)"):
            calls = stats["parts"].get(name + " (calls)", 0)
            print(f"  profile: {name}: {value:,.0f} ms in {calls} calls ({value / max(calls, 1):.2f} ms each)")
    print(f"  final DOM equals sanitize(render_markdown(answer)): {'yes' if same else 'NO'}")
    save("render_browser", {
        "mode": "naive" if args.naive else "incremental", "socket": bool(args.socket), "chars": len(text),
        "chunks": len(ends), "chunks_per_second": args.chunks_per_second, "streaming_s": seconds,
        "main_thread_busy_ms": busy, "main_thread_share_pct": busy / max(seconds, 1e-9) / 10,
        "main_thread_cpu_ms": cpu, "main_thread_cpu_pct": cpu / max(seconds, 1e-9) / 10,
        "longest_task_ms": max(tasks, default=0), "longest_task_cpu_ms": max((c for _, c in timed), default=0),
        "tasks_over_50_ms": sum(1 for d in tasks if d > 50), "longtask_entries": len(longtasks),
        "renders_per_second": len(frames) / max(seconds, 1e-9), "inner_ms": inner,
        "profile_ms": stats.get("parts", {}), "final_dom_equal": same})
    return 0 if same else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_stream_arguments(ap)
    ap.add_argument("--naive", action="store_true", help="re-render the whole answer on every frame")
    ap.add_argument("--socket", action="store_true",
                    help="events arrive as WebSocket messages: socket.io-client, static/bridge.mjs, BrowserTransport")
    ap.add_argument("--profile", action="store_true", help="time the parts of the bar's frames (adds overhead)")
    ap.add_argument("--save-trace", metavar="FILE", help="write the Chromium trace (JSON) for chrome://tracing")
    return asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())

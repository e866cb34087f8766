"""Main-thread blocking measured from a Chrome trace (CDP tracing), not from the Long Tasks API.

Why: in this Chromium, work that runs after ``await WebAssembly.instantiate()`` / ``compile()`` is reported
neither as a ``longtask`` nor as a ``long-animation-frame`` entry, and Pyodide's Python start runs exactly there.
A trace sees every task the renderer's main thread ran. :func:`tracing` records one; :func:`main_thread_tasks`
finds the page's renderer main thread in it and returns its top-level task durations; :func:`blocking` sums
them up the way Lighthouse does (longest task, total blocking time = the part of each task over 50 ms).

:data:`LONGTASK_SCRIPT` / :data:`LONGTASK_COLLECT` give the Long Tasks API's view of the same visit, so benches
can print both side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

CATEGORIES = ",".join([
    "devtools.timeline",
    "disabled-by-default-devtools.timeline",
    "toplevel",
    "__metadata",
])

#: Tasks at least this long are "long" (the Long Tasks API's and Lighthouse's threshold).
LONG_MS = 50.0

LONGTASK_SCRIPT = """
window.__longtasks = [];
try {
  new PerformanceObserver(list => {
    for (const e of list.getEntries()) window.__longtasks.push([e.startTime, e.duration]);
  })
    .observe({type: 'longtask', buffered: true});
} catch (e) {}
"""

LONGTASK_COLLECT = "() => (window.__longtasks || []).map(([, d]) => d)"


@dataclass
class Blocking:
    """Main-thread blocking of one visit."""

    longest_ms: float
    tbt_ms: float
    busy_ms: float
    long_tasks: int

    @classmethod
    def of(cls, durations: list[float]) -> Blocking:
        """From task durations in ms."""
        return cls(
            longest_ms=max(durations, default=0.0),
            tbt_ms=sum(max(0.0, d - LONG_MS) for d in durations),
            busy_ms=sum(durations),
            long_tasks=sum(1 for d in durations if d > LONG_MS),
        )


class Trace:
    """The events of one trace."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.done = asyncio.Event()


@contextlib.asynccontextmanager
async def tracing(context: Any, page: Any) -> AsyncIterator[Trace]:
    """Record a Chrome trace around the block (browser-wide: every renderer is in it)."""
    cdp = await context.new_cdp_session(page)
    trace = Trace()
    cdp.on("Tracing.dataCollected", lambda p: trace.events.extend(p.get("value", [])))
    cdp.on("Tracing.tracingComplete", lambda p: trace.done.set())
    await cdp.send("Tracing.start", {"categories": CATEGORIES, "transferMode": "ReportEvents"})
    try:
        yield trace
    finally:
        await cdp.send("Tracing.end")
        await asyncio.wait_for(trace.done.wait(), 60)
        with contextlib.suppress(Exception):
            await cdp.detach()


def _renderer_mains(events: list[dict[str, Any]]) -> dict[int, int]:
    """pid -> tid of every renderer main thread in the trace."""
    out = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("args", {}).get("name") == "CrRendererMain":
            out[e["pid"]] = e["tid"]
    return out


def _page_pid(events: list[dict[str, Any]], url_prefix: str) -> int | None:
    """The renderer process that committed a frame of ``url_prefix`` last."""
    pid = None
    for e in events:
        data = (e.get("args") or {}).get("data") or {}
        if e.get("name") == "FrameCommittedInBrowser" and str(data.get("url", "")).startswith(url_prefix):
            pid = data.get("processId", pid)
        elif e.get("name") == "TracingStartedInBrowser":
            for f in data.get("frames") or []:
                if str(f.get("url", "")).startswith(url_prefix) and f.get("processId"):
                    pid = f["processId"]
    return pid


def main_thread_tasks(trace: Trace, url_prefix: str, start_us: float | None = None) -> list[float]:
    """Durations (ms) of the top-level tasks the page's renderer main thread ran (``RunTask`` and the
    other ``toplevel`` task events), optionally only those starting at or after ``start_us`` (trace clock)."""
    mains = _renderer_mains(trace.events)
    pid = _page_pid(trace.events, url_prefix)
    if pid not in mains:
        # no commit seen (a cached document): the renderer main thread that worked most
        busy: dict[int, float] = {}
        for e in trace.events:
            if e.get("ph") == "X" and e.get("name") == "RunTask" and mains.get(e["pid"]) == e["tid"]:
                busy[e["pid"]] = busy.get(e["pid"], 0.0) + e.get("dur", 0)
        if not busy:
            return []
        pid = max(busy, key=lambda p: busy[p])
    tid = mains[pid]
    tasks: list[tuple[float, float]] = []
    for e in trace.events:
        if e.get("pid") != pid or e.get("tid") != tid or e.get("ph") != "X" or e.get("name") != "RunTask":
            continue
        if start_us is not None and e["ts"] < start_us:
            continue
        tasks.append((e["ts"], e.get("dur", 0) / 1000.0))
    # RunTask events do not nest on one thread, but keep only outermost ones in case a build reports both.
    tasks.sort()
    out: list[float] = []
    end = -1.0
    for ts, dur in tasks:
        if ts >= end:
            out.append(dur)
            end = ts + dur * 1000.0
    return out


INPUT_PROBE = """() => {
  if (window.__probe) return;
  const b = document.createElement('button');
  b.id = '__probe'; b.textContent = 'probe';
  b.style.cssText = 'position:fixed;left:4px;top:4px;width:40px;height:24px;z-index:1';
  const delays = window.__probe = [];
  b.addEventListener('click', (ev) => delays.push(performance.now() - ev.timeStamp));
  document.body.appendChild(b);
}"""


def run_tasks(trace: Trace, pid: int | None, tid: int | None,
              after_us: float = 0.0) -> list[tuple[float, float, float]]:
    """(start µs, wall ms, CPU ms) of the ``RunTask`` events of one thread from ``after_us`` on, in order."""
    out = [(float(e["ts"]), e.get("dur", 0) / 1000.0, e.get("tdur", 0) / 1000.0) for e in trace.events
           if e.get("pid") == pid and e.get("tid") == tid and e.get("ph") == "X" and e.get("name") == "RunTask"
           and e["ts"] >= after_us]
    out.sort()
    return out


def main_thread_cpu(trace: Trace, url_prefix: str) -> list[float]:
    """CPU time (ms, the trace's thread time) of each top-level task of the page's main thread. On a loaded
    machine a task's wall duration also counts the time the thread waited for a core: this tells our work apart
    from the waiting."""
    pid = _page_pid(trace.events, url_prefix)
    return [cpu for _, _, cpu in run_tasks(trace, pid, _renderer_mains(trace.events).get(pid or -1))]


async def probe_input(page: Any, seconds: float, every_s: float = 0.05,
                      until: asyncio.Event | None = None) -> list[float]:
    """Click a host-page button every ``every_s`` for ``seconds`` (and on until ``until`` is set, if given; real
    input through the browser) and return each click's input delay in ms (handler start − the event's timestamp)."""
    await page.evaluate(INPUT_PROBE)
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    clicks = []
    while loop.time() < end or (until is not None and not until.is_set()):
        clicks.append(asyncio.ensure_future(page.mouse.click(20, 14)))
        await asyncio.sleep(every_s)
    await asyncio.gather(*clicks, return_exceptions=True)
    result: list[float] = await page.evaluate("() => window.__probe.slice()")
    return result

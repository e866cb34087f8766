"""Where the pre-warm worker's time goes on a tab's first view, from a Chrome trace.

A first page view (fresh browser) with the default tag prepares on idle: the pre-warm worker fetches Pyodide's
files, compiles the wasm, starts Python, imports the widget and snapshots it (static/prewarm-worker.js). On a cold
visit where the reader reaches for the widget at once, that is most of the path to the first reply. This records a
trace with V8's sampling profiler from the navigation until the worker is done (mark ``prepared``) and prints, per
visit:

- the worker thread's time in 100-ms windows from its first sample, by what its samples were doing: ``idle``
  (waiting: for files, for the compile on V8's background threads), ``wasm`` (Python running), ``gc``,
  ``program`` (V8's own work, lazy compilation among it) or the innermost JavaScript function;
- the boot files' network timing on the same clock (request sent, response, last data, finished; bytes as served);
- V8's wasm events of 3 ms or more (streaming, compile, instantiation) with the thread that ran them;
- the loader's and worker's marks (ms from the navigation).

The profiler slows what it samples: compare visits of one run, not these times with ``bench/peer.py``'s.

    python bench/worker_profile.py [-n 2] [--dist DIR] [--interval-us 200]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from chrome_trace import Trace
from jank import host_page
from restore_profile import MARKS, PROFILE_CATEGORIES, WASM_CATEGORIES, ProfiledTrace, Sample, profiles
from results import save
from support import CHROMIUM, CHROMIUM_ARGS, PageServer, start_relay

CATEGORIES = (PROFILE_CATEGORIES + "," + WASM_CATEGORIES).split(",")
#: The files a first view's worker fetches (by the end of their URL).
BOOT_FILES = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib_core.zip", "bundle.zip",
              "prewarm-worker.js")
WINDOW_MS = 100
#: V8's wasm events that come by the hundred (lazy compilation of single functions, the background tier-up and
#: its bookkeeping, the streaming decoder's chunks): summed per thread instead of listed.
REPEATED = {"wasm.CompileLazy", "wasm.CompileBaseline", "wasm.ExecuteCompilationUnits", "wasm.TopTierCompilation",
            "wasm.AddCompiledCode", "wasm.OnFinishedUnits", "wasm.CompilationChunkFinished",
            "wasm.OnBytesReceived", "wasm.ValidateFunctionsStreaming", "wasm.CompileTopTier",
            "wasm.CompileFunction", "wasm.ProcessFunctionBody"}


def kind(sample: Sample) -> str:
    """What one sample of the worker's thread was doing (see the module's docstring)."""
    if any(url.endswith(".wasm") or url.startswith("wasm") for _, url, _, _ in sample.stack):
        return "wasm"
    inner = sample.stack[-1][0] if sample.stack else "(no sample)"
    if inner in ("(idle)", "(program)"):
        return inner.strip("()")
    if inner == "(garbage collector)":
        return "gc"
    named = next((fn for fn, url, _, _ in reversed(sample.stack) if url), inner)
    return "js:" + named[:24]


def windows(samples: list[Sample], cap_us: float) -> list[tuple[int, collections.Counter[str]]]:
    """Ms per kind in each 100-ms window from the first sample. A sample stands for the time to the next one, at most
    two sampling intervals, so that a thread waiting for a core is not counted as working."""
    out: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    t0 = samples[0].ts
    for a, b in zip(samples, samples[1:], strict=False):
        out[int((a.ts - t0) / 1000 // WINDOW_MS)][kind(a)] += min(b.ts - a.ts, cap_us) / 1000
    return sorted(out.items())


def network(trace: Trace, t0: float) -> list[dict[str, Any]]:
    """The boot files' requests: ms from ``t0`` (trace clock, µs) of send, response, last data and finish."""
    reqs: dict[str, dict[str, Any]] = {}
    for e in trace.events:
        data = (e.get("args") or {}).get("data") or {}
        rid, name = data.get("requestId"), e.get("name")
        at = (e.get("ts", 0) - t0) / 1000
        if name == "ResourceSendRequest":
            file = str(data.get("url", "")).split("?")[0].rsplit("/", 1)[-1]
            if file in BOOT_FILES:
                reqs[rid] = {"file": file, "send": at}
        elif rid in reqs and name == "ResourceReceiveResponse":
            reqs[rid]["response"] = at
        elif rid in reqs and name == "ResourceReceivedData":
            reqs[rid]["last data"] = at
        elif rid in reqs and name == "ResourceFinish":
            reqs[rid].update(finish=at, bytes=data.get("encodedDataLength"))
    return list(reqs.values())


def thread_names(trace: Trace) -> dict[tuple[int, int], str]:
    """Each (pid, tid)'s thread name from the trace's metadata."""
    return {(e["pid"], e["tid"]): (e.get("args") or {}).get("name", "")
            for e in trace.events if e.get("ph") == "M" and e.get("name") == "thread_name"}


async def one_visit(pw: Any, site: str, interval_us: int) -> dict[str, Any]:
    """One traced first view in a fresh browser, until the worker is done; its report printed, its figures returned."""
    browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    try:
        page = await (await browser.new_context()).new_page()
        recording = ProfiledTrace(await page.context.new_cdp_session(page), interval_us, CATEGORIES)
        await recording.start()
        await page.goto(site, wait_until="domcontentloaded")
        await page.wait_for_function("() => performance.getEntriesByName('autopilot:prepared').length > 0",
                                     timeout=90_000, polling=100)
        trace = await recording.end()
        marks = await page.evaluate(MARKS)
    finally:
        await browser.close()
    names = thread_names(trace)
    workers = [key for key, name in names.items() if name.startswith("DedicatedWorker")]
    found = max(((key, profiles(trace, *key)) for key in workers), key=lambda kv: len(kv[1]), default=None)
    if found is None or not found[1]:
        raise RuntimeError("no sampled worker thread in the trace")
    samples = found[1]
    t0 = samples[0].ts
    print("marks (ms from the navigation):",
          ", ".join(f"{k.removeprefix('autopilot:')} {v:.0f}" for k, v in sorted(marks.items(), key=lambda kv: kv[1])
                    if k.startswith("autopilot:")))
    total: collections.Counter[str] = collections.Counter()
    print(f"worker thread, ms per {WINDOW_MS}-ms window from its first sample ({len(samples)} samples):")
    for i, counts in windows(samples, 2 * interval_us):
        total.update(counts)
        print(f"  {i * WINDOW_MS:5d}  " + "  ".join(f"{k} {v:.0f}" for k, v in counts.most_common(5) if v >= 1))
    print("  in all: " + ", ".join(f"{k} {v:.0f}" for k, v in total.most_common(8)))
    print("boot files (ms on the same clock; bytes as served):")
    for r in network(trace, t0):
        print("  " + ", ".join(f"{k} {v:.0f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()))
    print("V8's wasm events (ms on the same clock; those that run many times summed per thread):")
    summed: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    for e in trace.events:
        if "wasm" not in (e.get("cat") or "") or e.get("ph") != "X":
            continue
        thread = names.get((e.get("pid", 0), e.get("tid", 0)), str(e.get("tid")))
        at, ms = (e["ts"] - t0) / 1000, e.get("dur", 0) / 1000
        if e["name"] in REPEATED:
            summed[(e["name"], thread)] += [at, ms]
        elif ms >= 3:
            print(f"  {at:6.0f} {ms:5.0f} ms  {e['name']}  ({thread})")
    for (name, thread), flat in sorted(summed.items()):
        ats, durs = flat[0::2], flat[1::2]
        print(f"  {name} ({thread}): {len(durs)} times, {sum(durs):.0f} ms in all, from {min(ats):.0f} to "
              f"{max(a + d for a, d in zip(ats, durs, strict=True)):.0f}")
    return {"marks": marks, "worker_samples": len(samples), "worker_ms": dict(total.most_common()),
            "boot_files": network(trace, t0),
            "wasm_events_ms": {f"{name} ({thread})": sum(flat[1::2]) for (name, thread), flat in summed.items()}}


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from playwright.async_api import async_playwright

    pages = PageServer()
    relay = start_relay(Path(tempfile.mkdtemp(prefix="bench-worker-")), extra=[
        "--app", f"demo={pages.origin}", "--demo-chunk-delay-ms", "0", *(["--dist", args.dist] if args.dist else [])])
    try:
        pages.add("/site/1.html", host_page(relay.url, "idle", 1))
        async with async_playwright() as pw:
            visits = []
            for i in range(args.n):
                print(f"\n## visit {i + 1}")
                visits.append(await one_visit(pw, f"{pages.origin}/site/1.html", args.interval_us))
    finally:
        relay.stop()
        pages.close()
    return visits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--dist", default=None, help="serve this build folder instead of the checkout's")
    ap.add_argument("--interval-us", type=int, default=200)
    args = ap.parse_args()
    load = os.getloadavg()
    print(f"# worker profile {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
          f"load average {load[0]:.1f} {load[1]:.1f}, n={args.n}")
    visits = asyncio.run(run(args))
    save("worker_profile", {"n": args.n, "dist": args.dist, "interval_us": args.interval_us, "visits": visits})


if __name__ == "__main__":
    main()

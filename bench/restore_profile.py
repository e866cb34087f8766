"""What the page's longest main-thread task is made of when it restores the pre-warm worker's Python.

A first page view (fresh context) with the default tag prepares on idle: the pre-warm worker starts Python off
the main thread and hands the page a memory snapshot. The reader then hovers the toggle, which starts Python on the
page: the restore. (``--early``: the reader hovers as soon as the toggle shows, while the worker still starts
Python; ``--later``: the site's second page, which restores the snapshot the first view stored;
``--extra-views K``: K later views before the traced one.) This records a Chrome trace with V8's sampling profiler in it
(``disabled-by-default-v8.cpu_profiler``) from the hover until the widget has joined the relay, takes the page's
main-thread tasks of that stretch and splits each long one into phases by the JavaScript functions on the sampled
stacks (see :data:`PHASES`). A phase's time is its samples' time (each sample counts to the next one, at most two
sampling intervals: ≈ CPU time on a loaded machine; ``--wall``: the whole gap); the rest of a task (no JS on the
stack, or a stack no phase matches) is printed as such. Each task's own wall and CPU time (``RunTask``'s duration
and thread time) are exact. Other tasks of 50 ms or more in the window are listed with the trace events in them
(starting V8's profiler itself costs one such task of ~50 ms of CPU, before the hover; it is not the widget's).
With ``--wasm`` each visit also says how many wasm functions its main thread compiled lazily (on their first
call) and for how long, and whether V8 took compiled code from elsewhere: a module still alive in the renderer
process (``GetNativeModuleFromCache`` without compiling) or its serialized code cache (a deserialization event).
Tracing each lazy compile slows those tasks: compare their times only with other ``--wasm`` runs.

The edit in ``buildtools/patch.py`` that yields between the phases was chosen from this profile
(docs/performance.md, "The restore's main-thread tasks").

    python bench/restore_profile.py [-n 3] [--dist DIR] [--before-dist DIR] [--interval-us 200] [--tree] [--wall]
        [--whole] [--wasm] [--early | --later [--extra-views K]]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import datetime
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from chrome_trace import CATEGORIES, Trace, _page_pid, _renderer_mains, run_tasks
from jank import SETTLE_S, TOGGLE, host_page, settled
from results import save
from support import CHROMIUM, CHROMIUM_ARGS, PageServer, start_relay

PROFILE_CATEGORIES = CATEGORIES + ",disabled-by-default-v8.cpu_profiler,blink.user_timing,v8.execute"
#: V8's wasm compilation events, per function where it compiles lazily.
WASM_CATEGORIES = "v8.wasm,disabled-by-default-v8.wasm.detailed"

#: Phases of the restore, each recognised by a function on the sampled stack; the innermost match wins, so a phase
#: nested in another (updateGOT inside receiveInstance) counts as itself. Emscripten's names in pyodide.asm.mjs are
#: not minified; pyodide.mjs's are (its functions are told apart by the ones they call).
PHASES: list[tuple[str, tuple[str, ...]]] = [
    ("module factory: static init (_createPyodideModule)", ("_createPyodideModule",)),
    ("instantiate the handed-over module", ("WebAssembly.instantiateStreaming", "instantiate", "Instance")),
    ("receiveInstance: other", ("receiveInstance", "receiveInstanceInSteps", "getDylinkMetadata")),
    ("receiveInstance: mergeLibSymbols", ("mergeLibSymbols",)),
    ("receiveInstance: applySignatureConversions", ("applySignatureConversions",)),
    ("receiveInstance: assignWasmExports (compiled on its first call)", ("assignWasmExports",)),
    ("receiveInstance: updateGOT (every export into the table)", ("updateGOT",)),
    ("receiveInstance: reportUndefinedSymbols (JS imports wrapped as wasm)", ("reportUndefinedSymbols",)),
    ("runtime init: run, preRun, initRuntime", ("run", "doRun", "preRun", "initRuntime", "callRuntimeCallbacks")),
    ("stdlib zip written to the FS", ("writeFile",)),
    ("restoreSnapshot (the snapshot copied into memory)", ("API.restoreSnapshot",)),
    ("finalizeBootstrap (Python-side set-up)", ("API.finalizeBootstrap",)),
    ("finalizeSetup (sys.path, excepthook, streams)", ("API.initializeStreams", "set_excepthook")),
    ("widget: handOver (import widget.browser, boot)", ("handOver",)),
]
#: A sample whose innermost frame is loadPyodide's own (minified) code: mostly V8 compiling the 1.2 MB module
#: factory of pyodide.asm.mjs on its first call (a lazily compiled function's compile counts to its caller).
LOADER = "pyodide.mjs: loadPyodide's own code (compiling the module factory on its first call)"
WIDGET = "widget: after loadPyodide (lazy stdlib, bundle.zip, sys.path, reseed, JS modules)"
_BY_NAME = {name: label for label, names in PHASES for name in names}


Frames = list[tuple[str, str, int, int]]


@dataclass
class Sample:
    """One profiler sample: its time (trace clock, µs) and its stack, outermost first."""

    ts: float
    stack: Frames  # (function, url, line, column), outermost first


@dataclass
class Profile:
    """The samples of one thread's profile, merged from its chunks."""

    nodes: dict[int, dict[str, Any]] = field(default_factory=dict)
    samples: list[tuple[float, int]] = field(default_factory=list)


def _stack(prof: Profile, node_id: int, cache: dict[int, Frames]) -> Frames:
    """The stack of a profile node, outermost first (memoised in ``cache``)."""
    if node_id in cache:
        return cache[node_id]
    n = prof.nodes.get(node_id)
    if n is None:
        return []
    cf = n.get("callFrame") or {}
    parent = _stack(prof, n["parent"], cache) if "parent" in n else []
    s = parent + [(cf.get("functionName") or "(anonymous)", cf.get("url") or "", cf.get("lineNumber", -1),
                   cf.get("columnNumber", -1))]
    cache[node_id] = s
    return s


def profiles(trace: Trace, pid: int, tid: int) -> list[Sample]:
    """Every sample V8's profiler took on thread ``tid`` of ``pid``, with its stack."""
    by_id: dict[str, Profile] = {}
    starts: dict[str, float] = {}
    for e in trace.events:
        if e.get("pid") != pid or e.get("tid") != tid:
            continue
        data = (e.get("args") or {}).get("data") or {}
        if e.get("name") == "Profile":
            starts[e["id"]] = float(data.get("startTime", e["ts"]))
            by_id.setdefault(e["id"], Profile())
    # Chunks may come from the sampler thread: match them by the profile id (ids count per process).
    last_ts: dict[str, float] = dict(starts)
    for e in trace.events:
        if e.get("name") != "ProfileChunk" or e.get("pid") != pid or e.get("id") not in by_id:
            continue
        data = (e.get("args") or {}).get("data") or {}
        prof = by_id[e["id"]]
        cpu = data.get("cpuProfile") or {}
        for n in cpu.get("nodes") or []:
            prof.nodes[n["id"]] = n
        t = last_ts[e["id"]]
        for node_id, delta in zip(cpu.get("samples") or [], data.get("timeDeltas") or [], strict=False):
            t += delta
            prof.samples.append((t, node_id))
        last_ts[e["id"]] = t
    out: list[Sample] = []
    for prof in by_id.values():
        cache: dict[int, Frames] = {}
        for ts, node_id in prof.samples:
            out.append(Sample(ts, _stack(prof, node_id, cache)))
    out.sort(key=lambda s: s.ts)
    return out


def phase_of(stack: Frames) -> str:
    """The phase a sampled stack belongs to (see :data:`PHASES`)."""
    found = None
    for fn, url, _, _ in stack:
        if fn in _BY_NAME:
            found = _BY_NAME[fn]
        elif url.endswith("/autopilot.js"):
            found = WIDGET
    if found is not None:
        return found
    if stack and stack[-1][1].endswith("/pyodide.mjs"):
        return LOADER
    names = [f for f, _, _, _ in stack]
    if not names or names == ["(root)"]:
        return "(no sample)"
    if names[-1] in ("(program)", "(idle)", "(garbage collector)"):
        return names[-1]
    return "other: " + " > ".join(names[-3:])


def inner_events(trace: Trace, pid: int, tid: int, task: tuple[float, float, float]) -> list[str]:
    """The longest trace events inside a task (what a task without JavaScript did)."""
    start, wall_ms, _ = task
    found = []
    for e in trace.events:
        if (e.get("pid") == pid and e.get("tid") == tid and e.get("ph") == "X" and e.get("name") != "RunTask"
                and start <= e["ts"] <= start + wall_ms * 1000):
            found.append((e.get("dur", 0) / 1000.0, e.get("tdur", 0) / 1000.0, e["name"]))
    found.sort(reverse=True)
    return [f"event {name}: {dur:.0f} ms wall / {tdur:.0f} ms CPU" for dur, tdur, name in found[:8]]


#: A gap between two samples longer than this many sampling intervals is time the thread waited for a core (on a
#: loaded machine): by default each sample counts for at most this, which approximates CPU time (``--wall``: the
#: whole gap, i.e. wall time).
CAP_INTERVALS = 2.0
_cap_us = [float("inf")]


def _weighted(samples: list[Sample], start: float, wall_ms: float) -> list[tuple[Sample, float]]:
    """The samples in [start, start + wall) each with the ms it stands for (the time to the next, capped)."""
    times = [s.ts for s in samples]  # (sorted)
    inside = samples[bisect.bisect_left(times, start):bisect.bisect_right(times, start + wall_ms * 1000)]
    if not inside:
        return []
    ends = [s.ts for s in inside[1:]] + [start + wall_ms * 1000]
    return [(a, min(b - a.ts, _cap_us[0]) / 1000.0) for a, b in zip(inside, ends, strict=True)]


def split(samples: list[Sample], start: float, wall_ms: float) -> dict[str, float]:
    """Milliseconds per phase in the task [start, start + wall): each sample stands for the time to the next."""
    out: dict[str, float] = defaultdict(float)
    for a, ms in _weighted(samples, start, wall_ms):
        out[phase_of(a.stack)] += ms
    return dict(out)


def tree(samples: list[Sample], start: float, wall_ms: float, min_ms: float) -> list[str]:
    """The sampled call tree of the task (inclusive ms per frame), frames under ``min_ms`` left out."""
    root: dict[str, Any] = {"ms": 0.0, "kids": {}}
    for a, ms in _weighted(samples, start, wall_ms):
        node = root
        node["ms"] += ms
        for fn, url, line, col in a.stack[1:]:
            key = f"{fn} {url.rsplit('/', 1)[-1]}:{line}:{col}"
            node = node["kids"].setdefault(key, {"ms": 0.0, "kids": {}})
            node["ms"] += ms
    lines: list[str] = []

    def walk(node: dict[str, Any], depth: int) -> None:
        for key, kid in sorted(node["kids"].items(), key=lambda kv: -kv[1]["ms"]):
            if kid["ms"] >= min_ms:
                lines.append(f"{kid['ms']:7.1f} {'  ' * depth}{key}")
                walk(kid, depth + 1)

    walk(root, 0)
    return lines


#: Every performance mark of the page, name → time (ms from the navigation).
MARKS = "Object.fromEntries(performance.getEntriesByType('mark').map(m => [m.name, m.startTime]))"


class ProfiledTrace:
    """A Chrome trace of one page's browser with V8's sampling profiler in it, started and ended on demand."""

    def __init__(self, cdp: Any, interval_us: int, categories: list[str]) -> None:
        self.cdp, self.interval_us, self.categories = cdp, interval_us, categories
        self.trace = Trace()
        cdp.on("Tracing.dataCollected", lambda p: self.trace.events.extend(p.get("value", [])))
        cdp.on("Tracing.tracingComplete", lambda p: self.trace.done.set())

    async def start(self) -> None:
        """Start recording (sampling every ``interval_us``)."""
        await self.cdp.send("Tracing.start", {"traceConfig": {
            "includedCategories": self.categories, "enableSampling": True,
        }, "transferMode": "ReportEvents"})
        # The sampling interval of the trace's profiler follows the Profiler domain's setting.
        await self.cdp.send("Profiler.enable")
        await self.cdp.send("Profiler.setSamplingInterval", {"interval": self.interval_us})

    async def end(self) -> Trace:
        """Stop recording; the trace once all of it has arrived."""
        await self.cdp.send("Tracing.end")
        await asyncio.wait_for(self.trace.done.wait(), 60)
        return self.trace


async def one_visit(
    pw: Any, site: str, interval_us: int, whole: bool = False, early: bool = False, later: bool = False,
    extra_views: int = 0, wasm: bool = False,
) -> dict[str, Any]:
    """One visit in a fresh browser where the reader hovers the toggle once the widget is prepared (``early``: as
    soon as the toggle shows, while the worker is still starting Python; ``later``: the site's second page after a
    first view that stored its snapshot, the reader hovering once it is idle); its trace, analysed. With ``whole``
    (implied by ``early``) the trace starts before the navigation (as bench/jank.py's do), else at the hover."""
    whole = whole or early
    browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    try:
        ctx = await browser.new_context()
        page = await ctx.new_page()
        recording = ProfiledTrace(await ctx.new_cdp_session(page), interval_us,
                                  (PROFILE_CATEGORIES + ("," + WASM_CATEGORIES if wasm else "")).split(","))

        if later:  # a first view that stores its snapshot, then the traced one
            await page.goto(site + "1.html", wait_until="domcontentloaded")
            await page.hover(TOGGLE)
            await page.wait_for_function("() => performance.getEntriesByName('autopilot:snapshot-stored').length > 0",
                                         timeout=90_000, polling=100)
            for i in range(extra_views):  # later views before the traced one, the site's two pages in turn
                await page.goto(site + ("2.html" if i % 2 == 0 else "1.html"), wait_until="domcontentloaded")
                await settled(page, 60)
                await page.hover(TOGGLE)
                await settled(page, 60)
                await asyncio.sleep(SETTLE_S)
        if whole:
            await recording.start()
        await page.goto(site + ("2.html" if later and extra_views % 2 == 0 else "1.html"),
                        wait_until="domcontentloaded")
        # (not jank's settled(): under load the worker may take longer than its 4-s "idle" window)
        if later:
            await settled(page, 60)
        elif not early:
            await page.wait_for_function("() => performance.getEntriesByName('autopilot:prepared').length > 0",
                                         timeout=90_000, polling=100)
        if not whole:
            await recording.start()
        await page.hover(TOGGLE)
        joined = await settled(page, 60)
        await asyncio.sleep(SETTLE_S)
        trace = await recording.end()
        marks = await page.evaluate(MARKS)
    finally:
        await browser.close()
    pid = _page_pid(trace.events, site)
    mains = _renderer_mains(trace.events)
    if pid not in mains:
        pid = next(iter(mains))
    tid = mains[pid]
    samples = profiles(trace, pid, tid)
    known = {label for label, _ in PHASES} | {WIDGET, LOADER}
    restore = []  # the tasks that run a part of the restore, in order
    others = []  # other tasks of 50 ms or more in the window
    every = run_tasks(trace, pid, tid)
    for t in every:
        sp = split(samples, t[0], t[1])
        if sum(ms for name, ms in sp.items() if name in known) >= 1.0:
            restore.append((t, sp, tree(samples, t[0], t[1], 1.5)))
        elif t[1] >= 50:
            others.append((t, sp, tree(samples, t[0], t[1], 1.5) + inner_events(trace, pid, tid, t)))
    if not restore:
        raise RuntimeError("no task of the restore found in the trace")
    return {"joined": joined == "joined", "restore": restore, "others": others, "samples": len(samples),
            "marks": marks, "busy_wall": sum(t[1] for t in every), "busy_cpu": sum(t[2] for t in every),
            "wasm": wasm_code(trace, pid, tid) if wasm else None}


def wasm_code(trace: Trace, pid: int, tid: int) -> dict[str, float]:
    """How the page's main thread got its wasm code: functions compiled lazily there (count, ms), and whether V8
    took compiled code from elsewhere (a module alive in the process, without compiling; a serialized code cache)."""
    lazy = [e.get("dur", 0) / 1000 for e in trace.events
            if e.get("name") == "wasm.CompileLazy" and e.get("pid") == pid and e.get("tid") == tid
            and e.get("ph") == "X"]
    names = {e.get("name", "") for e in trace.events if e.get("pid") == pid and "wasm" in (e.get("cat") or "")}
    return {"lazy": len(lazy), "lazy_ms": sum(lazy), "from_cache": float(any("Deserialize" in n for n in names))}


async def run(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    from playwright.async_api import async_playwright

    work = Path(tempfile.mkdtemp(prefix="bench-restore-"))
    pages = PageServer()
    extra = ["--app", f"demo={pages.origin}", "--demo-chunk-delay-ms", "0"]
    builds = {"": start_relay(work, extra=extra + (["--dist", args.dist] if args.dist else []))}
    if args.before_dist:
        builds[" (before)"] = start_relay(work, extra=[*extra, "--dist", args.before_dist])
    sites = {}
    for i, (label, relay) in enumerate(builds.items()):
        for n in (1, 2):
            pages.add(f"/site{i}/{n}.html", host_page(relay.url, "idle", n, f"/site{i}/"))
        sites[label] = f"{pages.origin}/site{i}/"
    out: dict[str, list[dict[str, Any]]] = {label: [] for label in builds}
    try:
        async with async_playwright() as pw:
            for i in range(args.n):  # interleaved, each round in another order
                order = list(builds)[i % len(builds):] + list(builds)[:i % len(builds)]
                for label in order:
                    out[label].append(
                        await one_visit(pw, sites[label], args.interval_us, args.whole, args.early, args.later,
                                        args.extra_views, args.wasm)
                    )
    finally:
        for relay in builds.values():
            relay.stop()
        pages.close()
    return out


def _med(vals: list[float]) -> str:
    return f"{statistics.median(vals):.0f} ({min(vals):.0f}-{max(vals):.0f})"


def report(label: str, results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """Print each visit's restore tasks and the medians."""
    print(f"\n## build{label or ' (this checkout)'}")
    totals: dict[str, list[float]] = defaultdict(list)
    longest_wall, longest_cpu, counts = [], [], []
    for i, r in enumerate(results):
        tasks_ = r["restore"]
        walls = [w for (_, w, _), _, _ in tasks_]
        cpus = [c for (_, _, c), _, _ in tasks_]
        longest_wall.append(max(walls))
        longest_cpu.append(max(cpus))
        counts.append(len(tasks_))
        print(f"visit {i + 1}: joined={r['joined']}, {len(tasks_)} tasks run the restore; longest {max(walls):.0f} ms "
              f"wall / {max(cpus):.0f} ms CPU; {r['samples']} samples")
        w = r["wasm"]
        if w is not None:
            print(f"  wasm on the main thread: {w['lazy']:.0f} functions compiled lazily, {w['lazy_ms']:.0f} ms"
                  + ("; compiled code deserialized from V8's code cache" if w["from_cache"] else ""))
        per: dict[str, float] = defaultdict(float)
        for (_, w, c), sp, lines in tasks_:
            parts = ", ".join(f"{name} {ms:.0f}" for name, ms in sorted(sp.items(), key=lambda kv: -kv[1]) if ms >= 1)
            print(f"  task {w:5.0f} ms wall / {c:4.0f} ms CPU: {parts}")
            if args.tree and w >= 20:
                print("\n".join("      " + line for line in lines))
            for name, ms in sp.items():
                per[name] += ms
        for name, ms in per.items():
            totals[name].append(ms)
        for (_, w, c), sp, lines in r["others"]:
            parts = ", ".join(f"{name} {ms:.0f}" for name, ms in sorted(sp.items(), key=lambda kv: -kv[1]) if ms >= 1)
            print(f"  other task {w:5.0f} ms wall / {c:4.0f} ms CPU: {parts}")
            if args.tree:
                print("\n".join("      " + line for line in lines))
    print(f"longest restore task: wall {_med(longest_wall)} ms, CPU {_med(longest_cpu)} ms; "
          f"tasks per restore {_med(counts)}; main thread busy over the trace: wall "
          f"{_med([r['busy_wall'] for r in results])} ms, CPU {_med([r['busy_cpu'] for r in results])} ms")
    if all(r["wasm"] is not None for r in results):
        print(f"wasm functions compiled lazily on the main thread: {_med([r['wasm']['lazy'] for r in results])}, "
              f"{_med([r['wasm']['lazy_ms'] for r in results])} ms")
    print("time per phase over the restore's tasks, ms, median (min-max):")
    for name, vals in sorted(totals.items(), key=lambda kv: -statistics.median(kv[1])):
        vals = vals + [0.0] * (len(results) - len(vals))
        if max(vals) >= 1:
            print(f"  {_med(vals):>12}  {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--dist", default=None, help="serve this build folder instead of the checkout's")
    ap.add_argument("--before-dist", default=None, help="also run this build folder, interleaved (rows '(before)')")
    ap.add_argument("--interval-us", type=int, default=200)
    ap.add_argument("--tree", action="store_true", help="also print the call tree of each long task")
    ap.add_argument("--whole", action="store_true", help="trace from the navigation on, not from the hover")
    ap.add_argument("--early", action="store_true",
                    help="the reader hovers as soon as the toggle shows, while the worker still starts Python "
                         "(implies --whole)")
    ap.add_argument("--later", action="store_true",
                    help="profile a later view (the site's second page, restoring the stored snapshot) instead")
    ap.add_argument("--wasm", action="store_true",
                    help="also trace V8's wasm compiles: how many functions the main thread compiled lazily")
    ap.add_argument("--extra-views", type=int, default=0,
                    help="with --later: this many later views (the reader starting each) before the traced one")
    ap.add_argument("--wall", action="store_true", help="count each sample's whole gap (wall time), not capped")
    args = ap.parse_args()
    if not args.wall:
        _cap_us[0] = CAP_INTERVALS * args.interval_us
    load = os.getloadavg()
    print(f"# restore profile {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
          f"load average {load[0]:.1f} {load[1]:.1f}, n={args.n}")
    results = asyncio.run(run(args))
    for label, rows in results.items():
        report(label, rows, args)

    def task(t: tuple[Any, float, float], parts: dict[str, float]) -> dict[str, Any]:
        return {"wall_ms": t[1], "cpu_ms": t[2], "parts_ms": {k: round(v, 2) for k, v in parts.items() if v >= 0.5}}

    save("restore_profile", {
        "n": args.n, "options": {k: v for k, v in vars(args).items() if k != "n"},
        "builds": {label or "this checkout": [
            {"joined": r["joined"], "restore_tasks": [task(t, sp) for t, sp, _ in r["restore"]],
             "other_tasks": [task(t, sp) for t, sp, _ in r["others"]],
             "longest_restore_wall_ms": max(t[1] for t, _, _ in r["restore"]),
             "longest_restore_cpu_ms": max(t[2] for t, _, _ in r["restore"]),
             "busy_wall_ms": r["busy_wall"], "busy_cpu_ms": r["busy_cpu"], "marks": r["marks"], "wasm": r["wasm"]}
            for r in rows] for label, rows in results.items()}})


if __name__ == "__main__":
    main()

"""A worker-hosted Python, measured: a prototype beside today's main-thread boot (ships nothing to users).

Two host pages of the same site (100 list items, a probe button), served by a loopback page server, the relay
on another origin (as on a real site):

- ``main``: the widget's default tag (the loader's boot: the pre-warm worker, then Python on the main thread).
- ``worker``: no loader; bench/worker_python/page.mjs starts a dedicated worker (worker.mjs) that starts Pyodide
  with the loader's options, runs what the pre-warm worker runs (the bundle on sys.path, the widget's imports, a
  Markdown render), then the widget's client connects to the relay from the worker (Socket.IO there).

Per round, interleaved (the order alternates): visit kinds ``cold`` (a fresh context), ``again`` (the same tab
again: the main page with ``data-boot="eager"``, since a later view of a tab otherwise waits for intent) and
``newtab`` (a new tab of the same context: a new renderer process). Each visit is traced (bench/chrome_trace.py:
longest main-thread task, TBT) with the input probe clicking until the client joined + 1 s. Then, on the cold
pages: the cost of DOM access from the worker (async proxy, JSPI ``run_sync``, also under a busy page), a
streamed 2 KB answer rendered in the worker and applied on the page vs rendered on the main thread, a page
function called by the relay's model that reads the DOM through the proxy; on a page served with COOP/COEP
headers, the synchronous proxy over SharedArrayBuffer + Atomics.wait.

The worker hands its compiled WebAssembly module to the page, which holds it: V8 reuses compiled wasm within a
renderer process only while some module object of it is alive, and a terminated worker's is not, so without that
(``--drop-module``) a later page view's worker compiles everything again.

    python bench/worker_python.py [-n 3] [--kinds cold,again,newtab] [--calls 1000] [--drop-module]
                                  [--lighthouse N]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from chrome_trace import INPUT_PROBE, Blocking, main_thread_cpu, main_thread_tasks, tracing  # noqa: E402
from results import save, stats  # noqa: E402
from support import CHROMIUM, CHROMIUM_ARGS, DIST, PageServer, start_relay  # noqa: E402

KINDS = ("cold", "again", "newtab")
VARIANTS = ("main", "worker")
SETTLE_S = 1.0
ISOLATION_HEADERS = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp"}

#: A 2 KB Markdown answer of the kinds the bar renders (headings, lists, code, a table, links).
ANSWER = ("### Demo answer\n\nHere is what I found on **this page**, with `code` and a "
          "[link](https://example.com/a).\n\n"
          + "".join(f"- item {i}: *some* words about the item, and a little more text\n" for i in range(12))
          + "\n```python\ndef f(x):\n    return x * 2\n```\n\n| name | value |\n|---|---|\n"
          + "".join(f"| row {i} | {i * 7} |\n" for i in range(12))
          + "\n" + "A closing paragraph with more words to read. " * 20 + "\n")



def build_files() -> tuple[str, dict[str, Any]]:
    """The served build's id and the loader's BOOT_FILES (its Pyodide options come from them)."""
    build_id = json.loads((DIST / "manifest.json").read_text())["build_id"]
    loader = (DIST / "autopilot.js").read_text()
    m = re.search(r"BOOT_FILES = (\{.*?\}) \|\| \{\};", loader)
    return build_id, json.loads(m.group(1)) if m else {}


def host_page(variant: str, relay: str, boot: str, bench: dict[str, Any]) -> str:
    """The host page: a title, content, 100 list items; the widget's tag or the worker prototype."""
    items = "".join(f"<li>item {i}</li>" for i in range(100))
    if variant == "main":
        tag = f'<script src="{relay}/widget/autopilot.js" data-app="demo" data-boot="{boot}" defer></script>'
    else:
        tag = (f"<script>window.BENCH = {json.dumps(bench)};</script>\n"
               f'<script type="module">{(HERE / "worker_python" / "page.mjs").read_text()}</script>')
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Host page</title>
<link rel="icon" href="data:,"></head><body><h1>Host page</h1><p>{'Some host content. ' * 40}</p>
<ul id="items">{items}</ul>
{tag}
</body></html>"""


async def python_ready(page: Any, variant: str, timeout_s: float = 90) -> dict[str, float]:
    """Wait until the client joined; ms from the page's start to Pyodide started, Python ready (the widget
    imported: the bar mounted on the main thread; imports + a Markdown render in the worker) and joined."""
    if variant == "main":
        handle = await page.wait_for_function("""() => {
          const at = (n) => (performance.getEntriesByName(n)[0] || {}).startTime;
          return at('autopilot:joined') && {pyodide: at('autopilot:pyodide'), ready: at('autopilot:mounted'),
                                             joined: at('autopilot:joined')};
        }""", timeout=timeout_s * 1000, polling=50)
    else:
        handle = await page.wait_for_function("""() => {
          const b = window.__bench;
          if (b && b.error) return {error: b.error};
          if (!b || !b.joined) return false;
          const t = b.ready.t, o = performance.timeOrigin;
          return {pyodide: t.pyodide - o, ready: t.ready - o, joined: b.joined.t - o, wasm: b.ready.wasmBytes,
                  w_start: t.start - o, w_import: t.imported - t.start, w_load: t.pyodide - t.imported,
                  w_bundle: t.bundle - t.pyodide, w_python: t.ready - t.bundle};
        }""", timeout=timeout_s * 1000, polling=50)
    got: dict[str, Any] = await handle.json_value()
    if "error" in got:
        raise RuntimeError("the worker failed: " + got["error"])
    return got


async def probe_until(page: Any, stop: asyncio.Event, every_s: float = 0.05) -> list[float]:
    """Click a host-page button every ``every_s`` until ``stop``; each click's input delay (ms)."""
    await page.evaluate(INPUT_PROBE)
    clicks = []
    while not stop.is_set():
        clicks.append(asyncio.ensure_future(page.mouse.click(20, 14)))
        await asyncio.sleep(every_s)
    await asyncio.gather(*clicks, return_exceptions=True)
    delays: list[float] = await page.evaluate("() => window.__probe.slice()")
    return delays


async def visit(context: Any, page: Any, url: str, site: str, variant: str) -> dict[str, Any]:
    """One traced visit with the input probe running until the client joined (+ a settle time)."""
    async with tracing(context, page) as trace:
        await page.goto(url, wait_until="domcontentloaded")
        stop = asyncio.Event()
        probe = asyncio.ensure_future(probe_until(page, stop))
        try:
            times = await python_ready(page, variant)
            await asyncio.sleep(SETTLE_S)
        finally:
            stop.set()
            delays = await probe
    cdp = await context.new_cdp_session(page)
    await cdp.send("HeapProfiler.collectGarbage")
    heap = (await cdp.send("Runtime.getHeapUsage"))["usedSize"] / 2**20
    await cdp.detach()
    b = Blocking.of(main_thread_tasks(trace, site))
    cpu = Blocking.of(main_thread_cpu(trace, site))
    return {"cpu_longest": cpu.longest_ms, "cpu_tbt": cpu.tbt_ms, "heap": heap, "longest": b.longest_ms,
            "tbt": b.tbt_ms, "busy": b.busy_ms, "input_worst": max(delays, default=0.0),
            "input_over_100": sum(1 for d in delays if d > 100), **times}


async def run_py(page: Any, code: str) -> Any:
    """``await <code>`` in the worker's Python; its JSON result."""
    return json.loads(await page.evaluate("(code) => window.__bench.run(code)", code))


async def proxy_costs(page: Any, calls: int, modes: tuple[str, ...]) -> dict[str, list[float]]:
    """Per-call round trips (ms) of DOM operations from the worker's Python, per mode and operation; and the
    same for reading the title while the page runs back-to-back 30 ms tasks."""
    out: dict[str, list[float]] = {}
    for mode in modes:
        for op, arg in (("title", None), ("setText", "hello"), ("query", None)):
            got = await run_py(page, f"rtt({mode!r}, {op!r}, {arg!r}, {calls})")
            out[f"{mode} {op}"] = got if isinstance(got, list) else []
    for mode in modes:
        await page.evaluate("() => window.__bench.busy(30)")
        got = await run_py(page, f"rtt({mode!r}, 'title', None, {max(20, calls // 10)}, 40)")
        await page.evaluate("() => window.__bench.stopBusy()")
        out[f"{mode} title, page busy (30 ms tasks)"] = got if isinstance(got, list) else []
    return out


async def worker_render(page: Any, chunks: int) -> dict[str, list[float]]:
    """The streamed answer rendered in the worker, applied on the page: ms per chunk on each side."""
    await page.evaluate("() => { window.__bench.renders = []; }")
    worker_ms = await run_py(page, f"stream({ANSWER!r}, {chunks}, 0.1)")
    await page.wait_for_function(f"() => window.__bench.renders.length >= {chunks}")
    renders = await page.evaluate("() => window.__bench.renders")
    return {"render in worker (Markdown → HTML)": worker_ms,
            "apply on the page (sanitize + DOM + layout): main-thread task": [r["apply"] for r in renders],
            "worker post → applied on the page": [r["latency"] for r in renders]}


MAIN_DOM = """async (n) => JSON.parse(window.Autopilot.pyodide.runPython(`
import js, json
def _bench_query():
    return [li.textContent for li in js.document.querySelectorAll("#items li")]
_bench_out = {}
for _name, _op in (("title", lambda: js.document.title), ("query", _bench_query)):
    _t = js.performance.now()
    for _ in range(${n}):
        _op()
    _bench_out["today, on the main thread: " + _name + " (mean of ${n})"] = [(js.performance.now() - _t) / ${n}]
json.dumps(_bench_out)
`))"""

MAIN_RENDER = """async ([root, text, chunks]) => {
  const py = window.Autopilot.pyodide;
  const san = await import(root + 'sanitize.mjs');
  const feed = py.runPython(`from widget.core.markdown import StreamingRenderer
_bench_r = StreamingRenderer()
def _bench_feed(t):
    _bench_r.feed(t)
    return [_bench_r.appended, _bench_r.tail]
_bench_feed`);
  const box = document.body.appendChild(document.createElement('div'));
  const stable = box.appendChild(document.createElement('div')), tail = box.appendChild(document.createElement('div'));
  const out = [];
  for (let i = 1; i <= chunks; i++) {
    const soFar = i === chunks ? text : text.slice(0, Math.floor(text.length * i / chunks));
    const t = performance.now();
    const r = feed(soFar), [appended, tl] = r.toJs();
    r.destroy();
    if (appended) san.appendSafeHTML(stable, appended);
    san.setSafeHTML(tail, tl);
    void box.offsetHeight;
    out.push(performance.now() - t);
    await new Promise((res) => setTimeout(res, 100));
  }
  feed.destroy();
  return out;
}"""


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    build_id, boot_files = build_files()
    pages = PageServer()
    work = Path(tempfile.mkdtemp(prefix="bench-worker-python-"))
    relay = start_relay(work, extra=["--demo-chunk-delay-ms", "0", "--app", f"demo={pages.origin}"])
    root = f"{relay.url}/widget/{build_id}/"
    bench = {
        "root": root, "relay": relay.url, "app": "demo",
        "options": {"indexURL": root + "pyodide/", "fullStdLib": False, "stdLibURL": root + boot_files["stdlib"],
                    "lockFileContents": {"info": boot_files["lockInfo"], "packages": {}}},
        "lazy": {g: root + p for g, p in (boot_files.get("lazy") or {}).items()},
        "workerSrc": (HERE / "worker_python" / "worker.mjs").read_text(),
        "benchPy": (HERE / "worker_python" / "bench.py").read_text(),
        "keepModule": not args.drop_module,
    }
    site = pages.origin + "/site/"
    for variant, boot in (("main", "idle"), ("main", "eager"), ("worker", "")):
        html = host_page(variant, relay.url, boot, bench)
        pages.add(f"/site/{variant}{'-' + boot if boot else ''}.html", html)
        pages.add(f"/isolated/{variant}.html", html, headers=ISOLATION_HEADERS)
    res: dict[str, Any] = {"visits": {f"{k} {v}": [] for k in args.kinds for v in VARIANTS}, "proxy": {},
                           "render": {}, "call": [], "isolation": {}}

    def add(bucket: dict[str, list[float]], more: dict[str, list[float]]) -> None:
        for k, v in more.items():
            bucket.setdefault(k, []).extend(v)

    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for i in range(args.n):
                for variant in (VARIANTS if i % 2 == 0 else VARIANTS[::-1]):
                    ctx = await browser.new_context()
                    page = await ctx.new_page()
                    visits = res["visits"]
                    url = site + ("main-idle" if variant == "main" else variant) + ".html"
                    cold = await visit(ctx, page, url, site, variant)
                    if "cold" in args.kinds:
                        visits[f"cold {variant}"].append(cold)
                    if variant == "worker":
                        isolated = await page.evaluate("() => [self.crossOriginIsolated, typeof SharedArrayBuffer]")
                        res["isolation"]["plain page: crossOriginIsolated, SharedArrayBuffer"] = isolated
                        add(res["proxy"], await proxy_costs(page, args.calls, ("async", "jspi")))
                        add(res["render"], await worker_render(page, args.chunks))
                        res["call"].append(await run_py(page, "call_page_function()"))
                    else:
                        add(res["proxy"], await page.evaluate(MAIN_DOM, args.calls))
                        add(res["render"], {"today: render + apply on the main thread (one task per chunk)":
                                            await page.evaluate(MAIN_RENDER, [root, ANSWER, args.chunks])})
                    if "again" in args.kinds:
                        again = site + (variant + "-eager" if variant == "main" else variant) + ".html"
                        visits[f"again {variant}"].append(await visit(ctx, page, again, site, variant))
                    if "newtab" in args.kinds:
                        tab = await ctx.new_page()
                        visits[f"newtab {variant}"].append(await visit(ctx, tab, url, site, variant))
                        await tab.close()
                    await ctx.close()
            # the synchronous proxy needs SharedArrayBuffer: a page served with COOP/COEP headers
            ctx = await browser.new_context()
            page = await ctx.new_page()
            await page.goto(pages.origin + "/isolated/worker.html")
            await python_ready(page, "worker")
            res["isolation"]["COOP/COEP page: crossOriginIsolated, SharedArrayBuffer"] = await page.evaluate(
                "() => [self.crossOriginIsolated, typeof SharedArrayBuffer]")
            add(res["proxy"], {f"isolated page: {k}": v for k, v in
                               (await proxy_costs(page, args.calls, ("sab", "jspi", "async"))).items()})
            await ctx.close()
            await browser.close()
        if args.lighthouse:
            res["lighthouse"] = await asyncio.to_thread(lighthouse_runs, args.lighthouse, site)
    finally:
        relay.stop()
        pages.close()
    return res


def lighthouse_runs(n: int, site: str) -> dict[str, list[dict[str, Any]]]:
    """Lighthouse (mobile, simulated throttling; bench/lighthouse.py's runner) on both pages, interleaved."""
    from lighthouse import lighthouse_cli, run_lighthouse

    cli = lighthouse_cli()
    out: dict[str, list[dict[str, Any]]] = {"main": [], "worker": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n):
            for variant in (VARIANTS if i % 2 == 0 else VARIANTS[::-1]):
                url = site + ("main-idle" if variant == "main" else variant) + ".html"
                out[variant].append(run_lighthouse(cli, url, Path(tmp) / f"{variant}-{i}.json", unthrottled=False))
    return out


def med(vals: list[float]) -> str:
    """median (min–max)"""
    if not vals:
        return "n/a"
    return f"{statistics.median(vals):.0f} ({min(vals):.0f}–{max(vals):.0f})"


def dist(vals: list[float]) -> str:
    """median / p95 / max of many small values"""
    if not vals:
        return "n/a"
    s = sorted(vals)
    return f"{statistics.median(s):.3f} / {s[min(len(s) - 1, int(len(s) * 0.95))]:.3f} / {s[-1]:.1f}  (n={len(s)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=3, help="rounds (each: every kind, both variants)")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--calls", type=int, default=1000, help="DOM operations per proxy measurement")
    ap.add_argument("--chunks", type=int, default=20, help="chunks of the streamed 2 KB answer")
    ap.add_argument("--lighthouse", type=int, default=0, metavar="N",
                    help="also N Lighthouse runs of each page (Lighthouse 12, installed as bench/lighthouse.py does)")
    ap.add_argument("--drop-module", action="store_true",
                    help="the page does not hold the worker's compiled module (a later start then compiles again)")
    args = ap.parse_args()
    args.kinds = [k for k in args.kinds.split(",") if k]
    if set(args.kinds) - set(KINDS):
        ap.error(f"kinds: {', '.join(KINDS)}")
    load0 = os.getloadavg()
    res = asyncio.run(run(args))
    load = os.getloadavg()
    print(f"# bench/worker_python.py  {datetime.datetime.now():%Y-%m-%d %H:%M}  {os.cpu_count()} cores  "
          f"load {load0[0]:.1f} at the start, {load[0]:.1f} {load[1]:.1f} at the end  N={args.n}  "
          f"compiled module {'dropped' if args.drop_module else 'kept by the page'}  "
          f"answer {len(ANSWER)} chars in {args.chunks} chunks")
    cols = [("longest", "longest task, trace"), ("cpu_longest", "the same, its CPU"), ("tbt", "TBT, trace"),
            ("cpu_tbt", "TBT from CPU times"), ("input_worst", "worst input delay"),
            ("input_over_100", "clicks > 100 ms"), ("pyodide", "Pyodide started"), ("ready", "Python ready"),
            ("joined", "joined relay"), ("busy", "main thread busy"), ("heap", "page JS heap, MiB")]
    print(f"{'visit':14} | " + " | ".join(f"{label:20}" for _, label in cols))
    for name, rows in res["visits"].items():
        print(f"{name:14} | " + " | ".join(f"{med([float(r[k]) for r in rows if r.get(k) is not None]):20}"
                                           for k, _ in cols))
    print("\nIn the worker (ms): its start from the page's, pyodide.mjs imported, loadPyodide, the bundle "
          "installed, the widget's imports + a Markdown render")
    phases = ("w_start", "w_import", "w_load", "w_bundle", "w_python")
    for name, rows in res["visits"].items():
        if name.endswith("worker"):
            print(f"{name:14} | " + " | ".join(f"{med([float(r[k]) for r in rows]):20}" for k in phases))
    wasm = [r["wasm"] for rows in res["visits"].values() for r in rows if r.get("wasm")]
    if wasm:
        print(f"(ms: median (min–max) from the page's start; worker wasm memory {wasm[0] / 2**20:.1f} MiB)")
    print("\nDOM operations from the worker's Python, ms per call: median / p95 / max")
    for name, vals in res["proxy"].items():
        print(f"  {name:50} {dist(vals)}")
    for name, val in res["isolation"].items():
        print(f"  {name}: {val}")
    print(f"\nStreamed answer ({len(ANSWER)} chars, {args.chunks} chunks, one per 100 ms), ms per chunk: "
          "median / p95 / max")
    for name, vals in res["render"].items():
        print(f"  {name:62} {dist(vals)}")
    if res.get("lighthouse"):
        print("\nLighthouse 12 (mobile, simulated): performance, TBT ms, time to interactive ms, main-thread work ms, "
              "best practices; deprecations")
        for variant, rows in res["lighthouse"].items():
            cells = [med([float(r[k]) for r in rows]) for k in ("performance", "tbt", "tti", "mainthread",
                                                                 "best_practices")]
            deps = sorted({d for r in rows for d in r["deprecations"]})
            failed = sorted({a for r in rows for a in r["failed_best_practices"]})
            print(f"  {variant:7} " + " | ".join(cells) + f" | deprecations: {'; '.join(deps) or 'none'}"
                  f" | best-practice audits failed: {', '.join(failed) or 'none'}")
    print("\nA page function called by the model, reading the DOM through the proxy (ms from sending):")
    for c in res["call"]:
        print(f"  function success {c['to_function_success']:.0f}, answer finished {c['to_finished']:.0f}; "
              f"the function returned {c['result'][:80]!r}")
    save("worker_python", {"n": args.n, "kinds": args.kinds, "calls": args.calls, "chunks": args.chunks,
                           "drop_module": args.drop_module,
                           **res, "proxy_ms": {k: stats(v) for k, v in res["proxy"].items()},
                           "render_ms": {k: stats(v) for k, v in res["render"].items()}, "proxy": None, "render": None})


if __name__ == "__main__":
    main()

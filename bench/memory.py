"""Memory benchmark (not a test): JS heap + wasm memory of our widget vs Chainlit Copilot's JS heap, in Chromium.

The same Chromium launch, relay, demo page, Chainlit echo app and host page as ``bench/peer.py`` (its helpers are
imported, not copied). Per target, in one fresh browser context and tab:

1. **after boot**: the page loads, the bench opens the widget and gets one reply (``peer.run_once``, as peer.py
   measures it);
2. **conversation**: user messages one after the other until the conversation holds ``--messages`` of them,
   each one's reply visible (and the widget idle again) before the next;
3. **toggle**: the launcher clicked ``--cycles`` times open and closed (waiting for the composer to show and
   hide); before it, a **control**: as many clicks on the page's heading, which the widget does not handle (what
   the bench's own clicking adds: Playwright's utility world shares the page's JS heap);
4. **remount** (destroy and create again, with the 100-message conversation): ours: the bar is destroyed and
   ``widget.ui.bar.enable_bar(client)`` mounts a new one on the same client (the documented re-mount,
   docs/embedding.md), opened and closed by its toggle; Chainlit: ``unmountChainlitWidget()``, its host element
   removed, ``mountChainlitWidget()`` again, opened and closed;
5. **reload** (ours, ``--reloads``): the whole widget through the JS API: ``await Autopilot.destroy()``, then a new
   loader ``<script>`` tag (a new Pyodide each time), ``Autopilot.ready``, opened until the conversation is
   shown, closed. The demo page's own ``autopilot-python`` blocks are removed first (they add document
   listeners with proxies that are never destroyed: the page's, which would pin the first interpreter);
6. **New chat** (ours): ``Autopilot.newConversation()``, sampled before and after the bar shows no answer.

Every sample is taken with the widget closed and idle, after Python's ``gc.collect()`` (ours) and two forced V8
collections (CDP ``HeapProfiler.collectGarbage``): JS heap used (CDP ``Runtime.getHeapUsage``, the page's
isolate), wasm memory (Pyodide's ``_module.HEAPU8.buffer.byteLength``; with every interpreter the page still
has, through weak references), DOM counters (CDP ``Memory.getDOMCounters``: documents, nodes, JS event
listeners), and for ours Python's view (the C heap in use inside the wasm memory, from dlmalloc's ``mallinfo``;
``len(gc.get_objects())``; the bar's live JS proxies; listeners on the client's event bus). Cycle phases are
sampled every ``--every`` cycles; the slope is a least-squares fit over the samples after the first (warm-up) one.
(The JS heap is the whole isolate's: Playwright's utility world, which clicks and waits, is in it too — the same
for both widgets: the control phase measures it.)

Known result of phase 5: every reload keeps the previous interpreter (its wasm memory, ~30 MiB, and ~5 MiB of JS
heap): Pyodide cannot unload one on a page's main thread (its module registers window ``message`` listeners and a
``MessageChannel`` it never releases; pyodide/pyodide#4620), so ``--reloads`` is kept small by default.

The relay runs with its per-minute rate limits off (``--messages`` turns exceed the default 60 messages per
minute per conversation); everything else as peer.py: demo model, chunk delay 0, loopback only.

    python bench/memory.py [--messages 100] [--cycles 100] [--reloads 20] [--targets ours,chainlit] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import peer  # noqa: E402  (bench/peer.py: Chromium flags, Chainlit, host page server, one measured run)
from peer import (  # noqa: E402
    BROWSER_ARGS,
    CHAINLIT_PAGE,
    CHAINLIT_VERSION,
    TARGETS,
    Chainlit,
    PageServer,
    Run,
    Tab,
    chainlit_venv,
    new_context,
)
from results import save  # noqa: E402
from support import CHROMIUM, DIST, start_relay  # noqa: E402  (tests/support.py, on sys.path through peer)

MIB = 2**20

# The widget's Send is usable: present, enabled and laid out (ours hides Send while an answer streams; Chainlit
# disables it while the composer is empty or a run is going on).
SUBMIT_READY = """(cfg) => {
  const h = document.getElementById(cfg.bar_host);
  const b = h && h.shadowRoot && h.shadowRoot.querySelector(cfg.submit);
  if (!b || b.disabled) return false;
  const r = b.getBoundingClientRect();
  return r.width > 0 && r.height > 0;
}"""

# The token shows in the widget outside its composer: the message was taken (a composer cleared is not enough:
# Chainlit's re-rendered popover can drop what was typed).
SENT = """([cfg, token]) => {
  const h = document.getElementById(cfg.bar_host);
  const r = h && h.shadowRoot;
  if (!r) return false;
  const i = r.querySelector(cfg.input);
  const n = (text) => (text || '').split(token).length - 1;
  return n(r.textContent) > n(i && i.textContent);
}"""

# Send is laid out (enabled or not: Chainlit disables it while the composer is empty).
SUBMIT_SHOWN = """(cfg) => {
  const h = document.getElementById(cfg.bar_host);
  const b = h && h.shadowRoot && h.shadowRoot.querySelector(cfg.submit);
  if (!b) return false;
  const r = b.getBoundingClientRect();
  return r.width > 0 && r.height > 0;
}"""

# What the widget shows (when a reply does not come).
SHOWN = """(cfg) => {
  const h = document.getElementById(cfg.bar_host);
  const r = h && h.shadowRoot;
  if (!r) return 'no widget';
  const all = [...r.querySelectorAll(cfg.answers)].slice(-3).map((e) => (e.textContent || '').slice(0, 80));
  const i = r.querySelector(cfg.input);
  return JSON.stringify({answers: all, count: r.querySelectorAll(cfg.answers).length, input: i ? i.value : null});
}"""

# Answers rendered in the widget.
ANSWER_COUNT = """(cfg) => {
  const h = document.getElementById(cfg.bar_host);
  return h && h.shadowRoot ? h.shadowRoot.querySelectorAll(cfg.answers).length : 0;
}"""

# Ours: Python's view, after a full collection of its cycles: objects the collector tracks, the bar's live JS
# proxies, listeners on the client's event bus. (``sys.getallocatedblocks()`` is 0 in Pyodide: no pymalloc.)
PY_STATS = """
import gc, json
gc.collect()
_s = {"objects": len(gc.get_objects())}
try:
    from widget.ui.bar import live_proxies
    from widget.page import get_client
    _c = get_client()
    _s["proxies"] = live_proxies()
    _s["client_listeners"] = sum(len(v) for v in _c.events._listeners.values())
    _s["messages"] = len(_c.messages)
except Exception as _e:  # noqa: BLE001 - reported, the numbers above still count
    _s["error"] = repr(_e)
json.dumps(_s)
"""

# Ours: the wasm memory's size (it only grows: a high-water mark) and what the C heap inside it has in use
# (dlmalloc's mallinfo().uordblks: Python's objects and buffers live there).
OURS_STATS = """(code) => {
  const py = window.Autopilot && window.Autopilot.pyodide;
  if (!py) return null;
  const stats = JSON.parse(py.runPython(code));
  const m = py._module;
  let inUse = null;
  if (m._mallinfo && m._malloc && m._free) {
    const p = m._malloc(64);  // struct mallinfo is returned through a pointer (10 ints); uordblks is the 8th
    m._mallinfo(p);
    inUse = m.HEAPU32[(p >> 2) + 7];
    m._free(p);
  }
  // Every interpreter this page has had, weakly: INTERPRETERS counts those a GC could not collect.
  const refs = window.__memoryBenchInterpreters || (window.__memoryBenchInterpreters = []);
  if (!refs.some((r) => r.deref() === m)) refs.push(new WeakRef(m));
  return {wasm: m.HEAPU8.buffer.byteLength, malloc: inUse, py: stats};
}"""

# After the forced GC: interpreters (Pyodide modules) still alive on this page, and their wasm memories in all.
INTERPRETERS = """() => {
  let n = 0, bytes = 0;
  for (const r of window.__memoryBenchInterpreters || []) {
    const m = r.deref();
    if (m) { n++; bytes += m.HEAPU8.buffer.byteLength; }
  }
  return [n, bytes];
}"""

# Ours, remount: the boot's bar goes (the handle keeps the client connected), and each cycle mounts a new one.
# (The skin is fetched in JS: pyodide.http would pull the rest of the stdlib into the wasm heap.)
REMOUNT_SETUP = """async () => {
  const css = await (await fetch(window.Autopilot.config.root + 'skin.css')).text();
  const py = window.Autopilot.pyodide;
  py.globals.set('_bench_css', css);
  // In Python: called from JS, destroy() would be the PyProxy's own.
  py.runPython('import js\\njs.window.Autopilot.handle.bar.destroy()');
}"""
REMOUNT_MOUNT = """
from widget.page import get_client
from widget.ui.bar import enable_bar
_bench_bar = enable_bar(get_client(), css=_bench_css)
"""
REMOUNT_DESTROY = """
_bench_bar.destroy()
del _bench_bar
"""

# Ours, reload: destroy through the JS API, then a fresh loader tag (as a single-page app would re-add it).
RELOAD = """async () => {
  const old = window.Autopilot;
  const seen = (py) => {  // weakly, for INTERPRETERS
    const refs = window.__memoryBenchInterpreters || (window.__memoryBenchInterpreters = []);
    if (!refs.some((r) => r.deref() === py._module)) refs.push(new WeakRef(py._module));
  };
  seen(old.pyodide);
  await old.destroy();
  const tag = document.querySelector('script[src*="/widget/autopilot.js"]');
  document.querySelectorAll('script[type="autopilot-python"]').forEach((s) => s.remove());
  delete window.Autopilot;
  const s = document.createElement('script');
  for (const a of tag.attributes) s.setAttribute(a.name, a.value);
  tag.remove();
  const loaded = new Promise((res, rej) => { s.onload = res; s.onerror = () => rej(new Error('loader failed')); });
  document.body.appendChild(s);
  await loaded;
  await window.Autopilot.boot();
  await window.Autopilot.ready;
  seen(window.Autopilot.pyodide);
  return true;
}"""

CHAINLIT_REMOUNT = """(server) => {
  window.unmountChainlitWidget();
  const h = document.getElementById('chainlit-copilot');
  if (h) h.remove();  // unmount leaves the host element; a careful page removes it before mounting again
  window.mountChainlitWidget({chainlitServer: server});
}"""


def log(msg: str) -> None:
    """A progress line on stderr (bench/all.py leaves these out)."""
    print(f"[memory {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------------------------
# One sample


async def sample(tab: Tab, target: str, label: str, x: int) -> dict[str, Any]:
    """GC, then JS heap / wasm / DOM counters (and Python's view for ours)."""
    s: dict[str, Any] = {"label": label, "x": x}
    if target == "ours":
        got = await tab.page.evaluate(OURS_STATS, PY_STATS)
        if got:
            s["wasm"] = got["wasm"]
            s["malloc"] = got["malloc"]
            s.update({f"py_{k}": v for k, v in got["py"].items()})
    for _ in range(2):  # a second pass collects what the first one's finalizers released
        await tab.cdp.send("HeapProfiler.collectGarbage")
    heap = await tab.cdp.send("Runtime.getHeapUsage")
    s["heap"] = heap["usedSize"]
    dom = await tab.cdp.send("Memory.getDOMCounters")
    s.update(documents=dom["documents"], nodes=dom["nodes"], listeners=dom["jsEventListeners"])
    if "wasm" in s:
        s["interpreters"], s["wasm_all"] = await tab.page.evaluate(INTERPRETERS)
    return s


def fmt_sample(s: dict[str, Any]) -> str:
    """One sample on one line."""
    out = f"heap {s['heap'] / MIB:.2f} MiB"
    if "wasm" in s:
        out += f", wasm {s['wasm'] / MIB:.1f} MiB"
        if s.get("interpreters", 1) > 1:
            out += f" (interpreters alive: {s['interpreters']}, {s['wasm_all'] / MIB:.1f} MiB of wasm memory)"
    out += f", nodes {s['nodes']}, listeners {s['listeners']}, docs {s['documents']}"
    if "py_objects" in s:
        out += (f", C heap {mib(s.get('malloc'))}, py objects {s['py_objects']}, proxies {s.get('py_proxies')}, "
                f"client listeners {s.get('py_client_listeners')}")
    return out


# ------------------------------------------------------------------------------------------------------------------
# Widget actions


#: How long one message waits for its reply before it is sent again (Chainlit, reopened, sometimes shows a message
#: it never delivers: its socket reconnects after the popover opened again).
REPLY_WAIT_MS = 20000


async def send_and_wait(tab: Tab, target: str, token: str, timeout_ms: float) -> int:
    """Type ``token``, send it once Send is usable, wait until an answer containing it is visible.

    Returns how many times it had to be sent again (a message without a reply stays in the conversation).
    """
    page, cfg = tab.page, TARGETS[target]
    box = page.locator(f"#{cfg['bar_host']} >> {cfg['input']}")
    for resend in range(3):
        tok = token if not resend else f"{token}-again{resend}"
        reply = asyncio.ensure_future(page.evaluate(peer.WAIT_REPLY, [cfg, tok, REPLY_WAIT_MS]))
        try:
            for attempt in range(5):
                await box.fill(tok, timeout=timeout_ms)
                await page.wait_for_function(SUBMIT_READY, arg=cfg, timeout=timeout_ms, polling=20)
                await box.press("Enter", timeout=timeout_ms)
                try:  # a turn that had not quite ended, or a composer re-rendered under the bench: type it again
                    await page.wait_for_function(SENT, arg=[cfg, tok], timeout=5000, polling=20)
                    break
                except Exception:
                    log(f"{target}: {tok} not taken (attempt {attempt + 1}); again")
                    if attempt == 4:
                        raise
            await reply
            break
        except Exception:
            reply.cancel()
            with contextlib.suppress(Exception):
                log(f"{target}: no reply with {tok}; the widget shows: {await page.evaluate(SHOWN, cfg)}")
            if resend == 2:
                raise
        except BaseException:
            reply.cancel()
            raise
    # Idle again (ours shows Send once the answer has finished streaming) before the next message or a sample.
    if target == "ours":
        await page.wait_for_function(SUBMIT_READY, arg=cfg, timeout=timeout_ms, polling=20)
    return resend


async def set_open(tab: Tab, cfg: dict[str, Any], want: bool, timeout_ms: float) -> None:
    """Click the launcher until the composer is shown (``want``) or gone."""
    page = tab.page
    box = page.locator(f"#{cfg['bar_host']} >> {cfg['input']}")
    if await box.is_visible() == want:
        return
    await page.click(f"#{cfg['host']} >> {cfg['button']}", timeout=timeout_ms)
    await box.wait_for(state="visible" if want else "hidden", timeout=timeout_ms)


async def py_run(tab: Tab, code: str) -> None:
    """Run Python in the page's interpreter (awaits top-level ``await``)."""
    await tab.page.evaluate("(c) => window.Autopilot.pyodide.runPythonAsync(c).then(() => null)", code)


async def wait_conversation(tab: Tab, cfg: dict[str, Any], answers: int, timeout_ms: float) -> None:
    """Until the widget shows at least ``answers`` answers (a re-mounted bar renders the whole conversation)."""
    await tab.page.wait_for_function(f"(cfg) => ({ANSWER_COUNT})(cfg) >= {answers}", arg=cfg,
                                     timeout=timeout_ms, polling=50)


# ------------------------------------------------------------------------------------------------------------------
# One target


async def run_target(browser: Any, target: str, url: str, args: argparse.Namespace, foreign: list[str],
                     chainlit_url: str | None) -> dict[str, Any]:
    """All phases for one target in one fresh context; returns the samples by phase."""
    cfg = TARGETS[target]
    timeout_ms = args.step_timeout * 1000
    ctx = await new_context(browser, target)
    res: dict[str, Any] = {"phases": {}, "times": {}, "resent": 0}
    try:
        tab = await Tab.open(ctx, foreign)
        t0 = time.monotonic()
        first = await peer.run_once(tab, Run(target, url, args.step_timeout), f"boot-{target}")
        res["boot_reply_ms"] = first["done"]
        await asyncio.sleep(0.5)
        await set_open(tab, cfg, False, timeout_ms)
        boot = await sample(tab, target, "after boot + 1 reply", 1)
        res["phases"]["boot"] = [boot]
        log(f"{target} after boot: {fmt_sample(boot)}")

        # 2. conversation
        await set_open(tab, cfg, True, timeout_ms)
        t = time.monotonic()
        conv = [boot]
        for i in range(2, args.messages + 1):
            res["resent"] += await send_and_wait(tab, target, f"m{i}-{target}-{os.getpid()}", timeout_ms)
            if i % args.every == 0 or i == args.messages:
                await set_open(tab, cfg, False, timeout_ms)
                s = await sample(tab, target, f"after {i} messages", i)
                conv.append(s)
                log(f"{target} {i} messages: {fmt_sample(s)}")
                await set_open(tab, cfg, True, timeout_ms)
        res["answers"] = await tab.page.evaluate(ANSWER_COUNT, cfg)
        res["times"]["conversation"] = time.monotonic() - t
        res["phases"]["conversation"] = conv
        await set_open(tab, cfg, False, timeout_ms)

        # 3. toggle, after a control: clicks the widget does not handle (the page's heading), which measures what
        # the bench itself adds per click (Playwright's utility world shares the page's heap).
        async def control() -> None:
            await tab.page.click("h1", timeout=timeout_ms)

        res["phases"]["control"] = await cycles(tab, target, "control", args.cycles, args.every, res, control)
        res["phases"]["toggle"] = await cycles(
            tab, target, "toggle", args.cycles, args.every, res,
            lambda: toggle_cycle(tab, cfg, timeout_ms))

        # 4. remount
        if target == "ours":
            await tab.page.evaluate(REMOUNT_SETUP)

            async def remount() -> None:
                await py_run(tab, REMOUNT_MOUNT)
                await set_open(tab, cfg, True, timeout_ms)
                await wait_conversation(tab, cfg, res["answers"], timeout_ms)
                await set_open(tab, cfg, False, timeout_ms)
                await py_run(tab, REMOUNT_DESTROY)
        else:
            async def remount() -> None:
                await tab.page.evaluate(CHAINLIT_REMOUNT, chainlit_url)
                await tab.page.locator(f"#{cfg['host']} >> {cfg['button']}").wait_for(state="visible",
                                                                                      timeout=timeout_ms)
                await set_open(tab, cfg, True, timeout_ms)
                await tab.page.wait_for_function(SUBMIT_SHOWN, arg=cfg, timeout=timeout_ms, polling=20)
                await set_open(tab, cfg, False, timeout_ms)
        res["phases"]["remount"] = await cycles(tab, target, "remount", args.cycles, args.every, res, remount)

        # 5. reload (ours): the whole widget, through the JS API
        if target == "ours" and args.reloads:
            async def reload() -> None:
                await tab.page.evaluate(RELOAD)
                await set_open(tab, cfg, True, timeout_ms)
                await wait_conversation(tab, cfg, res["answers"], timeout_ms)
                await set_open(tab, cfg, False, timeout_ms)

            res["phases"]["reload"] = await cycles(tab, target, "reload", args.reloads, args.reload_every, res,
                                                   reload)
        # 6. New chat (ours): the conversation's message views must go with it.
        if target == "ours":
            if not args.reloads:
                await py_run(tab, REMOUNT_MOUNT)  # the remount phase left no bar
            before = await sample(tab, target, "before New chat", 0)
            await tab.page.evaluate("() => window.Autopilot.newConversation()")
            await tab.page.wait_for_function(f"(cfg) => ({ANSWER_COUNT})(cfg) === 0", arg=cfg, timeout=timeout_ms,
                                             polling=50)
            after = await sample(tab, target, "after New chat", 1)
            res["phases"]["newchat"] = [before, after]
            log(f"{target} after New chat: {fmt_sample(after)}")
        res["times"]["total"] = time.monotonic() - t0
    except Exception as exc:  # noqa: BLE001 - a timeout or a crashed tab: reported with what was measured
        res["error"] = f"after phases {list(res['phases'])}: {str(exc).splitlines()[0][:200]}"
        log(f"{target}: FAILED {res['error']}")
    finally:
        await ctx.close()
    return res


async def toggle_cycle(tab: Tab, cfg: dict[str, Any], timeout_ms: float) -> None:
    """Open, then close, by the launcher."""
    await set_open(tab, cfg, True, timeout_ms)
    await set_open(tab, cfg, False, timeout_ms)


async def cycles(tab: Tab, target: str, name: str, n: int, every: int, res: dict[str, Any], step: Any) -> list[dict]:
    """``n`` cycles of ``step``, sampled before the first and every ``every`` cycles."""
    t = time.monotonic()
    out = [await sample(tab, target, f"{name} 0", 0)]
    for i in range(1, n + 1):
        await step()
        if i % every == 0 or i == n:
            s = await sample(tab, target, f"{name} {i}", i)
            out.append(s)
            log(f"{target} {name} x{i}: {fmt_sample(s)}")
    res["times"][name] = time.monotonic() - t
    return out


# ------------------------------------------------------------------------------------------------------------------
# Report


def slope(samples: list[dict[str, Any]], key: str, skip: int = 1) -> float | None:
    """Least-squares growth of ``key`` per cycle over the samples after the first ``skip`` (warm-up) ones."""
    pts = [(s["x"], s[key]) for s in samples[skip:] if s.get(key) is not None]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else None


# A phase is "flat" when, after warm-up, the fitted JS-heap growth over its cycles stays under this share of the
# heap (a GC'd heap still moves by tens of KiB between samples: compiled code, inline caches) and the DOM node,
# listener and proxy counts do not grow.
FLAT_HEAP_SHARE = 0.01


def verdict(samples: list[dict[str, Any]]) -> str:
    """'flat' or what grows."""
    if len(samples) < 3:
        return "too few samples"
    span = samples[-1]["x"] - samples[1]["x"]
    grows = []
    h = slope(samples, "heap")
    if h is not None and h * span > FLAT_HEAP_SHARE * samples[-1]["heap"]:
        grows.append(f"JS heap +{h / 1024:.1f} KiB/cycle")
    for key, what in (("nodes", "DOM nodes"), ("listeners", "listeners"), ("py_proxies", "proxies"),
                      ("py_client_listeners", "client listeners")):
        v = slope(samples, key)
        if v is not None and v * span >= 1 and samples[-1][key] > samples[1][key]:
            grows.append(f"{what} +{v:.2f}/cycle")
    w = slope(samples, "wasm_all")
    if w is not None and samples[-1]["wasm_all"] > samples[1]["wasm_all"]:
        grows.append(f"wasm memory +{w / 1024:.1f} KiB/cycle")
    i = slope(samples, "interpreters")
    if i is not None and samples[-1]["interpreters"] > samples[1]["interpreters"]:
        grows.append(f"interpreters alive +{i:.2f}/cycle")
    b = slope(samples, "malloc")
    if b is not None and b * span > FLAT_HEAP_SHARE * (samples[-1].get("malloc") or 0):
        grows.append(f"C heap +{b / 1024:.1f} KiB/cycle")
    o = slope(samples, "py_objects")
    if o is not None and o * span > FLAT_HEAP_SHARE * samples[-1]["py_objects"]:
        grows.append(f"Python objects +{o:.0f}/cycle")
    return "flat" if not grows else "grows: " + ", ".join(grows)


def mib(v: float | None) -> str:
    """Bytes as MiB (one decimal), or a dash."""
    return "–" if v is None else f"{v / MIB:.1f} MiB"


def snapshot_cell(s: dict[str, Any]) -> str:
    """JS heap (+ wasm = total) and DOM nodes of one sample."""
    cell = f"JS {s['heap'] / MIB:.1f}"
    if "wasm" in s:
        cell += f" + wasm {s['wasm'] / MIB:.1f} = {(s['heap'] + s['wasm']) / MIB:.1f} MiB"
    else:
        cell += " MiB"
    return cell + f", {s['nodes']} nodes"


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace, load: tuple[str, str],
           foreign: list[str], changes: list[str]) -> None:
    """Print the tables (stdout)."""
    print(f"# bench/memory.py  {datetime.datetime.now():%Y-%m-%d %H:%M}  {platform.machine()} {os.cpu_count()} cores  "
          f"messages={args.messages} cycles={args.cycles} reloads={args.reloads if 'ours' in results else 0} "
          f"every={args.every}  chainlit {CHAINLIT_VERSION}")
    print(f"load average before: {load[0]}; after: {load[1]}")
    if "ours" in results:
        print(f"ours: build {results['ours'].get('build', '?')} ({args.dist or 'widget/_dist'})")
    if changes:
        print("Chainlit changed so that nothing reaches the internet (as bench/peer.py): "
              + "; ".join(c.split(":")[0] for c in changes))
    print(f"requests to non-loopback hosts: {len(foreign)}" + (f" (e.g. {foreign[:3]})" if foreign else ""))
    for t, r in results.items():
        if r.get("error"):
            print(f"{t}: FAILED {r['error']}")
    targets = list(results)
    ph = {t: results[t]["phases"] for t in targets}

    print("\n## snapshots (after GC; widget closed and idle)")
    print(f"{'':28} | " + " | ".join(f"{t:>44}" for t in targets))
    rows = [("after boot + 1 reply", "boot"), (f"after {args.messages} messages", "conversation")]
    for label, phase in rows:
        cells = [snapshot_cell(ph[t][phase][-1]) if phase in ph[t] else "–" for t in targets]
        print(f"{label:28} | " + " | ".join(f"{c:>44}" for c in cells))
    for t in targets:
        conv = ph[t].get("conversation")
        if not conv:
            continue
        n = max(1, conv[-1]["x"] - conv[0]["x"])  # messages between the first and the last sample
        per = (conv[-1]["heap"] - conv[0]["heap"]) / n
        nodes = (conv[-1]["nodes"] - conv[0]["nodes"]) / n
        extra = ""
        if "wasm" in conv[-1]:
            extra = f", wasm {mib(conv[0]['wasm'])} -> {mib(conv[-1]['wasm'])}"
        if conv[-1].get("malloc") is not None:
            extra += (f", C heap in use {mib(conv[0]['malloc'])} -> {mib(conv[-1]['malloc'])}, Python objects "
                      f"{conv[0]['py_objects']} -> {conv[-1]['py_objects']}")
        print(f"  {t}: per message (boot to last) JS heap {per / 1024:+.1f} KiB, DOM {nodes:+.1f} nodes{extra}; "
              f"{results[t].get('answers')} answers shown; {conv[-1]['x'] - 1} messages in "
              f"{results[t]['times'].get('conversation', 0):.0f} s"
              + (f" ({results[t]['resent']} sent again: no reply within {REPLY_WAIT_MS / 1000:.0f} s)"
                 if results[t].get("resent") else ""))

    for phase in ("control", "toggle", "remount", "reload"):
        have = [t for t in targets if phase in ph[t]]
        if not have:
            continue
        print(f"\n## {phase} cycles (sampled every {args.reload_every if phase == 'reload' else args.every})")
        for t in have:
            ss = ph[t][phase]
            print(f"{t}: {ss[-1]['x']} cycles in {results[t]['times'].get(phase, 0):.0f} s")
            for s in ss:
                print(f"  {s['label']:>15}: {fmt_sample(s)}")
            parts = []
            for key, unit, scale in (("heap", " KiB", 1024), ("wasm_all", " KiB", 1024), ("malloc", " KiB", 1024),
                                     ("nodes", "", 1), ("listeners", "", 1), ("py_objects", "", 1),
                                     ("py_proxies", "", 1), ("interpreters", "", 1)):
                v = slope(ss, key)
                if v is not None:
                    parts.append(f"{key} {v / scale:+.2f}{unit}")
            print(f"  per cycle after warm-up: {', '.join(parts)}")
            print(f"  verdict: {verdict(ss)}")

    for t in targets:
        nc = ph[t].get("newchat")
        if nc:
            b, a = nc
            print(f"\n## New chat ({t}, after the cycles above): JS heap {mib(b['heap'])} -> {mib(a['heap'])}, DOM "
                  f"nodes {b['nodes']} -> {a['nodes']}, C heap in use {mib(b.get('malloc'))} -> {mib(a.get('malloc'))},"
                  f" Python objects {b.get('py_objects')} -> {a.get('py_objects')}")

    print("\n## memory goal")
    for t in targets:
        got = [f"{label}: {snapshot_cell(ph[t][phase][-1])}" for label, phase in rows if phase in ph[t]]
        print(f"{t}: " + "; ".join(got))
    if "ours" in ph and "chainlit" in ph:
        for label, phase in rows:
            if phase in ph["ours"] and phase in ph["chainlit"]:
                o, c = ph["ours"][phase][-1], ph["chainlit"][phase][-1]["heap"]
                print(f"  {label}: JS heap ours/Chainlit {o['heap'] / c:.2f}x, with wasm "
                      f"{(o['heap'] + o.get('wasm', 0)) / c:.2f}x")
    for t in targets:
        print(f"{t}: " + "; ".join(f"{p} {verdict(ph[t][p])}" for p in ("control", "toggle", "remount", "reload")
                                   if p in ph[t]))


# ------------------------------------------------------------------------------------------------------------------


def loadavg() -> str:
    """The 1/5/15-minute load averages."""
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


async def bench(args: argparse.Namespace) -> int:
    """Start the servers and the browser, run every target, print the report; 1 if a target failed."""
    from playwright.async_api import async_playwright

    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    for t in targets:
        if t not in ("ours", "chainlit"):
            raise SystemExit(f"unknown target {t!r}; known: ours, chainlit")
    if "ours" in targets and not ((Path(args.dist) if args.dist else DIST) / "manifest.json").is_file():
        raise SystemExit("widget/_dist is not built: run python build.py")
    work = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    relay = chainlit = pages = None
    foreign: list[str] = []
    changes: list[str] = []
    results: dict[str, dict[str, Any]] = {}
    load_before = loadavg()
    try:
        urls: dict[str, str] = {}
        if "ours" in targets:
            cfg = work / "relay.toml"
            cfg.write_text("create_rate_per_minute = 0\nmessage_rate_per_minute = 0\njoin_rate_per_minute = 0\n"
                           "get_rate_per_minute = 0\nask_user_rate_per_minute = 0\nmax_connections_per_address = 0\n"
                           "max_sockets_per_address = 0\n")
            extra = ["--demo-chunk-delay-ms", "0", "--config", str(cfg)]
            if args.dist:
                extra += ["--dist", args.dist]
            relay = start_relay(work, extra=extra)
            urls["ours"] = relay.url + "/"
            # Which build the relay serves (another build may replace widget/_dist while this runs: say which).
            manifest = (Path(args.dist) if args.dist else DIST) / "manifest.json"
            build_id = json.loads(manifest.read_text()).get("build_id", "?")
        if "chainlit" in targets:
            pages = PageServer(peer.ROOT)
            chainlit = Chainlit(chainlit_venv(), work)
            changes = chainlit.changes
            urls["chainlit"] = pages.add("/chainlit.html", CHAINLIT_PAGE.format(server=chainlit.url))
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
            try:
                # One untimed load per target first: servers warm (relay caches, Chainlit's imports), as peer.py.
                for t in targets:
                    ctx = await new_context(browser, t)
                    await peer.run_once(await Tab.open(ctx, foreign), Run(t, urls[t], args.step_timeout),
                                        f"warmup-{t}")
                    await ctx.close()
                for t in targets:
                    log(f"{t}: start")
                    results[t] = await run_target(browser, t, urls[t], args, foreign,
                                                  chainlit.url if chainlit else None)
                    if t == "ours":
                        results[t]["build"] = build_id
            finally:
                await browser.close()
        report(results, args, (load_before, loadavg()), foreign, changes)
        save("memory", {"messages": args.messages, "cycles": args.cycles, "reloads": args.reloads,
                        "every": args.every, "foreign_requests": foreign, "targets": results})
        if any(r.get("error") for r in results.values()):
            return 1
    finally:
        if chainlit:
            chainlit.stop()
        if relay:
            relay.stop()
        if pages:
            pages.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def main() -> int:
    """Command line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="ours,chainlit", help="comma-separated: ours, chainlit")
    ap.add_argument("--messages", type=int, default=100, help="user messages in the conversation (default 100)")
    ap.add_argument("--cycles", type=int, default=100, help="open/close and remount cycles (default 100)")
    ap.add_argument("--reloads", type=int, default=20,
                    help="ours: destroy + new loader cycles, a new Pyodide each (default 20: each one keeps ~35 MiB "
                    "that Pyodide cannot release; 0: skip)")
    ap.add_argument("--every", type=int, default=10, help="sample every this many messages / cycles (default 10)")
    ap.add_argument("--reload-every", type=int, default=5, help="sample every this many reloads (default 5)")
    ap.add_argument("--quick", action="store_true",
                    help="small N for bench/all.py: 20 messages, 20 cycles, 4 reloads, samples every 5 / 2")
    ap.add_argument("--dist", help="serve another build output folder (default widget/_dist)")
    ap.add_argument("--step-timeout", type=float, default=90, help="seconds for one page load + reply or one step")
    ap.add_argument("--timeout", type=float, default=2400, help="stop the whole benchmark after this many seconds")
    args = ap.parse_args()
    if args.quick:
        args.messages, args.cycles, args.reloads, args.every, args.reload_every = 20, 20, 4, 5, 2
    try:
        return asyncio.run(asyncio.wait_for(bench(args), args.timeout))
    except TimeoutError:
        print(f"bench/memory.py: stopped after {args.timeout:.0f} s (--timeout)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

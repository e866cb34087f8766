"""Reader benchmark (not a test): a scripted reader meets the widget and Chainlit Copilot, interleaved (issue 32).

The reader reads the page (dwell), moves the mouse to the toggle over ~300 ms, clicks, and types a 40-character
question at 60 ms a key, then Enter. Each visit kind runs ours, then Chainlit, then ours again..., in one Chromium,
both on loopback: ours is the demo page served by a local relay (demo model, chunk delay 0; ``widget/_dist``, or
``--dist``), Chainlit is bench/peer.py's Copilot host page and echo app (``Chainlit``, CHAINLIT_VERSION, its venv
and what was changed so that nothing reaches the internet: bench/peer.py's docstring). Measured per visit, on the
page's own clock (a requestAnimationFrame probe added by ``add_init_script``, the same for both):

- click → composer focused: from the toggle click's event time to the first frame in which a composer of the
  widget has the focus and is editable (ours: the loader's early composer or the bar's). Chainlit focuses its
  dialog, not its composer, on open: its reader clicks into the composer as soon as it shows (at once, no mouse
  travel: a lower bound), and its figure is the click on the toggle → the composer focused after that second click;
- keys lost: characters of the question missing from (or changed in) the user message the widget shows as sent.
  Ours: the reader types right after the toggle click; Chainlit: right after the click into its composer;
- worst key input delay: the longest wait of one of the reader's keys for the main thread (Event Timing:
  keydown's processingStart − its time; the API reports only events of 16 ms or more, so 0 means each key's
  event was handled within 16 ms);
- Enter → first token: from Enter's event time to the first frame showing text of the answer (Chainlit's echo app
  sends its answer whole, so its first text is its whole answer; ours streams the demo model's answer);
- click → first token, and click → reply: to the first frame showing the complete answer (ours: the answer shown
  and the bar no longer streaming; Chainlit: its first text);
- load → click and load → first token: from the navigation's start (the page's time origin). The reader's mouse
  travel is Playwright's awaited moves, each waiting for the page's main thread to take it: a busy page (ours
  starting Python) gets the click later than a real reader's hand would make it, so load → click is longer for
  ours, and load → first token compares both widgets for the same reader.

Visit kinds: ``cold`` (a fresh context, 3 s of reading), ``cold-now`` (clicks as soon as the toggle shows),
``second`` (the same tab's next page view, 3 s of reading; the reader closed the bar on the first), ``newtab``
(a second tab of the same browser context after a first tab's whole visit — ours: once that tab stored its
snapshot —, 3 s of reading), ``throttled`` (cold, clicking as soon as the toggle shows, on 10 Mbit/s with 40 ms RTT
and the CPU 4× slower, through CDP on the page's target). For the throttled view the bench also prints what ours
shows the reader meanwhile (each state's first frame after the click), its loader's marks and its largest
transfers on the click's clock (where the time to the first token goes).

``--race N`` (ours only) proves the early-click race (issue 32 item 3): one tab opens the bar, then N later page
views in it reopen it by themselves while the reader clicks the toggle at once after the load (0, 25, 50 … ms
after it, across the ~0.5 s the restore takes) and types; each must end with the bar open, its toggle expanded
and the typed text in its composer.

    python bench/reader.py [-n 10] [--kinds cold,cold-now,second,newtab,throttled] [--targets ours,chainlit]
                           [--race 20] [--dist widget/_dist]
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import difflib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peer  # bench/peer.py: Chromium flags, Chainlit, its host page, the page server
from peer import BROWSER_ARGS, CHAINLIT_PAGE, CHAINLIT_VERSION, Chainlit, PageServer, chainlit_venv
from results import save
from support import CHROMIUM, start_relay  # tests/support.py, on sys.path through peer

QUESTION = "what are your opening hours on sunday mo"  # 40 characters; each visit ends it with its own two letters
KEY_DELAY_MS = 60
KINDS = ("cold", "cold-now", "second", "newtab", "throttled")
Kind = Literal["cold", "cold-now", "second", "newtab", "throttled"]
DWELL_S: dict[str, float] = {"cold": 3.0, "cold-now": 0.0, "second": 3.0, "newtab": 3.0, "throttled": 0.0}
THROTTLE = {"offline": False, "latency": 40, "downloadThroughput": 10e6 / 8, "uploadThroughput": 10e6 / 8}
CPU_SLOWDOWN = 4
TIMEOUT_MS = 120_000

# Where each widget's parts are: the toggle (its host element's id, the button inside its shadow root), the shadow
# roots holding a composer, the composer, the sent user messages and the answers (in the bar's root), and for ours
# the sign that the answer is complete (Send is back: it is hidden while an answer streams).
TARGETS: dict[str, dict[str, Any]] = {
    "ours": {
        "toggleHost": "autopilot-toggle-host", "toggle": "button.toggle",
        "roots": ["autopilot-toggle-host", "autopilot-bar-host"], "input": "textarea.early-input, textarea.input",
        "barHost": "autopilot-bar-host", "user": ".message.user .content",
        "answers": ".message.assistant .content", "idle": "button.send:not([hidden])",
        "focusedOnOpen": True,
    },
    "chainlit": {
        "toggleHost": "chainlit-copilot", "toggle": "#chainlit-copilot-button",
        "roots": ["chainlit-copilot"], "input": "#chat-input",
        "barHost": "chainlit-copilot", "user": '[data-step-type="user_message"] [role="article"]',
        "answers": '[data-step-type="assistant_message"] [role="article"]', "idle": None,
        "focusedOnOpen": False,
    },
}

# The page's probe: the toggle click's time, the frames in which the composer shows and has the focus, Enter's time,
# the first frame with answer text and the first with the complete answer; for ours what the reader sees meanwhile.
PROBE = """
(() => {
  const cfg = %s;
  const R = window.__reader = {click: null, shown: null, focused: null, enter: null, first: null, done: null,
                               seen: [], prev: null, keys: []};
  // Each key's input delay (Event Timing: the event's time → its handler ran), from the click on.
  try {
    new PerformanceObserver((l) => { for (const e of l.getEntries()) {
      if (R.click !== null && e.startTime >= R.click && e.name === 'keydown') {
        R.keys.push(e.processingStart - e.startTime);
      }
    } }).observe({type: 'event', durationThreshold: 16, buffered: true});
  } catch (e) {}
  const roots = () => cfg.roots.map((id) => document.getElementById(id)).filter((h) => h && h.shadowRoot)
    .map((h) => h.shadowRoot);
  const visible = (e) => !!e && e.getClientRects().length > 0 && e.getBoundingClientRect().height > 0;
  const focusedComposer = () => roots().some((r) => {
    const a = r.activeElement;
    return !!a && a.matches(cfg.input) && !a.readOnly && !a.disabled;
  });
  const shown = () => roots().some((r) => [...r.querySelectorAll(cfg.input)].some(visible));
  const bar = () => { const h = document.getElementById(cfg.barHost); return h && h.shadowRoot; };
  // An answer with text after the visit's own user message (a later view shows the earlier visit's, R.prev).
  const answered = () => { const r = bar();
    if (!r) return false;
    const us = [...r.querySelectorAll(cfg.user)].filter((e) => e.textContent.trim() !== R.prev);
    const u = us[us.length - 1];
    return !!u && [...r.querySelectorAll(cfg.answers)].some((a) => a.textContent.trim()
      && (u.compareDocumentPosition(a) & Node.DOCUMENT_POSITION_FOLLOWING)); };
  const txt = (r, sel) => { const e = r && r.querySelector(sel); return e && visible(e) ? e.textContent.trim() : ''; };
  // What ours shows the reader: the loader's frame (its state line, status card, hint) or the bar (its connection
  // line, composer placeholder, hint).
  const sight = () => {
    if (cfg.toggleHost !== 'autopilot-toggle-host') return '';
    const t = document.getElementById(cfg.toggleHost), b = bar();
    const tr = t && t.shadowRoot;
    const early = tr && tr.querySelector('.early');
    if (early && !early.hidden) return ['frame', txt(tr, '.early-state'), txt(tr, '.status'), txt(tr, '.early-hint')]
      .filter(Boolean).join(' | ');
    const panel = b && b.querySelector('.panel');
    if (panel && visible(panel)) { const i = b.querySelector('textarea.input');
      return ['bar', txt(b, '.connection'), i ? 'placeholder ' + i.placeholder : '', txt(b, '.hint'),
              answered() ? 'answer shown' : ''].filter(Boolean).join(' | '); }
    return 'nothing open';
  };
  const watch = () => {
    const t = performance.now();  // (not the frame's start time, which can precede the click's event)
    const s = sight();
    if (s && (!R.seen.length || R.seen[R.seen.length - 1][1] !== s)) R.seen.push([t - R.click, s]);
    if (R.shown === null && shown()) R.shown = t;
    if (R.focused === null && focusedComposer()) R.focused = t;
    if (R.enter !== null && R.first === null && answered()) R.first = t;
    if (R.first !== null && R.done === null) {
      const r = bar();
      if (!cfg.idle || (r && r.querySelector(cfg.idle))) R.done = t;
    }
    if (R.done === null && t - R.click < %d) requestAnimationFrame(watch);
  };
  document.addEventListener('click', (e) => {
    if (R.click !== null) return;
    const path = e.composedPath();
    if (!path.some((n) => n.id === cfg.toggleHost) || !path.some((n) => n.matches && n.matches(cfg.toggle))) return;
    R.click = e.timeStamp;
    requestAnimationFrame(watch);
  }, true);
  window.addEventListener('keydown', (e) => {
    if (e.key !== 'Enter' || R.click === null || R.enter !== null || !focusedComposer()) return;
    R.enter = e.timeStamp;
  }, true);
})();
"""
# The user messages the widget shows (what its server took).
SENT = """(cfg) => { const h = document.getElementById(cfg.barHost);
  return h && h.shadowRoot ? [...h.shadowRoot.querySelectorAll(cfg.user)].map((e) => e.textContent.trim()) : []; }"""
# Ours: the bar is open (its panel laid out).
BAR_OPEN = """() => { const b = document.getElementById('autopilot-bar-host');
  const p = b && b.shadowRoot.querySelector('.panel');
  return !!p && !p.hidden && p.getBoundingClientRect().height > 0; }"""
BAR_INPUT = "() => document.getElementById('autopilot-bar-host').shadowRoot.querySelector('textarea.input').value"
MARKS = "() => performance.getEntriesByType('mark').filter((m) => m.name.startsWith('autopilot:'))" \
        ".map((m) => [m.name, m.startTime])"


class Visit(TypedDict, total=False):
    """One reader's visit (ms; NaN where it did not happen)."""

    focused: float
    shown: float
    lost: int
    key_delay: float
    nav_click: float
    nav_first: float
    first: float
    click_first: float
    reply: float
    seen: list[list[Any]]
    marks: dict[str, float]
    transfers: list[dict[str, Any]]


def log(msg: str) -> None:
    print(f"[reader {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def keys_lost(typed: str, sent: str) -> int:
    """Characters of ``typed`` that are not in ``sent`` in order."""
    matched = sum(b.size for b in difflib.SequenceMatcher(None, typed, sent, autojunk=False).get_matching_blocks())
    return len(typed) - matched


def question(seq: int) -> str:
    """The visit's question: QUESTION with its last two letters made unique (a second view shows the first's)."""
    return QUESTION[:-2] + chr(97 + seq // 26 % 26) + chr(97 + seq % 26)


class Reader:
    """Drives the reader's visits of one target in one browser."""

    def __init__(self, browser: Any, target: str, url: str) -> None:
        self.browser, self.target, self.url, self.cfg = browser, target, url, TARGETS[target]
        self.seq = 0
        self.prev = ""  # the user message of the context's earlier visit (a later view shows it too)

    async def context(self) -> Any:
        ctx = await self.browser.new_context()
        await ctx.add_init_script(PROBE % (json.dumps(self.cfg), TIMEOUT_MS))
        return ctx

    async def visit(self, page: Any, dwell_s: float, trace: bool = False) -> Visit:
        """One visit of the target in ``page``: load, dwell, travel, click, type, Enter, the answer."""
        self.seq += 1
        text = question(self.seq)
        transfers: list[Any] = []
        def hook(req: Any) -> None:
            transfers.append(req)

        if trace:
            page.context.on("requestfinished", hook)
        # A reader who reads first reads the loaded page; one who clicks at once does so when the toggle shows.
        await page.goto(self.url, timeout=TIMEOUT_MS, wait_until="load" if dwell_s else "commit")
        toggle = page.locator(f"#{self.cfg['toggleHost']} >> {self.cfg['toggle']}")
        await toggle.wait_for(state="visible", timeout=TIMEOUT_MS)
        await page.evaluate("(prev) => { window.__reader.prev = prev; }", self.prev)
        await asyncio.sleep(dwell_s)
        box = await toggle.bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        await page.mouse.move(x - 300, y - 200)
        await page.mouse.move(x, y, steps=18)  # ~300 ms of travel at 60 Hz
        await page.mouse.click(x, y)
        if not self.cfg["focusedOnOpen"]:
            # Chainlit focuses its dialog, not its composer: the reader clicks into the composer once it shows.
            await page.wait_for_function("() => window.__reader.shown !== null", timeout=TIMEOUT_MS)
            if not await page.evaluate("() => window.__reader.focused !== null"):
                await page.locator(f"#{self.cfg['roots'][0]} >> {self.cfg['input']}").click(timeout=TIMEOUT_MS)
        await page.keyboard.type(text, delay=KEY_DELAY_MS)
        await page.keyboard.press("Enter")
        try:
            await page.wait_for_function("() => window.__reader.done !== null", timeout=60_000)
        except Exception:  # noqa: BLE001 - no answer (nothing sent, or it never came): NaN, keys counted below
            pass
        await page.wait_for_timeout(200)  # a message still being rendered
        sent = [s for s in await page.evaluate(SENT, self.cfg) if s != self.prev]
        sent_text = max(sent, key=lambda s: len(text) - keys_lost(text, s), default="")
        self.prev = sent_text
        r = await page.evaluate("window.__reader")

        def since(a: str, b: str) -> float:
            return r[b] - r[a] if r.get(a) is not None and r.get(b) is not None else float("nan")

        v: Visit = {"focused": since("click", "focused"), "shown": since("click", "shown"),
                    "lost": keys_lost(text, sent_text), "first": since("enter", "first"),
                    "click_first": since("click", "first"), "reply": since("click", "done"), "seen": r["seen"],
                    "key_delay": max(r["keys"], default=0.0),
                    "nav_click": r["click"] if r.get("click") is not None else float("nan"),
                    "nav_first": r["first"] if r.get("first") is not None else float("nan")}
        if r.get("click") is not None:
            v["marks"] = {name.removeprefix("autopilot:"): t - r["click"] for name, t in await page.evaluate(MARKS)}
        if trace and r.get("click") is not None:
            origin = await page.evaluate("performance.timeOrigin")
            click_epoch = origin + r["click"]
            for req in transfers:
                t = req.timing
                try:
                    size = (await req.sizes())["responseBodySize"]
                except Exception:  # noqa: BLE001 - a closed worker's request
                    size = -1
                v.setdefault("transfers", []).append({
                    "url": req.url.split("?")[0].rsplit("/", 1)[-1][:48], "bytes": size,
                    "start": t["startTime"] - click_epoch,
                    "end": t["startTime"] + t["responseEnd"] - click_epoch if t["responseEnd"] >= 0 else None})
            page.context.remove_listener("requestfinished", hook)
        return v

    async def close_bar(self, page: Any) -> None:
        """The reader closes the widget (ours: Escape in its composer; Chainlit: its toggle)."""
        if self.target == "ours":
            await page.keyboard.press("Escape")
        else:
            await page.locator(f"#{self.cfg['toggleHost']} >> {self.cfg['toggle']}").click()
        await page.wait_for_timeout(300)

    async def run(self, kind: Kind) -> Visit:
        """One visit of ``kind`` in a fresh context."""
        self.prev = ""
        ctx = await self.context()
        try:
            page = await ctx.new_page()
            if kind == "throttled":
                cdp = await ctx.new_cdp_session(page)
                await cdp.send("Network.enable")
                await cdp.send("Network.emulateNetworkConditions", THROTTLE)
                await cdp.send("Emulation.setCPUThrottlingRate", {"rate": CPU_SLOWDOWN})
            if kind in ("second", "newtab"):
                await self.visit(page, 3.0)
            if kind == "second":
                await self.close_bar(page)  # closed: the next view starts on the reader's intent
            if kind == "newtab":
                if self.target == "ours":
                    try:
                        await page.wait_for_function(
                            "() => performance.getEntriesByName('autopilot:snapshot-stored').length > 0",
                            timeout=30_000, polling=100)
                    except Exception:  # noqa: BLE001 - not stored: the new tab waits for its own worker
                        log("newtab: the first tab stored no snapshot within 30 s")
                page = await ctx.new_page()
            return await self.visit(page, DWELL_S[kind], trace=kind == "throttled" and self.target == "ours")
        finally:
            await ctx.close()


async def race(browser: Any, url: str, runs: int) -> list[dict[str, Any]]:
    """Ours: later views whose bar reopens by itself while the reader clicks the toggle; whether it stays open."""
    ctx = await browser.new_context()
    out = []
    try:
        page = await ctx.new_page()
        vw = page.viewport_size
        await page.goto(url, timeout=TIMEOUT_MS)
        toggle = page.locator("#autopilot-toggle-host >> button.toggle")
        await toggle.click(timeout=TIMEOUT_MS)
        await page.wait_for_function("() => performance.getEntriesByName('autopilot:joined').length > 0",
                                     timeout=TIMEOUT_MS)
        for i in range(runs):
            delay = 25 * (i % 20)
            await page.goto(f"{url}?view={i}", timeout=TIMEOUT_MS)  # returns at the load event
            if delay:
                await page.wait_for_timeout(delay)
            # The toggle's place (bottom right, 20 px off the edges, 56 px wide): the mouse, not locator.click, which
            # waits until the page is idle again, later than a reader's click.
            await page.mouse.click(vw["width"] - 48, vw["height"] - 48)
            text = f"later view {i} typed at once"
            await page.keyboard.type(text)
            await page.wait_for_function("() => performance.getEntriesByName('autopilot:mounted').length > 0",
                                         timeout=TIMEOUT_MS)
            await page.wait_for_timeout(300)
            row = {"delay_ms": delay, "open": await page.evaluate(BAR_OPEN),
                   "expanded": await toggle.get_attribute("aria-expanded") == "true",
                   "kept": await page.evaluate(BAR_INPUT) == text}
            out.append(row)
            log(f"race {i + 1}/{runs}: click {delay} ms after the load: {row}")
            await page.keyboard.press("Control+A")  # an empty composer for the next view (the bar stays open)
            await page.keyboard.press("Backspace")
    finally:
        await ctx.close()
    return out


def vals(rows: list[Visit], key: str) -> list[float]:
    return [float(r[key]) for r in rows if key in r and r[key] == r[key]]  # type: ignore[literal-required]


def med(rows: list[Visit], key: str) -> float | None:
    v = vals(rows, key)
    return statistics.median(v) if v else None


def fmt(rows: list[Visit], key: str) -> str:
    v = vals(rows, key)
    missing = len(rows) - len(v)
    if not v:
        return "n/a"
    return (f"{statistics.median(v):.0f} ({min(v):.0f}–{max(v):.0f})"
            + (f" [{missing} without]" if missing else ""))


COLUMNS = [("focused", "click → composer focused"), ("lost", "keys lost of 40"), ("key_delay", "worst key input delay"),
           ("first", "Enter → first token"),
           ("click_first", "click → first token"), ("reply", "click → reply"), ("nav_click", "load → click"),
           ("nav_first", "load → first token")]


def report(results: dict[str, dict[str, list[Visit]]], n: int, races: list[dict[str, Any]],
           load_before: tuple[float, ...]) -> None:
    load = os.getloadavg()
    print(f"# bench/reader.py  {datetime.datetime.now():%Y-%m-%d %H:%M}  {platform.machine()} {os.cpu_count()} cores  "
          f"load before {load_before[0]:.1f} {load_before[1]:.1f}, after {load[0]:.1f} {load[1]:.1f}  N={n} per kind "
          f"and target, interleaved  chainlit {CHAINLIT_VERSION}  (ms: median (min–max))")
    print("Chainlit: its composer is not focused on open; its reader clicks into it as soon as it shows, and its "
          "'click → composer focused' runs from the toggle click to the focus after that second click. Its echo app "
          "sends the answer whole: first token = reply.")
    kinds = list(next(iter(results.values())))
    for kind in kinds:
        print(f"\n## {kind}")
        print(f"{'column':26} | " + " | ".join(f"{t:30}" for t in results) + (" | ours / Chainlit (medians)"
                                                                              if len(results) > 1 else ""))
        for key, label in COLUMNS:
            row = f"{label:26} | " + " | ".join(f"{fmt(results[t][kind], key):30}" for t in results)
            if "ours" in results and "chainlit" in results:
                a, b = med(results["ours"][kind], key), med(results["chainlit"][kind], key)
                row += " | " + (f"{a / b:.2f}×" if a is not None and b else "n/a")
            print(row)
    ours = results.get("ours", {}).get("throttled") or []
    if ours:
        print("\n## throttled, ours: what the reader sees from the click (ms: first frame of each state, median)")
        firsts: dict[str, list[float]] = {}
        for v in ours:
            for t, s in v.get("seen", []):
                firsts.setdefault(s, []).append(t)
        for s, ts in sorted(firsts.items(), key=lambda kv: statistics.median(kv[1])):
            print(f"  {statistics.median(ts):7.0f}  {s}  ({len(ts)} of {len(ours)} visits)")
        marks: dict[str, list[float]] = {}
        for v in ours:
            for k, t in (v.get("marks") or {}).items():
                marks.setdefault(k, []).append(t)
        print("  loader and client marks (ms from the click, median): " + ", ".join(
            f"{k} {statistics.median(ts):.0f}" for k, ts in sorted(marks.items(), key=lambda kv: statistics.median(
                kv[1]))))
        big: dict[str, list[dict[str, Any]]] = {}
        for v in ours:
            for tr in v.get("transfers") or []:
                if tr["bytes"] >= 20_000:
                    big.setdefault(tr["url"], []).append(tr)
        print("  transfers over 20 kB (body as served; start → end, ms from the click, median):")
        for url, trs in sorted(big.items(), key=lambda kv: statistics.median(t["end"] or 0 for t in kv[1])):
            print(f"    {url:48} {statistics.median(t['bytes'] for t in trs) / 1e3:8.0f} kB  "
                  f"{statistics.median(t['start'] for t in trs):7.0f} → "
                  f"{statistics.median(t['end'] or 0 for t in trs):7.0f}")
    if races:
        ok = sum(1 for r in races if r["open"] and r["expanded"] and r["kept"])
        print(f"\n## early-click race (ours): the bar open, expanded and the text kept in {ok} of {len(races)} later "
              f"views (clicks 0–{max(r['delay_ms'] for r in races)} ms after the load)")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10, help="visits per kind and target (default 10)")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of: {', '.join(KINDS)}")
    ap.add_argument("--targets", default="ours,chainlit", help="comma-separated: ours, chainlit")
    ap.add_argument("--race", type=int, default=20, help="later views for the early-click race (0: none)")
    ap.add_argument("--dist", help="a build output folder (default: widget/_dist)")
    args = ap.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    targets = [t for t in args.targets.split(",") if t]
    for k in kinds:
        if k not in KINDS:
            raise SystemExit(f"unknown visit kind {k!r}; known: {', '.join(KINDS)}")
    for t in targets:
        if t not in TARGETS:
            raise SystemExit(f"unknown target {t!r}; known: {', '.join(TARGETS)}")
    from playwright.async_api import async_playwright

    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="bench-reader-"))
    relay = chainlit = pages = None
    results: dict[str, dict[str, list[Visit]]] = {t: {k: [] for k in kinds} for t in targets}
    failures: list[str] = []
    races: list[dict[str, Any]] = []
    try:
        urls: dict[str, str] = {}
        if "ours" in targets:
            relay = start_relay(work, extra=["--demo-chunk-delay-ms", "0"] + (["--dist", args.dist] if args.dist
                                                                               else []))
            urls["ours"] = relay.url + "/"
        if "chainlit" in targets:
            pages = PageServer(peer.ROOT)
            chainlit = Chainlit(chainlit_venv(), work)
            urls["chainlit"] = pages.add("/chainlit.html", CHAINLIT_PAGE.format(server=chainlit.url))
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
            readers = {t: Reader(browser, t, urls[t]) for t in targets}
            try:
                for t in targets:  # one untimed visit each first: servers warm (relay caches, Chainlit's imports)
                    await readers[t].run("cold-now")
                for i in range(args.n):
                    for kind in kinds:
                        for t in targets:
                            try:
                                v = await readers[t].run(kind)
                            except Exception as exc:  # noqa: BLE001 - a timeout: counted, not fatal
                                failures.append(f"{kind} {t}: {str(exc).splitlines()[0][:160]}")
                                log(f"{i + 1}/{args.n} {kind} {t}: FAILED {failures[-1]}")
                                continue
                            results[t][kind].append(v)
                            log(f"{i + 1}/{args.n} {kind:9} {t:8}: focused {v['focused']:.0f}, lost {v['lost']}, "
                                f"Enter → first {v['first']:.0f}, click → reply {v['reply']:.0f}")
                if args.race and "ours" in targets:
                    races = await race(browser, urls["ours"], args.race)
            finally:
                await browser.close()
    finally:
        if chainlit:
            chainlit.stop()
        if relay:
            relay.stop()
        if pages:
            pages.close()
        shutil.rmtree(work, ignore_errors=True)
    report(results, args.n, races, load_before)
    if failures:
        print(f"\nfailed visits (left out): {len(failures)}")
        for f in failures:
            print(f"  - {f}")
    save("reader", {"n": args.n, "dist": args.dist, "targets": targets, "kinds": kinds,
                    "chainlit_version": CHAINLIT_VERSION, "throttle": THROTTLE, "cpu_slowdown": CPU_SLOWDOWN,
                    "visits": results, "race": races, "failures": failures})


if __name__ == "__main__":
    asyncio.run(main())

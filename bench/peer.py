"""Peer benchmark (not a test): our widget vs Chainlit Copilot vs a bare ``loadPyodide()``, interleaved, in Chromium.

Targets, all on loopback:

- ``ours``: the demo page served by our relay (``python -m widget.relay``, demo model, chunk delay 0), as built in
  ``widget/_dist`` (run ``python build.py`` first; ``--snapshot`` builds are used as they are).
- ``chainlit``: a host page with Chainlit's Copilot script tag (``/copilot/index.js`` + ``mountChainlitWidget``),
  talking to a minimal echo app (``bench/peer/app.py``) run by ``chainlit run --headless``. Chainlit is installed
  into its own venv under a cache folder (``$AUTOPILOT_BENCH_CACHE``, default ``~/.cache/autopilot-widget/peer``;
  created once, reused), never into the project's environment.
- ``bare``: a page that only does ``loadPyodide()`` from the official npm files, served unmodified (source stdlib),
  gzip on the fly where it saves > 10 % (as our relay does) and ``immutable`` caching (as a CDN does).

What was changed in Chainlit so that nothing reaches the internet (printed with each run):

- its Copilot loads the Inter font from a remote font host unless ``/public/theme.json`` lists ``custom_fonts``:
  ``public/theme.json`` points it at ``public/fonts.css`` on the Chainlit server itself (a local, empty stylesheet,
  so the system font is used; no font file is downloaded — if anything, this makes Chainlit faster);
- Chainlit 2.12's ``config.toml`` has no telemetry setting and its Python code has no telemetry client; the
  environment it runs in drops ``LITERAL_API_KEY``/``DATABASE_URL``/``OAUTH_*``/``CHAINLIT_*`` so no data layer or
  sign-in provider is configured; the default ``config.toml`` it writes on first start is kept otherwise;
- Chromium resolves every host name except loopback to nothing (``--host-resolver-rules``), and every request of
  every page is logged: any non-loopback request is reported (there should be none).

Measured per run (a fresh browser context = cold, empty HTTP cache; the same tab navigated to the page again =
warm: disk cache, and whatever the renderer keeps across a reload), the targets interleaved in a rotating order,
N runs each:

- toggle visible: navigation start → the launcher button is in the DOM and has a size (requestAnimationFrame
  probe added by ``add_init_script``, the same for both widgets); for ours also the loader's own marks
  (toggle painted − loader ran);
- reply visible: navigation start → a sent message's echo is rendered in the widget (the bench clicks the launcher
  as soon as it is visible, types a unique token once the composer is editable, presses Enter; a
  requestAnimationFrame probe inside the page timestamps the first frame in which the widget's answer contains the
  token). The bare page reports ``loadPyodide()`` resolved instead. With ``--dwell S`` the reader reads the page
  for S seconds after its load, moves the pointer to the launcher and clicks it (a reader who reaches for the widget
  later, after any idle-time work): "reply visible after the reader's click" is timed from that click;
- longest main-thread task, total blocking time and main-thread busy time from a Chrome trace of the visit
  (``bench/chrome_trace.py``: the renderer main thread's tasks, navigation to reply), beside what the Long Tasks API
  (PerformanceObserver ``longtask``) reported for the same visit: it does not see work that runs after ``await
  WebAssembly.instantiate()``, where Python starts; bytes transferred (Playwright's request sizes: encoded body +
  headers of every request of the page and its workers, as served, every origin; WebSocket frames not included), JS
  heap after a forced GC (CDP ``Runtime.getHeapUsage``, the page's isolate), and wasm memory (the Pyodide heap:
  ``HEAP8.buffer.byteLength``) for ours and bare.
- each target's timeline (medians, ms from navigation start): every ``autopilot:`` mark of the visit (the loader's
  and the client's, and the pre-warm worker's steps, ``worker-*``, which the loader marks on the page's clock) and
  the bench's own moments in brackets: ``(click)``, ``(editable)``, ``(sent)``, ``(reply)``. Where the reply's time
  goes, visit by visit.

Variants of ours (``--targets``): ``ours-noprewarm`` / ``ours-prewarm`` / ``ours-prewarm-basic`` set
``window.AutopilotConfig.prewarm`` to false / true / "basic" (default: a worker pre-warms the wasm code on a
tab's first start only; "basic": start-up only, without the widget's imports and a Markdown render;
``ours-prewarm-compile``: "compile", a warm-only worker on every visit; ``ours-warm``: "warm", the worker once per tab
without the hand-over (the default before 2026-12-02); ``ours-handoff``: "handoff" (now the default), the worker hands
the page a snapshot of its Python and its compiled module), ``ours-nosnapcache``: ``snapshotCache: false``, later views
start Python on the page instead of restoring the snapshot the worker stored (the default before 2026-12-02),
``ours-eager`` / ``ours-intent`` / ``ours-ready`` set the boot policy (the demo page's default is idle);
``ours-snapshot`` / ``ours-before`` are the demo page of another build folder (``--snapshot-dist``: made with
``build.py --snapshot``; ``--before-dist``: an older commit's build) served by another relay.

    python bench/peer.py [-n 5] [--targets ours,chainlit,bare] [--no-warm] [--dwell S] [--timeout 1500]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import gzip
import http.server
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from support import CHROMIUM, CHROMIUM_ARGS, DIST, free_port, start_relay, stop_process  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from chrome_trace import Blocking, main_thread_tasks, tracing  # noqa: E402
from results import save  # noqa: E402

CHAINLIT_VERSION = "2.12.0"
ASSETS = Path(__file__).resolve().parent / "peer"
CACHE = Path(os.environ.get("AUTOPILOT_BENCH_CACHE") or Path.home() / ".cache" / "autopilot-widget" / "peer")
# Loopback only: every other host name resolves to nothing.
BROWSER_ARGS = CHROMIUM_ARGS + ["--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost"]

# Per target: where the launcher is (host element id, selector inside its shadow root), where the answer is.
TARGETS: dict[str, dict[str, Any]] = {
    "ours": {
        "host": "autopilot-toggle-host", "button": "button.toggle",
        "bar_host": "autopilot-bar-host", "input": "textarea.input", "submit": "button.send",
        "answers": ".messages > .message.assistant",
    },
    "chainlit": {
        "host": "chainlit-copilot", "button": "#chainlit-copilot-button",
        "bar_host": "chainlit-copilot", "input": "#chat-input", "submit": "#chat-submit",
        "answers": '[data-step-type="assistant_message"] [role="article"]',
    },
    "bare": {},
}
# Variants of ours: the same page with the loader configured through window.AutopilotConfig.
VARIANTS = {"ours-noprewarm": {"prewarm": False}, "ours-prewarm": {"prewarm": True},
            "ours-prewarm-basic": {"prewarm": "basic"}, "ours-prewarm-compile": {"prewarm": "compile"},
            "ours-handoff": {"prewarm": "handoff"}, "ours-warm": {"prewarm": "warm"},
            "ours-always": {"prewarm": "always"},
            "ours-nosnapcache": {"snapshotCache": False},
            "ours-eager": {"boot": "eager"}, "ours-intent": {"boot": "intent"}, "ours-ready": {"boot": "ready"}}
# Ours from another build folder, served by a second relay: --snapshot-dist / --before-dist.
ALT_DIST = {"ours-snapshot": "snapshot_dist", "ours-before": "before_dist"}
for _name in [*VARIANTS, *ALT_DIST]:
    TARGETS[_name] = TARGETS["ours"]

PROBE = """
(() => {
  const P = window.__peer = {longtasks: [], toggle: null};
  try {
    new PerformanceObserver(l => { for (const e of l.getEntries()) P.longtasks.push([e.startTime, e.duration]); })
      .observe({type: 'longtask', buffered: true});
  } catch (e) {}
  const cfg = %s;
  if (!cfg.host) return;
  const look = () => {
    const h = document.getElementById(cfg.host);
    const b = h && h.shadowRoot && h.shadowRoot.querySelector(cfg.button);
    if (b) {
      const r = b.getBoundingClientRect();
      if (r.width > 0 && r.height > 0) { P.toggle = performance.now(); return; }
    }
    requestAnimationFrame(look);
  };
  requestAnimationFrame(look);
})();
"""

# Resolves with performance.now() of the first frame in which an answer of the widget contains the token.
WAIT_REPLY = """([cfg, token, timeoutMs]) => new Promise((resolve, reject) => {
  const t0 = performance.now();
  const look = () => {
    const h = document.getElementById(cfg.bar_host);
    const r = h && h.shadowRoot;
    if (r) {
      const all = r.querySelectorAll(cfg.answers);
      for (let i = all.length - 1; i >= 0 && i >= all.length - 3; i--) {
        if ((all[i].textContent || '').includes(token)) { resolve(performance.now()); return; }
      }
    }
    if (performance.now() - t0 > timeoutMs) { reject(new Error('no reply with ' + token)); return; }
    requestAnimationFrame(look);
  };
  look();
})"""

# The composer takes typing: ours keeps it read-only until connected. Typing before that makes Playwright's fill
# retry (~0.3-0.5 s later), which would be timed as ours.
COMPOSER_EDITABLE = """(cfg) => {
  const h = document.getElementById(cfg.bar_host);
  const el = h && h.shadowRoot && h.shadowRoot.querySelector(cfg.input);
  if (!el || el.getClientRects().length === 0) return false;
  if (el.isContentEditable) return true;
  return !el.readOnly && !el.disabled;
}"""

CLOSED_NEXT_TIME = """() => { try {
  Object.keys(sessionStorage).filter(k => k.startsWith('autopilot:open:')).forEach(k => sessionStorage.removeItem(k));
} catch (e) {} }"""

SUBMIT_ENABLED = """(cfg) => {
  const h = document.getElementById(cfg.bar_host);
  const b = h && h.shadowRoot && h.shadowRoot.querySelector(cfg.submit);
  return !!b && !b.disabled;
}"""

COLLECT = """(upTo) => {
  const P = window.__peer || {longtasks: []};
  const lt = P.longtasks.filter(([s]) => upTo == null || s <= upTo).map(([, d]) => d);
  const m = Object.fromEntries(performance.getEntriesByType('mark').map(e => [e.name, e.startTime]));
  let wasm = null;
  try {
    const py = (window.Autopilot && window.Autopilot.pyodide) || window.__pyodide;
    if (py) wasm = py._module.HEAP8.buffer.byteLength;
  } catch (e) {}
  return {longest: lt.length ? Math.max(...lt) : 0, tbt: lt.reduce((a, d) => a + Math.max(0, d - 50), 0),
          toggle: P.toggle, marks: m, wasm};
}"""

BARE_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>bare loadPyodide()</title></head>
<body><h1>Bare loadPyodide()</h1>
<script type="module">
  import { loadPyodide } from "/pyodide/pyodide.mjs";
  window.__pyodide = await loadPyodide();
  window.__pyodide.runPython("import sys; sys.version");
  performance.mark("bare:ready");
</script>
</body></html>
"""

CHAINLIT_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>Chainlit Copilot host page</title>
</head><body><h1>A host page with Chainlit's Copilot</h1>
<p>Minimal echo app; the widget is added with Chainlit's Copilot script tag.</p>
<script src="{server}/copilot/index.js"></script>
<script>window.mountChainlitWidget({{ chainlitServer: "{server}" }});</script>
</body></html>
"""


def log(msg: str) -> None:
    print(f"[peer {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------------------------
# Chainlit: venv, app folder, server


def chainlit_venv() -> Path:
    """The bench venv with chainlit==CHAINLIT_VERSION (created once under CACHE, reused)."""
    venv = CACHE / f"venv-chainlit-{CHAINLIT_VERSION}"
    exe = venv / "bin" / "chainlit"
    stamp = venv / ".installed"
    if exe.is_file() and stamp.is_file() and stamp.read_text().strip() == CHAINLIT_VERSION:
        return venv
    log(f"installing chainlit=={CHAINLIT_VERSION} into {venv} (once; reused by later runs)")
    shutil.rmtree(venv, ignore_errors=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    with (CACHE / "pip-install.log").open("wb") as out:
        proc = subprocess.run([str(venv / "bin" / "pip"), "install", "--disable-pip-version-check",
                               f"chainlit=={CHAINLIT_VERSION}"], stdout=out, stderr=subprocess.STDOUT, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"pip install chainlit=={CHAINLIT_VERSION} failed: see {CACHE / 'pip-install.log'}")
    stamp.write_text(CHAINLIT_VERSION + "\n")
    return venv


def chainlit_env() -> dict[str, str]:
    """The environment Chainlit runs in: no data layer, no sign-in providers, no Literal AI key."""
    drop = ("LITERAL_", "DATABASE_URL", "OAUTH_", "CHAINLIT_", "SLACK_", "TEAMS_", "DISCORD_", "OPENAI_", "AWS_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def prepare_chainlit_app(work: Path, server: str) -> list[str]:
    """Write the echo app and its local theme into ``work``; returns what was changed from Chainlit's defaults."""
    app = work / "chainlit-app"
    (app / "public").mkdir(parents=True, exist_ok=True)
    shutil.copy(ASSETS / "app.py", app / "app.py")
    shutil.copy(ASSETS / "fonts.css", app / "public" / "fonts.css")
    theme = json.loads((ASSETS / "theme.json").read_text())
    theme["custom_fonts"] = [f"{server}/public/fonts.css"]
    (app / "public" / "theme.json").write_text(json.dumps(theme, indent=2) + "\n")
    return [
        f"public/theme.json: custom_fonts = [{server}/public/fonts.css] (a local empty stylesheet on the Chainlit "
        "server) instead of the remote Inter font",
        "environment: LITERAL_*, DATABASE_URL, OAUTH_*, CHAINLIT_* unset (no data layer, no auth, no Literal AI)",
        "config.toml: Chainlit's own default (no telemetry setting exists in 2.12)",
        "Chromium: --host-resolver-rules maps every non-loopback host to nothing; requests logged",
    ]


class Chainlit:
    def __init__(self, venv: Path, work: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.changes = prepare_chainlit_app(work, self.url)
        self.app = work / "chainlit-app"
        self.log = work / "chainlit.log"
        self.proc = subprocess.Popen(
            [str(venv / "bin" / "chainlit"), "run", "app.py", "--headless", "--host", "127.0.0.1",
             "--port", str(self.port)],
            cwd=self.app, stdout=self.log.open("wb"), stderr=subprocess.STDOUT, env=chainlit_env(),
            stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chainlit exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/public/theme.json", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"chainlit did not answer within 90 s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        stop_process(self.proc)


# ------------------------------------------------------------------------------------------------------------------
# Host pages and the unmodified npm Pyodide files


def npm_pyodide_dir() -> Path:
    """The unpacked npm ``pyodide`` package from build.py's cache (the official files, unmodified)."""
    import build as buildmod

    cache = buildmod.default_cache_dir(ROOT)
    version = buildmod.NPM_PINS["pyodide"]
    found = sorted((cache / "unpacked").glob(f"pyodide-{version}-*"))
    found = [d for d in found if (d / ".complete").exists()]
    if not found:
        raise SystemExit(f"the npm pyodide {version} package is not in {cache}/unpacked: run python build.py")
    return found[-1]


class PageServer:
    """Loopback HTTP server: host pages, and ``/pyodide/*`` from the npm package (gzip where it saves > 10 %,
    computed once per file; immutable caching as a CDN serves versioned files)."""

    def __init__(self, pyodide_dir: Path) -> None:
        pages: dict[str, bytes] = {}
        gz: dict[str, bytes | None] = {}
        lock = threading.Lock()
        self.pages = pages
        types = {".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm",
                 ".json": "application/json", ".zip": "application/zip", ".map": "application/json"}

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path in pages:
                    self._send(200, pages[path], "text/html; charset=utf-8", "no-cache", None)
                    return
                if path.startswith("/pyodide/") and "/" not in path[len("/pyodide/"):] and ".." not in path:
                    f = pyodide_dir / path[len("/pyodide/"):]
                    if f.is_file():
                        raw = f.read_bytes()
                        enc = None
                        if "gzip" in (self.headers.get("Accept-Encoding") or "") and len(raw) >= 1024:
                            with lock:
                                if path not in gz:
                                    packed = gzip.compress(raw, 6, mtime=0)
                                    gz[path] = packed if len(packed) <= 0.9 * len(raw) else None
                                packed = gz[path]
                            if packed is not None:
                                raw, enc = packed, "gzip"
                        self._send(200, raw, types.get(f.suffix, "application/octet-stream"),
                                   "public, max-age=31536000, immutable", enc)
                        return
                self._send(404, b"not found", "text/plain", "no-store", None)

            def _send(self, code: int, body: bytes, ctype: str, cache: str, enc: str | None) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", cache)
                self.send_header("Vary", "Accept-Encoding")
                if enc:
                    self.send_header("Content-Encoding", enc)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def add(self, path: str, html: str) -> str:
        self.pages[path] = html.encode()
        return self.origin + path

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# ------------------------------------------------------------------------------------------------------------------
# One run


class Run:
    def __init__(self, target: str, url: str, timeout_s: float, dwell_s: float = 0.0) -> None:
        self.target, self.url, self.timeout_ms = target, url, timeout_s * 1000
        self.cfg = TARGETS[target]
        self.dwell_s = dwell_s  # the reader reads the page this long after its load before clicking the launcher


async def new_context(browser: Any, target: str) -> Any:
    ctx = await browser.new_context()
    await ctx.add_init_script(PROBE % json.dumps(TARGETS[target]))
    if target in VARIANTS:
        await ctx.add_init_script(f"window.AutopilotConfig = {json.dumps(VARIANTS[target])};")
    return ctx


class Tab:
    """A page with a CDP session counting the bytes of every response (reset per load)."""

    def __init__(self, page: Any, cdp: Any) -> None:
        self.page, self.cdp, self.bytes = page, cdp, 0
        self.finished: list[Any] = []

    async def transferred(self) -> int:
        """Bytes of every finished request of this load, the page's and its workers' (encoded body + headers)."""
        total = 0
        for req in self.finished:
            try:
                sz = await req.sizes()
            except Exception:  # noqa: BLE001 - a request of a closed worker
                continue
            total += max(0, sz["responseBodySize"]) + max(0, sz["responseHeadersSize"])
        return total

    @classmethod
    async def open(cls, ctx: Any, foreign: list[str]) -> Tab:
        page = await ctx.new_page()
        cdp = await ctx.new_cdp_session(page)
        tab = cls(page, cdp)

        def finished(ev: dict) -> None:
            tab.bytes += ev.get("encodedDataLength") or 0

        def on_request(req: Any) -> None:
            url = req.url
            host = url.split("/")[2] if "://" in url else ""
            if url.startswith(("http", "ws")) and not host.startswith(("127.0.0.1", "localhost")):
                foreign.append(url)

        cdp.on("Network.loadingFinished", finished)
        await cdp.send("Network.enable")
        page.on("request", on_request)
        page.on("requestfinished", lambda req: tab.finished.append(req))
        page.on("websocket", on_request)
        return tab


async def run_once(tab: Tab, run: Run, token: str) -> dict[str, Any]:
    """Navigate ``tab`` to the target (a fresh tab: cold; the same tab again: a reload on a warm cache), with a
    Chrome trace of the visit: its longest main-thread task and TBT, beside the Long Tasks API's."""
    async with tracing(tab.page.context, tab.page) as trace:
        r = await _run_once(tab, run, token)
    b = Blocking.of(main_thread_tasks(trace, run.url.rsplit("/", 1)[0] + "/"))
    r.update(trace_longest=b.longest_ms, trace_tbt=b.tbt_ms, trace_busy=b.busy_ms)
    return r


async def _run_once(tab: Tab, run: Run, token: str) -> dict[str, Any]:
    page, cfg = tab.page, run.cfg
    tab.bytes = 0
    tab.finished.clear()
    if page.url.startswith("http"):
        # A visit again in this tab: the reader left the bar closed, so every visit starts closed and the bench's
        # click opens it (ours would otherwise reopen it by itself while the bench clicks: a race).
        await page.evaluate(CLOSED_NEXT_TIME)
    await page.goto(run.url, wait_until="commit", timeout=run.timeout_ms)
    clicked = None
    if run.target == "bare":
        await page.wait_for_function("performance.getEntriesByName('bare:ready').length > 0",
                                     timeout=run.timeout_ms, polling=50)
        done = await page.evaluate("performance.getEntriesByName('bare:ready')[0].startTime")
    else:
        await page.wait_for_function("window.__peer && window.__peer.toggle !== null", timeout=run.timeout_ms,
                                     polling=20)
        button = f"#{cfg['host']} >> {cfg['button']}"
        box = page.locator(f"#{cfg['bar_host']} >> {cfg['input']}")
        if run.dwell_s:
            await page.wait_for_load_state("load", timeout=run.timeout_ms)
            await asyncio.sleep(run.dwell_s)
            await page.hover(button, timeout=run.timeout_ms)  # the pointer reaches the launcher, then clicks
            clicked = await page.evaluate("performance.now()")
        click_at = None
        if not await box.is_visible():
            click_at = await page.evaluate("performance.now()")
            await page.click(button, timeout=run.timeout_ms)
        # (No locator.wait_for(state="visible") first: Playwright polls it at growing intervals, up to 500 ms
        # apart, so the composer could show long before the bench noticed; COMPOSER_EDITABLE checks it is shown.)
        reply = asyncio.ensure_future(page.evaluate(WAIT_REPLY, [cfg, token, run.timeout_ms]))
        try:
            # Both widgets refuse to send until connected (Chainlit disables its submit button, ours makes the
            # composer read-only and disables Send): wait until the composer takes typing, type, wait for Send
            # to be enabled, press Enter.
            await page.wait_for_function(COMPOSER_EDITABLE, arg=cfg, timeout=run.timeout_ms, polling=20)
            editable = await page.evaluate("performance.now()")
            await box.fill(token, timeout=run.timeout_ms)
            await page.wait_for_function(SUBMIT_ENABLED, arg=cfg, timeout=run.timeout_ms)
            await box.press("Enter", timeout=run.timeout_ms)
            sent = await page.evaluate("performance.now()")
        except BaseException:
            reply.cancel()
            raise
        done = await reply
    await asyncio.sleep(0.3)  # let the longtask observer deliver
    r = await page.evaluate(COLLECT, done)
    await tab.cdp.send("HeapProfiler.collectGarbage")
    heap = await tab.cdp.send("Runtime.getHeapUsage")
    r.update(done=done, bytes=await tab.transferred(), bytes_cdp=tab.bytes, heap=heap["usedSize"])
    if clicked is not None:
        r["after_click"] = done - clicked
    marks = r.pop("marks")
    if run.target != "bare":
        # The visit's timeline (ms from navigation start): the loader's and client's marks, then the bench's own.
        r["timeline"] = {k.removeprefix("autopilot:"): v for k, v in marks.items() if k.startswith("autopilot:")}
        r["timeline"].update({"(editable)": editable, "(sent)": sent, "(reply)": done})
        if click_at is not None:
            r["timeline"]["(click)"] = click_at
    if "autopilot:loader" in marks and "autopilot:toggle" in marks:
        r["toggle_after_loader"] = marks["autopilot:toggle"] - marks["autopilot:loader"]
    return r


# ------------------------------------------------------------------------------------------------------------------
# Report


def med(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def fmt(rows: list[dict], key: str, unit: str) -> str:
    vals = [r[key] for r in rows if r.get(key) is not None]
    if not vals:
        return "n/a"
    scale, suffix, nd = {"ms": (1, "", 0), "s": (1e-3, " s", 2), "MB": (1e-6, " MB", 2),
                         "MiB": (1 / 2**20, " MiB", 1)}[unit]
    m = statistics.median(vals) * scale
    return f"{m:.{nd}f}{suffix} ({min(vals) * scale:.{nd}f}–{max(vals) * scale:.{nd}f})"


ROWS = [("toggle", "toggle visible", "s"), ("toggle_after_loader", "  ours: toggle painted after loader ran", "ms"),
        ("done", "reply visible (bare: loadPyodide resolved)", "s"),
        ("after_click", "  reply visible after the reader's click (--dwell)", "s"),
        ("trace_longest", "longest main-thread task (trace)", "ms"),
        ("longest", "  the same, Long Tasks API (misses some)", "ms"),
        ("trace_tbt", "total blocking time (trace)", "ms"), ("tbt", "  the same, Long Tasks API", "ms"),
        ("trace_busy", "main thread busy (trace)", "ms"), ("bytes", "bytes transferred (as served)", "MB"),
        ("heap", "JS heap after GC", "MiB"), ("wasm", "wasm memory", "MiB")]


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "n/a"


def report(results: dict[str, dict[str, list[dict]]], n: int, changes: list[str], foreign: list[str],
           warm: bool) -> None:
    load = os.getloadavg()
    print(f"# bench/peer.py  {datetime.datetime.now():%Y-%m-%d %H:%M}  {platform.machine()} {os.cpu_count()} cores  "
          f"load {load[0]:.1f} {load[1]:.1f}  N={n}  "
          f"chainlit {CHAINLIT_VERSION}, interleaved, medians (min–max)")
    print("Chainlit changed so that nothing reaches the internet:")
    for c in changes:
        print(f"  - {c}")
    print(f"requests to non-loopback hosts: {len(foreign)}" + (f" (e.g. {foreign[:3]})" if foreign else ""))
    targets = list(results)
    for phase in ("cold", "warm") if warm else ("cold",):
        print(f"\n## {phase} ({'fresh context each run' if phase == 'cold' else 'same context, disk cache'})")
        print(f"{'metric':44} | " + " | ".join(f"{t:26}" for t in targets))
        print("-" * 45 + "|" + "|".join("-" * 28 for _ in targets))
        for key, label, unit in ROWS:
            if all(not any(r.get(key) is not None for r in results[t][phase]) for t in targets):
                continue
            print(f"{label:44} | " + " | ".join(f"{fmt(results[t][phase], key, unit):26}" for t in targets))
        timeline(results, phase)
    try:
        goals(results, warm)
    except TypeError:  # a target without a single successful run
        print("\n(goal ratios left out: a target has no successful run)")


def timeline(results: dict[str, dict[str, list[dict]]], phase: str) -> None:
    """Print each target's visit as a timeline: the median time of every mark, ms from navigation start."""
    for t, phases in results.items():
        rows = [r["timeline"] for r in phases[phase] if r.get("timeline")]
        if not rows:
            continue
        names = sorted({k for r in rows for k in r}, key=lambda k: statistics.median(r[k] for r in rows if k in r))
        print(f"  timeline {t}: " + ", ".join(
            f"{k} {statistics.median(r[k] for r in rows if k in r):.0f}" for k in names))


def goals(results: dict[str, dict[str, list[dict]]], warm: bool) -> None:
    if "ours" in results and "chainlit" in results:
        o, c = results["ours"], results["chainlit"]
        print("\n## goals (ratio = ours / Chainlit, medians of this run)")
        tal = med(o["cold"], "toggle_after_loader")
        print(f"1. toggle after the loader ran: {tal:.1f} ms (goal <= 50 ms); toggle visible ratio cold "
              f"{ratio(med(o['cold'], 'toggle'), med(c['cold'], 'toggle'))}"
              + (f", warm {ratio(med(o['warm'], 'toggle'), med(c['warm'], 'toggle'))}" if warm else "")
              + " (goal <= 0.1x)")
        print(f"2. reply visible ratio cold {ratio(med(o['cold'], 'done'), med(c['cold'], 'done'))}"
              + (f", warm {ratio(med(o['warm'], 'done'), med(c['warm'], 'done'))}" if warm else "")
              + " (goal <= 0.8x)")
        if med(o["cold"], "after_click") is not None:
            print(f"   after the reader's click (--dwell): cold "
                  f"{ratio(med(o['cold'], 'after_click'), med(c['cold'], 'after_click'))}"
                  + (f", warm {ratio(med(o['warm'], 'after_click'), med(c['warm'], 'after_click'))}" if warm else ""))
        print(f"3. longest main-thread task (trace): ours {med(o['cold'], 'trace_longest'):.0f} ms cold"
              + (f" / {med(o['warm'], 'trace_longest'):.0f} ms warm" if warm else "")
              + f", Chainlit {med(c['cold'], 'trace_longest'):.0f} ms cold (goal <= 200 ms; ratio cold "
              f"{ratio(med(o['cold'], 'trace_longest'), med(c['cold'], 'trace_longest'))}); Long Tasks API said "
              f"ours {med(o['cold'], 'longest'):.0f} ms; TBT (trace) ours {med(o['cold'], 'trace_tbt'):.0f} ms, "
              f"Chainlit {med(c['cold'], 'trace_tbt'):.0f} ms")
        print(f"4. first-load transfer: ours {med(o['cold'], 'bytes') / 1e6:.2f} MB (goal <= 3.5 MB), Chainlit "
              f"{med(c['cold'], 'bytes') / 1e6:.2f} MB"
              + (f"; second visit: ours {med(o['warm'], 'bytes') / 1e6:.3f} MB" if warm else ""))
        oh, ow, ch = med(o["cold"], "heap"), med(o["cold"], "wasm"), med(c["cold"], "heap")
        if oh is not None and ch:
            print(f"9. memory after boot + one reply: ours JS heap {oh / 2**20:.1f} MiB + wasm "
                  f"{(ow or 0) / 2**20:.1f} MiB = {(oh + (ow or 0)) / 2**20:.1f} MiB; Chainlit JS heap "
                  f"{ch / 2**20:.1f} MiB (JS heap ratio {ratio(oh, ch)}, with wasm {ratio(oh + (ow or 0), ch)})")
    if "ours" in results and "bare" in results:
        o, b = results["ours"], results["bare"]
        print(f"\nours vs bare loadPyodide(): reply visible / Pyodide ready cold "
              f"{ratio(med(o['cold'], 'done'), med(b['cold'], 'done'))}; longest task ours "
              f"{med(o['cold'], 'trace_longest'):.0f} ms vs bare {med(b['cold'], 'trace_longest'):.0f} ms (trace)")


# ------------------------------------------------------------------------------------------------------------------


async def bench(args: argparse.Namespace) -> None:
    from playwright.async_api import async_playwright

    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    for t in targets:
        if t not in TARGETS:
            raise SystemExit(f"unknown target {t!r}; known: {', '.join(TARGETS)}")
    if any(t.startswith("ours") for t in targets) and not (DIST / "manifest.json").is_file():
        raise SystemExit("widget/_dist is not built: run python build.py")
    work = Path(tempfile.mkdtemp(prefix="bench-peer-"))
    relay = chainlit = pages = None
    alt_relays: list[Any] = []
    changes: list[str] = []
    foreign: list[str] = []
    failures: list[str] = []
    try:
        urls: dict[str, str] = {}
        pages = PageServer(npm_pyodide_dir() if "bare" in targets else ROOT)
        if any(t.startswith("ours") and t not in ALT_DIST for t in targets):
            relay = start_relay(work, extra=["--demo-chunk-delay-ms", "0"])
            for t in targets:
                if t.startswith("ours") and t not in ALT_DIST:
                    urls[t] = relay.url + "/"
        for t in targets:
            if t in ALT_DIST:
                dist = getattr(args, ALT_DIST[t])
                if not dist:
                    raise SystemExit(f"{t} needs --{ALT_DIST[t].replace('_', '-')}")
                alt = start_relay(work, extra=["--demo-chunk-delay-ms", "0", "--dist", dist])
                alt_relays.append(alt)
                urls[t] = alt.url + "/"
        if "chainlit" in targets:
            chainlit = Chainlit(chainlit_venv(), work)
            changes = chainlit.changes
            urls["chainlit"] = pages.add("/chainlit.html", CHAINLIT_PAGE.format(server=chainlit.url))
        if "bare" in targets:
            urls["bare"] = pages.add("/bare.html", BARE_PAGE)
        results: dict[str, dict[str, list[dict]]] = {t: {"cold": [], "warm": []} for t in targets}
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
            try:
                # One untimed load per target first: servers warm (our relay's gzip cache, Chainlit's imports).
                for t in targets:
                    ctx = await new_context(browser, t)
                    await run_once(await Tab.open(ctx, foreign), Run(t, urls[t], args.step_timeout), f"warmup-{t}")
                    await ctx.close()
                seq = 0
                for i in range(args.n):
                    order = targets[i % len(targets):] + targets[:i % len(targets)]
                    for t in order:
                        seq += 1
                        ctx = await new_context(browser, t)
                        try:
                            r = await run_once(await Tab.open(ctx, foreign),
                                               Run(t, urls[t], args.step_timeout, args.dwell),
                                               f"ping-{seq}-{t}")
                        except Exception as exc:  # noqa: BLE001 - a crashed tab or a timeout: counted, not fatal
                            failures.append(f"cold {t}: {str(exc).splitlines()[0][:160]}")
                            log(f"cold {i + 1}/{args.n} {t}: FAILED: {failures[-1]}")
                            continue
                        finally:
                            await ctx.close()
                        results[t]["cold"].append(r)
                        log(f"cold {i + 1}/{args.n} {t}: done {r['done']:.0f} ms, longest {r['trace_longest']:.0f} ms "
                            f"(Long Tasks API {r['longest']:.0f} ms), "
                            f"{r['bytes'] / 1e6:.2f} MB (page only, CDP: {r['bytes_cdp'] / 1e6:.2f} MB)")
                if not args.no_warm:
                    # Warm: one context and tab per target, loaded once, then reloaded (same tab, disk cache).
                    tabs, ctxs = {}, []
                    for t in targets:
                        ctx = await new_context(browser, t)
                        ctxs.append(ctx)
                        tabs[t] = await Tab.open(ctx, foreign)
                        await run_once(tabs[t], Run(t, urls[t], args.step_timeout), f"prime-{t}")
                    for i in range(args.n):
                        order = targets[i % len(targets):] + targets[:i % len(targets)]
                        for t in order:
                            seq += 1
                            try:
                                r = await run_once(tabs[t], Run(t, urls[t], args.step_timeout, args.dwell),
                                                   f"ping-{seq}-{t}")
                            except Exception as exc:  # noqa: BLE001 - counted; the tab is replaced (same context)
                                failures.append(f"warm {t}: {str(exc).splitlines()[0][:160]}")
                                log(f"warm {i + 1}/{args.n} {t}: FAILED: {failures[-1]}")
                                with contextlib.suppress(Exception):
                                    await tabs[t].page.close()
                                tabs[t] = await Tab.open(tabs[t].page.context, foreign)
                                continue
                            results[t]["warm"].append(r)
                            log(f"warm {i + 1}/{args.n} {t}: done {r['done']:.0f} ms, longest "
                                f"{r['longest']:.0f} ms, {r['bytes'] / 1e6:.3f} MB")
                    for c in ctxs:
                        await c.close()
            finally:
                await browser.close()
        report(results, args.n, changes, foreign, not args.no_warm)
        if failures:
            print(f"\nfailed runs (left out of the medians): {len(failures)}")
            for f in failures:
                print(f"  - {f}")
        save("peer", {"n": args.n, "targets": targets, "dwell_s": args.dwell, "before_dist": args.before_dist,
                      "runs": results, "failures": failures, "foreign_requests": foreign})
    finally:
        if chainlit:
            chainlit.stop()
        for r in (relay, *alt_relays):
            if r:
                r.stop()
        if pages:
            pages.close()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5, help="runs per target and phase (default 5)")
    ap.add_argument("--targets", default="ours,chainlit,bare",
                    help="comma-separated: ours, chainlit, bare; variants of ours: " + ", ".join(VARIANTS))
    ap.add_argument("--no-warm", action="store_true", help="cold runs only")
    ap.add_argument("--dwell", type=float, default=0.0, help="seconds the reader reads the page after its load "
                    "before reaching for the launcher (default 0: at once); adds 'reply visible after the click'")
    ap.add_argument("--snapshot-dist", help="for the ours-snapshot target: a build output folder made with "
                    "`python build.py --snapshot` (e.g. built with build(out_dir=...)); served by a second relay")
    ap.add_argument("--before-dist", help="for the ours-before target: another build output folder (an older "
                    "commit's widget/_dist), served by another relay")
    ap.add_argument("--step-timeout", type=float, default=90, help="seconds for one page load + reply")
    ap.add_argument("--timeout", type=float, default=1500, help="stop the whole benchmark after this many seconds")
    args = ap.parse_args()
    try:
        asyncio.run(asyncio.wait_for(bench(args), args.timeout))
    except TimeoutError:
        print(f"bench/peer.py: stopped after {args.timeout:.0f} s (--timeout)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

// PyScript pages: one interpreter, PyScript's. The loader boots no Pyodide of its own there: it hooks PyScript's.
//
// PyScript (@pyscript/core) keeps its exports on globalThis under this symbol (its "sticky module"), whichever
// copy of it the page loaded. Its hooks.main.onReady callbacks run, awaited, before each main-thread
// <script type="py">. MicroPython blocks (type="mpy") and worker blocks (worker attribute) run in
// interpreters the widget cannot use: they are reported, and never waited for.

import { L, root, scriptUrl, warn } from "./config.mjs";
import { state } from "./state.mjs";
import { showStatus } from "./toggle.mjs";
import { diagnose, fail } from "./errors.mjs";
import { fetchBytes, fetchOk } from "./net.mjs";
import { pagePython } from "./prepare.mjs";
import { applyBootPolicy, handOver } from "./boot.mjs";
import { call, newReady, quiet } from "./api.mjs";

const PYSCRIPT = Symbol.for("@pyscript/core");
const MAIN_PY = 'script[type="py"]:not([worker]), py-script:not([worker])';
let unsupportedReported = false;
let hooked = false;
/** The widget's start on PyScript's interpreter (never rejects). @type {Promise<void> | null} */
let pyscriptBoot = null;
/**
 * When the reader wants the bar and the page has loaded without the widget started: ask the relay why.
 * @type {(() => Promise<void>) | null}
 */
export let pyscriptProbe = null;
/** The start failed, or the widget is gone (read anew: an await may have passed since the last look). */
const ended = () => state.phase === "failed" || state.phase === "destroyed";
/** @returns {any} PyScript's exports, once its module ran */
const pyscriptExports = () => /** @type {any} */ (globalThis)[PYSCRIPT];

function reportUnsupported() {
  if (unsupportedReported) return;
  const mpy = document.querySelector('script[type="mpy"], mpy-script, mpy-config');
  const worker = document.querySelector('script[type="py"][worker], py-script[worker]');
  if (!mpy && !worker) return;
  unsupportedReported = true;
  if (mpy) {
    warn('MicroPython blocks (<script type="mpy">) are not supported: they run in MicroPython, which cannot import ' +
      "widget; the widget runs in Pyodide (<script type=\"py\"> blocks) and does not wait for them.");
  }
  if (worker) {
    warn('PyScript worker blocks (<script type="py" worker>) are not supported: the widget runs on the main thread, ' +
      "so get_client() is not available in a worker; register page functions from a main-thread <script type=\"py\"> block.");
  }
}
/** PyScript is on the page (or on its way) with main-thread Pyodide blocks the widget can share. */
function pyscriptOnPage() {
  // Still parsing with PyScript's tag seen: its blocks may follow; DOMContentLoaded checks them (see below).
  if (document.readyState === "loading" && document.querySelector('script[type="module"][src*="pyscript"]')) return true;
  return !!document.querySelector(MAIN_PY);
}
/**
 * Whether this is a PyScript page whose interpreter the widget shares (then it hooks PyScript).
 * @returns {boolean}
 */
export function detectPyScript() {
  if (state.mode === "pyscript") return true;
  reportUnsupported();
  if (!pyscriptOnPage()) return false;
  state.mode = "pyscript";
  // Once parsed: a page whose PyScript blocks are all MicroPython or workers has no interpreter to share,
  // so the widget boots its own Pyodide on the usual policy.
  const parsed = () => {
    reportUnsupported();
    if (document.querySelector(MAIN_PY)) return true;
    state.mode = "pyodide";
    applyBootPolicy();
    return false;
  };
  if (document.readyState !== "loading" && !parsed()) return false;
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", parsed, { once: true });
  const tag = /** @type {HTMLScriptElement | null} */ (document.querySelector('script[type="module"][src*="pyscript"]'));
  if (tag || pyscriptExports()) {
    // The page loads PyScript itself: its exports exist once its module ran (before its first progress event).
    const check = () => {
      if (pyscriptExports() && state.mode === "pyscript") { window.removeEventListener("py:progress", check); hookPyScript(pyscriptExports()); }
    };
    window.addEventListener("py:progress", check);
    document.addEventListener("DOMContentLoaded", check, { once: true });
    check();
  } else {
    // <script type="py"> blocks but no PyScript: load the copy we ship, offline (our interpreter and bundle),
    // unless the page brings its own config.
    if (!document.querySelector('py-config, script[type="py"][config], py-script[config]')) {
      const cfg = document.createElement("py-config");
      cfg.setAttribute("type", "json");
      cfg.hidden = true;
      cfg.textContent = JSON.stringify(pyscriptConfig());
      (document.head || document.documentElement).appendChild(cfg);
    }
    retryPyScript(root + "pyscript/core.js");
  }
  // PyScript or its interpreter could not be fetched from the relay (no CORS for this origin, the relay down):
  // PyScript's module never runs, or never calls our hook. When the reader wants the bar and the page has
  // loaded without the widget started, ask the relay: when it refuses this page or does not answer, say so
  // instead of "Starting…" forever.
  pyscriptProbe = async () => {
    if (state.mode !== "pyscript" || pyscriptBoot || state.phase === "failed" || state.phase === "destroyed") return;
    // PyScript came from the relay (the page's tag or our copy) and runs: the relay serves this page.
    if (pyscriptExports() && (!tag || new URL(tag.src, document.baseURI).origin === scriptUrl.origin)) return;
    const src = tag ? tag.src : root + "pyscript/core.js";
    const text = await diagnose(new Error("Failed to fetch dynamically imported module: " + src));
    if (text && !pyscriptBoot && !ended()) {
      fail("stage_python", Object.assign(new Error(text), { diagnosed: text }), () => retryPyScript(src));
    }
  };
  const probe = pyscriptProbe;
  const loaded = () => { if (state.wantOpen) probe(); };
  if (document.readyState === "complete") setTimeout(loaded, 0);
  else window.addEventListener("load", loaded, { once: true });
  return true;
}
/**
 * Import PyScript (again, for a Retry: the import of a module that failed is tried anew).
 * @param {string} src
 */
function retryPyScript(src) {
  if (state.phase === "failed") { newReady(); state.phase = "waiting"; if (state.wantOpen) showStatus(L("starting")); }
  import(src).then(() => hookPyScript(pyscriptExports()), (err) => fail("stage_python", err, () => retryPyScript(src)));
}
function pyscriptConfig() {
  /** @type {Record<string, string>} */
  const files = {};
  files[root + "bundle-full.zip"] = "/lib/python3.14/site-packages/*"; // PyScript's whole stdlib: no lazy zips
  return { interpreter: root + "pyodide/pyodide.mjs", files };
}
/** @param {any} ps PyScript's exports */
function hookPyScript(ps) {
  if (hooked || !ps || state.mode !== "pyscript") return;
  hooked = true;
  const allDone = new Promise((res) => window.addEventListener("py:all-done", res, { once: true }));
  ps.hooks.main.onReady.add((/** @type {any} */ wrap) => {
    watchPyScriptErrors(wrap);
    return bootOnPyScript(wrap.interpreter, allDone);
  });
  ps.hooks.main.onBeforeRun.add(pyBlockRuns);
  ps.hooks.main.onBeforeRunAsync.add(pyBlockRuns);
  // A loader that came after PyScript had started: take the interpreter once the page's blocks ran.
  allDone.then(() => {
    if (!pyscriptBoot) ps.whenDefined("py").then((/** @type {any} */ w) => bootOnPyScript(w.interpreter, null));
  });
}
// A <script type="py"> block that raises: PyScript reports it on stderr; the bar shows it too (pageError).
let pyBlock = "<py script>", stderrWatched = false;
/**
 * @param {unknown} wrap
 * @param {Element} element
 */
function pyBlockRuns(wrap, element) {
  const all = document.querySelectorAll('script[type="py"], py-script');
  pyBlock = "<py script " + (Array.prototype.indexOf.call(all, element) + 1) + ">";
}
/** @param {any} wrap */
function watchPyScriptErrors(wrap) {
  if (stderrWatched || !wrap.io) return;
  stderrWatched = true;
  const stderr = wrap.io.stderr;
  /**
   * @this {unknown}
   * @param {any} error
   * @param {...unknown} rest
   */
  wrap.io.stderr = function (error, ...rest) {
    if (error && typeof error.message === "string") quiet(call("pageError", { source: pyBlock, traceback: error.message }));
    return stderr.call(this, error, ...rest);
  };
}
/**
 * @param {any} pyodide PyScript's interpreter
 * @param {Promise<unknown> | null} allDone
 */
function bootOnPyScript(pyodide, allDone) {
  if (pyscriptBoot || state.mode !== "pyscript") return pyscriptBoot;
  state.phase = "booting";
  if (state.wantOpen) showStatus(L("starting"));
  performance.mark("autopilot:pyodide");
  let stage = "stage_bundle";
  // Never rejects: PyScript awaits this before running the page's blocks.
  pyscriptBoot = (async () => {
    try {
      if (!pyodide.runPython("import importlib.util\nimportlib.util.find_spec('widget') is not None")) {
        // The page's PyScript config has no "files" entry for our bundle: install it ourselves (all of it:
        // PyScript's interpreter has the whole stdlib and no lazy zips).
        const bundle = new Uint8Array(await fetchBytes(root + "bundle-full.zip", "bundle"));
        pyodide.FS.mkdirTree("/lib/autopilot");
        pyodide.FS.writeFile("/lib/autopilot/bundle.zip", bundle);
        pyodide.runPython("import sys, importlib\nsys.path.insert(0, '/lib/autopilot/bundle.zip')\nimportlib.invalidate_caches()");
      }
      pyodide.registerJsModule("autopilot_bridge", await import(root + "bridge.mjs"));
      pyodide.registerJsModule("autopilot_sanitize", await import(root + "sanitize.mjs"));
      stage = "stage_widget";
      const cssP = fetchOk(root + "skin.css", "skin").then((r) => r.text());
      cssP.catch(() => {});
      // Connect once the page's own blocks registered their functions (or after 3 s: a block may run forever).
      // MicroPython blocks hold py:all-done back until MicroPython (not shipped) loads: do not wait for them.
      const waitAll = allDone && !document.querySelector('script[type="mpy"], mpy-script');
      const connectAfter = waitAll ? Promise.race([allDone, new Promise((r) => setTimeout(r, 3000))]) : null;
      await handOver(pyodide, await pagePython(), cssP, connectAfter);
    } catch (err) {
      // A failure inside PyScript's interpreter cannot be retried from here: Retry reloads the page.
      fail(stage, err, () => location.reload());
    }
  })();
  return pyscriptBoot;
}

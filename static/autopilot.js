/* autopilot-widget loader: the whole install is one classic <script> tag.
 *
 * It paints the toggle at once (plain JS, its own shadow root), boots Pyodide from its own folder on the
 * chosen policy (data-boot: idle | ready | eager | intent), installs the bundle, runs the page's Python and hands
 * over to Python, which then owns the bar. Until then it owns the pre-boot state and its errors: the page
 * never pays for Python before the policy says so, and a failed start says why, with Retry.
 * On a PyScript page it boots no interpreter of its own: it hooks PyScript's (one Pyodide per page).
 * window.Autopilot is the JS API (docs/embedding.md); calls made before Python is ready are queued. Page code
 * that may run before this tag (or with defer/async) uses the queue: (window.Autopilot ||= []).push(fn).
 */
// The source is ES modules (this file and static/loader/*.mjs); the build joins them into one classic script,
// one function, in the order the modules would run (buildtools/join.py, docs/development.md).

import { config, readConfig } from "./loader/config.mjs";
import { keys, setKeys, state, tabFlag } from "./loader/state.mjs";
import { button, mountToggle, onShortcut, onToggleClick, paintToggle } from "./loader/toggle.mjs";
import { initSnapshotCache } from "./loader/snapshot.mjs";
import { applyBootPolicy } from "./loader/boot.mjs";
import { detectPyScript } from "./loader/pyscript.mjs";
import { installApi, newReady } from "./loader/api.mjs";

/**
 * Everything the loader does on the page, in order.
 * @param {HTMLScriptElement} script the loader's tag
 */
function main(script) {
  const win = /** @type {any} */ (window);
  // Functions queued by page code that ran before this tag: (window.Autopilot ||= []).push(fn).
  const earlyQueue = Array.isArray(win.Autopilot) ? win.Autopilot.slice() : [];
  if (win.Autopilot !== undefined && !Array.isArray(win.Autopilot)) {
    console.warn("[autopilot] window.Autopilot was already set by the page (not a queue array); it is replaced");
  }
  const t0 = performance.now();
  performance.mark("autopilot:loader");
  readConfig(script);
  initSnapshotCache();
  paintToggle(); // before anything else

  // ---- pre-boot state ---------------------------------------------------------------------------
  // The bar's open state survives a navigation within the site, per tab (the bar writes it).
  // Later page views of a site: once the widget started in this tab (a per-tab, per-app marker; a new tab or a
  // new browser session counts as a first view), the default boot waits for the reader's intent instead of
  // starting Python on idle: a reader who never touches the widget costs the host page next to nothing. A turn
  // or a function call still running when the reader navigated (the busy marker) starts it at once.
  setKeys(config.app);
  state.wantOpen = config.open || tabFlag(keys.open);
  newReady();

  if (document.body) mountToggle();
  else document.addEventListener("DOMContentLoaded", mountToggle, { once: true });
  button.addEventListener("click", onToggleClick);
  document.addEventListener("keydown", onShortcut);

  installApi(earlyQueue, t0);

  // ---- boot policy: the page first, Python when the policy says -------------------------------------
  // On a PyScript page, PyScript starts the interpreter; the widget boots in its onReady hook.
  if (!detectPyScript()) applyBootPolicy();
}

// document.currentScript is only set while this script runs synchronously: read it now.
const script = /** @type {HTMLScriptElement | null} */ (document.currentScript);
if (!script) console.error("[autopilot] loader must be a classic <script src> tag");
else if (/** @type {any} */ (window).Autopilot && /** @type {any} */ (window).Autopilot.__loader) {
  console.warn("[autopilot] loader included twice; the second copy is ignored");
} else main(script);

// What the loader's modules share and change: where the start is, whether the reader wants the bar, and the
// per-tab markers that survive a navigation within the site.

/**
 * @typedef {"waiting" | "booting" | "ready" | "failed" | "destroyed"} Phase
 */

export const state = {
  /** @type {Phase} */
  phase: "waiting",
  /** pyodide (our own boot) | pyscript (PyScript's interpreter) @type {"pyodide" | "pyscript"} */
  mode: "pyodide",
  /** The reader (or the page) wants the bar open. */
  wantOpen: false,
  /** Set when the page's CSP blocks WebAssembly: no boot can work, no Retry. @type {Error | null} */
  cspError: null,
  /** What the card's Retry button does for the current failure. @type {(() => void) | null} */
  retryAction: null,
  /** destroy() was called: later calls are refused. */
  destroyRequested: false,
};

// Per-tab, per-app markers (sessionStorage): the bar's open state (the bar writes it), "started in this tab"
// and "a turn or call was running when the reader navigated".
export const keys = { open: "", started: "", busy: "" };

/** @param {string | null} app */
export function setKeys(app) {
  keys.open = "autopilot:open:" + app;
  keys.started = "autopilot:started:" + app;
  keys.busy = "autopilot:busy:" + app;
}

/**
 * Read (value undefined), set (true) or clear (false) a per-tab marker.
 * @param {string} key
 * @param {boolean} [value]
 * @returns {boolean}
 */
export function tabFlag(key, value) {
  try {
    if (value === undefined) return sessionStorage.getItem(key) === "1";
    if (value) sessionStorage.setItem(key, "1"); else sessionStorage.removeItem(key);
  } catch { /* storage blocked: every view is a first view */ }
  return false;
}

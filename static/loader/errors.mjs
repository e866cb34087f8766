// A start that failed: why, in words the reader and the page's developer can act on, with Retry where it helps.

import { L, callbacks, config, errorText, scriptUrl } from "./config.mjs";
import { state } from "./state.mjs";
import { button, showStatus } from "./toggle.mjs";
import { startBoot } from "./boot.mjs";
import { finishDestroy, readyReject } from "./api.mjs";

// A start failed because a file from the relay could not be fetched or imported (no CORS, relay down):
// the browser's error says nothing useful ("Failed to fetch dynamically imported module"). Ask the relay what
// the matter is, cheaply: its origin check for the app (readable by any page, where the relay has one), else
// a CORS HEAD of its manifest and, when that fails, an opaque no-cors one, which succeeds when the relay
// answers but does not allow this page's origin.
// (Chromium, Firefox and WebKit word it differently; each is tested.)
const NETWORK_ERROR = /Failed to fetch|dynamically imported module|NetworkError|Load failed|Importing a module script failed|error loading|Cross-Origin Resource Sharing|access control/i;
/**
 * What the relay says about a failed fetch or import (null: nothing more to say than the error).
 * @param {unknown} err
 * @returns {Promise<string | null>}
 */
export async function diagnose(err) {
  const msg = errorText(err);
  if (!NETWORK_ERROR.test(msg)) return null;
  const vars = { origin: location.origin, app: config.app || "(from " + config.conversationUrl + ")", relay: config.relay };
  const refused = () => {
    let text = L("origin_refused", vars);
    // The usual trap: localhost, 127.0.0.1 and [::1] are three different origins.
    if (/^(localhost|127\.0\.0\.1|\[::1\])$/.test(location.hostname)) text += " (localhost, 127.0.0.1 and [::1] are different origins.)";
    return text;
  };
  if (config.app) {
    try {
      const r = await fetch(config.relay + "/api/apps/" + encodeURIComponent(config.app) + "/origin", { cache: "no-store" });
      if (r.ok) return null; // this origin may use the app: something else went wrong
      if (r.status === 403) return refused();
      const body = await r.json().catch(() => null);
      const why = body && body.error && body.error.message;
      if (why) return L("boot_failed", { stage: L("stage_python"), message: why });
    } catch { /* a relay without the check, or none at all: ask its files */ }
  }
  const probe = new URL("manifest.json", scriptUrl).href;
  try {
    await fetch(probe, { method: "HEAD", cache: "no-store" });
    return null; // the relay answers this origin: something else went wrong
  } catch { /* refused or down: which one? */ }
  try {
    await fetch(probe, { method: "HEAD", mode: "no-cors", cache: "no-store" });
  } catch {
    return L("relay_unreachable", { ...vars, message: msg });
  }
  return refused();
}

/**
 * A start failed at ``stage`` (a label key): say why on the card (with Retry: ``retry``, else a new start),
 * reject ready, tell the page.
 * @param {string} stage
 * @param {any} err
 * @param {() => void} [retry]
 */
export function fail(stage, err, retry) {
  state.phase = "failed";
  button.removeAttribute("aria-busy");
  const msg = errorText(err);
  const csp = stage === "csp" || (/WebAssembly|wasm/i.test(msg) && /Content Security Policy|CSP|unsafe-eval/i.test(msg));
  const retryAction = csp ? null : (retry || (() => { startBoot(true); }));
  state.retryAction = retryAction;
  const rejectReady = readyReject; // this start's promise (a Retry may make a new one meanwhile)
  /** @param {string} text */
  const report = (text) => {
    console.error("[autopilot] " + text, err);
    if (state.phase === "failed") showStatus(text, state.retryAction);
    const error = new Error(text);
    rejectReady(error);
    window.dispatchEvent(new CustomEvent("autopilot:error", { detail: { message: text } }));
    if (callbacks.onError) {
      try { callbacks.onError(error); } catch (e) { console.error("[autopilot] AutopilotConfig.onError threw", e); }
    }
    if (state.destroyRequested) finishDestroy();
  };
  if (csp) { report(L("csp_wasm")); return; }
  if (err && err.diagnosed) { report(err.diagnosed); return; }
  const plain = L("boot_failed", { stage: L(stage), message: msg });
  diagnose(err).then((text) => report(text || plain), () => report(plain));
}

/**
 * WebAssembly allowed? A page whose CSP lacks 'wasm-unsafe-eval' (or 'unsafe-eval') refuses to compile even
 * the 8-byte empty module: say so at once instead of a boot that dies in Pyodide's internals.
 * @returns {Error | null}
 */
export function wasmBlocked() {
  if (typeof WebAssembly !== "object") return new Error("WebAssembly is not available in this browser");
  try {
    new WebAssembly.Module(new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0]));
    return null;
  } catch (e) {
    return /** @type {Error} */ (e);
  }
}

// Starting Python on the page (our own Pyodide), the boot policy that decides when, and the hand-over to Python,
// which then owns the bar.

import { BOOT_FILES, L, callbacks, config, root } from "./config.mjs";
import { keys, state, tabFlag } from "./state.mjs";
import { button, hideStatus, host, onShortcut, onToggleClick, showStatus, status } from "./toggle.mjs";
import { fail, wasmBlocked } from "./errors.mjs";
import { dropBody, fetchBytes, yieldToPage } from "./net.mjs";
import { snapshotCache } from "./snapshot.mjs";
import { lateSnapshot, prepare, prewarmMode, takePrepared } from "./prepare.mjs";
import { detectPyScript } from "./pyscript.mjs";
import { prepareComposer, takeComposer } from "./composer.mjs";
import { api, attachPython, jsHost, newReady, readyResolve } from "./api.mjs";

/** The start under way (null: none, or it failed). @type {Promise<any> | null} */
let booting = null;

/**
 * Start Python (once; ``isRetry``: again, after a failure). Resolves with window.Autopilot once Python runs.
 * @param {boolean} isRetry
 * @returns {Promise<any> | null}
 */
export function startBoot(isRetry) {
  if (state.mode !== "pyodide" || state.phase === "destroyed") return booting;
  if (booting && !isRetry) return booting;
  if (state.phase === "booting" || state.phase === "ready") return booting;
  // A PyScript page found late (idle and intent boots run after the whole page was parsed): share its interpreter.
  if (detectPyScript()) return booting;
  state.cspError = wasmBlocked();
  if (state.cspError) { fail("csp", state.cspError); return null; }
  if (state.phase === "failed") newReady(); // a Retry: a new start, a new promise
  state.phase = "booting";
  performance.mark("autopilot:boot");
  if (state.wantOpen) showStatus(L("starting"));
  let stage = "stage_python";
  // What was prepared is used once: a Retry prepares (fetches) again.
  const prep = takePrepared();
  const { options, snapshotUrl, bundleP, bridgeP, sanitizeP, cssP, pageP, pyodideModP } = prep;
  let warm = prep.warm;
  /** Why the relay refused this page's app when the early create was answered (null: not refused, or not yet). */
  let refusal = /** @type {string | null} */ (null);
  connectEarly(bridgeP, (text) => { refusal = text; });
  booting = (async () => {
    try {
      // The reader is here before the worker is done, and an earlier tab stored this build's snapshot (a new
      // tab, a new browser session): restore that copy rather than wait for the worker to start Python (the
      // first answer more than twice as soon: docs/performance.md). A reader who comes once it is done gets
      // its hand-over, whose compiled code is already warm in this process.
      if (warm && warm.handOff && !warm.ready() && await snapshotCache.peek() && warm.abandon()) {
        performance.mark("autopilot:prewarm-abandoned");
        warm = null;
      }
      const stored = !warm && !snapshotUrl ? snapshotCache.read() : null; // a later view: the stored snapshot
      let handedOver = null;
      if (warm) {
        await warm.done;
        performance.mark("autopilot:prewarmed");
        handedOver = warm.takeSnapshot();
        if (handedOver) performance.mark("autopilot:handoff");
      }
      const cached = stored && await stored;
      const pyodideMod = await pyodideModP;
      // A later view with the stored snapshot: the stored wasm too, if there (no brotli to decode again).
      const storedWasm = cached ? await cached.wasm : null;
      // The worker's compiled module, handed over with its snapshot: instantiated as it is instead of fetched,
      // decoded and looked up again (Pyodide has no option for a module: its one instantiateStreaming call is
      // answered, then the original is put back).
      const compiled = handedOver && warm && warm.takeModule();
      const realStreaming = WebAssembly.instantiateStreaming;
      /** @type {import("./snapshot.mjs").Instantiate | null} */
      const answer = compiled
        ? (source, imports) => {
          dropBody(source);
          return WebAssembly.instantiate(compiled, imports).then((instance) => ({ instance, module: compiled }));
        }
        : storedWasm ? ((source, imports) => snapshotCache.instantiateStored(realStreaming, storedWasm, source, imports)) : null;
      if (answer) {
        WebAssembly.instantiateStreaming = (source, imports) => {
          WebAssembly.instantiateStreaming = realStreaming;
          return answer(source, imports);
        };
      }
      let pyodide, restored = !!handedOver;
      try {
        if (handedOver) pyodide = await pyodideMod.loadPyodide(lateSnapshot(options, Promise.resolve(handedOver)));
        else if (cached) [pyodide, restored] = await snapshotCache.restore(pyodideMod, options, lateSnapshot(options, cached.bytes));
        else pyodide = await pyodideMod.loadPyodide(options);
      } finally {
        WebAssembly.instantiateStreaming = realStreaming;
        if (warm) warm.stop();
      }
      // Pyodide keeps its options for the page's life: let a restored snapshot's bytes (the heap's size) go.
      if (pyodide._api && pyodide._api.config) pyodide._api.config._loadSnapshot = undefined;
      performance.mark("autopilot:pyodide");
      // The widget's set-up below in a task of its own, not in loadPyodide's last one (docs/performance.md).
      await yieldToPage();
      let lazy = null;
      /** @type {Record<string, string>} */
      const urls = {};
      const lazyFiles = BOOT_FILES.lazy;
      if (lazyFiles) {
        // Parts of the Python library loaded on first use (see _autopilot_stdlib in build.py).
        Object.keys(lazyFiles).forEach((g) => { urls[g] = root + lazyFiles[g]; });
        lazy = pyodide.pyimport("_autopilot_stdlib");
        const urlsPy = pyodide.toPy(urls);
        lazy.install(urlsPy);
        urlsPy.destroy();
      }
      stage = "stage_bundle";
      const bundle = new Uint8Array(await bundleP);
      pyodide.FS.mkdirTree("/lib/autopilot");
      pyodide.FS.writeFile("/lib/autopilot/bundle.zip", bundle);
      // (A restored snapshot has it on sys.path already, and a random seed every visitor of the build or the
      // pre-warm worker shares: reseed.)
      pyodide.runPython("import sys\nif '/lib/autopilot/bundle.zip' not in sys.path: sys.path.insert(0, '/lib/autopilot/bundle.zip')" +
        (snapshotUrl || restored ? "\nimport random\nrandom.seed()" : ""));
      pyodide.registerJsModule("autopilot_bridge", await bridgeP);
      pyodide.registerJsModule("autopilot_sanitize", await sanitizeP);
      stage = "stage_widget";
      performance.mark("autopilot:bundle");
      const page = await pageP;
      if (lazy) {
        // Page Python that imports a module of a lazy group gets its zip fetched now, asynchronously (other
        // imports of it, e.g. dynamic ones, fall back to a synchronous fetch on first use).
        const neededPy = lazy.needs(page.map((p) => p[0]));
        /** @type {string[]} */
        const needed = neededPy.toJs();
        neededPy.destroy();
        const bufs = await Promise.all(needed.map((g) => fetchBytes(urls[g], "stdlib")));
        needed.forEach((g, i) => lazy.mount(new Uint8Array(bufs[i]), g));
        lazy.destroy();
      }
      // A wrong data-app (or an origin the app does not allow): the early create was refused, with the relay's
      // reason. Usually known long before Python is up (one request against Python's start); when it is not yet,
      // the boot goes on and the bar says it at connect.
      if (refusal) throw Object.assign(new Error(refusal), { diagnosed: refusal });
      await handOver(pyodide, page, cssP, null);
      return api;
    } catch (err) {
      booting = null;
      fail(stage, err);
      throw err;
    }
  })();
  booting.catch(() => {});
  return booting;
}

/**
 * While Python starts, read the conversation (create it on a first visit) and open the socket from here, with
 * the same requests Python's client makes: its connect then finds both done (bridge.mjs: prefetch,
 * preconnect) instead of waiting for them after Python, the bar and page Python. Each step mirrors
 * widget/client_connection.py exactly (URL, body, the stored conversation's key); where anything differs or
 * fails, Python simply makes its own requests. ``refused`` hears the relay's reason when it refuses the app (a
 * 403 or 404 on the create: a wrong ``data-app``, an origin the app does not allow).
 * @param {Promise<any>} bridgeP
 * @param {(text: string) => void} refused
 */
async function connectEarly(bridgeP, refused) {
  try {
    const bridge = await bridgeP;
    const key = "autopilot:conversation:" + config.app;
    let url = config.conversationUrl || null;
    if (!url && config.app) {
      try { url = localStorage.getItem(key); } catch { /* storage blocked: Python creates it the same way */ }
    }
    if (!url) {
      if (!config.app || !config.relay) return;
      const create = config.relay.replace(/\/+$/, "") + "/api/apps/" + config.app + "/conversations";
      const [status, text] = await bridge.prefetch("POST", create, "{}");
      if (status === 403 || status === 404) {
        const why = JSON.parse(text)?.error?.message;
        if (typeof why === "string") refused(L("boot_failed", { stage: L("stage_widget"), message: why }));
        return;
      }
      const made = status === 201 ? JSON.parse(text) : null;
      if (!made || typeof made.url !== "string") return;
      url = made.url;
      try { localStorage.setItem(key, made.url); } catch { /* Python's POST gets the same answer */ }
    }
    const [status, text] = await bridge.prefetch("GET", url, null);
    const info = status === 200 ? JSON.parse(text) : null;
    if (!info || typeof info.relay_url !== "string") return;
    bridge.preconnect(info.relay_url, info.relay_path || "/socket.io");
  } catch { /* Python connects as usual */ }
}

/**
 * Python takes over: the client, the bar (on the loader's toggle), page Python, then connecting.
 * @param {any} pyodide
 * @param {[string, string][]} page
 * @param {Promise<string>} cssP
 * @param {Promise<unknown> | null} connectAfter
 */
export async function handOver(pyodide, page, cssP, connectAfter) {
  /** @type {Record<string, unknown>} */
  const loader = {
    toggleHost: host,
    toggleButton: button,
    statusEl: status,
    wantOpen: () => state.wantOpen,
    openKey: keys.open,
    skinCss: () => cssP,
    // The composer the reader has been typing in (composer.mjs): the bar takes it over as it mounts.
    takeComposer,
    handover: () => {
      state.phase = "ready";
      button.removeEventListener("click", onToggleClick);
      document.removeEventListener("keydown", onShortcut);
      button.removeAttribute("aria-busy");
      hideStatus();
    },
    api: jsHost,
  };
  if (connectAfter) loader.connectAfter = connectAfter;
  const mod = pyodide.pyimport("widget.browser");
  let handle;
  try {
    handle = await mod.boot(JSON.stringify(config), page, loader);
  } finally {
    mod.destroy(); // (and the attribute proxy of boot borrowed from it)
  }
  attachPython(pyodide, handle);
  tabFlag(keys.started, true);
  // A turn or call in progress when the reader navigates: the next page view starts at once to show it.
  let turnOpen = false; // a turn started (or a call or question came) in this view and has not finished
  ["completion.started", "functionCall", "askUserRequired"].forEach((e) => api.on(e, () => {
    turnOpen = true;
    tabFlag(keys.busy, true);
  }));
  api.on("completion.finished", () => { turnOpen = false; tabFlag(keys.busy, false); });
  // A turn that ended on the relay while no page of this tab was there (the reader left mid-turn) never clears
  // the marker above: once joined, a conversation the relay reports idle (or failed: nothing runs, nothing
  // waits for a call or an answer) clears it, unless this view saw a turn begin since.
  api.on("ready", (/** @type {any} */ p) => {
    const status = p && p.conversation && p.conversation.status;
    if (!turnOpen && (status === "idle" || status === "failed")) tabFlag(keys.busy, false);
  });
  readyResolve(api);
  window.dispatchEvent(new CustomEvent("autopilot:ready", { detail: api }));
  if (callbacks.onReady) {
    try { callbacks.onReady(api); } catch (e) { console.error("[autopilot] AutopilotConfig.onReady threw", e); }
  }
}

// ---- boot policy: the page first, Python when the policy says -------------------------------------
function onIntent() {
  button.removeEventListener("pointerenter", onIntent);
  button.removeEventListener("focus", onIntent);
  prepareComposer(); // the click that likely follows only shows it
  startBoot(false);
}

/** Start now, on idle, or on the reader's intent, as data-boot, the tab's markers and the page say. */
export function applyBootPolicy() {
  if (config.boot === "eager" || state.wantOpen || tabFlag(keys.busy)) {
    startBoot(false);
    return;
  }
  button.addEventListener("pointerenter", onIntent);
  button.addEventListener("focus", onIntent);
  if (config.boot === "intent") return;
  // In-browser agents find the page's functions only once Python has published them (WebMCP): with the
  // opt-in, where the browser has the API, the default boot starts on idle on every page view, as it did
  // before starts waited for the reader.
  const agents = config.webmcp && !!(/** @type {any} */ (document)).modelContext;
  if (tabFlag(keys.started) && !agents) return;
  // A first page view with the default (idle) boot: once the page is idle, prepare the start; with the
  // hand-over (the default) Python starts on the reader's intent, from the worker's snapshot; without it
  // (prewarm off or another mode, no Worker) it starts there and then. "ready": it starts there and then
  // anyway, so the bar is connected before the reader reaches for it (at the price of the restore's task).
  const idle = () => {
    const go = () => {
      if (state.phase !== "waiting") return;
      if (!agents && config.boot === "idle" && prewarmMode() === "handoff" && !wasmBlocked()) prepare();
      else startBoot(false);
    };
    if ("requestIdleCallback" in window) requestIdleCallback(go, { timeout: 2000 });
    else setTimeout(go, 200);
  };
  if (document.readyState === "complete") idle();
  else window.addEventListener("load", idle, { once: true });
}

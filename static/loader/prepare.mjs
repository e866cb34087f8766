// Preparing a start: everything a start needs but the start itself. The files are fetched and, with the
// hand-over, the pre-warm worker's Python started and snapshotted off the main thread. A first page view with the
// default boot prepares on idle and starts on the reader's intent (or the page's call), so a reader who never
// touches the widget costs the host page no Python on its main thread, and one who does pays only the restore.

import { BOOT_FILES, config, root } from "./config.mjs";
import { keys, tabFlag } from "./state.mjs";
import { fetchBytes, fetchOk, fetchText, yieldToPage } from "./net.mjs";
import { snapshotCache } from "./snapshot.mjs";

/**
 * The pre-warm worker of this start.
 * @typedef {object} Warm
 * @property {Promise<void>} done settles when the worker answered (or gave up)
 * @property {boolean} handOff
 * @property {() => boolean} ready it finished (compiled; with the hand-over, a snapshot is waiting)
 * @property {() => void} stop
 * @property {() => boolean} abandon stop a worker that has not finished: false if it had
 * @property {() => Uint8Array | null} takeSnapshot
 * @property {() => WebAssembly.Module | null} takeModule
 */
/**
 * A prepared start.
 * @typedef {object} Prepared
 * @property {Record<string, any>} options loadPyodide's
 * @property {string | null} snapshotUrl
 * @property {Warm | null} warm
 * @property {Promise<ArrayBuffer>} bundleP
 * @property {Promise<any>} bridgeP
 * @property {Promise<any>} sanitizeP
 * @property {Promise<string>} cssP
 * @property {Promise<[string, string][]>} pageP
 * @property {Promise<any>} pyodideModP
 */

/** @type {Prepared | null} */
let prepared = null;

/**
 * Page Python blocks may follow the loader's tag: collect them once the document is parsed.
 * @returns {Promise<[string, string][]>} [code, where it came from] of each
 */
export async function pagePython() {
  if (document.readyState === "loading") {
    await new Promise((resolve) => document.addEventListener("DOMContentLoaded", resolve, { once: true }));
  }
  const nodes = /** @type {NodeListOf<HTMLScriptElement>} */ (document.querySelectorAll('script[type="autopilot-python"], script[type="text/autopilot-python"]'));
  /** @type {Promise<[string, string]>[]} */
  const blocks = Array.from(nodes, (n, i) => (n.src ? fetchText(n.src, "page Python") : Promise.resolve(/** @type {[string, string]} */ ([n.textContent || "", "<page script " + (i + 1) + ">"]))));
  config.python.forEach((f) => blocks.push(fetchText(new URL(f, document.baseURI).href, "page Python file")));
  return Promise.all(blocks);
}

// Pre-warm (a tab's first start): static/prewarm-worker.js starts the same Pyodide off the main thread and, by
// default, hands the page its started Python (a memory snapshot) and its compiled module, so the page restores
// instead of compiling and starting Python itself. Compiled code is reused within the renderer process only
// (measured: a new tab or a restarted browser compiled again on the main thread), so the worker runs on a tab's
// first start (no started marker yet), not once per build.
function wasWarmed() {
  return tabFlag(keys.started);
}
/**
 * @param {Record<string, any>} options
 * @param {string | null} snapshotUrl
 * @returns {Warm | null}
 */
function prewarm(options, snapshotUrl) {
  const how = prewarmMode();
  if (!how) return null;
  // Every mode but "basic" also warms the widget's imports and Markdown; "basic" only the start-up.
  const full = config.prewarm !== "basic";
  const handOff = how === "handoff";
  const params = {
    options, snapshotUrl, handOff, store: handOff ? snapshotCache.target() : null, pyodideUrl: root + "pyodide/pyodide.mjs", bundleUrl: full ? root + "bundle.zip" : null,
  };
  // A worker's script must be same-origin: a one-line blob module imports the real one from the relay.
  const src = "import { warm } from " + JSON.stringify(root + "prewarm-worker.js") + ";\nwarm(" + JSON.stringify(params) + ");\n";
  /** @type {string | null} */
  let url = null;
  /** @type {Worker} */
  let worker;
  try {
    url = URL.createObjectURL(new Blob([src], { type: "text/javascript" }));
    worker = new Worker(url, { type: "module" });
  } catch { // a CSP without blob: workers, for instance: boot without it
    if (url) URL.revokeObjectURL(url);
    return null;
  }
  const blobUrl = url;
  /** @type {Uint8Array | null} */
  let snapshot = null;
  /** @type {WebAssembly.Module | null} */
  let module = null;
  let ok = false, settled = false;
  /** @type {(ev?: MessageEvent | null) => void} */
  let finish = () => {};
  /** @type {Promise<void>} */
  const done = new Promise((resolve) => {
    finish = (ev) => {
      if (settled) return; // (the time-out, after an answer)
      settled = true;
      URL.revokeObjectURL(blobUrl);
      ok = !!(ev && ev.data && !ev.data.failed);
      if (ev && ev.data && ev.data.steps) {
        // The worker's steps as marks on this page's timeline (benches read them).
        Object.entries(ev.data.steps).forEach(([name, at]) => {
          try { performance.mark("autopilot:worker-" + name, { startTime: /** @type {number} */ (at) - performance.timeOrigin }); } catch { /* an old browser */ }
        });
      }
      if (ev && ev.data && ev.data.snapshot) {
        snapshot = ev.data.snapshot;
        module = ev.data.module instanceof WebAssembly.Module ? ev.data.module : null;
        // What the page needs is here: the worker's own Python (its memory) can go once it stored its copy.
        snapshotCache.release(worker, params.store);
      }
      resolve();
    };
    worker.onmessage = finish;
    worker.onerror = () => finish(null);
    setTimeout(finish, 30000);
  });
  // The snapshot is handed over once: a retried boot starts Python itself.
  return {
    done, handOff,
    ready: () => ok, // it finished (compiled; with the hand-over, a snapshot is waiting)
    stop: () => snapshotCache.release(worker, params.store),
    // Stop a worker that has not finished (its Python is not wanted any more): false if it had.
    abandon: () => {
      if (settled) return false;
      finish(null);
      worker.terminate();
      return true;
    },
    takeSnapshot: () => { const s = snapshot; snapshot = null; return s; },
    takeModule: () => { const m = module; module = null; return m; },
  };
}

/**
 * The worker's part in this tab's next start: "handoff", "compile" or null (none).
 * @returns {"handoff" | "compile" | null}
 */
export function prewarmMode() {
  const setting = config.prewarm;
  // Unset (null here), "handoff" and "warm": once per tab; true and the other modes: every visit.
  const oncePerTab = setting == null || setting === "handoff" || setting === "warm";
  if (setting === false || (oncePerTab && wasWarmed()) || typeof Worker === "undefined") return null;
  // The default, "handoff" and "always" (without a snapshot of the build's own): the worker hands the page a
  // memory snapshot of its Python and its compiled module, and the page restores it instead of starting Python
  // a second time: Python starts once. Traced, the restore is a shorter main-thread task than the page's own
  // start from compiled code, and the first reply comes sooner (docs/performance.md). "warm" and the other
  // modes: the worker only compiles; the page starts Python itself.
  const handOff = setting !== "basic" && !BOOT_FILES.snapshot && (setting == null || setting === "handoff" || setting === "always");
  return handOff ? "handoff" : "compile";
}

/** Prepare the start (once; a start takes what was prepared). @returns {Prepared} */
export function prepare() {
  if (prepared) return prepared;
  /**
   * Awaited by the start, if one comes.
   * @template T
   * @param {Promise<T>} p
   */
  const handled = (p) => { p.catch(() => {}); return p; };
  /** @type {Record<string, any>} */
  const options = { indexURL: root + "pyodide/", fullStdLib: false };
  // The stdlib the boot imports; the rest is fetched on first use (see _autopilot_stdlib in build.py).
  if (BOOT_FILES.stdlib) options.stdLibURL = root + BOOT_FILES.stdlib;
  // No package is shipped: an empty package index saves fetching and parsing pyodide-lock.json.
  if (BOOT_FILES.lockInfo) options.lockFileContents = { info: BOOT_FILES.lockInfo, packages: {} };
  // A memory snapshot made by `build.py --snapshot` (deps and widget modules already imported): restored
  // instead of starting Python.
  const snapshotUrl = BOOT_FILES.snapshot ? root + BOOT_FILES.snapshot : null;
  const warm = prewarm(options, snapshotUrl);
  if (snapshotUrl) options._loadSnapshot = handled(fetchBytes(snapshotUrl, "snapshot"));
  if (warm) {
    // Prepared once in this tab: later page views wait for the reader's intent, and do not run the worker.
    warm.done.then(() => {
      if (!warm.ready()) return;
      tabFlag(keys.started, true);
      performance.mark("autopilot:prepared");
    });
  }
  prepared = {
    options, snapshotUrl, warm,
    bundleP: handled(fetchBytes(root + "bundle.zip", "bundle")),
    bridgeP: handled(import(root + "bridge.mjs")),
    sanitizeP: handled(import(root + "sanitize.mjs")), // the sink sanitizer for rendered answers
    cssP: handled(fetchOk(root + "skin.css", "skin").then((r) => r.text())),
    pageP: handled(pagePython()),
    pyodideModP: handled(import(root + "pyodide/pyodide.mjs")),
  };
  return prepared;
}

/** What was prepared, for the start that uses it (once: a Retry prepares, fetches, again). */
export function takePrepared() {
  const prep = prepare();
  prepared = null;
  return prep;
}

/** Teardown: a prepared worker, never started, stops. */
export function dropPrepared() {
  if (prepared && prepared.warm) prepared.warm.stop();
  prepared = null;
}

/**
 * loadPyodide's options for a restore. Pyodide awaits the snapshot before it even instantiates its module and
 * then copies it into memory and sets Python up in one task; instead it gets an empty placeholder, and its one
 * seam for the rest, the module factory, is wrapped: the module is instantiated and linked and its runtime
 * started (Emscripten's part, ~10 small tasks) while the bytes are still on their way (a later view's stored
 * snapshot being read), then the bytes are copied into memory in a task of their own (the memory grown to
 * their size first where needed), and Pyodide's restore is answered with what that copy read, so that Python's
 * set-up is a task of its own too. Bytes that cannot be read reject as their promise does.
 * @param {Record<string, any>} options
 * @param {Promise<Uint8Array>} bytesP
 */
export function lateSnapshot(options, bytesP) {
  /** @type {Promise<Uint8Array> | null} */
  let bytes = bytesP;
  /** @type {Record<string, any>} */
  const late = { ...options, _loadSnapshot: Promise.resolve(new Uint8Array(0)) };
  /** @param {Record<string, any>} settings */
  late.createPyodideModule = async (settings) => {
    delete settings.INITIAL_MEMORY; // the placeholder's size (this Pyodide's wasm sets its own memory anyway)
    const factory = (await import(options.indexURL + "pyodide.asm.mjs")).default;
    const Module = await factory(settings);
    performance.mark("autopilot:runtime");
    const snapshot = /** @type {Uint8Array} */ (await bytes);
    bytes = null; // (Pyodide keeps its options, this function with them, for the page's life)
    await yieldToPage();
    // (The memory's image follows the snapshot's header, whose second word is where it starts.)
    const image = snapshot.length - new DataView(snapshot.buffer, snapshot.byteOffset, 8).getUint32(4, true);
    if (image > Module.HEAPU8.length && !Module.growMemory(image)) {
      throw new Error("cannot grow Python's memory to the snapshot's " + image + " bytes");
    }
    const restore = Module.API.restoreSnapshot;
    const restored = restore(snapshot);
    Module.API.restoreSnapshot = () => {
      Module.API.restoreSnapshot = restore;
      return restored;
    };
    await yieldToPage();
    return Module;
  };
  return late;
}

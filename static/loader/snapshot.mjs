// The stored snapshot: later page views restore the worker's started Python.
//
// A tab's first start hands the page a memory snapshot of the worker's Python (see prepare.mjs). The worker also
// keeps a copy in this origin's Cache Storage, one entry per relay root, tagged with the build it belongs to and
// the layout of its body (FORMAT: the snapshot without its all-zero pages, uncompressed); a later view that
// would start Python on the page (no worker, no snapshot of the build's own) restores it instead: a shorter
// main-thread task than Python's start. What is stored is Python's heap right after importing the widget,
// before any page code, configuration or conversation (docs/security.md). Anything wrong (no Cache Storage,
// storage blocked or full, a missing, stale, other-format or corrupt entry, a restore that throws) means
// today's start, and a bad entry is removed. Beside it, Pyodide's wasm decompressed (WASM_KEY), which such a
// later view instantiates instead of decoding the HTTP cache's brotli copy again.

import { BUILD_ID, config, errorText, scriptUrl } from "./config.mjs";
import { state } from "./state.mjs";
import { dropBody } from "./net.mjs";

/**
 * What the worker needs to store its snapshot.
 * @typedef {object} StoreTarget
 * @property {string} cache
 * @property {string} key
 * @property {string} build
 * @property {string} buildHeader
 * @property {string} bytesHeader
 * @property {string} format
 * @property {string} formatHeader
 * @property {string} pagesHeader
 * @property {number} pageSize
 * @property {string} wasmKey
 */
/**
 * A stored entry of this build: promises of its bytes rebuilt and of the stored wasm (null: none of this build).
 * @typedef {{bytes: Promise<Uint8Array>, wasm: Promise<Response | null>}} StoredSnapshot
 */
/** @typedef {(source: any, imports: any) => Promise<WebAssembly.WebAssemblyInstantiatedSource>} Instantiate */

const NAME = "autopilot-snapshot";
let KEY = "", WASM_KEY = ""; // per relay root, whatever the build; beside it, Pyodide's wasm decompressed
const BUILD = "x-autopilot-build", BYTES = "x-autopilot-bytes", PAGES = "x-autopilot-pages";
// The body's layout, named in its own header: the build id does not cover this loader, so an entry written
// in another layout (an older gzip entry has no such header) is dropped like another build's. The body is the
// kept pages of PAGE bytes (the snapshot's last page may be short) in order; PAGES lists them as ascending
// runs of page indexes ("0-3,7,9-480"); BYTES is the snapshot's full length. Most of a started heap's pages
// are zeros: reading the rest back is a copy, where a compressed copy had to be inflated on this thread.
const FORMAT_HEADER = "x-autopilot-format", PAGE = 65536, FORMAT = "zero-pages-elided-65536";
let cleared = false;
const released = new WeakSet(); // workers told to store (and to stop) already
/**
 * @param {string} name
 * @param {unknown} [detail]
 */
const mark = (name, detail) => { try { performance.mark(name, { detail }); } catch { /* no detail support */ } };

/** The cache keys, from the loader's URL (once it is known). */
export function initSnapshotCache() {
  KEY = new URL("snapshot", new URL("./", scriptUrl)).href;
  WASM_KEY = new URL("snapshot-wasm", new URL("./", scriptUrl)).href;
}

/** @param {string | null} why */
function forget(why) {
  if (why) { mark("autopilot:snapshot-cache-dropped", { reason: why }); console.debug("[autopilot] stored snapshot dropped: " + why); }
  try { // (caches.open would make the cache where there is none)
    caches.has(NAME).then((there) => (there ? caches.open(NAME).then((c) => Promise.all([c.delete(KEY), c.delete(WASM_KEY)])) : null))
      .catch(() => {});
  } catch { /* blocked */ }
}
/**
 * The page list, checked against the full length: the byte ranges of the kept runs ([[start, end], ...]) and
 * the body's length they make.
 * @param {string | null} list
 * @param {number} size
 */
function keptRuns(list, size) {
  if (!(Number.isSafeInteger(size) && size > 0)) throw new Error("no stored length");
  const pages = Math.ceil(size / PAGE);
  /** @type {[number, number][]} */
  const runs = [];
  let length = 0, next = 0;
  for (const item of list ? list.split(",") : []) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(item);
    const a = m ? Number(m[1]) : NaN, b = m && m[2] !== undefined ? Number(m[2]) : a;
    if (!(a >= next && b >= a && b < pages)) throw new Error("bad page list");
    runs.push([a * PAGE, Math.min((b + 1) * PAGE, size)]);
    length += runs[runs.length - 1][1] - a * PAGE;
    next = b + 1;
  }
  return { runs, length };
}
/**
 * The snapshot again, as the body streams in: zeros of the full length, each chunk copied to its kept pages'
 * place (no second copy of the body).
 * @param {ReadableStream<Uint8Array> | null} body
 * @param {[number, number][]} runs
 * @param {number} length
 * @param {number} size
 */
async function rebuild(body, runs, length, size) {
  const out = new Uint8Array(size);
  const reader = body ? body.getReader() : null; // (no body: an empty one)
  let r = 0, at = runs.length ? runs[0][0] : 0, got = 0;
  while (reader) {
    const { value, done } = await reader.read();
    if (done) break;
    got += value.length;
    if (got > length) {
      reader.cancel().catch(() => {});
      throw new Error("longer than the page list's " + length + " bytes");
    }
    for (let i = 0; i < value.length;) {
      const n = Math.min(value.length - i, runs[r][1] - at);
      out.set(i === 0 && n === value.length ? value : value.subarray(i, i + n), at);
      i += n;
      at += n;
      if (at === runs[r][1] && ++r < runs.length) at = runs[r][0];
    }
  }
  if (got !== length) throw new Error(got + " bytes stored, the page list says " + length);
  return out;
}
/**
 * Why a stored entry cannot be restored by this loader (null: it can): another build's, or another layout's.
 * @param {Response} response
 */
function staleness(response) {
  if (response.headers.get(BUILD) !== BUILD_ID) return "another build";
  if (response.headers.get(FORMAT_HEADER) !== FORMAT) return "another format";
  return null;
}
function enabled() {
  if (typeof caches === "undefined") return false; // an insecure context has no Cache Storage
  if (config.snapshotCache) return true;
  if (!cleared) { cleared = true; forget(null); } // turned off: what an earlier view stored goes too
  return false;
}

export const snapshotCache = {
  /**
   * What the worker needs to store its snapshot (null: store nothing).
   * @returns {StoreTarget | null}
   */
  target: () => (enabled() ? {
    cache: NAME, key: KEY, build: BUILD_ID, buildHeader: BUILD, bytesHeader: BYTES,
    format: FORMAT, formatHeader: FORMAT_HEADER, pagesHeader: PAGES, pageSize: PAGE,
    wasmKey: WASM_KEY,
  } : null),
  /**
   * Let the worker store its copy: at once while the page is not starting Python, else once it has joined (or
   * a while after, when it does not), so that storing does not compete with the page's own start; stop it
   * once stored (or given up), within a bound. A worker that stores nothing is stopped at once.
   * @param {Worker} worker
   * @param {StoreTarget | null} target
   */
  release(worker, target) {
    if (released.has(worker)) return;
    released.add(worker);
    if (!target) { worker.terminate(); return; }
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    let end;
    /** @type {PerformanceObserver | null} */
    let observer = null;
    const go = () => {
      if (observer) observer.disconnect();
      observer = null;
      end = setTimeout(() => worker.terminate(), 30000);
      worker.postMessage("store");
    };
    worker.addEventListener("message", (ev) => {
      if (!ev.data || !("stored" in ev.data)) return;
      clearTimeout(end);
      worker.terminate();
      if (ev.data.stored) mark("autopilot:snapshot-stored", ev.data.stored);
    });
    if (state.phase !== "booting") { go(); return; }
    const later = setTimeout(go, 10000);
    try {
      observer = new PerformanceObserver((list) => {
        if (list.getEntriesByName("autopilot:joined").length) { clearTimeout(later); go(); }
      });
      observer.observe({ type: "mark" });
    } catch { /* no observer: the timer */ }
  },
  /**
   * Whether this build's snapshot is stored, from its headers only (no body read): false where there is no
   * storage, or the entry is another build's or format's (left for read() to drop).
   */
  async peek() {
    if (!enabled()) return false;
    try {
      const response = await caches.match(KEY, { cacheName: NAME });
      return !!response && !staleness(response);
    } catch { return false; }
  },
  /**
   * Whether this build's snapshot is stored (null: not, or no storage): {bytes, wasm}, promises of it rebuilt
   * and of the stored wasm's Response (null: none of this build).
   * Known as soon as the entry is found, so that Python's files are fetched and its module loaded while the
   * bytes are read (loadPyodide awaits them only before instantiating).
   * @returns {Promise<StoredSnapshot | null>}
   */
  async read() {
    if (!enabled()) return null;
    const t = performance.now();
    let response;
    try {
      response = await caches.match(KEY, { cacheName: NAME });
    } catch { return null; } // storage blocked: nothing stored either
    if (!response) return null;
    const stale = staleness(response);
    if (stale) { forget(stale); return null; }
    const found = response;
    const bytes = (async () => {
      try {
        const size = Number(found.headers.get(BYTES));
        const { runs, length } = keptRuns(found.headers.get(PAGES), size);
        const foundMs = performance.now() - t;
        const out = await rebuild(found.body, runs, length, size);
        mark("autopilot:snapshot-cache", { ms: performance.now() - t, found: foundMs, stored: length, bytes: size });
        return out;
      } catch (e) {
        forget("unreadable (" + errorText(e) + ")");
        throw Object.assign(new Error("stored snapshot unreadable"), { unreadable: true });
      }
    })();
    bytes.catch(() => {});
    // Pyodide's wasm, stored decompressed beside it (null: not there, or another build's).
    const wasm = caches.match(WASM_KEY, { cacheName: NAME })
      .then((r) => (r && r.headers.get(BUILD) === BUILD_ID ? r : null), () => null);
    return { bytes, wasm };
  },
  /**
   * Pyodide's instantiateStreaming answered with the stored wasm (a Response); when that fails, the entry goes
   * and Pyodide's own response (the HTTP cache's) is used instead.
   * @param {Instantiate} realStreaming
   * @param {Response} stored
   * @param {any} source
   * @param {any} imports
   */
  instantiateStored(realStreaming, stored, source, imports) {
    return realStreaming(stored, imports).then((result) => {
      dropBody(source);
      mark("autopilot:wasm-cache");
      return result;
    }, (e) => {
      mark("autopilot:snapshot-cache-dropped", { reason: "stored wasm unusable (" + (e && e.message) + ")" });
      caches.open(NAME).then((c) => c.delete(WASM_KEY)).catch(() => {});
      return realStreaming(source, imports);
    });
  },
  /**
   * loadPyodide restoring the stored snapshot (`late`, see lateSnapshot); when that throws, the entry goes and
   * Python starts as usual (`options`). Resolves with [pyodide, whether it restored].
   * @param {any} pyodideMod
   * @param {object} options
   * @param {object} late
   * @returns {Promise<[any, boolean]>}
   */
  async restore(pyodideMod, options, late) {
    try {
      return [await pyodideMod.loadPyodide(late), true];
    } catch (e) {
      if (!e || !(/** @type {any} */ (e)).unreadable) forget("restore failed (" + errorText(e) + ")");
      return [await pyodideMod.loadPyodide(options), false];
    }
  },
};

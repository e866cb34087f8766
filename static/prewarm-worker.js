/* autopilot-widget pre-warm worker: starts the page's Pyodide once off the main thread.
 *
 * V8 compiles WebAssembly lazily, each function on its first call, on the calling thread, and Python's start-up
 * calls thousands of them. Running the same start-up here first compiles them off the main thread; the compiled
 * code is then shared within the process (and kept in the HTTP cache), so the page's own start-up runs
 * already-compiled code. The loader (autopilot.js) starts this module from a one-line blob worker (a worker
 * must be same-origin; this file is usually on the relay's origin) and calls warm() with its parameters.
 *
 * It also runs what the page's boot and first answer run in Python (importing the widget, rendering Markdown:
 * the regex engine...), except in mode "basic", which stops after the start-up. With the hand-over (the loader's
 * default, and mode "handoff") it then posts the page a memory snapshot of its started Python and its compiled
 * module (see autopilot.js); otherwise only {} to say the code is compiled. After the hand-over it keeps a copy
 * of that snapshot (without its all-zero pages) and of Pyodide's wasm in the page origin's Cache Storage for the
 * tab's later page views (p.store, unless the loader's snapshotCache setting is off) once the page posts "store",
 * then posts {stored: {...} | null}; the loader stops it then.
 */

// What the page's boot and first answer run in Python; failures do not matter here (the page reports them).
const WARM_PYTHON = `import sys
sys.path.insert(0, '/lib/autopilot/bundle.zip')
try:
    import widget.browser, widget.ui.bar
    from widget.core.markdown import render_markdown
    render_markdown('# t\\n\\n*a* **b** \`c\` [d](https://e.f/g)\\n\\n- h\\n\\n\`\`\`\\ni\\n\`\`\`\\n')
except Exception:
    pass
`;

// The worker's postMessage (message, transfer list): tsconfig.json's lib is the page's (dom), whose global
// postMessage is the window's.
const post = /** @type {(message: unknown, transfer?: Transferable[]) => void} */ (/** @type {unknown} */ (postMessage));

/**
 * Start Pyodide with the page's options; post {} when done, {snapshot, module, steps} for a hand-over (then {stored}
 * when p.store is set), {failed} when it could not start.
 * @param {{options: object, snapshotUrl: string|null, pyodideUrl: string, bundleUrl: string|null, handOff: boolean,
 *          store: StoreTarget|null}} p
 */
export async function warm(p) {
  // When each step ended, on the page's clock's terms (ms since the epoch): the loader marks them for benches.
  /** @type {Record<string, number>} */
  const steps = {};
  const step = (/** @type {string} */ name) => { steps[name] = performance.timeOrigin + performance.now(); };
  step("start");
  try {
    /** @type {Record<string, unknown>} */
    const options = { ...p.options };
    if (p.snapshotUrl) options._loadSnapshot = fetch(p.snapshotUrl).then((r) => r.arrayBuffer());
    /** @type {WebAssembly.Module | null} */
    let compiled = null;
    /** @type {Promise<ArrayBuffer> | null} */
    let wasmBytes = null; // a copy of the wasm's body for the store (no second fetch, no second decode)
    if (p.handOff) {
      // Keep the compiled module Pyodide makes, to hand it over with the snapshot.
      options._makeSnapshot = true;
      const streaming = WebAssembly.instantiateStreaming;
      WebAssembly.instantiateStreaming = (source, imports) => {
        const teed = p.store ? Promise.resolve(source).then((r) => {
          const copy = r.clone().arrayBuffer();
          copy.catch(() => {});
          wasmBytes = copy;
          return r;
        }) : source;
        return streaming.call(WebAssembly, teed, imports).then((r) => {
          compiled = r.module;
          return r;
        });
      };
    }
    const bundle = p.bundleUrl ? fetch(p.bundleUrl).then((r) => r.arrayBuffer()) : null;
    const { loadPyodide } = await import(p.pyodideUrl);
    step("module");
    const py = await loadPyodide(options);
    step("python");
    if (!bundle) {
      postMessage({});
      return;
    }
    py.FS.mkdirTree("/lib/autopilot");
    py.FS.writeFile("/lib/autopilot/bundle.zip", new Uint8Array(await bundle));
    py.runPython(WARM_PYTHON);
    step("imports");
    if (p.handOff) {
      const snapshot = py.makeMemorySnapshot();
      step("snapshot");
      // The page says when to store: once it has joined, so that copying the heap does not compete with its
      // restore and boot for the machine's cores.
      const target = p.store;
      /** @type {Promise<void> | null} */
      const go = target ? new Promise((resolve) => addEventListener("message", (ev) => { if (ev.data === "store") resolve(); })) : null;
      post({ snapshot, module: compiled, steps }, [snapshot.buffer]);
      if (go && target) {
        await go;
        postMessage({ stored: await store(py, target, wasmBytes) });
      }
    } else {
      postMessage({});
    }
  } catch (e) {
    postMessage({ failed: String(e) });
  }
}

/**
 * @typedef {{cache: string, key: string, build: string, buildHeader: string, bytesHeader: string,
 *            format: string, formatHeader: string, pagesHeader: string, pageSize: number,
 *            wasmKey: string}} StoreTarget
 * The Cache Storage entries the loader reads on later views: one per relay root (key), tagged with the build and
 * the layout (format) of its body, which the loader's reader and this writer share; beside it (wasmKey) Pyodide's
 * wasm as it is, not compressed, tagged with the build.
 */

/**
 * Which pages of `bytes` hold anything but zeros, as ascending runs [first, last] of page indexes (pages of
 * `pageSize` bytes, the last one possibly short). Scanned in 32-bit words where the bytes are aligned.
 * @param {Uint8Array} bytes
 * @param {number} pageSize a multiple of 4
 * @returns {Array<[number, number]>}
 */
function keptPages(bytes, pageSize) {
  const words = bytes.byteOffset % 4 === 0 ? new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.length >> 2) : null;
  /** @type {Array<[number, number]>} */
  const runs = [];
  const pages = Math.ceil(bytes.length / pageSize);
  for (let p = 0; p < pages; p++) {
    const start = p * pageSize, end = Math.min(start + pageSize, bytes.length);
    let i = start;
    let zero = true;
    if (words) {
      const wEnd = end >> 2;
      for (let w = start >> 2; w < wEnd; w++) if (words[w] !== 0) { zero = false; break; }
      i = wEnd << 2;
    }
    for (; zero && i < end; i++) if (bytes[i] !== 0) zero = false;
    if (zero) continue;
    const last = runs[runs.length - 1];
    if (last && last[1] === p - 1) last[1] = p; else runs.push([p, p]);
  }
  return runs;
}

/**
 * Store the started Python for later views, unless this build's copy is there already; another build's (or
 * another format's) entry under the same key is replaced. The body is the snapshot without its all-zero pages,
 * uncompressed (reading it back is a copy, not an inflate): the kept pages in order, listed in the pages header
 * as ascending runs of page indexes ("0-3,7,9-480"); the bytes header is the snapshot's full length. Returns what
 * was stored, or null (kept, or no storage: an insecure context, storage blocked or full; the loader then starts
 * Python as usual).
 * @param {{makeMemorySnapshot: () => Uint8Array<ArrayBuffer>}} py the started Pyodide (made with _makeSnapshot)
 * @param {StoreTarget} s
 * @param {Promise<ArrayBuffer>|null} wasmBytes a copy of the wasm's body (see storeWasm)
 * @returns {Promise<{bytes: number, stored: number, pages: number, wasm: number, ms: number}|null>}
 */
async function store(py, s, wasmBytes) {
  try {
    if (typeof caches === "undefined") return null;
    const t = performance.now();
    const cache = await caches.open(s.cache);
    const wasm = await storeWasm(cache, s, wasmBytes);
    const old = await cache.match(s.key);
    if (old && old.headers.get(s.buildHeader) === s.build && old.headers.get(s.formatHeader) === s.format) return null;
    // The hand-over's bytes went to the page: the same state again, from a Python that has run nothing since.
    const snapshot = py.makeMemorySnapshot();
    const runs = keptPages(snapshot, s.pageSize);
    // One view per run of kept pages; the Blob copies them once.
    const body = new Blob(runs.map(([a, b]) => snapshot.subarray(a * s.pageSize, Math.min((b + 1) * s.pageSize, snapshot.length))));
    /** @type {Record<string, string>} */
    const headers = { "content-type": "application/octet-stream", "content-length": String(body.size) };
    headers[s.buildHeader] = s.build;
    headers[s.formatHeader] = s.format;
    headers[s.bytesHeader] = String(snapshot.length);
    headers[s.pagesHeader] = runs.map(([a, b]) => (a === b ? String(a) : a + "-" + b)).join(",");
    await cache.put(s.key, new Response(body, { headers }));
    const pages = runs.reduce((n, [a, b]) => n + b - a + 1, 0);
    return { bytes: snapshot.length, stored: body.size, pages, wasm, ms: performance.now() - t };
  } catch {
    return null;
  }
}

/**
 * Keep Pyodide's wasm for later views, decompressed, unless this build's copy is there: a later view reading it
 * from the HTTP cache decodes its ~9.6 MB from brotli again before it can instantiate it, which was most of the
 * wait between finding the stored snapshot and restoring it (docs/performance.md). The bytes are a copy of the
 * body this worker's start compiled. Returns the bytes stored, 0 when kept or there is no copy.
 * @param {Cache} cache
 * @param {StoreTarget} s
 * @param {Promise<ArrayBuffer>|null} wasmBytes
 * @returns {Promise<number>}
 */
async function storeWasm(cache, s, wasmBytes) {
  const old = await cache.match(s.wasmKey);
  if (!wasmBytes || (old && old.headers.get(s.buildHeader) === s.build)) return 0;
  const bytes = await wasmBytes;
  /** @type {Record<string, string>} */
  const headers = { "content-type": "application/wasm", "content-length": String(bytes.byteLength) };
  headers[s.buildHeader] = s.build;
  await cache.put(s.wasmKey, new Response(bytes, { headers }));
  return bytes.byteLength;
}

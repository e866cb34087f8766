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
 * module (see autopilot.js); otherwise only {} to say the code is compiled. After the hand-over it keeps a gzip
 * copy of that snapshot in the page origin's Cache Storage for the tab's later page views (p.store, unless the
 * loader's snapshotCache setting is off) once the page posts "store", then posts {stored: {...} | null}; the loader
 * stops it then.
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

/**
 * Start Pyodide with the page's options; post {} when done, {snapshot, module, steps} for a hand-over (then {stored}
 * when p.store is set), {failed} when it could not start.
 * @param {{options: object, snapshotUrl: string|null, pyodideUrl: string, bundleUrl: string|null, handOff: boolean,
 *          store: StoreTarget|null}} p
 */
export async function warm(p) {
  // When each step ended, on the page's clock's terms (ms since the epoch): the loader marks them for benches.
  const steps = {};
  const step = (name) => { steps[name] = performance.timeOrigin + performance.now(); };
  step("start");
  try {
    const options = { ...p.options };
    if (p.snapshotUrl) options._loadSnapshot = fetch(p.snapshotUrl).then((r) => r.arrayBuffer());
    let compiled = null;
    if (p.handOff) {
      // Keep the compiled module Pyodide makes, to hand it over with the snapshot.
      options._makeSnapshot = true;
      const streaming = WebAssembly.instantiateStreaming;
      WebAssembly.instantiateStreaming = (...args) => streaming.apply(WebAssembly, args).then((r) => {
        compiled = r.module;
        return r;
      });
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
      // The page says when to store: once it has started and joined, so that compressing does not compete with
      // its restore and boot for the machine's cores.
      const go = p.store ? new Promise((resolve) => addEventListener("message", (ev) => { if (ev.data === "store") resolve(); })) : null;
      postMessage({ snapshot, module: compiled, steps }, [snapshot.buffer]);
      if (go) {
        await go;
        postMessage({ stored: await store(py, p.store) });
      }
    } else {
      postMessage({});
    }
  } catch (e) {
    postMessage({ failed: String(e) });
  }
}

/**
 * @typedef {{cache: string, key: string, build: string, buildHeader: string, bytesHeader: string}} StoreTarget
 * The Cache Storage entry the loader reads on later views: one per relay root (key), tagged with the build.
 */

/**
 * Store a gzip copy of the started Python for later views, unless this build's copy is there already; another
 * build's entry under the same key is replaced. Returns what was stored, or null (kept, or no storage: an
 * insecure context, storage blocked or full; the loader then starts Python as usual).
 * @param {object} py the started Pyodide (made with _makeSnapshot)
 * @param {StoreTarget} s
 * @returns {Promise<{bytes: number, compressed: number, ms: number}|null>}
 */
async function store(py, s) {
  try {
    if (typeof caches === "undefined" || typeof CompressionStream === "undefined") return null;
    const t = performance.now();
    const cache = await caches.open(s.cache);
    const old = await cache.match(s.key);
    if (old && old.headers.get(s.buildHeader) === s.build) return null;
    // The hand-over's bytes went to the page: the same state again, from a Python that has run nothing since.
    const snapshot = py.makeMemorySnapshot();
    // Fed as views of it, in slices (a Blob of it would be one more copy of the heap).
    const chunks = new ReadableStream({
      start(c) {
        for (let i = 0; i < snapshot.length; i += 1 << 20) c.enqueue(snapshot.subarray(i, i + (1 << 20)));
        c.close();
      },
    });
    const gz = await new Response(chunks.pipeThrough(new CompressionStream("gzip"))).blob();
    const headers = { "content-type": "application/gzip", "content-length": String(gz.size) };
    headers[s.buildHeader] = s.build;
    headers[s.bytesHeader] = String(snapshot.length);
    await cache.put(s.key, new Response(gz, { headers }));
    return { bytes: snapshot.length, compressed: gz.size, ms: performance.now() - t };
  } catch (e) {
    return null;
  }
}

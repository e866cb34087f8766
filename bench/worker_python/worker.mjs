// Python (Pyodide) in a dedicated worker: the worker side of bench/worker_python.py, a measured prototype that
// ships nothing. The page (page.mjs) creates it from a blob and posts {kind: "start", ...}; it starts Pyodide
// with the loader's options, runs what the pre-warm worker runs (the bundle on sys.path, the widget's imports, a
// Markdown render), loads bench.py and answers {kind: "run", code} with the result of awaiting that Python.
//
// Python reaches the page's DOM through the `bench_proxy` module:
//   dom(op, arg)      -> Promise: postMessage to the page, the page answers (the async proxy)
//   domSync(op, arg)  -> value:   postMessage, then Atomics.wait on a SharedArrayBuffer the page fills and
//                                 notifies (the sync proxy; SharedArrayBuffer needs crossOriginIsolated)
//   render(appended, tail) -> posts one render op (a streamed answer's new HTML) for the page to apply
// The clock is performance.timeOrigin + now(), comparable with the page's.

const now = () => performance.timeOrigin + performance.now();
let py = null;
let root = "";
let shared = null; // {ctl: Int32Array, buf: Uint8Array} once the page sent a SharedArrayBuffer
let nextId = 1;
const pending = new Map();

const proxy = {
  now,
  dom(op, arg) {
    const id = nextId++;
    return new Promise((resolve, reject) => {
      pending.set(id, { resolve, reject });
      postMessage({ kind: "dom", id, op, arg: arg === undefined ? null : arg });
    });
  },
  domSync(op, arg) {
    if (!shared) throw new Error("no SharedArrayBuffer: the page is not cross-origin isolated");
    Atomics.store(shared.ctl, 0, 0);
    postMessage({ kind: "domSync", op, arg: arg === undefined ? null : arg });
    Atomics.wait(shared.ctl, 0, 0, 10000);
    const n = Atomics.load(shared.ctl, 1);
    return JSON.parse(new TextDecoder().decode(shared.buf.slice(0, n)));
  },
  render(appended, tail) {
    postMessage({ kind: "render", appended, tail, t: now() });
  },
};

async function start(p) {
  const t = { start: now() };
  root = p.root;
  const bundle = fetch(root + "bundle.zip").then((r) => r.arrayBuffer());
  const { loadPyodide } = await import(root + "pyodide/pyodide.mjs");
  t.imported = now();
  if (p.keepModule) {
    // Hand the compiled module to the page: V8 reuses compiled wasm within the process only while a module
    // object of it lives, and this worker's dies with it; held by the page, it outlives the page view (until
    // collected), and the next page view's worker starts from compiled code.
    const streaming = WebAssembly.instantiateStreaming;
    WebAssembly.instantiateStreaming = (...args) => streaming.apply(WebAssembly, args).then((r) => {
      WebAssembly.instantiateStreaming = streaming;
      postMessage({ kind: "module", module: r.module });
      return r;
    });
  }
  py = await loadPyodide(p.options);
  t.pyodide = now();
  if (p.lazy) {
    // the loader's lazily fetched parts of the library, the same way (synchronous fetch on first use here)
    const urls = py.toPy(p.lazy);
    py.pyimport("_autopilot_stdlib").install(urls);
    urls.destroy();
  }
  py.FS.mkdirTree("/lib/autopilot");
  py.FS.writeFile("/lib/autopilot/bundle.zip", new Uint8Array(await bundle));
  py.registerJsModule("bench_proxy", proxy);
  py.registerJsModule("autopilot_bridge", await import(root + "bridge.mjs"));
  t.bundle = now();
  py.runPython(p.benchPy, { filename: "bench.py" });
  t.ready = now();
  postMessage({
    kind: "ready", t, isolated: self.crossOriginIsolated, sab: typeof SharedArrayBuffer !== "undefined",
    jspi: typeof WebAssembly.Suspending === "function", wasmBytes: py._module.HEAP8.buffer.byteLength,
  });
  if (p.relay) {
    // what the loader's boot does next: the client reads the conversation, opens the socket and joins
    const detail = await py.globals.get("connect")(p.relay, p.app);
    postMessage({ kind: "joined", t: now(), detail });
  }
}

onmessage = async (ev) => {
  const m = ev.data;
  if (m.kind === "dom") {
    const w = pending.get(m.id);
    pending.delete(m.id);
    if (m.error) w.reject(new Error(m.error));
    else w.resolve(m.value);
  } else if (m.kind === "shared") {
    shared = { ctl: new Int32Array(m.sab, 0, 2), buf: new Uint8Array(m.sab, 8) };
  } else if (m.kind === "start") {
    try {
      await start(m);
    } catch (e) {
      postMessage({ kind: "ready", error: String(e && e.stack || e) });
    }
  } else if (m.kind === "run") {
    try {
      const value = await py.runPythonAsync(m.code);
      postMessage({ kind: "result", id: m.id, value: typeof value === "string" ? value : String(value) });
    } catch (e) {
      postMessage({ kind: "result", id: m.id, error: String(e && e.message || e) });
    }
  }
};

// The page side of bench/worker_python.py (a measured prototype; ships nothing). window.BENCH (written by the
// driver) holds the build's root URL, the loader's Pyodide options and the worker's sources.
//
// It starts the worker at once (a worker-hosted boot: nothing of Python runs on this thread), answers the
// worker's DOM operations (async: postMessage back; sync: fill the SharedArrayBuffer, Atomics.notify) and
// applies its render ops with the loader's sink sanitizer. window.__bench exposes the figures to the driver.

const B = window.BENCH;
const now = () => performance.timeOrigin + performance.now();
const bench = (window.__bench = { ready: null, joined: null, renders: [], error: null });

const text = document.createTextNode("");
document.body.append(text);
const OPS = {
  title: () => document.title,
  setText: (v) => { text.data = v; return null; },
  query: () => Array.from(document.querySelectorAll("#items li"), (li) => li.textContent),
};
const answer = document.createElement("div");
const stable = answer.appendChild(document.createElement("div"));
const tail = answer.appendChild(document.createElement("div"));
document.body.append(answer);
const sanitizer = import(B.root + "sanitize.mjs");

const src = URL.createObjectURL(new Blob([B.workerSrc], { type: "text/javascript" }));
const worker = new Worker(src, { type: "module" });
let shared = null;
if (self.crossOriginIsolated) {
  const sab = new SharedArrayBuffer(8 + (1 << 20));
  shared = { ctl: new Int32Array(sab, 0, 2), buf: new Uint8Array(sab, 8) };
  worker.postMessage({ kind: "shared", sab });
}
const results = new Map();
let nextRun = 1;

worker.onmessage = async (ev) => {
  const m = ev.data;
  if (m.kind === "dom") {
    try {
      worker.postMessage({ kind: "dom", id: m.id, value: OPS[m.op](m.arg) });
    } catch (e) {
      worker.postMessage({ kind: "dom", id: m.id, error: String(e) });
    }
  } else if (m.kind === "domSync") {
    const bytes = new TextEncoder().encode(JSON.stringify(OPS[m.op](m.arg)));
    shared.buf.set(bytes);
    Atomics.store(shared.ctl, 1, bytes.length);
    Atomics.store(shared.ctl, 0, 1);
    Atomics.notify(shared.ctl, 0);
  } else if (m.kind === "render") {
    // one render op: what the bar does with a streamed answer's new HTML, plus the layout it causes
    const got = now();
    const san = await sanitizer;
    const t = performance.now();
    if (m.appended) san.appendSafeHTML(stable, m.appended);
    san.setSafeHTML(tail, m.tail);
    void answer.offsetHeight;
    bench.renders.push({ apply: performance.now() - t, latency: now() - m.t, queued: got - m.t });
  } else if (m.kind === "module") {
    bench.module = m.module; // held: a later page view's worker then reuses its compiled code
  } else if (m.kind === "ready") {
    if (m.error) bench.error = m.error;
    else bench.ready = m;
  } else if (m.kind === "joined") {
    bench.joined = m;
  } else if (m.kind === "result") {
    results.get(m.id)(m);
    results.delete(m.id);
  }
};
worker.postMessage({
  kind: "start", root: B.root, options: B.options, lazy: B.lazy, benchPy: B.benchPy, relay: B.relay, app: B.app,
  keepModule: B.keepModule,
});

/** Run Python in the worker (``await <code>``); resolves to its JSON text, rejects with its error. */
bench.run = (code) => new Promise((resolve, reject) => {
  const id = nextRun++;
  results.set(id, (m) => (m.error ? reject(new Error(m.error)) : resolve(m.value)));
  worker.postMessage({ kind: "run", id, code });
});

/** Keep this thread busy with back-to-back tasks of ``ms`` (a busy host page) until stopBusy(). */
bench.busy = (ms) => {
  bench.busyOn = true;
  const spin = () => {
    if (!bench.busyOn) return;
    const end = performance.now() + ms;
    while (performance.now() < end);
    setTimeout(spin, 0);
  };
  spin();
};
bench.stopBusy = () => { bench.busyOn = false; };

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
 * module (see autopilot.js); otherwise only {} to say the code is compiled.
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
 * Start Pyodide with the page's options; post {} when done, {snapshot, module} for a hand-over,
 * {failed} when it could not start.
 * @param {{options: object, snapshotUrl: string|null, pyodideUrl: string, bundleUrl: string|null, handOff: boolean}} p
 */
export async function warm(p) {
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
    const py = await loadPyodide(options);
    if (!bundle) {
      postMessage({});
      return;
    }
    py.FS.mkdirTree("/lib/autopilot");
    py.FS.writeFile("/lib/autopilot/bundle.zip", new Uint8Array(await bundle));
    py.runPython(WARM_PYTHON);
    if (p.handOff) {
      const snapshot = py.makeMemorySnapshot();
      postMessage({ snapshot, module: compiled }, [snapshot.buffer]);
    } else {
      postMessage({});
    }
  } catch (e) {
    postMessage({ failed: String(e) });
  }
}

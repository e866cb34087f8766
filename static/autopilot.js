/* autopilot-widget loader: the whole install is one classic <script> tag.
 *
 * It paints the toggle at once (plain JS, its own shadow root), boots Pyodide from its own folder on the
 * chosen policy (data-boot: idle | eager | intent), installs the bundle, runs the page's Python and hands
 * over to Python, which then owns the bar. Until then it owns the pre-boot state and its errors (D1, D10).
 */
(function () {
  "use strict";
  // document.currentScript is only set while this script runs synchronously: read everything now.
  var script = document.currentScript;
  if (!script) { console.error("[autopilot] loader must be a classic <script src> tag"); return; }
  if (window.Autopilot && window.Autopilot.__loader) {
    console.warn("[autopilot] loader included twice; the second copy is ignored");
    return;
  }
  var BUILD_ID = "__BUILD_ID__";
  // Filled in by build.py: which stdlib zips to fetch, the lock file's info (no lock file fetch), a snapshot.
  var BOOT_FILES = /*__BOOT_FILES__*/null || {};
  var t0 = performance.now();
  performance.mark("autopilot:loader");
  var scriptUrl = new URL(script.src, document.baseURI);
  var root = new URL(BUILD_ID + "/", scriptUrl).href;
  var ds = script.dataset;
  var preset = window.AutopilotConfig || {};
  var KNOWN = ["relay", "app", "conversationUrl", "boot", "python", "open", "position", "title"];

  function pick(name, fallback) {
    if (ds[name] !== undefined && ds[name] !== "") return ds[name];
    if (preset[name] !== undefined && preset[name] !== null) return preset[name];
    return fallback;
  }
  var config = {
    relay: String(pick("relay", scriptUrl.origin)).replace(/\/+$/, ""),
    app: pick("app", null),
    conversationUrl: pick("conversationUrl", null),
    boot: pick("boot", "idle"),
    python: pick("python", ""),
    open: String(pick("open", "false")) === "true",
    position: pick("position", "bottom-right"),
    title: pick("title", "Autopilot"),
    // Seed-002 tools and actions: an object, so only through window.AutopilotConfig (checked in Python).
    tools: preset.tools && typeof preset.tools === "object" ? preset.tools : null,
    root: root,
    buildId: BUILD_ID,
  };
  Object.keys(ds).forEach(function (k) {
    if (KNOWN.indexOf(k) < 0) console.warn("[autopilot] unknown option data-" + k.replace(/[A-Z]/g, function (c) { return "-" + c.toLowerCase(); }) + " is ignored");
  });
  if (["idle", "eager", "intent"].indexOf(config.boot) < 0) {
    console.warn("[autopilot] data-boot=\"" + config.boot + "\" is not one of idle, eager, intent; using idle");
    config.boot = "idle";
  }
  if (!config.conversationUrl && !config.app) {
    console.warn("[autopilot] no data-app or data-conversation-url: using app \"demo\"");
    config.app = "demo";
  }

  // ---- the toggle, painted before anything else -----------------------------------------------
  var host = document.createElement("div");
  host.id = "autopilot-toggle-host";
  host.setAttribute("data-autopilot", "toggle");
  var shadow = host.attachShadow({ mode: "open" });
  var style = document.createElement("style");
  style.textContent =
    // !important: a host page's own !important rules on div must not move or hide the toggle (D10).
    ":host{all:initial !important;position:fixed !important;z-index:2147483000 !important;" + (config.position === "bottom-left" ? "left" : "right") + ":var(--autopilot-toggle-offset-x,20px) !important;bottom:var(--autopilot-toggle-offset-y,20px) !important;display:block !important;font-family:var(--autopilot-font,system-ui,sans-serif) !important}" +
    "button.toggle{all:unset;box-sizing:border-box;width:56px;height:56px;border-radius:50%;display:grid;place-items:center;cursor:pointer;" +
    "background:var(--autopilot-accent,#4f46e5);color:var(--autopilot-on-accent,#fff);box-shadow:0 4px 14px rgba(0,0,0,.25)}" +
    "button.toggle:focus-visible{outline:3px solid var(--autopilot-focus,#f59e0b);outline-offset:3px}" +
    "button.toggle svg{width:26px;height:26px}" +
    ".status{position:absolute;bottom:66px;" + (config.position === "bottom-left" ? "left" : "right") + ":0;min-width:220px;max-width:320px;padding:10px 12px;border-radius:10px;" +
    "background:var(--autopilot-surface,#fff);color:var(--autopilot-text,#111);box-shadow:0 4px 18px rgba(0,0,0,.2);font-size:14px;line-height:1.4}" +
    ".status[hidden]{display:none}.status button{margin-top:8px;font:inherit;padding:4px 10px;border-radius:6px;border:1px solid currentColor;background:transparent;color:inherit;cursor:pointer}" +
    "@media (prefers-color-scheme: dark){.status{background:var(--autopilot-surface,#1f2937);color:var(--autopilot-text,#f3f4f6)}}";
  var button = document.createElement("button");
  button.className = "toggle";
  button.type = "button";
  button.setAttribute("part", "toggle");
  button.setAttribute("aria-label", "Open " + config.title);
  button.setAttribute("aria-expanded", "false");
  button.innerHTML = '<svg viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" aria-hidden="true"><path d="M21 15a2 2 0 0 1-2 2H7l-4 4V5a2 2 0 0 1 2-2h14a2 2 0 0 1 2 2z"/></svg>';
  var status = document.createElement("div");
  status.className = "status";
  status.setAttribute("role", "status");
  status.setAttribute("aria-live", "polite");
  status.hidden = true;
  shadow.appendChild(style);
  shadow.appendChild(button);
  shadow.appendChild(status);

  function mountToggle() {
    (document.body || document.documentElement).appendChild(host);
    performance.mark("autopilot:toggle");
  }
  if (document.body) mountToggle();
  else document.addEventListener("DOMContentLoaded", mountToggle, { once: true });

  // ---- pre-boot state ---------------------------------------------------------------------------
  var phase = "waiting"; // waiting | booting | ready | failed
  var wantOpen = config.open;
  var readyResolve, readyReject;
  var ready = new Promise(function (res, rej) { readyResolve = res; readyReject = rej; });
  ready.catch(function () {});

  function showStatus(text, retry) {
    status.textContent = "";
    var p = document.createElement("div");
    p.textContent = text;
    status.appendChild(p);
    if (retry) {
      var b = document.createElement("button");
      b.type = "button";
      b.textContent = "Retry";
      b.addEventListener("click", function () { startBoot(true); });
      status.appendChild(b);
    }
    status.hidden = false;
  }
  function hideStatus() { status.hidden = true; status.textContent = ""; }

  function onToggleClick() {
    if (phase === "ready") return; // Python owns the toggle from now on
    wantOpen = true;
    button.setAttribute("aria-busy", "true");
    if (phase === "failed") { startBoot(true); return; }
    showStatus("Starting " + config.title + "…");
    startBoot(false);
  }
  button.addEventListener("click", onToggleClick);

  function fail(stage, err) {
    phase = "failed";
    button.removeAttribute("aria-busy");
    var msg = (err && err.message) ? err.message : String(err);
    if (/WebAssembly|wasm/i.test(msg) && /Content Security Policy|CSP|unsafe-eval/i.test(msg)) {
      msg = "This page's Content-Security-Policy blocks WebAssembly ('wasm-unsafe-eval' is needed).";
    }
    var text = config.title + " could not start (" + stage + "): " + msg;
    console.error("[autopilot] " + text, err);
    showStatus(text, true);
    readyReject(new Error(text));
    ready = new Promise(function (res, rej) { readyResolve = res; readyReject = rej; });
    ready.catch(function () {});
    api.ready = ready;
  }

  function fetchOk(url, what) {
    return fetch(url).then(function (r) {
      if (!r.ok) throw new Error(what + " returned HTTP " + r.status + " (" + url + ")");
      return r;
    });
  }

  function pagePython() {
    var blocks = [];
    var nodes = document.querySelectorAll('script[type="autopilot-python"], script[type="text/autopilot-python"]');
    for (var i = 0; i < nodes.length; i++) {
      var n = nodes[i];
      if (n.src) blocks.push(fetchOk(n.src, "page Python").then(function (r) { var u = r.url; return r.text().then(function (t) { return [t, u]; }); }));
      else blocks.push(Promise.resolve([n.textContent, "<page script " + (i + 1) + ">"]));
    }
    String(config.python || "").split(",").map(function (s) { return s.trim(); }).filter(Boolean).forEach(function (f) {
      var url = new URL(f, document.baseURI).href;
      blocks.push(fetchOk(url, "page Python file").then(function (r) { return r.text().then(function (t) { return [t, url]; }); }));
    });
    return Promise.all(blocks);
  }

  // Pre-warm (first visit of a build): V8 compiles WebAssembly lazily, each function on its first call, on the
  // calling thread, and Python's start-up calls thousands of them: one main-thread task of 0.5-2 s. A worker
  // that starts the same Pyodide first compiles them off the main thread; V8 shares the compiled module within
  // the process, so the page's own start-up (still on the main thread, D1) then runs already-compiled code.
  // Later visits find the compiled code in the HTTP cache and skip the worker.
  var WARM_KEY = "autopilot:warm:" + BUILD_ID;
  function wasWarmed() {
    try { return window.localStorage.getItem(WARM_KEY) === "1"; } catch (e) { return false; }
  }
  function prewarm(options, snapshotUrl) {
    var setting = preset.prewarm;
    if (setting === false || (setting === undefined && wasWarmed()) || typeof Worker === "undefined") return null;
    // Besides the start-up, the worker runs what the page's boot and first answer run in Python (importing the
    // widget, rendering Markdown: the regex engine...), so that those paths are compiled too ("full", the
    // default); "basic" stops after the start-up.
    var full = setting !== "basic";
    var warmPy = "import sys\nsys.path.insert(0, '/lib/autopilot/bundle.zip')\ntry:\n" +
      "    import widget.browser, widget.ui.bar\n    from widget.core.markdown import render_markdown\n" +
      "    render_markdown('# t\\n\\n*a* **b** `c` [d](https://e.f/g)\\n\\n- h\\n\\n```\\ni\\n```\\n')\n" +
      "except Exception:\n    pass\n";
    var src = "var o = " + JSON.stringify(options) + ", s = " + JSON.stringify(snapshotUrl) + ";\n" +
      "if (s) o._loadSnapshot = fetch(s).then(function (r) { return r.arrayBuffer(); });\n" +
      "var b = " + (full ? "fetch(" + JSON.stringify(root + "bundle.zip") + ").then(function (r) { return r.arrayBuffer(); })" : "null") + ";\n" +
      "import(" + JSON.stringify(root + "pyodide/pyodide.mjs") + ").then(function (m) { return m.loadPyodide(o); })" +
      ".then(function (py) { if (!b) return; return b.then(function (buf) {\n" +
      "  py.FS.mkdirTree('/lib/autopilot'); py.FS.writeFile('/lib/autopilot/bundle.zip', new Uint8Array(buf));\n" +
      "  py.runPython(" + JSON.stringify(warmPy) + "); }); })" +
      ".then(function () { postMessage('ready'); }, function (e) { postMessage('failed: ' + e); });";
    var url = null, worker = null;
    try {
      url = URL.createObjectURL(new Blob([src], { type: "text/javascript" }));
      worker = new Worker(url, { type: "module" });
    } catch (e) { // a CSP without blob: workers, for instance: boot without it
      if (url) URL.revokeObjectURL(url);
      return null;
    }
    var done = new Promise(function (resolve) {
      var finish = function () { URL.revokeObjectURL(url); resolve(); };
      worker.onmessage = finish;
      worker.onerror = finish;
      setTimeout(finish, 30000);
    });
    return { done: done, stop: function () { worker.terminate(); } };
  }

  var booting = null;
  function startBoot(isRetry) {
    if (booting && !isRetry) return booting;
    if (phase === "booting" || phase === "ready") return booting;
    phase = "booting";
    if (wantOpen) showStatus("Starting " + config.title + "…");
    var stage = "loading Python";
    booting = (async function () {
      try {
        // Fetch everything in parallel with the interpreter boot.
        var bundleP = fetchOk(root + "bundle.zip", "bundle").then(function (r) { return r.arrayBuffer(); });
        var bridgeP = import(root + "bridge.mjs");
        var sanitizeP = import(root + "sanitize.mjs"); // the sink sanitizer for rendered answers
        var cssP = fetchOk(root + "skin.css", "skin").then(function (r) { return r.text(); });
        cssP.catch(function () {});
        var pageP = pagePython();
        var options = { indexURL: root + "pyodide/", fullStdLib: false };
        // The stdlib the boot imports; the rest is fetched on first use (see _autopilot_stdlib in build.py).
        if (BOOT_FILES.stdlib) options.stdLibURL = root + BOOT_FILES.stdlib;
        // No package is shipped: an empty package index saves fetching and parsing pyodide-lock.json.
        if (BOOT_FILES.lockInfo) options.lockFileContents = { info: BOOT_FILES.lockInfo, packages: {} };
        // A memory snapshot made by `build.py --snapshot` (deps and widget modules already imported): restored
        // instead of starting Python.
        var snapshotUrl = BOOT_FILES.snapshot ? root + BOOT_FILES.snapshot : null;
        var warm = prewarm(options, snapshotUrl);
        if (snapshotUrl) {
          options._loadSnapshot = fetchOk(snapshotUrl, "snapshot").then(function (r) { return r.arrayBuffer(); });
        }
        var pyodideModP = import(root + "pyodide/pyodide.mjs");
        if (warm) { await warm.done; performance.mark("autopilot:prewarmed"); }
        var pyodideMod = await pyodideModP;
        var pyodide;
        try {
          pyodide = await pyodideMod.loadPyodide(options);
        } finally {
          if (warm) warm.stop();
        }
        performance.mark("autopilot:pyodide");
        try {
          for (var i = window.localStorage.length - 1; i >= 0; i--) {  // flags of older builds
            var k = window.localStorage.key(i);
            if (k && k.indexOf("autopilot:warm:") === 0 && k !== WARM_KEY) window.localStorage.removeItem(k);
          }
          window.localStorage.setItem(WARM_KEY, "1");
        } catch (e) { /* storage blocked: pre-warm on every visit */ }
        var stdlibRest = null;
        if (BOOT_FILES.rest) {
          stdlibRest = pyodide.pyimport("_autopilot_stdlib");
          stdlibRest.install(root + BOOT_FILES.rest);
        }
        stage = "installing the bundle";
        var bundle = new Uint8Array(await bundleP);
        pyodide.FS.mkdirTree("/lib/autopilot");
        pyodide.FS.writeFile("/lib/autopilot/bundle.zip", bundle);
        // (A restored snapshot has it on sys.path already, and a random seed every visitor shares: reseed.)
        pyodide.runPython("import sys\nif '/lib/autopilot/bundle.zip' not in sys.path: sys.path.insert(0, '/lib/autopilot/bundle.zip')" +
          (snapshotUrl ? "\nimport random\nrandom.seed()" : ""));
        pyodide.registerJsModule("autopilot_bridge", await bridgeP);
        pyodide.registerJsModule("autopilot_sanitize", await sanitizeP);
        stage = "starting the widget";
        var page = await pageP;
        if (stdlibRest) {
          // Page Python that imports a module of the rest of the stdlib gets it fetched now, asynchronously
          // (other imports of it, e.g. dynamic ones, fall back to a synchronous fetch on first use).
          if (stdlibRest.needs_rest(page.map(function (p) { return p[0]; }))) {
            var restBuf = await fetchOk(root + BOOT_FILES.rest, "stdlib").then(function (r) { return r.arrayBuffer(); });
            stdlibRest.mount(new Uint8Array(restBuf));
          }
          stdlibRest.destroy();
        }
        var loader = {
          toggleHost: host,
          toggleButton: button,
          statusEl: status,
          wantOpen: function () { return wantOpen; },
          skinCss: function () { return cssP; },
          handover: function () {
            phase = "ready";
            button.removeEventListener("click", onToggleClick);
            button.removeAttribute("aria-busy");
            hideStatus();
          },
        };
        var boot = pyodide.pyimport("widget.browser").boot;
        var handle = await boot(JSON.stringify(config), page, loader);
        boot.destroy();
        api.pyodide = pyodide;
        api.handle = handle;
        readyResolve(api);
        return api;
      } catch (err) {
        booting = null;
        fail(stage, err);
        throw err;
      }
    })();
    booting.catch(function () {});
    return booting;
  }

  // ---- boot policy (D1) -------------------------------------------------------------------------
  function onIntent() {
    button.removeEventListener("pointerenter", onIntent);
    button.removeEventListener("focus", onIntent);
    startBoot(false);
  }
  if (config.boot === "eager" || config.open) {
    startBoot(false);
  } else if (config.boot === "intent") {
    button.addEventListener("pointerenter", onIntent);
    button.addEventListener("focus", onIntent);
  } else {
    var idle = function () {
      var go = function () { startBoot(false); };
      if ("requestIdleCallback" in window) requestIdleCallback(go, { timeout: 2000 });
      else setTimeout(go, 200);
    };
    if (document.readyState === "complete") idle();
    else window.addEventListener("load", idle, { once: true });
  }

  var api = {
    __loader: true,
    config: config,
    ready: ready,
    loaderStartedMs: t0,
    boot: function () { return startBoot(false); },
  };
  window.Autopilot = api;
})();

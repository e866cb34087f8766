/* autopilot-widget loader: the whole install is one classic <script> tag.
 *
 * It paints the toggle at once (plain JS, its own shadow root), boots Pyodide from its own folder on the
 * chosen policy (data-boot: idle | eager | intent), installs the bundle, runs the page's Python and hands
 * over to Python, which then owns the bar. Until then it owns the pre-boot state and its errors (D1, D10).
 * On a PyScript page it boots no interpreter of its own: it hooks PyScript's (one Pyodide per page).
 * window.Autopilot is the JS API (docs/embedding.md); calls made before Python is ready are queued.
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
  var preset = window.AutopilotConfig;

  // ---- configuration: data-* attributes win over window.AutopilotConfig ---------------------------
  function warn(text) { console.warn("[autopilot] " + text); }
  function attrName(key) { return "data-" + key.replace(/[A-Z]/g, function (c) { return "-" + c.toLowerCase(); }); }
  function isPlainObject(v) { return v !== null && typeof v === "object" && !Array.isArray(v); }
  // The relay the loader came from: .../widget/autopilot.js -> ... (keeps a path prefix the relay is mounted under).
  function defaultRelay() {
    var m = scriptUrl.pathname.match(/^(.*)\/widget\/autopilot\.js$/);
    return scriptUrl.origin + (m ? m[1] : "");
  }
  var OPTIONS = {
    relay: { type: "url" },
    app: { type: "string" },
    conversationUrl: { type: "url" },
    boot: { type: "enum", values: ["idle", "eager", "intent"], def: "idle" },
    open: { type: "boolean", def: false },
    position: { type: "enum", values: ["bottom-right", "bottom-left"], def: "bottom-right" },
    theme: { type: "enum", values: ["auto", "light", "dark"], def: "auto" },
    title: { type: "string" },
    labels: { type: "object" },
    python: { type: "list", def: [] },
    tools: { type: "object" },
    prewarm: { type: "prewarm" }, // true | false | a mode name (bench/peer.py); unset: once per build
  };

  // One option's value from an attribute (a string) or AutopilotConfig (any type); undefined when malformed.
  function parseOption(key, spec, raw, where) {
    var bad = function (why) {
      warn("option " + where + " " + why + (spec.def !== undefined ? "; using " + JSON.stringify(spec.def) : "; ignored"));
      return undefined;
    };
    var fromAttr = typeof raw === "string" && where.indexOf("data-") === 0;
    switch (spec.type) {
      case "string":
        if (typeof raw !== "string" || !raw.trim()) return bad("must be a non-empty string");
        return raw.trim();
      case "url":
        if (typeof raw !== "string" || !raw.trim()) return bad("must be a URL");
        try {
          var u = new URL(raw.trim(), document.baseURI);
          if (u.protocol !== "https:" && u.protocol !== "http:") return bad("must be an http(s) URL, got " + JSON.stringify(raw));
          return u.href.replace(/\/+$/, "");
        } catch (e) { return bad("is not a valid URL: " + JSON.stringify(raw)); }
      case "enum":
        if (spec.values.indexOf(raw) < 0) return bad("must be one of " + spec.values.join(", ") + ", got " + JSON.stringify(raw));
        return raw;
      case "boolean":
        if (raw === true || raw === false) return raw;
        if (raw === "" || raw === "true") return true; // <script data-open> counts as true
        if (raw === "false") return false;
        return bad("must be true or false, got " + JSON.stringify(raw));
      case "list":
        if (Array.isArray(raw)) {
          if (raw.every(function (s) { return typeof s === "string"; })) return raw.map(function (s) { return s.trim(); }).filter(Boolean);
          return bad("must be a list of URLs (strings)");
        }
        if (typeof raw === "string") {
          if (/^\s*\[/.test(raw)) { try { return parseOption(key, spec, JSON.parse(raw), where); } catch (e) { return bad("is not valid JSON: " + e.message); } }
          return raw.split(",").map(function (s) { return s.trim(); }).filter(Boolean);
        }
        return bad("must be a comma-separated string or a list of URLs");
      case "prewarm":
        if (raw === true || raw === "true" || raw === "") return true;
        if (raw === false || raw === "false") return false;
        if (typeof raw === "string" && /^[a-z]+$/.test(raw)) return raw;
        return bad("must be true, false or a mode name, got " + JSON.stringify(raw));
      case "object":
        if (fromAttr) {
          try { raw = JSON.parse(raw); } catch (e) { return bad("is not valid JSON: " + e.message); }
        }
        if (!isPlainObject(raw)) return bad("must be an object");
        try { return JSON.parse(JSON.stringify(raw)); } catch (e) { return bad("must be JSON data: " + e.message); }
    }
    return undefined;
  }

  var config = { root: root, buildId: BUILD_ID };
  if (preset !== undefined && preset !== null && !isPlainObject(preset)) {
    warn("window.AutopilotConfig must be an object; ignored");
    preset = null;
  }
  preset = preset || {};
  Object.keys(ds).forEach(function (k) {
    if (!Object.prototype.hasOwnProperty.call(OPTIONS, k)) warn("unknown option " + attrName(k) + " is ignored (options: " + Object.keys(OPTIONS).map(attrName).join(", ") + ")");
  });
  Object.keys(preset).forEach(function (k) {
    if (!Object.prototype.hasOwnProperty.call(OPTIONS, k)) warn("unknown option window.AutopilotConfig." + k + " is ignored (options: " + Object.keys(OPTIONS).join(", ") + ")");
  });
  Object.keys(OPTIONS).forEach(function (k) {
    var spec = OPTIONS[k], value;
    if (ds[k] !== undefined && (ds[k] !== "" || spec.type === "boolean")) value = parseOption(k, spec, ds[k], attrName(k) + "=" + JSON.stringify(ds[k]));
    else if (preset[k] !== undefined && preset[k] !== null) value = parseOption(k, spec, preset[k], "window.AutopilotConfig." + k);
    config[k] = value !== undefined ? value : (spec.def !== undefined ? spec.def : null);
  });
  if (!config.relay) config.relay = defaultRelay();
  if (!config.conversationUrl && !config.app) {
    warn("no data-app or data-conversation-url: using app \"demo\"");
    config.app = "demo";
  }

  // ---- labels: the loader's strings, from the same table as the bar's (widget/ui/labels.py) ------------
  var LABELS = {
    title: "Autopilot",
    open: "Open {title}",
    retry: "Retry",
    starting: "Starting {title}…",
    boot_failed: "{title} could not start ({stage}): {message}",
    csp_wasm: "{title} cannot start on this page: its Content-Security-Policy blocks WebAssembly (the site needs to add 'wasm-unsafe-eval' to script-src).",
    stage_python: "loading Python",
    stage_bundle: "installing the bundle",
    stage_widget: "starting the widget",
  };
  if (config.labels) {
    Object.keys(config.labels).forEach(function (k) {
      if (typeof config.labels[k] === "string") { if (k in LABELS) LABELS[k] = config.labels[k]; }
      else { warn("label " + JSON.stringify(k) + " must be a string; ignored"); delete config.labels[k]; }
    });
  }
  var title = config.title || LABELS.title;
  function L(key, vars) {
    vars = vars || {};
    return String(LABELS[key] || key).replace(/\{(\w+)\}/g, function (m, name) {
      return name === "title" ? title : (name in vars ? String(vars[name]) : m);
    });
  }

  // ---- the toggle, painted before anything else -----------------------------------------------
  var host = document.createElement("div");
  host.id = "autopilot-toggle-host";
  host.setAttribute("data-autopilot", "toggle");
  if (config.theme !== "auto") host.setAttribute("data-theme", config.theme);
  var shadow = host.attachShadow({ mode: "open" });
  var side = config.position === "bottom-left" ? "left" : "right";
  var css =
    // !important: a host page's own !important rules on div must not move or hide the toggle (D10).
    ":host{all:initial !important;position:fixed !important;z-index:2147483000 !important;" + side + ":var(--autopilot-toggle-offset-x,20px) !important;bottom:var(--autopilot-toggle-offset-y,20px) !important;display:block !important;font-family:var(--autopilot-font,system-ui,sans-serif) !important}" +
    "button.toggle{all:unset;box-sizing:border-box;width:56px;height:56px;border-radius:50%;display:grid;place-items:center;cursor:pointer;" +
    "background:var(--autopilot-accent,#4f46e5);color:var(--autopilot-on-accent,#fff);box-shadow:0 4px 14px rgba(0,0,0,.25)}" +
    "button.toggle:focus-visible{outline:3px solid var(--autopilot-focus,#f59e0b);outline-offset:3px}" +
    "button.toggle svg{width:26px;height:26px}" +
    ".status{position:absolute;bottom:66px;" + side + ":0;min-width:220px;max-width:320px;padding:10px 12px;border-radius:10px;" +
    "background:var(--autopilot-surface,#fff);color:var(--autopilot-text,#111);box-shadow:0 4px 18px rgba(0,0,0,.2);font-size:14px;line-height:1.4}" +
    ".status[hidden]{display:none}.status button{margin-top:8px;font:inherit;padding:4px 10px;border-radius:6px;border:1px solid currentColor;background:transparent;color:inherit;cursor:pointer}" +
    "@media (prefers-color-scheme: dark){:host(:not([data-theme=light])) .status{background:var(--autopilot-surface,#1f2937);color:var(--autopilot-text,#f3f4f6)}}" +
    ":host([data-theme=dark]) .status{background:var(--autopilot-surface,#1f2937);color:var(--autopilot-text,#f3f4f6)}";
  // A constructable stylesheet: a strict CSP (no 'unsafe-inline' in style-src) blocks <style> elements, not these.
  try {
    var sheet = new CSSStyleSheet();
    sheet.replaceSync(css);
    shadow.adoptedStyleSheets = [sheet];
  } catch (e) {
    var style = document.createElement("style");
    style.textContent = css;
    shadow.appendChild(style);
  }
  var button = document.createElement("button");
  button.className = "toggle";
  button.type = "button";
  button.setAttribute("part", "toggle");
  button.setAttribute("aria-label", L("open"));
  button.setAttribute("aria-expanded", "false");
  button.innerHTML = '<svg part="toggle-icon" viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" aria-hidden="true"><path d="M21 15a2 2 0 0 1-2 2H7l-4 4V5a2 2 0 0 1 2-2h14a2 2 0 0 1 2 2z"/></svg>';
  var status = document.createElement("div");
  status.className = "status";
  status.setAttribute("role", "status");
  status.setAttribute("aria-live", "polite");
  status.hidden = true;
  shadow.appendChild(button);
  shadow.appendChild(status);

  function mountToggle() {
    if (phase === "destroyed") return;
    (document.body || document.documentElement).appendChild(host);
    performance.mark("autopilot:toggle");
  }

  // ---- pre-boot state ---------------------------------------------------------------------------
  var phase = "waiting"; // waiting | booting | ready | failed | destroyed
  var mode = "pyodide"; // pyodide (our own boot) | pyscript (PyScript's interpreter)
  // The bar's open state survives a navigation within the site, per tab (the bar writes it).
  var OPEN_KEY = "autopilot:open:" + config.app;
  var wantOpen = config.open || (function () { try { return sessionStorage.getItem(OPEN_KEY) === "1"; } catch (e) { return false; } })();
  var readyResolve, readyReject;
  var ready = new Promise(function (res, rej) { readyResolve = res; readyReject = rej; });
  ready.catch(function () {});

  if (document.body) mountToggle();
  else document.addEventListener("DOMContentLoaded", mountToggle, { once: true });

  function showStatus(text, retry) {
    status.textContent = "";
    var p = document.createElement("div");
    p.textContent = text;
    status.appendChild(p);
    if (retry) {
      var b = document.createElement("button");
      b.type = "button";
      b.textContent = L("retry");
      b.addEventListener("click", function () { startBoot(true); });
      status.appendChild(b);
    }
    status.hidden = false;
  }
  function hideStatus() { status.hidden = true; status.textContent = ""; }

  var cspError = null; // set when the page's CSP blocks WebAssembly: no boot can work, no Retry
  function onToggleClick() {
    if (phase === "ready") return; // Python owns the toggle from now on
    wantOpen = true;
    if (cspError) { fail("csp", cspError); return; }
    button.setAttribute("aria-busy", "true");
    if (phase === "failed" && mode === "pyodide") { startBoot(true); return; }
    if (phase !== "failed") showStatus(L("starting"));
    if (mode === "pyodide") startBoot(false);
  }
  button.addEventListener("click", onToggleClick);

  function fail(stage, err) {
    phase = "failed";
    button.removeAttribute("aria-busy");
    var msg = (err && err.message) ? err.message : String(err);
    var csp = stage === "csp" || (/WebAssembly|wasm/i.test(msg) && /Content Security Policy|CSP|unsafe-eval/i.test(msg));
    var text = csp ? L("csp_wasm") : L("boot_failed", { stage: L(stage), message: msg });
    console.error("[autopilot] " + text, err);
    showStatus(text, !csp);
    readyReject(new Error(text));
    if (!csp) { // a Retry may still succeed: a fresh promise for it (a blocked WebAssembly stays rejected)
      ready = new Promise(function (res, rej) { readyResolve = res; readyReject = rej; });
      ready.catch(function () {});
      api.ready = ready;
    }
    if (destroyRequested) finishDestroy();
  }

  // WebAssembly allowed? A page whose CSP lacks 'wasm-unsafe-eval' (or 'unsafe-eval') refuses to compile even
  // the 8-byte empty module: say so at once instead of a boot that dies in Pyodide's internals.
  function wasmBlocked() {
    if (typeof WebAssembly !== "object") return new Error("WebAssembly is not available in this browser");
    try {
      new WebAssembly.Module(new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0]));
      return null;
    } catch (e) {
      return e;
    }
  }

  function fetchOk(url, what) {
    return fetch(url).then(function (r) {
      if (!r.ok) throw new Error(what + " returned HTTP " + r.status + " (" + url + ")");
      return r;
    });
  }

  // Page Python blocks may follow the loader's tag: collect them once the document is parsed.
  function pagePython() {
    if (document.readyState === "loading") {
      return new Promise(function (resolve) { document.addEventListener("DOMContentLoaded", resolve, { once: true }); }).then(pagePython);
    }
    var blocks = [];
    var nodes = document.querySelectorAll('script[type="autopilot-python"], script[type="text/autopilot-python"]');
    for (var i = 0; i < nodes.length; i++) {
      var n = nodes[i];
      if (n.src) blocks.push(fetchOk(n.src, "page Python").then(function (r) { var u = r.url; return r.text().then(function (t) { return [t, u]; }); }));
      else blocks.push(Promise.resolve([n.textContent, "<page script " + (i + 1) + ">"]));
    }
    config.python.forEach(function (f) {
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
    var setting = config.prewarm;
    // Unset (null here) and "handoff": once per build; true and the other modes: every visit.
    var oncePerBuild = setting == null || setting === "handoff";
    if (setting === false || (oncePerBuild && wasWarmed()) || typeof Worker === "undefined") return null;
    // Besides the start-up, the worker runs what the page's boot and first answer run in Python (importing the
    // widget, rendering Markdown: the regex engine...), so that those paths are compiled too ("full", the
    // default); "basic" stops after the start-up; "compile" is the default's run on every visit.
    var full = setting !== "basic";
    var warmPy = "import sys\nsys.path.insert(0, '/lib/autopilot/bundle.zip')\ntry:\n" +
      "    import widget.browser, widget.ui.bar\n    from widget.core.markdown import render_markdown\n" +
      "    render_markdown('# t\\n\\n*a* **b** `c` [d](https://e.f/g)\\n\\n- h\\n\\n```\\ni\\n```\\n')\n" +
      "except Exception:\n    pass\n";
    // "handoff" (without a snapshot of the build's own): the worker hands the page a memory snapshot of its
    // Python (started, the widget imported, Markdown rendered once) and its compiled module; the page restores it
    // instead of starting Python a second time (see startBoot). The first reply of a first visit comes ~0.4 s
    // sooner, but the restore and Pyodide's module set-up are one main-thread task of ~150-400 ms (the default's
    // longest is ~60-220 ms): the default keeps the host page smoother (docs/performance.md, run H).
    var handOff = full && !snapshotUrl && setting === "handoff";
    var src = "var o = " + JSON.stringify(options) + ", s = " + JSON.stringify(snapshotUrl) + ";\n" +
      "if (s) o._loadSnapshot = fetch(s).then(function (r) { return r.arrayBuffer(); });\n" +
      (handOff ? "o._makeSnapshot = true;\nvar wm = null, is = WebAssembly.instantiateStreaming;\n" +
        "WebAssembly.instantiateStreaming = function () { return is.apply(WebAssembly, arguments)" +
        ".then(function (r) { wm = r.module; return r; }); };\n" : "") +
      "var b = " + (full ? "fetch(" + JSON.stringify(root + "bundle.zip") + ").then(function (r) { return r.arrayBuffer(); })" : "null") + ";\n" +
      "import(" + JSON.stringify(root + "pyodide/pyodide.mjs") + ").then(function (m) { return m.loadPyodide(o); })" +
      ".then(function (py) { if (!b) return null; return b.then(function (buf) {\n" +
      "  py.FS.mkdirTree('/lib/autopilot'); py.FS.writeFile('/lib/autopilot/bundle.zip', new Uint8Array(buf));\n" +
      "  py.runPython(" + JSON.stringify(warmPy) + ");\n" +
      "  return " + (handOff ? "py.makeMemorySnapshot()" : "null") + "; }); })" +
      ".then(function (snap) { if (snap) postMessage({ snapshot: snap, module: wm }, [snap.buffer]); else postMessage({}); }," +
      " function (e) { postMessage({ failed: String(e) }); });";
    var url = null, worker = null;
    try {
      url = URL.createObjectURL(new Blob([src], { type: "text/javascript" }));
      worker = new Worker(url, { type: "module" });
    } catch (e) { // a CSP without blob: workers, for instance: boot without it
      if (url) URL.revokeObjectURL(url);
      return null;
    }
    var snapshot = null, module = null;
    var done = new Promise(function (resolve) {
      var finish = function (ev) {
        URL.revokeObjectURL(url);
        if (ev && ev.data && ev.data.snapshot) {
          snapshot = ev.data.snapshot;
          module = ev.data.module instanceof WebAssembly.Module ? ev.data.module : null;
        }
        resolve();
      };
      worker.onmessage = finish;
      worker.onerror = function () { finish(null); };
      setTimeout(finish, 30000);
    });
    // The snapshot is handed over once: a retried boot starts Python itself.
    return { done: done, stop: function () { worker.terminate(); },
             takeSnapshot: function () { var s = snapshot; snapshot = null; return s; },
             takeModule: function () { var m = module; module = null; return m; } };
  }

  var booting = null;
  function startBoot(isRetry) {
    if (mode !== "pyodide" || phase === "destroyed") return booting;
    if (booting && !isRetry) return booting;
    if (phase === "booting" || phase === "ready") return booting;
    // A PyScript page found late (idle and intent boots run after the whole page was parsed): share its interpreter.
    if (detectPyScript()) return booting;
    cspError = wasmBlocked();
    if (cspError) { fail("csp", cspError); return null; }
    phase = "booting";
    performance.mark("autopilot:boot");
    if (wantOpen) showStatus(L("starting"));
    var stage = "stage_python";
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
        var handedOver = null;
        if (warm) {
          await warm.done;
          performance.mark("autopilot:prewarmed");
          handedOver = warm.takeSnapshot();
          if (handedOver) { options._loadSnapshot = handedOver; performance.mark("autopilot:handoff"); }
        }
        var pyodideMod = await pyodideModP;
        var pyodide;
        // The worker's compiled module, handed over with its snapshot: instantiated as it is instead of fetched,
        // decoded and looked up again (Pyodide has no option for a module: its one instantiateStreaming call is
        // answered, then the original is put back).
        var compiled = handedOver && warm.takeModule();
        var realStreaming = WebAssembly.instantiateStreaming;
        if (compiled) {
          WebAssembly.instantiateStreaming = function (source, imports) {
            WebAssembly.instantiateStreaming = realStreaming;
            Promise.resolve(source).then(function (r) { if (r && r.body) r.body.cancel(); }).catch(function () {});
            return WebAssembly.instantiate(compiled, imports).then(function (instance) {
              return { instance: instance, module: compiled };
            });
          };
        }
        try {
          pyodide = await pyodideMod.loadPyodide(options);
        } finally {
          WebAssembly.instantiateStreaming = realStreaming;
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
        var lazy = null;
        if (BOOT_FILES.lazy) {
          // Parts of the Python library loaded on first use (see _autopilot_stdlib in build.py).
          var urls = {};
          Object.keys(BOOT_FILES.lazy).forEach(function (g) { urls[g] = root + BOOT_FILES.lazy[g]; });
          lazy = pyodide.pyimport("_autopilot_stdlib");
          var urlsPy = pyodide.toPy(urls);
          lazy.install(urlsPy);
          urlsPy.destroy();
        }
        stage = "stage_bundle";
        var bundle = new Uint8Array(await bundleP);
        pyodide.FS.mkdirTree("/lib/autopilot");
        pyodide.FS.writeFile("/lib/autopilot/bundle.zip", bundle);
        // (A restored snapshot has it on sys.path already, and a random seed every visitor of the build or the
        // pre-warm worker shares: reseed.)
        pyodide.runPython("import sys\nif '/lib/autopilot/bundle.zip' not in sys.path: sys.path.insert(0, '/lib/autopilot/bundle.zip')" +
          (snapshotUrl || handedOver ? "\nimport random\nrandom.seed()" : ""));
        pyodide.registerJsModule("autopilot_bridge", await bridgeP);
        pyodide.registerJsModule("autopilot_sanitize", await sanitizeP);
        stage = "stage_widget";
        performance.mark("autopilot:bundle");
        var page = await pageP;
        if (lazy) {
          // Page Python that imports a module of a lazy group gets its zip fetched now, asynchronously (other
          // imports of it, e.g. dynamic ones, fall back to a synchronous fetch on first use).
          var neededPy = lazy.needs(page.map(function (p) { return p[0]; }));
          var needed = neededPy.toJs();
          neededPy.destroy();
          var bufs = await Promise.all(needed.map(function (g) {
            return fetchOk(urls[g], "stdlib").then(function (r) { return r.arrayBuffer(); });
          }));
          needed.forEach(function (g, i) { lazy.mount(new Uint8Array(bufs[i]), g); });
          lazy.destroy();
        }
        await handOver(pyodide, page, cssP, null);
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

  // Python takes over: the client, the bar (on the loader's toggle), page Python, then connecting.
  async function handOver(pyodide, page, cssP, connectAfter) {
    var loader = {
      toggleHost: host,
      toggleButton: button,
      statusEl: status,
      wantOpen: function () { return wantOpen; },
      openKey: OPEN_KEY,
      skinCss: function () { return cssP; },
      handover: function () {
        phase = "ready";
        button.removeEventListener("click", onToggleClick);
        button.removeAttribute("aria-busy");
        hideStatus();
      },
      api: jsHost,
    };
    if (connectAfter) loader.connectAfter = connectAfter;
    var mod = pyodide.pyimport("widget.browser");
    var handle;
    try {
      handle = await mod.boot(JSON.stringify(config), page, loader);
    } finally {
      mod.destroy(); // (and the attribute proxy of boot borrowed from it)
    }
    api.pyodide = pyodide;
    api.handle = handle;
    pyApi = handle.api;
    flushQueue();
    readyResolve(api);
  }

  // ---- PyScript pages: one interpreter, PyScript's ------------------------------------------------
  // PyScript (@pyscript/core) keeps its exports on globalThis under this symbol (its "sticky module"), whichever
  // copy of it the page loaded. Its hooks.main.onReady callbacks run, awaited, before each <script type="py">.
  var PYSCRIPT = Symbol.for("@pyscript/core");
  function pyscriptOnPage() {
    return !!document.querySelector('script[type="py"], py-script, py-config, script[type="module"][src*="pyscript"]');
  }
  function detectPyScript() {
    if (mode === "pyscript") return true;
    if (globalThis[PYSCRIPT]) { hookPyScript(globalThis[PYSCRIPT]); return true; }
    if (!pyscriptOnPage()) return false;
    mode = "pyscript";
    if (document.querySelector('script[type="module"][src*="pyscript"]')) {
      // The page loads PyScript itself: its exports exist once its module ran (before its first progress event).
      var check = function () {
        if (globalThis[PYSCRIPT]) { window.removeEventListener("py:progress", check); hookPyScript(globalThis[PYSCRIPT]); }
      };
      window.addEventListener("py:progress", check);
      document.addEventListener("DOMContentLoaded", check, { once: true });
      check();
    } else {
      // <script type="py"> blocks but no PyScript: load the copy we ship, offline (our interpreter and bundle),
      // unless the page brings its own config.
      if (!document.querySelector('py-config, script[type="py"][config], py-script[config]')) {
        var cfg = document.createElement("py-config");
        cfg.setAttribute("type", "json");
        cfg.hidden = true;
        cfg.textContent = JSON.stringify(pyscriptConfig());
        (document.head || document.documentElement).appendChild(cfg);
      }
      import(root + "pyscript/core.js").then(hookPyScript, function (err) { fail("stage_python", err); });
    }
    return true;
  }
  function pyscriptConfig() {
    var files = {};
    files[root + "bundle-full.zip"] = "/lib/python3.14/site-packages/*"; // PyScript's whole stdlib: no lazy zips
    return { interpreter: root + "pyodide/pyodide.mjs", files: files };
  }
  var hooked = false, pyscriptBoot = null;
  function hookPyScript(ps) {
    mode = "pyscript";
    if (hooked) return;
    hooked = true;
    var allDone = new Promise(function (res) { window.addEventListener("py:all-done", res, { once: true }); });
    ps.hooks.main.onReady.add(function (wrap) {
      watchPyScriptErrors(wrap);
      return bootOnPyScript(wrap.interpreter, allDone);
    });
    ps.hooks.main.onBeforeRun.add(pyBlockRuns);
    ps.hooks.main.onBeforeRunAsync.add(pyBlockRuns);
    // A loader that came after PyScript had started: take the interpreter once the page's blocks ran.
    allDone.then(function () {
      if (!pyscriptBoot) ps.whenDefined("py").then(function (w) { bootOnPyScript(w.interpreter, null); });
    });
  }
  // A <script type="py"> block that raises: PyScript reports it on stderr; the bar shows it too (pageError).
  var pyBlock = "<py script>", stderrWatched = false;
  function pyBlockRuns(wrap, element) {
    var all = document.querySelectorAll('script[type="py"], py-script');
    pyBlock = "<py script " + (Array.prototype.indexOf.call(all, element) + 1) + ">";
  }
  function watchPyScriptErrors(wrap) {
    if (stderrWatched || !wrap.io) return;
    stderrWatched = true;
    var stderr = wrap.io.stderr;
    wrap.io.stderr = function (error) {
      if (error && typeof error.message === "string") quiet(call("pageError", { source: pyBlock, traceback: error.message }));
      return stderr.apply(this, arguments);
    };
  }
  function bootOnPyScript(pyodide, allDone) {
    if (pyscriptBoot) return pyscriptBoot;
    phase = "booting";
    if (wantOpen) showStatus(L("starting"));
    performance.mark("autopilot:pyodide");
    var stage = "stage_bundle";
    // Never rejects: PyScript awaits this before running the page's blocks.
    pyscriptBoot = (async function () {
      try {
        if (!pyodide.runPython("import importlib.util\nimportlib.util.find_spec('widget') is not None")) {
          // The page's PyScript config has no "files" entry for our bundle: install it ourselves (all of it:
          // PyScript's interpreter has the whole stdlib and no lazy zips).
          var bundle = new Uint8Array(await fetchOk(root + "bundle-full.zip", "bundle").then(function (r) { return r.arrayBuffer(); }));
          pyodide.FS.mkdirTree("/lib/autopilot");
          pyodide.FS.writeFile("/lib/autopilot/bundle.zip", bundle);
          pyodide.runPython("import sys, importlib\nsys.path.insert(0, '/lib/autopilot/bundle.zip')\nimportlib.invalidate_caches()");
        }
        pyodide.registerJsModule("autopilot_bridge", await import(root + "bridge.mjs"));
        pyodide.registerJsModule("autopilot_sanitize", await import(root + "sanitize.mjs"));
        stage = "stage_widget";
        var cssP = fetchOk(root + "skin.css", "skin").then(function (r) { return r.text(); });
        cssP.catch(function () {});
        // Connect once the page's own blocks registered their functions (or after 3 s: a block may run forever).
        var connectAfter = allDone ? Promise.race([allDone, new Promise(function (r) { setTimeout(r, 3000); })]) : null;
        await handOver(pyodide, await pagePython(), cssP, connectAfter);
      } catch (err) {
        fail(stage, err);
      }
    })();
    return pyscriptBoot;
  }

  // ---- the JS API: window.Autopilot -----------------------------------------------------------------
  // Payloads cross into Python once, as JSON text; Python answers through a one-shot callback with JSON text
  // {ok, value | error}. The only proxies are handle and handle.api (owned here, destroyed by destroy()).
  var pyApi = null;
  var queue = []; // [op, json, resolve, reject] made before Python was ready, applied in order
  var destroyRequested = false;
  var jsFunctions = Object.create(null); // name -> handler(args, context)
  var jsTools = Object.create(null); // name -> handler(args, {question, page, signal})
  var controllers = Object.create(null); // tool call id -> AbortController
  var listeners = Object.create(null); // event -> [fn]

  function sendToPython(op, text, resolve, reject) {
    try {
      pyApi(op, text, function (reply) {
        var r = JSON.parse(reply);
        if (r.ok) resolve(r.value);
        else reject(new Error(r.error));
      });
    } catch (e) {
      reject(e);
    }
  }
  function refused(op) { return Promise.reject(new Error("[autopilot] destroyed: " + op + "() does nothing")); }
  function call(op, payload) {
    if (destroyRequested) return refused(op);
    var text;
    try {
      text = JSON.stringify(payload === undefined ? null : payload);
    } catch (e) {
      return Promise.reject(new TypeError("[autopilot] " + op + "(): the argument must be JSON data (" + e.message + ")"));
    }
    return new Promise(function (resolve, reject) {
      if (pyApi) sendToPython(op, text, resolve, reject);
      else queue.push([op, text, resolve, reject]);
    });
  }
  function flushQueue() {
    var q = queue;
    queue = [];
    q.forEach(function (c) { sendToPython(c[0], c[1], c[2], c[3]); });
  }
  function quiet(p) { p.catch(function () {}); return p; }

  // What Python calls: JS handlers of functions and tools, tool aborts, events.
  var jsHost = {
    invoke: function (kind, name, callId, argsText, contextText) {
      var fn = (kind === "tool" ? jsTools : jsFunctions)[name];
      if (!fn) return Promise.reject(new Error("no JS handler for " + JSON.stringify(name)));
      var args = JSON.parse(argsText), context = JSON.parse(contextText);
      if (kind === "tool") {
        var controller = new AbortController();
        controllers[callId] = controller;
        context.signal = controller.signal;
      }
      return new Promise(function (resolve) { resolve(fn(args, context)); }).then(function (value) {
        var text = JSON.stringify(value === undefined ? null : value);
        if (text === undefined) throw new TypeError("the result of " + JSON.stringify(name) + " is not JSON data");
        return text;
      }).finally(function () { delete controllers[callId]; });
    },
    abort: function (callId) {
      var c = controllers[callId];
      if (c) c.abort();
    },
    emit: function (event, text) {
      var fns = listeners[event];
      if (!fns || !fns.length) return;
      var payload = JSON.parse(text);
      fns.slice().forEach(function (fn) {
        try { fn(payload); } catch (e) { console.error("[autopilot] listener for " + JSON.stringify(event) + " threw", e); }
      });
    },
  };

  function requestOpen() {
    if (phase === "ready" || destroyRequested) return;
    onToggleClick();
  }
  function finishDestroy() {
    if (phase === "destroyed") return;
    phase = "destroyed";
    destroyRequested = true;
    button.removeEventListener("click", onToggleClick);
    host.remove();
    if (pyApi) { pyApi.destroy(); pyApi = null; }
    // PyProxy.destroy() releases the proxy (Python's own teardown ran through the "destroy" op first).
    if (api.handle) { api.handle.destroy(); api.handle = null; }
    var q = queue;
    queue = [];
    q.forEach(function (c) {
      if (c[0] === "destroy") c[2](true);
      else c[3](new Error("[autopilot] destroyed before " + c[0] + "() was applied"));
    });
    Object.keys(controllers).forEach(function (k) { controllers[k].abort(); });
    jsFunctions = Object.create(null);
    jsTools = Object.create(null);
    listeners = Object.create(null);
    api.destroyed = true;
  }

  var api = {
    __loader: true,
    config: config,
    ready: ready,
    loaderStartedMs: t0,
    destroyed: false,
    /** Start the boot now (whatever data-boot says); resolves like ready. */
    boot: function () { return startBoot(false); },
    /** Open the bar (before the boot: as a click on the toggle would); resolves once it is open. */
    open: function () {
      if (destroyRequested) return quiet(refused("open"));
      if (pyApi) return quiet(call("open"));
      wantOpen = true;
      requestOpen();
      return quiet(ready.then(function () { return true; }));
    },
    close: function () {
      if (destroyRequested) return quiet(refused("close"));
      if (pyApi) return quiet(call("close"));
      wantOpen = false;
      hideStatus();
      return quiet(ready.then(function () { return false; }));
    },
    /** Resolves to whether the bar is open afterwards. */
    toggle: function () {
      if (destroyRequested) return quiet(refused("toggle"));
      if (pyApi) return quiet(call("toggle"));
      return wantOpen ? api.close() : api.open();
    },
    /** Send a user message once connected; resolves to true when the relay took it (else the bar shows why). */
    send: function (text) {
      if (typeof text !== "string" || !text.trim()) return Promise.reject(new TypeError("[autopilot] send(text) needs some text"));
      if (!pyApi && phase === "waiting") startBoot(false);
      return call("send", text);
    },
    /** Subscribe to a client event (docs/api.md#events); returns a function that unsubscribes. */
    on: function (event, fn) {
      if (typeof event !== "string" || typeof fn !== "function") throw new TypeError("[autopilot] on(event, fn) needs an event name and a function");
      var fns = listeners[event] || (listeners[event] = []);
      fns.push(fn);
      if (fns.length === 1) quiet(call("subscribe", event));
      return function off() {
        var list = listeners[event];
        var i = list ? list.indexOf(fn) : -1;
        if (i < 0) return;
        list.splice(i, 1);
        if (!list.length && !destroyRequested) quiet(call("unsubscribe", event));
      };
    },
    setContext: function (context) {
      if (!isPlainObject(context)) throw new TypeError("[autopilot] setContext(context) needs an object");
      return quiet(call("setContext", context));
    },
    updateContext: function (partial) {
      if (!isPlainObject(partial)) throw new TypeError("[autopilot] updateContext(partial) needs an object");
      return quiet(call("updateContext", partial));
    },
    /** Seed 000: {name, description, parameters, handler, sensitive}; the handler may be async. */
    registerFunction: function (def) {
      if (!isPlainObject(def) || typeof def.name !== "string" || typeof def.handler !== "function") {
        throw new TypeError("[autopilot] registerFunction({name, handler, ...}) needs a name and a handler function");
      }
      jsFunctions[def.name] = def.handler;
      return call("registerFunction", {
        name: def.name, description: def.description || "", parameters: def.parameters || null, sensitive: !!def.sensitive,
      });
    },
    unregisterFunction: function (name) {
      return call("unregisterFunction", name).then(function (existed) {
        delete jsFunctions[name];
        return existed;
      });
    },
    /** Seed 002: a page handler for a declared tool or action; returns a function that removes it. */
    registerTool: function (name, handler) {
      if (typeof name !== "string" || typeof handler !== "function") throw new TypeError("[autopilot] registerTool(name, handler) needs a name and a function");
      jsTools[name] = handler;
      quiet(call("registerTool", name));
      return function remove() {
        if (jsTools[name] !== handler) return;
        delete jsTools[name];
        if (!destroyRequested) quiet(call("removeTool", name));
      };
    },
    /** "New chat": resolves to true when the fresh conversation is joined. */
    newConversation: function () {
      if (!pyApi && phase === "waiting") startBoot(false);
      return call("newConversation");
    },
    /** Remove the toggle, the bar, every listener and proxy; disconnect. Later calls are refused. */
    destroy: function () {
      if (destroyRequested) return Promise.resolve(false);
      if (!pyApi && phase !== "booting") { finishDestroy(); return Promise.resolve(true); }
      var p = call("destroy");
      destroyRequested = true; // queued calls made before this one still apply first
      return p.then(function () { finishDestroy(); return true; }, function (e) { finishDestroy(); throw e; });
    },
  };
  window.Autopilot = api;

  // ---- boot policy (D1) -------------------------------------------------------------------------
  function onIntent() {
    button.removeEventListener("pointerenter", onIntent);
    button.removeEventListener("focus", onIntent);
    startBoot(false);
  }
  if (detectPyScript()) {
    // PyScript starts the interpreter; the widget boots in its onReady hook.
  } else if (config.boot === "eager" || wantOpen) {
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
})();

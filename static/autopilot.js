/* autopilot-widget loader: the whole install is one classic <script> tag.
 *
 * It paints the toggle at once (plain JS, its own shadow root), boots Pyodide from its own folder on the
 * chosen policy (data-boot: idle | ready | eager | intent), installs the bundle, runs the page's Python and hands
 * over to Python, which then owns the bar. Until then it owns the pre-boot state and its errors: the page
 * never pays for Python before the policy says so, and a failed start says why, with Retry.
 * On a PyScript page it boots no interpreter of its own: it hooks PyScript's (one Pyodide per page).
 * window.Autopilot is the JS API (docs/embedding.md); calls made before Python is ready are queued. Page code
 * that may run before this tag (or with defer/async) uses the queue: (window.Autopilot ||= []).push(fn).
 */
(() => {
  "use strict";
  // document.currentScript is only set while this script runs synchronously: read everything now.
  const script = document.currentScript;
  if (!script) { console.error("[autopilot] loader must be a classic <script src> tag"); return; }
  if (window.Autopilot && window.Autopilot.__loader) {
    console.warn("[autopilot] loader included twice; the second copy is ignored");
    return;
  }
  // Functions queued by page code that ran before this tag: (window.Autopilot ||= []).push(fn).
  const earlyQueue = Array.isArray(window.Autopilot) ? window.Autopilot.slice() : [];
  if (window.Autopilot !== undefined && !Array.isArray(window.Autopilot)) {
    console.warn("[autopilot] window.Autopilot was already set by the page (not a queue array); it is replaced");
  }
  const BUILD_ID = "__BUILD_ID__";
  // Filled in by build.py: which stdlib zips to fetch, the lock file's info (no lock file fetch), a snapshot.
  const BOOT_FILES = /*__BOOT_FILES__*/null || {};
  const t0 = performance.now();
  performance.mark("autopilot:loader");
  const scriptUrl = new URL(script.src, document.baseURI);
  const root = new URL(BUILD_ID + "/", scriptUrl).href;
  const ds = script.dataset;
  let preset = window.AutopilotConfig;

  // ---- configuration: data-* attributes win over window.AutopilotConfig ---------------------------
  const warn = (text) => console.warn("[autopilot] " + text);
  const attrName = (key) => "data-" + key.replace(/[A-Z]/g, (c) => "-" + c.toLowerCase());
  const isPlainObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
  // The relay the loader came from: .../widget/autopilot.js -> ... (keeps a path prefix the relay is mounted under).
  const defaultRelay = () => {
    const m = scriptUrl.pathname.match(/^(.*)\/widget\/autopilot\.js$/);
    return scriptUrl.origin + (m ? m[1] : "");
  };
  const OPTIONS = {
    relay: { type: "url" },
    app: { type: "string" },
    conversationUrl: { type: "url" },
    boot: { type: "enum", values: ["idle", "ready", "eager", "intent"], def: "idle" },
    open: { type: "boolean", def: false },
    position: { type: "enum", values: ["bottom-right", "bottom-left"], def: "bottom-right" },
    theme: { type: "enum", values: ["auto", "light", "dark"], def: "auto" },
    title: { type: "string" },
    labels: { type: "object" },
    python: { type: "list", def: [] },
    tools: { type: "object" },
    webmcp: { type: "boolean", def: false }, // publish the page's functions to in-browser agents (WebMCP)
    prewarm: { type: "prewarm" }, // true | false | a mode name (bench/peer.py); unset: once per tab, with hand-over
    snapshotCache: { type: "boolean", def: true }, // later views restore the worker's stored snapshot (see below)
    onReady: { type: "function" }, // AutopilotConfig only: called with window.Autopilot once Python runs it
    onError: { type: "function" }, // AutopilotConfig only: called with an Error when a start fails
  };

  // One option's value from an attribute (a string) or AutopilotConfig (any type); undefined when malformed.
  function parseOption(key, spec, raw, where) {
    const bad = (why) => {
      warn("option " + where + " " + why + (spec.def !== undefined ? "; using " + JSON.stringify(spec.def) : "; ignored"));
      return undefined;
    };
    const fromAttr = typeof raw === "string" && where.startsWith("data-");
    switch (spec.type) {
      case "string":
        if (typeof raw !== "string" || !raw.trim()) return bad("must be a non-empty string");
        return raw.trim();
      case "url":
        if (typeof raw !== "string" || !raw.trim()) return bad("must be a URL");
        try {
          const u = new URL(raw.trim(), document.baseURI);
          if (u.protocol !== "https:" && u.protocol !== "http:") return bad("must be an http(s) URL, got " + JSON.stringify(raw));
          return u.href.replace(/\/+$/, "");
        } catch (e) { return bad("is not a valid URL: " + JSON.stringify(raw)); }
      case "enum":
        if (!spec.values.includes(raw)) return bad("must be one of " + spec.values.join(", ") + ", got " + JSON.stringify(raw));
        return raw;
      case "boolean":
        if (raw === true || raw === false) return raw;
        if (raw === "" || raw === "true") return true; // <script data-open> counts as true
        if (raw === "false") return false;
        return bad("must be true or false, got " + JSON.stringify(raw));
      case "list":
        if (Array.isArray(raw)) {
          if (raw.every((s) => typeof s === "string")) return raw.map((s) => s.trim()).filter(Boolean);
          return bad("must be a list of URLs (strings)");
        }
        if (typeof raw === "string") {
          if (/^\s*\[/.test(raw)) { try { return parseOption(key, spec, JSON.parse(raw), where); } catch (e) { return bad("is not valid JSON: " + e.message); } }
          return raw.split(",").map((s) => s.trim()).filter(Boolean);
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
      case "function":
        if (fromAttr) return bad("can only be set in window.AutopilotConfig (a function)");
        if (typeof raw !== "function") return bad("must be a function");
        return raw;
    }
    return undefined;
  }

  // config crosses into Python as JSON; the callbacks stay here.
  const config = { root, buildId: BUILD_ID };
  const callbacks = { onReady: null, onError: null };
  if (preset !== undefined && preset !== null && !isPlainObject(preset)) {
    warn("window.AutopilotConfig must be an object; ignored");
    preset = null;
  }
  preset = preset || {};
  const has = (obj, k) => Object.prototype.hasOwnProperty.call(obj, k);
  Object.keys(ds).forEach((k) => {
    if (!has(OPTIONS, k)) warn("unknown option " + attrName(k) + " is ignored (options: " + Object.keys(OPTIONS).filter((o) => OPTIONS[o].type !== "function").map(attrName).join(", ") + ")");
  });
  Object.keys(preset).forEach((k) => {
    if (!has(OPTIONS, k)) warn("unknown option window.AutopilotConfig." + k + " is ignored (options: " + Object.keys(OPTIONS).join(", ") + ")");
  });
  Object.keys(OPTIONS).forEach((k) => {
    const spec = OPTIONS[k];
    let value;
    if (ds[k] !== undefined && (ds[k] !== "" || spec.type === "boolean")) value = parseOption(k, spec, ds[k], attrName(k) + "=" + JSON.stringify(ds[k]));
    else if (preset[k] !== undefined && preset[k] !== null) value = parseOption(k, spec, preset[k], "window.AutopilotConfig." + k);
    if (spec.type === "function") callbacks[k] = value || null;
    else config[k] = value !== undefined ? value : (spec.def !== undefined ? spec.def : null);
  });
  if (!config.relay) config.relay = defaultRelay();
  if (!config.conversationUrl && !config.app) {
    warn("no data-app or data-conversation-url: using app \"demo\"");
    config.app = "demo";
  }

  // ---- labels: the loader's strings, from the same table as the bar's (widget/ui/labels.py) ------------
  // Filled in by build.py from the Python side (widget/loader_data.py): these labels, the toggle's CSS and the
  // client event names exist once, in Python.
  const SHARED = /*__LOADER_DATA__*/null;
  const LABELS = { ...SHARED.labels };
  if (config.labels) {
    Object.keys(config.labels).forEach((k) => {
      if (typeof config.labels[k] === "string") { if (k in LABELS) LABELS[k] = config.labels[k]; }
      else { warn("label " + JSON.stringify(k) + " must be a string; ignored"); delete config.labels[k]; }
    });
  }
  const title = config.title || LABELS.title;
  const L = (key, vars = {}) => String(LABELS[key] || key).replace(/\{(\w+)\}/g,
    (m, name) => (name === "title" ? title : (name in vars ? String(vars[name]) : m)));

  // ---- the toggle, painted before anything else -----------------------------------------------
  const host = document.createElement("div");
  host.id = "autopilot-toggle-host";
  host.setAttribute("data-autopilot", "toggle");
  host.setAttribute("data-position", config.position);
  if (config.theme !== "auto") host.setAttribute("data-theme", config.theme);
  const shadow = host.attachShadow({ mode: "open" });
  const css = SHARED.toggleCss;
  // A constructable stylesheet: a strict CSP (no 'unsafe-inline' in style-src) blocks <style> elements, not these.
  try {
    const sheet = new CSSStyleSheet();
    sheet.replaceSync(css);
    shadow.adoptedStyleSheets = [sheet];
  } catch (e) {
    const style = document.createElement("style");
    style.textContent = css;
    shadow.appendChild(style);
  }
  const button = document.createElement("button");
  button.className = "toggle";
  button.type = "button";
  button.setAttribute("part", "toggle");
  button.setAttribute("aria-label", L("open"));
  button.setAttribute("aria-expanded", "false");
  button.innerHTML = '<svg part="toggle-icon" viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" aria-hidden="true"><path d="M21 15a2 2 0 0 1-2 2H7l-4 4V5a2 2 0 0 1 2-2h14a2 2 0 0 1 2 2z"/></svg>';
  const status = document.createElement("div");
  status.className = "status";
  status.setAttribute("part", "status");
  status.setAttribute("role", "status");
  status.setAttribute("aria-live", "polite");
  status.hidden = true;
  shadow.appendChild(button);
  shadow.appendChild(status);

  // ---- pre-boot state ---------------------------------------------------------------------------
  let phase = "waiting"; // waiting | booting | ready | failed | destroyed
  let mode = "pyodide"; // pyodide (our own boot) | pyscript (PyScript's interpreter)
  // The bar's open state survives a navigation within the site, per tab (the bar writes it).
  const OPEN_KEY = "autopilot:open:" + config.app;
  let wantOpen = config.open || (() => { try { return sessionStorage.getItem(OPEN_KEY) === "1"; } catch (e) { return false; } })();
  // Later page views of a site: once the widget started in this tab (a per-tab, per-app marker; a new tab or a
  // new browser session counts as a first view), the default boot waits for the reader's intent instead of
  // starting Python on idle: a reader who never touches the widget costs the host page next to nothing. A turn
  // or a function call still running when the reader navigated (the busy marker) starts it at once.
  const STARTED_KEY = "autopilot:started:" + config.app;
  const BUSY_KEY = "autopilot:busy:" + config.app;
  function tabFlag(key, value) { // read (value undefined), set (true) or clear (false) a per-tab marker
    try {
      if (value === undefined) return sessionStorage.getItem(key) === "1";
      if (value) sessionStorage.setItem(key, "1"); else sessionStorage.removeItem(key);
    } catch (e) { /* storage blocked: every view is a first view */ }
    return false;
  }
  // Autopilot.ready: settles once per start. A failed start rejects it (it stays rejected); a Retry starts
  // again with a new promise, which resolves (or rejects) like the first.
  let readyResolve, readyReject;
  let ready;
  let api = null; // window.Autopilot, defined below
  const newReady = () => {
    ready = new Promise((res, rej) => { readyResolve = res; readyReject = rej; });
    ready.catch(() => {});
    if (api) api.ready = ready;
  };
  newReady();

  function mountToggle() {
    if (phase === "destroyed") return;
    (document.body || document.documentElement).appendChild(host);
    performance.mark("autopilot:toggle");
  }
  if (document.body) mountToggle();
  else document.addEventListener("DOMContentLoaded", mountToggle, { once: true });

  let retryAction = null; // what the card's Retry button does for the current failure
  function showStatus(text, retry) {
    status.textContent = "";
    const p = document.createElement("div");
    p.textContent = text;
    status.appendChild(p);
    if (retry) {
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = L("retry");
      b.addEventListener("click", () => retry());
      status.appendChild(b);
    }
    status.hidden = false;
  }
  function hideStatus() { status.hidden = true; status.textContent = ""; }

  let cspError = null; // set when the page's CSP blocks WebAssembly: no boot can work, no Retry
  function onToggleClick() {
    if (phase === "ready") return; // Python owns the toggle from now on
    wantOpen = true;
    if (cspError) { fail("csp", cspError); return; }
    button.setAttribute("aria-busy", "true");
    if (phase === "failed" && retryAction) { retryAction(); return; }
    if (phase !== "failed") showStatus(L("starting"));
    if (mode === "pyodide") startBoot(false);
    else if (pyscriptProbe && document.readyState === "complete") pyscriptProbe();
  }
  button.addEventListener("click", onToggleClick);
  // The bar's shortcut, before Python owns it: the same as a click on the toggle.
  function onShortcut(event) {
    if (event.altKey && event.shiftKey && !event.ctrlKey && !event.metaKey && event.code === "KeyA") {
      event.preventDefault();
      onToggleClick();
    }
  }
  document.addEventListener("keydown", onShortcut);

  // A start failed because a file from the relay could not be fetched or imported (no CORS, relay down):
  // the browser's error says nothing useful ("Failed to fetch dynamically imported module"). Ask the relay what
  // the matter is, cheaply: its origin check for the app (readable by any page, where the relay has one), else
  // a CORS HEAD of its manifest and, when that fails, an opaque no-cors one, which succeeds when the relay
  // answers but does not allow this page's origin.
  // (Chromium, Firefox and WebKit word it differently; each is tested.)
  const NETWORK_ERROR = /Failed to fetch|dynamically imported module|NetworkError|Load failed|Importing a module script failed|error loading|Cross-Origin Resource Sharing|access control/i;
  async function diagnose(err) {
    const msg = (err && err.message) ? err.message : String(err);
    if (!NETWORK_ERROR.test(msg)) return null;
    const vars = { origin: location.origin, app: config.app || "(from " + config.conversationUrl + ")", relay: config.relay };
    const refused = () => {
      let text = L("origin_refused", vars);
      // The usual trap: localhost, 127.0.0.1 and [::1] are three different origins.
      if (/^(localhost|127\.0\.0\.1|\[::1\])$/.test(location.hostname)) text += " (localhost, 127.0.0.1 and [::1] are different origins.)";
      return text;
    };
    if (config.app) {
      try {
        const r = await fetch(config.relay + "/api/apps/" + encodeURIComponent(config.app) + "/origin", { cache: "no-store" });
        if (r.ok) return null; // this origin may use the app: something else went wrong
        if (r.status === 403) return refused();
        const body = await r.json().catch(() => null);
        const why = body && body.error && body.error.message;
        if (why) return L("boot_failed", { stage: L("stage_python"), message: why });
      } catch (e) { /* a relay without the check, or none at all: ask its files */ }
    }
    const probe = new URL("manifest.json", scriptUrl).href;
    try {
      await fetch(probe, { method: "HEAD", cache: "no-store" });
      return null; // the relay answers this origin: something else went wrong
    } catch (e) { /* refused or down: which one? */ }
    try {
      await fetch(probe, { method: "HEAD", mode: "no-cors", cache: "no-store" });
    } catch (e) {
      return L("relay_unreachable", { ...vars, message: msg });
    }
    return refused();
  }

  function fail(stage, err, retry) {
    phase = "failed";
    button.removeAttribute("aria-busy");
    const msg = (err && err.message) ? err.message : String(err);
    const csp = stage === "csp" || (/WebAssembly|wasm/i.test(msg) && /Content Security Policy|CSP|unsafe-eval/i.test(msg));
    retryAction = csp ? null : (retry || (() => startBoot(true)));
    const rejectReady = readyReject; // this start's promise (a Retry may make a new one meanwhile)
    const report = (text) => {
      console.error("[autopilot] " + text, err);
      if (phase === "failed") showStatus(text, retryAction);
      const error = new Error(text);
      rejectReady(error);
      window.dispatchEvent(new CustomEvent("autopilot:error", { detail: { message: text } }));
      if (callbacks.onError) {
        try { callbacks.onError(error); } catch (e) { console.error("[autopilot] AutopilotConfig.onError threw", e); }
      }
      if (destroyRequested) finishDestroy();
    };
    if (csp) { report(L("csp_wasm")); return; }
    if (err && err.diagnosed) { report(err.diagnosed); return; }
    const plain = L("boot_failed", { stage: L(stage), message: msg });
    diagnose(err).then((text) => report(text || plain), () => report(plain));
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

  async function fetchOk(url, what) {
    const r = await fetch(url);
    if (!r.ok) throw new Error(what + " returned HTTP " + r.status + " (" + url + ")");
    return r;
  }
  const fetchBytes = async (url, what) => (await fetchOk(url, what)).arrayBuffer();
  const fetchText = async (url, what) => {
    const r = await fetchOk(url, what);
    return [await r.text(), r.url];
  };

  // Let the page run its own tasks before going on: what follows runs in a task of its own.
  const yieldToPage = () => new Promise((resolve) => {
    if (globalThis.scheduler && typeof scheduler.yield === "function") { scheduler.yield().then(resolve); return; }
    const ch = new MessageChannel(); // unlike setTimeout, not clamped to 4 ms when repeated
    ch.port1.onmessage = () => resolve();
    ch.port2.postMessage(null);
  });

  // The body of a response (or a promise of one) that is answered otherwise: not read any further.
  const dropBody = (source) => {
    Promise.resolve(source).then((r) => { if (r && r.body) r.body.cancel(); }).catch(() => {});
  };

  // ---- the stored snapshot: later page views restore the worker's started Python ------------------------
  // A tab's first start hands the page a memory snapshot of the worker's Python (see prewarm). The worker also
  // keeps a copy in this origin's Cache Storage, one entry per relay root, tagged with the build it belongs to and
  // the layout of its body (FORMAT: the snapshot without its all-zero pages, uncompressed); a later view that
  // would start Python on the page (no worker, no snapshot of the build's own) restores it instead: a shorter
  // main-thread task than Python's start. What is stored is Python's heap right after importing the widget,
  // before any page code, configuration or conversation (docs/security.md). Anything wrong (no Cache Storage,
  // storage blocked or full, a missing, stale, other-format or corrupt entry, a restore that throws) means
  // today's start, and a bad entry is removed. Beside it, Pyodide's wasm decompressed (WASM_KEY), which such a
  // later view instantiates instead of decoding the HTTP cache's brotli copy again.
  const snapshotCache = (() => {
    const NAME = "autopilot-snapshot";
    const KEY = new URL("snapshot", new URL("./", scriptUrl)).href; // per relay root, whatever the build
    const WASM_KEY = new URL("snapshot-wasm", new URL("./", scriptUrl)).href; // Pyodide's wasm, decompressed
    const BUILD = "x-autopilot-build", BYTES = "x-autopilot-bytes", PAGES = "x-autopilot-pages";
    // The body's layout, named in its own header: the build id does not cover this loader, so an entry written
    // in another layout (an older gzip entry has no such header) is dropped like another build's. The body is the
    // kept pages of PAGE bytes (the snapshot's last page may be short) in order; PAGES lists them as ascending
    // runs of page indexes ("0-3,7,9-480"); BYTES is the snapshot's full length. Most of a started heap's pages
    // are zeros: reading the rest back is a copy, where a compressed copy had to be inflated on this thread.
    const FORMAT_HEADER = "x-autopilot-format", PAGE = 65536, FORMAT = "zero-pages-elided-65536";
    let cleared = false;
    const released = new WeakSet(); // workers told to store (and to stop) already
    const mark = (name, detail) => { try { performance.mark(name, { detail }); } catch (e) { /* no detail support */ } };
    function forget(why) {
      if (why) { mark("autopilot:snapshot-cache-dropped", { reason: why }); console.debug("[autopilot] stored snapshot dropped: " + why); }
      try { // (caches.open would make the cache where there is none)
        caches.has(NAME).then((there) => there && caches.open(NAME).then((c) => Promise.all([c.delete(KEY), c.delete(WASM_KEY)])))
          .catch(() => {});
      } catch (e) { /* blocked */ }
    }
    // The page list, checked against the full length: the byte ranges of the kept runs ([[start, end], ...]) and
    // the body's length they make.
    function keptRuns(list, size) {
      if (!(Number.isSafeInteger(size) && size > 0)) throw new Error("no stored length");
      const pages = Math.ceil(size / PAGE);
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
    // The snapshot again, as the body streams in: zeros of the full length, each chunk copied to its kept pages'
    // place (no second copy of the body).
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
    // Why a stored entry cannot be restored by this loader (null: it can): another build's, or another layout's.
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
    return {
      // What the worker needs to store its snapshot (null: store nothing).
      target: () => (enabled() ? {
        cache: NAME, key: KEY, build: BUILD_ID, buildHeader: BUILD, bytesHeader: BYTES,
        format: FORMAT, formatHeader: FORMAT_HEADER, pagesHeader: PAGES, pageSize: PAGE,
        wasmKey: WASM_KEY,
      } : null),
      // Let the worker store its copy: at once while the page is not starting Python, else once it has joined (or
      // a while after, when it does not), so that storing does not compete with the page's own start; stop it
      // once stored (or given up), within a bound. A worker that stores nothing is stopped at once.
      release(worker, target) {
        if (released.has(worker)) return;
        released.add(worker);
        if (!target) { worker.terminate(); return; }
        let end = null, observer = null;
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
        if (phase !== "booting") { go(); return; }
        const later = setTimeout(go, 10000);
        try {
          observer = new PerformanceObserver((list) => {
            if (list.getEntriesByName("autopilot:joined").length) { clearTimeout(later); go(); }
          });
          observer.observe({ type: "mark" });
        } catch (e) { /* no observer: the timer */ }
      },
      // Whether this build's snapshot is stored, from its headers only (no body read): false where there is no
      // storage, or the entry is another build's or format's (left for read() to drop).
      async peek() {
        if (!enabled()) return false;
        try {
          const response = await caches.match(KEY, { cacheName: NAME });
          return !!response && !staleness(response);
        } catch (e) { return false; }
      },
      // Whether this build's snapshot is stored (null: not, or no storage): {bytes, wasm}, promises of it rebuilt
      // and of the stored wasm's Response (null: none of this build).
      // Known as soon as the entry is found, so that Python's files are fetched and its module loaded while the
      // bytes are read (loadPyodide awaits them only before instantiating).
      async read() {
        if (!enabled()) return null;
        const t = performance.now();
        let response;
        try {
          response = await caches.match(KEY, { cacheName: NAME });
        } catch (e) { return null; } // storage blocked: nothing stored either
        if (!response) return null;
        const stale = staleness(response);
        if (stale) { forget(stale); return null; }
        const bytes = (async () => {
          try {
            const size = Number(response.headers.get(BYTES));
            const { runs, length } = keptRuns(response.headers.get(PAGES), size);
            const found = performance.now() - t;
            const out = await rebuild(response.body, runs, length, size);
            mark("autopilot:snapshot-cache", { ms: performance.now() - t, found, stored: length, bytes: size });
            return out;
          } catch (e) {
            forget("unreadable (" + e.message + ")");
            throw Object.assign(new Error("stored snapshot unreadable"), { unreadable: true });
          }
        })();
        bytes.catch(() => {});
        // Pyodide's wasm, stored decompressed beside it (null: not there, or another build's).
        const wasm = caches.match(WASM_KEY, { cacheName: NAME })
          .then((r) => (r && r.headers.get(BUILD) === BUILD_ID ? r : null), () => null);
        return { bytes, wasm };
      },
      // Pyodide's instantiateStreaming answered with the stored wasm (a Response); when that fails, the entry goes
      // and Pyodide's own response (the HTTP cache's) is used instead.
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
      // loadPyodide restoring the stored snapshot (`late`, see lateSnapshot); when that throws, the entry goes and
      // Python starts as usual (`options`). Resolves with [pyodide, whether it restored].
      async restore(pyodideMod, options, late) {
        try {
          return [await pyodideMod.loadPyodide(late), true];
        } catch (e) {
          if (!e || !e.unreadable) forget("restore failed (" + (e && e.message ? e.message : e) + ")");
          return [await pyodideMod.loadPyodide(options), false];
        }
      },
    };
  })();

  // Page Python blocks may follow the loader's tag: collect them once the document is parsed.
  async function pagePython() {
    if (document.readyState === "loading") {
      await new Promise((resolve) => document.addEventListener("DOMContentLoaded", resolve, { once: true }));
    }
    const nodes = document.querySelectorAll('script[type="autopilot-python"], script[type="text/autopilot-python"]');
    const blocks = Array.from(nodes, (n, i) => (n.src ? fetchText(n.src, "page Python") : Promise.resolve([n.textContent, "<page script " + (i + 1) + ">"])));
    config.python.forEach((f) => blocks.push(fetchText(new URL(f, document.baseURI).href, "page Python file")));
    return Promise.all(blocks);
  }

  // Pre-warm (a tab's first start): static/prewarm-worker.js starts the same Pyodide off the main thread and, by
  // default, hands the page its started Python (a memory snapshot) and its compiled module, so the page restores
  // instead of compiling and starting Python itself. Compiled code is reused within the renderer process only
  // (measured: a new tab or a restarted browser compiled again on the main thread), so the worker runs on a tab's
  // first start (no started marker yet), not once per build.
  function wasWarmed() {
    return tabFlag(STARTED_KEY);
  }
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
    let url = null, worker = null;
    try {
      url = URL.createObjectURL(new Blob([src], { type: "text/javascript" }));
      worker = new Worker(url, { type: "module" });
    } catch (e) { // a CSP without blob: workers, for instance: boot without it
      if (url) URL.revokeObjectURL(url);
      return null;
    }
    let snapshot = null, module = null, ok = false, settled = false, finish = null;
    const done = new Promise((resolve) => {
      finish = (ev) => {
        if (settled) return; // (the time-out, after an answer)
        settled = true;
        URL.revokeObjectURL(url);
        ok = !!(ev && ev.data && !ev.data.failed);
        if (ev && ev.data && ev.data.steps) {
          // The worker's steps as marks on this page's timeline (benches read them).
          Object.entries(ev.data.steps).forEach(([name, at]) => {
            try { performance.mark("autopilot:worker-" + name, { startTime: at - performance.timeOrigin }); } catch (e) { /* an old browser */ }
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

  // ---- preparing a start ------------------------------------------------------------------------
  // Everything a start needs but the start itself: the files fetched and, with the hand-over, the pre-warm
  // worker's Python started and snapshotted off the main thread. A first page view with the default boot
  // prepares on idle and starts on the reader's intent (or the page's call), so a reader who never touches the
  // widget costs the host page no Python on its main thread, and one who does pays only the restore.
  let prepared = null;
  function prewarmMode() { // the worker's part in this tab's next start: "handoff", "compile" or null (none)
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
  function prepare() {
    if (prepared) return prepared;
    const handled = (p) => { p.catch(() => {}); return p; }; // awaited by the start, if one comes
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
        tabFlag(STARTED_KEY, true);
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

  // loadPyodide's options for a restore. Pyodide awaits the snapshot before it even instantiates its module and
  // then copies it into memory and sets Python up in one task; instead it gets an empty placeholder, and its one
  // seam for the rest, the module factory, is wrapped: the module is instantiated and linked and its runtime
  // started (Emscripten's part, ~10 small tasks) while the bytes are still on their way (a later view's stored
  // snapshot being read), then the bytes are copied into memory in a task of their own (the memory grown to
  // their size first where needed), and Pyodide's restore is answered with what that copy read, so that Python's
  // set-up is a task of its own too. Bytes that cannot be read reject as their promise does.
  function lateSnapshot(options, bytesP) {
    let bytes = bytesP;
    const late = { ...options, _loadSnapshot: Promise.resolve(new Uint8Array(0)) };
    late.createPyodideModule = async (settings) => {
      delete settings.INITIAL_MEMORY; // the placeholder's size (this Pyodide's wasm sets its own memory anyway)
      const factory = (await import(options.indexURL + "pyodide.asm.mjs")).default;
      const Module = await factory(settings);
      performance.mark("autopilot:runtime");
      const snapshot = await bytes;
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

  let booting = null;
  function startBoot(isRetry) {
    if (mode !== "pyodide" || phase === "destroyed") return booting;
    if (booting && !isRetry) return booting;
    if (phase === "booting" || phase === "ready") return booting;
    // A PyScript page found late (idle and intent boots run after the whole page was parsed): share its interpreter.
    if (detectPyScript()) return booting;
    cspError = wasmBlocked();
    if (cspError) { fail("csp", cspError); return null; }
    if (phase === "failed") newReady(); // a Retry: a new start, a new promise
    phase = "booting";
    performance.mark("autopilot:boot");
    if (wantOpen) showStatus(L("starting"));
    let stage = "stage_python";
    // What was prepared is used once: a Retry prepares (fetches) again.
    const prep = prepare();
    const { options, snapshotUrl, bundleP, bridgeP, sanitizeP, cssP, pageP, pyodideModP } = prep;
    let warm = prep.warm;
    prepared = null;
    connectEarly(bridgeP);
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
        const compiled = handedOver && warm.takeModule();
        const realStreaming = WebAssembly.instantiateStreaming;
        const answer = compiled
          ? (source, imports) => {
            dropBody(source);
            return WebAssembly.instantiate(compiled, imports).then((instance) => ({ instance, module: compiled }));
          }
          : storedWasm && ((source, imports) => snapshotCache.instantiateStored(realStreaming, storedWasm, source, imports));
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
        const urls = {};
        if (BOOT_FILES.lazy) {
          // Parts of the Python library loaded on first use (see _autopilot_stdlib in build.py).
          Object.keys(BOOT_FILES.lazy).forEach((g) => { urls[g] = root + BOOT_FILES.lazy[g]; });
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
          const needed = neededPy.toJs();
          neededPy.destroy();
          const bufs = await Promise.all(needed.map((g) => fetchBytes(urls[g], "stdlib")));
          needed.forEach((g, i) => lazy.mount(new Uint8Array(bufs[i]), g));
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
    booting.catch(() => {});
    return booting;
  }

  // While Python starts, read the conversation (create it on a first visit) and open the socket from here, with
  // the same requests Python's client makes: its connect then finds both done (bridge.mjs: prefetch,
  // preconnect) instead of waiting for them after Python, the bar and page Python. Each step mirrors
  // widget/client_connection.py exactly (URL, body, the stored conversation's key); where anything differs or
  // fails, Python simply makes its own requests.
  async function connectEarly(bridgeP) {
    try {
      const bridge = await bridgeP;
      const key = "autopilot:conversation:" + config.app;
      let url = config.conversationUrl || null;
      if (!url && config.app) {
        try { url = localStorage.getItem(key); } catch (e) { /* storage blocked: Python creates it the same way */ }
      }
      if (!url) {
        if (!config.app || !config.relay) return;
        const create = config.relay.replace(/\/+$/, "") + "/api/apps/" + config.app + "/conversations";
        const [status, text] = await bridge.prefetch("POST", create, "{}");
        const made = status === 201 ? JSON.parse(text) : null;
        if (!made || typeof made.url !== "string") return;
        url = made.url;
        try { localStorage.setItem(key, url); } catch (e) { /* Python's POST gets the same answer */ }
      }
      const [status, text] = await bridge.prefetch("GET", url, null);
      const info = status === 200 ? JSON.parse(text) : null;
      if (!info || typeof info.relay_url !== "string") return;
      bridge.preconnect(info.relay_url, info.relay_path || "/socket.io");
    } catch (e) { /* Python connects as usual */ }
  }

  // Python takes over: the client, the bar (on the loader's toggle), page Python, then connecting.
  async function handOver(pyodide, page, cssP, connectAfter) {
    const loader = {
      toggleHost: host,
      toggleButton: button,
      statusEl: status,
      wantOpen: () => wantOpen,
      openKey: OPEN_KEY,
      skinCss: () => cssP,
      handover: () => {
        phase = "ready";
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
    api.pyodide = pyodide;
    api.handle = handle;
    pyApi = handle.api;
    flushQueue();
    tabFlag(STARTED_KEY, true);
    // A turn or call in progress when the reader navigates: the next page view starts at once to show it.
    let turnOpen = false; // a turn started (or a call or question came) in this view and has not finished
    ["completion.started", "functionCall", "askUserRequired"].forEach((e) => api.on(e, () => {
      turnOpen = true;
      tabFlag(BUSY_KEY, true);
    }));
    api.on("completion.finished", () => { turnOpen = false; tabFlag(BUSY_KEY, false); });
    // A turn that ended on the relay while no page of this tab was there (the reader left mid-turn) never clears
    // the marker above: once joined, a conversation the relay reports idle (or failed: nothing runs, nothing
    // waits for a call or an answer) clears it, unless this view saw a turn begin since.
    api.on("ready", (p) => {
      const status = p && p.conversation && p.conversation.status;
      if (!turnOpen && (status === "idle" || status === "failed")) tabFlag(BUSY_KEY, false);
    });
    readyResolve(api);
    window.dispatchEvent(new CustomEvent("autopilot:ready", { detail: api }));
    if (callbacks.onReady) {
      try { callbacks.onReady(api); } catch (e) { console.error("[autopilot] AutopilotConfig.onReady threw", e); }
    }
  }

  // ---- PyScript pages: one interpreter, PyScript's ------------------------------------------------
  // PyScript (@pyscript/core) keeps its exports on globalThis under this symbol (its "sticky module"), whichever
  // copy of it the page loaded. Its hooks.main.onReady callbacks run, awaited, before each main-thread
  // <script type="py">. MicroPython blocks (type="mpy") and worker blocks (worker attribute) run in
  // interpreters the widget cannot use: they are reported, and never waited for.
  const PYSCRIPT = Symbol.for("@pyscript/core");
  const MAIN_PY = 'script[type="py"]:not([worker]), py-script:not([worker])';
  let unsupportedReported = false;
  function reportUnsupported() {
    if (unsupportedReported) return;
    const mpy = document.querySelector('script[type="mpy"], mpy-script, mpy-config');
    const worker = document.querySelector('script[type="py"][worker], py-script[worker]');
    if (!mpy && !worker) return;
    unsupportedReported = true;
    if (mpy) {
      warn('MicroPython blocks (<script type="mpy">) are not supported: they run in MicroPython, which cannot import ' +
        "widget; the widget runs in Pyodide (<script type=\"py\"> blocks) and does not wait for them.");
    }
    if (worker) {
      warn('PyScript worker blocks (<script type="py" worker>) are not supported: the widget runs on the main thread, ' +
        "so get_client() is not available in a worker; register page functions from a main-thread <script type=\"py\"> block.");
    }
  }
  // PyScript is on the page (or on its way) with main-thread Pyodide blocks the widget can share.
  function pyscriptOnPage() {
    // Still parsing with PyScript's tag seen: its blocks may follow; DOMContentLoaded checks them (see below).
    if (document.readyState === "loading" && document.querySelector('script[type="module"][src*="pyscript"]')) return true;
    return !!document.querySelector(MAIN_PY);
  }
  function detectPyScript() {
    if (mode === "pyscript") return true;
    reportUnsupported();
    if (!pyscriptOnPage()) return false;
    mode = "pyscript";
    // Once parsed: a page whose PyScript blocks are all MicroPython or workers has no interpreter to share,
    // so the widget boots its own Pyodide on the usual policy.
    const parsed = () => {
      reportUnsupported();
      if (document.querySelector(MAIN_PY)) return true;
      mode = "pyodide";
      applyBootPolicy();
      return false;
    };
    if (document.readyState !== "loading" && !parsed()) return false;
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", parsed, { once: true });
    const tag = document.querySelector('script[type="module"][src*="pyscript"]');
    if (tag || globalThis[PYSCRIPT]) {
      // The page loads PyScript itself: its exports exist once its module ran (before its first progress event).
      const check = () => {
        if (globalThis[PYSCRIPT] && mode === "pyscript") { window.removeEventListener("py:progress", check); hookPyScript(globalThis[PYSCRIPT]); }
      };
      window.addEventListener("py:progress", check);
      document.addEventListener("DOMContentLoaded", check, { once: true });
      check();
    } else {
      // <script type="py"> blocks but no PyScript: load the copy we ship, offline (our interpreter and bundle),
      // unless the page brings its own config.
      if (!document.querySelector('py-config, script[type="py"][config], py-script[config]')) {
        const cfg = document.createElement("py-config");
        cfg.setAttribute("type", "json");
        cfg.hidden = true;
        cfg.textContent = JSON.stringify(pyscriptConfig());
        (document.head || document.documentElement).appendChild(cfg);
      }
      retryPyScript(root + "pyscript/core.js");
    }
    // PyScript or its interpreter could not be fetched from the relay (no CORS for this origin, the relay down):
    // PyScript's module never runs, or never calls our hook. When the reader wants the bar and the page has
    // loaded without the widget started, ask the relay: when it refuses this page or does not answer, say so
    // instead of "Starting…" forever.
    pyscriptProbe = async () => {
      if (mode !== "pyscript" || pyscriptBoot || phase === "failed" || phase === "destroyed") return;
      // PyScript came from the relay (the page's tag or our copy) and runs: the relay serves this page.
      if (globalThis[PYSCRIPT] && (!tag || new URL(tag.src, document.baseURI).origin === scriptUrl.origin)) return;
      const src = tag ? tag.src : root + "pyscript/core.js";
      const text = await diagnose(new Error("Failed to fetch dynamically imported module: " + src));
      if (text && !pyscriptBoot && phase !== "failed" && phase !== "destroyed") {
        fail("stage_python", Object.assign(new Error(text), { diagnosed: text }), () => retryPyScript(src));
      }
    };
    const loaded = () => { if (wantOpen) pyscriptProbe(); };
    if (document.readyState === "complete") setTimeout(loaded, 0);
    else window.addEventListener("load", loaded, { once: true });
    return true;
  }
  // Import PyScript (again, for a Retry: the import of a module that failed is tried anew).
  function retryPyScript(src) {
    if (phase === "failed") { newReady(); phase = "waiting"; if (wantOpen) showStatus(L("starting")); }
    import(src).then(() => hookPyScript(globalThis[PYSCRIPT]), (err) => fail("stage_python", err, () => retryPyScript(src)));
  }
  function pyscriptConfig() {
    const files = {};
    files[root + "bundle-full.zip"] = "/lib/python3.14/site-packages/*"; // PyScript's whole stdlib: no lazy zips
    return { interpreter: root + "pyodide/pyodide.mjs", files };
  }
  let hooked = false, pyscriptBoot = null, pyscriptProbe = null;
  function hookPyScript(ps) {
    if (hooked || !ps || mode !== "pyscript") return;
    hooked = true;
    const allDone = new Promise((res) => window.addEventListener("py:all-done", res, { once: true }));
    ps.hooks.main.onReady.add((wrap) => {
      watchPyScriptErrors(wrap);
      return bootOnPyScript(wrap.interpreter, allDone);
    });
    ps.hooks.main.onBeforeRun.add(pyBlockRuns);
    ps.hooks.main.onBeforeRunAsync.add(pyBlockRuns);
    // A loader that came after PyScript had started: take the interpreter once the page's blocks ran.
    allDone.then(() => {
      if (!pyscriptBoot) ps.whenDefined("py").then((w) => bootOnPyScript(w.interpreter, null));
    });
  }
  // A <script type="py"> block that raises: PyScript reports it on stderr; the bar shows it too (pageError).
  let pyBlock = "<py script>", stderrWatched = false;
  function pyBlockRuns(wrap, element) {
    const all = document.querySelectorAll('script[type="py"], py-script');
    pyBlock = "<py script " + (Array.prototype.indexOf.call(all, element) + 1) + ">";
  }
  function watchPyScriptErrors(wrap) {
    if (stderrWatched || !wrap.io) return;
    stderrWatched = true;
    const stderr = wrap.io.stderr;
    wrap.io.stderr = function (error, ...rest) {
      if (error && typeof error.message === "string") quiet(call("pageError", { source: pyBlock, traceback: error.message }));
      return stderr.call(this, error, ...rest);
    };
  }
  function bootOnPyScript(pyodide, allDone) {
    if (pyscriptBoot || mode !== "pyscript") return pyscriptBoot;
    phase = "booting";
    if (wantOpen) showStatus(L("starting"));
    performance.mark("autopilot:pyodide");
    let stage = "stage_bundle";
    // Never rejects: PyScript awaits this before running the page's blocks.
    pyscriptBoot = (async () => {
      try {
        if (!pyodide.runPython("import importlib.util\nimportlib.util.find_spec('widget') is not None")) {
          // The page's PyScript config has no "files" entry for our bundle: install it ourselves (all of it:
          // PyScript's interpreter has the whole stdlib and no lazy zips).
          const bundle = new Uint8Array(await fetchBytes(root + "bundle-full.zip", "bundle"));
          pyodide.FS.mkdirTree("/lib/autopilot");
          pyodide.FS.writeFile("/lib/autopilot/bundle.zip", bundle);
          pyodide.runPython("import sys, importlib\nsys.path.insert(0, '/lib/autopilot/bundle.zip')\nimportlib.invalidate_caches()");
        }
        pyodide.registerJsModule("autopilot_bridge", await import(root + "bridge.mjs"));
        pyodide.registerJsModule("autopilot_sanitize", await import(root + "sanitize.mjs"));
        stage = "stage_widget";
        const cssP = fetchOk(root + "skin.css", "skin").then((r) => r.text());
        cssP.catch(() => {});
        // Connect once the page's own blocks registered their functions (or after 3 s: a block may run forever).
        // MicroPython blocks hold py:all-done back until MicroPython (not shipped) loads: do not wait for them.
        const waitAll = allDone && !document.querySelector('script[type="mpy"], mpy-script');
        const connectAfter = waitAll ? Promise.race([allDone, new Promise((r) => setTimeout(r, 3000))]) : null;
        await handOver(pyodide, await pagePython(), cssP, connectAfter);
      } catch (err) {
        // A failure inside PyScript's interpreter cannot be retried from here: Retry reloads the page.
        fail(stage, err, () => location.reload());
      }
    })();
    return pyscriptBoot;
  }

  // ---- the JS API: window.Autopilot -----------------------------------------------------------------
  // Payloads cross into Python once, as JSON text; Python answers through a one-shot callback with JSON text
  // {ok, value | error}. The only proxies are handle and handle.api (owned here, destroyed by destroy()).
  let pyApi = null;
  let queue = []; // [op, json, resolve, reject] made before Python was ready, applied in order
  let destroyRequested = false;
  let jsFunctions = Object.create(null); // name -> handler(args, context)
  let jsTools = Object.create(null); // name -> handler(args, {question, page, signal})
  const controllers = Object.create(null); // tool call id -> AbortController
  let listeners = Object.create(null); // event -> [fn]

  // The client events on() accepts (docs/api.md#events); "*" gets every event as {event, payload}.
  const EVENTS = SHARED.events;

  // JSON data exactly: what JSON.stringify would silently drop (functions, undefined, symbols), turn into null
  // (NaN, Infinity, holes) or into text (a Date, a Map as {}) is refused with its path, so nothing is lost.
  function checkJson(value, path, seen) {
    const where = () => path;
    switch (typeof value) {
      case "string": case "boolean": return;
      case "number":
        if (!Number.isFinite(value)) throw new TypeError(where() + " is " + value + ", not JSON data (a finite number)");
        return;
      case "object": {
        if (value === null) return;
        if (seen.includes(value)) throw new TypeError(where() + " refers back to itself (a cycle), not JSON data");
        seen.push(value);
        if (Array.isArray(value)) {
          for (let i = 0; i < value.length; i++) {
            if (!(i in value)) throw new TypeError(where() + "[" + i + "] is a hole, not JSON data");
            checkJson(value[i], path + "[" + i + "]", seen);
          }
        } else {
          const proto = Object.getPrototypeOf(value);
          if (proto !== Object.prototype && proto !== null) {
            const kind = value instanceof Date ? "a Date (send date.toISOString())"
              : "a " + ((value.constructor && value.constructor.name) || "non-plain object");
            throw new TypeError(where() + " is " + kind + ", not JSON data (plain objects, arrays, strings, finite numbers, booleans, null)");
          }
          if (Object.getOwnPropertySymbols(value).length) throw new TypeError(where() + " has symbol keys, not JSON data");
          for (const k of Object.keys(value)) checkJson(value[k], path + (/^[A-Za-z_$][\w$]*$/.test(k) ? "." + k : "[" + JSON.stringify(k) + "]"), seen);
        }
        seen.pop();
        return;
      }
      default: // undefined, function, symbol, bigint
        throw new TypeError(where() + " is " + (typeof value === "undefined" ? "undefined" : "a " + typeof value) + ", not JSON data");
    }
  }
  function jsonText(op, name, value) {
    try {
      checkJson(value, name, []);
    } catch (e) {
      throw new TypeError("[autopilot] " + op + "(): " + e.message);
    }
    return JSON.stringify(value);
  }

  function sendToPython(op, text, resolve, reject) {
    try {
      pyApi(op, text, (reply) => {
        const r = JSON.parse(reply);
        if (r.ok) resolve(r.value);
        else reject(new Error(r.error));
      });
    } catch (e) {
      reject(e);
    }
  }
  const refused = (op) => Promise.reject(new Error("[autopilot] destroyed: " + op + "() does nothing"));
  // ``text``: the payload as JSON text already checked (jsonText), else ``payload`` is checked here.
  function call(op, payload, text) {
    if (destroyRequested) return refused(op);
    if (text === undefined) {
      try {
        text = jsonText(op, "the argument", payload === undefined ? null : payload);
      } catch (e) {
        return Promise.reject(e);
      }
    }
    return new Promise((resolve, reject) => {
      if (pyApi) sendToPython(op, text, resolve, reject);
      else queue.push([op, text, resolve, reject]);
    });
  }
  function flushQueue() {
    const q = queue;
    queue = [];
    q.forEach((c) => sendToPython(c[0], c[1], c[2], c[3]));
  }
  const quiet = (p) => { p.catch(() => {}); return p; };

  // What Python calls: JS handlers of functions and tools, tool aborts, events.
  const jsHost = {
    invoke(kind, name, callId, argsText, contextText) {
      const fn = (kind === "tool" ? jsTools : jsFunctions)[name];
      if (!fn) return Promise.reject(new Error("no JS handler for " + JSON.stringify(name)));
      const args = JSON.parse(argsText), context = JSON.parse(contextText);
      if (kind === "tool") {
        const controller = new AbortController();
        controllers[callId] = controller;
        context.signal = controller.signal;
      }
      return new Promise((resolve) => resolve(fn(args, context))).then((value) => {
        const text = JSON.stringify(value === undefined ? null : value);
        if (text === undefined) throw new TypeError("the result of " + JSON.stringify(name) + " is not JSON data");
        return text;
      }).finally(() => { delete controllers[callId]; });
    },
    abort(callId) {
      const c = controllers[callId];
      if (c) c.abort();
    },
    emit(event, text) {
      const fns = listeners[event];
      if (!fns || !fns.length) return;
      const payload = JSON.parse(text);
      fns.slice().forEach((fn) => {
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
    document.removeEventListener("keydown", onShortcut);
    if (prepared && prepared.warm) prepared.warm.stop(); // prepared, never started
    prepared = null;
    host.remove();
    if (pyApi) { pyApi.destroy(); pyApi = null; }
    // PyProxy.destroy() releases the proxy (Python's own teardown ran through the "destroy" op first).
    if (api.handle) { api.handle.destroy(); api.handle = null; }
    const q = queue;
    queue = [];
    q.forEach((c) => {
      if (c[0] === "destroy") c[2](true);
      else c[3](new Error("[autopilot] destroyed before " + c[0] + "() was applied"));
    });
    Object.keys(controllers).forEach((k) => controllers[k].abort());
    jsFunctions = Object.create(null);
    jsTools = Object.create(null);
    listeners = Object.create(null);
    api.destroyed = true;
  }

  api = {
    __loader: true,
    config,
    ready,
    loaderStartedMs: t0,
    destroyed: false,
    /** Run fn(window.Autopilot) now: the queue pattern, (window.Autopilot ||= []).push(fn), works in any tag order. */
    push(...fns) {
      fns.forEach((fn) => {
        if (typeof fn !== "function") throw new TypeError("[autopilot] Autopilot.push(fn) needs a function, got " + typeof fn);
        try { fn(api); } catch (e) { console.error("[autopilot] a function queued with Autopilot.push threw", e); }
      });
      return fns.length;
    },
    /** Start the boot now (whatever data-boot says); resolves like ready. */
    boot: () => startBoot(false),
    /** Open the bar (before the boot: as a click on the toggle would); resolves once it is open. */
    open() {
      if (destroyRequested) return quiet(refused("open"));
      if (pyApi) return quiet(call("open"));
      wantOpen = true;
      requestOpen();
      return quiet(ready.then(() => true));
    },
    close() {
      if (destroyRequested) return quiet(refused("close"));
      if (pyApi) return quiet(call("close"));
      wantOpen = false;
      hideStatus();
      return quiet(ready.then(() => false));
    },
    /** Resolves to whether the bar is open afterwards. */
    toggle() {
      if (destroyRequested) return quiet(refused("toggle"));
      if (pyApi) return quiet(call("toggle"));
      return wantOpen ? api.close() : api.open();
    },
    /** Send a user message once connected; resolves to true when the relay took it (else the bar shows why). */
    send(text) {
      if (typeof text !== "string" || !text.trim()) return Promise.reject(new TypeError("[autopilot] send(text) needs some text"));
      if (!pyApi && phase === "waiting") startBoot(false);
      return call("send", text);
    },
    /** Subscribe to a client event (docs/api.md#events); returns a function that unsubscribes. */
    on(event, fn) {
      if (typeof event !== "string" || typeof fn !== "function") throw new TypeError("[autopilot] on(event, fn) needs an event name and a function");
      if (!EVENTS.includes(event)) {
        throw new TypeError("[autopilot] on(): unknown event " + JSON.stringify(event) + "; the events are " + EVENTS.join(", "));
      }
      const fns = listeners[event] || (listeners[event] = []);
      fns.push(fn);
      if (fns.length === 1) quiet(call("subscribe", event));
      return function off() {
        const list = listeners[event];
        const i = list ? list.indexOf(fn) : -1;
        if (i < 0) return;
        list.splice(i, 1);
        if (!list.length && !destroyRequested) quiet(call("unsubscribe", event));
      };
    },
    /** Replace the page context (JSON data only: anything else throws a TypeError naming where it is). */
    setContext(context) {
      if (!isPlainObject(context)) throw new TypeError("[autopilot] setContext(context) needs an object");
      return quiet(call("setContext", null, jsonText("setContext", "context", context)));
    },
    /** Merge into the page context (JSON data only, like setContext). */
    updateContext(partial) {
      if (!isPlainObject(partial)) throw new TypeError("[autopilot] updateContext(partial) needs an object");
      return quiet(call("updateContext", null, jsonText("updateContext", "partial", partial)));
    },
    /** {name, description, parameters, handler, sensitive}; the handler may be async. */
    registerFunction(def) {
      if (!isPlainObject(def) || typeof def.name !== "string" || typeof def.handler !== "function") {
        throw new TypeError("[autopilot] registerFunction({name, handler, ...}) needs a name and a handler function");
      }
      const text = jsonText("registerFunction", "parameters", def.parameters === undefined ? null : def.parameters);
      jsFunctions[def.name] = def.handler;
      return call("registerFunction", {
        name: def.name, description: def.description || "", parameters: JSON.parse(text), sensitive: !!def.sensitive,
        webmcp: def.webmcp !== false,
      });
    },
    unregisterFunction(name) {
      return call("unregisterFunction", name).then((existed) => {
        delete jsFunctions[name];
        return existed;
      });
    },
    /** A page handler for a declared tool or action; returns a function that removes it. */
    registerTool(name, handler) {
      if (typeof name !== "string" || typeof handler !== "function") throw new TypeError("[autopilot] registerTool(name, handler) needs a name and a function");
      jsTools[name] = handler;
      quiet(call("registerTool", name));
      return function remove() {
        if (jsTools[name] !== handler) return;
        delete jsTools[name];
        if (!destroyRequested) quiet(call("removeTool", name));
      };
    },
    /** Starter prompts for an empty bar on this page (null: the app's); resolves to the starters shown. */
    setStarters(starters) {
      if (starters !== null && (!Array.isArray(starters) || !starters.every((s) => typeof s === "string"))) {
        return Promise.reject(new TypeError("[autopilot] setStarters(starters) needs an array of strings, or null"));
      }
      return call("setStarters", starters);
    },
    /** "New chat": resolves to true when the fresh conversation is joined. */
    newConversation() {
      if (!pyApi && phase === "waiting") startBoot(false);
      return call("newConversation");
    },
    /** Past conversations of this browser with the app, most recently active first ({id, title, ..., current}). */
    conversations() {
      if (!pyApi && phase === "waiting") startBoot(false);
      return call("conversations");
    },
    /** Switch to one of them; resolves to true once it is shown (false: it is gone, or the switch failed). */
    openConversation(id) {
      if (!pyApi && phase === "waiting") startBoot(false);
      return call("openConversation", id);
    },
    /** Delete one of them (the current one: a fresh conversation takes its place); resolves to true when done. */
    deleteConversation(id) {
      if (!pyApi && phase === "waiting") startBoot(false);
      return call("deleteConversation", id);
    },
    /** Remove the toggle, the bar, every listener and proxy; disconnect. Later calls are refused. */
    destroy() {
      if (destroyRequested) return Promise.resolve(false);
      if (!pyApi && phase !== "booting") { finishDestroy(); return Promise.resolve(true); }
      const p = call("destroy");
      destroyRequested = true; // queued calls made before this one still apply first
      return p.then(() => { finishDestroy(); return true; }, (e) => { finishDestroy(); throw e; });
    },
  };
  window.Autopilot = api;
  // Page code queued before this tag runs now, in order (its calls are queued until Python is ready).
  if (earlyQueue.length) api.push(...earlyQueue.filter((fn) => {
    if (typeof fn === "function") return true;
    warn("window.Autopilot held a non-function before the loader ran; ignored");
    return false;
  }));

  // ---- boot policy: the page first, Python when the policy says -------------------------------------
  function onIntent() {
    button.removeEventListener("pointerenter", onIntent);
    button.removeEventListener("focus", onIntent);
    startBoot(false);
  }
  if (detectPyScript()) {
    // PyScript starts the interpreter; the widget boots in its onReady hook.
  } else {
    applyBootPolicy();
  }
  function applyBootPolicy() {
    if (config.boot === "eager" || wantOpen || tabFlag(BUSY_KEY)) {
      startBoot(false);
      return;
    }
    button.addEventListener("pointerenter", onIntent);
    button.addEventListener("focus", onIntent);
    if (config.boot === "intent") return;
    // In-browser agents find the page's functions only once Python has published them (WebMCP): with the
    // opt-in, where the browser has the API, the default boot starts on idle on every page view, as it did
    // before starts waited for the reader.
    const agents = config.webmcp && !!document.modelContext;
    if (tabFlag(STARTED_KEY) && !agents) return;
    // A first page view with the default (idle) boot: once the page is idle, prepare the start; with the
    // hand-over (the default) Python starts on the reader's intent, from the worker's snapshot; without it
    // (prewarm off or another mode, no Worker) it starts there and then. "ready": it starts there and then
    // anyway, so the bar is connected before the reader reaches for it (at the price of the restore's task).
    const idle = () => {
      const go = () => {
        if (phase !== "waiting") return;
        if (!agents && config.boot === "idle" && prewarmMode() === "handoff" && !wasmBlocked()) prepare();
        else startBoot(false);
      };
      if ("requestIdleCallback" in window) requestIdleCallback(go, { timeout: 2000 });
      else setTimeout(go, 200);
    };
    if (document.readyState === "complete") idle();
    else window.addEventListener("load", idle, { once: true });
  }
})();

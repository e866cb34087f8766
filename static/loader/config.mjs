// The loader's configuration: data-* attributes of its tag win over window.AutopilotConfig; and the labels it
// shows before Python runs, from the same table as the bar's (widget/ui/labels.py).

/**
 * The options as Python gets them (JSON; docs/embedding.md lists them).
 * @typedef {object} LoaderConfig
 * @property {string} root the build's folder (ends with "/")
 * @property {string} buildId
 * @property {string} relay
 * @property {string | null} app
 * @property {string | null} conversationUrl
 * @property {"idle" | "ready" | "eager" | "intent"} boot
 * @property {boolean} open
 * @property {"bottom-right" | "bottom-left"} position
 * @property {"auto" | "light" | "dark"} theme
 * @property {string | null} title
 * @property {Record<string, string> | null} labels
 * @property {string[]} python
 * @property {Record<string, unknown> | null} tools
 * @property {boolean} webmcp
 * @property {boolean | string | null} prewarm
 * @property {boolean} snapshotCache
 */
/**
 * The page's callbacks (window.AutopilotConfig only): they stay in JS.
 * @typedef {object} Callbacks
 * @property {((api: object) => void) | null} onReady
 * @property {((error: Error) => void) | null} onError
 */
/**
 * What widget/loader_data.py writes into the loader.
 * @typedef {object} LoaderData
 * @property {Record<string, string>} labels
 * @property {string[]} events
 * @property {string} toggleCss
 */
/**
 * The boot files build.py writes into the loader (all unset in a build without the split or the snapshot).
 * @typedef {object} BootFiles
 * @property {object} [lockInfo] pyodide-lock.json's info: no lock file fetch
 * @property {string} [stdlib] the stdlib zip the boot imports
 * @property {string} [rest]
 * @property {Record<string, string>} [lazy] lazily loaded zips, by group
 * @property {string} [bundlePath]
 * @property {string} [snapshot] a memory snapshot made by build.py --snapshot
 */
/**
 * One option's kind and default.
 * @typedef {{type: string, values?: string[], def?: unknown}} OptionSpec
 */

export const BUILD_ID = "__BUILD_ID__";
// Filled in by build.py: which stdlib zips to fetch, the lock file's info (no lock file fetch), a snapshot.
/** @type {BootFiles} */
export const BOOT_FILES = /*__BOOT_FILES__*/{};
// Filled in by build.py from the Python side (widget/loader_data.py): the loader's labels, the toggle's CSS and
// the client event names exist once, in Python.
/** @type {any} */
const SHARED = /*__LOADER_DATA__*/null;
/** @type {LoaderData} */
export const loaderData = SHARED;

/** @param {string} text */
export const warn = (text) => console.warn("[autopilot] " + text);
/** @param {string} key */
const attrName = (key) => "data-" + key.replace(/[A-Z]/g, (c) => "-" + c.toLowerCase());
/**
 * @param {unknown} v
 * @returns {v is Record<string, any>}
 */
export const isPlainObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
/**
 * @param {object} obj
 * @param {string} k
 */
const has = (obj, k) => Object.prototype.hasOwnProperty.call(obj, k);

/** @type {Record<string, OptionSpec>} */
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
  snapshotCache: { type: "boolean", def: true }, // later views restore the worker's stored snapshot (snapshot.mjs)
  onReady: { type: "function" }, // AutopilotConfig only: called with window.Autopilot once Python runs it
  onError: { type: "function" }, // AutopilotConfig only: called with an Error when a start fails
};

/** The loader's own URL (its tag's src). @type {URL} */
export let scriptUrl;
/** The build's folder, where every other file is. @type {string} */
export let root;
/** @type {LoaderConfig} */
export let config;
/** @type {Callbacks} */
export const callbacks = { onReady: null, onError: null };
/** The labels, with the page's overrides. @type {Record<string, string>} */
let LABELS;
/** @type {string} */
let title;

/**
 * One option's value from an attribute (a string) or AutopilotConfig (any type); undefined when malformed.
 * @param {string} key
 * @param {OptionSpec} spec
 * @param {any} raw
 * @param {string} where
 * @returns {any}
 */
function parseOption(key, spec, raw, where) {
  /** @param {string} why */
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
      } catch { return bad("is not a valid URL: " + JSON.stringify(raw)); }
    case "enum":
      if (!(spec.values || []).includes(raw)) return bad("must be one of " + (spec.values || []).join(", ") + ", got " + JSON.stringify(raw));
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
        if (/^\s*\[/.test(raw)) { try { return parseOption(key, spec, JSON.parse(raw), where); } catch (e) { return bad("is not valid JSON: " + errorText(e)); } }
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
        try { raw = JSON.parse(raw); } catch (e) { return bad("is not valid JSON: " + errorText(e)); }
      }
      if (!isPlainObject(raw)) return bad("must be an object");
      try { return JSON.parse(JSON.stringify(raw)); } catch (e) { return bad("must be JSON data: " + errorText(e)); }
    case "function":
      if (fromAttr) return bad("can only be set in window.AutopilotConfig (a function)");
      if (typeof raw !== "function") return bad("must be a function");
      return raw;
  }
  return undefined;
}

/**
 * An error's message (a thrown non-Error: its text).
 * @param {unknown} err
 * @returns {string}
 */
export const errorText = (err) => (err && /** @type {Error} */ (err).message ? /** @type {Error} */ (err).message : String(err));

/**
 * Read the options from the loader's tag and window.AutopilotConfig (warning about anything unknown or
 * malformed), and the labels.
 * @param {HTMLScriptElement} script the loader's tag
 */
export function readConfig(script) {
  scriptUrl = new URL(script.src, document.baseURI);
  root = new URL(BUILD_ID + "/", scriptUrl).href;
  const ds = script.dataset;
  /** @type {any} */
  let preset = /** @type {any} */ (window).AutopilotConfig;
  /** @type {Record<string, any>} */
  const out = { root, buildId: BUILD_ID };
  if (preset !== undefined && preset !== null && !isPlainObject(preset)) {
    warn("window.AutopilotConfig must be an object; ignored");
    preset = null;
  }
  preset = preset || {};
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
    if (spec.type === "function") callbacks[/** @type {keyof Callbacks} */ (k)] = value || null;
    else out[k] = value !== undefined ? value : (spec.def !== undefined ? spec.def : null);
  });
  // The relay the loader came from: .../widget/autopilot.js -> ... (keeps a path prefix the relay is mounted under).
  if (!out.relay) {
    const m = scriptUrl.pathname.match(/^(.*)\/widget\/autopilot\.js$/);
    out.relay = scriptUrl.origin + (m ? m[1] : "");
  }
  if (!out.conversationUrl && !out.app) {
    warn("no data-app or data-conversation-url: using app \"demo\"");
    out.app = "demo";
  }
  config = /** @type {LoaderConfig} */ (out);

  LABELS = { ...loaderData.labels };
  const labels = config.labels;
  if (labels) {
    Object.keys(labels).forEach((k) => {
      if (typeof labels[k] === "string") { if (k in LABELS) LABELS[k] = labels[k]; }
      else { warn("label " + JSON.stringify(k) + " must be a string; ignored"); delete labels[k]; }
    });
  }
  title = config.title || LABELS.title;
}

/**
 * A label of the loader ({title} and {name} filled in).
 * @param {string} key
 * @param {Record<string, unknown>} [vars]
 * @returns {string}
 */
export const L = (key, vars = {}) => String(LABELS[key] || key).replace(/\{(\w+)\}/g,
  (m, name) => (name === "title" ? title : (name in vars ? String(vars[name]) : m)));

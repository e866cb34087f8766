// The JS API: window.Autopilot (docs/embedding.md, docs/api.md). Calls made before Python is ready are queued.
//
// Payloads cross into Python once, as JSON text; Python answers through a one-shot callback with JSON text
// {ok, value | error}. The only proxies are handle and handle.api (owned here, destroyed by destroy()).

import { config, isPlainObject, loaderData, warn } from "./config.mjs";
import { state } from "./state.mjs";
import { button, host, hideStatus, onShortcut, onToggleClick, openEarly } from "./toggle.mjs";
import { hideComposer } from "./composer.mjs";
import { startBoot } from "./boot.mjs";
import { dropPrepared } from "./prepare.mjs";

/** @typedef {(reply: string) => void} Reply */
/**
 * Python's side of the API (widget/browser.py): one op with its JSON payload, answered through ``reply``.
 * @typedef {((op: string, text: string, reply: Reply) => void) & {destroy: () => void}} PyApi
 */
/** @typedef {[string, string, (value: any) => void, (error: Error) => void]} Queued */
/** @typedef {(payload: any) => void} Listener */

/** @type {PyApi | null} */
let pyApi = null;
/** Calls made before Python was ready, applied in order. @type {Queued[]} */
let queue = [];
/** name -> handler(args, context) @type {Record<string, Function>} */
let jsFunctions = Object.create(null);
/** name -> handler(args, {question, page, signal}) @type {Record<string, Function>} */
let jsTools = Object.create(null);
/** tool call id -> AbortController @type {Record<string, AbortController>} */
const controllers = Object.create(null);
/** event -> [fn] @type {Record<string, Listener[]>} */
let listeners = Object.create(null);

// Autopilot.ready: settles once per start. A failed start rejects it (it stays rejected); a Retry starts
// again with a new promise, which resolves (or rejects) like the first.
/** @type {Promise<any>} */
export let ready;
/** @type {(api: any) => void} */
export let readyResolve;
/** @type {(error: Error) => void} */
export let readyReject;
/** A new start, a new promise (window.Autopilot.ready too). */
export function newReady() {
  ready = new Promise((res, rej) => { readyResolve = res; readyReject = rej; });
  ready.catch(() => {});
  if (api) api.ready = ready;
}

/**
 * JSON data exactly: what JSON.stringify would silently drop (functions, undefined, symbols), turn into null
 * (NaN, Infinity, holes) or into text (a Date, a Map as {}) is refused with its path, so nothing is lost.
 * @param {unknown} value
 * @param {string} path
 * @param {unknown[]} seen
 */
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
        const obj = /** @type {Record<string, unknown>} */ (value);
        for (const k of Object.keys(obj)) checkJson(obj[k], path + (/^[A-Za-z_$][\w$]*$/.test(k) ? "." + k : "[" + JSON.stringify(k) + "]"), seen);
      }
      seen.pop();
      return;
    }
    default: // undefined, function, symbol, bigint
      throw new TypeError(where() + " is " + (typeof value === "undefined" ? "undefined" : "a " + typeof value) + ", not JSON data");
  }
}
/**
 * ``value`` as JSON text, checked (a TypeError naming ``op`` and where).
 * @param {string} op
 * @param {string} name
 * @param {unknown} value
 */
function jsonText(op, name, value) {
  try {
    checkJson(value, name, []);
  } catch (e) {
    throw new TypeError("[autopilot] " + op + "(): " + /** @type {Error} */ (e).message, { cause: e });
  }
  return JSON.stringify(value);
}

/**
 * @param {PyApi} py
 * @param {string} op
 * @param {string} text
 * @param {(value: any) => void} resolve
 * @param {(error: Error) => void} reject
 */
function sendToPython(py, op, text, resolve, reject) {
  try {
    py(op, text, (reply) => {
      const r = JSON.parse(reply);
      if (r.ok) resolve(r.value);
      else reject(new Error(r.error));
    });
  } catch (e) {
    reject(/** @type {Error} */ (e));
  }
}
/** @param {string} op */
const refused = (op) => Promise.reject(new Error("[autopilot] destroyed: " + op + "() does nothing"));
/**
 * One op to Python (queued until it runs). ``text``: the payload as JSON text already checked (jsonText), else
 * ``payload`` is checked here.
 * @param {string} op
 * @param {unknown} [payload]
 * @param {string} [text]
 * @returns {Promise<any>}
 */
export function call(op, payload, text) {
  if (state.destroyRequested) return refused(op);
  if (text === undefined) {
    try {
      text = jsonText(op, "the argument", payload === undefined ? null : payload);
    } catch (e) {
      return Promise.reject(e);
    }
  }
  const json = text;
  return new Promise((resolve, reject) => {
    if (pyApi) sendToPython(pyApi, op, json, resolve, reject);
    else queue.push([op, json, resolve, reject]);
  });
}
/**
 * A promise whose rejection is not reported as unhandled (the caller may ignore it).
 * @template T
 * @param {Promise<T>} p
 */
export const quiet = (p) => { p.catch(() => {}); return p; };

// What Python calls: JS handlers of functions and tools, tool aborts, events.
export const jsHost = {
  /**
   * @param {string} kind
   * @param {string} name
   * @param {string} callId
   * @param {string} argsText
   * @param {string} contextText
   */
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
  /** @param {string} callId */
  abort(callId) {
    const c = controllers[callId];
    if (c) c.abort();
  },
  /**
   * @param {string} event
   * @param {string} text
   */
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
  if (state.phase === "ready" || state.destroyRequested) return;
  openEarly();
}

/** Remove the toggle, every listener and proxy; later calls are refused. */
export function finishDestroy() {
  if (state.phase === "destroyed") return;
  state.phase = "destroyed";
  state.destroyRequested = true;
  button.removeEventListener("click", onToggleClick);
  document.removeEventListener("keydown", onShortcut);
  dropPrepared(); // prepared, never started
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

/**
 * Python runs: its handle and API; the calls queued meanwhile are applied, in order.
 * @param {any} pyodide
 * @param {any} handle
 */
export function attachPython(pyodide, handle) {
  api.pyodide = pyodide;
  api.handle = handle;
  pyApi = handle.api;
  const py = handle.api;
  const q = queue;
  queue = [];
  q.forEach((c) => sendToPython(py, c[0], c[1], c[2], c[3]));
}

/** @type {any} window.Autopilot (made by installApi) */
export let api = null;

/**
 * Make window.Autopilot; page code queued before this tag runs now, in order (its calls are queued until Python
 * is ready).
 * @param {unknown[]} earlyQueue what (window.Autopilot ||= []).push(fn) queued before this tag
 * @param {number} t0 when the loader started (performance.now())
 */
export function installApi(earlyQueue, t0) {
  // The client events on() accepts (docs/api.md#events); "*" gets every event as {event, payload}.
  const EVENTS = loaderData.events;
  api = {
    __loader: true,
    config,
    ready,
    loaderStartedMs: t0,
    destroyed: false,
    /**
     * Run fn(window.Autopilot) now: the queue pattern, (window.Autopilot ||= []).push(fn), works in any tag order.
     * @param {...Function} fns
     */
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
      if (state.destroyRequested) return quiet(refused("open"));
      if (pyApi) return quiet(call("open"));
      state.wantOpen = true;
      requestOpen();
      return quiet(ready.then(() => true));
    },
    close() {
      if (state.destroyRequested) return quiet(refused("close"));
      if (pyApi) return quiet(call("close"));
      state.wantOpen = false;
      hideStatus();
      hideComposer(false);
      return quiet(ready.then(() => false));
    },
    /** Resolves to whether the bar is open afterwards. */
    toggle() {
      if (state.destroyRequested) return quiet(refused("toggle"));
      if (pyApi) return quiet(call("toggle"));
      return state.wantOpen ? api.close() : api.open();
    },
    /**
     * Send a user message once connected; resolves to true when the relay took it (else the bar shows why).
     * @param {string} text
     */
    send(text) {
      if (typeof text !== "string" || !text.trim()) return Promise.reject(new TypeError("[autopilot] send(text) needs some text"));
      if (!pyApi && state.phase === "waiting") startBoot(false);
      return call("send", text);
    },
    /**
     * Subscribe to a client event (docs/api.md#events); returns a function that unsubscribes.
     * @param {string} event
     * @param {Listener} fn
     */
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
        if (!list.length && !state.destroyRequested) quiet(call("unsubscribe", event));
      };
    },
    /**
     * Replace the page context (JSON data only: anything else throws a TypeError naming where it is).
     * @param {unknown} context
     */
    setContext(context) {
      if (!isPlainObject(context)) throw new TypeError("[autopilot] setContext(context) needs an object");
      return quiet(call("setContext", null, jsonText("setContext", "context", context)));
    },
    /**
     * Merge into the page context (JSON data only, like setContext).
     * @param {unknown} partial
     */
    updateContext(partial) {
      if (!isPlainObject(partial)) throw new TypeError("[autopilot] updateContext(partial) needs an object");
      return quiet(call("updateContext", null, jsonText("updateContext", "partial", partial)));
    },
    /**
     * {name, description, parameters, handler, sensitive}; the handler may be async.
     * @param {any} def
     */
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
    /** @param {string} name */
    unregisterFunction(name) {
      return call("unregisterFunction", name).then((existed) => {
        delete jsFunctions[name];
        return existed;
      });
    },
    /**
     * A page handler for a declared tool or action; returns a function that removes it.
     * @param {string} name
     * @param {Function} handler
     */
    registerTool(name, handler) {
      if (typeof name !== "string" || typeof handler !== "function") throw new TypeError("[autopilot] registerTool(name, handler) needs a name and a function");
      jsTools[name] = handler;
      quiet(call("registerTool", name));
      return function remove() {
        if (jsTools[name] !== handler) return;
        delete jsTools[name];
        if (!state.destroyRequested) quiet(call("removeTool", name));
      };
    },
    /**
     * Starter prompts for an empty bar on this page (null: the app's); resolves to the starters shown.
     * @param {string[] | null} starters
     */
    setStarters(starters) {
      if (starters !== null && (!Array.isArray(starters) || !starters.every((s) => typeof s === "string"))) {
        return Promise.reject(new TypeError("[autopilot] setStarters(starters) needs an array of strings, or null"));
      }
      return call("setStarters", starters);
    },
    /** "New chat": resolves to true when the fresh conversation is joined. */
    newConversation() {
      if (!pyApi && state.phase === "waiting") startBoot(false);
      return call("newConversation");
    },
    /** Past conversations of this browser with the app, most recently active first ({id, title, ..., current}). */
    conversations() {
      if (!pyApi && state.phase === "waiting") startBoot(false);
      return call("conversations");
    },
    /**
     * Switch to one of them; resolves to true once it is shown (false: it is gone, or the switch failed).
     * @param {string} id
     */
    openConversation(id) {
      if (!pyApi && state.phase === "waiting") startBoot(false);
      return call("openConversation", id);
    },
    /**
     * Delete one of them (the current one: a fresh conversation takes its place); resolves to true when done.
     * @param {string} id
     */
    deleteConversation(id) {
      if (!pyApi && state.phase === "waiting") startBoot(false);
      return call("deleteConversation", id);
    },
    /** Remove the toggle, the bar, every listener and proxy; disconnect. Later calls are refused. */
    destroy() {
      if (state.destroyRequested) return Promise.resolve(false);
      if (!pyApi && state.phase !== "booting") { finishDestroy(); return Promise.resolve(true); }
      const p = call("destroy");
      state.destroyRequested = true; // queued calls made before this one still apply first
      return p.then(() => { finishDestroy(); return true; }, (e) => { finishDestroy(); throw e; });
    },
  };
  /** @type {any} */ (window).Autopilot = api;
  if (earlyQueue.length) api.push(...earlyQueue.filter((fn) => {
    if (typeof fn === "function") return true;
    warn("window.Autopilot held a non-function before the loader ran; ignored");
    return false;
  }));
}

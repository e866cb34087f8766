// The JS Socket.IO bridge Python uses in the browser (registered as the module `autopilot_bridge`).
//
// Payloads cross the boundary once, as JSON text: Python hands over a string, JS parses it once; incoming
// events are stringified once and parsed once in Python. No proxies of payload objects are created.
//
// Streamed text is handed over in batches: a model streams 20–200 `completion_stream` events a second, and each
// call into Python costs the page ~0.3–0.5 ms of main thread however small the event. The first one after a pause
// goes at once (the first words are not delayed); the ones that follow within STREAM_BATCH_MS wait and go together
// as one `__batch__` call (a JSON array of [name, payload] pairs, applied in order). Any other event first hands
// over the waiting ones, so Python sees every event, once, in the order the relay sent them.
import { io } from "./vendor/socket.io.esm.min.js";

const STREAM_EVENT = "completion_stream";
const STREAM_BATCH_MS = 100; // the bar renders streamed text ~10 times a second: batches match that cadence
const BATCH = "__batch__"; // the name Python's BrowserTransport reads as a batch

/** @typedef {import("./vendor/socket.io.esm.min.js").Socket} Socket */
/** Python's handler: (event name, payload as JSON text). @typedef {(name: string, json: string) => void} Handler */
/** [status, body text] of an HTTP answer. @typedef {[number, string]} Answer */
/**
 * A socket the loader opened early (preconnect), for Python's connect() to take over.
 * @typedef {{url: string, path: string, s: Socket, ready?: Promise<boolean>, queued: [string, unknown][],
 *            expiry?: ReturnType<typeof setTimeout>}} EarlySocket
 */

/** @type {Socket | null} */
let socket = null;
/** @type {Handler | null} */
let onEvent = null; // a Python proxy (create_proxy), owned and destroyed by Python
/** @type {[string, unknown][]} */
let waiting = []; // [name, payload] pairs not handed over yet
/** @type {ReturnType<typeof setTimeout> | null} */
let waitTimer = null;
let lastHandover = -Infinity; // performance.now() of the last streamed event handed over

/**
 * @param {string} name
 * @param {unknown} value
 */
function send(name, value) {
  if (onEvent) onEvent(name, value === undefined ? "null" : JSON.stringify(value));
}

function handOver() {
  if (waitTimer !== null) {
    clearTimeout(waitTimer);
    waitTimer = null;
  }
  if (!waiting.length) return;
  const batch = waiting;
  waiting = [];
  lastHandover = performance.now();
  if (onEvent) onEvent(BATCH, JSON.stringify(batch));
}

/**
 * @param {string} name
 * @param {unknown} value
 */
function deliver(name, value) {
  if (name !== STREAM_EVENT) {
    handOver();
    send(name, value);
    return;
  }
  const now = performance.now();
  if (!waiting.length && now - lastHandover >= STREAM_BATCH_MS) {
    lastHandover = now;
    send(name, value);
    return;
  }
  waiting.push([name, value === undefined ? null : value]);
  if (waitTimer === null) waitTimer = setTimeout(handOver, Math.max(0, lastHandover + STREAM_BATCH_MS - now));
}

/**
 * @param {string} url
 * @param {string} path
 * @returns {Socket}
 */
function open(url, path) {
  return io(url, {
    path,
    transports: ["websocket", "polling"],
    reconnectionDelay: 250,
    reconnectionDelayMax: 5000,
    timeout: 10000,
  });
}

/**
 * Listen to a socket Python uses: its events go to Python (see deliver); `settle` answers connect() once.
 * @param {Socket} s
 * @param {string} url
 * @param {string} path
 * @param {(err: Error | null) => boolean} settle
 */
function wire(s, url, path, settle) {
  s.on("connect", () => {
    deliver("__connected__", null);
    settle(null);
  });
  s.on("disconnect", (reason) => {
    deliver("__disconnected__", reason);
    // A relay that shuts down sends a Socket.IO disconnect; socket.io-client does not reconnect after one by
    // itself. Reconnect (the balancer picks a relay process that runs), after a short random pause.
    if (reason === "io server disconnect") {
      setTimeout(() => { if (socket === s && !s.connected) s.connect(); }, 250 + Math.random() * 750);
    }
  });
  s.on("connect_error", (err) => {
    if (!settle(new Error("Socket.IO connection to " + url + " (" + path + ") failed: " + (err && err.message)))) {
      deliver("__connect_error__", err && err.message);
    }
  });
  s.onAny((name, payload) => deliver(name, payload));
}

/**
 * Open the socket; resolves on the first connect, rejects on the first connect error. A socket the loader
 * opened early to this url and path (preconnect) is taken over instead, once it is connected.
 * @param {string} url
 * @param {string} path
 * @param {Handler} handler
 * @returns {Promise<boolean>}
 */
export async function connect(url, path, handler) {
  // The conversation was read by now: an early answer left unused must not answer a later request (a "new
  // chat" creating a conversation would get the first one back).
  earlyAnswers.clear();
  const early = earlySocket;
  earlySocket = null;
  close();
  if (early) {
    clearTimeout(early.expiry);
    const s = early.s;
    if (early.url === url && early.path === path && await early.ready && s.connected && !socket) {
      s.offAny();
      onEvent = handler;
      socket = s;
      wire(s, url, path, () => false);
      deliver("__connected__", null);
      early.queued.forEach(([name, payload]) => deliver(name, payload));
      return true;
    }
    s.disconnect();
  }
  onEvent = handler;
  return new Promise((resolve, reject) => {
    let settled = false;
    const s = open(url, path);
    socket = s;
    wire(s, url, path, (err) => {
      if (settled) return false;
      settled = true;
      if (err) { s.disconnect(); reject(err); } else resolve(true);
      return true;
    });
  });
}

// ---- early connection -----------------------------------------------------------------------------------
// While Python starts, the loader reads the conversation (creating it on a first visit) and opens the socket
// with the two functions below; Python's first requests and connect() are then answered by what is here
// instead of waiting for the network. Each early answer is used at most once, only if it succeeded and is
// fresh, only by the same request (method, URL and body) and only before Python's connect(): anything else goes
// to the network as before.
const EARLY_MAX_AGE_MS = 10000; // an older answer (its join token, say) is not handed over
/** @type {Map<string, {at: number, answer: Promise<Answer>}>} */
const earlyAnswers = new Map(); // "METHOD url body" -> {at, answer: Promise<[status, text]>}
/** @type {EarlySocket | null} */
let earlySocket = null;

/**
 * @param {string} method
 * @param {string} url
 * @param {string | null | undefined} bodyJson
 */
const earlyKey = (method, url, bodyJson) => method + " " + url + " " + (bodyJson == null ? "" : bodyJson);

/**
 * Send a request now for Python to use later (see request); resolves to [status, bodyText] as request does.
 * @param {string} method
 * @param {string} url
 * @param {string | null} bodyJson
 */
export function prefetch(method, url, bodyJson) {
  const key = earlyKey(method, url, bodyJson);
  const answer = httpRequest(method, url, bodyJson);
  const entry = { at: performance.now(), answer };
  earlyAnswers.set(key, entry);
  answer.catch(() => {});
  setTimeout(() => { if (earlyAnswers.get(key) === entry) earlyAnswers.delete(key); }, EARLY_MAX_AGE_MS);
  return answer;
}

/**
 * Open the socket now for Python's connect() to take over (dropped if it does not within the age limit).
 * @param {string} url
 * @param {string} path
 */
export function preconnect(url, path) {
  if (socket) return; // Python is connected already
  if (earlySocket) earlySocket.s.disconnect();
  clearTimeout(earlySocket ? earlySocket.expiry : undefined);
  const s = open(url, path);
  /** @type {EarlySocket} */
  const entry = { url, path, s, queued: [] };
  entry.ready = new Promise((resolve) => {
    s.once("connect", () => resolve(true));
    s.once("connect_error", () => resolve(false));
  });
  s.onAny((name, payload) => entry.queued.push([name, payload]));
  entry.expiry = setTimeout(() => {
    if (earlySocket === entry) { earlySocket = null; s.disconnect(); }
  }, EARLY_MAX_AGE_MS);
  earlySocket = entry;
}

/**
 * Emit with an acknowledgement; resolves to the ack as JSON text.
 * @param {string} name
 * @param {string} json
 * @param {number} [timeoutMs]
 */
export async function emitAck(name, json, timeoutMs) {
  if (!socket || !socket.connected) throw new Error("Cannot emit " + JSON.stringify(name) + ": not connected");
  const ack = await socket.timeout(timeoutMs || 10000).emitWithAck(name, JSON.parse(json));
  return JSON.stringify(ack === undefined ? null : ack);
}

/**
 * Emit without an acknowledgement (fire and forget).
 * @param {string} name
 * @param {string} json
 */
export function emit(name, json) {
  if (!socket || !socket.connected) throw new Error("Cannot emit " + JSON.stringify(name) + ": not connected");
  socket.emit(name, JSON.parse(json));
}

/** @type {Map<(json: string) => void, (payload: unknown) => void>} */
const named = new Map(); // handler -> wrapper, so off() finds what on() added

/**
 * Listen to one event besides the catch-all handler (unbatched, so possibly ahead of it); the handler gets JSON text.
 * @param {string} name
 * @param {(json: string) => void} handler
 */
export function on(name, handler) {
  if (!socket) throw new Error("Cannot listen: not connected");
  const wrapper = (/** @type {unknown} */ payload) => handler(JSON.stringify(payload === undefined ? null : payload));
  named.set(handler, wrapper);
  socket.on(name, wrapper);
}

/**
 * Stop listening with a handler given to on().
 * @param {string} name
 * @param {(json: string) => void} handler
 */
export function off(name, handler) {
  const wrapper = named.get(handler);
  if (socket && wrapper) socket.off(name, wrapper);
  named.delete(handler);
}

export function connected() {
  return !!(socket && socket.connected);
}

/** Close the socket for good and drop the handler reference. */
export function close() {
  if (earlySocket) {
    clearTimeout(earlySocket.expiry);
    earlySocket.s.disconnect();
    earlySocket = null;
  }
  if (socket) {
    socket.offAny();
    socket.removeAllListeners();
    socket.disconnect();
    socket = null;
  }
  named.clear();
  // Streamed events not handed over yet go with the connection Python is leaving (a disconnect, a new
  // conversation or connection): none of them was applied, so the client's last seq is still before them.
  if (waitTimer !== null) clearTimeout(waitTimer);
  waitTimer = null;
  waiting = [];
  onEvent = null;
}

/**
 * One JSON HTTP request; resolves to [status, bodyText]. The same request sent early (prefetch) is answered
 * from there when it succeeded within the age limit.
 * @param {string} method
 * @param {string} url
 * @param {string | null} bodyJson
 * @returns {Promise<Answer>}
 */
export async function request(method, url, bodyJson) {
  const key = earlyKey(method, url, bodyJson);
  const entry = earlyAnswers.get(key);
  if (entry) {
    earlyAnswers.delete(key);
    try {
      const answer = await entry.answer;
      if (answer[0] >= 200 && answer[0] < 300 && performance.now() - entry.at < EARLY_MAX_AGE_MS) return answer;
    } catch { /* failed early: ask again */ }
  }
  return httpRequest(method, url, bodyJson);
}

/**
 * @param {string} method
 * @param {string} url
 * @param {string | null | undefined} bodyJson
 * @returns {Promise<Answer>}
 */
async function httpRequest(method, url, bodyJson) {
  /** @type {Record<string, string>} */
  const headers = {};
  /** @type {RequestInit} */
  const init = { method, headers, credentials: "omit" };
  if (bodyJson !== null && bodyJson !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = bodyJson;
  }
  const res = await fetch(url, init);
  return [res.status, await res.text()];
}

/**
 * Round-trip timing helper for benchmarks: a plain-JS emit+ack of the same payload.
 * @param {string} name
 * @param {string} json
 * @param {number} n
 */
export async function jsEmitAckMs(name, json, n) {
  if (!socket) throw new Error("Cannot emit " + JSON.stringify(name) + ": not connected");
  const s = socket;
  const data = JSON.parse(json);
  const times = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await s.timeout(10000).emitWithAck(name, data);
    times.push(performance.now() - t);
  }
  return JSON.stringify(times);
}

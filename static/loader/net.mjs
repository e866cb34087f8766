// Fetching the build's files, and yielding to the page between the start's steps.

/**
 * A response that is ok, else an error naming what and where.
 * @param {string} url
 * @param {string} what
 */
export async function fetchOk(url, what) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(what + " returned HTTP " + r.status + " (" + url + ")");
  return r;
}
/**
 * @param {string} url
 * @param {string} what
 */
export const fetchBytes = async (url, what) => (await fetchOk(url, what)).arrayBuffer();
/**
 * The text and the final URL (for tracebacks).
 * @param {string} url
 * @param {string} what
 * @returns {Promise<[string, string]>}
 */
export const fetchText = async (url, what) => {
  const r = await fetchOk(url, what);
  return [await r.text(), r.url];
};

/**
 * Let the page run its own tasks before going on: what follows runs in a task of its own.
 * @returns {Promise<void>}
 */
export const yieldToPage = () => new Promise((resolve) => {
  const sched = /** @type {any} */ (globalThis).scheduler;
  if (sched && typeof sched.yield === "function") { sched.yield().then(resolve); return; }
  const ch = new MessageChannel(); // unlike setTimeout, not clamped to 4 ms when repeated
  ch.port1.onmessage = () => resolve();
  ch.port2.postMessage(null);
});

/**
 * The body of a response (or a promise of one) that is answered otherwise: not read any further.
 * @param {Response | Promise<Response> | null} source
 */
export const dropBody = (source) => {
  Promise.resolve(source).then((r) => { if (r && r.body) r.body.cancel(); }).catch(() => {});
};

// The toggle, painted before anything else (plain JS, its own shadow root), with the loader's status card; and
// what a click on it (or the bar's shortcut) does before Python owns them.

import { L, config, loaderData } from "./config.mjs";
import { state } from "./state.mjs";
import { fail } from "./errors.mjs";
import { startBoot } from "./boot.mjs";
import { pyscriptProbe } from "./pyscript.mjs";
import { composerOpen, composerOpenedAt, hideComposer, showComposer } from "./composer.mjs";

/** A toggle click within this long of the bar showing keeps it open (widget/ui/bar.py: JUST_OPENED_MS). */
export const JUST_OPENED_MS = 1000;

/** @type {HTMLDivElement} */
export let host;
/** @type {HTMLButtonElement} */
export let button;
/** @type {HTMLDivElement} */
export let status;

/** Make the toggle's host, shadow root, button and status card (not yet in the page). */
export function paintToggle() {
  host = document.createElement("div");
  host.id = "autopilot-toggle-host";
  host.setAttribute("data-autopilot", "toggle");
  host.setAttribute("data-position", config.position);
  if (config.theme !== "auto") host.setAttribute("data-theme", config.theme);
  const shadow = host.attachShadow({ mode: "open" });
  const css = loaderData.toggleCss;
  // A constructable stylesheet: a strict CSP (no 'unsafe-inline' in style-src) blocks <style> elements, not these.
  try {
    const sheet = new CSSStyleSheet();
    sheet.replaceSync(css);
    shadow.adoptedStyleSheets = [sheet];
  } catch {
    const style = document.createElement("style");
    style.textContent = css;
    shadow.appendChild(style);
  }
  button = document.createElement("button");
  button.className = "toggle";
  button.type = "button";
  button.setAttribute("part", "toggle");
  button.setAttribute("aria-label", L("open"));
  button.setAttribute("aria-expanded", "false");
  button.innerHTML = '<svg part="toggle-icon" viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" aria-hidden="true"><path d="M21 15a2 2 0 0 1-2 2H7l-4 4V5a2 2 0 0 1 2-2h14a2 2 0 0 1 2 2z"/></svg>';
  status = document.createElement("div");
  status.className = "status";
  status.setAttribute("part", "status");
  status.setAttribute("role", "status");
  status.setAttribute("aria-live", "polite");
  status.hidden = true;
  shadow.appendChild(button);
  shadow.appendChild(status);
}

/** Put the toggle in the page (once the body exists). */
export function mountToggle() {
  if (state.phase === "destroyed") return;
  (document.body || document.documentElement).appendChild(host);
  performance.mark("autopilot:toggle");
  // The bar was left open on the previous page (or data-open): its frame and composer show at once.
  if (state.wantOpen) showComposer();
}

/**
 * The status card: a line of text and, for a failure that can be retried, Retry.
 * @param {string} text
 * @param {(() => void) | null} [retry]
 */
export function showStatus(text, retry) {
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
export function hideStatus() { status.hidden = true; status.textContent = ""; }

/**
 * A click on the toggle before Python owns it: the bar's frame and composer show at once, focused (or close when
 * they have been showing for a while: a click just after they showed, by themselves on a later view or by a
 * double activation, keeps them open). When the reader acted counts (the event's time), not when a busy page got
 * to it.
 * @param {Event} [event]
 */
export function onToggleClick(event) {
  if (state.phase === "ready") return; // Python owns the toggle from now on
  const at = event && event.timeStamp ? event.timeStamp : performance.now();
  if (composerOpen() && at - composerOpenedAt() >= JUST_OPENED_MS) {
    hideComposer(true);
    return;
  }
  openEarly();
}

/** The reader (or the page) wants the bar before Python runs: show its frame and composer; start (or retry). */
export function openEarly() {
  if (state.phase === "ready") return;
  state.wantOpen = true;
  showComposer();
  if (state.cspError) { fail("csp", state.cspError); return; }
  button.setAttribute("aria-busy", "true");
  if (state.phase === "failed" && state.retryAction) { state.retryAction(); return; }
  if (state.phase !== "failed") showStatus(L("starting"));
  if (state.mode === "pyodide") startBoot(false);
  else if (pyscriptProbe && document.readyState === "complete") pyscriptProbe();
}

/**
 * The bar's shortcut, before Python owns it: it opens or closes as the bar's does (widget/ui/events.py).
 * @param {KeyboardEvent} event
 */
export function onShortcut(event) {
  if (event.altKey && event.shiftKey && !event.ctrlKey && !event.metaKey && event.code === "KeyA") {
    event.preventDefault();
    if (composerOpen()) hideComposer(true);
    else openEarly();
  }
}

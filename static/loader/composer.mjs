// The composer at the click: before Python runs, a click on the toggle (or the shortcut, or a bar left open on
// the previous page) shows the bar's frame with a focused, editable composer at once, plain JS in the toggle's
// shadow root. What the reader types is kept: Enter holds the message ("sends once connected"); when Python
// mounts the bar, it takes the text, the caret, the focus and the held message over (takeComposer) in the same
// task as it opens, so no frame shows neither. One dialog, one composer: this one is gone when the bar's is there.
// The reader's intent (the pointer on the toggle, or the focus) makes the frame ahead of the click, not displayed
// (prepareComposer), so the click only lays it out and shows it: on a slow CPU, making it in the click's own task
// held the focus back (docs/performance.md, "The reader at the click"). Not laid out ahead: laid out on hover, a
// reader who only hovered met main-thread waits on the host page (wall time, not CPU: likely the first font lookup),
// over the input-delay goal in some cold visits (docs/performance.md, "The host page").

import { L } from "./config.mjs";
import { button, status } from "./toggle.mjs";
import { state } from "./state.mjs";

/**
 * What the bar takes over (widget/ui/bar.py).
 * @typedef {object} EarlyComposer
 * @property {string} text what the reader typed
 * @property {number} start the caret (selection start)
 * @property {number} end
 * @property {boolean} focused the composer had the focus
 * @property {boolean} held Enter was pressed: send the text once connected
 * @property {boolean} open the frame was showing
 * @property {number} openedAt when the frame showed (performance.now()): a toggle click soon after keeps it open
 */

// Its look: the bar's panel and composer (static/skin.css), the same custom properties and defaults, so that the
// bar's own panel replaces it where it stands.
const CSS = ".early{position:fixed;right:var(--autopilot-offset-x,20px);bottom:var(--autopilot-offset-y,88px);" +
  "z-index:var(--autopilot-z,2147483001);width:var(--autopilot-width,400px);max-width:calc(100vw - 2*var(--autopilot-offset-x,20px));" +
  "height:var(--autopilot-height,min(680px,calc(100vh - 112px)));display:flex;flex-direction:column;box-sizing:border-box;" +
  "background:var(--autopilot-surface,#fff);color:var(--autopilot-text,#111827);font-family:var(--autopilot-font,ui-sans-serif,system-ui,sans-serif);" +
  "font-size:var(--autopilot-font-size,14px);line-height:1.5;border:1px solid var(--autopilot-border,#e3e6ec);" +
  "border-radius:var(--autopilot-radius,18px);box-shadow:var(--autopilot-shadow,0 24px 60px -12px rgba(15,23,42,.35),0 2px 8px rgba(15,23,42,.08));overflow:hidden}" +
  ":host([data-position=bottom-left]) .early{right:auto;left:var(--autopilot-offset-x,20px)}" +
  ".early[hidden]{display:none}.early[data-prepared]{display:none}.early *{box-sizing:border-box}" +
  ".early-head{display:flex;flex-direction:column;padding:12px 12px 12px 16px;border-bottom:1px solid var(--autopilot-border,#e3e6ec)}" +
  ".early-title{font-size:1.05em;font-weight:650;line-height:1.25}.early-state{font-size:.8em;color:var(--autopilot-muted,#5f6675)}" +
  ".early-body{flex:1;overflow:auto;padding:12px 16px}.early .status{position:static;width:auto;min-width:0;max-width:none;box-shadow:none;padding:0}" +
  ".early-composer{padding:12px 16px 9px;margin:0}" +
  ".early-row{display:flex;align-items:flex-end;gap:8px;border-radius:14px;background:var(--autopilot-surface,#fff);padding:6px 6px 6px 12px;" +
  "border:1px solid var(--autopilot-accent,#4f46e5);outline:2px solid var(--autopilot-accent,#4f46e5)}" +
  ".early-input{all:unset;flex:1;min-width:0;resize:none;white-space:pre-wrap;overflow-wrap:anywhere;font:inherit;line-height:1.45;padding:6px 0;" +
  "field-sizing:content;min-height:calc(1.45em + 12px);max-height:160px;overflow-y:auto}" +
  ".early-input::placeholder{color:var(--autopilot-muted,#5f6675);opacity:1}" +
  ".early-send{all:unset;width:34px;height:34px;display:grid;place-items:center;border-radius:10px;cursor:pointer;" +
  "background:var(--autopilot-accent,#4f46e5);color:var(--autopilot-on-accent,#fff)}.early-send svg{width:16px;height:16px}" +
  ".early-hint{margin:6px 2px 0;font-size:.74em;color:var(--autopilot-muted,#5f6675)}" +
  "@media (prefers-color-scheme:dark){:host(:not([data-theme=light])) .early,:host(:not([data-theme=light])) .early-row{" +
  "background:var(--autopilot-surface,#12151c);color:var(--autopilot-text,#eef0f5);border-color:var(--autopilot-border,#2b3140)}}" +
  ":host([data-theme=dark]) .early,:host([data-theme=dark]) .early-row{background:var(--autopilot-surface,#12151c);color:var(--autopilot-text,#eef0f5)}" +
  "@media (max-width:520px){.early{inset:0;width:100%;max-width:none;height:100%;border:0;border-radius:0}.early-hint{display:none}.early-input{font-size:16px}}";

/** @type {HTMLElement | null} */
let frame = null;
/** @type {HTMLTextAreaElement} */
let input;
/** @type {HTMLParagraphElement} */
let hint;
let held = false;
let openedAt = 0;

/**
 * The frame, made on first use; ``prepared``: not displayed yet (not laid out, not in the accessibility tree).
 * @param {boolean} prepared
 */
function make(prepared) {
  const shadow = /** @type {ShadowRoot} */ (button.getRootNode());
  try {
    const sheet = new CSSStyleSheet();
    sheet.replaceSync(CSS);
    shadow.adoptedStyleSheets = [...shadow.adoptedStyleSheets, sheet];
  } catch {
    const style = document.createElement("style");
    style.textContent = CSS;
    shadow.appendChild(style);
  }
  frame = document.createElement("section");
  frame.className = "early";
  if (prepared) frame.setAttribute("data-prepared", "");
  frame.setAttribute("part", "panel");
  frame.setAttribute("role", "dialog");
  frame.setAttribute("aria-label", L("dialog"));
  frame.setAttribute("aria-describedby", "ap-early-hint");
  frame.innerHTML = '<div class="early-head"><span class="early-title"></span><span class="early-state"></span></div>' +
    '<div class="early-body"></div><form class="early-composer" part="composer"><div class="early-row">' +
    '<textarea class="early-input" part="input" rows="1" enterkeyhint="send"></textarea>' +
    '<button type="submit" class="early-send" part="send"><svg viewBox="0 0 24 24" fill="none" stroke="currentColor" ' +
    'stroke-width="2" aria-hidden="true"><path d="M22 2 11 13"/><path d="m22 2-7 20-4-9-9-4z"/></svg></button></div>' +
    '<p class="early-hint" id="ap-early-hint" aria-live="polite"></p></form>';
  const q = (/** @type {string} */ sel) => /** @type {HTMLElement} */ (frame && frame.querySelector(sel));
  q(".early-title").textContent = L("dialog");
  // It says it is connecting, and takes every key meanwhile.
  q(".early-state").textContent = L("state_connecting");
  input = /** @type {HTMLTextAreaElement} */ (q(".early-input"));
  input.setAttribute("aria-label", L("input"));
  input.setAttribute("placeholder", L("state_connecting")); // as the bar's composer says while it connects
  q(".early-send").setAttribute("aria-label", L("send"));
  hint = /** @type {HTMLParagraphElement} */ (q(".early-hint"));
  hint.textContent = L("hint");
  const form = /** @type {HTMLFormElement} */ (q(".early-composer"));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); hold(); });
  input.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); hold(); }
    else if (ev.key === "Escape") { ev.preventDefault(); hideComposer(true); }
  });
  shadow.appendChild(frame);
}

/** Enter or Send: the message waits in the field until Python is connected, then is sent once. */
function hold() {
  if (!input.value.trim()) return;
  held = true;
  if (frame) frame.setAttribute("data-held", "true");
  hint.textContent = L("hint_held");
}

/** Whether the frame is showing. */
export const composerOpen = () => !!frame && !frame.hidden && !frame.hasAttribute("data-prepared");

/** The reader's intent: make the frame now, not displayed, so that a click only has to show it. */
export function prepareComposer() {
  if (!frame && state.phase !== "ready" && state.phase !== "destroyed") make(true);
}

/**
 * Show the frame and focus the composer, in this task (the next frame paints it); ``focus`` false: show only.
 * @param {boolean} [focus]
 */
export function showComposer(focus = true) {
  if (!frame) make(false);
  const el = /** @type {HTMLElement} */ (frame);
  el.removeAttribute("data-prepared");
  if (el.hidden || !openedAt) {
    openedAt = performance.now();
    // Shown while the page still loads (a bar left open on the previous page): the reader meets it once the page
    // is there, so a click "just after it showed" counts from the load.
    if (document.readyState !== "complete") {
      window.addEventListener("load", () => { if (openedAt) openedAt = performance.now(); }, { once: true });
    }
  }
  el.hidden = false;
  // The status card (a failed start and its Retry) shows inside the frame while it is there.
  const body = /** @type {HTMLElement} */ (el.querySelector(".early-body"));
  if (status.parentNode !== body) body.appendChild(status);
  button.setAttribute("aria-expanded", "true");
  button.setAttribute("aria-haspopup", "dialog");
  button.setAttribute("aria-label", L("close")); // as the bar's toggle says while it is open
  if (focus) input.focus();
}

/**
 * Hide the frame (what was typed stays); ``byReader``: Escape, the focus goes back to the toggle.
 * @param {boolean} [byReader]
 */
export function hideComposer(byReader) {
  if (!frame || !composerOpen()) return;
  frame.hidden = true;
  openedAt = 0;
  if (status.parentNode !== button.parentNode && button.parentNode) button.parentNode.appendChild(status);
  button.setAttribute("aria-expanded", "false");
  button.setAttribute("aria-label", L("open"));
  if (byReader) {
    state.wantOpen = false; // (the reader closed it: Python mounts the bar closed)
    button.focus();
  }
}

/**
 * Since when the frame has been showing (0: it is not).
 * @returns {number}
 */
export const composerOpenedAt = () => (composerOpen() ? openedAt : 0);

/**
 * The bar takes the composer over: its text, caret, focus and held message; the frame goes (null: never made).
 * @returns {EarlyComposer | null}
 */
export function takeComposer() {
  if (!frame) return null;
  if (frame.hasAttribute("data-prepared")) { // made for a click that did not come: nothing to take over
    frame.remove();
    frame = null;
    return null;
  }
  const root = /** @type {ShadowRoot} */ (frame.getRootNode());
  const taken = {
    text: input.value, start: input.selectionStart, end: input.selectionEnd,
    focused: root.activeElement === input, held: held && !!input.value.trim(), open: !frame.hidden, openedAt,
  };
  hideComposer(false);
  frame.remove();
  frame = null;
  held = false;
  return taken;
}

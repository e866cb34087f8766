// The sink sanitizer for rendered model output (HTML from widget/core/markdown.py's render_markdown).
//
// render_markdown already escapes raw HTML, drops images and keeps only http(s)/mailto links; this module is the
// second, independent layer in the page: a private DOMPurify instance with a strict allowlist.
//   tags:        p br strong em b i code pre blockquote ul ol li h1-h6 a table thead tbody tr th td hr del span
//   attributes:  href rel target (a only; href http:, https: or mailto: only), title (any of those tags),
//                class (code: "language-x"; span: "url"), start (ol, digits), align (th/td: left/right/center)
//   never:       style, event handlers, data-/aria- attributes, id/name, img/svg/math/iframe/form/input/video/
//                audio/object/embed/link/meta/base/... (not in the allowlist, and forbidden by name as well)
//   every <a>:   rel="noopener noreferrer" target="_blank" (afterSanitizeAttributes hook)
//
// API (plain values, easy to call from Pyodide):
//   sanitize(html) -> string                     sanitized HTML (the serialization of sanitizeToFragment's nodes)
//   sanitizeToFragment(html) -> DocumentFragment  sanitized nodes, never re-parsed from a string
//   setSafeHTML(element, html) -> element         replace element's children with sanitize(html)'s nodes
//   appendSafeHTML(element, html) -> element      append them (streaming: stable blocks only grow)
//   isSupported -> boolean                       false when DOMPurify cannot run here (then nothing renders)
import DOMPurify from "./vendor/purify.es.mjs";

const purify = DOMPurify(window); // our own instance: hooks and config do not touch anyone else's DOMPurify

const TAGS = ["p", "br", "strong", "em", "b", "i", "code", "pre", "blockquote", "ul", "ol", "li",
  "h1", "h2", "h3", "h4", "h5", "h6", "a", "table", "thead", "tbody", "tr", "th", "td", "hr", "del", "span"];
const FORBIDDEN_TAGS = ["img", "image", "svg", "math", "iframe", "frame", "frameset", "form", "input", "button",
  "textarea", "select", "video", "audio", "source", "track", "picture", "object", "embed", "applet", "link",
  "meta", "base", "style", "script", "noscript", "template", "portal", "use"];
const ATTRS = ["href", "title", "rel", "target", "class", "start", "align"];

// Which attribute may sit on which element, and what its value must look like.
/** @type {Record<string, Record<string, RegExp | null>>} */
const PER_TAG = {
  href: { A: null },
  rel: { A: null },
  target: { A: null },
  class: { CODE: /^language-[\w#.+-]{1,40}$/, SPAN: /^url$/ },
  start: { OL: /^[0-9]{1,9}$/ },
  align: { TH: /^(?:left|right|center)$/, TD: /^(?:left|right|center)$/ },
};
// Bidi controls and zero-width characters would make the URL a reader sees differ from the one followed.
const INVISIBLE = /[\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/;

const CONFIG = Object.freeze({
  ALLOWED_TAGS: TAGS,
  ALLOWED_ATTR: ATTRS,
  FORBID_TAGS: FORBIDDEN_TAGS,
  FORBID_ATTR: ["style", "id", "name", "src", "srcset", "action", "formaction", "xlink:href", "background"],
  // Tested by DOMPurify against the value with whitespace and control characters removed.
  ALLOWED_URI_REGEXP: /^(?:https?:\/\/[^/?#\\]|mailto:)/i,
  // Not URLs: without this, DOMPurify would test their values against ALLOWED_URI_REGEXP too.
  ADD_URI_SAFE_ATTR: ["rel", "target", "start", "align"],
  ALLOW_DATA_ATTR: false,
  ALLOW_ARIA_ATTR: false,
  ALLOW_UNKNOWN_PROTOCOLS: false,
  ALLOW_SELF_CLOSE_IN_ATTR: false,
  SAFE_FOR_TEMPLATES: false,
  WHOLE_DOCUMENT: false,
  KEEP_CONTENT: true,
});

purify.addHook("uponSanitizeAttribute", (node, data) => {
  const rule = PER_TAG[data.attrName];
  if (rule === undefined) return; // title, or an attribute the allowlist removes anyway
  const tag = node.nodeName;
  if (!(tag in rule)) { data.keepAttr = false; return; }
  const pattern = rule[tag];
  if (pattern && !pattern.test(data.attrValue)) data.keepAttr = false;
});

purify.addHook("afterSanitizeAttributes", (node) => {
  if (node.nodeName !== "A") return;
  const href = node.getAttribute("href");
  if (href !== null && INVISIBLE.test(href)) node.removeAttribute("href");
  node.setAttribute("rel", "noopener noreferrer");
  node.setAttribute("target", "_blank");
});

export const isSupported = Boolean(purify.isSupported);

/** @param {unknown} html */
function text(html) {
  return html === null || html === undefined ? "" : String(html);
}

/**
 * Sanitized HTML for `html` (a string; anything else is converted to one).
 * @param {unknown} html
 * @returns {string}
 */
export function sanitize(html) {
  // Serialized from the DOM result, so the string and fragment APIs agree: for an element with an `is`
  // attribute (which cannot be removed), DOMPurify's string mode leaves `is=""`, its DOM mode drops the element.
  const fragment = sanitizeToFragment(html);
  const box = fragment.ownerDocument.createElement("div"); // DOMPurify's inert document: nothing loads or runs
  box.append(fragment);
  return box.innerHTML;
}

/**
 * Sanitized nodes for `html`, as a DocumentFragment (no string round trip, so no re-parse).
 * @param {unknown} html
 * @returns {DocumentFragment}
 */
export function sanitizeToFragment(html) {
  if (!isSupported) return document.createDocumentFragment();
  // DOMPurify returns null when the parse has no <body> (e.g. a <frameset> document): that is "nothing".
  return purify.sanitize(text(html), { ...CONFIG, RETURN_DOM_FRAGMENT: true }) || document.createDocumentFragment();
}

/**
 * Replace `element`'s children with the sanitized nodes of `html`; returns `element`.
 * @param {Element} element
 * @param {unknown} html
 */
export function setSafeHTML(element, html) {
  element.replaceChildren(sanitizeToFragment(html));
  return element;
}

/**
 * Append the sanitized nodes of `html` to `element`; returns `element`.
 * @param {Element} element
 * @param {unknown} html
 */
export function appendSafeHTML(element, html) {
  element.append(sanitizeToFragment(html));
  return element;
}

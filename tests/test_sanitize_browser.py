"""static/sanitize.mjs in Chromium, with the DOMPurify payload corpus, in one page served from the relay's origin.

The page is fulfilled by Playwright at ``<relay>/__test__/sanitize.html``; ``sanitize.mjs``, DOMPurify, Pyodide and
the bundle are real requests to the relay. Every payload goes through two paths:
  (a) the payload as HTML straight into ``sanitize()`` (what a model could smuggle past any Markdown step);
  (b) the real pipeline: ``render_markdown`` in the page's Pyodide (bundle.zip), then ``sanitize()``.
Each result is inserted twice (as a string through ``innerHTML``, and as the fragment of ``sanitizeToFragment``).

Detection does not depend on what a payload does: ``alert``/``confirm``/``prompt``/``print``/``open`` count calls,
``error`` (capture, so resource errors too) and ``unhandledrejection`` count, a report-only CSP reports any inline
script, event handler, style attribute or load, and Playwright records every request after the page is ready.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import pytest_asyncio
from support import DIST
from test_markdown import corpus_payloads, html_violations

from widget.core.markdown import StreamingRenderer, render_markdown

pytestmark = pytest.mark.browser

NONCE = "t3st-n0nce"
CSP = ("default-src 'none'; "
       f"script-src 'self' 'nonce-{NONCE}' 'wasm-unsafe-eval'; "
       "connect-src 'self'; img-src 'none'; media-src 'none'; font-src 'none'; style-src 'none'; "
       "object-src 'none'; frame-src 'none'; child-src 'none'; worker-src 'none'; manifest-src 'none'; "
       "base-uri 'none'; form-action 'none'")

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>sanitize corpus</title>
<script nonce="__NONCE__">
(() => {
  window.__xss = 0;
  window.__xssLog = [];
  window.__phase = "load";
  window.__violations = [];
  const hit = (kind, detail) => {
    window.__xss += 1;
    window.__xssLog.push(kind + " [" + window.__phase + "]: " + String(detail).slice(0, 300));
  };
  for (const name of ["alert", "confirm", "prompt", "print", "open"]) {
    window[name] = function (...args) { hit(name, args.join(" ")); return null; };
  }
  window.addEventListener("error", (e) => {
    if (!e.isTrusted) return; // the test's own synthetic "error" events
    const t = e.target;
    hit("error", e.message || (t && t.outerHTML ? t.outerHTML : t && t.nodeName));
  }, true);
  window.addEventListener("unhandledrejection", (e) => hit("unhandledrejection", e.reason));
  document.addEventListener("securitypolicyviolation", (e) => {
    window.__violations.push({phase: window.__phase, directive: e.effectiveDirective, blocked: e.blockedURI,
                              sample: e.sample});
  });
})();
</script>
<script type="module" nonce="__NONCE__">
import * as sanitizer from "/widget/__BUILD__/sanitize.mjs";
window.__sanitizer = sanitizer;
window.__ready = true;
</script>
</head>
<body><main>
<div id="raw-string"></div><div id="raw-fragment"></div><div id="md-string"></div><div id="md-fragment"></div>
</main></body></html>
"""

BOOT_PYODIDE = """async (root) => {
  const t0 = performance.now();
  const mod = await import(root + "pyodide/pyodide.mjs");
  const pyodide = await mod.loadPyodide({indexURL: root + "pyodide/", fullStdLib: false});
  const bundle = new Uint8Array(await (await fetch(root + "bundle.zip")).arrayBuffer());
  pyodide.FS.mkdirTree("/lib/autopilot");
  pyodide.FS.writeFile("/lib/autopilot/bundle.zip", bundle);
  pyodide.runPython("import sys\\nsys.path.insert(0, '/lib/autopilot/bundle.zip')\\nimport widget.core.markdown");
  window.__pyodide = pyodide;
  return performance.now() - t0;
}"""

RENDER_IN_PYODIDE = """
import json, sys
from widget.core.markdown import StreamingRenderer, render_markdown
_payloads = json.loads(PAYLOADS_JSON)
_text = "\\n\\n".join(_payloads)
_r = StreamingRenderer()
for _end in range(60, len(_text) + 60, 60):
    _r.feed(_text[:_end])
json.dumps({"python": sys.version.split()[0], "html": [render_markdown(p) for p in _payloads],
            "streamed": _r.html, "whole": render_markdown(_text)})
"""

RUN_PY = """([code, payloads]) => {
  const py = window.__pyodide;
  py.globals.set("PAYLOADS_JSON", JSON.stringify(payloads));
  return py.runPython(code);
}"""

SANITIZE_AND_INSERT = """async ([raw, md]) => {
  const S = window.__sanitizer;
  // Captured first, so a sanitizer that let DOM clobbering through (<form name=createElement>) still gets a report.
  const make = Document.prototype.createElement.bind(document);
  const byId = Document.prototype.getElementById.bind(document);
  const normalize = (html) => { const t = make("template"); t.innerHTML = html; return t.innerHTML; };
  // Phase 1: sanitize everything (DOMPurify parses in an inert document).
  window.__phase = "sanitize";
  const rawStr = raw.map((p) => S.sanitize(p));
  const mdStr = md.map((h) => S.sanitize(h));
  const rawFrag = raw.map((p) => S.sanitizeToFragment(p));
  const mdFrag = md.map((h) => S.sanitizeToFragment(h));
  const settle = () => new Promise((resolve) => setTimeout(resolve, 300));
  await settle(); // violation reports are delivered as tasks: let this phase's arrive under its name
  // The sanitizer leaves render_markdown's output alone (the Python allowlist is inside DOMPurify's).
  window.__phase = "compare";
  const changed = [];
  md.forEach((h, i) => { if (normalize(h) !== mdStr[i]) changed.push([i, normalize(h), mdStr[i]]); });
  await settle();
  // Phase 2: insert into the live document and poke every element.
  window.__phase = "insert";
  const put = (id, items, asString) => {
    const box = byId(id);
    items.forEach((item, i) => {
      const div = make("div");
      div.className = "item";
      div.dataset.i = String(i);
      if (asString) div.innerHTML = item; else div.append(item);
      box.append(div);
    });
    return box;
  };
  const boxes = [put("raw-string", rawStr, true), put("raw-fragment", rawFrag, false),
                 put("md-string", mdStr, true), put("md-fragment", mdFrag, false)];
  const events = ["focus", "focusin", "blur", "mouseover", "mouseenter", "mousemove", "pointerover", "pointerenter",
                  "load", "error", "animationstart", "transitionend", "toggle", "input", "change", "scroll",
                  "keydown", "wheel", "beforetoggle", "contentvisibilityautostatechange"];
  for (const box of boxes) {
    for (const el of box.querySelectorAll("*")) {
      for (const type of events) el.dispatchEvent(new Event(type, {bubbles: false}));
      if (typeof el.focus === "function") el.focus();
    }
  }
  await new Promise((resolve) => setTimeout(resolve, 500));
  await new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)));
  window.__phase = "done";
  return {
    xss: window.__xss, log: window.__xssLog, violations: window.__violations, changed,
    html: Object.fromEntries(boxes.map((b) => [b.id, [...b.children].map((item) => item.innerHTML)])),
    counts: Object.fromEntries(boxes.map((b) => [b.id, b.querySelectorAll(":scope > .item").length])),
    sample: {raw: rawStr.slice(0, 3), md: mdStr.slice(0, 3)},
  };
}"""


def build_id() -> str:
    """The current build's id (the relay_server fixture brought the build up to date)."""
    return json.loads((DIST / "manifest.json").read_text())["build_id"]


class SanitizePage:
    """The test page and everything it did on the network."""

    def __init__(self, context: Any, page: Any) -> None:
        self.context = context
        self.page = page
        self.recording = False
        self.requests: list[str] = []
        self.websockets: list[str] = []
        self.popups: list[str] = []
        self.console_errors: list[str] = []
        self.page_errors: list[str] = []
        page.on("request", self._on_request)
        page.on("websocket", lambda ws: self.websockets.append(ws.url))
        page.on("popup", lambda p: self.popups.append(p.url))
        page.on("console", lambda m: self.console_errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.page_errors.append(str(e)))

    def _on_request(self, request: Any) -> None:
        if self.recording:
            self.requests.append(request.url)


@pytest_asyncio.fixture
async def sanitize_page(browser: Any, relay_server: Any) -> Any:
    """A fresh context with the test page at ``<relay>/__test__/sanitize.html``, sanitize.mjs loaded."""
    bid = build_id()
    if not (DIST / bid / "sanitize.mjs").is_file():
        pytest.fail("sanitize.mjs is missing from the build output")
    url = relay_server.url + "/__test__/sanitize.html"
    html = PAGE.replace("__NONCE__", NONCE).replace("__BUILD__", bid)
    context = await browser.new_context()
    page = await context.new_page()
    sp = SanitizePage(context, page)

    async def serve(route: Any) -> None:
        await route.fulfill(status=200, body=html, headers={
            "Content-Type": "text/html; charset=utf-8",
            "Content-Security-Policy-Report-Only": CSP,
            "Cache-Control": "no-store",
        })

    await page.route(url, serve)
    requests_before: list[str] = []
    page.on("request", lambda r: requests_before.append(r.url))
    await page.goto(url)
    await page.wait_for_function("window.__ready === true", timeout=15_000)
    root = f"{relay_server.url}/widget/{bid}/"
    assert f"{root}sanitize.mjs" in requests_before and f"{root}vendor/purify.es.mjs" in requests_before
    sp.root = root  # type: ignore[attr-defined]
    try:
        yield sp
    finally:
        await context.close()


def _sanitize_phase_ok(v: dict[str, Any]) -> bool:
    """Reports DOMPurify's inert parse causes: inline handlers, style attributes and <style> seen while parsing.

    Chromium checks the CSP when the parser meets them, even in DOMParser's script-less document; nothing runs or
    loads there (the counters and the request log would show it). Anything naming a URL is not one of these.
    """
    return v["blocked"] == "inline" and v["directive"] in ("script-src-attr", "style-src-attr", "style-src-elem")


async def test_corpus_in_chromium_runs_nothing_and_loads_nothing(sanitize_page: SanitizePage) -> None:
    sp, page = sanitize_page, sanitize_page.page
    payloads = [p["payload"] for p in corpus_payloads()]
    assert len(payloads) == 223

    await page.evaluate(BOOT_PYODIDE, sp.root)  # type: ignore[attr-defined]
    await page.evaluate("() => { window.__xss = 0; window.__xssLog = []; window.__violations = []; "
                        "window.__phase = 'render'; }")
    sp.recording = True  # from here on, nothing may touch the network

    rendered = json.loads(await page.evaluate(RUN_PY, [RENDER_IN_PYODIDE, payloads]))
    assert rendered["python"].startswith("3.14")
    # The page's Pyodide (3.14, markdown from bundle.zip) renders exactly as CPython does.
    assert rendered["html"] == [render_markdown(p) for p in payloads]
    assert rendered["streamed"] == rendered["whole"]

    report = await page.evaluate(SANITIZE_AND_INSERT, [payloads, rendered["html"]])

    assert report["xss"] == 0, report["log"]
    insert_violations = [v for v in report["violations"] if v["phase"] != "sanitize"]
    assert insert_violations == [], insert_violations[:10]
    odd = [v for v in report["violations"] if not _sanitize_phase_ok(v)]
    assert odd == [], sorted({(v["directive"], v["blocked"]) for v in odd})
    assert sp.requests == [], sp.requests[:10]
    assert sp.websockets == [] and sp.popups == []
    assert sp.page_errors == [], sp.page_errors[:5]
    assert report["counts"] == {"raw-string": 223, "raw-fragment": 223, "md-string": 223, "md-fragment": 223}
    assert report["changed"] == [], report["changed"][:3]
    for box, items in report["html"].items():  # each item re-parsed from the live DOM's innerHTML
        problems = [(i, html_violations(html, require_url_shown=box.startswith("md-"))) for i, html in enumerate(items)]
        problems = [p for p in problems if p[1]]
        assert problems == [], f"{box}: {problems[:10]}"
    # Both insertion paths give the same DOM.
    assert report["html"]["raw-string"] == report["html"]["raw-fragment"]
    assert report["html"]["md-string"] == report["html"]["md-fragment"]


async def test_sanitize_api_and_policy(sanitize_page: SanitizePage) -> None:
    page = sanitize_page.page
    result = await page.evaluate("""() => {
      const S = window.__sanitizer;
      const box = document.createElement("div");
      document.body.append(box);
      S.setSafeHTML(box, '<p onclick="alert(1)">x<img src=x></p><a href="https://example.com">y</a>');
      const afterSet = box.innerHTML;
      S.appendSafeHTML(box, '<p>more</p><a href="//evil.example">z</a>');
      const afterAppend = box.innerHTML;
      S.setSafeHTML(box, "");
      const afterClear = box.innerHTML;
      // DOMPurify's DOM mode returns null when the parse has no body (payload 88 of the corpus).
      S.setSafeHTML(box, '<div id="31"><frameset onload=alert(31)>');
      return {
        afterFrameset: box.innerHTML,
        isAttr: [S.sanitize('<b is="foo">bar</b>'), S.sanitizeToFragment('<b is="foo">bar</b>').childNodes.length],
        isSupported: S.isSupported,
        afterSet, afterAppend, afterClear,
        nonString: [S.sanitize(null), S.sanitize(undefined), S.sanitize(42)],
        fragmentType: S.sanitizeToFragment("<b>x</b>").nodeType,
        cases: Object.fromEntries([
          ["js", '<a href="javascript:alert(1)">a</a>'],
          ["js-entity", '<a href="&#106;avascript:alert(1)">a</a>'],
          ["js-tab", '<a href="java\\tscript:alert(1)">a</a>'],
          ["data", '<a href="data:text/html,x">a</a>'],
          ["relative", '<a href="/x">a</a>'],
          ["protocol-relative", '<a href="//evil.example/x">a</a>'],
          ["http", '<a href="http://example.com/" target="_self" rel="opener">a</a>'],
          ["mailto", '<a href="mailto:a@example.com">a</a>'],
          ["bidi", '<a href="https://example.com/\\u202etxt.exe">a</a>'],
          ["class-code", '<code class="language-py">x</code><code class="evil">y</code>'],
          ["class-span", '<span class="url">x</span><span class="hidden">y</span><p class="x">z</p>'],
          ["start", '<ol start="3"><li>x</li></ol><ul start="3"><li>y</li></ul>'],
          ["align", '<table><tr><td align="left">x</td><td align="javascript:x">y</td></tr></table>'],
          ["href-on-span", '<span href="https://example.com">x</span>'],
          ["style", '<p style="color:red">x</p><style>p{}</style>'],
          ["data-aria", '<p data-x="1" aria-label="l" id="i" name="n">x</p>'],
          ["forbidden", '<svg><a href="https://x"><text>t</text></a></svg><math><mi>x</mi></math>' +
                        '<iframe src="https://x"></iframe><form action="https://x"><input value=v></form>' +
                        '<video src=x></video><audio src=x></audio><object data=x></object><embed src=x>' +
                        '<link rel=stylesheet href=x><meta http-equiv=refresh content="0;url=x"><base href=x>'],
          ["title", '<h2 title="t">x</h2><del>d</del><hr><br>'],
        ].map(([k, v]) => [k, S.sanitize(v)])),
      };
    }""")
    assert result["isSupported"] is True
    assert result["afterSet"] == ('<p>x</p><a href="https://example.com" rel="noopener noreferrer" '
                                  'target="_blank">y</a>')
    assert result["afterAppend"].endswith('<p>more</p><a rel="noopener noreferrer" target="_blank">z</a>')
    assert result["afterClear"] == ""
    assert result["afterFrameset"] == ""  # not the text "null"
    assert result["isAttr"] == ["", 0]  # string and DOM results agree: the element with `is` is dropped
    assert result["nonString"] == ["", "", "42"]
    assert result["fragmentType"] == 11
    c = result["cases"]
    bare = '<a rel="noopener noreferrer" target="_blank">a</a>'
    for key in ("js", "js-entity", "js-tab", "data", "relative", "protocol-relative", "bidi"):
        assert c[key] == bare, (key, c[key])
    assert c["http"] == '<a href="http://example.com/" target="_blank" rel="noopener noreferrer">a</a>'
    assert c["mailto"] == '<a href="mailto:a@example.com" rel="noopener noreferrer" target="_blank">a</a>'
    assert c["class-code"] == '<code class="language-py">x</code><code>y</code>'
    assert c["class-span"] == '<span class="url">x</span><span>y</span><p>z</p>'
    assert c["start"] == '<ol start="3"><li>x</li></ol><ul><li>y</li></ul>'
    assert c["align"] == '<table><tbody><tr><td align="left">x</td><td>y</td></tr></tbody></table>'
    assert c["href-on-span"] == "<span>x</span>"
    assert c["style"] == "<p>x</p>"
    assert c["data-aria"] == "<p>x</p>"
    assert "<" not in c["forbidden"].replace("<text>", ""), c["forbidden"]
    assert c["title"] == '<h2 title="t">x</h2><del>d</del><hr><br>'
    for key, html in c.items():
        assert html_violations(html, require_url_shown=False) == [], (key, html)


async def test_streamed_blocks_sanitize_like_the_whole(sanitize_page: SanitizePage) -> None:
    """Appending the stable parts and replacing the tail gives the DOM of the whole answer."""
    text = ("# Plan\n\nSee [the docs](https://example.com/docs) and <script>alert(1)</script>.\n\n"
            "```html\n<img src=x onerror=alert(1)>\n```\n\n- one\n- two\n\n"
            "![pixel](https://evil.example/p.png)\n\nEnd.")
    r = StreamingRenderer()
    steps = []
    for end in range(7, len(text) + 7, 7):
        r.feed(text[:end])
        steps.append([r.appended, r.tail])
    whole = render_markdown(text)
    result = await sanitize_page.page.evaluate("""([steps, whole]) => {
      const S = window.__sanitizer;
      const stable = document.createElement("div"), tail = document.createElement("div");
      for (const [appended, t] of steps) {
        if (appended) S.appendSafeHTML(stable, appended);
        S.setSafeHTML(tail, t);
      }
      const ref = document.createElement("div");
      S.setSafeHTML(ref, whole);
      const both = document.createElement("div");
      both.append(...stable.cloneNode(true).childNodes, ...tail.cloneNode(true).childNodes);
      return [both.innerHTML.replace(/>\\s+</g, "><"), ref.innerHTML.replace(/>\\s+</g, "><"), window.__xss];
    }""", [steps, whole])
    streamed, reference, xss = result
    assert streamed == reference
    assert xss == 0
    assert "<img" not in streamed and "<script" not in streamed
    assert html_violations(streamed) == []

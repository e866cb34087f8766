"""The DOMPurify payload corpus rendered *as assistant answers through the bar's real render path*, in one page.

Every payload becomes a committed assistant message (store → bar → ``render_markdown`` → ``sanitize.mjs`` →
DOM), and all of them together stream in as one answer (``StreamingRenderer``: stable blocks appended, the tail
replaced per chunk). The same payloads also go where model text is *not* Markdown — function names, arguments,
results and errors of calls, ask-user questions, options and placeholders — which must be text.

Detection does not depend on what a payload does: ``alert``/``confirm``/``prompt``/``print``/``open`` count calls,
``error`` events (capture: resource errors too) and ``unhandledrejection`` count, Playwright records every
request and WebSocket opened while rendering, and the rendered DOM is checked for elements, attributes and
URLs that must not be there.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import pytest_asyncio
from support import open_page
from test_bar import fixture_bar_relay, js_root, py  # noqa: F401
from test_markdown import corpus_payloads, html_violations

pytestmark = pytest.mark.browser

PAGE = """<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>corpus</title>
<script>
  window.__hits = [];
  const hit = (kind, detail) => window.__hits.push(kind + ": " + String(detail).slice(0, 200));
  for (const name of ["alert", "confirm", "prompt", "print", "open"]) {
    window[name] = function (...args) { hit(name, args.join(" ")); return null; };
  }
  window.addEventListener("error", (e) => {
    const t = e.target; hit("error", e.message || (t && t.outerHTML ? t.outerHTML : t && t.nodeName)); }, true);
  window.addEventListener("unhandledrejection", (e) => hit("unhandledrejection", e.reason));
</script></head><body><p>corpus page</p>
<script src="/widget/autopilot.js" data-relay="{relay}" data-app="demo" data-boot="eager" data-open="true"></script>
</body></html>"""

CHECK_DOM = """
const bad = [];
const all = r.querySelectorAll('.messages *, .calls *, .ask-user *');
const allowedTags = new Set(arg.tags);
for (const el of all) {
  const tag = el.tagName.toLowerCase();
  const inContent = !!el.closest('.content');
  if (inContent && !allowedTags.has(tag) && !['div'].includes(tag)) bad.push('tag ' + tag);
  if (['script', 'img', 'iframe', 'object', 'embed', 'svg', 'math', 'style', 'link', 'meta', 'base', 'video',
       'audio', 'source', 'picture', 'frame', 'template', 'form'].includes(tag) && !el.closest('.icon, .call-icon'))
    bad.push('element ' + tag);
  for (const a of el.attributes) {
    const n = a.name.toLowerCase();
    if (n.startsWith('on')) bad.push('handler ' + n + ' on ' + tag);
    if (n === 'style') bad.push('style on ' + tag);
    if (n === 'srcdoc' || n === 'src' || n === 'srcset' || n === 'xlink:href' || n === 'formaction') bad.push(n);
  }
  if (tag === 'a' && inContent) {
    const href = el.getAttribute('href') || '';
    if (!/^(https?:\\/\\/|mailto:)/i.test(href)) bad.push('href ' + href.slice(0, 60));
    if (el.getAttribute('rel') !== 'noopener noreferrer' || el.getAttribute('target') !== '_blank')
      bad.push('link attrs ' + el.outerHTML.slice(0, 80));
  }
}
return bad;
"""


@pytest_asyncio.fixture(scope="module")
async def corpus_page(browser: Any, bar_relay: Any, page_server: Any):
    url = page_server.add("/__test__/bar-corpus.html", PAGE.replace("{relay}", bar_relay.url))
    ctx, page, log = await open_page(browser, url)
    yield page, log
    await ctx.close()


async def render_and_watch(page: Any, log: Any, code: str) -> list[str]:
    """Run ``code`` in the page and return the requests and sockets opened meanwhile (and for a moment after)."""
    requests_before, sockets_before = len(log.requests), len(log.websockets)
    await py(page, code)
    await page.wait_for_timeout(600)  # anything the rendering would load has time to start
    return log.requests[requests_before:] + log.websockets[sockets_before:]


async def test_payloads_as_answers_run_nothing_and_load_nothing(corpus_page):
    page, log = corpus_page
    payloads = [p["payload"] for p in corpus_payloads()]
    assert len(payloads) >= 200
    await py(page, "import json\nPAYLOADS = json.loads(" + repr(json.dumps(payloads)) + ")\nlen(PAYLOADS)")

    # 1. Each payload as a committed assistant answer.
    loaded = await render_and_watch(page, log, """
for i, p in enumerate(PAYLOADS):
    client.session.add_message({"id": f"xss-{i}", "role": "assistant", "content": p})
client.events.emit("messagesChanged", None)
bar.flush()
True""")
    assert loaded == []
    count = await js_root(page, "return r.querySelectorAll('.message.assistant[data-key^=\"xss-\"]').length;")
    assert count == len([p for p in payloads if p.strip()])  # a blank answer is not shown (visible_messages)

    # 2. All of them as one streamed answer, chunk by chunk through the client's streaming session.
    loaded = await render_and_watch(page, log, """
text = "\\n\\n".join(PAYLOADS)
client.session.handle("completion.started", {"turn_id": "tx", "message_id": "xss-stream"})
for i in range(0, len(text), 97):
    client.session.handle("completion_stream", {"message_id": "xss-stream", "delta": text[i:i + 97]})
    client.events.emit("messagesChanged", None)
    bar.flush()
client.session.handle("completion.ended", {"message": {"id": "xss-stream", "role": "assistant", "content": text}})
client.session.handle("completion.finished", {"turn_id": "tx", "status": "done"})
client.events.emit("messagesChanged", None)
bar.flush()
True""")
    assert loaded == []

    # 3. The same payloads where model text is not Markdown: call names, arguments, results, errors; ask-user.
    loaded = await render_and_watch(page, log, """
calls = [{"id": f"xc-{i}", "name": p[:80], "arguments": {"q": p}, "status": "error" if i % 2 else "success",
          "result": p, "error": p, "duration_ms": 1.0, "total_ms": 2.0} for i, p in enumerate(PAYLOADS)]
client.session.add_message({"id": "xss-calls", "role": "assistant", "content": "calls", "function_calls": calls})
client.events.emit("messagesChanged", None)
bar.flush()
for d in bar.root.querySelectorAll('[data-key="xss-calls"] details'):
    d.open = True
prompts = [{"id": f"xp-{i}", "type": ["text", "bool", "radiolist", "checklist"][i % 4], "question": p,
            "arguments": {"placeholder": p, "yes_label": p, "no_label": p,
                          "options": [{"value": p, "label": p}]}} for i, p in enumerate(PAYLOADS[:40])]
client._set_pending_ask_user(prompts)
bar.flush()
for i in range(len(prompts)):
    bar.bar._select_tab(i, focus=False)
True""")
    assert loaded == []
    assert await page.evaluate("window.__hits") == []

    # The rendered DOM holds nothing that runs or loads, and every link is a checked, visible, new-tab link.
    from widget.core.markdown import ALLOWED_TAGS

    bad = await js_root(page, CHECK_DOM, {"tags": sorted(ALLOWED_TAGS)})
    assert bad == []
    contents = await js_root(page, """
        return [...r.querySelectorAll('.message.assistant[data-key^="xss-"] .content')].map(c =>
            [...c.children].map(d => d.innerHTML).join(''));""")
    problems = [(i, v) for i, html in enumerate(contents) for v in html_violations(html)]
    assert problems == []
    # Non-Markdown model text came out as text (the payload's own characters are visible).
    shown = await js_root(page, "return r.querySelector('[data-key=\"xss-calls\"] .call-name').textContent;")
    assert shown == payloads[0][:80]
    question = await js_root(page, "return r.querySelector('.ask-question').textContent;")
    assert question == payloads[0]

    await py(page, "client._set_pending_ask_user([])\nbar.flush()\nTrue")
    assert await page.evaluate("window.__hits") == []
    assert log.page_errors == []

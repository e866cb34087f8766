"""An answer's cited sources in Chromium (widget/ui/sources.py): numbered markers in the text, one row per source
under it, their links, the keyboard, the copies, a reload, and an uncited answer withdrawn and replaced.

Most answers are synthetic relay events delivered on the page's own socket.io WebSocket (the whole client path:
socket.io-client, bridge.mjs, the transport, the session, the store, the bar), as tests/test_bar_streaming.py
does, so every edge is exact; one reload test restores a conversation the relay stored, its answer given
``sources`` on the way (the conversation GET as a relay with a docs index returns it). Each of those tests starts
from a reloaded page, so the synthetic events' ``seq`` never meets the relay's own. The last tests run the real
thing: a relay whose app has a docs index (``autopilot-relay index`` of two Markdown pages served under the relay's
own host), the demo model searching it and citing, a reload, and an answer the docs do not support withdrawn.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from conftest import require_build
from support import PageServer, RelayServer, free_port, open_page, start_relay, wait_mark
from test_bar import (  # noqa: F401 - fixture_bar_relay registers the bar_relay fixture here
    BarPage,
    fixture_bar_relay,
    js_root,
    open_bar,
    py,
    q,
    send,
    user_count,
    wait_turn_done,
)
from test_bar_streaming import CAPTURE_SOCKETS, DELIVER, frames

pytestmark = pytest.mark.browser

#: The answer as the model wrote it: citations split across chunks while streaming, an id the turn never produced
#: ([s9]), citations in a code span and a code block (kept literally), one in a link's text.
ANSWER = (
    "Colours are set with custom properties [s1]. The cart holds two lamps [t2][s3].\n"
    "An id nobody produced vanishes [s9].\n\n"
    "In code it stays: `--autopilot-accent [s1]`.\n\n"
    "```css\n/* [s1] */\n```\n\n"
    "A suspicious source [s4]. See [the guide [s1]](https://example.com/guide).\n"
)


def sources(origin: str) -> list[dict[str, Any]]:
    """The answer's ``sources``: a docs section on the page's host, a tool reply, a docs section on another host
    and one whose URL is not http(s)."""
    return [
        {"id": "s1", "n": 1, "kind": "docs", "title": "Theming › Colours",
         "url": f"{origin}/docs/theming/#colours:~:text=custom%20properties"},
        {"id": "t2", "n": 2, "kind": "tool", "title": "Cart contents"},
        {"id": "s3", "n": 3, "kind": "docs", "title": "Plans › Limits", "url": "https://docs.example.com/plans/#limits"},
        {"id": "s4", "n": 4, "kind": "docs", "title": "Sneaky", "url": "javascript:alert(1)"},
    ]


ROW_TEXTS = ["1. Theming › Colours · from the site", "2. Cart contents", "3. Plans › Limits · from the site",
             "4. Sneaky · from the site"]

#: Records, on every change of the conversation's DOM, whether an answer showed a raw citation token outside code,
#: an error message or a visible notice (``window.__seen``).
WATCH = """() => {
  const r = document.getElementById('autopilot-bar-host').shadowRoot;
  const seen = window.__seen = {raw: [], errors: 0, notices: 0, texts: []};
  const prose = (el) => { const w = document.createTreeWalker(el, NodeFilter.SHOW_TEXT); let s = '', n;
    while ((n = w.nextNode())) if (!n.parentElement.closest('code, pre, .cite')) s += n.nodeValue; return s; };
  const look = () => {
    for (const c of r.querySelectorAll('.message.assistant .content')) {
      const t = prose(c);
      if (/\\[[st][0-9]+|\\[[st]?$/.test(t)) seen.raw.push(t);  // a token, or what may become one
      if (t && !seen.texts.includes(t)) seen.texts.push(t);
    }
    seen.errors = Math.max(seen.errors, r.querySelectorAll('.message.error').length);
    const notice = r.querySelector('.notice');
    if (notice && !notice.hidden) seen.notices += 1;
  };
  window.__watch = new MutationObserver(look);
  window.__watch.observe(r, {subtree: true, childList: true, characterData: true, attributes: true});
}"""


@pytest_asyncio.fixture(scope="module")
async def src_page(browser: Any, bar_relay: Any) -> AsyncIterator[BarPage]:
    """The demo page with its WebSockets captured and the clipboard allowed, booted once per module."""
    require_build()
    ctx = await browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    await ctx.add_init_script(CAPTURE_SOCKETS)
    ctx, page, log = await open_page(browser, bar_relay.url + "/", context=ctx)
    yield BarPage(context=ctx, page=page, log=log, relay=bar_relay)
    await ctx.close()


async def fresh(page: Any) -> None:
    """Reload (the client's ``seq`` is the relay's again) and open the bar."""
    await page.reload()
    await page.evaluate("() => { if (window.Autopilot && window.Autopilot.boot) window.Autopilot.boot(); }")
    await wait_mark(page, "autopilot:joined")
    await open_bar(page)


async def deliver(page: Any, events: list[tuple[str, dict[str, Any]]], gap: int = 0) -> None:
    """Hand ``events`` to the page's socket.io connection, numbered after the client's last ``seq``."""
    first = await py(page, "client.seq.last_seq + 1")
    await page.evaluate(DELIVER, {"frames": frames(events, first), "gap": gap})


def answer_events(mid: str, text: str, srcs: list[dict[str, Any]] | None, *, chunk: int = 5,
                  finish: bool = True, actions: list[dict[str, Any]] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """One streamed assistant round: started, the text in ``chunk``-character deltas, ended with ``sources``."""
    message: dict[str, Any] = {"id": mid, "role": "assistant", "content": text}
    if srcs is not None:
        message["sources"] = srcs
    if actions is not None:
        message["actions"] = actions
    events: list[tuple[str, dict[str, Any]]] = [("completion.started", {"turn_id": f"t-{mid}", "message_id": mid})]
    events += [("completion_stream", {"message_id": mid, "delta": text[i:i + chunk]})
               for i in range(0, len(text), chunk)]
    events.append(("completion.ended", {"message": message, "tool_messages": []}))
    if finish:
        events.append(("completion.finished", {"turn_id": f"t-{mid}", "status": "done"}))
    return events


async def wait_rows(page: Any, mid: str, count: int) -> None:
    await page.wait_for_function(
        "([mid, n]) => document.getElementById('autopilot-bar-host').shadowRoot"
        ".querySelectorAll(`[data-key=\"${mid}\"] ol.sources > li`).length === n", arg=[mid, count])


async def answer_state(page: Any, mid: str) -> dict[str, Any]:
    """What the answer ``mid`` shows: its markers, its rows and their links, its prose."""
    return await js_root(page, """
        const m = r.querySelector(`[data-key="${arg}"]`);
        const ol = m.querySelector('ol.sources');
        return {
          markers: [...m.querySelectorAll('.content a.cite')].map((a) => ({text: a.textContent,
              label: a.getAttribute('aria-label'), target: (r.getElementById(a.getAttribute('href').slice(1)) || {})
              .dataset?.n, tag: a.tagName})),
          plainMarkers: [...m.querySelectorAll('.content span.cite')].map((s) => s.textContent),
          content: m.querySelector('.content').textContent,
          code: [...m.querySelectorAll('.content code')].map((c) => c.textContent),
          listLabel: ol && ol.getAttribute('aria-label'), listTag: ol && ol.tagName, listHidden: ol && ol.hidden,
          rows: [...m.querySelectorAll('ol.sources > li')].map(
              (li) => li.textContent.replace(/\\s+\\(opens in a new tab\\)/, '')),
          links: [...m.querySelectorAll('ol.sources > li')].map((li) => { const a = li.querySelector('a');
              return a && {href: a.getAttribute('href'), target: a.getAttribute('target'), rel: a.getAttribute('rel'),
                           text: a.textContent}; }),
        };""", mid)


async def test_markers_and_rows_render_unknown_ids_dropped_links_checked(src_page: BarPage) -> None:
    page = src_page.page
    await fresh(page)
    origin = src_page.relay.url
    await page.evaluate(WATCH)
    await deliver(page, answer_events("src-1", ANSWER, sources(origin), finish=False), gap=15)
    await wait_rows(page, "src-1", 4)
    await deliver(page, [("completion.finished", {"turn_id": "t-src-1", "status": "done"})])
    state = await answer_state(page, "src-1")
    seen = await page.evaluate("() => { window.__watch.disconnect(); return window.__seen; }")
    # While streaming, no raw token ever showed (not even half of one: "[s", "[s1").
    assert seen["raw"] == [], seen["raw"]
    assert len(seen["texts"]) > 3  # it did stream: several texts were seen
    # Markers: in the text's order, each named for its source and linking to its row; the one in a link's text
    # is plain text (no link in a link); [s9] is gone with the space before it.
    assert [(m["text"], m["label"], m["target"]) for m in state["markers"]] == [
        ("[1]", "Source 1: Theming › Colours", "1"), ("[2]", "Source 2: Cart contents", "2"),
        ("[3]", "Source 3: Plans › Limits", "3"), ("[4]", "Source 4: Sneaky", "4")]
    assert state["plainMarkers"] == ["[1]"]
    assert "s9" not in state["content"] and "vanishes." in state["content"]
    assert "custom properties[1]. The cart holds two lamps[2][3]." in state["content"]
    # Code keeps the token literally.
    assert state["code"] == ["--autopilot-accent [s1]", "/* [s1] */\n"]
    # Rows: in n order, the list named "Sources".
    assert (state["listTag"], state["listLabel"], state["listHidden"]) == ("OL", "Sources", False)
    assert state["rows"] == ROW_TEXTS
    same_host, tool, other_host, sneaky = state["links"]
    assert same_host == {"href": f"{origin}/docs/theming/#colours:~:text=custom%20properties", "target": None,
                         "rel": None, "text": "Theming › Colours"}
    assert tool is None and sneaky is None  # a tool reply and a javascript: URL are not links
    assert other_host is not None
    assert (other_host["href"], other_host["target"], other_host["rel"]) == (
        "https://docs.example.com/plans/#limits", "_blank", "noopener noreferrer")
    assert other_host["text"] == "Plans › Limits (opens in a new tab)"
    # The markers' brackets take no room: a reader sees the number (a copy gets "[1]").
    assert await js_root(page, """const a = r.querySelector('[data-key="src-1"] a.cite');
        return [a.innerText, [...a.querySelectorAll('.cite-bracket')].map((b) => b.getBoundingClientRect().width),
                a.getBoundingClientRect().width > 0];""") == ["[1]", [0, 0], True]
    # No error at any moment.
    assert seen["errors"] == 0 and seen["notices"] == 0
    # A marker press moves the focus to its row; the page's URL is not touched.
    await page.locator(q('[data-key="src-1"] .content a.cite')).nth(2).click()
    focused = await js_root(page, "const a = r.activeElement; return a && [a.tagName, a.dataset.n];")
    assert focused == ["LI", "3"]
    assert await page.evaluate("() => location.hash") == ""
    assert src_page.log.page_errors == []


async def test_keyboard_reaches_markers_and_source_links(src_page: BarPage) -> None:
    page = src_page.page
    await fresh(page)
    await deliver(page, answer_events("src-kb", ANSWER, sources(src_page.relay.url), chunk=400))
    await wait_rows(page, "src-kb", 4)
    await page.locator(q('[data-key="src-kb"] .content a.cite')).first.focus()
    order = []
    for _ in range(8):
        order.append(await js_root(page, """const a = r.activeElement;
            return a ? a.className + ':' + (a.getAttribute('aria-label') || a.textContent) : '';"""))
        await page.keyboard.press("Tab")
    # Tab goes through the four markers, the answer's own link, then the two source links, then the answer's tools.
    assert order[:4] == ["cite:Source 1: Theming › Colours", "cite:Source 2: Cart contents",
                         "cite:Source 3: Plans › Limits", "cite:Source 4: Sneaky"], order
    assert order[4].startswith(":the guide"), order
    assert order[5:7] == ["source-link:Theming › Colours", "source-link:Plans › Limits (opens in a new tab)"], order
    # Enter on a marker moves the focus to its row.
    await page.locator(q('[data-key="src-kb"] .content a.cite')).nth(1).focus()
    await page.keyboard.press("Enter")
    assert await js_root(page, "return r.activeElement.dataset.n;") == "2"
    assert await page.evaluate("() => location.hash") == ""


async def test_copy_keeps_the_sources_as_footnotes_or_a_list(src_page: BarPage) -> None:
    page = src_page.page
    await fresh(page)
    origin = src_page.relay.url
    await deliver(page, answer_events("src-copy", ANSWER, sources(origin), chunk=400))
    await wait_rows(page, "src-copy", 4)
    tools = page.locator(q('[data-key="src-copy"] .answer-tools'))
    await tools.locator("button.copy").first.click()
    await page.locator(q('[data-key="src-copy"] .answer-tools button.copy[data-copied]')).wait_for()
    markdown = await page.evaluate("() => navigator.clipboard.readText()")
    assert markdown == (
        "Colours are set with custom properties[^1]. The cart holds two lamps[^2][^3].\n"
        "An id nobody produced vanishes.\n\n"
        "In code it stays: `--autopilot-accent [s1]`.\n\n"
        "```css\n/* [s1] */\n```\n\n"
        "A suspicious source[^4]. See [the guide[^1]](https://example.com/guide).\n\n"
        f"[^1]: [Theming › Colours]({origin}/docs/theming/#colours:~:text=custom%20properties)\n"
        "[^2]: Cart contents\n"
        "[^3]: [Plans › Limits](https://docs.example.com/plans/#limits)\n"
        "[^4]: Sneaky\n")
    await page.wait_for_timeout(1700)  # the first button says "Copied" for a moment
    await tools.locator("button.copy").nth(1).click()
    await page.wait_for_function(
        "() => [...document.getElementById('autopilot-bar-host').shadowRoot"
        ".querySelectorAll('[data-key=\"src-copy\"] .answer-tools button.copy')][1].textContent === 'Copied'")
    text = await page.evaluate("() => navigator.clipboard.readText()")
    assert "custom properties[1]. The cart holds two lamps[2][3]." in text, text
    assert "[s" not in text.split("In code")[0] and "`" not in text
    assert text.endswith(
        "Sources\n"
        f"1. Theming › Colours ({origin}/docs/theming/#colours:~:text=custom%20properties)\n"
        "2. Cart contents\n"
        "3. Plans › Limits (https://docs.example.com/plans/#limits)\n"
        "4. Sneaky"), text


def normalized(html: str) -> str:
    """A message's HTML without the element ids the bar numbers per page (rows, forms)."""
    return re.sub(r'(id|href|aria-controls)="#?ap-[a-z-]+-[0-9]+(?:-[0-9]+)?"', r'\1=""', html)


async def test_a_restored_answer_shows_markers_and_rows_as_live(src_page: BarPage) -> None:
    page, ctx = src_page.page, src_page.context
    await fresh(page)
    origin = src_page.relay.url
    await send(page, "hello, sources")
    answer_id = await py(page, "[m for m in store.messages if m.get('role') == 'assistant'][-1]['id']")
    conversation_url = await py(page, "client.conversation_url")

    async def with_sources(route: Any) -> None:
        response = await route.fetch()
        body = await response.json()
        for m in body.get("messages") or []:
            if m.get("id") == answer_id:
                m["content"], m["sources"] = ANSWER, sources(origin)
        await route.fulfill(response=response, body=json.dumps(body))

    pattern = re.compile(re.escape(conversation_url) + r"(\?.*)?$")
    await ctx.route(pattern, with_sources)
    try:
        await fresh(page)
        await wait_rows(page, answer_id, 4)
        restored = await answer_state(page, answer_id)
        restored_html = await js_root(page, f"return r.querySelector('[data-key=\"{answer_id}\"] .bubble').innerHTML;")
    finally:
        await ctx.unroute(pattern, with_sources)
    # The same answer live, on top of the restored conversation.
    await deliver(page, answer_events("src-live", ANSWER, sources(origin)))
    await wait_rows(page, "src-live", 4)
    live = await answer_state(page, "src-live")
    live_html = await js_root(page, "return r.querySelector('[data-key=\"src-live\"] .bubble').innerHTML;")
    assert restored["rows"] == ROW_TEXTS and len(restored["markers"]) == 4
    assert restored == live
    assert normalized(restored_html) == normalized(live_html)


async def test_an_uncited_answer_withdrawn_is_replaced_without_an_error(src_page: BarPage) -> None:
    page = src_page.page
    await fresh(page)
    await page.evaluate(WATCH)
    uncited = "The bar's colour is probably blue, I think."
    replacement = "That is not in the documentation. Write to support and they will answer."
    # The app's fallback action rides on the replacement (the page handles it).
    await py(page, """
async def support(args, ctx):
    return {"message": "Thanks"}
REMOVE = client.register_tool("contact_support", support)
True""")
    actions = [{"id": "a1", "name": "contact_support", "arguments": {}}]
    # The uncited answer called a page function on the way: its pill holds the reader's focus when it goes.
    first = answer_events("src-unc", uncited, [], finish=False)
    call = {"id": "call-unc", "name": "get_cart"}
    first[1:1] = [("function_call.begin", {**call, "arguments": {}, "message_id": "src-unc", "run": False,
                                           "kind": "function"}),
                  ("function_call.end", {**call, "status": "success", "result": {"items": []}, "duration_ms": 1,
                                         "total_ms": 2})]
    await deliver(page, first, gap=10)
    await page.locator(q('[data-key="src-unc"] summary.call-summary')).focus()
    events = [("messages.withdrawn", {"message_ids": ["src-unc"], "reason": "uncited", "turn_id": "t-src-unc"})]
    events += answer_events("src-rep", replacement, None, finish=False, actions=actions)
    events.append(("completion.finished", {"turn_id": "t-src-unc", "status": "done"}))
    await deliver(page, events, gap=10)
    await page.locator(q('[data-key="src-rep"] .content')).filter(has_text="not in the documentation").wait_for()
    await page.wait_for_function("() => !document.getElementById('autopilot-bar-host').shadowRoot"
                                 ".querySelector('[data-streaming=\"true\"]')")
    seen = await page.evaluate("() => { window.__watch.disconnect(); return window.__seen; }")
    shown = await js_root(page, """return [...r.querySelectorAll('.messages > .message')].map((m) =>
        [m.dataset.role, m.dataset.key, m.querySelector('.content').textContent]);""")
    assert ["assistant", "src-unc", uncited] not in shown
    assert shown[-1] == ["assistant", "src-rep", replacement], shown
    assert not any(key == "src-unc" for _, key, _ in shown)
    assert seen["errors"] == 0 and seen["notices"] == 0, seen
    assert uncited in seen["texts"]  # it was shown before it went
    # The focus did not fall out of the bar with the withdrawn pill: it is in the composer.
    assert await js_root(page, "return r.activeElement && r.activeElement.tagName;") == "TEXTAREA"
    # The replacement is the turn's answer: its tools, no source list, its action offered.
    assert await page.locator(q('[data-key="src-rep"] .answer-tools button.copy')).count() == 2
    assert await page.locator(q('[data-key="src-rep"] ol.sources:not([hidden])')).count() == 0
    assert await page.locator(q('[data-key="src-rep"] .action')).count() == 1
    assert await py(page, "[m['id'] for m in store.messages if m.get('role') == 'assistant'][-1:]") == ["src-rep"]
    assert src_page.log.page_errors == []


async def test_every_text_of_the_sources_comes_from_the_labels(src_page: BarPage) -> None:
    """A site that translates the bar translates the sources too: the list's name, "from the site", "(opens in a new
    tab)" and the markers' names are labels."""
    page = src_page.page
    await fresh(page)
    await py(page, "bar.bar.dom.labels.update({'sources': 'Quellen', 'source_site': 'von der Website', "
                   "'source_new_tab': '(neuer Tab)', 'source_marker': 'Quelle {n}: {source}'})\nTrue")
    await deliver(page, answer_events("src-de", ANSWER, sources(src_page.relay.url), chunk=400))
    await wait_rows(page, "src-de", 4)
    got = await js_root(page, """const m = r.querySelector('[data-key="src-de"]');
        return [m.querySelector('ol.sources').getAttribute('aria-label'),
                [...m.querySelectorAll('ol.sources > li')].map((li) => li.textContent),
                m.querySelector('a.cite').getAttribute('aria-label')];""")
    assert got == ["Quellen", ["1. Theming › Colours · von der Website", "2. Cart contents",
                               "3. Plans › Limits (neuer Tab) · von der Website", "4. Sneaky · von der Website"],
                   "Quelle 1: Theming › Colours"]


async def test_a_stopped_answer_shows_no_half_citation(src_page: BarPage) -> None:
    """The reader stopped the answer while the model was writing a citation: the half token is not shown."""
    page = src_page.page
    await fresh(page)
    text = "Colours are set with custom properties [s"
    events = answer_events("src-stop", text, None, finish=False)
    events.append(("completion.finished", {"turn_id": "t-src-stop", "status": "cancelled"}))
    await deliver(page, events)
    await page.locator(q('[data-key="src-stop"] .stopped')).wait_for()
    assert await js_root(page, "return r.querySelector('[data-key=\"src-stop\"] .content').textContent;") == (
        "Colours are set with custom properties")


# --------------------------------------------------------------------------------------------------------------
# The real relay: an app with a docs index, the demo model citing it

THEMING = """# Theming

The bar follows your page's look.

## Colours

Set the bar's colours with custom properties such as --autopilot-accent on your page's root element.

## Fonts

The bar uses your page's font unless you set --autopilot-font.
"""
NOT_FOUND = "That is not in our documentation."


@pytest.fixture(scope="module")
def docs_relay(tmp_path_factory: pytest.TempPathFactory, page_server: PageServer) -> Iterator[RelayServer]:
    """A relay whose demo app has a docs index: one Markdown page served under the relay's own host."""
    require_build()
    work = tmp_path_factory.mktemp("docs-relay")
    (work / "site" / "guide").mkdir(parents=True)
    (work / "site" / "guide" / "theming.md").write_text(THEMING)
    config = work / "relay.toml"
    config.write_text(f'[apps.demo]\nallowed_origins = ["{page_server.origin}"]\n'
                      f'[apps.demo.docs]\nnot_found_text = "{NOT_FOUND}"\n')
    port, db = free_port(), work / "relay.sqlite3"
    subprocess.run([sys.executable, "-m", "widget.relay", "index", "--app", "demo", "--db", str(db), "--config",
                    str(config), f"{work / 'site'}=http://127.0.0.1:{port}/docs/"],
                   check=True, capture_output=True, timeout=120, cwd=Path(__file__).parent.parent)
    server = start_relay(work, port=port, db=db, extra=["--config", str(config), "--demo-chunk-delay-ms", "2"])
    yield server
    server.stop()


@pytest_asyncio.fixture(scope="module")
async def docs_page(browser: Any, docs_relay: RelayServer) -> AsyncIterator[BarPage]:
    ctx, page, log = await open_page(browser, docs_relay.url + "/")
    yield BarPage(context=ctx, page=page, log=log, relay=docs_relay)
    await ctx.close()


async def test_a_real_answer_cites_the_docs_and_is_restored_after_a_reload(docs_page: BarPage) -> None:
    page = docs_page.page
    await open_bar(page)
    await send(page, "How do I change the bar's colours?")
    mid = await py(page, "[m for m in store.messages if m.get('role') == 'assistant'][-1]['id']")
    stored = await py(page, "[m for m in store.messages if m.get('role') == 'assistant'][-1].get('sources')")
    assert stored and stored[0]["id"] == "s1" and stored[0]["title"] == "Theming › Colours", stored
    await wait_rows(page, mid, len(stored))
    live = await answer_state(page, mid)
    assert live["rows"][0] == "1. Theming › Colours · from the site"
    first = live["links"][0]
    # The section on the relay's own host (the page's): opens in place, at its anchor (and the quoted passage).
    assert first["href"].startswith(f"{docs_page.relay.url}/docs/guide/theming/#colours"), first
    assert first["target"] is None and first["rel"] is None
    assert live["markers"] and live["markers"][0]["label"] == "Source 1: Theming › Colours"
    assert "[s" not in live["content"]
    await page.reload()
    await wait_mark(page, "autopilot:joined")
    await open_bar(page)
    await wait_rows(page, mid, len(stored))
    assert await answer_state(page, mid) == live
    assert docs_page.log.page_errors == []


async def test_a_real_uncited_answer_is_withdrawn_and_replaced(docs_page: BarPage) -> None:
    page = docs_page.page
    await open_bar(page)
    await page.evaluate(WATCH)
    await py(page, "WITHDRAWN = []\n_off = client.on('messages.withdrawn', lambda p: WITHDRAWN.append(p.get('reason')))"
                   "\nTrue")
    n = await user_count(page)
    await send(page, "zyxqv plumbus quandary", wait=False)
    await wait_turn_done(page, n + 1)
    seen = await page.evaluate("() => { window.__watch.disconnect(); return window.__seen; }")
    last = await js_root(page, """const ms = [...r.querySelectorAll('.messages > .message')];
        const m = ms[ms.length - 1]; return [m.dataset.role, m.querySelector('.content').textContent];""")
    assert last == ["assistant", NOT_FOUND], last
    # The demo's own answer (it found nothing, and cites nothing) was withdrawn as uncited; no error or notice at
    # any moment.
    assert await py(page, "_off()\nWITHDRAWN") == ["uncited"]
    assert not await page.locator(q(".message.assistant")).filter(has_text="nothing about that").count()
    assert seen["errors"] == 0 and seen["notices"] == 0, seen
    assert docs_page.log.page_errors == []

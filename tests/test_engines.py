"""The core flows in Firefox and WebKit (the engines of most readers besides Chromium).

Each engine (tests/engines.py: Debian's firefox-esr over WebDriver BiDi, WebKitGTK's MiniBrowser under
WebKitWebDriver and Xvfb) loads one cross-origin page from the page server with the loader from the relay, then
goes through what a reader does, with real keys and clicks: boot and join, Alt+Shift+A opens the bar with the
composer focused, text typed at once arrives whole, a page function runs, a sensitive one waits for Allow,
Markdown renders, Esc closes and focus returns where it was.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from engines import ENGINES, Engine

pytestmark = pytest.mark.browser

PAGE = """<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>engines</title></head>
<body><p>engine page</p><button id="before">a host button</button>
<script type="autopilot-python">
from widget import get_client
client = get_client()

@client.function
def add_numbers(a: int, b: int) -> int:
    \"\"\"Adds two numbers.\"\"\"
    return a + b

@client.function(sensitive=True)
def clear_notes() -> str:
    \"\"\"Clears the reader's notes (asks first).\"\"\"
    return "cleared"
</script>
<script>(window.Autopilot = window.Autopilot || []).push((A) => {
  window.__finished = 0; A.on("completion.finished", () => window.__finished++); });
// What happened to the bar, for a failure's report: the bar's host added and removed, errors, the loader's marks.
window.__diag = [];
const note = (what) => window.__diag.length < 200 && window.__diag.push(Math.round(performance.now()) + " " + what);
new MutationObserver((records) => records.forEach((r) => {
  r.addedNodes.forEach((n) => n.id && n.id.startsWith("autopilot") && note("added " + n.id));
  r.removedNodes.forEach((n) => n.id && n.id.startsWith("autopilot") && note("removed " + n.id));
})).observe(document.documentElement, {childList: true, subtree: true});
window.addEventListener("autopilot:error", (e) => note("autopilot:error " + e.detail.message));
window.addEventListener("error", (e) => note("error " + e.message));
window.addEventListener("pagehide", () => note("pagehide"));
const consoleError = console.error;
console.error = (...args) => { note("console.error " + args.map(String).join(" ").slice(0, 300));
  consoleError.apply(console, args); };</script>
<script src="{relay}/widget/autopilot.js" data-app="demo" data-boot="eager" data-prewarm="false"></script>
</body></html>"""

# JS run in the page (each returns JSON data).
ROOT = "document.getElementById('autopilot-bar-host').shadowRoot"


def py_json(expression: str) -> str:
    """A JS function returning ``expression`` evaluated by the page's Python (with ``client``), as JSON data."""
    code = f"import json\nfrom widget import get_client\nclient = get_client()\njson.dumps({expression})"
    return f"() => JSON.parse(window.Autopilot.pyodide.runPython({json.dumps(code)}))"


HISTORY = py_json("client.get_function_call_history()")
USER_TEXTS = py_json("[m.get('content') for m in client.messages if m.get('role') == 'user']")
FUNCTION_NAMES = py_json("sorted(f['name'] for f in client.get_registered_functions())")
TOGGLE = "document.getElementById('autopilot-toggle-host').shadowRoot.querySelector('button.toggle')"


def answered(name: str) -> str:
    """A JS function: the call record of ``name`` once its response went out."""
    return f"() => ({HISTORY})().find(r => r.name === {name!r} && r.respondedAt !== null)"


def answer_quotes(text: str) -> str:
    """A JS function: whether an assistant answer in the bar contains ``text``."""
    answers = f"[...{ROOT}.querySelectorAll('.message.assistant .markdown')]"
    return f"() => {answers}.some(m => m.textContent.includes({text!r}))"


IDLE = "n => window.__finished >= n"  # the relay takes the next message once the turn is over


def missing_programs(paths: list[str]) -> list[str]:
    return [p for p in paths if not os.path.exists(p)]


@pytest_asyncio.fixture(scope="module", params=sorted(ENGINES))
async def engine(request: Any, relay_server: Any, page_server: Any) -> AsyncIterator[Engine]:
    """One engine with the page booted and joined."""
    cls, needs = ENGINES[request.param]
    missing = missing_programs(needs)
    if missing:
        pytest.fail(f"{request.param}: {', '.join(missing)} missing: install Debian's firefox-esr, webkit2gtk-driver "
                    "and xvfb (bash dev setup does)")
    eng = cls()
    try:
        await eng.start()
        url = page_server.add(f"/__engines__/{request.param}.html", PAGE.replace("{relay}", relay_server.url))
        await eng.goto(url)
        yield eng
    finally:
        await eng.stop()


#: What tells one page from the next in the same tab (a reload or a navigation makes a new time origin), and whether
#: Python's bar is mounted.
PAGE_FACTS = ("() => ({origin: performance.timeOrigin, url: location.href, "
              "bar: !!document.getElementById('autopilot-bar-host'), python: !!(window.Autopilot && "
              "window.Autopilot.pyodide)})")


@pytest_asyncio.fixture(autouse=True)
async def one_page(request: Any, engine: Engine) -> AsyncIterator[None]:
    """The tests go on with the page the fixture loaded: a test after which the page was reloaded or left, or lost
    Python's bar, fails saying so (instead of the next tests failing on a missing bar)."""
    before = await engine.call(PAGE_FACTS)
    yield
    if request.node.name.startswith("test_a_refused_origin_is_explained"):  # it opens a page of its own
        return
    after = await engine.call(PAGE_FACTS)
    diag = await engine.call("() => [...(window.__diag || []), ...performance.getEntriesByType('mark')"
                             ".map(m => Math.round(m.startTime) + ' mark ' + m.name)].sort((a, b) => "
                             "parseInt(a) - parseInt(b))")
    print(f"{engine.name} after {request.node.name}: {after}\n  " + "\n  ".join(diag))  # shown when a test fails
    assert after["origin"] == before["origin"] and after["url"] == before["url"], (
        f"{engine.name}: the page was reloaded or left during the test: {before} -> {after}")
    if before["bar"]:
        assert after["bar"], f"{engine.name}: the bar was removed during the test: {before} -> {after}"


async def test_boots_and_joins(engine: Engine) -> None:
    await engine.wait("() => performance.getEntriesByName('autopilot:joined').length > 0", timeout=120)
    assert await engine.call("() => window.Autopilot.handle !== null && "
                             "!!document.getElementById('autopilot-bar-host')")
    names = await engine.call(FUNCTION_NAMES)
    assert {"add_numbers", "clear_notes"} <= set(names)


async def test_shortcut_opens_and_typed_text_arrives_whole(engine: Engine) -> None:
    # The reader presses Alt+Shift+A on the page and types at once, without waiting for anything.
    await engine.call("() => document.getElementById('before').focus()")
    await engine.press("Alt", "Shift", "a")
    text = f"hello from {engine.name}"
    await engine.type(text)
    assert await engine.call(f"() => {ROOT}.querySelector('section.panel').checkVisibility()")
    assert await engine.call(f"() => {ROOT}.activeElement === {ROOT}.querySelector('textarea.input')")
    assert await engine.call(f"() => {ROOT}.querySelector('textarea.input').value") == text
    await engine.press("Enter")
    await engine.wait(f"() => ({USER_TEXTS})().includes({text!r})", timeout=30)
    assert await engine.call(f"() => {ROOT}.querySelector('textarea.input').value") == ""


async def test_markdown_answer_renders(engine: Engine) -> None:
    # The demo model's answer is Markdown: **bold** and a list.
    strong = await engine.wait(
        f"() => {{ const s = [...{ROOT}.querySelectorAll('.message.assistant .markdown strong')];"
        " return s.length && s[0].textContent; }",
        timeout=30)
    assert strong == "demo model"
    assert await engine.call(f"() => {ROOT}.querySelectorAll('.message.assistant .markdown li').length") > 0
    await engine.wait(IDLE, 1, timeout=30)


async def test_function_call_runs_and_shows(engine: Engine) -> None:
    await engine.click(f"() => {ROOT}.querySelector('textarea.input')")
    await engine.type('add_numbers {"a": 2, "b": 40}')
    await engine.press("Enter")
    rec = await engine.wait(answered("add_numbers"), timeout=30)
    assert rec["status"] == "success"
    # The call's pill is in the bar, and the model's answer quotes the result the page function returned.
    assert await engine.wait(f"() => {ROOT}.querySelectorAll('.message.assistant').length > 1 && "
                             f"{ROOT}.textContent.includes('add_numbers')", timeout=30)
    await engine.wait(answer_quotes("42"), timeout=30)
    await engine.wait(IDLE, 2, timeout=30)


async def test_confirmation_waits_for_allow(engine: Engine) -> None:
    await engine.click(f"() => {ROOT}.querySelector('textarea.input')")
    await engine.type("clear_notes")
    await engine.press("Enter")
    allow = f"() => [...{ROOT}.querySelectorAll('.confirm-actions button')].find(b => b.textContent === 'Allow')"
    await engine.wait(f"() => !!({allow})()", timeout=30)
    assert not [r for r in await engine.call(HISTORY) if r["name"] == "clear_notes" and r["status"] == "success"]
    await engine.click(allow)
    rec = await engine.wait(answered("clear_notes"), timeout=30)
    assert rec["status"] == "success"
    await engine.wait(answer_quotes("cleared"), timeout=30)
    await engine.wait(IDLE, 3, timeout=30)


async def test_escape_closes_and_focus_returns_where_it_was(engine: Engine) -> None:
    await engine.click(f"() => {ROOT}.querySelector('textarea.input')")
    await engine.press("Escape")
    await engine.wait(f"() => !{ROOT}.querySelector('section.panel').checkVisibility()", timeout=10)
    # The bar was opened from the host page's button (Alt+Shift+A): focus goes back there.
    assert await engine.call("() => document.activeElement === document.getElementById('before')")
    assert await engine.call("() => document.querySelector('#autopilot-toggle-host').shadowRoot.querySelector('button')"
                             ".getAttribute('aria-expanded')") == "false"


async def test_typing_right_after_a_click_on_the_toggle_arrives_whole(engine: Engine) -> None:
    # (A report had WebKit lose the first characters typed right after the bar opened.)
    await engine.click(f"() => {TOGGLE}")
    text = f"typed at once in {engine.name}"
    await engine.type(text)
    assert await engine.call(f"() => {ROOT}.querySelector('textarea.input').value") == text
    await engine.press("Escape")


async def test_a_refused_origin_is_explained(engine: Engine, relay_server: Any, page_server: Any) -> None:
    # Each engine words a refused module import its own way; the loader's message is the same in all of them.
    html = ('<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>refused</title>'
            f'</head><body><script src="{relay_server.url}/widget/autopilot.js" data-app="demo" data-boot="eager">'
            "</script></body></html>")
    url = page_server.add(f"/__engines__/{engine.name}-refused.html", html)
    url = url.replace("http://127.0.0.1:", "http://localhost:", 1)  # an origin the relay does not allow
    await engine.goto(url)
    status = "document.getElementById('autopilot-toggle-host').shadowRoot.querySelector('.status')"
    text = await engine.wait(f"() => {status}.querySelector('button') && {status}.firstChild.textContent", timeout=60)
    origin = url.split("/__engines__")[0]
    assert text.startswith(f"Autopilot cannot start: this page's origin {origin} is not allowed for app demo"), text
    assert await engine.call("() => window.Autopilot.ready.then(() => 'ok', (e) => e.message)") == text

"""The bar in Chromium: the bar on the demo page with the relay's demo model.

Open/close, send, streamed Markdown (incremental, sanitized), function-call pills with timings and details, the
activity log, confirmation Allow/Deny, the composer while the relay waits, Stop, errors with Retry/Regenerate,
the read-only notice with "Use here", New chat. The helpers at the top are shared by the other test_bar_* modules.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from conftest import require_build
from support import PageLog, PageServer, RelayServer, open_page, start_relay

pytestmark = pytest.mark.browser

BAR = "#autopilot-bar-host"
TOGGLE = "#autopilot-toggle-host >> button.toggle"
PRELUDE = (
    "import js\nfrom widget import get_client\nclient = get_client()\nH = js.window.Autopilot.handle\n"
    "bar = H.bar\nstore = H.store\n"
)


@dataclass
class BarPage:
    """A booted demo page of the bar tests' relay."""

    context: Any
    page: Any
    log: PageLog
    relay: RelayServer

    async def reset(self) -> None:
        """Close the bar (the conversation goes on)."""
        await self.page.evaluate("() => { const h = window.Autopilot.handle; if (h.bar.is_open) h.bar.close(); }")


def start_bar_relay(workdir: Path, page_server: PageServer, *, ask_user: bool = True,
                    chunk_delay_ms: float = 2) -> RelayServer:
    """A relay of our own: the demo app with Ask User on, allowing the test page server's origin.

    Its own relay (not the session's) also keeps these tests from warming the session relay for other modules.
    """
    require_build()
    config = workdir / "relay.toml"
    config.write_text(
        "[apps.demo]\n"
        f"ask_user = {'true' if ask_user else 'false'}\n"
        f'allowed_origins = ["{page_server.origin}"]\n'
    )
    return start_relay(workdir, extra=["--config", str(config), "--demo-chunk-delay-ms", str(chunk_delay_ms)])


# The fixtures' functions have other names than the fixtures, so that a test file that imports them (which registers
# them there) can take ``bar_relay``/``bar_page`` as parameters without shadowing an imported name.
@pytest.fixture(scope="module", name="bar_relay")
def fixture_bar_relay(tmp_path_factory: pytest.TempPathFactory, page_server: PageServer) -> Iterator[RelayServer]:
    """One relay per test module (Ask User on)."""
    server = start_bar_relay(tmp_path_factory.mktemp("bar-relay"), page_server)
    yield server
    server.stop()


@pytest_asyncio.fixture(scope="module", name="bar_page")
async def fixture_bar_page(browser: Any, bar_relay: RelayServer) -> AsyncIterator[BarPage]:
    """The demo page, booted and joined, once per module."""
    ctx, page, log = await open_page(browser, bar_relay.url + "/")
    yield BarPage(context=ctx, page=page, log=log, relay=bar_relay)
    await ctx.close()



def q(selector: str) -> str:
    """A selector inside the bar's shadow root."""
    return f"{BAR} >> {selector}"


async def py(page: Any, code: str) -> Any:
    """Run Python (top-level await allowed) in the page; the value of its last expression, passed through JSON."""
    src = (
        "from pyodide.code import eval_code_async as _eval\nimport json as _j\n"
        f"_j.dumps(await _eval({PRELUDE + code!r}, globals()))"
    )
    return json.loads(await page.evaluate("code => window.Autopilot.pyodide.runPythonAsync(code)", src))


async def js_root(page: Any, body: str, arg: Any = None) -> Any:
    """Evaluate ``body`` (JS, with ``r`` = the bar's shadow root and ``arg``) and return its value."""
    return await page.evaluate(
        f"(arg) => {{ const r = document.getElementById('autopilot-bar-host').shadowRoot; {body} }}", arg
    )


async def open_bar(page: Any) -> None:
    if not await page.is_visible(q("section.panel")):
        await page.click(TOGGLE)
    await page.wait_for_selector(q("section.panel"), state="visible")


async def user_count(page: Any) -> int:
    return await js_root(page, "return r.querySelectorAll('.message.user').length;")


async def wait_turn_done(page: Any, users: int, timeout: float = 15000) -> None:
    """Wait until the ``users``-th user message is answered (an answer or an error) and nothing streams."""
    await page.wait_for_function(
        """(n) => { const r = document.getElementById('autopilot-bar-host').shadowRoot;
            const msgs = r.querySelectorAll('.messages > .message');
            if (r.querySelectorAll('.message.user').length < n) return false;
            const last = msgs[msgs.length - 1];
            return !!last && !last.classList.contains('user') && r.querySelector('.stop').hidden
              && !r.querySelector('[data-streaming="true"]'); }""",
        arg=users,
        timeout=timeout,
    )


async def send(page: Any, text: str, *, wait: bool = True) -> None:
    """Type ``text`` in the composer and press Enter (then wait for the answer)."""
    n = await user_count(page)
    box = page.locator(q("textarea.input"))
    await box.fill(text)
    await box.press("Enter")
    if wait:
        await wait_turn_done(page, n + 1)


async def last_message(page: Any, role: str) -> Any:
    return page.locator(q(f".messages > .message.{role}")).last


# ------------------------------------------------------------------------------------------------------------------


async def test_toggle_opens_and_closes_the_bar(bar_page):
    page = bar_page.page
    await bar_page.reset()
    assert await page.is_hidden(q("section.panel"))
    assert await page.get_attribute(TOGGLE, "aria-expanded") == "false"
    await page.click(TOGGLE)
    await page.wait_for_selector(q("section.panel"), state="visible")
    assert await page.get_attribute(TOGGLE, "aria-expanded") == "true"
    # The composer has focus, the panel is a labelled dialog.
    assert await js_root(page, "return r.activeElement && r.activeElement.className;") == "input"
    assert await js_root(page, "return r.querySelector('.panel').getAttribute('role');") == "dialog"
    assert await page.text_content(q(".connection")) == "Connected"
    await page.click(q("button.close"))
    assert await page.is_hidden(q("section.panel"))
    assert await page.get_attribute(TOGGLE, "aria-expanded") == "false"
    # Focus went back to the toggle.
    assert await page.evaluate(
        "document.getElementById('autopilot-toggle-host').shadowRoot.activeElement.className"
    ) == "toggle"
    # Opened again, Esc closes it.
    await page.click(TOGGLE)
    await page.wait_for_selector(q("section.panel"), state="visible")
    await page.keyboard.press("Escape")
    assert await page.is_hidden(q("section.panel"))


async def test_send_shows_the_question_and_a_streamed_markdown_answer(bar_page):
    page = bar_page.page
    await open_bar(page)
    # Count DOM updates of the streaming answer: it must appear in several steps, not at once at the end.
    await js_root(page, """
        window.__updates = 0;
        window.__obs = new MutationObserver(() => {
          if (r.querySelector('[data-streaming="true"]')) window.__updates += 1; });
        window.__obs.observe(r.querySelector('.messages'), {childList: true, subtree: true, characterData: true});
        return true;""")
    await send(page, "Hello **there** <b>raw</b>")
    await js_root(page, "window.__obs.disconnect(); return true;")
    user = await last_message(page, "user")
    assert await user.locator(".content").text_content() == "Hello **there** <b>raw</b>"  # text, never HTML
    answer = await last_message(page, "assistant")
    content = answer.locator(".content")
    assert await content.locator("h3").text_content() == "Demo answer"
    assert "demo model" in await content.locator("li strong").all_text_contents()
    assert await content.locator("ul > li").count() >= 2
    assert await content.locator("li code").count() >= 1  # the page's function names, as inline code
    # The quoted question went through Markdown with raw HTML escaped: "<b>raw</b>" is text.
    assert "<b>raw</b>" in await content.locator("em").text_content()
    assert await content.locator("b").count() == 0
    # Shown while it streamed (the session relay streams fast; the step-by-step check is the next test).
    assert await page.evaluate("window.__updates") >= 1
    assert await answer.get_attribute("aria-busy") is None
    assert await js_root(page, "return r.querySelector('.messages').getAttribute('role');") == "log"


async def test_streaming_is_incremental_and_ends_as_render_markdown(bar_page):
    """Driven through the client's StreamingSession and events in the page: stable blocks are rendered once."""
    page = bar_page.page
    await open_bar(page)
    text = (
        "## Lamps\n\nA first paragraph with a [link](https://example.com/a).\n\n- one\n- two\n\n"
        "```python\nprint('<script>')\n```\n\nLast *words* <img src=x onerror=alert(1)>."
    )
    chunks = [text[i:i + 7] for i in range(0, len(text), 7)]
    await py(page, """
s = client.session
s.handle("completion.started", {"turn_id": "tx", "message_id": "inc-1"})
client.events.emit("messagesChanged", None)
bar.flush()
True""")
    marked = False
    stable_counts = []
    for chunk in chunks:
        await py(page, f"""
client.session.handle("completion_stream", {{"message_id": "inc-1", "delta": {chunk!r}}})
client.events.emit("messagesChanged", None)
bar.flush()
True""")
        state = await js_root(page, """
            const m = r.querySelector('[data-key="inc-1"]');
            const first = m.querySelector('.md-stable').firstElementChild;
            return {n: m.querySelector('.md-stable').children.length, mark: !!(first && first.__mark),
                    has: !!first};""")
        stable_counts.append(state["n"])
        if state["has"] and not marked:
            await js_root(page, "r.querySelector('[data-key=\"inc-1\"] .md-stable').firstElementChild.__mark = 1;"
                                " return true;")
            marked = True
        elif marked:
            assert state["mark"], "a finished block was re-rendered"
    assert stable_counts == sorted(stable_counts) and stable_counts[-1] >= 3
    await py(page, f"""
client.session.handle("completion.ended", {{"message": {{"id": "inc-1", "role": "assistant", "content": {text!r}}}}})
client.session.handle("completion.finished", {{"turn_id": "tx", "status": "done"}})
client.events.emit("messagesChanged", None)
bar.flush()
True""")
    expected = await py(page, f"""
from widget.core.markdown import render_markdown
import autopilot_sanitize
str(autopilot_sanitize.sanitize(render_markdown({text!r})))""")
    got = await js_root(page, """
        const c = r.querySelector('[data-key="inc-1"] .content');
        const d = document.createElement('div');
        for (const part of c.children) d.insertAdjacentHTML('beforeend', part.innerHTML);
        return d.innerHTML;""")
    norm = await page.evaluate("(h) => { const d = document.createElement('div'); d.innerHTML = h; return "
                               "d.innerHTML; }",
                               expected)
    assert got.replace("\n", "") == norm.replace("\n", "")
    link = page.locator(q('[data-key="inc-1"] a'))
    assert await link.get_attribute("rel") == "noopener noreferrer" and await link.get_attribute("target") == "_blank"
    assert "https://example.com/a" in await link.text_content()
    assert await page.locator(q('[data-key="inc-1"] img')).count() == 0
    assert await page.locator(q('[data-key="inc-1"] script')).count() == 0


async def test_function_call_pills_show_status_timing_and_details(bar_page):
    page = bar_page.page
    await open_bar(page)
    await send(page, 'add_to_cart {"sku": "ember", "quantity": 2}')
    pill = page.locator(q(".message.assistant .call")).filter(has_text="add_to_cart").last
    await pill.locator(".call-time").wait_for()
    assert await pill.get_attribute("data-status") == "success"
    assert await pill.locator(".call-name").text_content() == "add_to_cart"
    assert await pill.locator(".call-status").text_content() == "Done"
    timing = await pill.locator(".call-time").text_content()
    assert timing.endswith(" ms") and float(timing.split()[0]) > 0
    title = await pill.locator("summary").get_attribute("title")
    assert "Handler" in title and "Total" in title
    # Details: closed at first, opened with a click; arguments and result as text.
    assert not await pill.locator(".call-body").is_visible()
    await pill.locator("summary").click()
    body = pill.locator(".call-body")
    assert await body.is_visible()
    texts = await body.locator("pre").all_text_contents()
    assert json.loads(texts[0]) == {"sku": "ember", "quantity": 2}
    assert "Added 2 × Ember" in texts[1]
    # The page really did it.
    assert "2 × Ember" in await page.text_content("#cart-items")


async def test_a_failing_call_shows_its_error_as_text(bar_page):
    page = bar_page.page
    await open_bar(page)
    await send(page, 'add_to_cart {"sku": "<img src=x onerror=alert(1)>"}')
    pill = page.locator(q(".message.assistant .call")).last
    await page.wait_for_function(
        "() => document.getElementById('autopilot-bar-host').shadowRoot"
        ".querySelector('.messages > .message:last-child') !== null")
    assert await pill.get_attribute("data-status") == "error"
    assert await pill.locator(".call-status").text_content() == "Failed"
    await pill.locator("summary").click()
    error = pill.locator("pre.error")
    assert "No lamp with SKU '<img src=x onerror=alert(1)>'" in await error.text_content()
    assert await page.locator(q(".call img")).count() == 0


async def test_activity_log_lists_calls_with_timings(bar_page):
    page = bar_page.page
    await open_bar(page)
    await send(page, 'list_products and get_cart')
    await page.click(q("button.activity-button"))
    await page.wait_for_selector(q("section.activity"), state="visible")
    assert await page.get_attribute(q("button.activity-button"), "aria-pressed") == "true"
    assert await page.is_hidden(q(".scroller"))
    entries = page.locator(q(".activity-entry"))
    names = await entries.locator(".call-name").all_text_contents()
    assert names[:2] == ["get_cart", "list_products"]  # newest first
    assert "add_to_cart" in names
    first = entries.first
    assert (await first.locator(".call-time").text_content()).endswith(" ms")
    assert await first.locator(".call-when").count() == 1
    await first.locator("summary").click()
    assert "total_eur" in await first.locator(".call-body").text_content()
    # Esc goes back to the conversation first (the bar stays open).
    await page.keyboard.press("Escape")
    assert await page.is_hidden(q("section.activity"))
    assert await page.is_visible(q("section.panel"))


async def test_confirmation_deny_then_allow(bar_page):
    page = bar_page.page
    await open_bar(page)
    await send(page, 'add_to_cart {"sku": "halo"}')
    n = await user_count(page)
    await send(page, "empty_cart please", wait=False)
    box = page.locator(q(".confirm"))
    await box.wait_for()
    # Focus moved to the prompt; it names the function; the composer waits; Stop is offered.
    assert await js_root(page, "return r.activeElement.className;") == "confirm"
    assert await box.get_attribute("role") == "alertdialog"
    assert "empty_cart" in await box.locator(".confirm-title").text_content()
    assert await js_root(page, "return r.querySelector('.input').readOnly;") is True
    assert await page.get_attribute(q("textarea.input"), "aria-disabled") == "true"
    await box.locator("button.deny").click()
    await wait_turn_done(page, n + 1)
    pill = page.locator(q(".call")).filter(has_text="empty_cart").last
    assert await pill.get_attribute("data-status") == "error"
    assert "Halo" in await page.text_content("#cart-items")
    await send(page, "empty_cart now", wait=False)
    await box.wait_for()
    await box.locator("button.allow").click()
    await wait_turn_done(page, n + 2)
    pill = page.locator(q(".call")).filter(has_text="empty_cart").last
    assert await pill.get_attribute("data-status") == "success"
    assert await page.text_content("#cart-items") == ""
    assert await page.locator(q(".confirm")).count() == 0
    assert await js_root(page, "return r.querySelector('.input').readOnly;") is False


async def test_confirmation_shows_arguments_as_text(bar_page):
    page = bar_page.page
    await open_bar(page)
    n = await user_count(page)
    await send(page, 'place_order {"email": "<img src=x onerror=alert(1)>@x.test"}', wait=False)
    box = page.locator(q(".confirm"))
    await box.wait_for()
    args = json.loads(await box.locator(".confirm-args").text_content())
    assert args == {"email": "<img src=x onerror=alert(1)>@x.test"}
    assert await box.locator("img").count() == 0
    await page.keyboard.press("Tab")  # from the prompt to Allow, then Deny
    await page.keyboard.press("Tab")
    assert await js_root(page, "return r.activeElement.className;") == "deny"
    await page.keyboard.press("Enter")
    await wait_turn_done(page, n + 1)


async def test_composer_waits_for_the_page_and_stop_cancels(bar_page):
    page = bar_page.page
    await open_bar(page)
    n = await user_count(page)
    await send(page, 'check_stock {"sku": "nimbus"}', wait=False)
    await page.wait_for_selector(q('.call[data-status="running"]'))
    assert await page.is_visible(q("button.stop")) and await page.is_hidden(q("button.send"))
    assert await js_root(page, "return r.querySelector('.input').readOnly;") is True
    assert "Waiting for the page" in await page.get_attribute(q("textarea.input"), "placeholder")
    await page.click(q("button.stop"))
    await wait_turn_done(page, n + 1)
    assert await page.is_visible(q("button.send")) and await page.is_hidden(q("button.stop"))
    answer = await last_message(page, "assistant")
    assert await answer.locator(".stopped").text_content() == "Stopped"
    assert await answer.locator(".call").get_attribute("data-status") == "error"
    assert await js_root(page, "return r.querySelector('.input').readOnly;") is False


async def test_model_error_has_retry_and_answers_have_regenerate(bar_page):
    page = bar_page.page
    await open_bar(page)
    n = await user_count(page)
    await send(page, "please simulate model error always")
    error = await last_message(page, "error")
    assert "asked to fail" in await error.text_content()
    old = await error.get_attribute("data-key")
    await error.locator("button.retry").click()
    # The relay's retry withdraws the failed round's messages and runs the turn again (it fails again, as asked).
    await page.locator(q(f'[data-key="{old}"]')).wait_for(state="detached")
    await wait_turn_done(page, n + 1)
    assert await user_count(page) == n + 1
    error = await last_message(page, "error")
    assert "asked to fail" in await error.text_content() and await error.get_attribute("data-key") != old
    assert await page.locator(q("button.retry")).count() == 1  # only on the last error
    await send(page, "hello again")
    answers = await page.locator(q(".message.assistant")).count()
    assert await page.locator(q("button.regenerate")).count() == 1  # only on the last answer
    answer = await last_message(page, "assistant")
    old = await answer.get_attribute("data-key")
    await answer.locator("button.regenerate").click()
    # The answer is replaced: the old one goes, a new one streams in after the same question.
    await page.locator(q(f'[data-key="{old}"]')).wait_for(state="detached")
    await wait_turn_done(page, n + 2)
    assert await page.locator(q(".message.assistant")).count() == answers
    answer = await last_message(page, "assistant")
    assert await answer.get_attribute("data-key") != old
    assert "hello again" in await answer.text_content()


async def test_second_tab_makes_this_one_read_only_until_use_here(bar_page):
    page = bar_page.page
    await open_bar(page)
    ctx, other, _ = await open_page(bar_page.context.browser, bar_page.relay.url + "/", context=bar_page.context)
    try:
        notice = page.locator(q(".notice"))
        await notice.wait_for(state="visible")
        assert "open in another tab" in await notice.text_content()
        assert await js_root(page, "return r.querySelector('.input').readOnly;") is True
        await notice.locator("button.use-here").click()
        await notice.wait_for(state="hidden")
        assert await js_root(page, "return r.querySelector('.input').readOnly;") is False
        await other.click(TOGGLE)
        await other.locator(q(".notice")).wait_for(state="visible")
        assert "open in another tab" in await other.locator(q(".notice")).text_content()
    finally:
        await other.close()


async def test_new_chat_starts_an_empty_conversation(bar_page):
    page = bar_page.page
    await open_bar(page)
    before = await py(page, "client.conversation['id']")
    assert await page.locator(q(".messages > .message")).count() > 0
    await page.click(q("button.new-chat"))
    await page.wait_for_function(
        """(id) => { const v = window.Autopilot.pyodide.runPython("from widget import get_client; "
            + "c = get_client(); c.conversation['id'] if c.connection_state == 'connected' else ''");
            return v !== '' && v !== id; }""",
        arg=before,
    )
    await page.wait_for_selector(q(".empty"), state="visible")
    assert await page.locator(q(".messages > .message")).count() == 0
    await send(page, "first message of the new chat")
    assert await page.locator(q(".messages > .message")).count() == 2

"""Copy, rate and comment on an answer in Chromium: the clipboard holds the answer's Markdown, its plain text or a
code block; each copy button says "Copied"; a thumb is stored by the relay, shown pressed, changed, taken back,
restored after a reload, and reaches the page as a ``feedback`` event; a thumb opens the optional comment form,
whose comment is stored with the rating (one record per answer, changed in place), restored and shown after a
reload, refused when too long and kept when the relay is down; everything works from the keyboard."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from support import open_page, wait_mark
from test_bar import BarPage, fixture_bar_relay, js_root, open_bar, py, q, send  # noqa: F401

pytestmark = pytest.mark.browser

TOOLS = ".messages > .message.assistant >> nth=-1 >> .answer-tools"


@pytest_asyncio.fixture(scope="module")
async def clip_page(browser: Any, bar_relay: Any) -> AsyncIterator[BarPage]:
    """The demo page in a context that may read and write the clipboard."""
    ctx = await browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    ctx, page, log = await open_page(browser, bar_relay.url + "/", context=ctx)
    yield BarPage(context=ctx, page=page, log=log, relay=bar_relay)
    await ctx.close()


async def clipboard(page: Any) -> str:
    return str(await page.evaluate("() => navigator.clipboard.readText()"))


async def stored_feedback(page: Any) -> list[dict[str, Any]]:
    """The conversation's ratings as the relay returns them (its GET, from the test process)."""
    url = await py(page, "client.conversation_url")

    def get() -> list[dict[str, Any]]:
        with urllib.request.urlopen(url, timeout=30) as r:
            return list(json.load(r).get("feedback") or [])

    return await asyncio.to_thread(get)


async def feedback_events(page: Any) -> None:
    """Collect the page's ``feedback`` events in ``window.__feedback`` (JSON texts)."""
    await py(
        page,
        "import json as _json\njs.window.__feedback = js.Array.new()\n"
        "_off = client.on('feedback', lambda p: js.window.__feedback.push(\n"
        "    _json.dumps(p.to_py() if hasattr(p, 'to_py') else p)))\n"
        "None",
    )


async def last_answer_id(page: Any) -> str:
    return str(await py(page, "[m for m in store.messages if m.get('role') == 'assistant'][-1]['id']"))


async def focused_class(page: Any) -> str:
    """The class of the element focused in the bar."""
    return str(await js_root(page, "return r.activeElement ? r.activeElement.className : '';"))


async def pressed(page: Any) -> tuple[str | None, str | None]:
    tools = page.locator(q(TOOLS))
    return (
        await tools.locator("button.rate-up").get_attribute("aria-pressed"),
        await tools.locator("button.rate-down").get_attribute("aria-pressed"),
    )


async def test_copy_an_answer_as_markdown_text_and_code(clip_page: BarPage) -> None:
    page = clip_page.page
    await open_bar(page)
    await send(page, 'add_to_cart {"sku": "ember", "quantity": 2}')
    markdown = await py(page, "[m for m in store.messages if m.get('role') == 'assistant'][-1]['content']")
    assert "```json" in markdown
    tools = page.locator(q(TOOLS))
    copy = tools.locator("button.copy").first
    assert await copy.text_content() == "Copy"
    await copy.click()
    await page.wait_for_function(
        "() => document.getElementById('autopilot-bar-host').shadowRoot"
        ".querySelector('.answer-tools button.copy[data-copied]')?.textContent === 'Copied'"
    )
    assert await clipboard(page) == markdown
    # plain text: what the reader sees, no Markdown marks and no button labels
    await tools.locator("button.copy").nth(1).click()
    await page.wait_for_function(
        "() => { const t = [...document.getElementById('autopilot-bar-host').shadowRoot"
        ".querySelectorAll('.answer-tools')].pop(); const b = t.querySelectorAll('button.copy')[1];"
        " return b.textContent === 'Copied'; }"
    )
    plain = await clipboard(page)
    assert plain != markdown and "```" not in plain and "###" not in plain and "Copy code" not in plain
    assert "Result" in plain and "returned:" in plain and "Ember" in plain
    # a code block: its own button, keyboard reachable
    code_button = page.locator(q(".messages > .message.assistant >> nth=-1 >> button.copy-code")).first
    await code_button.focus()
    await page.keyboard.press("Enter")
    await page.wait_for_function(
        "() => document.getElementById('autopilot-bar-host').shadowRoot"
        ".querySelector('button.copy-code[data-copied]')?.textContent === 'Copied'"
    )
    code = await js_root(
        page, "const p = [...r.querySelectorAll('.message.assistant pre')].pop(); return p.textContent;"
    )
    assert await clipboard(page) == code and "Ember" in code


async def test_only_a_turns_answer_has_the_row(clip_page: BarPage) -> None:
    """A turn with a page function has two assistant messages ("Calling ... on the page", then the answer): only
    the answer, the turn's last one, gets the copy/rating row."""
    page = clip_page.page
    await open_bar(page)
    await send(page, 'check_stock {"sku": "halo"}')
    shown = await js_root(page, """
        const ms = [...r.querySelectorAll('.messages > .message')];
        const last = ms.map((m) => m.dataset.role).lastIndexOf('user');
        return ms.slice(last + 1).filter((m) => m.dataset.role === 'assistant').map((m) => {
          const t = m.querySelector('.answer-tools'); return !!t && !t.hidden; });""")
    assert len(shown) >= 2, shown
    assert shown[-1] is True and not any(shown[:-1]), shown


async def test_rate_an_answer_stored_changed_restored_and_taken_back(clip_page: BarPage) -> None:
    page = clip_page.page
    await open_bar(page)
    await send(page, "hello")
    await py(
        page,
        "import json as _json\njs.window.__feedback = js.Array.new()\n"
        "_off = client.on('feedback', lambda p: js.window.__feedback.push(\n"
        "    _json.dumps(p.to_py() if hasattr(p, 'to_py') else p)))\n"
        "None",
    )
    answer_id = await py(page, "[m for m in store.messages if m.get('role') == 'assistant'][-1]['id']")
    tools = page.locator(q(TOOLS))
    assert await pressed(page) == ("false", "false")
    assert await tools.locator("button.rate-up").get_attribute("aria-label") == "Good answer"
    await tools.locator("button.rate-up").click()
    await page.locator(q(TOOLS + ' >> button.rate-up[aria-pressed="true"]')).wait_for()
    assert [(f["message_id"], f["rating"]) for f in await stored_feedback(page)] == [(answer_id, "up")]
    await page.wait_for_function("() => window.__feedback.length >= 1")
    seen = [json.loads(e) for e in await page.evaluate("() => [...window.__feedback]")]
    assert [(e["message_id"], e["rating"]) for e in seen] == [(answer_id, "up")]
    # changed, from the keyboard
    await tools.locator("button.rate-down").focus()
    await page.keyboard.press("Enter")
    await page.locator(q(TOOLS + ' >> button.rate-down[aria-pressed="true"]')).wait_for()
    assert await pressed(page) == ("false", "true")
    assert [(f["message_id"], f["rating"]) for f in await stored_feedback(page)] == [(answer_id, "down")]
    # restored after a reload
    await page.reload()
    await wait_mark(page, "autopilot:joined")
    await open_bar(page)
    await page.locator(q(TOOLS + ' >> button.rate-down[aria-pressed="true"]')).wait_for()
    assert await pressed(page) == ("false", "true")
    # pressing the pressed thumb takes the rating back
    await page.locator(q(TOOLS)).locator("button.rate-down").click()
    await page.locator(q(TOOLS + ' >> button.rate-down[aria-pressed="false"]')).wait_for()
    assert await stored_feedback(page) == []
    assert clip_page.log.page_errors == []


ANSWER = ".messages > .message.assistant >> nth=-1"
FORM = ANSWER + " >> form.comment-form"
STATUS = ANSWER + " >> .answer-status"


async def test_a_comment_is_stored_with_the_rating_restored_and_changed_in_place(clip_page: BarPage) -> None:
    page = clip_page.page
    await open_bar(page)
    await send(page, "hello, comment")
    await feedback_events(page)
    await page.evaluate("""() => { window.__jsFeedback = [];
        window.Autopilot.on('feedback', (p) => window.__jsFeedback.push(p)); }""")
    answer_id = await last_answer_id(page)
    tools = page.locator(q(TOOLS))
    assert not await tools.locator("button.comment-toggle").is_visible()  # nothing to comment on before a rating
    # A thumb down: stored at once, and the comment form opens with the focus in its box.
    await tools.locator("button.rate-down").click()
    form = page.locator(q(FORM))
    await form.wait_for()
    await page.locator(q(TOOLS + ' >> button.rate-down[aria-pressed="true"]')).wait_for()
    assert await focused_class(page) == "comment-input"
    assert await form.locator("label").text_content() == "Your comment (optional)"
    assert await form.locator(".comment-count").text_content() == "0 / 2000"
    await page.keyboard.type("The sizes are wrong")
    assert await form.locator(".comment-count").text_content() == "19 / 2000"
    await form.locator("button.comment-send").click()
    await page.locator(q(STATUS)).filter(has_text="Thanks for your feedback!").wait_for()
    assert await form.count() == 0
    stored = await stored_feedback(page)
    assert [(f["message_id"], f["rating"], f["comment"]) for f in stored] == [
        (answer_id, "down", "The sizes are wrong")]
    await page.wait_for_function(
        "() => window.__feedback.some((e) => JSON.parse(e).comment === 'The sizes are wrong')")
    # ... and to the page's JS (window.Autopilot.on).
    await page.wait_for_function("() => window.__jsFeedback.some((p) => p.comment === 'The sizes are wrong')")
    js_event = await page.evaluate("() => window.__jsFeedback.find((p) => p.comment)")
    assert (js_event["message_id"], js_event["rating"]) == (answer_id, "down")
    comment_button = tools.locator("button.comment-toggle")
    assert await comment_button.text_content() == "Edit comment"
    # Restored after a reload: the rating, that a comment was left, and the comment itself when editing.
    await page.reload()
    await wait_mark(page, "autopilot:joined")
    await open_bar(page)
    await page.locator(q(TOOLS + ' >> button.rate-down[aria-pressed="true"]')).wait_for()
    comment_button = page.locator(q(TOOLS)).locator("button.comment-toggle")
    assert await comment_button.text_content() == "Edit comment"
    assert await comment_button.get_attribute("data-commented") == "true"
    await comment_button.click()
    box = page.locator(q(FORM + " >> textarea.comment-input"))
    assert await box.input_value() == "The sizes are wrong"
    assert await comment_button.get_attribute("aria-expanded") == "true"
    # Changed: the one record of this answer is replaced, not duplicated.
    await feedback_events(page)
    await box.fill("Sizes are fine, the colours are wrong")
    await box.press("Control+Enter")
    await page.locator(q(STATUS)).filter(has_text="Thanks").wait_for()
    stored = await stored_feedback(page)
    assert [(f["message_id"], f["rating"], f["comment"]) for f in stored] == [
        (answer_id, "down", "Sizes are fine, the colours are wrong")]
    await page.wait_for_function("() => window.__feedback.length >= 1")
    event = json.loads(await page.evaluate("() => window.__feedback[0]"))
    assert (event["message_id"], event["rating"], event["comment"]) == (
        answer_id, "down", "Sizes are fine, the colours are wrong")
    # The same comment again changes nothing (idempotent): the stored record keeps its time.
    await page.locator(q(TOOLS)).locator("button.comment-toggle").click()
    await page.locator(q(FORM + " >> button.comment-send")).click()
    await page.locator(q(STATUS)).filter(has_text="Thanks").wait_for()
    assert await stored_feedback(page) == stored
    # Another thumb keeps the comment.
    await page.locator(q(TOOLS)).locator("button.rate-up").click()
    await page.locator(q(TOOLS + ' >> button.rate-up[aria-pressed="true"]')).wait_for()
    await page.locator(q(FORM + " >> button.comment-cancel")).click()
    assert [(f["rating"], f["comment"]) for f in await stored_feedback(page)] == [
        ("up", "Sizes are fine, the colours are wrong")]
    assert clip_page.log.page_errors == []


async def test_comment_from_the_keyboard_only(clip_page: BarPage) -> None:
    page = clip_page.page
    await open_bar(page)
    await send(page, "hello, keyboard")
    answer_id = await last_answer_id(page)
    tools = page.locator(q(TOOLS))
    await tools.locator("button.copy").first.focus()
    await page.keyboard.press("Tab")  # Copy as text
    await page.keyboard.press("Tab")  # Good answer
    assert await js_root(page, "return r.activeElement.getAttribute('aria-label');") == "Good answer"
    await page.keyboard.press("Enter")
    await page.locator(q(FORM)).wait_for()
    assert await focused_class(page) == "comment-input"
    await page.locator(q(TOOLS + ' >> button.rate-up[aria-pressed="true"]')).wait_for()
    await page.keyboard.type("never mind")
    # Escape closes the form: the focus is back on the answer's buttons, the rating stays, no comment is sent.
    await page.keyboard.press("Escape")
    await page.locator(q(FORM)).wait_for(state="detached")
    assert await page.is_visible(q("section.panel"))  # Escape closed the form, not the bar
    assert await focused_class(page) == "comment-toggle"
    await page.locator(q(TOOLS + ' >> button.rate-up[aria-pressed="true"]')).wait_for()
    assert [(f["rating"], f["comment"]) for f in await stored_feedback(page) if f["message_id"] == answer_id] == [
        ("up", None)]
    # "Add a comment", from the keyboard: Enter alone is a new line, Ctrl+Enter sends.
    assert await tools.locator("button.comment-toggle").text_content() == "Add a comment"
    await page.keyboard.press("Enter")
    await page.locator(q(FORM)).wait_for()
    assert await focused_class(page) == "comment-input"
    await page.keyboard.type("first line")
    await page.keyboard.press("Enter")
    await page.keyboard.type("second line")
    await page.keyboard.press("Control+Enter")
    await page.locator(q(STATUS)).filter(has_text="Thanks for your feedback!").wait_for()
    assert await focused_class(page) == "comment-toggle"
    assert [(f["rating"], f["comment"]) for f in await stored_feedback(page) if f["message_id"] == answer_id] == [
        ("up", "first line\nsecond line")]
    assert clip_page.log.page_errors == []


async def test_an_over_long_comment_is_refused_and_kept(clip_page: BarPage) -> None:
    page = clip_page.page
    await open_bar(page)
    await send(page, "hello, long comment")
    answer_id = await last_answer_id(page)
    await page.locator(q(TOOLS)).locator("button.rate-down").click()
    box = page.locator(q(FORM + " >> textarea.comment-input"))
    await box.wait_for()
    long = "x" * 2001
    await box.fill(long)
    count = page.locator(q(FORM + " >> .comment-count"))
    assert await count.text_content() == "2001 / 2000"
    assert await count.get_attribute("data-over") == "true"
    error = page.locator(q(FORM + " >> .comment-error"))
    assert "at most 2000 characters" in (await error.text_content() or "")
    assert await box.get_attribute("aria-invalid") == "true"
    await page.locator(q(FORM + " >> button.comment-send")).click()
    # Refused here: the form stays, the text is kept, the message is visible, nothing was stored.
    assert await error.is_visible()
    assert await box.input_value() == long
    await page.locator(q(TOOLS + ' >> button.rate-down[aria-pressed="true"]')).wait_for()
    assert [(f["rating"], f["comment"]) for f in await stored_feedback(page) if f["message_id"] == answer_id] == [
        ("down", None)]
    # One character less fits: the message goes and Send stores it.
    await box.press("End")
    await box.press("Backspace")
    assert await count.text_content() == "2000 / 2000"
    assert not await error.is_visible()
    await page.locator(q(FORM + " >> button.comment-send")).click()
    await page.locator(q(STATUS)).filter(has_text="Thanks").wait_for()
    assert [(f["rating"], f["comment"]) for f in await stored_feedback(page) if f["message_id"] == answer_id] == [
        ("down", "x" * 2000)]
    assert clip_page.log.page_errors == []


async def test_a_comment_sent_while_the_relay_is_down_is_kept(clip_page: BarPage) -> None:
    """Last in the module: it stops the module's relay (and starts it again on the same port and database)."""
    page = clip_page.page
    await open_bar(page)
    await send(page, "hello, relay down")
    answer_id = await last_answer_id(page)
    await asyncio.to_thread(clip_page.relay.stop)
    try:
        # The thumb cannot be stored: the answer says so, and the comment form opens all the same.
        await page.locator(q(TOOLS)).locator("button.rate-up").click()
        await page.locator(q(STATUS)).filter(has_text="Your rating was not saved").wait_for()
        assert await page.locator(q(TOOLS + " >> button.rate-up")).get_attribute("aria-pressed") == "false"
        box = page.locator(q(FORM + " >> textarea.comment-input"))
        await box.fill("Sent while the relay was away")
        await page.locator(q(FORM + " >> button.comment-send")).click()
        error = page.locator(q(FORM + " >> .comment-error"))
        await error.filter(has_text="Not sent").wait_for()
        assert "Your text is still here" in (await error.text_content() or "")
        assert await box.input_value() == "Sent while the relay was away"
    finally:
        await asyncio.to_thread(clip_page.relay.restart)
    # The relay is back: the same form sends the kept text, with the thumb that opened it.
    await page.locator(q(FORM + " >> button.comment-send")).click()
    await page.locator(q(STATUS)).filter(has_text="Thanks").wait_for(timeout=60_000)
    await page.locator(q(TOOLS + ' >> button.rate-up[aria-pressed="true"]')).wait_for()
    assert [(f["rating"], f["comment"]) for f in await stored_feedback(page) if f["message_id"] == answer_id] == [
        ("up", "Sent while the relay was away")]

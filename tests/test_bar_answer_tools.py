"""Copy and rate an answer in Chromium: the clipboard holds the answer's Markdown, its plain text or a code block;
each copy button says "Copied"; a thumb is stored by the relay, shown pressed, changed, taken back, restored after a
reload, and reaches the page as a ``feedback`` event; everything works from the keyboard."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from support import open_page, wait_mark
from test_bar import BarPage, bar_relay, js_root, open_bar, py, q, send  # noqa: F401

TOOLS = ".messages > .message.assistant >> nth=-1 >> .answer-tools"


@pytest_asyncio.fixture(scope="module")
async def clip_page(browser: Any, bar_relay: Any) -> AsyncIterator[BarPage]:  # noqa: F811
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

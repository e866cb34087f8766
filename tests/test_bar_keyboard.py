"""Keyboard only, end to end (Chromium): open with the toggle or Alt+Shift+A, type and send, confirm a sensitive
call, Tab goes through the open bar and out of it (non-modal), Esc closes and focus returns; labelled controls,
visible focus, aria-live."""

from __future__ import annotations

from typing import Any

import pytest
from test_bar import TOGGLE, fixture_bar_page, fixture_bar_relay, js_root, q, user_count, wait_turn_done  # noqa: F401

pytestmark = pytest.mark.browser


async def focused(page: Any) -> str:
    """Where focus is: 'bar:<class>', 'toggle', or the page element's tag."""
    return await page.evaluate("""() => {
        const a = document.activeElement;
        if (a && a.id === 'autopilot-bar-host') return 'bar:' + (a.shadowRoot.activeElement || {}).className;
        if (a && a.id === 'autopilot-toggle-host') return 'toggle';
        return a ? a.tagName : '';
    }""")


async def test_keyboard_only_flow(bar_page):
    page = bar_page.page
    await bar_page.reset()
    # Reach the toggle with Tab from the page (it comes last in the document).
    await page.focus("body")
    for _ in range(30):
        await page.keyboard.press("Tab")
        if await focused(page) == "toggle":
            break
    assert await focused(page) == "toggle"
    await page.keyboard.press("Enter")
    await page.wait_for_selector(q("section.panel"), state="visible")
    assert await focused(page) == "bar:input"
    # Shift+Enter is a new line, Enter sends.
    n = await user_count(page)
    await page.keyboard.type("first line")
    await page.keyboard.press("Shift+Enter")
    await page.keyboard.type("second line")
    assert await page.input_value(q("textarea.input")) == "first line\nsecond line"
    await page.keyboard.press("Enter")
    await wait_turn_done(page, n + 1)
    assert await page.locator(q(".message.user .content")).last.text_content() == "first line\nsecond line"
    assert await page.input_value(q("textarea.input")) == ""
    assert await focused(page) == "bar:input"
    # A sensitive call: focus moves to the prompt; Tab reaches Allow; Enter allows.
    await page.keyboard.type('add_to_cart {"sku": "ember"} then empty_cart')
    await page.keyboard.press("Enter")
    await page.wait_for_selector(q(".confirm"))
    assert await focused(page) == "bar:confirm"
    await page.keyboard.press("Tab")
    assert await focused(page) == "bar:allow"
    await page.keyboard.press("Enter")
    await wait_turn_done(page, n + 2)
    assert await page.text_content("#cart-items") == ""
    assert await focused(page) == "bar:input"
    # The panel is a non-modal dialog (aria-modal false) beside a page that stays usable: Tab goes through its
    # controls and then on out of it, as Shift+Tab does from its first control (no focus trap).
    assert await js_root(page, "return r.querySelector('section.panel').getAttribute('aria-modal');") == "false"
    await js_root(page, "const f = [...r.querySelectorAll('section.panel button, section.panel textarea')]"
                        ".filter(e => e.getClientRects().length); f[0].focus(); return f.length;")
    seen = [await focused(page)]
    for _ in range(40):
        await page.keyboard.press("Tab")
        where = await focused(page)
        if not where.startswith("bar:"):
            break
        seen.append(where)
    assert not where.startswith("bar:"), seen  # left the bar
    assert {"bar:icon-button new-chat", "bar:icon-button close", "bar:input"} <= set(seen), seen
    await js_root(page, "const f = [...r.querySelectorAll('section.panel button, section.panel textarea')]"
                        ".filter(e => e.getClientRects().length); f[0].focus(); return f.length;")
    await page.keyboard.press("Shift+Tab")
    assert not (await focused(page)).startswith("bar:")
    assert await page.is_visible(q("section.panel"))  # leaving it does not close it
    await page.focus(q("textarea.input"))
    # Esc closes; focus returns to the toggle.
    await page.keyboard.press("Escape")
    assert await page.is_hidden(q("section.panel"))
    assert await focused(page) == "toggle"
    # The documented shortcut opens and closes it from anywhere on the page.
    await page.focus("body")
    await page.keyboard.press("Alt+Shift+KeyA")
    await page.wait_for_selector(q("section.panel"), state="visible")
    assert await focused(page) == "bar:input"
    await page.keyboard.press("Alt+Shift+KeyA")
    assert await page.is_hidden(q("section.panel"))


async def test_controls_are_labelled_focus_is_visible_and_answers_are_live(bar_page):
    page = bar_page.page
    await page.click(TOGGLE) if await page.is_hidden(q("section.panel")) else None
    unlabelled = await js_root(page, """
        const out = [];
        for (const el of r.querySelectorAll('button, textarea, input, summary, [role=tab]')) {
          if (!el.getClientRects().length) continue;
          const name = (el.getAttribute('aria-label') || el.getAttribute('aria-labelledby')
                        || el.textContent || (el.closest('label') || {}).textContent || '').trim();
          if (!name) out.push(el.outerHTML.slice(0, 80));
        }
        return out;""")
    assert unlabelled == []
    log = await js_root(page, "const l = r.querySelector('.messages'); "
                              "return [l.getAttribute('role'), l.getAttribute('aria-live'), "
                              "l.getAttribute('aria-label')];")
    assert log == ["log", "polite", "Conversation"]
    assert await js_root(page, "return r.querySelector('.connection').getAttribute('role');") == "status"
    # Keyboard focus is visible: a 3 px outline on a focused button.
    await page.focus(q("textarea.input"))
    await page.keyboard.press("Shift+Tab")
    outline = await js_root(page, "const s = getComputedStyle(r.activeElement); return [s.outlineStyle, "
                                  "s.outlineWidth];")
    assert outline == ["solid", "3px"]
    await page.keyboard.press("Escape")

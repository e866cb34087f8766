"""Past conversations in Chromium, over a real relay and real Socket.IO: New chat keeps the previous conversation in
the list, titled by its first message, newest first, the current one marked; reopening one shows its messages and
a new message goes to it; deleting asks first (Escape and Cancel keep it), then removes it from the list and from
the relay; a reload keeps the list; the list works from the keyboard; two readers in two browser contexts never
see each other's conversations."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from support import open_page
from test_bar import TOGGLE, BarPage, fixture_bar_relay, open_bar, py, q, send  # noqa: F401

pytestmark = pytest.mark.browser

ITEMS = ".history-list > .history-item"


async def focused(page: Any) -> str:
    """The class of the focused element inside the bar ('' outside it)."""
    return str(await page.evaluate(
        """() => { const a = document.activeElement;
            if (!a || a.id !== 'autopilot-bar-host') return '';
            const f = a.shadowRoot.activeElement; return f ? f.className : ''; }"""))


async def conversation_id(page: Any) -> str:
    return str(await py(page, "client.conversation_id"))


async def wait_connected_to_other(page: Any, before: str) -> str:
    await page.wait_for_function(
        """(id) => { const v = window.Autopilot.pyodide.runPython("from widget import get_client; "
            + "c = get_client(); (c.conversation or {}).get('id', '') if c.connection_state == 'connected' else ''");
            return v !== '' && v !== id; }""",
        arg=before,
    )
    return await conversation_id(page)


async def entries(page: Any, count: int) -> list[dict[str, Any]]:
    """The shown list once it has ``count`` entries: title, whether current, id."""
    await page.wait_for_function(
        "(n) => document.getElementById('autopilot-bar-host').shadowRoot"
        f".querySelectorAll('{ITEMS}').length === n"
        " && !document.getElementById('autopilot-bar-host').shadowRoot.querySelector('.history-list[aria-busy]')",
        arg=count,
    )
    return list(await page.evaluate(
        """(sel) => [...document.getElementById('autopilot-bar-host').shadowRoot.querySelectorAll(sel)].map(li => {
            const open = li.querySelector('.history-open'), del = li.querySelector('.history-delete');
            const title = li.querySelector('.history-entry-title');
            return {id: li.dataset.id, current: li.dataset.current === 'true', title: title && title.textContent,
                    aria_current: open && open.getAttribute('aria-current'),
                    delete_label: del && del.getAttribute('aria-label')};
        })""", ITEMS))


async def open_history(page: Any) -> None:
    await open_bar(page)
    button = page.locator(q("button.history-button"))
    if await button.get_attribute("aria-pressed") != "true":
        await button.click()
    await page.wait_for_selector(q("section.history"), state="visible")


def relay_get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, None


async def stored_user_texts(relay_url: str, cid: str) -> list[str]:
    status, body = await asyncio.to_thread(relay_get, f"{relay_url}/api/conversations/{cid}")
    assert status == 200
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


async def test_new_chat_list_reopen_delete_and_reload(browser: Any, bar_relay: Any) -> None:
    ctx, page, _log = await open_page(browser, bar_relay.url + "/")
    try:
        await open_bar(page)
        await send(page, "Alpha: what is the ember lamp?")
        alpha = await conversation_id(page)
        await page.click(q("button.new-chat"))
        beta = await wait_connected_to_other(page, alpha)
        await send(page, "Beta: tell me about shipping")

        # The list: both, titled by their first message, newest first, the current one marked.
        await open_history(page)
        assert await focused(page) == "icon-button history-back"
        shown = await entries(page, 2)
        assert [(e["id"], e["title"], e["current"]) for e in shown] == [
            (beta, "Beta: tell me about shipping", True), (alpha, "Alpha: what is the ember lamp?", False)]
        assert shown[0]["aria_current"] == "true" and shown[1]["aria_current"] is None
        assert shown[1]["delete_label"] == "Delete “Alpha: what is the ember lamp?”"
        assert await page.is_hidden(q(".scroller"))
        # Closing the bar keeps the list; opening it again puts the focus on the list.
        await page.click(TOGGLE)
        await page.wait_for_selector(q("section.panel"), state="hidden")
        await page.click(TOGGLE)
        await page.wait_for_selector(q("section.history"), state="visible")
        assert await focused(page) == "icon-button history-back"

        # Reopen the older one: its messages are shown, the composer has the focus, a new message goes to it.
        await page.click(q(f".history-open[data-id='{alpha}']"))
        await page.wait_for_selector(q("section.history"), state="hidden")
        assert await wait_connected_to_other(page, beta) == alpha
        await page.wait_for_function(
            "() => [...document.getElementById('autopilot-bar-host').shadowRoot"
            ".querySelectorAll('.message.user')].some(m => m.textContent.includes('Alpha: what is the ember lamp?'))")
        assert "Beta" not in await page.locator(q(".messages")).text_content()
        assert await focused(page) == "input"
        await send(page, "Alpha again: and its price?")
        assert await stored_user_texts(bar_relay.url, alpha) == [
            "Alpha: what is the ember lamp?", "Alpha again: and its price?"]
        assert await stored_user_texts(bar_relay.url, beta) == ["Beta: tell me about shipping"]

        # Now the reopened one is the most recent and the current one.
        await open_history(page)
        shown = await entries(page, 2)
        assert [(e["id"], e["current"]) for e in shown] == [(alpha, True), (beta, False)]

        # Delete asks first: Escape and Cancel keep it, the focus goes back to its delete button.
        await page.click(q(f".history-delete[data-id='{beta}']"))
        await page.wait_for_selector(q(f".history-item[data-id='{beta}'][data-confirming='true']"))
        assert "Delete “Beta: tell me about shipping”? This cannot be undone." in (
            await page.locator(q(".history-confirm-text")).text_content())
        assert await focused(page) == "history-delete-no"
        await page.keyboard.press("Escape")
        await page.wait_for_selector(q(f".history-delete[data-id='{beta}']"))
        assert await page.is_visible(q("section.history"))  # Escape cancelled the deletion, not the list
        assert await focused(page) == "icon-button history-delete"
        await page.keyboard.press("Enter")  # the delete button again, from the keyboard
        await page.wait_for_selector(q(".history-delete-no"))
        await page.keyboard.press("Enter")  # Cancel
        await page.wait_for_selector(q(f".history-delete[data-id='{beta}']"))
        assert await focused(page) == "icon-button history-delete"
        assert await asyncio.to_thread(relay_get, f"{bar_relay.url}/api/conversations/{beta}") != (404, None)
        await page.keyboard.press("Enter")
        await page.click(q(".history-delete-yes"))
        shown = await entries(page, 1)
        assert [e["id"] for e in shown] == [alpha]
        assert (await asyncio.to_thread(relay_get, f"{bar_relay.url}/api/conversations/{beta}"))[0] == 404
        assert beta not in await page.evaluate("() => localStorage.getItem('autopilot:conversations:demo')")
        assert await conversation_id(page) == alpha  # deleting another one leaves the current one alone

        # Escape closes the list; the focus returns to the header's button.
        await page.keyboard.press("Escape")
        await page.wait_for_selector(q("section.history"), state="hidden")
        assert await focused(page) == "icon-button history-button"
        assert await page.is_visible(q(".scroller"))

        # New chat, then a reload: the list is kept (the empty new chat is not listed), the current one marked.
        await page.click(q("button.new-chat"))
        gamma = await wait_connected_to_other(page, alpha)
        await send(page, "Gamma: a third question")
        await page.reload()
        await page.wait_for_function("() => performance.getEntriesByName('autopilot:joined').length > 0",
                                     timeout=60_000)
        assert await conversation_id(page) == gamma
        await open_history(page)
        shown = await entries(page, 2)
        assert [(e["id"], e["title"], e["current"]) for e in shown] == [
            (gamma, "Gamma: a third question", True), (alpha, "Alpha: what is the ember lamp?", False)]

        # Deleting the current one starts a fresh conversation.
        await page.click(q(f".history-delete[data-id='{gamma}']"))
        await page.click(q(".history-delete-yes"))
        fresh = await wait_connected_to_other(page, gamma)
        shown = await entries(page, 1)
        assert [e["id"] for e in shown] == [alpha] and fresh not in (alpha, beta, gamma)
        assert (await asyncio.to_thread(relay_get, f"{bar_relay.url}/api/conversations/{gamma}"))[0] == 404
        await page.keyboard.press("Escape")
        assert await page.locator(q(".messages > .message")).count() == 0
    finally:
        await ctx.close()


async def test_two_readers_never_see_each_others_conversations(browser: Any, bar_relay: Any) -> None:
    (ctx_a, page_a, _), (ctx_b, page_b, _) = await asyncio.gather(
        open_page(browser, bar_relay.url + "/"), open_page(browser, bar_relay.url + "/"))
    try:
        await open_bar(page_a)
        await open_bar(page_b)
        await send(page_a, "Reader A, first chat")
        await send(page_b, "Reader B, first chat")
        a1, b1 = await conversation_id(page_a), await conversation_id(page_b)
        await page_a.click(q("button.new-chat"))
        a2 = await wait_connected_to_other(page_a, a1)
        await send(page_a, "Reader A, second chat")

        await open_history(page_a)
        await open_history(page_b)
        seen_a = await entries(page_a, 2)
        seen_b = await entries(page_b, 1)
        assert [e["id"] for e in seen_a] == [a2, a1]
        assert [e["title"] for e in seen_a] == ["Reader A, second chat", "Reader A, first chat"]
        assert [(e["id"], e["title"]) for e in seen_b] == [(b1, "Reader B, first chat")]
        stored_a = await page_a.evaluate("() => localStorage.getItem('autopilot:conversations:demo')")
        stored_b = await page_b.evaluate("() => localStorage.getItem('autopilot:conversations:demo')")
        assert b1 not in stored_a and a1 not in stored_b and a2 not in stored_b
        assert [e["id"] for e in await py(page_b, "await client.conversations()")] == [b1]
        # The page's JS API sees the same, its own only; and it can switch and delete.
        assert await page_b.evaluate("() => Autopilot.conversations().then(l => l.map(e => e.id))") == [b1]
        assert await page_a.evaluate("(id) => Autopilot.openConversation(id)", a1) is True
        assert await conversation_id(page_a) == a1
        assert await page_b.evaluate("(id) => Autopilot.openConversation(id)", a1) is False  # not one of B's
        assert await conversation_id(page_b) == b1
        assert await page_a.evaluate("(id) => Autopilot.deleteConversation(id)", a2) is True
        assert [e["id"] for e in await entries(page_a, 1)] == [a1]
        assert "Reader A" not in await page_b.locator(q("section.panel")).text_content()
        assert "Reader B" not in await page_a.locator(q("section.panel")).text_content()
    finally:
        await ctx_a.close()
        await ctx_b.close()


async def test_axe_finds_no_violation_in_the_list(browser: Any, bar_relay: Any) -> None:
    """The list, an entry's deletion being confirmed, and an error, in light and dark: no axe violation of ours."""
    from test_bar_a11y import axe_source, violations

    ctx = await browser.new_context(bypass_csp=True)
    _, page, _ = await open_page(browser, bar_relay.url + "/", context=ctx)
    try:
        await open_bar(page)
        await send(page, "An accessible first question")
        first = await conversation_id(page)
        await page.click(q("button.new-chat"))
        await wait_connected_to_other(page, first)
        await send(page, "A second one, " + "quite long " * 12)
        await page.add_script_tag(content=axe_source())
        found: dict[str, Any] = {}
        for scheme in ("light", "dark"):
            await page.emulate_media(color_scheme=scheme)
            await open_history(page)
            await entries(page, 2)
            found[f"{scheme} list"] = await violations(page)
            await page.click(q(f".history-delete[data-id='{first}']"))
            await page.wait_for_selector(q(".history-delete-no"))
            found[f"{scheme} confirm"] = await violations(page)
            await page.keyboard.press("Escape")
            await page.keyboard.press("Escape")
            await page.wait_for_selector(q("section.history"), state="hidden")
        # An error shown with the list (the relay refuses the read): announced, and no violation either.
        await page.route("**/conversations/summaries", lambda route: route.fulfill(
            status=503, content_type="application/json",
            body=json.dumps({"ok": False, "error": {"code": "unavailable", "message": "The relay is busy."}})))
        await open_history(page)
        await page.wait_for_selector(q(".history-status[data-kind='error']"))
        status = page.locator(q(".history-status"))
        assert await status.get_attribute("role") == "status"
        assert "The relay is busy." in await status.text_content()
        assert len(await entries(page, 2)) == 2  # what was read before stays listed
        found["error"] = await violations(page)
        assert {k: v for k, v in found.items() if v} == {}
    finally:
        await ctx.close()


CROSS_ORIGIN_PAGE = """<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,">
<title>shop</title></head><body><p>A page on the site's own origin.</p>
<script src="/widget/autopilot.js" data-relay="{relay}" data-app="demo" data-boot="eager"></script></body></html>"""


async def test_the_list_on_a_page_of_another_origin(browser: Any, page_server: Any, bar_relay: Any) -> None:
    """The usual embedding: the page's origin is not the relay's, so the summaries request is preflighted and
    answered with CORS for the app's origin."""
    url = page_server.add("/__test__/history.html", CROSS_ORIGIN_PAGE.replace("{relay}", bar_relay.url))
    ctx, page, log = await open_page(browser, url)
    try:
        await open_bar(page)
        await send(page, "From the shop page")
        first = await conversation_id(page)
        await page.click(q("button.new-chat"))
        second = await wait_connected_to_other(page, first)
        await send(page, "Again from the shop page")
        await open_history(page)
        shown = await entries(page, 2)
        assert [(e["id"], e["title"]) for e in shown] == [(second, "Again from the shop page"),
                                                          (first, "From the shop page")]
        assert await page.evaluate("() => Autopilot.conversations().then(l => l.length)") == 2
        assert any("/conversations/summaries" in r for r in log.requests)
        assert log.console_errors == [] and log.page_errors == []
    finally:
        await ctx.close()

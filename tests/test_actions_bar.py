"""Offered actions in the bar, in Chromium, with the relay's demo model and the demo shop's actions.

The demo model offers the page's action X when the reader writes "offer X {json arguments}"; the reader presses
the button or sends the form; the page runs it (event, href, page handler); the outcome replaces the button and
the relay records it for the model's next turn. A reload shows the answers without their actions.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import pytest
from support import open_page, wait_mark
from test_bar import fixture_bar_page, fixture_bar_relay, js_root, last_message, open_bar, py, q, send  # noqa: F401

pytestmark = pytest.mark.browser


async def stored_messages(page: Any) -> list[dict[str, Any]]:
    """The conversation as the relay's GET returns it (what a reload gets)."""
    url = await py(page, "client.conversation_url")

    def get() -> list[dict[str, Any]]:
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read())["messages"]

    return await asyncio.to_thread(get)  # off the event loop the page's driver runs on


async def focused_class(page: Any) -> str:
    return await js_root(page, "const a = r.activeElement; return a ? a.className : '';")


async def offer(page: Any, text: str) -> Any:
    """Send ``text`` (an "offer ..." message), wait for the answer; its actions group."""
    await send(page, text)
    answer = await last_message(page, "assistant")
    await answer.locator(".action").first.wait_for()
    return answer


async def test_button_shows_the_pages_label_the_arguments_and_runs_the_pages_event(bar_page):
    page = bar_page.page
    await open_bar(page)
    await page.evaluate("""() => { window.__care = [];
        window.addEventListener('lumen:care-guide', e => window.__care.push(e.detail)); }""")
    answer = await offer(page, 'offer care_guide {"sku": "ember"}')
    group = answer.locator(".actions")
    assert await group.get_attribute("role") == "group"
    button = answer.locator("button.action-button")
    assert await button.count() == 1
    # First line: the page's label; second line: the model's arguments; both in the accessible name.
    assert await button.locator(".action-label").text_content() == "Show the care guide"
    assert await button.locator(".action-args").text_content() == "With sku: ember"
    assert await button.get_attribute("aria-label") == "Show the care guide, With sku: ember"
    assert await page.get_by_role("button", name="Show the care guide, With sku: ember").count() == 1
    # The model's own text has no control in it: the answer's buttons are the action, Regenerate and the bar's own
    # answer tools (copy, rating), none of them inside the rendered content.
    tools = await answer.locator(".answer-tools button").count()
    assert tools >= 1 and await answer.locator("button").count() == 2 + tools
    assert await answer.locator(".content button, .content input, .content form").count() == 0
    await button.click()
    status = answer.locator(".action-status")
    await page.wait_for_function(
        """() => { const s = document.getElementById('autopilot-bar-host').shadowRoot
              .querySelector('.messages > .message:last-child .action-status');
            return s && s.getAttribute('data-kind') === 'done'; }""")
    # The outcome replaces the button.
    assert await button.is_hidden()
    assert await status.locator(".action-outcome-text").text_content() == "Done."
    assert await status.get_attribute("role") == "status"
    # The page's dialog opened (show() gave it the focus: the page's own decision, the bar does not take it back).
    assert await page.evaluate("document.activeElement.closest('#care-dialog') !== null")
    # The page's own JavaScript received the event with the checked arguments and the context.
    care = await page.evaluate("window.__care")
    assert len(care) == 1 and care[0]["tool"] == "care_guide" and care[0]["args"] == {"sku": "ember"}
    assert care[0]["context"]["question"] == 'offer care_guide {"sku": "ember"}'
    assert await page.is_visible("#care-dialog") and "Ember" in await page.text_content("#care-title")
    await page.evaluate("document.getElementById('care-dialog').close()")
    # Recorded with the relay: the next GET has the action message.
    mid = await answer.get_attribute("data-key")
    notes = [m for m in await stored_messages(page) if m["role"] == "action" and m["message_id"] == mid]
    assert [(n["name"], n["arguments"], n["ok"], n["outcome"]) for n in notes] == [
        ("care_guide", {"sku": "ember"}, True, "Done.")]


async def test_end_to_end_the_demo_model_offers_and_the_reader_presses(bar_page):
    """The issue's end-to-end check: offered by the model, pressed by the reader, seen by the model next turn."""
    page = bar_page.page
    await open_bar(page)
    answer = await offer(page, 'offer contact_support {"email": "ada@example.com", "message": "My Nimbus hums."}')
    assert "offered" in await answer.locator(".content").text_content()
    await answer.get_by_role("button", name="Write to support").click()
    form = answer.locator("form.action-form")
    await form.wait_for()
    await form.locator("button.action-send").click()
    await answer.locator('.action-status[data-kind="done"]').wait_for()
    outcome = await answer.locator(".action-outcome-text").text_content()
    assert outcome == "Sent. We will reply to ada@example.com within a working day."
    assert "ada@example.com" in await page.text_content("#toast")
    mid = await answer.get_attribute("data-key")
    notes = [m for m in await stored_messages(page) if m["role"] == "action" and m["message_id"] == mid]
    assert len(notes) == 1 and notes[0]["ok"] is True and notes[0]["outcome"] == outcome
    assert notes[0]["arguments"] == {"email": "ada@example.com", "message": "My Nimbus hums."}
    # The next turn goes on normally (the note is data for the model, not a message the reader sees).
    await send(page, "thanks")
    assert await page.locator(q(".message.action")).count() == 0


async def test_form_prefills_edits_refuses_invalid_input_and_takes_a_missing_required_value(bar_page):
    page = bar_page.page
    await open_bar(page)
    await py(page, """
import widget
CALLS = []
async def support(args, ctx):
    CALLS.append(args)
    return {"message": "Thanks, " + args["email"]}
REMOVE = client.register_tool("contact_support", support)
True""")
    try:
        answer = await offer(page, 'offer contact_support {"email": "ada@example.com", "lamp": "halo"}')
        button = answer.locator("button.action-button")
        assert await button.get_attribute("aria-expanded") == "false"
        assert await button.locator(".action-args").count() == 0  # a form shows its values in the form
        await button.click()
        form = answer.locator("form.action-form")
        await form.wait_for()
        assert await button.get_attribute("aria-expanded") == "true"
        assert await button.get_attribute("aria-controls") == await form.get_attribute("id")
        assert await form.locator(".action-form-title").text_content() == "Contact Lumen support"
        # One field per parameter, labelled with its description; types by schema; required marked.
        email = form.get_by_label("Your email address (we reply there)")
        message = form.get_by_label("Your question")
        lamp = form.get_by_label("The lamp it is about (optional)")
        assert await email.get_attribute("type") == "email" and await email.get_attribute("aria-required") == "true"
        assert await message.evaluate("e => e.tagName") == "TEXTAREA"
        assert await lamp.evaluate("e => e.tagName") == "SELECT"
        assert await lamp.evaluate("e => [...e.options].map(o => o.value)") == ["", "aurora", "nimbus", "ember", "halo"]
        assert await form.locator(".action-required").count() == 2
        # Prefilled with the model's suggestions; the missing required value is left for the reader.
        assert await email.input_value() == "ada@example.com" and await lamp.input_value() == "halo"
        assert await message.input_value() == ""
        # Focus moved into the form, to the first required field still empty.
        assert await js_root(page, "return r.activeElement.getAttribute('data-param');") == "message"
        # Invalid input is refused with messages, linked to their fields; nothing is sent.
        await email.fill("ada-at-example")
        await form.locator("button.action-send").click()
        email_error = form.locator('[data-field="email"] .action-field-error')
        await email_error.wait_for()
        assert await email_error.text_content() == "Enter an email address, like name@example.com."
        assert await email.get_attribute("aria-invalid") == "true"
        assert await email.get_attribute("aria-describedby") == await email_error.get_attribute("id")
        assert await form.locator('[data-field="message"] .action-field-error').text_content() == \
            "Please fill in this field."
        assert await form.locator(".action-form-error").text_content() == "Some fields need your attention."
        assert await js_root(page, "return r.activeElement.getAttribute('data-param');") == "email"
        assert await py(page, "len(CALLS)") == 0
        mid = await answer.get_attribute("data-key")
        assert not [m for m in await stored_messages(page) if m["role"] == "action" and m["message_id"] == mid]
        # The reader edits: fixes the email, supplies the message, changes the lamp.
        await email.fill("ada@example.org")
        await message.fill("The dimmer\nstopped working.")
        await lamp.select_option("ember")
        await form.locator("button.action-send").click()
        await answer.locator('.action-status[data-kind="done"]').wait_for()
        assert await py(page, "CALLS") == [{"email": "ada@example.org", "message": "The dimmer\nstopped working.",
                                            "lamp": "ember"}]
        assert await answer.locator(".action-outcome-text").text_content() == "Thanks, ada@example.org"
        assert await answer.locator("form.action-form").count() == 0 and await button.is_hidden()
        notes = [m for m in await stored_messages(page) if m["role"] == "action" and m["message_id"] == mid]
        assert notes[-1]["arguments"]["email"] == "ada@example.org" and notes[-1]["ok"] is True
    finally:
        await py(page, "REMOVE(); True")


async def test_a_failed_action_comes_back_for_a_retry(bar_page):
    page = bar_page.page
    await open_bar(page)
    await py(page, """
TRIES = []
def flaky(args, ctx):
    TRIES.append(args)
    if len(TRIES) == 1:
        raise RuntimeError("The help desk did not answer.")
    return "Sent on the second try."
REMOVE = client.register_tool("contact_support", flaky)
True""")
    try:
        answer = await offer(page, 'offer contact_support {"email": "bo@example.com", "message": "Hello"}')
        await answer.locator("button.action-button").click()
        form = answer.locator("form.action-form")
        await form.wait_for()
        await form.locator("button.action-send").click()
        # The failure is shown in the still-open form (values kept); Send again is the retry.
        error = form.locator(".action-form-error")
        await page.wait_for_function(
            """() => { const e = document.getElementById('autopilot-bar-host').shadowRoot
                  .querySelector('.messages > .message:last-child .action-form-error');
                return e && e.textContent.length > 0; }""")
        assert await error.text_content() == "The help desk did not answer."
        assert await error.get_attribute("role") == "alert"
        assert await form.get_by_label("Your question").input_value() == "Hello"
        assert await answer.locator(".action").get_attribute("data-status") == "failed"
        # Cancel: the form closes, the button is back with the error, focus on it.
        await form.locator("button.action-cancel").click()
        await form.wait_for(state="detached")
        button = answer.locator("button.action-button")
        assert await button.is_visible()
        assert await answer.locator(".action-error").text_content() == "The help desk did not answer."
        error_id = await answer.locator(".action-error").get_attribute("id")
        assert await button.get_attribute("aria-describedby") == error_id
        assert await focused_class(page) == "action-button"
        # Retry: the form opens again with the reader's values, and this time it works.
        await button.click()
        await form.wait_for()
        assert await form.get_by_label("Your question").input_value() == "Hello"
        await form.locator("button.action-send").click()
        await answer.locator('.action-status[data-kind="done"]').wait_for()
        assert await answer.locator(".action-outcome-text").text_content() == "Sent on the second try."
        assert await answer.locator(".action-error").text_content() == ""
        mid = await answer.get_attribute("data-key")
        notes = [m for m in await stored_messages(page) if m["role"] == "action" and m["message_id"] == mid]
        assert [n["ok"] for n in notes] == [False, True]
        assert notes[0]["outcome"] == "The help desk did not answer."
    finally:
        await py(page, "REMOVE(); True")


async def test_a_failed_button_action_shows_the_error_under_the_button(bar_page):
    page = bar_page.page
    await open_bar(page)
    await py(page, """
BOOM = []
def once(args, ctx):
    BOOM.append(1)
    if len(BOOM) == 1:
        raise RuntimeError("No guide for that lamp yet.")
    return {"message": "Guide opened."}
REMOVE = client.register_tool("care_guide", once)
True""")
    try:
        answer = await offer(page, 'offer care_guide {"sku": "halo"}')
        button = answer.locator("button.action-button")
        await button.click()
        err = answer.locator(".action-error")
        await page.wait_for_function(
            """() => { const e = document.getElementById('autopilot-bar-host').shadowRoot
                  .querySelector('.messages > .message:last-child .action-error');
                return e && e.textContent.length > 0; }""")
        assert await err.text_content() == "No guide for that lamp yet."
        assert await button.is_visible() and await button.get_attribute("aria-disabled") is None
        assert await focused_class(page) == "action-button"  # the reader can press again at once
        await page.keyboard.press("Enter")
        await answer.locator('.action-status[data-kind="done"]').wait_for()
        assert await answer.locator(".action-outcome-text").text_content() == "Guide opened."
        assert await err.text_content() == ""
        # The pressed button is gone: focus lands on the outcome that replaced it.
        assert await focused_class(page) == "action-status"
    finally:
        await py(page, "REMOVE(); True")


async def test_form_fields_follow_the_schema_types(bar_page):
    """Every parameter type of a flat schema, declared by the test: number, integer, boolean, enum, email, text."""
    page = bar_page.page
    await open_bar(page)
    await py(page, """
GOT = []
client.tools({"book_visit": {
    "title": "Book a workshop visit", "label": "Book a visit",
    "description": "Book a visit to the workshop.",
    "parameters": {"type": "object", "properties": {
        "people": {"type": "integer", "minimum": 1, "maximum": 8, "description": "How many people"},
        "budget": {"type": "number", "description": "Budget in euros"},
        "parking": {"type": "boolean", "description": "Needs parking"},
        "newsletter": {"type": "boolean", "description": "Send me the newsletter"},
        "day": {"type": "string", "enum": ["Mon", "Tue"], "description": "Day"},
        "name": {"type": "string", "maxLength": 40}},
        "required": ["people", "day"]},
    "confirm": "form", "run": {"event": "lumen:book"}}})
REMOVE = client.register_tool("book_visit", lambda args, ctx: GOT.append(args) or "Booked.")
await client.sync_registered_functions()""")
    try:
        answer = await offer(page, 'offer book_visit {"people": 2, "parking": true, "day": "Tue", '
                                   '"name": "<img src=x onerror=alert(1)>"}')
        await answer.locator("button.action-button").click()
        form = answer.locator("form.action-form")
        await form.wait_for()
        people, budget = form.get_by_label("How many people"), form.get_by_label("Budget in euros")
        parking, news = form.get_by_label("Needs parking"), form.get_by_label("Send me the newsletter")
        # Accessible names are the descriptions (the required mark is not read); no description: the name.
        day = form.get_by_role("combobox", name="Day", exact=True)
        name = form.get_by_role("textbox", name="name", exact=True)
        assert await people.get_attribute("inputmode") == "numeric" and await people.input_value() == "2"
        assert await budget.get_attribute("inputmode") == "decimal" and await budget.input_value() == ""
        assert await parking.get_attribute("type") == "checkbox" and await parking.is_checked()
        assert not await news.is_checked()
        assert await day.evaluate("e => e.tagName") == "SELECT" and await day.input_value() == "Tue"
        assert await day.evaluate("e => [...e.options].map(o => o.value)") == ["Mon", "Tue"]  # required, prefilled
        # The model's text is a value in a field, never markup.
        assert await name.input_value() == "<img src=x onerror=alert(1)>"
        assert await name.get_attribute("maxlength") == "40"
        assert await form.locator("img").count() == 0
        # Focus went to the first field (nothing required is empty).
        assert await js_root(page, "return r.activeElement.getAttribute('data-param');") == "people"
        await people.fill("nine")
        await budget.fill("12,5")
        await form.locator("button.action-send").click()
        await form.locator('[data-field="people"][data-invalid="true"]').wait_for()
        assert await form.locator('[data-field="people"] .action-field-error').text_content() == "Enter a whole number."
        assert await form.locator('[data-field="budget"] .action-field-error').text_content() == "Enter a number."
        assert await js_root(page, "return r.activeElement.getAttribute('data-param');") == "people"
        # Sent again unchanged (same problems): refused again, the focus goes back to the first problem.
        await form.locator("button.action-send").focus()
        await page.keyboard.press("Enter")
        await page.wait_for_function("""() => { const r = document.getElementById('autopilot-bar-host').shadowRoot;
            return r.activeElement && r.activeElement.getAttribute('data-param') === 'people'; }""")
        assert await py(page, "GOT") == []
        await people.fill("9")
        await budget.fill("12.5")
        await form.locator("button.action-send").click()
        await form.locator('[data-field="people"] .action-field-error:text("Enter a number at most 8.")').wait_for()
        assert await form.locator('[data-field="budget"] .action-field-error').text_content() == ""
        await people.fill("3")
        await parking.uncheck()
        await name.fill("Ada")
        await form.locator("button.action-send").click()
        await answer.locator('.action-status[data-kind="done"]').wait_for()
        # Typed values; the untouched optional yes/no stays absent; the prefilled one is sent as unchecked.
        assert await py(page, "GOT") == [{"people": 3, "budget": 12.5, "parking": False, "day": "Tue", "name": "Ada"}]
    finally:
        await py(page, "REMOVE(); client.unregister_function('book_visit'); True")


async def test_keyboard_opens_the_form_escape_cancels_and_focus_returns(bar_page):
    page = bar_page.page
    await open_bar(page)
    answer = await offer(page, 'offer contact_support {"email": "kb@example.com"}')
    button = answer.locator("button.action-button")
    await button.focus()
    await page.keyboard.press("Enter")
    form = answer.locator("form.action-form")
    await form.wait_for()
    assert await js_root(page, "return r.activeElement.getAttribute('data-param');") == "message"
    await page.keyboard.type("Typed with the keyboard")
    await page.keyboard.press("Tab")
    assert await js_root(page, "return r.activeElement.getAttribute('data-param');") == "lamp"
    await page.keyboard.press("Escape")  # cancels the form, not the bar
    await form.wait_for(state="detached")
    assert await page.is_visible(q("section.panel"))
    assert await focused_class(page) == "action-button"
    assert await button.get_attribute("aria-expanded") == "false"
    assert await answer.locator(".action-error").text_content() == ""


async def test_the_demo_stock_tool_reads_the_static_feed(bar_page):
    """The demo's read-only function tool: a declarative GET of demo/stock/{sku}.json next to the build."""
    page = bar_page.page
    await open_bar(page)
    await send(page, 'stock_level {"sku": "ember"}')
    pill = page.locator(q(".message.assistant .call")).filter(has_text="stock_level").last
    await page.wait_for_function("""() => { const p = [...document.getElementById('autopilot-bar-host').shadowRoot
        .querySelectorAll('.call')].pop(); return p && p.getAttribute('data-status') === 'success'; }""")
    await pill.locator("summary").click()
    texts = await pill.locator(".call-body pre").all_text_contents()
    assert json.loads(texts[-1]) == {"sku": "ember", "in_stock": 0, "restock_in_days": 4}


async def test_offers_are_live_only_a_reload_shows_answers_without_actions(bar_page, browser):
    page = bar_page.page
    await open_bar(page)
    answer = await offer(page, 'offer care_guide {"sku": "aurora"} and offer open_product {"sku": "nimbus"}')
    assert await answer.locator("button.action-button").count() == 2
    mid = await answer.get_attribute("data-key")
    # GET never has actions.
    stored = next(m for m in await stored_messages(page) if m["id"] == mid)
    assert "actions" not in stored
    # The same conversation in a fresh page (a reload in another tab of the same browser profile).
    ctx, other, _ = await open_page(browser, bar_page.relay.url + "/", context=bar_page.context)
    try:
        await open_bar(other)
        restored = other.locator(q(f'.message[data-key="{mid}"]'))
        await restored.wait_for()
        assert "offered" in await restored.locator(".content").text_content()
        assert await other.locator(q(".action")).count() == 0
        assert await other.locator(q(".actions")).evaluate_all("els => els.every(e => e.hidden)")
    finally:
        await other.close()
        await page.bring_to_front()
        use_here = page.locator(q("button.use-here"))
        if await use_here.count():
            await use_here.click()


async def test_same_host_href_opens_in_place_and_the_reloaded_page_has_no_actions(browser, bar_relay):
    """Last: it navigates the page. The demo's open_product opens ?product=<sku> on the same host, in place."""
    ctx, page, log = await open_page(browser, bar_relay.url + "/")
    try:
        await open_bar(page)
        answer = await offer(page, 'offer open_product {"sku": "halo"}')
        button = answer.get_by_role("button", name="Open the lamp's page, With sku: halo")
        mid = await answer.get_attribute("data-key")
        async with page.expect_navigation():
            await button.click()
        assert page.url == bar_relay.url + "/?product=halo"
        assert len(ctx.pages) == 1  # in place, no new tab
        await wait_mark(page, "autopilot:joined")
        # The reloaded page highlights the lamp, and shows the conversation without its actions.
        await page.wait_for_selector('.product[data-sku="halo"].highlight')
        await open_bar(page)
        await page.locator(q(f'.message[data-key="{mid}"]')).wait_for()
        assert await page.locator(q(".action")).count() == 0
    finally:
        await ctx.close()

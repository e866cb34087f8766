"""Ask user in the bar (Chromium): the demo model's question end to end, and all four prompt types."""

from __future__ import annotations

import json

import pytest
from test_bar import fixture_bar_page, fixture_bar_relay, js_root, open_bar, py, q, send, user_count, wait_turn_done  # noqa: F401

pytestmark = pytest.mark.browser

PROMPTS = [
    {"id": "p-text", "type": "text", "question": "Who is the lamp for? <img src=x onerror=alert(1)>",
     "arguments": {"placeholder": "A name <b>bold</b>", "multiline": True}},
    {"id": "p-bool", "type": "bool", "question": "Gift wrap it?",
     "arguments": {"yes_label": "Wrap it", "no_label": "No wrapping"}},
    {"id": "p-radio", "type": "radiolist", "question": "Which shade?",
     "arguments": {"options": [{"value": "linen", "label": "Linen"},
                               {"value": "<i>smoke</i>", "label": "<i>Smoke</i>"}]}},
    {"id": "p-check", "type": "checklist", "question": "Any extras?",
     "arguments": {"options": [{"value": "bulb", "label": "Spare bulb"}, {"value": "cable", "label": "Long cable"},
                               {"value": "dimmer", "label": "Dimmer"}]}},
]

FAKE_RELAY = """
from widget.core.ask_user import check_answers
RECORDED = []
async def fake_respond(answers):
    check_answers(client.pending_ask_user, answers)
    RECORDED.append(answers)
    client._set_pending_ask_user([])
    return {"ok": True}
client.respond_to_ask_user = fake_respond
client._set_pending_ask_user(PROMPTS)
bar.flush()
True"""


async def test_the_demo_models_question_end_to_end(bar_page):
    page = bar_page.page
    await open_bar(page)
    n = await user_count(page)
    await send(page, "Before you pick, ask me", wait=False)
    form = page.locator(q("form.ask-user"))
    await form.wait_for()
    # Focus moved into the form; the composer waits; the relay's ask_user call says it waits for the reader.
    assert await js_root(page, "return r.activeElement.className;") == "ask-choice"
    assert await js_root(page, "return r.querySelector('.input').readOnly;") is True
    assert "questions above" in await page.get_attribute(q("textarea.input"), "placeholder")
    await page.locator(q(".call")).filter(has_text="Waiting for your answer").last.wait_for()
    assert await form.locator(".ask-tabs").is_hidden()  # one prompt: no tabs
    assert await form.locator("legend").text_content() == "Which colour do you prefer?"
    # Submitting without a choice is refused in place.
    await form.locator("button.ask-submit").click()
    assert await form.locator(".ask-field-error").text_content() == "Please choose an option."
    assert await form.locator(".ask-error").text_content() == "Some answers are missing."
    await form.locator(".ask-option").filter(has_text="Green").click()
    await form.locator("button.ask-submit").click()
    await form.wait_for(state="hidden")
    await wait_turn_done(page, n + 1)
    answer = page.locator(q(".message.assistant")).last
    assert "You answered: green" in await answer.text_content()
    assert await js_root(page, "return r.querySelector('.input').readOnly;") is False


async def test_all_four_prompt_types_tabs_validation_and_one_submit(bar_page):
    page = bar_page.page
    await open_bar(page)
    await py(page, f"PROMPTS = {json.loads(json.dumps(PROMPTS))!r}\n" + FAKE_RELAY)
    form = page.locator(q("form.ask-user"))
    await form.wait_for()
    tabs = form.locator(".ask-tab")
    assert await tabs.all_text_contents() == ["Question 1", "Question 2", "Question 3", "Question 4"]
    assert await tabs.nth(0).get_attribute("aria-selected") == "true"
    # Model-provided text is text: question, placeholder, labels.
    panel = form.locator("#ap-ask-panel-0")
    assert await panel.locator("legend").text_content() == "Who is the lamp for? <img src=x onerror=alert(1)>"
    field = panel.locator("textarea.ask-text")  # multiline: a textarea
    assert await field.get_attribute("placeholder") == "A name <b>bold</b>"
    assert await form.locator("img, b, i").count() == 0
    # Submit with nothing answered: the first invalid prompt is shown and focused; tabs are marked.
    await form.locator("button.ask-submit").click()
    assert await js_root(page, "return r.activeElement.className;") == "ask-text"
    assert await tabs.nth(0).get_attribute("data-invalid") == "true"
    assert await tabs.nth(1).get_attribute("data-invalid") == "true"
    assert await tabs.nth(2).get_attribute("data-invalid") == "true"
    assert await tabs.nth(3).get_attribute("data-invalid") is None  # a checklist may stay empty
    assert await py(page, "RECORDED") == []
    await field.fill("Ada\nLovelace")
    # Arrow keys move between tabs (roving tabindex).
    await tabs.nth(0).focus()
    await page.keyboard.press("ArrowRight")
    assert await tabs.nth(1).get_attribute("aria-selected") == "true"
    bool_panel = form.locator("#ap-ask-panel-1")
    assert await bool_panel.locator(".ask-option-label").all_text_contents() == ["Wrap it", "No wrapping"]
    await bool_panel.locator(".ask-option").filter(has_text="No wrapping").click()
    await tabs.nth(2).click()
    radio_panel = form.locator("#ap-ask-panel-2")
    assert await radio_panel.locator(".ask-option-label").all_text_contents() == ["Linen", "<i>Smoke</i>"]
    await radio_panel.locator(".ask-option").nth(1).click()
    await tabs.nth(3).click()
    check_panel = form.locator("#ap-ask-panel-3")
    await check_panel.locator(".ask-option").filter(has_text="Spare bulb").click()
    await check_panel.locator(".ask-option").filter(has_text="Dimmer").click()
    await form.locator("button.ask-submit").click()
    await form.wait_for(state="hidden")
    recorded = await py(page, "RECORDED")
    assert recorded == [[
        {"id": "p-text", "result": "Ada\nLovelace"},
        {"id": "p-bool", "result": False},
        {"id": "p-radio", "result": "<i>smoke</i>"},
        {"id": "p-check", "result": ["bulb", "dimmer"]},
    ]]
    assert await js_root(page, "return r.querySelector('.input').readOnly;") is False
    await py(page, "del client.respond_to_ask_user\nTrue")


async def test_a_refused_answer_is_shown_next_to_the_prompts(bar_page):
    page = bar_page.page
    await open_bar(page)
    prompts = [{"id": "p1", "type": "bool", "question": "Sure?"}]
    await py(page, f"""
PROMPTS = {prompts!r}
from widget.errors import ProtocolError
async def refuse(answers):
    raise ProtocolError("not_found", "The question was already answered elsewhere.")
client.respond_to_ask_user = refuse
client._set_pending_ask_user(PROMPTS)
bar.flush()
True""")
    form = page.locator(q("form.ask-user"))
    await form.wait_for()
    await form.locator(".ask-option").filter(has_text="Yes").click()
    await form.locator("button.ask-submit").click()
    error = form.locator(".ask-error")
    await page.wait_for_function(
        "() => document.getElementById('autopilot-bar-host').shadowRoot.querySelector('.ask-error').textContent"
        ".includes('already answered')")
    assert await error.is_visible()
    assert await form.locator("button.ask-submit").is_enabled()
    # The relay clears the prompt (e.g. answered in another tab): the form goes away.
    await py(page, "client._set_pending_ask_user([])\ndel client.respond_to_ask_user\nbar.flush()\nTrue")
    await form.wait_for(state="hidden")

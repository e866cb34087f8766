"""Offered actions in the headless store, under CPython against the in-memory relay: live offers per
shown message, their state and outcome, never-raising press/submit wrappers, form checks before anything runs."""

from __future__ import annotations

from typing import Any

import pytest
from fake_relay import BASE, FakeRelay, MemoryTransport

from widget import AutopilotClient
from widget.env import MemoryEnv
from widget.store import Store, arguments_text, form_arguments

pytestmark = pytest.mark.unit

PLAN = {"type": "object", "properties": {"plan": {"type": "string", "enum": ["free", "pro", "team"]}},
        "required": ["plan"]}
SUPPORT = {"type": "object", "properties": {
    "email": {"type": "string", "format": "email", "description": "Where support replies"},
    "message": {"type": "string", "format": "multiline", "description": "The problem"},
    "lamps": {"type": "integer", "minimum": 1, "maximum": 20, "description": "How many lamps"},
    "urgent": {"type": "boolean", "description": "Urgent"}},
    "required": ["email", "message"]}
TOOLS = {
    "open_pricing": {"description": "Open the pricing page.", "label": "Open pricing", "parameters": PLAN,
                     "confirm": True, "run": {"href": "/pricing?plan={plan}"}},
    "contact_support": {"description": "Write to support.", "label": "Write to support", "title": "Contact support",
                        "parameters": SUPPORT, "confirm": "form", "run": {"fetch": "/api/support", "method": "POST"}},
}


async def connected() -> tuple[FakeRelay, MemoryTransport, AutopilotClient, Store, MemoryEnv, list[str]]:
    relay = FakeRelay()
    transport = MemoryTransport(relay)
    env = MemoryEnv()
    client = AutopilotClient(transport, env=env)
    client.tools(TOOLS)
    store = Store(client)
    changes: list[str] = []
    store.subscribe(changes.append)
    await client.connect(relay_url=BASE, app_id="demo")
    return relay, transport, client, store, env, changes


def answer(relay: FakeRelay, t: MemoryTransport, mid: str, content: str, actions: list[tuple[str, dict]],
           **extra: Any) -> None:
    relay.push(t, "completion.started", {"turn_id": "t1", "message_id": mid})
    relay.push(t, "completion.ended", {"message": {
        "id": mid, "role": "assistant", "content": content, "function_calls": extra.pop("function_calls", []),
        "actions": [{"id": f"{mid}-act{i}", "name": n, "arguments": a} for i, (n, a) in enumerate(actions)]},
        "tool_messages": extra.pop("tool_messages", [])})
    relay.push(t, "completion.finished", {"turn_id": "t1", "status": "done"})


async def test_offers_appear_under_their_answer_with_the_pages_label():
    relay, t, client, store, env, changes = await connected()
    relay.push(t, "message", {"message": {"id": "u1", "role": "user", "content": "pricing for pro?"}})
    answer(relay, t, "a1", "Here.", [("open_pricing", {"plan": "pro"}), ("contact_support", {"email": "a@b.co"})])
    assert "actions" in changes
    offers = store.actions_for("a1")
    assert [(o["label"], o["confirm"], o["status"]) for o in offers] == [
        ("Open pricing", "button", "offered"), ("Write to support", "form", "offered")]
    assert offers[0]["arguments"] == {"plan": "pro"} and offers[0]["message_id"] == "a1"
    assert store.actions_for("u1") == []
    assert arguments_text(offers[0]["arguments"]) == "plan: pro"
    assert arguments_text({"a": True, "b": None, "n": 2.0, "s": "x"}) == "a: yes, n: 2, s: x"


async def test_press_runs_a_button_action_and_the_outcome_replaces_it():
    relay, t, client, store, env, changes = await connected()
    answer(relay, t, "a1", "Here.", [("open_pricing", {"plan": "pro"})])
    assert await store.press_action("a1", "a1-act0") is True
    assert env.navigations == ["/pricing?plan=pro"]
    offer = store.actions_for("a1")[0]
    assert (offer["status"], offer["outcome"], offer["error"]) == ("done", "Done.", None)
    assert relay.outcomes[-1]["ok"] is True and relay.outcomes[-1]["arguments"] == {"plan": "pro"}
    # Done is done: a second press does nothing and raises nothing.
    assert await store.press_action("a1", "a1-act0") is False
    assert len(relay.outcomes) == 1
    assert await store.press_action("a1", "no-such-action") is False


async def test_a_failure_shows_its_error_and_the_button_comes_back_for_a_retry():
    relay, t, client, store, env, changes = await connected()
    answer(relay, t, "a1", "Here.", [("open_pricing", {"plan": "pro"})])
    attempts = []

    def flaky(args, ctx):
        attempts.append(args)
        if len(attempts) == 1:
            raise RuntimeError("The pricing page is down.")
        return {"message": "Opened the pro plan."}

    client.register_tool("open_pricing", flaky)
    seen: list[str] = []
    store.subscribe(lambda what: seen.append(store.actions_for("a1")[0]["status"]) if what == "actions" else None)
    assert await store.press_action("a1", "a1-act0") is False
    offer = store.actions_for("a1")[0]
    assert (offer["status"], offer["error"]) == ("failed", "The pricing page is down.")
    assert "running" in seen
    assert await store.press_action("a1", "a1-act0") is True
    offer = store.actions_for("a1")[0]
    assert (offer["status"], offer["outcome"], offer["error"]) == ("done", "Opened the pro plan.", None)
    assert [o["ok"] for o in relay.outcomes] == [False, True]


async def test_a_form_opens_checks_every_field_and_sends_nothing_until_they_pass():
    relay, t, client, store, env, changes = await connected()
    answer(relay, t, "a1", "Write to us.", [("contact_support", {"email": "ada@example.com"})])
    assert await store.press_action("a1", "a1-act0") is True  # a form action: pressing opens the form
    offer = store.actions_for("a1")[0]
    assert offer["form_open"] and offer["status"] == "offered" and env.fetches == []
    ok = await store.submit_action_form("a1", "a1-act0", {"email": "nope", "message": "  ", "lamps": "2.5",
                                                          "urgent": None})
    assert ok is False and env.fetches == [] and relay.outcomes == []
    offer = store.actions_for("a1")[0]
    assert offer["field_errors"] == {"email": "Enter an email address, like name@example.com.",
                                     "message": "Please fill in this field.", "lamps": "Enter a whole number."}
    assert offer["error"] and offer["form_open"] and offer["values"]["email"] == "nope"
    store.clear_action_field_error("a1", "a1-act0", "email")
    assert "email" not in store.actions_for("a1")[0]["field_errors"]
    ok = await store.submit_action_form("a1", "a1-act0", {"email": "ada@example.com", "message": "x", "lamps": "99"})
    assert ok is False and store.actions_for("a1")[0]["field_errors"] == {"lamps": "Enter a number at most 20."}
    # The reader supplies the missing required value; strings are converted by type; the schema passes.
    env.replies[("POST", "/api/support")] = (200, "application/json", '{"message": "We will reply within a day."}')
    ok = await store.submit_action_form("a1", "a1-act0", {"email": " ada@example.com ", "message": "It flickers.\n",
                                                          "lamps": "3", "urgent": True})
    assert ok is True
    method, url, body = env.fetches[-1]
    assert body["args"] == {"email": "ada@example.com", "message": "It flickers.\n", "lamps": 3, "urgent": True}
    offer = store.actions_for("a1")[0]
    assert (offer["status"], offer["outcome"], offer["form_open"]) == ("done", "We will reply within a day.", False)


async def test_a_failed_form_stays_open_with_the_error_and_can_be_cancelled():
    relay, t, client, store, env, changes = await connected()
    answer(relay, t, "a1", "Write to us.", [("contact_support", {"email": "ada@example.com", "message": "Hi"})])
    env.replies[("POST", "/api/support")] = (503, "text/plain", "busy")
    store.open_action_form("a1", "a1-act0")
    assert await store.submit_action_form("a1", "a1-act0", {"email": "ada@example.com", "message": "Hi"}) is False
    offer = store.actions_for("a1")[0]
    assert offer["status"] == "failed" and "HTTP 503" in offer["error"] and offer["form_open"]
    store.cancel_action_form("a1", "a1-act0")
    offer = store.actions_for("a1")[0]
    assert not offer["form_open"] and offer["status"] == "failed" and "HTTP 503" in offer["error"]


async def test_client_refusals_become_the_offers_error_never_an_exception():
    relay, t, client, store, env, changes = await connected()
    answer(relay, t, "a1", "Here.", [("open_pricing", {"plan": "pro"})])

    async def refuse(*a: Any, **kw: Any) -> Any:
        from widget import ConfigError

        raise ConfigError("That action is not on offer.")

    client.run_action = refuse  # type: ignore[method-assign]
    assert await store.press_action("a1", "a1-act0") is False
    offer = store.actions_for("a1")[0]
    assert offer["error"] == "That action is not on offer." and offer["status"] == "offered"


async def test_an_outcome_recorded_by_another_tab_marks_the_offer_done():
    relay, t, client, store, env, changes = await connected()
    answer(relay, t, "a1", "Here.", [("open_pricing", {"plan": "pro"}), ("contact_support", {})])
    relay.push(t, "message", {"message": {"id": "o1", "role": "action", "message_id": "a1", "action_id": "a1-act0",
                                          "name": "open_pricing", "ok": True, "outcome": "Opened elsewhere."}})
    relay.push(t, "message", {"message": {"id": "o2", "role": "action", "message_id": "a1", "action_id": "a1-act1",
                                          "name": "contact_support", "ok": False, "outcome": "Mail is down."}})
    first, second = store.actions_for("a1")
    assert (first["status"], first["outcome"]) == ("done", "Opened elsewhere.")
    assert (second["status"], second["error"]) == ("failed", "Mail is down.")
    assert await store.press_action("a1", "a1-act0") is False and env.navigations == []
    assert [m["role"] for m in store.messages] == ["assistant"]  # action notes are not shown as messages


async def test_offers_of_a_round_that_is_not_shown_go_under_the_turns_answer():
    relay, t, client, store, env, changes = await connected()
    relay.push(t, "message", {"message": {"id": "u1", "role": "user", "content": "go"}})
    # A round that only called functions, then a round that only offered (no text): shown under the first.
    relay.push(t, "completion.started", {"turn_id": "t1", "message_id": "r1"})
    relay.push(t, "completion.ended", {"message": {"id": "r1", "role": "assistant", "content": "",
                                                   "function_calls": [{"id": "c1", "name": "x", "arguments": {}}]},
                                       "tool_messages": [{"id": "tm1", "role": "tool", "function_call_id": "c1",
                                                          "name": "x", "status": "success", "result": 1}]})
    relay.push(t, "function_call_iteration", {"turn_id": "t1", "iteration": 1})
    answer(relay, t, "r2", "", [("open_pricing", {"plan": "team"})])
    assert [m["id"] for m in store.messages] == ["u1", "r1"]
    assert [o["id"] for o in store.actions_for("r1")] == ["r2-act0"]
    assert await store.press_action("r1", "r2-act0") is True and env.navigations == ["/pricing?plan=team"]
    # A turn whose only round offered without text: the offering message is shown (empty) to carry them.
    relay.push(t, "message", {"message": {"id": "u2", "role": "user", "content": "again"}})
    answer(relay, t, "r3", "", [("open_pricing", {"plan": "free"})])
    assert [m["id"] for m in store.messages] == ["u1", "r1", "u2", "r3"]
    assert store.actions_for("r3")[0]["arguments"] == {"plan": "free"}


async def test_a_restored_or_new_conversation_has_no_offers():
    relay, t, client, store, env, changes = await connected()
    answer(relay, t, "a1", "Here.", [("open_pricing", {"plan": "pro"})])
    assert store.actions_for("a1")
    # A reload is a new client that loads the stored messages (the relay's GET never has actions; even if it did).
    reloaded = AutopilotClient(MemoryTransport(relay), env=env)
    reloaded.tools(TOOLS)
    reloaded.session.load([{"id": "a1", "role": "assistant", "content": "Here.",
                            "actions": [{"id": "a1-act0", "name": "open_pricing", "arguments": {"plan": "pro"}}]}])
    restored = Store(reloaded)
    assert [m["id"] for m in restored.messages] == ["a1"]
    assert restored.actions == {} and restored.actions_for("a1") == []
    assert await restored.press_action("a1", "a1-act0") is False and env.navigations == []
    # New chat in the live tab: the offers of the old conversation go.
    assert await store.new_chat() is True
    assert store.actions == {}


def test_form_arguments_converts_and_checks_each_field():
    params = {"type": "object", "properties": {
        "n": {"type": "number", "exclusiveMinimum": 0}, "i": {"type": "integer"},
        "b": {"type": "boolean"}, "e": {"type": "string", "enum": ["a", "b"]},
        "d": {"type": "string", "format": "date"}, "u": {"type": "string", "format": "uri"},
        "s": {"type": "string", "minLength": 3}}, "required": ["b"]}
    args, problems = form_arguments(params, {"n": "1.5", "i": "12345678901234567890", "b": "off", "e": "",
                                             "d": "2025-02-30", "u": "ftp://x", "s": "ab"})
    assert args == {"n": 1.5, "i": 12345678901234567890, "b": False}
    assert problems == {"d": "Enter a date, like 2025-01-31.", "u": "Enter a web address that starts with https://.",
                        "s": "Use at least 3 characters."}
    args, problems = form_arguments(params, {"n": "0", "i": "abc", "e": "c", "b": None})
    assert problems == {"n": "Enter a number more than 0.", "i": "Enter a whole number.",
                        "e": "Choose one of: a, b.", "b": "Please fill in this field."}
    args, problems = form_arguments(params, {"n": "inf", "b": True})
    assert problems == {"n": "Enter a number."} and args == {"b": True}

"""Starters and follow-up suggestions without a DOM: the client's ``starters`` / ``set_starters`` and its
``startersChanged`` event, the store's ``starters``, ``suggestions`` and ``send_prompt``, and the shared checks
(``widget.core.starters``), against the in-memory relay."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fake_relay import BASE, FakeRelay, MemoryTransport

from widget import AutopilotClient
from widget import protocol as P
from widget.core.conversation import visible_messages
from widget.core.starters import check_starters, suggestions_of
from widget.errors import ConfigError
from widget.store import Store

pytestmark = pytest.mark.unit

APP_STARTERS = ["What can you do?", "Pricing?"]
SUGGEST = P.RelayTool.SUGGEST_FOLLOWUPS


class Relay(FakeRelay):
    """The fake relay whose conversation GET carries the app's starters, and which takes user messages."""

    def __init__(self, starters: Any = APP_STARTERS) -> None:
        super().__init__()
        self.starters = starters
        self.user_messages: list[str] = []

    async def handle_request(self, method: str, url: str, body: Any) -> tuple[int, Any]:
        status, answer = await super().handle_request(method, url, body)
        if method == "GET" and status == 200 and self.starters is not None:
            answer["starters"] = self.starters
        return status, answer

    async def _handle(self, transport: MemoryTransport, event: str, data: Any) -> Any:
        if event == P.Event.USER_MESSAGE:
            self.user_messages.append(data["text"])
            return P.ok(message_id=f"u{len(self.user_messages)}")
        return await super()._handle(transport, event, data)


async def connected(relay: Relay | None = None, before: Any = None) -> tuple[Relay, MemoryTransport, AutopilotClient,
                                                                           Store, list[str], list[Any]]:
    relay = relay or Relay()
    transport = MemoryTransport(relay)
    client = AutopilotClient(transport)
    seen: list[Any] = []
    client.on(P.ClientEvent.STARTERS_CHANGED, seen.append)
    if before is not None:
        client.set_starters(before)
    store = Store(client)
    changes: list[str] = []
    store.subscribe(changes.append)
    await client.connect(relay_url=BASE, app_id="demo")
    return relay, transport, client, store, changes, seen


def answer(relay: Relay, t: MemoryTransport, mid: str, content: str, suggestions: list[Any] | None,
           started: bool = False) -> None:
    """One model round as the relay sends it: the answer with its ``suggest_followups`` call and tool message."""
    if not started:
        relay.push(t, "completion.started", {"turn_id": "t1", "message_id": mid})
    message: dict[str, Any] = {"id": mid, "role": "assistant", "content": content}
    tools = []
    if suggestions is not None:
        message["suggestions"] = suggestions
        message["function_calls"] = [{"id": "call_" + mid, "name": SUGGEST, "arguments": {"suggestions": suggestions}}]
        tools = [{"id": "t_" + mid, "role": "tool", "function_call_id": "call_" + mid, "name": SUGGEST,
                  "kind": "relay", "status": "success", "result": "Shown to the reader."}]
    relay.push(t, "completion.ended", {"message": message, "tool_messages": tools})
    relay.push(t, "completion.finished", {"turn_id": "t1", "status": "done"})


async def settle(n: int = 30) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


# ---------------------------------------------------------------------------------------------- the checks


def test_check_starters() -> None:
    assert check_starters([" a ", "b"]) == ["a", "b"]
    assert check_starters(("x",)) == ["x"] and check_starters([]) == []
    for bad, said in [
        ("abc", "starters must be a list of strings, got 'abc'"),
        (None, "starters must be a list of strings, got None"),
        (["a"] * 5, "starters has 5 entries; at most 4 are shown"),
        ([1], "starters[0] must be a string, got 1"),
        (["a", ""], "starters[1] is empty"),
        (["y" * 201], "starters[0] has 201 characters; the limit is 200"),
        (["a", "b", "a"], "starters[2] repeats entry 0"),
    ]:
        with pytest.raises(ConfigError) as exc:
            check_starters(bad)
        assert str(exc.value) == said
    assert check_starters(["y" * 200]) == ["y" * 200]


def test_suggestions_of_the_last_round_after_the_readers_last_message() -> None:
    user = {"id": "u1", "role": "user", "content": "q"}
    first = {"id": "m1", "role": "assistant", "content": "a", "suggestions": ["A?", "B?"]}
    tool = {"id": "t1", "role": "tool", "function_call_id": "c", "name": SUGGEST}
    assert suggestions_of([user, first, tool]) == ("m1", ["A?", "B?"])
    assert suggestions_of([user, first, tool, {"id": "u2", "role": "user", "content": "A?"}]) == (None, [])
    assert suggestions_of([user, first, {"id": "e", "role": "error", "content": "x"}]) == (None, [])
    # a later round of the same turn without suggestions (the model suggested while calling a page function, then
    # answered): the turn's suggestions are still shown, as the model was told
    answer = {"id": "m2", "role": "assistant", "content": "b"}
    assert suggestions_of([user, first, tool, answer]) == ("m1", ["A?", "B?"])
    # a later round with suggestions of its own: those
    later = {"id": "m5", "role": "assistant", "content": "c", "suggestions": ["C?"]}
    assert suggestions_of([user, first, tool, later]) == ("m5", ["C?"])
    # what a client shows is bounded whatever a relay sent
    many = {"id": "m3", "role": "assistant", "content": "", "suggestions": ["1", 2, " ", "3", "4", "x" * 300]}
    assert suggestions_of([user, many]) == ("m3", ["1", "3", "4"])
    assert suggestions_of([user, {"id": "m4", "role": "assistant", "content": "", "suggestions": ["z" * 300]}]) == (
        "m4", ["z" * P.MAX_SUGGESTION_CHARS])
    assert suggestions_of([]) == (None, [])


def test_the_suggestion_call_is_not_shown_as_a_call() -> None:
    call = {"id": "c1", "name": SUGGEST, "arguments": {"suggestions": ["A?"]}}
    other = {"id": "c2", "name": "get_selection", "arguments": {}}
    shown = visible_messages([
        {"id": "u", "role": "user", "content": "q"},
        {"id": "m1", "role": "assistant", "content": "", "function_calls": [other]},
        {"id": "m2", "role": "assistant", "content": "Answer", "function_calls": [other, call], "suggestions": ["A?"]},
        {"id": "m3", "role": "assistant", "content": "", "function_calls": [call], "suggestions": ["B?"]},
    ])
    assert [(m["id"], [c["id"] for c in m.get("function_calls", [])]) for m in shown] == [
        ("u", []), ("m1", ["c2"]), ("m2", ["c2"])]  # m3 had nothing else to show


# ---------------------------------------------------------------------------------------------- client and store


async def test_the_apps_starters_arrive_with_the_conversation_and_the_page_may_replace_them() -> None:
    relay, t, client, store, changes, seen = await connected()
    assert client.starters == APP_STARTERS and store.starters == APP_STARTERS
    assert seen == [{"starters": APP_STARTERS}] and "starters" in changes
    assert client.set_starters(["Mine"]) == ["Mine"] and store.starters == ["Mine"]
    assert client.set_starters([]) == [] and store.starters == []
    with pytest.raises(ConfigError, match=r"starters\[0\] is empty"):
        client.set_starters([" "])
    assert client.starters == []  # unchanged by the refused list
    assert client.set_starters(None) == APP_STARTERS
    assert seen[1:] == [{"starters": ["Mine"]}, {"starters": []}, {"starters": APP_STARTERS}]
    client.set_starters(None)  # no change: no event
    assert len(seen) == 4


async def test_the_pages_starters_set_before_the_connection_win() -> None:
    relay, t, client, store, changes, seen = await connected(before=["Early"])
    assert client.starters == ["Early"] and seen == [{"starters": ["Early"]}]  # the app's arrived: nothing changed


async def test_a_relay_without_starters_or_with_a_bad_list_shows_none() -> None:
    for sent in (None, "not a list", ["a"] * 9):
        relay, t, client, store, changes, seen = await connected(Relay(starters=sent))
        assert client.starters == [] and seen == []


async def test_starters_go_with_the_first_message() -> None:
    relay, t, client, store, changes, seen = await connected()
    assert await store.send_prompt(APP_STARTERS[1]) is True
    assert relay.user_messages == [APP_STARTERS[1]]
    relay.push(t, "message", {"message": {"id": "u1", "role": "user", "content": APP_STARTERS[1]}})
    assert store.starters == []
    relay.push(t, "completion.started", {"turn_id": "t1", "message_id": "m1"})
    assert store.starters == []


async def test_suggestions_of_the_last_answer_until_the_next_message() -> None:
    relay, t, client, store, changes, seen = await connected()
    relay.push(t, "message", {"message": {"id": "u1", "role": "user", "content": "q"}})
    relay.push(t, "completion.started", {"turn_id": "t1", "message_id": "m1"})
    assert store.suggestions == (None, [])  # streaming
    answer(relay, t, "m1", "Answer.", ["A?", "B?"], started=True)
    assert store.suggestions == ("m1", ["A?", "B?"])
    assert [c for m in store.messages for c in m.get("function_calls", [])] == []
    changes.clear()
    sent = asyncio.ensure_future(store.send_prompt("B?"))
    await asyncio.sleep(0)  # the press ran up to the send
    assert store.suggestions == (None, [])  # gone at the press, before the relay echoes the message
    assert "messages" in changes
    assert await sent is True and relay.user_messages == ["B?"]
    relay.push(t, "message", {"message": {"id": "u2", "role": "user", "content": "B?"}})
    answer(relay, t, "m2", "More.", None)
    assert store.suggestions == (None, [])
    # a typed message makes them go too
    answer(relay, t, "m3", "Again.", ["C?"])
    assert store.suggestions == ("m3", ["C?"])
    relay.push(t, "message", {"message": {"id": "u3", "role": "user", "content": "typed"}})
    assert store.suggestions == (None, [])


async def test_an_error_after_the_answer_hides_them() -> None:
    relay, t, client, store, changes, seen = await connected()
    relay.push(t, "message", {"message": {"id": "u1", "role": "user", "content": "q"}})
    answer(relay, t, "m1", "Answer.", ["A?"])
    relay.push(t, "message", {"message": {"id": "e1", "role": "error", "content": "boom", "code": "internal",
                                          "retryable": True}})
    assert store.suggestions == (None, [])
    await settle()

"""The list of this browser's own conversations (``widget.core.history``): order, bound, removal, pruning, and
storage that holds junk, cannot be read or refuses writes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, MutableMapping

import pytest

from widget.core.history import ConversationList, conversation_id_of, history_key, is_conversation_id
from widget.protocol import MAX_SUMMARY_IDS

pytestmark = pytest.mark.unit


def cid(n: int) -> str:
    return f"c_{n:020d}"


class RefusingStorage(MutableMapping[str, str]):
    """Storage that reads fine until ``refuse`` is set, then every write raises (a full or blocked localStorage)."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.refuse = False
        self.unreadable = False

    def __getitem__(self, key: str) -> str:
        if self.unreadable:
            raise RuntimeError("SecurityError: storage is disabled")
        return self.data[key]

    def __setitem__(self, key: str, value: str) -> None:
        if self.refuse:
            raise RuntimeError("QuotaExceededError")
        self.data[key] = value

    def __delitem__(self, key: str) -> None:
        if self.refuse:
            raise RuntimeError("QuotaExceededError")
        del self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


def test_added_ids_come_first_once_and_are_stored_per_app() -> None:
    storage: dict[str, str] = {}
    shop, docs = ConversationList(storage, "shop"), ConversationList(storage, "docs")
    assert shop.ids() == [] and shop.key == history_key("shop") == "autopilot:conversations:shop"
    assert shop.add(cid(1)) and shop.add(cid(2)) and docs.add(cid(9))
    assert shop.ids() == [cid(2), cid(1)] and docs.ids() == [cid(9)]
    assert shop.add(cid(1)) and shop.ids() == [cid(1), cid(2)]  # again: moved to the front, held once
    assert not shop.add(cid(1))  # already first: nothing changes
    assert json.loads(storage["autopilot:conversations:shop"]) == [cid(1), cid(2)]
    assert ConversationList(storage, "shop").ids() == [cid(1), cid(2)]  # another tab reads the same list
    assert not shop.add("not an id") and not shop.add("c_short") and shop.ids() == [cid(1), cid(2)]


def test_the_list_is_bounded_and_drops_the_oldest() -> None:
    storage: dict[str, str] = {}
    held = ConversationList(storage, "shop")
    for n in range(MAX_SUMMARY_IDS + 5):
        held.add(cid(n))
    ids = held.ids()
    assert len(ids) == MAX_SUMMARY_IDS == 50
    assert ids[0] == cid(MAX_SUMMARY_IDS + 4) and ids[-1] == cid(5)  # the five oldest are gone
    small = ConversationList({}, "shop", limit=2)
    for n in range(3):
        small.add(cid(n))
    assert small.ids() == [cid(2), cid(1)]
    with pytest.raises(ValueError):
        ConversationList({}, "shop", limit=0)


def test_remove_and_keep_only() -> None:
    storage: dict[str, str] = {}
    held = ConversationList(storage, "shop")
    for n in range(4):
        held.add(cid(n))
    assert held.remove(cid(2)) and not held.remove(cid(2))
    assert held.ids() == [cid(3), cid(1), cid(0)]
    # The relay knew only some of the ids asked about: the others are forgotten; an id added meanwhile stays.
    asked = held.ids()
    held.add(cid(7))
    assert held.keep_only({cid(3)}, asked) == [cid(1), cid(0)]
    assert held.ids() == [cid(7), cid(3)]
    assert held.keep_only({cid(7), cid(3)}, [cid(7), cid(3)]) == []
    held.remove(cid(7))
    held.remove(cid(3))
    assert history_key("shop") not in storage  # an empty list leaves no key behind


@pytest.mark.parametrize(
    "stored",
    [
        "not json",
        "{",
        '{"ids": []}',
        "42",
        "null",
        '"c_00000000000000000001"',
        "[" * 5000 + "]" * 5000,  # nested too deep for the parser
    ],
)
def test_a_corrupt_value_reads_as_empty_and_is_replaced(stored: str) -> None:
    storage = {history_key("shop"): stored}
    held = ConversationList(storage, "shop")
    assert held.ids() == []
    assert held.add(cid(1)) and json.loads(storage[history_key("shop")]) == [cid(1)]


def test_a_list_holding_junk_keeps_its_ids() -> None:
    junk = [cid(1), 5, None, {"id": cid(2)}, "javascript:alert(1)", cid(1), "c_" + "x" * 65, cid(3)]
    storage = {history_key("shop"): json.dumps(junk)}
    held = ConversationList(storage, "shop")
    assert held.ids() == [cid(1), cid(3)]
    held.add(cid(4))
    assert json.loads(storage[history_key("shop")]) == [cid(4), cid(1), cid(3)]


def test_refused_writes_keep_the_list_in_memory_for_the_page() -> None:
    storage = RefusingStorage()
    held = ConversationList(storage, "shop")
    held.add(cid(1))
    storage.refuse = True
    assert held.add(cid(2))  # storage is full: the page goes on with the list in memory
    assert held.ids() == [cid(2), cid(1)]
    assert held.remove(cid(1)) and held.ids() == [cid(2)]
    assert json.loads(storage.data[history_key("shop")]) == [cid(1)]  # what storage had is untouched


def test_unreadable_storage_holds_nothing() -> None:
    storage = RefusingStorage()
    storage.unreadable = True
    held = ConversationList(storage, "shop")
    assert held.ids() == []
    assert held.add(cid(1))
    storage.unreadable = False
    assert held.ids() == [cid(1)]


def test_ids_and_urls() -> None:
    assert is_conversation_id(cid(1)) and not is_conversation_id(None) and not is_conversation_id("c_x")
    assert conversation_id_of(f"https://relay.example/api/conversations/{cid(3)}") == cid(3)
    assert conversation_id_of(f"https://relay.example/copilot/api/conversations/{cid(3)}/?x=1") == cid(3)
    assert conversation_id_of("https://relay.example/api/conversations/") is None


class FakeClient:
    """What ``PastConversations`` uses of the client: scripted answers, and a way to hold one back."""

    def __init__(self) -> None:
        self.conversation_id = cid(1)
        self.listed: list[dict[str, object]] = []
        self.fail: Exception | None = None
        self.gate: asyncio.Event | None = None
        self.opened: list[str] = []
        self.deleted: list[str] = []

    async def conversations(self) -> list[dict[str, object]]:
        listed = [dict(e) for e in self.listed]
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return listed

    async def open_conversation(self, conversation_id: str) -> None:
        if self.fail is not None:
            raise self.fail
        self.opened.append(conversation_id)
        self.conversation_id = conversation_id

    async def delete_conversation(self, conversation_id: str) -> None:
        if self.fail is not None:
            raise self.fail
        self.deleted.append(conversation_id)
        self.listed = [e for e in self.listed if e["id"] != conversation_id]


def entry(n: int, title: str | None) -> dict[str, object]:
    return {"id": cid(n), "title": title, "created_at": 1.0, "updated_at": float(n), "current": False}


async def test_the_store_lists_titled_entries_and_marks_the_current_one() -> None:
    from widget.store.history import PastConversations

    client, changes, switches = FakeClient(), [], []
    client.listed = [entry(3, "third"), entry(2, None), entry(1, "first")]
    past = PastConversations(client, lambda: changes.append(1), lambda: switches.append(1))  # type: ignore[arg-type]
    assert await past.refresh()
    assert [(e["id"], e["current"]) for e in past.entries] == [(cid(3), False), (cid(1), True)]
    assert past.loaded and not past.loading and past.error is None and changes

    past.ask_delete(cid(3))
    assert past.confirming == cid(3)
    assert await past.delete(cid(3)) and client.deleted == [cid(3)] and past.confirming is None
    assert [e["id"] for e in past.entries] == [cid(1)] and switches == []  # not the current one: nothing to switch

    assert await past.open(cid(1)) and client.opened == [cid(1)] and switches == [1]

    client.fail = RuntimeError("relay down")
    assert not await past.delete(cid(1))
    assert past.error == "relay down" and past.busy is None and [e["id"] for e in past.entries] == [cid(1)]
    assert not await past.refresh() and past.error == "relay down" and not past.loading


async def test_only_the_latest_read_of_the_list_is_shown() -> None:
    from widget.store.history import PastConversations

    client = FakeClient()
    past = PastConversations(client, lambda: None, lambda: None)  # type: ignore[arg-type]
    client.listed = [entry(1, "old title")]
    gate = client.gate = asyncio.Event()
    slow = asyncio.ensure_future(past.refresh())
    await asyncio.sleep(0)  # the first read is under way, held by the gate
    client.gate = None
    client.listed = [entry(1, "new title"), entry(2, "another")]
    assert await past.refresh()
    assert [e["title"] for e in past.entries] == ["new title", "another"]
    gate.set()
    assert await slow is False  # it finished last with what it read first: not shown
    assert [e["title"] for e in past.entries] == ["new title", "another"] and not past.loading

"""Past conversations through the CPython client against a real relay over real Socket.IO (SQLite and PostgreSQL):
New chat keeps the previous conversation in the browser's list (an empty one is dropped), ``conversations()`` lists
them with titles newest first, ``open_conversation`` switches (messages shown, a new message goes to it),
``delete_conversation`` deletes on the relay (the current one: a fresh one takes its place), and ids the relay no
longer knows are forgotten."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from relay_helpers import STORE_KINDS, launch

from widget import AutopilotClient, ProtocolError
from widget import protocol as P
from widget.core.history import history_key
from widget.errors import ConfigError
from widget.transports.python_socketio import PythonSocketIOTransport

pytestmark = pytest.mark.relay


@pytest_asyncio.fixture(scope="module", params=STORE_KINDS)
async def relay(request: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    h = await launch(tmp_path_factory.mktemp("history"), store=request.param, get_rate_per_minute=10_000)
    yield h
    await h.stop()


def client_of(relay: Any, storage: dict[str, str]) -> AutopilotClient:
    return AutopilotClient(PythonSocketIOTransport(), storage=storage, headers={"Origin": relay.url})


async def ask(client: AutopilotClient, text: str) -> None:
    """Send ``text`` and wait for its turn to finish."""
    finished = asyncio.Event()
    off = client.on("completion.finished", lambda p: finished.set())
    try:
        await client.send_message(text)
        await asyncio.wait_for(finished.wait(), 30)
    finally:
        off()


def user_texts(client: AutopilotClient) -> list[str]:
    return [m["content"] for m in client.messages if m["role"] == "user"]


async def test_new_chat_list_reopen_and_delete(relay: Any) -> None:
    storage: dict[str, str] = {}
    client = client_of(relay, storage)
    changes: list[list[str]] = []
    client.on(P.ClientEvent.CONVERSATIONS_CHANGED, lambda p: changes.append(p["ids"]))
    try:
        first = (await client.connect(relay_url=relay.url, app_id="demo"))["id"]
        assert client.conversation_ids() == [first] and changes == [[first]]
        await ask(client, "First question about plans")
        await client.new_conversation()
        second = client.conversation_id
        assert second != first and client.conversation_ids() == [second, first]
        await ask(client, "Second question about shipping")
        # New chat on an empty chat: the empty one is not kept.
        await client.new_conversation()
        empty = client.conversation_id
        await client.new_conversation()
        third = client.conversation_id
        assert empty not in client.conversation_ids() and client.conversation_ids() == [third, second, first]

        listed = await client.conversations()
        assert [(e["id"], e["title"], e["current"]) for e in listed] == [
            (third, None, True), (second, "Second question about shipping", False),
            (first, "First question about plans", False)]

        # Reopen the oldest: its messages are shown, and a new message goes to it.
        loaded: list[Any] = []
        client.on("conversationLoaded", lambda p: loaded.append(p))
        conv = await client.open_conversation(first)
        assert conv["id"] == first == client.conversation_id and loaded
        assert user_texts(client) == ["First question about plans"]
        assert client.connection_state == "connected" and client.active
        await ask(client, "A follow-up")
        assert user_texts(client) == ["First question about plans", "A follow-up"]
        async with aiohttp.ClientSession() as http:
            r = await http.get(f"{relay.url}/api/conversations/{first}")
            stored = [m["content"] for m in (await r.json())["messages"] if m["role"] == "user"]
        assert stored == ["First question about plans", "A follow-up"]
        assert (await client.conversations())[0]["id"] == first  # now the most recently active
        assert await client.open_conversation(first) == client.conversation  # already shown: nothing to do

        # A reload (same storage) resumes the reopened one and holds the same list.
        again = client_of(relay, storage)
        try:
            assert (await again.connect(relay_url=relay.url, app_id="demo"))["id"] == first
            assert set(again.conversation_ids()) == {first, second, third}
        finally:
            await again.disconnect()

        # Delete another one: gone from the list and from the relay.
        assert await client.delete_conversation(second) is True
        assert second not in client.conversation_ids() and client.conversation_id == first
        async with aiohttp.ClientSession() as http:
            assert (await http.get(f"{relay.url}/api/conversations/{second}")).status == 404
        assert [e["id"] for e in await client.conversations()] == [first, third]

        # Delete the current one: a fresh conversation takes its place, connected.
        assert await client.delete_conversation(first) is True
        fresh = client.conversation_id
        assert fresh not in (first, second, third) and client.connection_state == "connected"
        assert client.messages == [] and first not in client.conversation_ids()
        assert client.conversation_ids()[0] == fresh

        # An id deleted elsewhere: forgotten when listed, not_found when opened (the current one stays).
        async with aiohttp.ClientSession() as http:
            gone = await http.delete(f"{relay.url}/api/conversations/{third}", headers={"Origin": relay.url})
            assert gone.status == 204
        stale = json.loads(storage[history_key("demo")])
        assert third in stale
        with pytest.raises(ProtocolError) as err:
            await client.open_conversation(third)
        assert err.value.code == "not_found" and client.conversation_id == fresh
        assert third not in client.conversation_ids()
        storage[history_key("demo")] = json.dumps([*client.conversation_ids(), second])
        assert [e["id"] for e in await client.conversations()] == [fresh]
        assert client.conversation_ids() == [fresh]
        assert changes[-1] == [fresh]
        with pytest.raises(ConfigError):
            await client.open_conversation("not an id")
        with pytest.raises(ConfigError, match="not one of this browser's"):
            await client.open_conversation(second)  # deleted and forgotten: no longer this browser's
        with pytest.raises(ConfigError, match="not one of this browser's"):
            await client.delete_conversation("c_" + "z" * 32)
    finally:
        await client.disconnect()


async def test_two_browsers_never_see_each_others_lists(relay: Any) -> None:
    a_storage: dict[str, str] = {}
    b_storage: dict[str, str] = {}
    a, b = client_of(relay, a_storage), client_of(relay, b_storage)
    try:
        a_id = (await a.connect(relay_url=relay.url, app_id="demo"))["id"]
        b_id = (await b.connect(relay_url=relay.url, app_id="demo"))["id"]
        await ask(a, "Reader A asks")
        await ask(b, "Reader B asks")
        assert [e["title"] for e in await a.conversations()] == ["Reader A asks"]
        assert [e["title"] for e in await b.conversations()] == ["Reader B asks"]
        assert b_id not in json.dumps(await a.conversations()) and a_id not in json.dumps(await b.conversations())
        with pytest.raises(ConfigError):
            await b.open_conversation(a_id)  # another reader's id is not one of this browser's
        assert b.conversation_id == b_id
    finally:
        await a.disconnect()
        await b.disconnect()

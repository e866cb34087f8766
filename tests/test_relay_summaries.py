"""``POST /api/apps/{app_id}/conversations/summaries`` over a real relay (SQLite and PostgreSQL).

For the ids a browser names, and only those: each existing conversation of the app with its title (the reader's first
message, trimmed) and times, most recently active first; unknown, deleted and other apps' ids left out; nothing of
the conversation beyond the title; the bounds (ids per request, body size, JSON only) and the origin rules.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from relay_helpers import (  # noqa: F401
    SHOP_ORIGIN,
    SHOP_SECRET,
    STORE_KINDS,
    Recorder,
    database_for,
    fixture_store_kind,
    info,
    launch,
)

from widget import protocol as P

pytestmark = pytest.mark.relay

ANSWER_MARK = "Demo"  # the demo model's answers start with it; no answer text may reach a summary


@pytest_asyncio.fixture(scope="module")
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest_asyncio.fixture(scope="module", params=STORE_KINDS)
async def relay(request: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    h = await launch(tmp_path_factory.mktemp("summaries"), store=request.param, get_rate_per_minute=10_000)
    yield h
    await h.stop()


async def create(http: aiohttp.ClientSession, base: str) -> tuple[str, str]:
    r = await http.post(f"{base}/api/apps/shop/conversations", headers={"Authorization": f"Bearer {SHOP_SECRET}"})
    assert r.status == 201, await r.text()
    body = await r.json()
    return body["id"], body["url"]


async def say(http: aiohttp.ClientSession, url: str, *texts: str) -> None:
    """Send each text as a user message over a socket and wait for its turn to finish."""
    data = await info(http, url)
    rec = await Recorder(data["relay_url"], data["relay_path"]).connect()
    try:
        assert (await rec.join(data["token"], data["conversation"]["seq"]))["ok"]
        await rec.wait("state")
        for i, text in enumerate(texts):
            start = len(rec.events)
            ack = await rec.call("user_message", {"text": text, "idempotency_key": f"k{i}-{len(text)}"})
            assert ack["ok"], ack
            await rec.wait("completion.finished", start=start, timeout=30)
    finally:
        await rec.disconnect()


async def summaries(
    http: aiohttp.ClientSession, base: str, body: Any, *, app: str = "shop", origin: str | None = SHOP_ORIGIN,
    content_type: str = "application/json",
) -> tuple[int, Any, Any]:
    headers = {"Content-Type": content_type}
    if origin is not None:
        headers["Origin"] = origin
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    r = await http.post(f"{base}{P.HTTP_CONVERSATION_SUMMARIES.format(app_id=app)}", data=data, headers=headers)
    return r.status, r.headers, await r.json()


async def test_summaries_of_the_named_conversations_only(relay: Any, http: aiohttp.ClientSession) -> None:
    base = relay.url
    old_id, old_url = await create(http, base)
    new_id, new_url = await create(http, base)
    empty_id, _ = await create(http, base)
    gone_id, gone_url = await create(http, base)
    long_first = "  What   is\nthe price of\tthe " + "very " * 40 + "long plan?  "
    await say(http, old_url, long_first, "and the second question")
    await say(http, new_url, "Hello there")
    await say(http, gone_url, "delete me")
    assert (await http.delete(gone_url)).status == 204
    other = await http.post(f"{base}/api/apps/demo/conversations", headers={"Origin": base})
    other_id = (await other.json())["id"]  # a conversation of another app: never listed for "shop"
    unheld = (await create(http, base))[0]  # exists, but this browser does not name it

    ids = [old_id, new_id, empty_id, gone_id, other_id, "c_" + "x" * 32, "not an id", old_id]
    status, headers, body = await summaries(http, base, {"ids": ids})
    assert status == 200, body
    assert headers["Access-Control-Allow-Origin"] == SHOP_ORIGIN and headers["Cache-Control"] == "no-store"
    listed = body["conversations"]
    assert [s["id"] for s in listed] == [new_id, old_id, empty_id]  # most recently active first
    assert unheld not in json.dumps(body) and other_id not in json.dumps(body)
    by_id = {s["id"]: s for s in listed}
    assert all(set(s) == {"id", "title", "created_at", "updated_at"} for s in listed)
    title = by_id[old_id]["title"]
    assert len(title) == P.MAX_TITLE_CHARS and title.endswith("…") and title.startswith("What is the price of the very")
    assert "  " not in title and "\n" not in title
    assert by_id[new_id]["title"] == "Hello there"
    assert by_id[empty_id]["title"] is None
    assert ANSWER_MARK not in json.dumps(body) and "second question" not in json.dumps(body)
    for s in listed:
        assert s["updated_at"] >= s["created_at"] > 0

    # Activity in the oldest one brings it to the front.
    await say(http, old_url, "one more")
    status, _, body = await summaries(http, base, {"ids": [old_id, new_id, empty_id]})
    assert status == 200 and [s["id"] for s in body["conversations"]] == [old_id, new_id, empty_id]

    # Nothing named, nothing listed; a server without an Origin (not a browser) may ask too.
    assert (await summaries(http, base, {"ids": []}))[2] == {"ok": True, "conversations": []}
    status, _, body = await summaries(http, base, {"ids": [new_id]}, origin=None)
    assert status == 200 and [s["id"] for s in body["conversations"]] == [new_id]


async def test_summaries_bounds_and_origins(relay: Any, http: aiohttp.ClientSession) -> None:
    base = relay.url
    cid, _ = await create(http, base)
    many = [cid] * (P.MAX_SUMMARY_IDS + 1)
    status, _, body = await summaries(http, base, {"ids": many})
    assert status == 400 and body["error"]["code"] == "bad_request"
    assert str(P.MAX_SUMMARY_IDS) in body["error"]["message"]
    assert (await summaries(http, base, {"ids": [cid] * P.MAX_SUMMARY_IDS}))[0] == 200  # at the bound
    for bad in ({"ids": "c_1"}, {"ids": [1]}, {"ids": [""]}, {"ids": ["x" * 129]}, [cid], {}, "not json"):
        status, _, body = await summaries(http, base, bad)
        assert status == 400 and body["error"]["code"] == "bad_request", (bad, body)
    status, _, body = await summaries(http, base, b"{}", content_type="text/plain")
    assert status == 415 and body["error"]["code"] == "bad_request"
    big = json.dumps({"ids": [cid], "pad": "x" * P.MAX_SUMMARIES_BODY_BYTES})
    status, _, body = await summaries(http, base, big)
    assert status == 413 and body["error"]["code"] == "body_too_large"
    status, headers, body = await summaries(http, base, {"ids": [cid]}, origin="https://evil.example")
    assert status == 403 and body["error"]["code"] == "forbidden_origin"
    assert SHOP_ORIGIN not in body["error"]["message"]  # a refused page is not told the allowed origins (the log is)
    assert "Access-Control-Allow-Origin" not in headers
    status, _, body = await summaries(http, base, {"ids": [cid]}, app="nope")
    assert status == 404 and body["error"]["code"] == "not_found"
    path = f"{base}{P.HTTP_CONVERSATION_SUMMARIES.format(app_id='shop')}"
    pre = await http.options(path, headers={"Origin": SHOP_ORIGIN, "Access-Control-Request-Method": "POST"})
    assert pre.status == 204 and pre.headers["Access-Control-Allow-Origin"] == SHOP_ORIGIN
    pre = await http.options(path, headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert pre.status == 403 and "Access-Control-Allow-Origin" not in pre.headers


async def test_summaries_are_rate_limited_like_reads(tmp_path: Any, http: aiohttp.ClientSession) -> None:
    h = await launch(tmp_path, get_rate_per_minute=2)
    try:
        path = f"{h.url}{P.HTTP_CONVERSATION_SUMMARIES.format(app_id='shop')}"
        headers = {"Origin": SHOP_ORIGIN, "Content-Type": "application/json"}
        statuses = [(await http.post(path, data='{"ids": []}', headers=headers)) for _ in range(3)]
        assert [r.status for r in statuses] == [200, 200, 429]
        assert int(statuses[-1].headers["Retry-After"]) >= 1
        assert (await statuses[-1].json())["error"]["code"] == "rate_limited"
    finally:
        await h.stop()


async def test_deleting_a_conversation_while_its_socket_leaves_never_deadlocks(
    tmp_path: Any, store_kind: str
) -> None:
    """A reader deletes a conversation from the list right after leaving it: the socket's member row goes (on one
    connection) while the conversation is deleted (on another). Both lock the conversation's row first, then its
    members; in the other order PostgreSQL aborted one of the two about every second time."""
    from widget.relay.hub import empty_state

    def make() -> Any:
        if store_kind == "postgres":
            from widget.relay.storage.postgres import PostgresStore

            return PostgresStore(database_for(tmp_path))
        from widget.relay.storage.sqlite import SQLiteStore

        return SQLiteStore(str(tmp_path / "relay.sqlite3"))

    a, b = make(), make()
    await a.open()
    await b.open()
    try:
        for i in range(20):
            cid, sid = f"c_deadlock{i:010d}xyz", f"sid-{i}"
            await a.create_conversation(cid, "shop", empty_state())
            await a.add_member(cid, sid, "instance")
            await a.set_active(cid, sid)
            outcomes = await asyncio.gather(b.remove_member(sid), a.delete_conversation(cid), return_exceptions=True)
            assert [o for o in outcomes if isinstance(o, BaseException)] == [], outcomes
            assert await a.get_conversation(cid) is None
    finally:
        await a.close()
        await b.close()

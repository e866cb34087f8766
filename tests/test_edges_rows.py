"""Every row an outsider can write is bounded (issue 31, item 3).

Two kinds of rows a joined socket could add without limit: the record of a refused write (a ``function_response``
for a call the relay is not waiting for, an ``action_outcome`` for no offered action) and the stored ack of a
``cancel`` with a fresh idempotency key. Each is rate limited per socket (``rate_limited`` with ``retry_after``,
nothing stored) and capped per conversation (the newest kept)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from relay_helpers import Recorder, info, joined, launch

from widget import protocol as P
from widget.relay.storage.sql import READ, fetchval

pytestmark = pytest.mark.relay

RATE = 20
CAP = 10


@pytest_asyncio.fixture(scope="module", params=["sqlite", "postgres"])
async def relay(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    """A relay with small bounds on the rows a socket can add (on each store: the cap is SQL of each engine)."""
    handle = await launch(tmp_path_factory.mktemp("edges-rows"), store=request.param,
                          refused_write_rate_per_minute=RATE,
                          max_refused_writes_per_conversation=CAP, cancel_rate_per_minute=RATE,
                          max_cancel_acks_per_conversation=CAP)
    yield handle
    await handle.stop()



def code(ack: Any) -> str | None:
    return ack["error"]["code"] if isinstance(ack, dict) and not ack.get("ok") else None


async def count(relay: Any, sql: str, *args: Any) -> int:
    return int(await relay.hub.store._one(fetchval(sql, *args), READ))


async def another_socket(http: aiohttp.ClientSession, url: str) -> Recorder:
    """A further socket of the conversation, joined (so the active client: its refused writes are recorded)."""
    data = await info(http, url)
    rec = await Recorder(data["relay_url"], data["relay_path"]).connect()
    assert (await rec.join(data["token"]))["ok"]
    return rec


async def test_responses_for_calls_not_pending_are_rate_limited_and_capped(
        relay: Any, http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    cid = data["conversation"]["id"]
    sockets = [rec]
    try:
        acks = [await rec.call("function_response", {"id": f"call_nope{i}", "status": "success", "result": "x" * 900,
                                                     "idempotency_key": f"r{i}"}) for i in range(RATE + 5)]
        assert [code(a) for a in acks[:RATE]] == [P.ErrorCode.CALL_NOT_PENDING] * RATE
        assert [code(a) for a in acks[RATE:]] == [P.ErrorCode.RATE_LIMITED] * 5
        assert all(0 < a["error"]["retry_after"] <= 60 for a in acks[RATE:])
        kept = await relay.hub.store.refused(cid)
        assert [r["payload"]["id"] for r in kept] == [f"call_nope{i}" for i in range(RATE - CAP, RATE)]
        # Growth: more sockets (each the active client in turn) add no more than the cap.
        for n in range(4):
            other = await another_socket(http, url)
            sockets.append(other)
            for i in range(RATE):
                await other.call("function_response", {"id": f"call_more{n}_{i}", "status": "error", "error": "e",
                                                       "idempotency_key": f"m{n}_{i}"})
            assert code(await other.call("action_outcome", {
                "message_id": "m_x", "action_id": "act_x", "name": "nope", "ok": True, "idempotency_key": f"a{n}"}))
        assert await count(relay, "SELECT COUNT(*) FROM refused WHERE conversation_id = ?", cid) == CAP
    finally:
        for s in sockets:
            await s.disconnect()


async def test_cancels_with_fresh_keys_are_rate_limited_and_capped(relay: Any, http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    cid = data["conversation"]["id"]
    sockets = [rec]
    try:
        acks = [await rec.call("cancel", {"idempotency_key": f"c{i}"}) for i in range(RATE + 5)]
        assert acks[:RATE] == [{"ok": True, "cancelled": False}] * RATE
        assert [code(a) for a in acks[RATE:]] == [P.ErrorCode.RATE_LIMITED] * 5
        # A repeat of a key still kept is answered from it, and not counted.
        assert await rec.call("cancel", {"idempotency_key": f"c{RATE - 1}"}) == {"ok": True, "cancelled": False}
        for n in range(4):
            other = await another_socket(http, url)
            sockets.append(other)
            for i in range(RATE):
                assert (await other.call("cancel", {"idempotency_key": f"o{n}_{i}"}))["ok"]
        stored = await count(relay, "SELECT COUNT(*) FROM idempotency WHERE conversation_id = ? AND kind = ?",
                             cid, "cancel")
        assert stored == CAP
    finally:
        for s in sockets:
            await s.disconnect()

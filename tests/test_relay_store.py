"""The SQLite store's batching worker: writes queued together share a transaction, yet each stays atomic
on its own; results come back in order; the data survives reopening."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from widget.relay.storage import CALL_ANSWERED, SQLiteStore


async def test_batched_writes_stay_atomic_each(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite3")
    await store.open()
    try:
        for i in range(3):
            await store.create_conversation(f"c{i}", "demo", {"autopilot": {}})
        # queued at once, so the worker runs them as one batch: the failing ones undo only themselves
        jobs = []
        for round_ in range(20):
            for cid in ("c0", "nope", "c1", "c2"):
                jobs.append(store.append_event(cid, "message", {"message": {"id": f"m{round_}{cid}"}},
                                               messages=[{"id": f"m{round_}{cid}", "role": "user"}]))
        results = await asyncio.gather(*jobs, return_exceptions=True)
        for i, r in enumerate(results):
            if i % 4 == 1:
                assert isinstance(r, KeyError)
            else:
                assert r == i // 4 + 1  # seqs 1..20 per conversation, in submission order
        for cid in ("c0", "c1", "c2"):
            events = await store.events_after(cid, 0)
            assert [s for s, _n, _p in events] == list(range(1, 21))
            conv, msgs = await store.snapshot(cid)  # type: ignore[misc]
            assert conv["seq"] == 20 and len(msgs) == 20
    finally:
        await store.close()
    # committed: a fresh connection sees everything
    db = sqlite3.connect(tmp_path / "s.sqlite3")
    assert db.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 60
    db.close()


async def test_answer_prompts_all_or_nothing(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "p.sqlite3")
    await store.open()
    try:
        await store.create_conversation("c", "demo", {"autopilot": {}})
        await store.add_prompts("c", "t", [{"id": "p1", "type": "text"}, {"id": "p2", "type": "bool"}])
        assert await store.answer_prompts("c", [("p1", "x")]) is True
        # p1 is no longer pending: the whole request is refused, p2 stays pending, no ack stored
        assert await store.answer_prompts("c", [("p2", True), ("p1", "y")], ("k", {"ok": True})) is False
        assert [p["id"] for p in await store.pending_prompts("c")] == ["p2"]
        assert await store.get_ack("c", "k") is None
        assert await store.prompt_statuses("c", ["p1", "p2", "p9"]) == {"p1": CALL_ANSWERED, "p2": "pending"}
        assert await store.answer_prompts("c", [("p2", False)], ("k", {"ok": True})) is True
        assert await store.get_ack("c", "k") == {"ok": True}
        assert await store.take_answers("c") == [({"id": "p1", "type": "text"}, "x"), ({"id": "p2", "type": "bool"}, False)]
    finally:
        await store.close()


async def test_closed_store_refuses(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "c.sqlite3")
    with pytest.raises(RuntimeError):
        await store.get_conversation("c")
    await store.open()
    await store.close()
    with pytest.raises(RuntimeError):
        await store.append_event("c", "message", {})

"""The store interface, one suite for both backends (SQLite, the embedded default, and PostgreSQL on a
real server): batched/concurrent writes stay atomic each, seq allocation is gap-free even from two
processes' stores at once, conditional transitions have one winner, the state read-modify-write loses
no update, call dispatch follows liveness, signals cross processes, and the data survives reopening.
The relay-level suites (test_relay.py, test_relay_turns.py, test_relay_tools.py) run on both too."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from relay_helpers import STORE_KINDS, database_for, fixture_store_kind, pg_server  # noqa: F401 - a fixture

from widget.protocol import CallState, ConversationStatus
from widget.relay.storage import SQLiteStore, Store
from widget.relay.storage import store as S

pytestmark = pytest.mark.relay


def make_store(kind: str, tmp: Path) -> Store:
    if kind == "sqlite":
        return SQLiteStore(tmp / "s.sqlite3")
    from widget.relay.storage.postgres import PostgresStore

    return PostgresStore(database_for(tmp))


@pytest_asyncio.fixture(params=STORE_KINDS)
async def store(request: Any, tmp_path: Path) -> AsyncIterator[Store]:
    s = make_store(request.param, tmp_path)
    await s.open()
    yield s
    await s.close()


@pytest_asyncio.fixture(params=STORE_KINDS)
async def two(request: Any, tmp_path: Path) -> AsyncIterator[tuple[Store, Store]]:
    """Two stores on one database, as two relay processes have (SQLite: one file, two connections)."""
    a, b = make_store(request.param, tmp_path), make_store(request.param, tmp_path)
    await a.open()
    await b.open()
    yield a, b
    await a.close()
    await b.close()


async def test_batched_writes_stay_atomic_each(store: Store) -> None:
    for i in range(3):
        await store.create_conversation(f"c{i}", "demo", {"autopilot": {}})
    # queued at once (SQLite runs them as one batch): the failing ones undo only themselves
    jobs = []
    for round_ in range(20):
        for cid in ("c0", "nope", "c1", "c2"):
            jobs.append(store.append_event(cid, "message", {"message": {"id": f"m{round_}{cid}"}},
                                           messages=[{"id": f"m{round_}{cid}", "role": "user"}]))
    results = await asyncio.gather(*jobs, return_exceptions=True)
    for i, r in enumerate(results):
        if i % 4 == 1:
            assert isinstance(r, KeyError)
        elif isinstance(store, SQLiteStore):
            assert r == i // 4 + 1  # seqs 1..20 per conversation, in submission order
    for cid in ("c0", "c1", "c2"):
        events = await store.events_after(cid, 0)
        assert [s for s, _n, _p in events] == list(range(1, 21))
        assert all(p["seq"] == s for s, _n, p in events)
        conv, msgs = await store.snapshot(cid)  # type: ignore[misc]
        assert conv["seq"] == 20 and len(msgs) == 20
        assert sorted(m["seq"] for m in msgs) == list(range(1, 21))


async def test_seq_allocation_across_processes(two: tuple[Store, Store]) -> None:
    """Two processes appending to one conversation at once: every seq taken once, no gap, each event
    stored with its own seq and the messages with theirs."""
    a, b = two
    await a.create_conversation("c", "demo", {"autopilot": {}})

    async def burst(s: Store, tag: str) -> list[int]:
        return [await s.append_event("c", "message", {"message": {"id": f"{tag}{i}"}}, messages=[{"id": f"{tag}{i}"}])
                for i in range(40)]

    sa, sb = await asyncio.gather(burst(a, "a"), burst(b, "b"))
    assert sorted(sa + sb) == list(range(1, 81))
    events = await b.events_after("c", 0)
    assert [s for s, _n, _p in events] == list(range(1, 81))
    by_id = {p["message"]["id"]: s for s, _n, p in events}
    assert [by_id[f"a{i}"] for i in range(40)] == sa and [by_id[f"b{i}"] for i in range(40)] == sb
    _conv, msgs = await a.snapshot("c")  # type: ignore[misc]
    assert {m["id"]: m["seq"] for m in msgs} == by_id


async def test_patch_and_ack_in_one_transaction(store: Store) -> None:
    await store.create_conversation("c", "demo", {"autopilot": {"context": {}}})
    await store.add_member("c", "s1", "i1")
    await store.heartbeat("i1")
    await store.set_active("c", "s1")

    def add(doc: dict[str, Any]) -> dict[str, Any]:
        doc["autopilot"]["context"]["n"] = doc["autopilot"]["context"].get("n", 0) + 1
        return doc

    assert await store.update_state("c", add, ("k1", {"ok": True}), active_sid="s1") is None
    # the same key again: the stored ack, nothing applied twice
    assert await store.update_state("c", add, ("k1", {"ok": True}), active_sid="s1") == {"ok": True}
    assert (await store.get_state("c"))["autopilot"]["context"]["n"] == 1

    def boom(doc: dict[str, Any]) -> dict[str, Any]:
        doc["autopilot"]["context"]["n"] = 99
        raise ValueError("patch failed")

    with pytest.raises(ValueError):
        await store.update_state("c", boom, ("k2", {"ok": True}), active_sid="s1")
    assert await store.get_ack("c", "k2") is None and (await store.get_state("c"))["autopilot"]["context"]["n"] == 1
    with pytest.raises(S.NotActive):
        await store.update_state("c", add, ("k3", {"ok": True}), active_sid="s2")
    assert await store.get_ack("c", "k3") is None


async def test_state_updates_from_two_processes_lose_nothing(two: tuple[Store, Store]) -> None:
    a, b = two
    await a.create_conversation("c", "demo", {"autopilot": {"context": {"items": []}}})

    def push(tag: str) -> Any:
        def fn(doc: dict[str, Any]) -> dict[str, Any]:
            doc["autopilot"]["context"]["items"].append(tag)
            return doc
        return fn

    await asyncio.gather(*(s.update_state("c", push(f"{n}{i}"), (f"{n}{i}", {"ok": True}))
                           for i in range(25) for n, s in (("a", a), ("b", b))))
    items = (await a.get_state("c"))["autopilot"]["context"]["items"]
    assert sorted(items) == sorted(f"{n}{i}" for i in range(25) for n in "ab")


async def test_conditional_transitions_have_one_winner(two: tuple[Store, Store]) -> None:
    a, b = two
    await a.create_conversation("c", "demo", {"autopilot": {}})
    # two user messages at once through two processes: one turn starts, the other is refused
    outcomes = await asyncio.gather(*(s.append_event("c", "message", {"message": {"id": f"m{i}"}},
                                                     messages=[{"id": f"m{i}"}],
                                                     conversation={"status": ConversationStatus.RUNNING,
                                                                   "runner": f"r{i}"},
                                                     require_status=(ConversationStatus.IDLE,
                                                                     ConversationStatus.FAILED))
                                      for i, s in enumerate((a, b, a, b))), return_exceptions=True)
    assert sum(isinstance(o, int) for o in outcomes) == 1
    assert sum(isinstance(o, S.StatusConflict) and o.status == ConversationStatus.RUNNING for o in outcomes) == 3
    conv = await b.get_conversation("c")
    assert conv["seq"] == 1 and len((await b.snapshot("c"))[1]) == 1  # type: ignore[index]
    # taking a dead runner's turn over: one process wins
    won = await asyncio.gather(*(s.claim_status("c", [ConversationStatus.RUNNING], runner_was=conv["runner"],
                                                runner=f"x{i}")
                                 for i, s in enumerate((a, b, a, b))))
    assert won.count(True) == 1
    assert (await a.get_conversation("c"))["runner"] == f"x{won.index(True)}"
    assert await a.claim_status("c", [ConversationStatus.WAITING_FOR_ASK_USER], status=ConversationStatus.IDLE) is False
    assert await a.claim_status("c", [ConversationStatus.RUNNING], status=ConversationStatus.IDLE) is True


async def test_call_dispatch_follows_liveness(store: Store) -> None:
    await store.create_conversation("c", "demo", {"autopilot": {}})
    await store.heartbeat("A")
    await store.add_member("c", "s1", "A")
    assert await store.set_active("c", "s1") is None
    await store.add_calls("c", "t", [{"id": "k1", "name": "f", "arguments": {}}])
    assert await store.claim_call("c", "k1") == "s1"  # to the active client
    await store.add_member("c", "s2", "A")
    assert await store.set_active("c", "s2") == "s1"
    assert await store.claim_call("c", "k1") == "s1"  # s1 is still joined on a live instance: keeps it
    assert await store.claim_call("c", "k1", "s2") == "s1"
    await store.remove_member("s1")
    assert await store.claim_call("c", "k1", "s2") == "s2"  # s1 left: the next active client gets it
    assert (await store.get_call("c", "k1"))["dispatched_to"] == "s2"
    # a dead instance's sockets hold nothing
    await store.add_member("c", "s3", "B")
    await store.heartbeat("B")
    await store.add_calls("c", "t", [{"id": "k2", "name": "f", "arguments": {}}])
    assert await store.claim_call("c", "k2", "s3") == "s3"
    assert await store.claim_call("c", "k2", "s2") == "s3"
    assert await store.instance_alive("B")
    await store.forget_instance("B")
    assert not await store.instance_alive("B")
    assert await store.claim_call("c", "k2", "s2") == "s2"
    # an answered call is dispatched to nobody
    assert await store.finish_call("c", "k2", CallState.ANSWERED, result=1)
    assert await store.claim_call("c", "k2", "s2") is None
    # the active client is forgotten when its socket leaves
    await store.remove_member("s2")
    assert (await store.get_conversation("c"))["active_sid"] is None
    assert await store.conversations_brief(["c", "nope"]) == {"c": {"seq": 0, "status": ConversationStatus.IDLE,
                                                                    "runner": None}}


async def test_answer_prompts_all_or_nothing(store: Store) -> None:
    await store.create_conversation("c", "demo", {"autopilot": {}})
    await store.add_prompts("c", "t", [{"id": "p1", "type": "text"}, {"id": "p2", "type": "bool"}])
    assert await store.answer_prompts("c", [("p1", "x")]) is True
    # p1 is no longer pending: the whole request is refused, p2 stays pending, no ack stored
    assert await store.answer_prompts("c", [("p2", True), ("p1", "y")], ("k", {"ok": True})) is False
    assert [p["id"] for p in await store.pending_prompts("c")] == ["p2"]
    assert await store.get_ack("c", "k") is None
    assert await store.prompt_statuses("c", ["p1", "p2", "p9"]) == {"p1": CallState.ANSWERED, "p2": "pending"}
    assert await store.answer_prompts("c", [("p2", False)], ("k", {"ok": True})) is True
    assert await store.get_ack("c", "k") == {"ok": True}
    assert await store.take_answers("c") == [({"id": "p1", "type": "text"}, "x"), ({"id": "p2", "type": "bool"}, False)]
    assert await store.take_answers("c") == []


async def test_calls_offers_refusals_and_delete(store: Store) -> None:
    await store.create_conversation("c", "demo", {"autopilot": {}})
    await store.add_calls("c", "t1", [{"id": "k1", "name": "f", "kind": "tool", "arguments": {"q": 1}},
                                      {"id": "k2", "name": "g", "arguments": {}, "status": CallState.ANSWERED,
                                       "result": {"r": [1]},
                                       "duration_ms": 1.5, "total_ms": 2.0}])
    assert [c["id"] for c in await store.turn_calls("c", "t1")] == ["k1", "k2"]
    await store.set_call_seq("c", "k1", 7)
    assert [c["id"] for c in await store.pending_calls("c")] == ["k1"]
    assert await store.finish_call("c", "k1", CallState.ANSWERED, error="no", duration_ms=3.0, total_ms=4.0,
                                   idempotency=("fr", {"ok": True}))
    assert not await store.finish_call("c", "k1", CallState.ANSWERED, result=2)
    k1 = await store.get_call("c", "k1")
    assert (k1["status"], k1["error"], k1["seq"], k1["total_ms"], k1["arguments"]) == (CallState.ANSWERED, "no", 7, 4.0,
                                                                                       {"q": 1})
    assert (await store.get_call("c", "k2"))["result"] == {"r": [1]}
    await store.record_refused("c", "function_response", {"id": "k1"}, "call is answered")
    assert [r["reason"] for r in await store.refused("c")] == ["call is answered"]  # type: ignore[attr-defined]
    msg = {"id": "m1", "role": "assistant", "content": "é ✓"}
    action = {"id": "m2", "role": "action", "action_id": "a1", "ok": True}
    offer = {"message_id": "m1", "call_id": "o1", "actions": [{"id": "a1", "name": "buy"}], "note": "Shown."}
    await store.append_event("c", "completion.ended", {"message": dict(msg)}, messages=[msg], offer=offer)
    assert (await store.get_offer("c", "m1"))["actions"] == [{"id": "a1", "name": "buy"}]  # type: ignore[index]
    assert not await store.action_succeeded("c", "a1")
    await store.append_event("c", "message", {"message": action}, messages=[action])
    assert await store.action_succeeded("c", "a1") and not await store.action_succeeded("c", "a2")
    await store.append_event("c", "messages.withdrawn", {"message_ids": ["m1"]}, withdraw=["m1"])
    assert await store.get_offer("c", "m1") is None and set(await store.get_offers("c")) == {"m1"}
    conv, msgs = await store.snapshot("c")  # type: ignore[misc]
    assert [m["id"] for m in msgs] == ["m2"] and conv["msg_seq"] == 3
    # a streaming event does not move msg_seq
    await store.append_event("c", "completion_stream", {"delta": "x"})
    assert (await store.get_conversation("c"))["msg_seq"] == 3  # type: ignore[index]
    assert await store.delete_conversation("c") and not await store.delete_conversation("c")
    assert await store.get_conversation("c") is None and await store.events_after("c", 0) == []
    with pytest.raises(KeyError):
        await store.append_event("c", "message", {})


async def test_retention_and_reopen(tmp_path: Path, store_kind: str) -> None:
    s = make_store(store_kind, tmp_path)
    await s.open()
    await s.create_conversation("old", "demo", {"autopilot": {}})
    await asyncio.sleep(0.05)
    cut = time.time()
    await s.create_conversation("new", "demo", {"autopilot": {}})
    await s.append_event("new", "message", {"n": 1})
    await s.put_ack("new", "k", {"ok": True, "n": 1})
    assert await s.delete_inactive_before(cut) == ["old"]
    await s.close()
    s2 = make_store(store_kind, tmp_path)
    await s2.open()  # migrations are idempotent
    try:
        assert await s2.get_conversation("old") is None
        assert [p for _s, _n, p in await s2.events_after("new", 0)] == [{"n": 1, "seq": 1}]
        assert await s2.get_ack("new", "k") == {"ok": True, "n": 1}
    finally:
        await s2.close()


async def test_signals_reach_every_process(two: tuple[Store, Store]) -> None:
    a, b = two
    got_a: list[dict[str, Any]] = []
    got_b: list[dict[str, Any]] = []
    a.add_listener(got_a.append)
    b.add_listener(got_b.append)
    await a.create_conversation("c", "demo", {"autopilot": {}})
    await a.add_calls("c", "t", [{"id": "k", "name": "f", "arguments": {}}])
    assert await a.finish_call("c", "k", CallState.ANSWERED, result=1)
    await a.signal({"t": "cancel", "c": "c"})
    want = [{"t": "call", "c": "c", "id": "k"}, {"t": "cancel", "c": "c"}]
    assert got_a == want
    if a.shared:  # PostgreSQL: NOTIFY reaches the other process, once
        deadline = time.monotonic() + 5
        while len(got_b) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert got_b == want
    else:
        assert got_b == []  # SQLite: one process per file


async def test_closed_store_refuses(tmp_path: Path, store_kind: str) -> None:
    store = make_store(store_kind, tmp_path)
    with pytest.raises(RuntimeError):
        await store.get_conversation("c")
    await store.open()
    await store.close()
    with pytest.raises(RuntimeError):
        await store.append_event("c", "message", {})


async def test_postgres_migrations_are_versioned(tmp_path: Path) -> None:
    from widget.relay.storage.postgres import MIGRATIONS, SCHEMA_VERSION, PostgresStore

    dsn = pg_server().database("migrations_" + str(abs(hash(str(tmp_path))) % 10**8))
    stores = [PostgresStore(dsn) for _ in range(3)]
    await asyncio.gather(*(s.open() for s in stores))  # processes starting together do not race
    try:
        assert await stores[0].migrate() == SCHEMA_VERSION == MIGRATIONS[-1][0]
        rows = await stores[0]._q(lambda con: con.fetch("SELECT version FROM schema_migrations ORDER BY version"))
        assert [r[0] for r in rows] == [v for v, _ in MIGRATIONS]
    finally:
        for s in stores:
            await s.close()

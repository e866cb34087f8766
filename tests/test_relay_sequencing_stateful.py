"""The relay's event sequencing across reconnects, as a state machine (hypothesis.stateful) on the real relay over
real Socket.IO: a reader socket joins with any ``last_seq`` (its own, or an older one), drops, comes back, asks for
replays, while a writer's messages start turns whose events the relay appends meanwhile.

What holds, checked after every step: on each of the reader's sockets the sequenced events come exactly once and in
order, from the join's ``last_seq + 1`` on with no gap (until that socket asks for a replay, which repeats events
by design); the reader's client (``widget.core.sequence.SeqTracker``, the session's own rule: duplicates dropped, a
gap asks for a replay) takes every seq exactly once, in order, across reconnects. At the end, once the turns are
over, it holds every event the relay stored, each equal to the stored one.

The relay runs on its own loop in a thread (``serve_in_thread``), so its turns go on between the machine's steps;
the sockets run on the test's loop. The session's side of the same rules, against every order a network allows,
is tests/test_session_stateful.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

import aiohttp
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from relay_helpers import Recorder, create, info, relay_config

from widget.core.sequence import GAP, NEW, SeqTracker
from widget.relay.models.base import ModelAdapter, ModelRequest, TextDelta
from widget.relay.server import RelayHandle, serve_in_thread

pytestmark = pytest.mark.relay

T = TypeVar("T")
#: How long a step waits at most for an answer of the relay (a loaded machine is slow, never this slow).
STEP_S = 10.0
#: Chunks of each answer, a millisecond apart: a turn's events keep coming while a join replays.
CHUNKS = 30
#: What the relay's loop reported: an exception no one retrieved (a task of the relay that failed).
RELAY_ERRORS: list[dict[str, Any]] = []


class TrickleModel(ModelAdapter):
    """Answers in ``CHUNKS`` chunks, so a turn's events are appended while the reader moves."""

    name = "trickle"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:  # type: ignore[override]
        for i in range(CHUNKS):
            await asyncio.sleep(0.001)
            yield TextDelta(f"w{i} ")


class Link:
    """One reader socket: the ``last_seq`` it joined with, what it received, and whether it asked for a replay."""

    def __init__(self, rec: Recorder, joined_at: int) -> None:
        self.rec = rec
        self.joined_at = joined_at
        self.taken = 0  # events of rec.events already given to the reader's tracker
        self.replay_from: int | None = None  # index in rec.events when it first asked for a replay

    def seqs(self, until: int | None = None) -> list[int]:
        return [d["seq"] for _, d in self.rec.events[:until] if isinstance(d, dict) and isinstance(d.get("seq"), int)]


class SequencingMachine(RuleBasedStateMachine):
    """A writer and a reader on one conversation of the module's relay."""

    relay: RelayHandle
    loop: asyncio.AbstractEventLoop

    def __init__(self) -> None:
        super().__init__()
        self.tracker = SeqTracker()
        self.accepted: list[tuple[int, str, dict[str, Any]]] = []
        self.link: Link | None = None
        self.old_links: list[Link] = []
        self.run(self._open())
        self.the_reader_joins(0)

    # ------------------------------------------------------------------ plumbing
    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, STEP_S))

    def stored(self) -> list[tuple[int, str, dict[str, Any]]]:
        """The conversation's events as the relay's store holds them (read on the relay's loop)."""
        store = self.relay.hub.store
        assert self.relay.loop is not None
        future = asyncio.run_coroutine_threadsafe(store.events_after(self.cid, 0, 100_000), self.relay.loop)
        return future.result(STEP_S)

    async def _open(self) -> None:
        self.http = aiohttp.ClientSession()
        self.url = url = await create(self.http, self.relay.url)
        data = await info(self.http, url)
        self.cid, self.token = data["conversation"]["id"], data["token"]
        self.writer = await Recorder(data["relay_url"], data["relay_path"]).connect()
        ack = await self.writer.join(self.token, 0)
        assert ack["ok"], ack
        self.sent = 0

    async def _close(self) -> None:
        for rec in (self.writer, *(lk.rec for lk in [self.link, *self.old_links] if lk is not None)):
            await rec.disconnect()
        await self.http.close()

    async def _take(self) -> None:
        """Give the reader's tracker what its socket received since the last step; a gap asks for a replay."""
        link = self.link
        if link is None:
            return
        await asyncio.sleep(0.01)  # let what is on the way arrive
        events = link.rec.events
        gap = False
        while link.taken < len(events):
            name, data = events[link.taken]
            link.taken += 1
            if not (isinstance(data, dict) and isinstance(data.get("seq"), int)):
                continue
            verdict = self.tracker.classify(data["seq"])
            if verdict == NEW:
                self.accepted.append((data["seq"], name, data))
            gap = gap or verdict == GAP
        if gap and link.rec.sio.connected:
            await self._replay(self.tracker.last_seq)

    async def _replay(self, last_seq: int) -> None:
        link = self.link
        assert link is not None
        if link.replay_from is None:
            link.replay_from = len(link.rec.events)
        ack = await link.rec.call("replay", {"last_seq": last_seq}, timeout=STEP_S)
        assert ack["ok"], ack

    # ------------------------------------------------------------------ what may happen, in any order
    @rule()
    def the_writer_sends_a_message(self) -> None:
        """A message whose turn appends events while the next steps run (refused ``busy`` while one runs)."""
        self.sent += 1
        ack = self.run(self.writer.call("user_message", {"text": f"m{self.sent}", "idempotency_key": f"k{self.sent}"}))
        assert ack["ok"] or ack["error"]["code"] == "busy", ack

    @precondition(lambda self: self.link is None)
    @rule(behind=st.integers(0, 6))
    def the_reader_joins(self, behind: int) -> None:
        """Join with the tracker's ``last_seq``, or one ``behind`` it (a client that kept less)."""

        async def join() -> None:
            last_seq = max(0, self.tracker.last_seq - behind)
            rec = await Recorder(self.writer.url, self.writer.path).connect()
            self.link = Link(rec, last_seq)
            ack = await rec.join(self.token, last_seq)
            assert ack["ok"], ack
            await self._take()

        self.run(join())

    @precondition(lambda self: self.link is not None)
    @rule()
    def the_reader_drops(self) -> None:
        async def drop() -> None:
            assert self.link is not None
            await self._take()
            await self.link.rec.disconnect()
            self.old_links.append(self.link)
            self.link = None

        self.run(drop())

    @precondition(lambda self: self.link is not None)
    @rule(after_ms=st.integers(0, 30))
    def the_reader_comes_back_during_a_turn(self, after_ms: int) -> None:
        """A message, then the reader drops and joins again ``after_ms`` into its turn: the join's replay and the
        turn's new events meet."""
        self.the_writer_sends_a_message()
        self.run(asyncio.sleep(after_ms / 1000))
        self.the_reader_drops()
        self.the_reader_joins(0)

    @precondition(lambda self: self.link is not None)
    @rule(behind=st.integers(0, 6))
    def the_reader_asks_for_a_replay(self, behind: int) -> None:
        self.run(self._replay(max(0, self.tracker.last_seq - behind)))
        self.run(self._take())

    @rule()
    def time_passes(self) -> None:
        self.run(self._take())

    # ------------------------------------------------------------------ what always holds
    @invariant()
    def each_socket_gets_each_seq_once_in_order(self) -> None:
        for link in [*self.old_links, *([self.link] if self.link else [])]:
            got = link.seqs(link.replay_from)
            expected = list(range(link.joined_at + 1, link.joined_at + 1 + len(got)))
            assert got == expected, f"a socket joined at last_seq {link.joined_at} got seqs {got}"

    @invariant()
    def the_reader_takes_each_seq_once_in_order(self) -> None:
        assert [seq for seq, _, _ in self.accepted] == list(range(1, len(self.accepted) + 1))

    def teardown(self) -> None:
        """The turns end, the reader is joined: it holds every stored event, each as stored."""
        try:
            if self.link is None:
                self.the_reader_joins(0)
            deadline = time.monotonic() + STEP_S
            while True:
                self.run(self._take())
                conversation = self.run(info(self.http, self.url))
                stored = self.stored()
                done = conversation["conversation"].get("status") not in ("running",)
                if done and self.tracker.last_seq == len(stored) or time.monotonic() > deadline:
                    break
            assert [s for s, _, _ in stored] == list(range(1, len(stored) + 1)), "the store's seqs have a gap"
            got = [(seq, name, {k: v for k, v in d.items() if k != "run"}) for seq, name, d in self.accepted]
            want = [(seq, name, {**d, "seq": seq}) for seq, name, d in stored]
            assert got == want, f"the reader holds seqs up to {self.tracker.last_seq} of {len(stored)}"
        finally:
            self.run(self._close())
        assert RELAY_ERRORS == [], f"the relay's loop reported {RELAY_ERRORS}"


@pytest.fixture(scope="module")
def relay_thread(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayHandle]:
    """The real relay on its own loop and thread, its model answering in a trickle."""
    # a shrinking search opens many conversations and sockets from one address: no per-address or replay limits
    config = relay_config(tmp_path_factory.mktemp("sequencing"), get_rate_per_minute=0, join_rate_per_minute=0,
                          replay_rate_per_minute=0)
    handle = serve_in_thread(config, models={"demo": TrickleModel()})
    assert handle.loop is not None
    handle.loop.call_soon_threadsafe(handle.loop.set_exception_handler, lambda _, context: RELAY_ERRORS.append(context))
    yield handle
    handle.close()


def test_every_seq_reaches_the_reader_once_in_order_across_reconnects(relay_thread: RelayHandle) -> None:
    """12 random runs of up to 12 steps, each on a new conversation (seconds)."""
    loop = asyncio.new_event_loop()
    SequencingMachine.relay, SequencingMachine.loop = relay_thread, loop
    try:
        run_state_machine_as_test(
            SequencingMachine,
            settings=settings(max_examples=12, stateful_step_count=12, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow]),
        )
    finally:
        loop.close()

"""Scale-out smoke test: a real PostgreSQL and redis-server (Debian's, started once per session
on loopback, PostgreSQL as its own user) and two relay processes sharing them.

- The real CPython client (``AutopilotClient`` over python-socketio) is joined to process A; another
  tab of the same conversation, joined to process B, sends the message, so B runs the turn: the call
  goes to the client on A, its response reaches the turn waiting on B, the answer streams back to A.
- Redis is stopped while a call is in flight and started again mid-turn: no function response and no
  event is lost (the store's log fills what Redis dropped), ``/readyz`` says so meanwhile (and until
  the relay is subscribed again: Redis answering PING is not enough).
- A cancel sent to A stops the turn B runs; a relay process that dies mid-turn has the turn failed (with
  Retry) by the process holding the client, without a reload.
- A relay whose socket missed events Redis dropped resends them from the store when a later one
  arrives (an in-process relay, fed another process's messages as its Redis listener would be).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from relay_helpers import Recorder, RelayProcess, info, joined, launch, pg_server, redis_server

from widget import AutopilotClient
from widget.transports.python_socketio import PythonSocketIOTransport

pytestmark = pytest.mark.relay


class Cluster:
    def __init__(self, workdir: Path) -> None:
        self.pg = pg_server()
        self.redis = redis_server()
        self.dsn = self.pg.database("scale_" + uuid.uuid4().hex[:8])
        t0 = time.monotonic()
        self.a = RelayProcess(workdir, database_url=self.dsn, redis_url=self.redis.url,
                              extra=["--demo-chunk-delay-ms", "30", "--log-level", "info"])
        self.b = RelayProcess(workdir, database_url=self.dsn, redis_url=self.redis.url,
                              extra=["--demo-chunk-delay-ms", "30", "--log-level", "info"])
        self.startup_s = time.monotonic() - t0

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        import asyncpg

        con = await asyncpg.connect(self.dsn)
        try:
            return list(await con.fetch(sql, *args))
        finally:
            await con.close()

    def close(self) -> None:
        self.a.stop()
        self.b.stop()
        if self.redis.proc is None:
            self.redis.start()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("scale"))
    yield c
    c.close()



async def two_tabs(cluster: Cluster, http: aiohttp.ClientSession, client: AutopilotClient) -> tuple[str, Recorder]:
    """A conversation created on A; a tab joined to B; then ``client`` joined to A (the active client)."""
    a, b = cluster.a, cluster.b
    r = await http.post(f"{a.url}/api/apps/demo/conversations", headers={"Origin": a.url})
    assert r.status == 201, await r.text()
    url = (await r.json())["url"]
    tab, _, _ = await joined(http, b.url, url=url.replace(a.url, b.url), last_seq=None)
    await client.connect(url)
    assert client.active and client.conversation["id"] in url
    # A tells the tab on B that it is read-only now: through Redis
    assert await tab.wait("client.role", timeout=5) == {"active": False, "conversation_id": client.conversation["id"]}
    return url, tab


async def settled(cluster: Cluster, http: aiohttp.ClientSession, url: str, client: AutopilotClient,
                  timeout: float = 10) -> dict[str, Any]:
    """Wait until the client holds every event the store has; the GET body then, once it reflects
    that same seq. The GET and the store's seq are two reads: the turn's last event (``user_input``,
    stored just after the ``completion.finished`` the callers wait for) may land between them, and a
    body read before it would be one event behind the client."""
    deadline = time.monotonic() + timeout
    while True:
        body = await info(http, url)
        rows = await cluster.fetch("SELECT seq FROM conversations WHERE id = $1", body["conversation"]["id"])
        if client.seq.last_seq == rows[0][0] == body["conversation"]["seq"] or time.monotonic() > deadline:
            return body
        await asyncio.sleep(0.05)


def client_for(cluster: Cluster) -> AutopilotClient:
    return AutopilotClient(PythonSocketIOTransport(), headers={"Origin": cluster.a.url})


async def test_client_on_a_gets_the_turn_b_runs(cluster: Cluster, http: aiohttp.ClientSession) -> None:
    client = client_for(cluster)
    calls: list[str] = []

    @client.function
    def get_weather(city: str) -> dict:
        """Current weather of a city."""
        calls.append(city)
        return {"city": city, "temp_c": 21}

    finished: list[dict[str, Any]] = []
    client.on("completion.finished", finished.append)
    try:
        url, tab = await two_tabs(cluster, http, client)
        t0 = time.monotonic()
        ack = await tab.call("user_message",
                             {"text": 'please call get_weather {"city": "Oslo"}', "idempotency_key": "m1"})
        assert ack["ok"], ack
        deadline = time.monotonic() + 20
        while not finished and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        turn_s = time.monotonic() - t0
        assert finished and finished[-1]["status"] == "done", client.messages
        assert calls == ["Oslo"]  # ran once, on the client joined to A
        cid = client.conversation["id"]
        (runner,) = [r[0] for r in await cluster.fetch("SELECT runner FROM conversations WHERE id = $1", cid)]
        assert runner == cluster.b.instance  # B ran the turn
        rows = await cluster.fetch(
            "SELECT c.status, c.result, m.instance FROM calls c JOIN members m ON m.sid = c.dispatched_to WHERE "
            "c.conversation_id = $1", cid)
        assert [(r[0], json.loads(r[1]), r[2]) for r in rows] == [("answered", {"city": "Oslo", "temp_c": 21},
                                                                   cluster.a.instance)]
        body = await settled(cluster, http, url, client)
        assert client.seq.last_seq == body["conversation"]["seq"] > 0
        assert [m["id"] for m in client.messages] == [m["id"] for m in body["messages"]]
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "assistant"]
        assert "Oslo" in client.messages[-1]["content"]
        # the tab on B saw the same log
        await tab.wait("user_input", pred=lambda d: d["seq"] == body["conversation"]["seq"])
        assert [d["seq"] for _e, d in tab.seqd()] == list(range(1, body["conversation"]["seq"] + 1))
        await tab.disconnect()
        print(f"\nscale: cluster up in {cluster.startup_s:.2f} s, turn across processes {turn_s:.2f} s")
    finally:
        await client.disconnect()


async def test_redis_restart_mid_conversation_loses_nothing(cluster: Cluster, http: aiohttp.ClientSession) -> None:
    client = client_for(cluster)
    ran: list[str] = []
    readyz: dict[str, int] = {}
    restarted = asyncio.Event()

    async def outage() -> None:
        """Redis is down while the call's response travels and the answer starts streaming, then
        comes back mid-turn."""
        async with aiohttp.ClientSession() as h:
            for name, relay in (("a", cluster.a), ("b", cluster.b)):
                async with h.get(f"{relay.url}/readyz") as r:
                    readyz[name] = r.status
        await asyncio.sleep(0.35)
        await asyncio.to_thread(cluster.redis.start)
        restarted.set()

    tasks: list[asyncio.Task[Any]] = []

    @client.function
    async def slow_lookup(q: str) -> dict:
        """Looks something up, slowly."""
        ran.append(q)
        if q == "first":
            cluster.redis.stop()
            tasks.append(asyncio.ensure_future(outage()))
            await asyncio.sleep(0.25)
        return {"q": q, "n": 42}

    finished: list[dict[str, Any]] = []
    client.on("completion.finished", finished.append)
    try:
        url, tab = await two_tabs(cluster, http, client)
        await tab.call("user_message", {"text": 'call slow_lookup {"q": "first"} please', "idempotency_key": "m1"})
        deadline = time.monotonic() + 30
        while not finished and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert finished and finished[-1]["status"] == "done", client.messages
        await asyncio.wait_for(restarted.wait(), 10)
        assert readyz == {"a": 503, "b": 503}  # Redis down: not ready (the process is still healthy)
        async with http.get(f"{cluster.a.url}/healthz") as r:
            assert r.status == 200
        body = await settled(cluster, http, url, client)
        assert client.seq.last_seq == body["conversation"]["seq"]
        assert [m["id"] for m in client.messages] == [m["id"] for m in body["messages"]]
        tool = [m for m in body["messages"] if m["role"] == "tool"]
        assert [t["result"] for t in tool] == [{"q": "first", "n": 42}]
        # Redis is back: both processes get ready again, and the next turn goes through it
        for relay in (cluster.a, cluster.b):
            deadline = time.monotonic() + 10
            while True:
                async with http.get(f"{relay.url}/readyz") as r:
                    if r.status == 200:
                        break
                assert time.monotonic() < deadline, "relay not ready again after Redis came back"
                await asyncio.sleep(0.05)
        n = len(finished)
        await tab.call("user_message", {"text": 'and call slow_lookup {"q": "second"}', "idempotency_key": "m2"})
        deadline = time.monotonic() + 20
        while len(finished) == n and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert finished[-1]["status"] == "done"
        assert ran == ["first", "second"]  # each call ran once
        body = await settled(cluster, http, url, client)
        assert client.seq.last_seq == body["conversation"]["seq"]
        assert [m["id"] for m in client.messages] == [m["id"] for m in body["messages"]]
        cid = client.conversation["id"]
        calls = await cluster.fetch("SELECT status, result FROM calls WHERE conversation_id = $1 ORDER BY created_at",
                                    cid)
        assert [(r[0], json.loads(r[1])["q"]) for r in calls] == [("answered", "first"), ("answered", "second")]
        assert await cluster.fetch("SELECT kind, reason FROM refused WHERE conversation_id = $1", cid) == []
        await tab.disconnect()
    finally:
        for t in tasks:
            await t
        if cluster.redis.proc is None:
            cluster.redis.start()
        await client.disconnect()


async def test_cancel_on_a_stops_the_turn_b_runs(cluster: Cluster, http: aiohttp.ClientSession) -> None:
    client = client_for(cluster)
    started = asyncio.Event()

    @client.function
    async def wait_forever() -> dict:
        """Never answers."""
        started.set()
        await asyncio.sleep(60)
        return {}

    finished: list[dict[str, Any]] = []
    client.on("completion.finished", finished.append)
    try:
        url, tab = await two_tabs(cluster, http, client)
        await tab.call("user_message", {"text": "call wait_forever", "idempotency_key": "m1"})
        await asyncio.wait_for(started.wait(), 10)
        assert await client.cancel() is True  # sent to A; B runs the turn
        deadline = time.monotonic() + 10
        while not finished and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert finished and finished[-1]["status"] == "cancelled"
        body = await settled(cluster, http, url, client)
        assert body["conversation"]["status"] == "idle"
        await tab.disconnect()
    finally:
        await client.disconnect()


async def test_a_dead_relay_s_turn_is_failed_by_the_survivor(cluster: Cluster, http: aiohttp.ClientSession,
                                                              tmp_path: Path) -> None:
    """C runs a turn and is killed while the page runs a call: A, holding the client, fails the turn (Retry)
    once C's heartbeat expires, without a reload, and does not cancel the call; Retry then runs on A and
    finishes the interrupted round with the call's result when the page sends it (it runs once)."""
    c = RelayProcess(tmp_path, database_url=cluster.dsn, redis_url=cluster.redis.url,
                     extra=["--demo-chunk-delay-ms", "30", "--log-level", "info"])
    client = client_for(cluster)
    started = asyncio.Event()
    release = asyncio.Event()
    runs: list[str] = []

    @client.function
    async def hang() -> str:
        """Answers once released."""
        runs.append("run")
        started.set()
        await release.wait()
        return "first run"

    finished: list[dict[str, Any]] = []
    client.on("completion.finished", finished.append)
    try:
        r = await http.post(f"{cluster.a.url}/api/apps/demo/conversations", headers={"Origin": cluster.a.url})
        url = (await r.json())["url"]
        tab, _, _ = await joined(http, c.url, url=url.replace(cluster.a.url, c.url), last_seq=None)
        await client.connect(url)
        await tab.call("user_message", {"text": "call hang", "idempotency_key": "m1"})
        await asyncio.wait_for(started.wait(), 10)
        assert c.proc is not None
        c.proc.kill()  # no goodbye: its heartbeat just stops
        c.proc.wait()
        t0 = time.monotonic()
        deadline = t0 + 20
        while not finished and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert finished and finished[-1]["status"] == "failed"
        errors = [m for m in client.messages if m["role"] == "error"]
        assert errors and errors[-1]["code"] == "turn_interrupted" and errors[-1]["retryable"] is True
        await client.retry()
        release.set()  # the page's answer arrives only now, after the relay that sent the call died
        deadline = time.monotonic() + 20
        while (len(finished) < 2 or finished[-1]["status"] != "done") and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert finished[-1]["status"] == "done"
        body = await settled(cluster, http, url, client)
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "assistant"]
        assert body["messages"][2]["result"] == "first run" and runs == ["run"], (body["messages"], runs)
        print(f"\nscale: dead relay's turn failed {time.monotonic() - t0:.1f} s after the kill")
    finally:
        await client.disconnect()
        c.stop()


async def test_readyz_waits_for_the_redis_subscription(http: aiohttp.ClientSession, tmp_path: Path) -> None:
    """Redis answering PING is not enough: until the relay's listener is subscribed again (it
    reconnects with backoff after an outage) other processes' events reach its sockets only by
    polling and a ``client.role`` to them is lost, so it is not ready."""
    h = await launch(tmp_path, store="postgres", redis_url=redis_server().url,
                     redis_channel="ready-" + uuid.uuid4().hex[:8])
    try:
        deadline = time.monotonic() + 5
        while not h.hub.redis.listening:
            assert time.monotonic() < deadline, "the Redis listener did not subscribe"
            await asyncio.sleep(0.01)
        async with http.get(f"{h.url}/readyz") as r:
            assert r.status == 200, await r.text()
        h.hub.redis.listening = False  # as between Redis coming back and the listener's next attempt
        async with http.get(f"{h.url}/readyz") as r:
            assert r.status == 503
            assert (await r.json())["checks"]["redis"] == "error: not subscribed to the channel yet"
        h.hub.redis.listening = True
    finally:
        await h.stop()


async def test_an_event_past_a_gap_brings_the_missed_ones(http: aiohttp.ClientSession, tmp_path: Path) -> None:
    """Redis drops another process's messages during an outage; a later one arrives. The process
    resends what its socket missed from the store: an event past a gap is not counted as the socket
    having the ones before it (the client drops it until it has them), neither is the room copy of a
    call whose ``run: true`` copy to this process's socket was lost. Otherwise nothing would resend
    them: the turn's last events, or the call the turn waits on, would never reach the client."""
    h = await launch(tmp_path, store="postgres", redis_url=redis_server().url,
                     redis_channel="gap-" + uuid.uuid4().hex[:8])
    rec: Recorder | None = None
    try:
        rec, data, _url = await joined(http, h.url)
        cid, sid = data["conversation"]["id"], rec.sio.get_sid()
        deadline = time.monotonic() + 5
        while sid not in h.hub.convs[cid].ready:  # the join's replay is done: events now go to its room
            assert time.monotonic() < deadline, "the join did not finish"
            await asyncio.sleep(0.01)
        store = h.hub.store

        def from_another_process(event: str, payload: dict[str, Any], room: str, skip_sid: str | None = None) -> Any:
            """What RelayRedisManager's listener hands to python-socketio for a message published elsewhere."""
            return h.hub.redis._handle_emit({"method": "emit", "event": event, "data": [payload], "binary": False,
                                             "namespace": "/",
                                             "room": room, "skip_sid": skip_sid, "callback": None,
                                             "host_id": "another-process"})

        # 1. Two messages stored by another process; Redis delivers only the second.
        msgs = [{"id": f"m_gap{i}", "role": "user", "content": f"hi {i}", "created_at": time.time()} for i in (1, 2)]
        payloads = [{"message": m} for m in msgs]
        seqs = [await store.append_event(cid, "message", p, messages=[m]) for p, m in zip(payloads, msgs, strict=True)]
        await from_another_process("message", payloads[1], cid)
        got = await rec.wait("message", pred=lambda d: d["seq"] == seqs[0])
        assert got["message"]["id"] == "m_gap1"
        rt = h.hub.convs[cid]
        deadline = time.monotonic() + 5
        while rt.seen_seq != seqs[1] or rt.catch_up_queued:  # that resend is over (it must not send the call below)
            assert time.monotonic() < deadline, (rt.seen_seq, seqs)
            await asyncio.sleep(0.01)

        # 2. A call that process dispatched to this socket: the run: true copy is lost, the room copy
        #    (which skips the socket) arrives, right after what the socket has.
        await store.add_calls(cid, "t_gap",
                              [{"id": "call_gap", "name": "get_selection", "kind": "function", "arguments": {}}])
        begin = {"id": "call_gap", "name": "get_selection", "arguments": {}, "message_id": "m_x", "kind": "function",
                 "run": False}
        seq = await store.append_event(cid, "function_call.begin", begin)
        await store.set_call_seq(cid, "call_gap", seq)
        assert await store.claim_call(cid, "call_gap", sid) == sid
        await from_another_process("function_call.begin", begin, cid, skip_sid=sid)
        got = await rec.wait("function_call.begin", pred=lambda d: d.get("run") is True)
        assert got["id"] == "call_gap" and got["seq"] == seq
    finally:
        if rec is not None:
            await rec.disconnect()
        await h.stop()

"""Scale-out benchmark (docs/deployment.md): throughput and per-turn latency of 1 vs 2 relay processes.

Starts a real PostgreSQL and redis-server on loopback (tests/relay_helpers.py: PostgreSQL as its own
user) and relay processes (``python -m widget.relay``, demo model without chunk delays). Each of
``--conversations`` conversations has a socket that joins and runs page functions (python-socketio
client, answers at once) and sends ``--turns`` messages, one after the other, each making the demo
model call a page function (two model rounds, ~16 sequenced events per turn). Setups:

- ``sqlite-1``: one process on the embedded SQLite store (the default deployment, for reference);
- ``pg-1``: one process on PostgreSQL + Redis;
- ``pg-2``: two processes, conversations spread over both (each turn runs where its socket is);
- ``pg-2-cross``: two processes, and every turn is sent by a second socket joined to the *other*
  process, so the turn runs on one process while its function call and all its events go to the
  client on the other (Redis fan-out + the response through PostgreSQL).

Per setup: turns/s over the run, and the latency of a turn (message sent → ``completion.finished`` received) p50/p99;
the next message goes after ``user_input``. Bounded: ``--conversations`` × ``--turns`` turns, a 120 s cap per setup.
Client load runs in this process on the same 2-core machine as the relays: compare setups within one run.

    python bench/scale.py [--conversations 16] [--turns 8]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from relay_helpers import Recorder, RelayProcess, info, pg_server, redis_server
from results import save


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


async def one_conversation(http: aiohttp.ClientSession, home: str, sender_base: str | None, turns: int,
                           latencies: list[float], deadline: float) -> int:
    r = await http.post(f"{home}/api/apps/demo/conversations", headers={"Origin": home})
    url = (await r.json())["url"]
    sender = None
    if sender_base is not None:  # the other tab, on the other process: joins first, so the client stays active
        body = await info(http, url.replace(home, sender_base))
        sender = await Recorder(body["relay_url"]).connect()
        await sender.join(body["token"], None)
    body = await info(http, url)
    client = await Recorder(body["relay_url"]).connect()
    ack = await client.join(body["token"], None)
    assert ack["ok"], ack
    await client.wait("state")
    patch = [{"op": "add", "path": "/autopilot/functions/get_selection",
              "value": {"name": "get_selection", "description": "Selected text.",
                        "parameters": {"type": "object", "properties": {}},
                        "kind": "function", "sensitive": False, "source": "client"}}]
    assert (await client.call("state_patch", {"patch": patch, "idempotency_key": "p"})) == {"ok": True}
    client.auto_answer = lambda call: {"text": "selected"}
    done = 0
    for i in range(turns):
        if time.monotonic() > deadline:
            break
        mark = len(client.events)
        t0 = time.perf_counter()
        via = sender or client
        ack = await via.call("user_message", {"text": "call get_selection", "idempotency_key": f"m{i}"}, timeout=30)
        assert ack["ok"], ack
        await client.wait("completion.finished", start=mark, timeout=30)
        latencies.append((time.perf_counter() - t0) * 1000)
        await client.wait("user_input", start=mark, timeout=30, pred=lambda d: d["reason"] == "message")
        done += 1
    for rec in (client, sender):
        if rec is not None:
            await rec.disconnect()
    return done


async def run_setup(name: str, relays: list[RelayProcess], conversations: int, turns: int,
                    cross: bool) -> dict[str, Any]:
    latencies: list[float] = []
    deadline = time.monotonic() + 120
    async with aiohttp.ClientSession() as http:
        # warm up each process (imports, connections)
        await asyncio.gather(*(one_conversation(http, r.url, None, 2, [], deadline) for r in relays))
        t0 = time.perf_counter()
        jobs = []
        for i in range(conversations):
            home = relays[i % len(relays)].url
            other = relays[(i + 1) % len(relays)].url if cross else None
            jobs.append(one_conversation(http, home, other, turns, latencies, deadline))
        counts = await asyncio.gather(*jobs)
        wall = time.perf_counter() - t0
    n = sum(counts)
    return {"setup": name, "turns": n, "turns_per_s": n / wall, "p50_ms": statistics.median(latencies),
            "p99_ms": pct(latencies, 99), "max_ms": max(latencies)}


async def main_async(args: argparse.Namespace) -> None:
    pg, redis = pg_server(), redis_server()
    work = Path(tempfile.mkdtemp(prefix="autopilot-scale-"))
    extra = ["--demo-chunk-delay-ms", "0"]
    results = []

    def cluster(n: int, store: bool) -> list[RelayProcess]:
        dsn = pg.database("bench_" + uuid.uuid4().hex[:8]) if store else None
        return [RelayProcess(work, database_url=dsn, redis_url=redis.url if store else None, extra=extra)
                for _ in range(n)]

    for name, n, store, cross in (("sqlite-1", 1, False, False), ("pg-1", 1, True, False),
                                  ("pg-2", 2, True, False), ("pg-2-cross", 2, True, True)):
        relays = cluster(n, store)
        try:
            results.append(await run_setup(name, relays, args.conversations, args.turns, cross))
        finally:
            for r in relays:
                r.stop()
        print(f"  {results[-1]['setup']}: done", file=sys.stderr, flush=True)
    base = next(r for r in results if r["setup"] == "pg-1")
    print(f"{args.conversations} conversations x {args.turns} turns (one function call each), concurrent; "
          "client load in this process, same machine")
    print(f"{'setup':<12} {'turns':>6} {'turns/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'p99 vs pg-1':>12}")
    for r in results:
        print(f"{r['setup']:<12} {r['turns']:>6} {r['turns_per_s']:>8.1f} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} "
              f"{r['max_ms']:>8.1f}"
              f" {r['p99_ms'] - base['p99_ms']:>+11.1f}")
    save("scale", {"conversations": args.conversations, "turns": args.turns, "setups": results})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--conversations", type=int, default=16)
    p.add_argument("--turns", type=int, default=8)
    args = p.parse_args()
    if args.conversations < 1 or args.turns < 1 or args.conversations * args.turns > 5000:
        p.error("1 <= conversations x turns <= 5000")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()

"""Kill -9 (or SIGTERM: a rolling deploy) of the relay while a page function runs, then Retry: does any request
run its function twice or lose its result?

Each request is a fresh conversation with the real Python client (its outbox, run-once and rejoin): the
message makes the demo model call ``place_order``; while the function runs (or just after it answered) the
relay gets SIGKILL (``--signal term``: SIGTERM, and the relay drains for ``--drain`` seconds before it exits) and is
started again on the same port and store. The client reconnects by itself; once the
turn shows as failed the bench sends Retry and waits for the answer. Counted per request: how many times the
function ran, and whether the result it returned is the one the conversation stored.

    python bench/kill_midcall.py [-n 30]                      # SQLite, one relay
    python bench/kill_midcall.py -n 12 --scale                # PostgreSQL + Redis, two relays (the killed one
                                                              # holds the turn; the client is on the other)
    python bench/kill_midcall.py -n 30 --signal term --drain 0    # a graceful stop (also --drain 2, 5 ...)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from relay_helpers import RelayProcess, info, joined
from results import save

from widget.client import AutopilotClient
from widget.transports.python_socketio import PythonSocketIOTransport

TURN_S = 30.0
#: How the relay is stopped: ``kill`` (SIGKILL, a crash) or ``term`` (SIGTERM, a graceful stop that drains).
SIGNAL: list[str] = ["kill"]
#: The checkout the relay processes run from (``--relay-root``; default: this one).
ROOT: list[Path | None] = [None]


class Relay(RelayProcess):
    """A relay process, run from ``ROOT`` when one is given (its ``widget`` package then comes first)."""

    def start(self, timeout: float = 30.0) -> None:
        if ROOT[0] is None:
            return super().start(timeout)
        self.env["PYTHONPATH"] = str(ROOT[0])
        self.cmd = [c for c in self.cmd]
        import subprocess
        import urllib.request

        self.proc = subprocess.Popen(self.cmd, cwd=ROOT[0],
                                     stdout=self.log.open("ab"), stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"relay did not start: {self.log.read_text()[-2000:]}")


async def wait_for(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.02)


async def one_request(i: int, http: aiohttp.ClientSession, front: RelayProcess, victim: RelayProcess,
                      rng: random.Random, scale: bool) -> dict[str, Any]:
    """One request: message, kill the relay running the turn mid-call, restart it, Retry. Its counts."""
    client = AutopilotClient(PythonSocketIOTransport(), headers={"Origin": front.url})
    runs: list[float] = []
    answered: list[float] = []
    started = asyncio.Event()
    work_s = rng.uniform(0.05, 0.6)
    result = f"order-{i}-{rng.randrange(10**9)}"

    @client.function
    async def place_order() -> str:
        """Places the order."""
        runs.append(time.monotonic())
        mine = f"{result}-run{len(runs)}"  # each run returns its own value
        started.set()
        await asyncio.sleep(work_s)
        answered.append(time.monotonic())
        return mine

    finished: list[dict[str, Any]] = []
    client.on("completion.finished", finished.append)
    tab = None
    out: dict[str, Any] = {"request": i, "ran": 0, "lost": False, "error": None}
    try:
        r = await http.post(f"{front.url}/api/apps/demo/conversations", headers={"Origin": front.url})
        url = (await r.json())["url"]
        if scale:  # the message goes through the victim, so the victim runs the turn
            tab, _, _ = await joined(http, victim.url, url=url.replace(front.url, victim.url), last_seq=None)
        await client.connect(url)
        if scale:
            assert tab is not None
            await tab.call("user_message", {"text": "call place_order", "idempotency_key": f"m{i}"})
        else:
            await client.send_message("call place_order")
        await asyncio.wait_for(started.wait(), TURN_S)
        await asyncio.sleep(rng.uniform(0.0, work_s + 0.1))  # mid-call, or just after the answer
        assert victim.proc is not None
        out["answered_before_kill"] = bool(answered)
        if SIGNAL[0] == "term":
            victim.proc.terminate()
            await asyncio.to_thread(victim.proc.wait, TURN_S + 10)
        else:
            victim.proc.kill()
            victim.proc.wait()
        if tab is not None:
            await tab.disconnect()
        victim.start()
        # The client reconnects by itself; opening the conversation recovers the turn (failed, Retry), or
        # the surviving relay notices the dead one's turn.
        deadline = time.monotonic() + TURN_S
        while True:
            body = await info(http, url)
            status = body["conversation"]["status"]
            if status in ("failed", "idle") and client.connection_state == "connected":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the turn stayed {status}")
            await asyncio.sleep(0.25)
        out["retried"] = status == "failed"
        if status == "failed":
            for _ in range(50):
                try:
                    await client.retry()
                    break
                except Exception:  # noqa: BLE001 - not reconnected yet, or busy: try again
                    await asyncio.sleep(0.1)
        await wait_for(lambda: (finished and finished[-1]["status"] == "done"
                                and client.conversation is not None), TURN_S, "no answer after Retry")
        body = await info(http, url)
        tools = [m for m in body["messages"] if m["role"] == "tool" and m.get("name") == "place_order"]
        out["ran"] = len(runs)
        # lost: the first run's result is not what the conversation kept (it was refused, or never arrived)
        out["lost"] = not any(m.get("status") == "success" and m.get("result") == f"{result}-run1" for m in tools)
        out["stored"] = [(m.get("status"),
                          m.get("result") if m.get("status") == "success" else m.get("error")) for m in tools]
    except Exception as exc:  # noqa: BLE001 - counted, the run goes on
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["ran"] = len(runs)
        out["lost"] = True
    finally:
        await client.disconnect()
    return out


async def main(n: int, scale: bool, seed: int, drain_s: float) -> int:
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="kill-midcall-"))
    cfg = work / "relay.toml"  # the bench polls the conversation: no per-address HTTP limits
    # (a relay from before the HTTP limits knows no get_rate_per_minute)
    cfg.write_text("create_rate_per_minute = 0\n" + ("get_rate_per_minute = 0\n" if ROOT[0] is None else ""))
    extra = ["--config", str(cfg), "--drain-timeout", str(drain_s)]
    procs: list[RelayProcess] = []
    if scale:
        from relay_helpers import pg_server, redis_server

        dsn = pg_server().fresh_database("kill")
        redis = redis_server().url
        front = Relay(work, database_url=dsn, redis_url=redis, extra=extra)
        victim = Relay(work, database_url=dsn, redis_url=redis, extra=extra)
        procs = [front, victim]
    else:
        front = victim = Relay(work, extra=extra)
        procs = [front]
    results = []
    stopped = "SIGTERM" if SIGNAL[0] == "term" else "killed"
    t0 = time.monotonic()
    try:
        async with aiohttp.ClientSession() as http:
            for i in range(n):
                res = await one_request(i, http, front, victim, rng, scale)
                results.append(res)
                flag = "" if res["ran"] == 1 and not res["lost"] else "  <-- " + str(res)
                when = "mid-call" if res.get("answered_before_kill") is False else "after the answer"
                print(f"request {i + 1:3d}/{n}: {stopped} {when}, retried {res.get('retried')}, ran {res['ran']}, "
                      f"lost {res['lost']}{flag}", flush=True)
    finally:
        for p in procs:
            p.stop()
    twice = sum(1 for r in results if r["ran"] > 1)
    retried = sum(1 for r in results if r.get("retried"))
    mid = sum(1 for r in results if r.get("answered_before_kill") is False)
    lost = sum(1 for r in results if r["lost"])
    errors = sum(1 for r in results if r["error"])
    kind = "PostgreSQL + Redis, two relays" if scale else "SQLite, one relay"
    load = os.getloadavg()[0]
    how = f"SIGTERM (drain {drain_s:g} s)" if SIGNAL[0] == "term" else "kill -9"
    print(f"\n{how} mid-call x{n} ({kind}), {time.monotonic() - t0:.0f} s, load {load:.1f}: "
          f"{twice} requests ran the function twice, {lost} lost results, {errors} errors "
          f"({mid} killed while the function ran, {n - mid} after it answered; {retried} turns failed and were "
          "retried)")
    save("kill_midcall", {"n": n, "store": kind, "ran_twice": twice, "lost": lost, "errors": errors,
                          "stopped_mid_call": mid, "retried": retried, "requests": results})
    return 0 if twice == 0 and lost == 0 else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=30)
    ap.add_argument("--scale", action="store_true", help="PostgreSQL + Redis, two relay processes")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--signal", choices=["kill", "term"], default="kill",
                    help="stop the relay with SIGKILL (a crash, default) or SIGTERM (a graceful stop)")
    ap.add_argument("--drain", type=float, default=0.0,
                    help="with --signal term: the relay's drain_timeout_s (the call outlives a short one)")
    ap.add_argument("--relay-root", help="run the relay from this checkout (e.g. an older commit, for a before/after)")
    args = ap.parse_args()
    if args.relay_root:
        ROOT[0] = Path(args.relay_root).resolve()
    SIGNAL[0] = args.signal
    sys.exit(asyncio.run(main(args.n, args.scale, args.seed, args.drain)))

"""What the docs search step adds to the first token of a demo-model answer (issue 29 item 7: goal <= 50 ms).

One relay in this process (the demo model, its usual 15 ms between streamed pieces) with two apps on the same model:
``docs`` has this project's docs indexed (``docs/*.md``, as ``bash dev demo`` serves them) and ``plain`` has none.
Each run opens a conversation of each app (interleaved, so both see the same machine load), joins it over
Socket.IO, sends one question and times the ``user_message`` write to the first ``completion_stream`` piece of the
answer (the turn's last model round; the first piece of any round is printed too). Two
turn modes of the docs app are measured: ``one-shot`` (the relay searches the question, the model answers once:
``loop = "auto"`` for an app without page functions) and ``agentic`` (the model calls ``search_docs`` in a round of
its own, then answers). The figure is the median difference docs - plain per mode.

    python bench/docs_first_token.py [--runs 40]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import aiohttp  # noqa: E402
from relay_helpers import SHOP_SECRET, joined, launch  # noqa: E402
from results import save  # noqa: E402

from widget.relay.config import AppConfig, ModelConfig  # noqa: E402
from widget.relay.docs import open_docs_index  # noqa: E402
from widget.relay.docs.indexer import run_index  # noqa: E402
from widget.relay.docs.walk import Source, collect  # noqa: E402

QUESTIONS = [
    "How do I change the bar's colours?",
    "Which Chromium flags does the test browser need?",
    "What does the relay do with a sensitive function?",
    "How do I push the docs index from CI?",
    "What is the join token's lifetime?",
]
APPS = ("plain", "one-shot", "agentic")


async def first_token(http: aiohttp.ClientSession, base: str, app: str, question: str) -> tuple[float, float]:
    """Milliseconds from sending ``question`` in a new conversation of ``app`` to the first streamed piece, and to the
    first piece of the answer itself (the turn's last model round: after the search round in agentic mode)."""
    rec, _data, _url = await joined(http, base, app)
    stamps: list[float] = []  # arrival time of each event, stamped by a 1 ms poll

    async def stamp() -> None:
        while True:
            stamps.extend([time.perf_counter()] * (len(rec.events) - len(stamps)))
            await asyncio.sleep(0.001)

    try:
        start = len(rec.events)
        stamps.extend([0.0] * start)
        poll = asyncio.create_task(stamp())
        t0 = time.perf_counter()
        ack = await rec.call("user_message", {"text": question, "idempotency_key": "q"})
        assert ack["ok"], ack
        await rec.wait("completion.finished", start=start, timeout=30)
        await asyncio.sleep(0.002)
        poll.cancel()
        events = list(enumerate(rec.events))[start:]
        answer_id = [d["message_id"] for _, (e, d) in events if e == "completion.started"][-1]
        streams = [(i, d) for i, (e, d) in events if e == "completion_stream"]
        first = streams[0][0]
        answer = next(i for i, d in streams if d["message_id"] == answer_id)
        return (stamps[first] - t0) * 1000, (stamps[answer] - t0) * 1000
    finally:
        await rec.disconnect()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=40, help="questions per app (default 40)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        secret = SHOP_SECRET  # what relay_helpers.create presents for an app other than demo
        h = await launch(tmp, apps={
            "plain": AppConfig(model="demo", secret=secret),
            "one-shot": AppConfig(model="demo", secret=secret, loop="one-shot"),
            "agentic": AppConfig(model="demo", secret=secret, loop="agentic"),
        }, models={"demo": ModelConfig(chunk_delay_ms=15)}, create_rate_per_minute=100_000)
        try:
            idx = open_docs_index(None, str(tmp / "relay.sqlite3"))
            files, _ = collect([Source(ROOT / "docs", "/docs/", "html")], max_pages=1000)
            for app in ("one-shot", "agentic"):
                await run_index(idx, app, files)
            await idx.close()
            times: dict[str, list[tuple[float, float]]] = {a: [] for a in APPS}
            async with aiohttp.ClientSession() as http:
                for app in APPS:  # warm-up: the first turn of each app opens what later turns reuse
                    await first_token(http, h.url, app, QUESTIONS[0])
                for i in range(args.runs):
                    for app in APPS:
                        times[app].append(await first_token(http, h.url, app, QUESTIONS[i % len(QUESTIONS)]))
        finally:
            await h.stop()
    figures: dict[str, Any] = {"runs": args.runs}
    print(f"ms from the question to the first streamed piece / to the answer's first piece, {args.runs} runs each")
    for app in APPS:
        first, answer = sorted(t[0] for t in times[app]), sorted(t[1] for t in times[app])
        figures[app] = {"first_p50_ms": round(statistics.median(first), 1),
                        "answer_p50_ms": round(statistics.median(answer), 1),
                        "answer_p95_ms": round(answer[int(0.95 * (len(answer) - 1))], 1)}
        print(f"  {app:9} first piece p50 {statistics.median(first):7.1f}   answer p50 {statistics.median(answer):7.1f}"
              f"  p95 {answer[int(0.95 * (len(answer) - 1))]:7.1f}")
    for app in ("one-shot", "agentic"):
        added = statistics.median(a[1] - b[1] for a, b in zip(times[app], times["plain"], strict=True))
        figures[f"{app}_added_ms"] = round(added, 1)
        print(f"  the search step adds {added:.1f} ms to the answer's first piece in {app} mode (median of paired "
              "runs; goal <= 50 ms)")
    print(f"  load {os.getloadavg()[0]:.1f}")
    save("docs_first_token", figures)


if __name__ == "__main__":
    asyncio.run(main())

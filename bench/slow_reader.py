"""A replay flood from a socket that stops reading: how much memory does it cost the relay, and is it cut off?

A conversation gets ~2,000 events (demo-model turns); one WebSocket joins it, sends ``replay {last_seq: 0}``
N times (400 by default, ~16 KB sent) and never reads again. The relay's resident memory is sampled for
``--watch`` seconds; the bench prints the growth, whether and when the socket was disconnected, and how many
replays were refused ``rate_limited``. A bystander's message is answered meanwhile.

    python bench/slow_reader.py [--replays 400] [--events 2000] [--watch 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from relay_helpers import RelayProcess, info, joined
from results import save


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def main(replays: int, events: int, watch: float, chars: int) -> int:
    work = Path(tempfile.mkdtemp(prefix="slow-reader-"))
    cfg = work / "relay.toml"
    cfg.write_text("message_rate_per_minute = 1000000\n")
    relay = RelayProcess(work, extra=["--config", str(cfg), "--demo-chunk-delay-ms", "0"])
    assert relay.proc is not None
    pid = relay.proc.pid
    try:
        async with aiohttp.ClientSession() as http:
            rec, data, url = await joined(http, relay.url)
            i = 0
            while (await info(http, url))["conversation"]["seq"] < events:
                text = f"hello number {i} " + "x" * max(0, chars - 20)
                await rec.call("user_message", {"text": text, "idempotency_key": f"m{i}"})
                await rec.wait("user_input", lambda d, n=i: True, start=len(rec.events) - 1)
                while (await info(http, url))["conversation"]["status"] != "idle":
                    await asyncio.sleep(0.01)
                i += 1
            body = await info(http, url)
            seq = body["conversation"]["seq"]
            await asyncio.sleep(1.0)
            base = rss_mb(pid)
            ws = await http.ws_connect(relay.url.replace("http", "ws", 1) + "/socket.io/?EIO=4&transport=websocket")
            await ws.receive()  # Engine.IO open
            await ws.send_str("40")
            await ws.receive()  # Socket.IO connect
            await ws.send_str("421" + json.dumps(["join", {"token": body["token"], "version": 1, "last_seq": seq}]))
            t0 = time.monotonic()
            for k in range(replays):
                await ws.send_str(f"42{k + 2}" + json.dumps(["replay", {"last_seq": 0}]))
            sent_s = time.monotonic() - t0
            peak, closed_at = base, None
            bystander_ms = None
            t_by = time.monotonic()
            by_task = asyncio.ensure_future(rec.call("user_message", {"text": "still there?", "idempotency_key": "by"}))
            while time.monotonic() - t0 < watch:
                peak = max(peak, rss_mb(pid))
                if by_task.done() and bystander_ms is None:
                    bystander_ms = (time.monotonic() - t_by) * 1000
                if closed_at is None and ws.closed:
                    closed_at = time.monotonic() - t0
                await asyncio.sleep(0.1)
            # What the socket had been sent before it was cut (drain what is buffered on our side).
            refused = got = 0
            while True:
                try:
                    msg = await asyncio.wait_for(ws.receive(), 0.5)
                except TimeoutError:
                    break
                if msg.type != aiohttp.WSMsgType.TEXT:
                    if closed_at is None:
                        closed_at = time.monotonic() - t0
                    break
                got += 1
                if msg.data.startswith("43") and "rate_limited" in msg.data:
                    refused += 1
            await rec.disconnect()
            load = os.getloadavg()[0]
            print(f"slow reader: {events}-event conversation (seq {seq}, user messages of {chars} characters), "
                  f"{replays} replays sent in {sent_s:.2f} s, "
                  f"nothing read for {watch:.0f} s; load {load:.1f}")
            print(f"  relay RSS {base:.1f} MB before, peak {peak:.1f} MB (+{peak - base:.1f} MB)")
            print("  socket disconnected by the relay: "
                  f"{'after %.1f s' % closed_at if closed_at is not None else 'no'}; "
                  f"{refused} replay acks rate_limited among the {got} packets read afterwards")
            print(f"  bystander's message acked in {bystander_ms:.0f} ms" if bystander_ms is not None
                  else "  bystander: no ack")
            save("slow_reader", {"events": events, "seq": seq, "chars": chars, "replays": replays, "sent_s": sent_s,
                                 "watch_s": watch, "rss_before_mb": base, "rss_peak_mb": peak,
                                 "disconnected_after_s": closed_at, "rate_limited_acks": refused,
                                 "packets_read_after": got, "bystander_ack_ms": bystander_ms})
            return 0 if closed_at is not None and peak - base < 50 else 1
    finally:
        relay.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replays", type=int, default=400)
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--watch", type=float, default=30.0)
    ap.add_argument("--chars", type=int, default=20,
                    help="characters of each user message (larger: more bytes per replay)")
    a = ap.parse_args()
    sys.exit(asyncio.run(main(a.replays, a.events, a.watch, a.chars)))

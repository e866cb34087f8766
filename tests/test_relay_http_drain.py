"""Graceful shutdown of a real relay process on SIGTERM: not ready, no new joins, turns or creates, the running
turn finishes (or ends with turn_interrupted at the drain deadline), then a Socket.IO disconnect to every socket."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from relay_helpers import Recorder, create, info
from support import start_relay, stop_process

from widget import protocol as P

pytestmark = pytest.mark.relay

WITHIN_S = 30.0


async def _begin_turn(http: aiohttp.ClientSession, base: str) -> tuple[Recorder, list[str]]:
    url = await create(http, base)
    data = await info(http, url)
    rec = Recorder(data["relay_url"], data["relay_path"])
    reasons: list[str] = []
    rec.sio.on("disconnect", lambda *reason: reasons.append(str(reason[0]) if reason else "?"))
    await rec.connect()
    assert (await rec.join(data["token"]))["ok"]
    ack = await rec.call("user_message", {"text": "hello there, tell me something", "idempotency_key": "k1"})
    assert ack["ok"], ack
    await rec.wait("completion_stream", timeout=WITHIN_S)
    return rec, reasons


async def _refuses_new_work(http: aiohttp.ClientSession, base: str) -> None:
    async with http.get(f"{base}/readyz") as r:
        body = await r.json()
        assert r.status == 503 and body["checks"]["relay"] == "error: shutting down", body
    async with http.post(f"{base}/api/apps/demo/conversations", headers={"Origin": base}) as r:
        assert r.status == 503 and (await r.json())["error"]["code"] == P.ErrorCode.UNAVAILABLE
        assert r.headers["Retry-After"] == "1"


async def _wait_for(predicate: Any) -> None:
    for _ in range(int(WITHIN_S * 100)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in time")


async def test_sigterm_drains_the_running_turn_then_disconnects(tmp_path: Path) -> None:
    relay = start_relay(tmp_path, extra=["--demo-chunk-delay-ms", "60", "--drain-timeout", "60"])
    try:
        async with aiohttp.ClientSession() as http:
            rec, reasons = await _begin_turn(http, relay.url)
            other_url = await create(http, relay.url)
            other = await info(http, other_url)
            late = await Recorder(other["relay_url"], other["relay_path"]).connect()
            relay.proc.send_signal(signal.SIGTERM)
            await _wait_for(lambda: relay.log.read_text().count("shutting down: not ready") == 1)
            await _refuses_new_work(http, relay.url)
            ack = await late.join(other["token"])
            assert ack["error"]["code"] == P.ErrorCode.UNAVAILABLE, ack
            done = await rec.wait("completion.finished", timeout=WITHIN_S)
            assert done["status"] == "done"
            assert not any(e == "message" and d["message"].get("role") == "error" for e, d in rec.events)
            await _wait_for(lambda: reasons)
            assert reasons[0] in ("io server disconnect", "server disconnect"), reasons
        assert await asyncio.to_thread(relay.proc.wait, WITHIN_S) is not None
    finally:
        stop_process(relay.proc)


async def test_a_turn_still_running_at_the_drain_deadline_ends_with_turn_interrupted(tmp_path: Path) -> None:
    relay = start_relay(tmp_path, extra=["--demo-chunk-delay-ms", "2000", "--drain-timeout", "0.5"])
    try:
        async with aiohttp.ClientSession() as http:
            rec, reasons = await _begin_turn(http, relay.url)
            relay.proc.send_signal(signal.SIGTERM)
            err = await rec.wait("message", lambda d: d["message"].get("role") == "error", timeout=WITHIN_S)
            assert err["message"]["code"] == "turn_interrupted" and err["message"]["retryable"] is True
            done = await rec.wait("completion.finished", timeout=WITHIN_S)
            assert done["status"] == "failed"
            await _wait_for(lambda: reasons)
        assert await asyncio.to_thread(relay.proc.wait, WITHIN_S) is not None
        assert "1 turn(s) still running after 0.5 s end with turn_interrupted" in relay.log.read_text()
    finally:
        stop_process(relay.proc)


async def test_the_cpython_transport_reconnects_after_a_relay_disconnect(tmp_path: Path) -> None:
    """A Socket.IO disconnect from the relay (its shutdown) does not leave the client's transport down."""
    from relay_helpers import launch

    from widget.transports.base import CONNECTED, DISCONNECTED
    from widget.transports.python_socketio import PythonSocketIOTransport

    relay = await launch(tmp_path)
    transport = PythonSocketIOTransport()
    seen: list[str] = []
    transport.set_handler(lambda event, data: seen.append(event) if event in (CONNECTED, DISCONNECTED) else None)
    try:
        await transport.connect(relay.url, "/socket.io")
        await _wait_for(lambda: seen == [CONNECTED])
        for sid, _eio in list(relay.app.hub.sio.manager.get_participants("/", None)):
            await relay.app.hub.sio.disconnect(sid)
        await _wait_for(lambda: seen == [CONNECTED, DISCONNECTED, CONNECTED] and transport.connected)
        await transport.disconnect()
        assert not transport.connected and seen[-1] == DISCONNECTED
    finally:
        await transport.disconnect()
        await relay.stop()

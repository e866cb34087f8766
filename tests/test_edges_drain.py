"""A rolling deploy never runs a page function twice (issue 31, item 1).

A relay process stopped with SIGTERM while the page still runs a call leaves that call pending, as a relay that
dies does: the drain ends the turn with ``turn_interrupted`` but does not store the call as cancelled, so the
restarted relay lists it in the join's ``pending_calls``, accepts the page's late answer, and Retry finishes the
interrupted round from that answer instead of asking the model (which would make the page run it again)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import aiohttp
import pytest
from relay_helpers import Recorder, create, info, register
from support import start_relay, stop_process

pytestmark = pytest.mark.relay

WITHIN_S = 30.0


@pytest.mark.parametrize("drain_s", ["0", "0.5"])
async def test_a_call_pending_at_the_end_of_the_drain_stays_pending_across_the_restart(
        tmp_path: Path, drain_s: str) -> None:
    relay = start_relay(tmp_path, extra=["--drain-timeout", drain_s])
    try:
        async with aiohttp.ClientSession() as http:
            url = await create(http, relay.url)
            data = await info(http, url)
            rec = await Recorder(data["relay_url"], data["relay_path"]).connect()
            assert (await rec.join(data["token"]))["ok"]
            await rec.wait("state")
            await register(rec, "get_selection")
            assert (await rec.call("user_message", {"text": "call get_selection", "idempotency_key": "m1"}))["ok"]
            begin = await rec.wait("function_call.begin", lambda d: d.get("run") is True, timeout=WITHIN_S)
            relay.proc.send_signal(signal.SIGTERM)  # the page is still running the call
            err = await rec.wait("message", lambda d: d["message"].get("role") == "error", timeout=WITHIN_S)
            assert err["message"]["code"] == "turn_interrupted"
            assert (await rec.wait("completion.finished", timeout=WITHIN_S))["status"] == "failed"
            assert not [d for e, d in rec.events if e == "function_call.end"], "the drain ended the page's call"
            await rec.disconnect()
            assert await asyncio.to_thread(relay.proc.wait, WITHIN_S) is not None

            relay.restart()  # the next process, on the same store
            body = await info(http, url)
            assert body["conversation"]["status"] == "failed"
            tools = [m for m in body["messages"] if m["role"] == "tool"]
            assert tools == [], tools  # no "Cancelled." result stored for the call
            rec2 = await Recorder(body["relay_url"], body["relay_path"]).connect()
            ack = await rec2.join(body["token"], body["conversation"]["seq"])
            assert ack["ok"] and [c["id"] for c in ack["pending_calls"]] == [begin["id"]], ack
            late = {"id": begin["id"], "status": "success", "result": "the selection", "idempotency_key": "r1",
                    "duration_ms": 2.0, "total_ms": 3.0}
            assert await rec2.call("function_response", late) == {"ok": True}  # the late answer is kept
            mark = len(rec2.events)
            assert (await rec2.call("retry", {"idempotency_key": "t1"}))["ok"]
            fin = await rec2.wait("completion.finished", start=mark, timeout=WITHIN_S)
            assert fin["status"] == "done"
            after = rec2.events[mark:]
            assert [d for e, d in after if e == "function_call.begin"] == []  # the page is not asked again
            ends = [(d["id"], d["status"], d.get("result")) for e, d in after if e == "function_call.end"]
            assert ends == [(begin["id"], "success", "the selection")]
            await rec2.disconnect()
    finally:
        stop_process(relay.proc)


async def test_the_rolling_deploy_flow_of_the_conformance_suite(tmp_path: Path) -> None:
    """The suite's ``rolling_deploy`` flow against a relay process it restarts with SIGTERM (drain 0.5 s, below the
    3 s call timeout); without a way to restart the relay the flow is skipped, which is not a pass."""
    from widget.conformance import Options, run_suite

    cfg = tmp_path / "relay.toml"
    cfg.write_text("function_call_timeout_s = 3\n")
    relay = start_relay(tmp_path, extra=["--drain-timeout", "0.5", "--config", str(cfg)])

    async def restart() -> None:
        relay.proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(relay.proc.wait, WITHIN_S)
        await asyncio.to_thread(relay.restart)

    try:
        [skipped] = await run_suite([relay.url], "demo", only=["rolling_deploy"])
        assert skipped.outcome == "skipped" and not skipped.ok and "--restart-command" in skipped.detail
        options = Options(call_timeout_s=3, restart=restart)
        [result] = await run_suite([relay.url], "demo", options=options, only=["rolling_deploy"])
        assert result.ok, result.detail
    finally:
        stop_process(relay.proc)

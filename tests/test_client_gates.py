"""State-sync gate and context resolutions in the asyncio driver, against the in-memory relay.

The fallbacks' timing is tested without a clock in tests/test_client_session.py.
"""

import asyncio

import pytest
from fake_relay import BASE, FakeRelay, MemoryTransport

from widget import AutopilotClient

pytestmark = pytest.mark.unit


async def connected(**kw):
    relay = FakeRelay()
    transport = MemoryTransport(relay)
    client = AutopilotClient(transport)
    await client.connect(relay_url=BASE, app_id="demo", **kw)
    return relay, transport, client


async def settle(n: int = 30) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_nothing_dirty_responds_without_waiting():
    relay, transport, client = await connected()
    client.register_function("f", lambda a, c: 1)
    await client.sync_registered_functions()
    sent = []
    client.on("functionResponseSent", sent.append)
    relay.push(transport, "function_call.begin", {"id": "x", "name": "f", "arguments": {}, "run": True})
    await settle()
    assert relay.responses and sent
    rec = client.get_function_call_history()[0]
    assert rec["totalMs"] - rec["handlerMs"] < 5  # no patch round trip in between


async def test_gate_can_be_turned_off():
    relay, transport, client = await connected(sync_state_before_function_response=False)
    client.register_function("f", lambda a, c: client.update_context({"dirty": 1}) or "ok")
    await client.sync_registered_functions()
    relay.hold_patch_acks = asyncio.Event()
    relay.push(transport, "function_call.begin", {"id": "x", "name": "f", "arguments": {}, "run": True})
    await settle()
    assert [r["id"] for r in relay.responses] == ["x"]
    relay.hold_patch_acks.set()


async def test_resolutions_are_honoured_with_the_gate_off_and_flush_their_context():
    relay, transport, client = await connected(sync_state_before_function_response=False)
    release = []
    client.register_function("nav", lambda a, c: release.append(client.begin_context_resolution()) or "ok")
    await client.sync_registered_functions()
    relay.push(transport, "function_call.begin", {"id": "n", "name": "nav", "arguments": {}, "run": True})
    await settle()
    assert relay.responses == []
    client.update_context({"users": ["ada"]})
    release[0]()
    await settle()
    assert relay.responses and relay.doc["autopilot"]["context"]["users"] == ["ada"]


async def test_hold_context_until_passes_value_and_error_through():
    relay, transport, client = await connected()

    async def ok():
        return 42

    async def bad():
        raise ValueError("nope")

    assert await client.hold_context_until(ok(), "x") == 42
    try:
        await client.hold_context_until(bad(), "y")
    except ValueError as exc:
        assert str(exc) == "nope"
    else:
        raise AssertionError("error not passed through")
    assert client.pending_context_resolutions == 0


async def test_history_limit_and_unresponded_calls_after_disconnect():
    relay, transport, client = await connected(function_call_history_limit=3)
    client.register_function("f", lambda a, c: 1)
    for i in range(5):
        relay.push(transport, "function_call.begin", {"id": f"h{i}", "name": "f", "arguments": {}, "run": True})
    await settle(60)
    hist = client.get_function_call_history()
    assert [h["id"] for h in hist] == ["h4", "h3", "h2"]  # newest first, limited
    gate = asyncio.get_running_loop().create_future()
    client.register_function("slow", lambda a, c: gate)
    relay.push(transport, "function_call.begin", {"id": "s", "name": "slow", "arguments": {}, "run": True})
    await settle()
    await client.disconnect()
    rec = client.get_function_call_history()[0]
    assert rec["id"] == "s" and rec["respondedAt"] is None and rec["totalMs"] is None
    assert len(client.get_function_call_history()) == 3  # kept across the disconnect

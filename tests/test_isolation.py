"""Auth and isolation against a real relay over real Socket.IO."""

from __future__ import annotations

import asyncio
import base64
import os
import secrets

import aiohttp
import pytest
import socketio
from relay_helpers import Recorder, launch

from widget import protocol as P

pytestmark = pytest.mark.relay


@pytest.fixture
async def relay(tmp_path):
    handle = await launch(tmp_path)
    yield handle
    await handle.stop()


async def new_conversation(http: aiohttp.ClientSession, base: str) -> dict:
    origin = base  # the demo app allows the relay's own origin
    async with http.post(f"{base}/api/apps/demo/conversations", json={}, headers={"Origin": origin}) as r:
        assert r.status == 201, await r.text()
        url = (await r.json())["url"]
    async with http.get(url, headers={"Origin": origin}) as r:
        return await r.json()


async def test_socketio_refuses_a_disallowed_origin(relay):
    sio = socketio.AsyncClient(reconnection=False)
    with pytest.raises(socketio.exceptions.ConnectionError):
        await sio.connect(relay.url, headers={"Origin": "https://evil.example"}, transports=["websocket"])
    ok = socketio.AsyncClient(reconnection=False)
    await ok.connect(relay.url, headers={"Origin": relay.url}, transports=["websocket"])
    await ok.disconnect()


async def test_http_refuses_a_disallowed_origin_and_answers_cors_only_for_allowed(relay):
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{relay.url}/api/apps/demo/conversations", json={},
                             headers={"Origin": "https://evil.example"}) as r:
            assert r.status == 403
        async with http.options(f"{relay.url}/api/apps/demo/conversations", headers={
                "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}) as r:
            assert r.headers.get("Access-Control-Allow-Origin") != "https://evil.example"


async def test_forged_tokens_are_all_refused(relay):
    async with aiohttp.ClientSession() as http:
        data = await new_conversation(http, relay.url)
    real = data["token"]
    rec = await Recorder(relay.url).connect()
    forged = [secrets.token_urlsafe(n) for n in (8, 32, 64)]
    forged += [real[:-1] + ("A" if real[-1] != "A" else "B"), real + "=", "", " " * 5, real.upper(), real[::-1]]
    forged += [base64.urlsafe_b64encode(os.urandom(48)).decode() for _ in range(40)]
    forged += [".".join(real.split(".")[:-1] + [secrets.token_urlsafe(32)]) for _ in range(20)]
    refused = 0
    for token in forged:
        ack = await rec.join(token)
        codes = (P.ErrorCode.INVALID_TOKEN, P.ErrorCode.TOKEN_EXPIRED, P.ErrorCode.BAD_REQUEST)
        refused += (not ack.get("ok")) and ack["error"]["code"] in codes
    assert refused == len(forged)
    assert rec.events == []
    await rec.disconnect()


async def test_a_socket_of_one_conversation_cannot_reach_another(relay):
    async with aiohttp.ClientSession() as http:
        a = await new_conversation(http, relay.url)
        b = await new_conversation(http, relay.url)
    alice = await Recorder(relay.url).connect()
    bob = await Recorder(relay.url).connect()
    assert (await alice.join(a["token"]))["ok"] and (await bob.join(b["token"]))["ok"]
    await bob.call("state_patch", {"patch": [{"op": "add", "path": "/autopilot/context/secret", "value": "bob's"}],
                                   "idempotency_key": "b1"})
    # Alice writes: everything lands in her conversation only.
    ack = await alice.call("state_patch", {"patch": [{"op": "add", "path": "/autopilot/context/x", "value": 1}],
                                           "idempotency_key": "b1"})  # same key as Bob's: keys are per conversation
    assert ack["ok"]
    assert (await alice.call("user_message", {"text": "hello", "idempotency_key": "m1"}))["ok"]
    await alice.wait("user_input")
    await asyncio.sleep(0.1)
    assert not any(name == "message" for name, _ in bob.events)
    assert "bob's" not in repr(alice.events)
    # A made-up call id gets nothing done anywhere.
    ack = await alice.call("function_response", {"id": "call_of_bob", "status": "success", "result": 1,
                                                 "idempotency_key": "r1"})
    assert ack["error"]["code"] == P.ErrorCode.CALL_NOT_PENDING
    # Replay returns only Alice's events.
    before = len(alice.events)
    await alice.call("replay", {"last_seq": 0})
    replayed = alice.events[before:]
    assert replayed and "bob's" not in repr(replayed)
    state_b = await relay.hub.store.get_state(b["conversation"]["id"])
    assert state_b["autopilot"]["context"] == {"secret": "bob's"}
    await alice.disconnect()
    await bob.disconnect()

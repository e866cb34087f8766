"""A socket that never joins is closed, transport and all (issue 31, item 2).

At ``unjoined_socket_timeout_s`` the relay closes the Engine.IO connection of a socket that has not joined a
conversation, not only its Socket.IO namespace: a client that answers pings and connects the namespace again after
the namespace's disconnect would otherwise keep its connection (and a descriptor) forever. Namespace reconnects on
one Engine.IO connection count against the same budget, from the connection's start."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from relay_helpers import joined, launch

pytestmark = pytest.mark.relay

TIMEOUT_S = 0.6


@pytest_asyncio.fixture(scope="module")
async def relay(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    """A relay in this loop whose sockets must join within ``TIMEOUT_S``."""
    handle = await launch(tmp_path_factory.mktemp("edges-sockets"), unjoined_socket_timeout_s=TIMEOUT_S)
    yield handle
    await handle.stop()



async def stubborn(http: aiohttp.ClientSession, base: str, seen: list[str], stop_after_s: float) -> float | None:
    """A raw Engine.IO/Socket.IO client that never joins: it answers every ping and connects the namespace again
    whenever the relay disconnects it. Returns when the relay closed the connection (seconds after it opened),
    or None when it was still open after ``stop_after_s``."""
    ws_url = base.replace("http", "ws", 1) + "/socket.io/?EIO=4&transport=websocket"
    t0 = time.monotonic()
    async with http.ws_connect(ws_url) as ws:
        while True:
            left = stop_after_s - (time.monotonic() - t0)
            if left <= 0:
                return None
            try:
                msg = await ws.receive(timeout=left)
            except TimeoutError:
                return None
            if msg.type != aiohttp.WSMsgType.TEXT:
                return time.monotonic() - t0  # closed (or an error): the connection is gone
            text = msg.data
            seen.append(text[:2])
            if text.startswith("0"):  # Engine.IO open: connect the namespace
                await ws.send_str("40")
            elif text == "2":  # ping
                await ws.send_str("3")
            elif text.startswith("41"):  # the namespace was disconnected: connect it again
                await ws.send_str("40")


async def test_a_socket_that_ignores_the_namespace_disconnect_loses_its_connection(
        relay: Any, http: aiohttp.ClientSession) -> None:
    seen: list[str] = []
    closed_at = await stubborn(http, relay.url, seen, stop_after_s=TIMEOUT_S * 8)
    assert closed_at is not None, f"still connected after {TIMEOUT_S * 8:g} s; packets {seen}"
    # One budget for the connection: namespace reconnects do not start it again.
    assert TIMEOUT_S * 0.9 <= closed_at <= TIMEOUT_S * 3, closed_at
    assert seen.count("40") <= 2, seen


async def test_a_joined_socket_keeps_its_connection(relay: Any, http: aiohttp.ClientSession) -> None:
    member, _, _ = await joined(http, relay.url)
    try:
        await asyncio.sleep(TIMEOUT_S * 2.5)
        assert member.sio.connected
        ack = await member.call("replay", {"last_seq": 0})
        assert ack["ok"], ack
    finally:
        await member.disconnect()


async def test_many_stubborn_sockets_all_close(relay: Any, http: aiohttp.ClientSession) -> None:
    """20 at once: every one is closed within the bound, and the relay forgets them (no per-socket entry left)."""
    hub = relay.hub
    before = len(hub.sio.eio.sockets)
    results = await asyncio.gather(*(stubborn(http, relay.url, [], TIMEOUT_S * 8) for _ in range(20)))
    assert all(r is not None for r in results), results
    for _ in range(100):
        if len(hub.sio.eio.sockets) <= before:
            break
        await asyncio.sleep(0.05)
    assert len(hub.sio.eio.sockets) <= before
    assert not hub.membership._unjoined

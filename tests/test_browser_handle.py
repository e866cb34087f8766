"""The boot's handle (``widget.browser._Handle``) under CPython: every task the boot and the JS API start is kept
and none outlives ``destroy`` - an operation still waiting for the relay settles its JS promise as cancelled, a
background task (warm-up, schema check, retry) is cancelled, and the disconnect it starts can be awaited. The page
side of destroy (DOM, listeners, proxies) is tests/test_bar_destroy.py and tests/test_ecosystem.py."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from fake_relay import FakeRelay, MemoryTransport

from widget import AutopilotClient
from widget.browser import Tasks, _Handle
from widget.store import Store

pytestmark = pytest.mark.unit


class Bar:
    """What the handle uses of the bar."""

    def __init__(self) -> None:
        self.destroyed = False

    def destroy(self) -> None:
        self.destroyed = True


async def handle_of(client: AutopilotClient) -> tuple[_Handle, Bar]:
    bar = Bar()
    return _Handle(client, Store(client), bar, None, Tasks()), bar


async def test_destroy_cancels_what_is_in_flight_and_disconnects() -> None:
    client = AutopilotClient(MemoryTransport(FakeRelay()))  # never connected: ``send`` waits for it (up to 30 s)
    handle, bar = await handle_of(client)
    settled: list[dict[str, Any]] = []
    handle.api("send", json.dumps("hello"), lambda text: settled.append(json.loads(text)))
    warm = handle.tasks.start(asyncio.sleep(3600))  # a background task of the boot, e.g. the first-answer warm-up
    await asyncio.sleep(0.01)
    assert settled == [] and not warm.done()

    handle.teardown()
    assert handle.disconnected is not None
    await asyncio.wait_for(handle.disconnected, 1)
    await asyncio.sleep(0)
    assert settled == [{"ok": False, "error": "send: cancelled"}]
    assert warm.cancelled() and bar.destroyed
    assert client.connection_state == "disconnected"
    # Later calls are refused, and nothing is left running.
    handle.api("open", "null", lambda text: settled.append(json.loads(text)))
    assert settled[-1] == {"ok": False, "error": "open: the widget was destroyed"}
    assert not handle.tasks._running


async def test_a_background_task_that_fails_is_logged_and_dropped(caplog: pytest.LogCaptureFixture) -> None:
    tasks = Tasks()

    async def boom() -> None:
        raise RuntimeError("schema check broke")

    task = tasks.start(boom())
    with caplog.at_level(logging.ERROR, logger="widget"):
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0)
    assert "schema check broke" in caplog.text
    assert not tasks._running

"""Graceful shutdown: ``drain(hub, timeout_s)`` and the uvicorn server that runs it on SIGTERM.

On the first SIGTERM (or SIGINT) the relay keeps listening while it drains: ``/readyz`` answers 503 (a balancer
takes the process out of rotation), joins, messages, retries, creates and ask-user answers are refused
``unavailable`` (clients go to another process), running turns go on for up to ``drain_timeout_s`` and those still
running then end with ``turn_interrupted`` (Retry resumes them elsewhere); then every socket gets a Socket.IO
disconnect packet and the server stops as uvicorn does. A second signal stops at once.

A turn ended at the drain deadline is closed as a crashed relay's turn is (``Lifecycle.recover``), never as a
cancelled one: a call the page is still running stays pending, so the page's late answer is accepted (by this
process while it drains, or by the next one) and Retry finishes the round from it. Cancelling the call instead
would make Retry ask the model again, and the page run the function a second time.
"""

from __future__ import annotations

import asyncio
import logging
from types import FrameType
from typing import Any

import uvicorn

log = logging.getLogger("widget.relay")

#: How long turns cancelled at the drain deadline may take to store their end.
CANCEL_GRACE_S = 5.0


def running_turns(hub: Any) -> dict[str, asyncio.Task[Any]]:
    """This process's turns still running, by conversation id."""
    return {cid: rt.turn for cid, rt in list(hub.convs.items()) if rt.turn is not None and not rt.turn.done()}


async def drain(hub: Any, timeout_s: float) -> dict[str, int]:
    """Stop taking new work, let running turns finish for up to ``timeout_s`` (then end them with
    ``turn_interrupted``), and send every socket a disconnect. Returns what it did (counts)."""
    hub.draining = True
    turns = running_turns(hub)
    log.info("shutting down: not ready, refusing new work; %d turn(s) running, waiting up to %g s",
             len(turns), timeout_s)
    finished = len(turns)
    if turns and timeout_s > 0:
        await asyncio.wait(turns.values(), timeout=timeout_s)
    late = running_turns(hub)
    finished -= len(late)
    if late:
        log.warning("shutting down: %d turn(s) still running after %g s end with turn_interrupted", len(late),
                    timeout_s)
        # Stopped as at a crash (the turn task leaves the store as it is; see the module doc), then closed here.
        hub.closing = True
        for task in late.values():
            task.cancel()
        await asyncio.wait(late.values(), timeout=CANCEL_GRACE_S)
        for cid in late:
            try:
                conv = await asyncio.wait_for(hub.store.get_conversation(cid), CANCEL_GRACE_S)
                if conv is not None:
                    await asyncio.wait_for(hub.recover(conv), CANCEL_GRACE_S)
            except Exception as exc:  # noqa: BLE001 - the next process to open it recovers it instead
                log.warning("could not close the interrupted turn of %s: %s", cid, exc)
    sids = [sid for sid, _eio in hub.sio.manager.get_participants("/", None)]
    for sid in sids:
        try:
            await hub.sio.disconnect(sid, ignore_queue=True)
        except Exception as exc:  # noqa: BLE001 - one socket's failure does not keep the others
            log.warning("could not disconnect socket %s: %s", sid, exc)
    if sids:
        await asyncio.sleep(0.1)  # the disconnect packets leave before uvicorn closes the connections
    return {"finished": finished, "interrupted": len(late), "disconnected": len(sids)}


class RelayServer(uvicorn.Server):
    """uvicorn's server, draining the relay (see the module doc) on the first SIGTERM/SIGINT."""

    def __init__(self, config: uvicorn.Config, hub: Any, drain_timeout_s: float) -> None:
        super().__init__(config)
        self.hub = hub
        self.drain_timeout_s = drain_timeout_s
        self.drain_requested = False
        self._drain: asyncio.Task[dict[str, int]] | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.drain_requested or not self.started:
            super().handle_exit(sig, frame)  # a second signal (or one during startup): stop now
            return
        self._captured_signals.append(sig)
        self.drain_requested = True

    def request_drain(self) -> None:
        """Drain and stop, as on SIGTERM (from code: tests, an embedding program)."""
        self.drain_requested = True

    async def on_tick(self, counter: int) -> bool:
        if self.drain_requested and self._drain is None and not self.should_exit:
            self._drain = asyncio.ensure_future(drain(self.hub, self.drain_timeout_s))
        if self._drain is not None and self._drain.done():
            self.should_exit = True
        return await super().on_tick(counter)


"""Performing what the sans-I/O session decides: its sends (and their acknowledgements), its one timer, the tasks
it starts, and its notifications to the page's listeners.

Every part of the client changes the session the same way: call a ``ClientSession`` method, hand the effects it
returns to ``Driver.apply``. Three effects need a part's code (running a call, ending one, rejoining); the facade
names those parts once they exist (``perform_with``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from .. import protocol as P
from ..core.effects import CallToRun
from ..core.events import Emitter
from ..core.session import ClientSession, Effect, EndCall, FlushResult, Notify, Rejoin, RunCall, Send
from ..protocol import ClientEvent
from ..transports.base import Transport, TransportError

log = logging.getLogger("widget")

Clock = Callable[[], float]


@dataclass(frozen=True)
class Performers:
    """The parts' code that three of the session's effects and one notification need."""

    #: ``RunCall``: run a page function call (``Calls.run``).
    run_call: Callable[[CallToRun], Coroutine[Any, Any, None]]
    #: ``EndCall``: the relay ended a call (``Confirmation.call_ended``: a pending confirmation is void).
    end_call: Callable[[str], None]
    #: ``Rejoin``: join again after the socket came back (``Connection.rejoin``).
    rejoin: Callable[[], Coroutine[Any, Any, None]]
    #: ``functionResponseSent``: the relay took a call's response (``Calls.delivered``: a navigation may go).
    response_sent: Callable[[str], None]
    #: ``actionsOffered``: the live offers of a message with the page's labels (``Tools.offered_actions``).
    offered_actions: Callable[[str], list[dict[str, Any]]]


class Driver:
    """Performs a ``ClientSession``'s effects with asyncio and a transport."""

    def __init__(self, core: ClientSession, transport: Transport, events: Emitter, clock: Clock) -> None:
        self.core = core
        self.transport = transport
        self.events = events
        #: The monotonic clock of every deadline (a test may swap it: it is read on every use).
        self.clock = clock
        #: The relay's acknowledgement of each state patch in flight, by the session's tag.
        self.patch_acks: dict[str, asyncio.Future[bool]] = {}
        self._performers: Performers | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def perform_with(self, performers: Performers) -> None:
        """Name the parts' code for the effects that need it (once, when the client is put together)."""
        self._performers = performers

    def now(self) -> float:
        """The clock's time now."""
        return self.clock()

    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the client runs on (Pyodide's in the browser)."""
        return asyncio.get_event_loop()

    def new_future(self) -> asyncio.Future[Any]:
        """A future on the client's loop."""
        return self.loop().create_future()

    # ------------------------------------------------------------------ effects
    def apply(self, effects: list[Effect]) -> None:
        """Perform ``effects`` in order, then move the timer to the session's next deadline."""
        performers = self._performers
        if performers is None:
            raise RuntimeError("Driver.perform_with was not called")
        for effect in effects:
            if isinstance(effect, Notify):
                payload = effect.payload
                if effect.event == ClientEvent.ACTIONS_OFFERED:
                    payload = {**payload, "actions": performers.offered_actions(payload["message_id"])}
                elif effect.event == ClientEvent.FUNCTION_RESPONSE_SENT:
                    performers.response_sent(payload["request"]["id"])
                self.events.emit(str(effect.event), payload)
            elif isinstance(effect, Send):
                if effect.tag.startswith("patch:"):
                    self.patch_acks[effect.tag] = self.loop().create_future()
                self.spawn(self._send(effect))
            elif isinstance(effect, RunCall):
                self.spawn(performers.run_call(effect.call))
            elif isinstance(effect, EndCall):
                performers.end_call(effect.call_id)
            elif isinstance(effect, Rejoin):
                self.spawn(performers.rejoin())
        self.reschedule()

    async def _send(self, effect: Send) -> None:
        try:
            ack = await self.transport.emit(effect.event, effect.payload)
        except TransportError as exc:
            log.warning("%s not acknowledged (%s): %s", effect.event, effect.tag, exc)
            self._settle_patch(effect.tag, False)
            self.apply(self.core.send_failed(effect.tag, self.now()))
            return
        self._settle_patch(effect.tag, P.refusal_of(ack) is None)
        self.apply(self.core.acked(effect.tag, ack, self.now()))

    def _settle_patch(self, tag: str, ok: bool) -> None:
        fut = self.patch_acks.pop(tag, None)
        if fut is not None and not fut.done():
            fut.set_result(ok)

    def patch_waits(self) -> list[asyncio.Future[bool]]:
        """The acknowledgements of the state patches in flight (each resolves True when the relay took it)."""
        return [self.patch_acks[t] for t in self.core.patches_in_flight() if t in self.patch_acks]

    def flush_now(self, result: FlushResult | None = None) -> asyncio.Future[bool]:
        """Perform a forced flush (the session's, or ``result``) and resolve once every patch in flight is
        acknowledged: True when all of the state went and was taken."""
        result = result if result is not None else self.core.flush(self.now())
        self.apply(result.effects)
        waits = self.patch_waits()
        complete = result.complete

        async def wait_all() -> bool:
            results = await asyncio.gather(*waits)
            return complete and all(results)

        if not waits:
            done: asyncio.Future[bool] = self.loop().create_future()
            done.set_result(complete)
            return done
        return asyncio.ensure_future(wait_all())

    # ------------------------------------------------------------------ the timer
    def reschedule(self) -> None:
        """One timer, at the session's next deadline (kept when that did not move: streaming events are many)."""
        deadline = None if self.core.closing else self.core.next_deadline()
        if self._timer is not None:
            if deadline == self._timer_at:
                return
            self._timer.cancel()
            self._timer = None
        self._timer_at = deadline
        if deadline is not None:
            self._timer = self.loop().call_later(max(0.0, deadline - self.now()), self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._timer_at = None
        self.apply(self.core.tick(self.now()))

    # ------------------------------------------------------------------ tasks
    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` as a task the client keeps (and cancels on ``stop``); a failure is logged."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("widget task failed: %r", task.exception())

    def stop(self) -> None:
        """The connection is closed: no patch in flight will be acknowledged, no running task is wanted."""
        for tag in list(self.patch_acks):
            self._settle_patch(tag, False)
        for task in list(self._tasks):
            task.cancel()

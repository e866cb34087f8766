"""The autopilot client: the asyncio driver of the sans-I/O session, and the public object pages use.

Every protocol decision is made by ``widget.core.session.ClientSession``; this module performs its effects
(emits, timers, running page functions, notifying listeners) and does the HTTP steps of connecting. Pyodide's
event loop runs it unchanged; the network is behind a ``Transport`` (see ``widget.transports``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, MutableMapping
from typing import Any, Callable

from . import protocol as P
from .client_calls import CallsMixin, ConfirmationHandler, Navigate
from .client_connection import ConnectionMixin, storage_key
from .client_feedback import FeedbackMixin
from .client_history import HistoryMixin
from .client_input import InputMixin
from .client_starters import StartersMixin
from .client_tools import ToolsMixin
from .core.events import Emitter
from .core.offers import Offer
from .core.pyfunctions import bind_function
from .core.registry import FunctionDefinition, FunctionRegistry, Handler
from .core.sequence import SeqTracker
from .core.session import (
    CONNECTED,
    CONNECTING,
    DISCONNECTED,
    ERROR,
    IDLE,
    RECONNECTING,
    ClientSession,
    Effect,
    EndCall,
    FlushResult,
    Notify,
    Rejoin,
    RunCall,
    Send,
)
from .core.state import StateSync, to_json_value
from .core.streaming import StreamingSession
from .core.tools import ToolSpec
from .env import PageEnv
from .errors import ConfigError
from .protocol import SUBSCRIBABLE_EVENTS, ClientEvent
from .transports import base as transport_events
from .transports.base import Transport, TransportError

log = logging.getLogger("widget")

__all__ = ["AutopilotClient", "Navigate", "ConfirmationHandler", "storage_key"]

#: Connection states reported by ``connectionStateChanged``, under the names this module always had.
CONNECTED_STATE, DISCONNECTED_STATE = CONNECTED, DISCONNECTED
__all__ += ["IDLE", "CONNECTING", "CONNECTED_STATE", "RECONNECTING", "DISCONNECTED_STATE", "ERROR"]


class AutopilotClient(ConnectionMixin, InputMixin, CallsMixin, ToolsMixin, FeedbackMixin, HistoryMixin, StartersMixin):
    """Connects to a relay, mirrors functions and context, runs the functions the model calls."""

    def __init__(
        self,
        transport: Transport,
        *,
        storage: MutableMapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        step_timeout_s: float = 15.0,
        headers: dict[str, str] | None = None,
        env: PageEnv | None = None,
    ) -> None:
        self.transport = transport
        #: Where declarative tool runs take effect (the page); None under CPython unless given.
        self.env = env
        #: Sent with every HTTP request (e.g. ``Authorization: Bearer <app secret>`` from a backend).
        self.headers = dict(headers or {})
        self.storage: MutableMapping[str, str] = storage if storage is not None else {}
        self._clock = clock
        self._wall = wall_clock
        self._step_timeout = step_timeout_s
        self.events = Emitter()
        self.events.on_listener_error = lambda ev, exc: log.error("listener for %r raised: %r", ev, exc)
        self.registry = FunctionRegistry()
        #: The protocol logic (sans-I/O); this object performs what it decides.
        self.core = ClientSession(instance=secrets.token_hex(6))
        self.conversation: dict[str, Any] | None = None
        self.conversation_url: str | None = None
        self._relay_url: str | None = None
        self._app_id: str | None = None
        self._confirmation_handler: ConfirmationHandler | None = None
        self._ended_calls: dict[str, asyncio.Future[None]] = {}
        self._delivered: dict[str, asyncio.Future[None]] = {}
        #: The relay's acknowledgement of each state patch in flight, by the session's tag.
        self._patch_acks: dict[str, asyncio.Future[bool]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._state_waiter: asyncio.Future[Any] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._connect_options: dict[str, Any] = {}
        self._tools: dict[str, ToolSpec] = {}
        #: Publishes the registry to in-browser agents (``widget.webmcp.enable``); None: not published.
        self.webmcp: Any = None
        self._tool_handlers: dict[str, Callable[..., Any]] = {}
        transport.set_handler(self._on_transport_event)

    # ------------------------------------------------------------------ what the session holds, read-only
    @property
    def state(self) -> StateSync:
        """The state mirror (functions and context) the session keeps."""
        return self.core.state

    @property
    def seq(self) -> SeqTracker:
        """The conversation's sequence tracker."""
        return self.core.seq

    @property
    def session(self) -> StreamingSession:
        """The streaming-message machine (read ``messages``, ``is_streaming``, ``streaming_message`` instead)."""
        return self.core.stream

    @property
    def messages_revision(self) -> int:
        """Moves whenever ``messages`` changes (a view compares it instead of the list)."""
        return self.core.stream.revision

    @property
    def connection_state(self) -> str:
        """idle, connecting, connected, reconnecting, disconnected or error."""
        return self.core.connection_state

    @property
    def last_error(self) -> dict[str, Any] | None:
        """The last connection error (``{code, message}``), None once connected."""
        return self.core.last_error

    @property
    def active(self) -> bool:
        """Whether this client is the conversation's active one (runs calls, writes the state)."""
        return self.core.active

    @property
    def pending_ask_user(self) -> list[dict[str, Any]]:
        """Prompts the model is waiting on (the session's list)."""
        return self.core.pending_ask_user

    @property
    def messages(self) -> list[dict[str, Any]]:
        """Committed messages of the conversation."""
        return self.core.stream.messages

    @property
    def is_streaming(self) -> bool:
        """Whether a completion is in progress."""
        return self.core.stream.is_streaming

    @property
    def streaming_message(self) -> dict[str, Any] | None:
        """The assistant message being streamed, or None."""
        return self.core.stream.streaming_message

    @property
    def pending_responses(self) -> list[str]:
        """Ids of calls whose response the relay has not taken yet (withheld, in flight, or waiting to resend)."""
        return self.core.outbox

    @property
    def _offers(self) -> dict[str, list[Offer]]:
        """Old name of the live offers by message id (``get_offered_actions`` is the public reader)."""
        return self.core.offers.all()

    @property
    def _outbox(self) -> list[str]:
        """Old name of ``pending_responses`` (kept until every caller reads the public one)."""
        return self.core.outbox

    # ------------------------------------------------------------------ events
    def on(self, event: str, listener: Callable[[Any], Any]) -> Callable[[], None]:
        """Subscribe to a client event; returns an unsubscribe function. ConfigError for a name the client
        never emits (a typo would otherwise wait forever)."""
        if event not in SUBSCRIBABLE_EVENTS:
            known = ", ".join(sorted(SUBSCRIBABLE_EVENTS))
            raise ConfigError(f"Unknown client event {event!r}; the events are: {known}.")
        if not callable(listener):
            raise ConfigError(f"The listener for {event!r} must be callable.")
        return self.events.on(event, listener)

    # ------------------------------------------------------------------ performing the session's effects
    def _apply(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Notify):
                payload = effect.payload
                if effect.event == ClientEvent.ACTIONS_OFFERED:
                    payload = {**payload, "actions": self.get_offered_actions(payload["message_id"])}
                elif effect.event == ClientEvent.FUNCTION_RESPONSE_SENT:
                    delivered = self._delivered.get(payload["request"]["id"])
                    if delivered is not None and not delivered.done():
                        delivered.set_result(None)
                self.events.emit(str(effect.event), payload)
            elif isinstance(effect, Send):
                if effect.tag.startswith("patch:"):
                    self._patch_acks[effect.tag] = self._loop().create_future()
                self._spawn(self._send(effect))
            elif isinstance(effect, RunCall):
                self._spawn(self._run_call(effect.call))
            elif isinstance(effect, EndCall):
                self._mark_call_ended(effect.call_id)
            elif isinstance(effect, Rejoin):
                self._spawn(self._rejoin())
        self._reschedule()

    async def _send(self, effect: Send) -> None:
        try:
            ack = await self.transport.emit(effect.event, effect.payload)
        except TransportError as exc:
            log.warning("%s not acknowledged (%s): %s", effect.event, effect.tag, exc)
            self._settle_patch(effect.tag, False)
            self._apply(self.core.send_failed(effect.tag, self._clock()))
            return
        self._settle_patch(effect.tag, P.refusal_of(ack) is None)
        self._apply(self.core.acked(effect.tag, ack, self._clock()))

    def _settle_patch(self, tag: str, ok: bool) -> None:
        fut = self._patch_acks.pop(tag, None)
        if fut is not None and not fut.done():
            fut.set_result(ok)

    def _reschedule(self) -> None:
        """One timer, at the session's next deadline (kept when that did not move: streaming events are many)."""
        deadline = None if self.core.closing else self.core.next_deadline()
        if self._timer is not None:
            if deadline == self._timer_at:
                return
            self._timer.cancel()
            self._timer = None
        self._timer_at = deadline
        if deadline is not None:
            self._timer = self._loop().call_later(max(0.0, deadline - self._clock()), self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._timer_at = None
        self._apply(self.core.tick(self._clock()))

    def _loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_event_loop()

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("widget task failed: %r", task.exception())

    # ------------------------------------------------------------------ functions
    def register_function(
        self,
        name: str,
        handler: Handler,
        *,
        description: str = "",
        parameters: dict[str, Any] | None = None,
        sensitive: bool = False,
        webmcp: bool = True,
    ) -> None:
        """Register ``handler(args, context)`` under ``name`` (``registerFunction`` of the page API); ``webmcp=False``
        keeps it from in-browser agents on a page that publishes its functions with WebMCP."""
        self._tools.pop(name, None)  # a function registered under a tool's name replaces the tool
        definition = FunctionDefinition(
            name=name,
            handler=handler,
            description=description or "",
            parameters=parameters if parameters is not None else {"type": "object", "properties": {}},
            sensitive=sensitive,
            webmcp=webmcp,
        )
        try:
            to_json_value(definition.parameters, f"Parameters of {name!r}")
        except TypeError as exc:
            raise ConfigError(str(exc)) from None
        self.registry.register(definition)
        self._functions_changed()

    def function(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        sensitive: bool = False,
        webmcp: bool = True,
    ) -> Any:
        """Decorator: register a plain Python function; parameters come from its type hints, the description
        from its docstring, and the model's arguments arrive as keyword arguments of the declared types."""

        def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
            bound = bind_function(func, name, description)
            self.register_function(bound.name, bound.handler, description=bound.description,
                                   parameters=bound.parameters, sensitive=sensitive, webmcp=webmcp)
            return func

        return decorate(fn) if fn is not None else decorate

    def unregister_function(self, name: str) -> bool:
        """Remove a function; True when it existed."""
        existed = self.registry.unregister(name)
        if existed:
            self._functions_changed()
        return existed

    def clear_functions(self) -> None:
        """Remove every registered function."""
        self.registry.clear()
        self._functions_changed()

    def has_function(self, name: str) -> bool:
        """Whether ``name`` is registered."""
        return self.registry.has(name)

    def get_registered_functions(self) -> list[dict[str, Any]]:
        """Descriptors as the relay sees them (no handlers)."""
        return list(self.registry.descriptors().values())

    def sync_registered_functions(self) -> asyncio.Future[bool]:
        """Send pending function changes now; resolves True once the relay acknowledged all of the state, False
        when it could not be sent (a part over the stored-state limits, a refusal, not connected)."""
        return self._flush_now()

    def _functions_changed(self) -> None:
        self.core.state.set_functions(self.registry.descriptors(), self._clock())
        self._reschedule()
        if self.webmcp is not None:
            self.webmcp.sync()

    # ------------------------------------------------------------------ context
    def set_context(self, context: dict[str, Any]) -> None:
        """Replace the page context mirrored to ``/autopilot/context``."""
        self.core.state.set_context(context, self._clock())
        self._reschedule()

    def update_context(self, partial: dict[str, Any]) -> None:
        """Merge ``partial`` into the page context (shallow)."""
        self.core.state.update_context(partial, self._clock())
        self._reschedule()

    def get_context(self) -> dict[str, Any]:
        """A copy of the local page context."""
        return self.core.state.context

    def flush_context_sync(self) -> asyncio.Future[bool]:
        """Send pending state now (e.g. before navigating away); resolves True once acknowledged, False when a
        part could not be sent."""
        return self._flush_now()

    def _flush_now(self, result: FlushResult | None = None) -> asyncio.Future[bool]:
        """Perform a forced flush (the session's, or ``result``) and resolve once every patch in flight is
        acknowledged: True when all of the state went and was taken."""
        result = result if result is not None else self.core.flush(self._clock())
        self._apply(result.effects)
        waits = [self._patch_acks[t] for t in self.core.patches_in_flight() if t in self._patch_acks]
        complete = result.complete

        async def wait_all() -> bool:
            results = await asyncio.gather(*waits)
            return complete and all(results)

        if not waits:
            done: asyncio.Future[bool] = self._loop().create_future()
            done.set_result(complete)
            return done
        return asyncio.ensure_future(wait_all())

    # ------------------------------------------------------------------ context resolutions
    def begin_context_resolution(self, label: str = "") -> Callable[[], None]:
        """Hold function responses until the returned (idempotent) release is called."""
        rid, effects = self.core.begin_resolution(label)
        self._apply(effects)

        def release() -> None:
            self._apply(self.core.end_resolution(rid, self._clock()))

        return release

    def hold_context_until(self, awaitable: Awaitable[Any], label: str = "") -> asyncio.Future[Any]:
        """Acquire a resolution released when ``awaitable`` settles; passes its value or error through."""
        release = self.begin_context_resolution(label)

        async def run() -> Any:
            try:
                return await awaitable
            finally:
                release()

        return asyncio.ensure_future(run())

    @property
    def pending_context_resolutions(self) -> int:
        """How many resolutions are outstanding."""
        return self.core.pending_resolutions

    # ------------------------------------------------------------------ function calls
    def get_function_call_history(self) -> list[dict[str, Any]]:
        """The last calls, newest first, as FunctionCallRecords."""
        return [dict(r) for r in self.core.history]

    # ------------------------------------------------------------------ incoming
    def _on_transport_event(self, event: str, data: Any) -> None:
        now = self._clock()
        if event == transport_events.CONNECTED:
            self._apply(self.core.transport_connected(now))
        elif event == transport_events.DISCONNECTED:
            self._apply(self.core.transport_disconnected(now))
        elif event == P.EV_STATE:
            if self._state_waiter is not None and not self._state_waiter.done():
                self._state_waiter.set_result(data if isinstance(data, dict) else {})
            else:
                self._apply(self.core.state_received(data, now))
        elif event in P.SEQUENCED_EVENTS or event in (P.EV_CLIENT_ROLE, P.EV_REPLAY_DONE, P.EV_FEEDBACK):
            self._apply(self.core.received(event, data, now))
        else:
            log.debug("unhandled relay event %r", event)

    def _on_sequenced(self, event: str, data: Any) -> None:
        """Feed one sequenced relay event as if it came from the socket (kept for tests that inject events)."""
        self._apply(self.core.received(event, data, self._clock()))

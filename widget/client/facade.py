"""``AutopilotClient``: the public object pages use, put together from the client's parts.

Every protocol decision is made by ``widget.core.session.ClientSession``; the parts perform its effects (emits,
timers, running page functions, notifying listeners) and do the HTTP steps of connecting. Each part gets a small
context object with what it uses (the session, the driver's hooks, the network, the storage, an emitter), never
this object; this class only wires them and forwards the public API to them (docs/api.md). Pyodide's event loop
runs it unchanged; the network is behind a ``Transport`` (see ``widget.transports``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from ..core.events import Emitter
from ..core.offers import Offer
from ..core.registry import FunctionRegistry, Handler
from ..core.sequence import SeqTracker
from ..core.session import ClientSession
from ..core.state import StateSync
from ..core.streaming import StreamingSession
from ..env import PageEnv
from ..errors import ConfigError
from ..protocol import (
    CONTEXT_RESOLUTION_TIMEOUT_MS,
    FUNCTION_CALL_HISTORY_LIMIT,
    SUBSCRIBABLE_EVENTS,
    SYNC_STATE_BEFORE_FUNCTION_RESPONSE_TIMEOUT_MS,
)
from ..transports.base import Transport
from .calls import Calls, CallsContext
from .confirmation import Confirmation, ConfirmationHandler
from .connection import Connection, ConnectionContext, Link, StorageSlot
from .context import PageContext, PageContextDeps
from .driver import Clock, Driver, Performers
from .feedback import Feedback
from .functions import Catalog, Functions, Publisher
from .history import ConversationBook, History, HistoryContext, PastConversation
from .input import Input, InputContext
from .starters import Starters
from .tools import Tools, ToolsContext
from .wire import Wire

log = logging.getLogger("widget")


class AutopilotClient:
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
        self._transport = transport
        self._env = env
        self._storage = StorageSlot(storage if storage is not None else {})
        self.events = Emitter()
        self.events.on_listener_error = lambda ev, exc: log.error("listener for %r raised: %r", ev, exc)
        #: The protocol logic (sans-I/O); the parts perform what it decides.
        self.core = ClientSession(instance=secrets.token_hex(6))
        core, events = self.core, self.events

        self._driver = driver = Driver(core, transport, events, clock)
        self._wire = wire = Wire(transport, dict(headers or {}), step_timeout_s)
        self._link = link = Link()
        self._catalog = catalog = Catalog(core.state, driver.now, driver.reschedule)
        self._functions = Functions(catalog)
        self._context = PageContext(PageContextDeps(core, driver.apply, driver.now, driver.reschedule))
        self._confirmation = confirmation = Confirmation(events)
        self._tools = tools = Tools(ToolsContext(core, catalog, env, events, confirmation.confirm, wire.emit_checked))
        self._calls = calls = Calls(CallsContext(
            core, catalog.registry, env, tools, confirmation.confirm, confirmation.forget, driver.apply, driver.now,
            wall_clock))
        self._starters = starters = Starters(events.emit)
        self._book = book = ConversationBook(self._storage, link, core.stream, events.emit)

        def loaded(info: dict[str, Any]) -> None:
            book.remember(info)  # the app's list of past conversations
            starters.app_loaded(info.get("starters"))

        self._connection = connection = Connection(ConnectionContext(
            core, transport, wire, self._storage, link, driver.apply, driver.now, driver.new_future,
            driver.patch_waits, driver.stop, loaded=loaded, gone=book.forget_url, leaving=book.leaving_current))
        self._history = History(HistoryContext(book, link, wire, self._storage, connection, core.new_conversation))
        self._feedback = Feedback(wire, link)
        self._input = Input(InputContext(core, wire, link, driver.apply, driver.now, driver.flush_now))
        driver.perform_with(Performers(
            run_call=calls.run, end_call=confirmation.call_ended, rejoin=connection.rejoin,
            response_sent=calls.delivered, offered_actions=tools.offered_actions))
        transport.set_handler(connection.on_transport_event)

    # ------------------------------------------------------------------ settings the parts share
    @property
    def transport(self) -> Transport:
        """The network under the client (fixed at construction: the parts hold it)."""
        return self._transport

    @property
    def env(self) -> PageEnv | None:
        """Where declarative tool runs take effect (the page); None under CPython unless given (fixed at
        construction: the parts hold it)."""
        return self._env

    @property
    def headers(self) -> dict[str, str]:
        """Sent with every HTTP request (e.g. ``Authorization: Bearer <app secret>`` from a backend)."""
        return self._wire.headers

    @headers.setter
    def headers(self, value: dict[str, str]) -> None:
        self._wire.headers = dict(value)

    @property
    def storage(self) -> MutableMapping[str, str]:
        """Where the client keeps the app's conversation URL and list (``localStorage`` in the browser)."""
        return self._storage.target

    @storage.setter
    def storage(self, storage: MutableMapping[str, str]) -> None:
        self._storage.target = storage

    @property
    def _clock(self) -> Clock:
        """The monotonic clock of every deadline (tests swap it)."""
        return self._driver.clock

    @_clock.setter
    def _clock(self, clock: Clock) -> None:
        self._driver.clock = clock

    @property
    def registry(self) -> FunctionRegistry:
        """The page's functions, tools and actions."""
        return self._catalog.registry

    @property
    def webmcp(self) -> Publisher | None:
        """Publishes the registry to in-browser agents (``widget.webmcp.enable`` sets it); None: not published."""
        return self._catalog.publisher

    @webmcp.setter
    def webmcp(self, publisher: Publisher | None) -> None:
        self._catalog.publisher = publisher

    # ------------------------------------------------------------------ what the session holds, read-only
    @property
    def conversation(self) -> dict[str, Any] | None:
        """The conversation record of the last read (None before the first)."""
        return self._link.conversation

    @property
    def conversation_url(self) -> str | None:
        """The URL of the conversation (None before ``connect``)."""
        return self._link.conversation_url

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
    def pending_context_resolutions(self) -> int:
        """How many resolutions are outstanding."""
        return self.core.pending_resolutions

    @property
    def _offers(self) -> dict[str, list[Offer]]:
        """Old name of the live offers by message id (``get_offered_actions`` is the public reader)."""
        return self.core.offers.all()

    @property
    def _tool_handlers(self) -> dict[str, Callable[..., Any]]:
        """The page's tool handlers by name (a test checks a remover took one away)."""
        return self._catalog.handlers

    @property
    def _ended_calls(self) -> dict[str, asyncio.Future[None]]:
        """The calls a pending confirmation may still be waiting on (tests check it empties)."""
        return self._confirmation.ended

    @property
    def _confirmation_handler(self) -> ConfirmationHandler | None:
        """Old name of ``confirmation_handler``."""
        return self._confirmation.handler

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

    def _on_sequenced(self, event: str, data: Any) -> None:
        """Feed one sequenced relay event as if it came from the socket (tests and benches inject events)."""
        self._driver.apply(self.core.received(event, data, self._driver.now()))

    # ------------------------------------------------------------------ connection (widget.client.connection)
    async def connect(
        self,
        conversation_url: str | None = None,
        *,
        relay_url: str | None = None,
        app_id: str | None = None,
        sync_state_before_function_response: bool = True,
        sync_state_before_function_response_timeout_ms: float = SYNC_STATE_BEFORE_FUNCTION_RESPONSE_TIMEOUT_MS,
        context_resolution_timeout_ms: float = CONTEXT_RESOLUTION_TIMEOUT_MS,
        function_call_history_limit: int = FUNCTION_CALL_HISTORY_LIMIT,
        join_after: Awaitable[Any] | None = None,
    ) -> dict[str, Any]:
        """Read the conversation, open the socket, join, receive the state snapshot, sync the local state.

        Pass ``conversation_url`` (a site created it), or ``relay_url`` and ``app_id`` to resume the stored
        conversation of that app or create one. ``join_after``: the socket opens at once but the join (and so
        the first state sync) waits for it, e.g. for page code that is still registering functions. Returns the
        conversation.
        """
        return await self._connection.connect(
            conversation_url, relay_url=relay_url, app_id=app_id,
            sync_state_before_function_response=sync_state_before_function_response,
            sync_state_before_function_response_timeout_ms=sync_state_before_function_response_timeout_ms,
            context_resolution_timeout_ms=context_resolution_timeout_ms,
            function_call_history_limit=function_call_history_limit, join_after=join_after)

    async def disconnect(self) -> None:
        """Close the connection; pending holds and gates settle, history is kept."""
        await self._connection.disconnect()

    async def new_conversation(self) -> dict[str, Any]:
        """Start a fresh conversation for this app ("New chat") and connect to it."""
        return await self._connection.new_conversation()

    # ------------------------------------------------------------------ functions (widget.client.functions)
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
        self._functions.register(name, handler, description=description, parameters=parameters,
                                 sensitive=sensitive, webmcp=webmcp)

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
        decorate = self._functions.decorator(name, description, sensitive, webmcp)
        return decorate(fn) if fn is not None else decorate

    def unregister_function(self, name: str) -> bool:
        """Remove a function; True when it existed."""
        return self._functions.unregister(name)

    def clear_functions(self) -> None:
        """Remove every registered function."""
        self._functions.clear()

    def has_function(self, name: str) -> bool:
        """Whether ``name`` is registered."""
        return self._catalog.registry.has(name)

    def get_registered_functions(self) -> list[dict[str, Any]]:
        """Descriptors as the relay sees them (no handlers)."""
        return list(self._catalog.registry.descriptors().values())

    def sync_registered_functions(self) -> asyncio.Future[bool]:
        """Send pending function changes now; resolves True once the relay acknowledged all of the state, False
        when it could not be sent (a part over the stored-state limits, a refusal, not connected)."""
        return self._driver.flush_now()

    # ------------------------------------------------------------------ context (widget.client.context)
    def set_context(self, context: dict[str, Any]) -> None:
        """Replace the page context mirrored to ``/autopilot/context``."""
        self._context.set(context)

    def update_context(self, partial: dict[str, Any]) -> None:
        """Merge ``partial`` into the page context (shallow)."""
        self._context.update(partial)

    def get_context(self) -> dict[str, Any]:
        """A copy of the local page context."""
        return self.core.state.context

    def flush_context_sync(self) -> asyncio.Future[bool]:
        """Send pending state now (e.g. before navigating away); resolves True once acknowledged, False when a
        part could not be sent."""
        return self._driver.flush_now()

    def begin_context_resolution(self, label: str = "") -> Callable[[], None]:
        """Hold function responses until the returned (idempotent) release is called."""
        return self._context.begin_resolution(label)

    def hold_context_until(self, awaitable: Awaitable[Any], label: str = "") -> asyncio.Future[Any]:
        """Acquire a resolution released when ``awaitable`` settles; passes its value or error through."""
        return self._context.hold_until(awaitable, label)

    # ------------------------------------------------------------------ calls (widget.client.calls, .confirmation)
    def set_confirmation_handler(self, handler: ConfirmationHandler | None) -> None:
        """One handler per client deciding 'allow' or 'deny' for sensitive calls; None clears it."""
        self._confirmation.set_handler(handler)

    @property
    def confirmation_handler(self) -> ConfirmationHandler | None:
        """The handler set by ``set_confirmation_handler`` (None: sensitive calls are denied)."""
        return self._confirmation.handler

    def get_function_call_history(self) -> list[dict[str, Any]]:
        """The last calls, newest first, as FunctionCallRecords."""
        return [dict(r) for r in self.core.history]

    async def answer_call_locally(self, call_id: str, name: str, args: Any) -> tuple[str, Any, str | None]:
        """Run a call that came from the page itself (an agent in the browser, not the relay) through the same path
        as the relay's calls - record, events, argument check, the reader's confirmation, handler, time limit -
        and answer it here: nothing goes to the relay. An action (which the relay never calls) runs after the
        reader's confirmation. ``(status, JSON result, error)``; a ``Navigate`` leaves the page just after."""
        return await self._calls.answer_locally(call_id, name, args)

    # ------------------------------------------------------------------ tools and actions (widget.client.tools)
    def tools(self, config: dict[str, Any]) -> list[str]:
        """Declare tools and actions (``{name: {description, parameters, confirm, run, ...}}``);
        returns warnings (also logged). Checked at once: ConfigError says what is wrong."""
        return self._tools.declare(config)

    def register_tool(self, name: str, handler: Callable[..., Any]) -> Callable[[], None]:
        """A page handler for tool/action ``name`` (wins over the relay config and the declarative run);
        it gets the checked arguments and ``{question, page, signal}``. Returns a function that removes it."""
        return self._tools.register_handler(name, handler)

    def get_offered_actions(self, message_id: str) -> list[dict[str, Any]]:
        """Live action offers on an assistant message, with the page's label, schema and state."""
        return self._tools.offered_actions(message_id)

    async def run_action(
        self, message_id: str, action_id: str, arguments: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Run an offered action the reader pressed (button) or sent (form, with the reader's ``arguments``).

        Returns ``{ok, outcome}``; the outcome is recorded with the relay for the model's next turn.
        ConfigError when the offer is unknown, already done, or the form's values fail the schema.
        """
        return await self._tools.run_action(message_id, action_id, arguments)

    # ------------------------------------------------------------------ the reader's input (widget.client.input)
    async def send_message(self, text: str) -> str:
        """Send a user message; returns its id (ProtocolError when the relay refuses it)."""
        return await self._input.send_message(text)

    async def cancel(self) -> bool:
        """Stop the running completion; True when one was cancelled."""
        return await self._input.cancel()

    async def retry(self) -> None:
        """Go on with the conversation's failed turn (ProtocolError ``nothing_to_retry`` when none failed)."""
        await self._input.retry()

    async def regenerate(self) -> None:
        """Replace the last assistant answer with a new one."""
        await self._input.regenerate()

    async def activate(self) -> None:
        """Make this client the active one ("use here"); the calls the relay hands over with it run here."""
        await self._input.activate()

    def get_pending_ask_user(self) -> list[dict[str, Any]]:
        """Prompts the model is waiting on."""
        return [dict(p) for p in self.core.pending_ask_user]

    def _set_pending_ask_user(self, prompts: list[dict[str, Any]]) -> None:
        """Replace the prompts the model waits on (tests show prompts without a relay)."""
        self._input.set_pending_ask_user(prompts)

    async def respond_to_ask_user(self, answers: dict[str, Any] | list[dict[str, Any]]) -> dict[str, Any]:
        """Post answers to every pending prompt; returns the conversation response."""
        return await self._input.respond_to_ask_user(answers)

    async def rate_answer(self, message_id: str, rating: str | None, comment: str | None = None) -> dict[str, Any]:
        """Rate one answer: ``"up"``, ``"down"`` or ``None`` (take the rating back), with an optional ``comment``
        (it replaces the stored one; ``None`` or blank: no comment); the record the relay stored."""
        return await self._feedback.rate_answer(message_id, rating, comment)

    # ------------------------------------------------------------------ past conversations (widget.client.history)
    @property
    def conversation_id(self) -> str | None:
        """The id of the conversation shown now (None before the first load)."""
        return self._book.current_id

    def conversation_ids(self) -> list[str]:
        """The ids of this browser's conversations with the app, most recently added first."""
        return self._book.ids()

    async def conversations(self) -> list[PastConversation]:
        """This browser's conversations with the app that still exist, most recently active first: ``{id, title,
        created_at, updated_at, current}`` (title None: no message yet). Ids the relay no longer knows are forgotten."""
        return await self._history.conversations()

    async def open_conversation(self, conversation_id: str) -> dict[str, Any]:
        """Switch to one of this browser's conversations: read it, join it, show its messages; returns it.

        ``not_found`` (and the id is forgotten) when the relay no longer has it; the current conversation stays.
        ``ConfigError`` for an id this browser does not hold (the list is of the reader's own conversations).
        """
        return await self._history.open_conversation(conversation_id)

    async def delete_conversation(self, conversation_id: str) -> bool:
        """Delete one of this browser's conversations on the relay and forget it; True when it existed.

        Deleting the current one starts a fresh conversation in its place ("New chat")."""
        return await self._history.delete_conversation(conversation_id)

    # ------------------------------------------------------------------ starters (widget.client.starters)
    @property
    def starters(self) -> list[str]:
        """The starter prompts an empty bar shows now: the page's (``set_starters``), else the app's."""
        return self._starters.shown

    def set_starters(self, starters: Iterable[str] | None) -> list[str]:
        """Show these starter prompts on this page instead of the app's (at most ``MAX_STARTERS`` non-empty strings
        of at most ``MAX_STARTER_CHARS`` characters; ``[]``: none; ``None``: the app's again). ConfigError says
        which entry is wrong; nothing changes then. Returns the starters now shown."""
        return self._starters.set(starters)

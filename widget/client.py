"""The autopilot client: the one runtime module that drives the sans-I/O core with asyncio.

Pyodide's event loop runs it unchanged; the network is behind a ``Transport`` (see ``widget.transports``).
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import itertools
import logging
import secrets
import time
from collections.abc import Awaitable, MutableMapping
from dataclasses import dataclass
from typing import Any, Callable

from . import protocol as P
from .core.events import Emitter
from .core.registry import FunctionDefinition, FunctionRegistry, Handler
from .core.pyfunctions import bind_function, handler_error
from .core.sequence import DUPLICATE, GAP, SeqTracker
from .core.state import StateSync, to_json_value
from .core.streaming import StreamingSession
from .core.templates import expand
from .core.tools import ToolSpec, check_tool_arguments, parse_tools
from .core.validation import needs_validator, validate_arguments
from .env import PageEnv, Signal
from .errors import ConfigError, ConnectionFailed, ProtocolError, StateLimitError, WidgetError
from .transports.base import CONNECTED, DISCONNECTED, Transport, TransportError

log = logging.getLogger("widget")

#: Connection states reported by ``connectionStateChanged``.
IDLE, CONNECTING, CONNECTED_STATE, RECONNECTING, DISCONNECTED_STATE, ERROR = (
    "idle",
    "connecting",
    "connected",
    "reconnecting",
    "disconnected",
    "error",
)

ConfirmationHandler = Callable[[dict[str, Any]], "str | Awaitable[str]"]

#: Error codes of a ``function_response`` ack after which the response is sent again (the relay could not take it
#: now); any other refusal is final.
TRANSIENT_RESPONSE_ERRORS = frozenset({P.ERR_INTERNAL, P.ERR_RATE_LIMITED, P.ERR_BUSY})


@dataclass
class _OutboxEntry:
    """A function response the relay has not taken yet, with what its history record and events need."""

    payload: dict[str, Any]
    record: dict[str, Any]
    request: dict[str, Any]
    #: Clock time the call was received (totalMs counts from it to the emit that the relay takes).
    started: float
    attempts: int = 0
    retry: asyncio.TimerHandle | None = None


class Navigate:
    """Return this from a handler that leaves the page (D12): the response goes out, the relay acknowledges
    it, then the page navigates to ``url`` — so a multi-page site never loses the call's result."""

    def __init__(self, url: str, result: Any = None, *, ack_timeout_s: float = 10.0) -> None:
        if not isinstance(url, str) or not url:
            raise ConfigError("Navigate needs a URL.")
        self.url = url
        self.result = result if result is not None else f"Navigating to {url}."
        self.ack_timeout_s = ack_timeout_s


def storage_key(app_id: str) -> str:
    """The storage key under which a conversation URL is kept for ``app_id`` (D2)."""
    return f"autopilot:conversation:{app_id}"


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
        self._instance = secrets.token_hex(6)
        self.state = StateSync(key_prefix=f"p{self._instance}-")
        self.seq = SeqTracker()
        self.session = StreamingSession(on_ignored=lambda why: log.warning("stream: %s", why))
        self.conversation: dict[str, Any] | None = None
        self.conversation_url: str | None = None
        self.connection_state = IDLE
        self.last_error: dict[str, Any] | None = None
        self.active = False
        self.pending_ask_user: list[dict[str, Any]] = []
        self._keys = itertools.count(1)
        self._confirmation_handler: ConfirmationHandler | None = None
        self._history: collections.deque[dict[str, Any]] = collections.deque(maxlen=P.FUNCTION_CALL_HISTORY_LIMIT)
        self._started_calls: set[str] = set()
        self._ended_calls: dict[str, asyncio.Future[None]] = {}
        self._running: set[str] = set()
        self._outbox: dict[str, _OutboxEntry] = {}
        self._patch_acks: dict[str, asyncio.Future[bool]] = {}
        self._resolutions: dict[int, str] = {}
        self._resolution_ids = itertools.count(1)
        self._resolutions_changed: asyncio.Event | None = None
        self._flush_handle: asyncio.TimerHandle | None = None
        self._state_waiter: asyncio.Future[Any] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._joined_once = False
        #: True between a join ack and the next (re)connection: writes before that would be ``not_joined``.
        self._joined = False
        self._closing = False
        self._replay_pending = False
        self._connect_options: dict[str, Any] = {}
        self._tools: dict[str, ToolSpec] = {}
        self._tool_handlers: dict[str, Callable[..., Any]] = {}
        self._offers: dict[str, list[dict[str, Any]]] = {}
        self._opts: dict[str, Any] = {
            "sync_state_before_function_response": True,
            "sync_state_before_function_response_timeout_ms": P.SYNC_STATE_BEFORE_FUNCTION_RESPONSE_TIMEOUT_MS,
            "context_resolution_timeout_ms": P.CONTEXT_RESOLUTION_TIMEOUT_MS,
        }
        transport.set_handler(self._on_transport_event)

    # ------------------------------------------------------------------ events
    def on(self, event: str, listener: Callable[[Any], Any]) -> Callable[[], None]:
        """Subscribe to a client event; returns an unsubscribe function."""
        return self.events.on(event, listener)

    def _set_connection_state(self, state: str, error: dict[str, Any] | None = None) -> None:
        self.connection_state = state
        if error is not None:
            self.last_error = error
        elif state == CONNECTED_STATE:
            self.last_error = None
        self.events.emit("connectionStateChanged", {"state": state, "error": error})

    # ------------------------------------------------------------------ functions
    def register_function(
        self,
        name: str,
        handler: Handler,
        *,
        description: str = "",
        parameters: dict[str, Any] | None = None,
        sensitive: bool = False,
    ) -> None:
        """Register ``handler(args, context)`` under ``name`` (seed 000 ``registerFunction``)."""
        self._tools.pop(name, None)  # a function registered under a tool's name replaces the tool
        definition = FunctionDefinition(
            name=name,
            handler=handler,
            description=description or "",
            parameters=parameters if parameters is not None else {"type": "object", "properties": {}},
            sensitive=sensitive,
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
    ) -> Any:
        """Decorator: register a plain Python function; parameters come from its type hints, the description
        from its docstring, and the model's arguments arrive as keyword arguments of the declared types."""

        def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
            bound = bind_function(func, name, description)
            self.register_function(bound.name, bound.handler, description=bound.description,
                                   parameters=bound.parameters, sensitive=sensitive)
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
        """Send pending function changes now; the result resolves when the relay acknowledges."""
        return self._flush_now()

    def _functions_changed(self) -> None:
        self.state.set_functions(self.registry.descriptors(), self._clock())
        self._schedule_flush()

    # ------------------------------------------------------------------ context
    def set_context(self, context: dict[str, Any]) -> None:
        """Replace the page context mirrored to ``/autopilot/context``."""
        self.state.set_context(context, self._clock())
        self._schedule_flush()

    def update_context(self, partial: dict[str, Any]) -> None:
        """Merge ``partial`` into the page context (shallow)."""
        self.state.update_context(partial, self._clock())
        self._schedule_flush()

    def get_context(self) -> dict[str, Any]:
        """A copy of the local page context."""
        return self.state.context

    def flush_context_sync(self) -> asyncio.Future[bool]:
        """Send pending state now (e.g. before navigating away); resolves True once acknowledged."""
        return self._flush_now()

    # ------------------------------------------------------------------ state sync plumbing
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

    def _schedule_flush(self) -> None:
        deadline = self.state.next_deadline()
        if deadline is None or not self._can_send():
            return
        if self._flush_handle is not None:
            self._flush_handle.cancel()
        delay = max(0.0, deadline - self._clock())
        self._flush_handle = self._loop().call_later(delay, self._flush_tick)

    def _can_send(self) -> bool:
        return self.state.base is not None and self._joined and self.transport.connected and self.active

    def _flush_tick(self) -> None:
        self._flush_handle = None
        self._send_outgoing(lambda: self.state.poll(self._clock()))
        self._schedule_flush()

    def _flush_now(self) -> asyncio.Future[bool]:
        """Send every pending part now; resolves True once the relay acknowledged all of the state, False when a
        part was skipped (over the limits), refused, or could not be sent."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        done: asyncio.Future[bool] = self._loop().create_future()
        if not self._can_send():
            done.set_result(False)
            return done
        all_sent = self._send_outgoing(lambda: self.state.flush())
        waits = list(self._patch_acks.values())
        if not waits:
            done.set_result(all_sent)
            return done

        async def wait_all() -> bool:
            results = await asyncio.gather(*waits)
            return all_sent and all(results)

        return asyncio.ensure_future(wait_all())

    def _send_outgoing(self, build: Callable[[], Any]) -> bool:
        """Emit the patch ``build`` makes; False when a part was left unsent by the limits (``stateError``)."""
        try:
            outgoing = build()
        except StateLimitError as exc:
            self._state_skipped(exc)
            return False
        if outgoing is None:
            return True
        if outgoing.skipped is not None:
            self._state_skipped(outgoing.skipped)
        fut: asyncio.Future[bool] = self._loop().create_future()
        self._patch_acks[outgoing.key] = fut
        self._spawn(self._emit_patch(outgoing.key, outgoing.patch, fut))
        return outgoing.skipped is None

    def _state_skipped(self, exc: StateLimitError) -> None:
        log.warning("state sync skipped: %s", exc)
        self.events.emit("stateError", {"code": exc.code, "message": str(exc)})

    async def _emit_patch(self, key: str, patch: list[dict[str, Any]], fut: asyncio.Future[bool]) -> None:
        ok = False
        try:
            ack = await self.transport.emit(P.EV_STATE_PATCH, {"patch": patch, "idempotency_key": key})
            ok = isinstance(ack, dict) and ack.get("ok") is True
            if not ok:
                err = (ack or {}).get("error", {}) if isinstance(ack, dict) else {}
                self.events.emit(
                    "stateError",
                    {"code": err.get("code", P.ERR_INTERNAL), "message": err.get("message", "State patch refused.")},
                )
            self.state.ack(key, ok)
        except TransportError as exc:
            log.warning("state patch %s not acknowledged: %s", key, exc)
        finally:
            self._patch_acks.pop(key, None)
            if not fut.done():
                fut.set_result(ok)
            self._schedule_flush()

    # ------------------------------------------------------------------ context resolutions
    def begin_context_resolution(self, label: str = "") -> Callable[[], None]:
        """Hold function responses until the returned (idempotent) release is called."""
        rid = next(self._resolution_ids)
        self._resolutions[rid] = label
        self._resolutions_event().set()
        self.events.emit("contextResolutionChanged", {"pending": len(self._resolutions)})

        def release() -> None:
            if self._resolutions.pop(rid, None) is not None:
                self._resolutions_event().set()
                self.events.emit("contextResolutionChanged", {"pending": len(self._resolutions)})

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
        return len(self._resolutions)

    def _resolutions_event(self) -> asyncio.Event:
        if self._resolutions_changed is None:
            self._resolutions_changed = asyncio.Event()
        return self._resolutions_changed

    async def _withhold(self) -> None:
        """Context resolutions first, then the state-sync gate (seed 000)."""
        waited = bool(self._resolutions)
        if waited:
            deadline = self._clock() + self._opts["context_resolution_timeout_ms"] / 1000
            event = self._resolutions_event()
            while self._resolutions:
                remaining = deadline - self._clock()
                if remaining <= 0:
                    log.warning("context resolution timed out; sending the response anyway")
                    break
                event.clear()
                try:
                    await asyncio.wait_for(event.wait(), remaining)
                except asyncio.TimeoutError:
                    pass
        # Resolutions are honoured with the gate off too: what they wrote is committed before the response.
        if self._opts["sync_state_before_function_response"] or waited:
            if self.state.is_dirty() and self._can_send():
                flushed = self._flush_now()
                timeout = self._opts["sync_state_before_function_response_timeout_ms"] / 1000
                try:
                    await asyncio.wait_for(asyncio.shield(flushed), timeout)
                except asyncio.TimeoutError:
                    log.warning("state sync gate timed out after %s ms", timeout * 1000)

    # ------------------------------------------------------------------ confirmation
    def set_confirmation_handler(self, handler: ConfirmationHandler | None) -> None:
        """One handler per client deciding 'allow' or 'deny' for sensitive calls; None clears it."""
        if handler is not None and not callable(handler):
            raise ConfigError("Confirmation handler must be callable or None.")
        self._confirmation_handler = handler

    async def _confirm(self, request: dict[str, Any]) -> str:
        """Ask the confirmation handler; deny on no handler, an exception, any other answer, or once the relay
        has ended the call (timed out or cancelled): a late 'allow' never runs it (D6)."""
        self.events.emit("functionConfirmationRequired", {"request": request})
        decision, reason = "deny", "no_handler"
        handler = self._confirmation_handler
        ended = self._call_ended_future(request["id"])
        if handler is not None:
            try:
                value = handler(request)
                if inspect.isawaitable(value):
                    answer = asyncio.ensure_future(value)
                    done, _ = await asyncio.wait({answer, ended}, return_when=asyncio.FIRST_COMPLETED)
                    if answer not in done:
                        answer.cancel()
                        raise _CallEnded()
                    value = answer.result()
                if ended.done():
                    raise _CallEnded()
                decision, reason = ("allow", "allowed") if value == "allow" else ("deny", "denied")
            except _CallEnded:
                decision, reason = "deny", "expired"
            except Exception as exc:  # noqa: BLE001 - fail closed
                log.warning("confirmation handler raised, denying: %r", exc)
                decision, reason = "deny", "handler_error"
        self.events.emit(
            "functionConfirmationResolved", {"request": request, "decision": decision, "reason": reason}
        )
        return decision

    def _call_ended_future(self, call_id: str) -> asyncio.Future[None]:
        fut = self._ended_calls.get(call_id)
        if fut is None:
            fut = self._loop().create_future()
            self._ended_calls[call_id] = fut
        return fut

    def _mark_call_ended(self, call_id: Any) -> None:
        # Only calls still running here can be waiting on a confirmation; finished ones keep nothing.
        if isinstance(call_id, str) and call_id in self._running:
            fut = self._call_ended_future(call_id)
            if not fut.done():
                fut.set_result(None)

    # ------------------------------------------------------------------ function calls
    def get_function_call_history(self) -> list[dict[str, Any]]:
        """The last calls, newest first, as FunctionCallRecords."""
        return [dict(r) for r in self._history]

    async def _run_call(self, call: dict[str, Any]) -> None:
        call_id = call.get("id")
        if not isinstance(call_id, str) or call_id in self._started_calls:
            return
        self._started_calls.add(call_id)
        self._running.add(call_id)
        try:
            await self._run_started_call(call_id, call)
        finally:
            self._running.discard(call_id)
            self._ended_calls.pop(call_id, None)

    async def _run_started_call(self, call_id: str, call: dict[str, Any]) -> None:
        name = call.get("name") if isinstance(call.get("name"), str) else ""
        args = call.get("arguments")
        if args is None:
            args = {}
        record: dict[str, Any] = {
            "id": call_id,
            "name": name,
            "status": "running",
            "startedAt": self._wall() * 1000,
            "settledAt": None,
            "respondedAt": None,
            "handlerMs": None,
            "totalMs": None,
        }
        self._history.appendleft(record)
        request = {"id": call_id, "name": name, "arguments": args, "timestamp": record["startedAt"]}
        self.events.emit("functionCall", {"request": request})
        # Checking the arguments may first load the schema validator (a lazily fetched module in the browser):
        # that is the widget's cost, not the handler's, so the clocks start once the call is ready to run.
        refused = await self._check_call(request)
        t0 = self._clock()
        record["startedAt"] = self._wall() * 1000
        if refused is not None:
            status, result, error = refused
        else:
            status, result, error = await self._execute(request)
        navigate = None
        if status == P.STATUS_SUCCESS and isinstance(result, Navigate):
            navigate, result = result, None
            try:
                result = to_json_value(navigate.result, f"The result of {name!r}")
            except TypeError as exc:
                status, error = P.STATUS_ERROR, str(exc)
        handler_ms = (self._clock() - t0) * 1000
        record.update(status=status, settledAt=self._wall() * 1000, handlerMs=handler_ms)
        if status == P.STATUS_SUCCESS:
            self.events.emit("functionSuccess", {"request": request, "result": result, "durationMs": handler_ms})
        else:
            self.events.emit("functionError", {"request": request, "error": error, "durationMs": handler_ms})
        await self._withhold()
        payload: dict[str, Any] = {
            "id": call_id,
            "status": status,
            "idempotency_key": f"fr-{call_id}",
            "handler_ms": round(handler_ms, 3),
        }
        if status == P.STATUS_SUCCESS:
            payload["result"] = result
        else:
            payload["error"] = error
        entry = _OutboxEntry(payload=payload, record=record, request=request, started=t0)
        self._outbox[call_id] = entry
        acked = await self._send_response(entry)
        if navigate is not None:
            await self._navigate_after_ack(call_id, navigate, acked)

    async def _navigate_after_ack(self, call_id: str, navigate: Navigate, acked: bool) -> None:
        # Until the relay has the response, leaving the page would lose it: wait for a resend after a
        # reconnect (the outbox) up to the limit, then go anyway — the reader asked to go.
        deadline = self._clock() + navigate.ack_timeout_s
        while not acked and call_id in self._outbox and self._clock() < deadline:
            await asyncio.sleep(0.05)
        if call_id in self._outbox:
            log.warning("navigating before the relay acknowledged call %s", call_id)
        if self.env is None:
            log.error("cannot navigate to %s: no page environment", navigate.url)
            return
        self.env.navigate(navigate.url)

    #: Seconds between resends of a response the relay could not take (``internal``, ``rate_limited``, ``busy``);
    #: the last value repeats until the relay takes or refuses it, or the resend window below has passed.
    RESEND_DELAYS_S: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 5.0)
    #: After this long since the call was received, a response the relay keeps refusing as transient is dropped
    #: (the relay has long timed the call out by then).
    RESEND_WINDOW_S: float = 4 * P.FUNCTION_CALL_TIMEOUT_S

    async def _send_response(self, entry: _OutboxEntry) -> bool:
        """Emit a function response; True once the relay took it or refused it for good. Until then it stays in
        the outbox: a lost connection resends it after the rejoin, a transient refusal after a delay."""
        payload = entry.payload
        call_id = payload["id"]
        if self._outbox.get(call_id) is not entry:
            return True  # already delivered by another attempt
        if entry.retry is not None:
            entry.retry.cancel()
            entry.retry = None
        if not self._joined:
            # A socket that reconnected but has not joined yet would be refused: the rejoin resends it.
            log.warning("function response %s kept for resend: not joined", call_id)
            return False
        total_ms = (self._clock() - entry.started) * 1000
        payload["total_ms"] = round(total_ms, 3)
        entry.attempts += 1
        try:
            ack = await self.transport.emit(P.EV_FUNCTION_RESPONSE, payload)
        except TransportError as exc:
            log.warning("function response %s kept for resend: %s", call_id, exc)
            return False
        code = (ack.get("error") or {}).get("code") if isinstance(ack, dict) and not ack.get("ok") else None
        if not isinstance(ack, dict):
            code = P.ERR_INTERNAL
        if code == P.ERR_NOT_JOINED:
            log.warning("function response %s kept for resend: not joined", call_id)
            return False
        if code in TRANSIENT_RESPONSE_ERRORS:
            self._schedule_resend(entry, code)
            return False
        if self._outbox.get(call_id) is not entry:
            return True
        self._outbox.pop(call_id, None)
        if code is not None:
            log.warning("relay refused function response %s: %s", call_id, ack.get("error"))
        entry.record.update(respondedAt=self._wall() * 1000, totalMs=total_ms)
        self.events.emit("functionResponseSent", {"request": entry.request, "totalMs": total_ms, "ack": ack})
        return True

    def _schedule_resend(self, entry: _OutboxEntry, code: str | None) -> None:
        call_id = entry.payload["id"]
        if (self._clock() - entry.started) > self.RESEND_WINDOW_S:
            log.error("function response %s dropped: the relay kept answering %s", call_id, code)
            self._outbox.pop(call_id, None)
            return
        delay = self.RESEND_DELAYS_S[min(entry.attempts, len(self.RESEND_DELAYS_S)) - 1]
        log.warning("function response %s refused (%s); resending in %g s", call_id, code, delay)
        entry.retry = self._loop().call_later(delay, lambda: self._spawn(self._send_response(entry)))

    def _resend_outbox(self) -> None:
        for entry in list(self._outbox.values()):
            self._spawn(self._send_response(entry))

    async def _check_call(self, request: dict[str, Any]) -> tuple[str, Any, str | None] | None:
        """Why the call cannot run (the error response), or None when it can."""
        name = request["name"]
        definition = self.registry.get(name)
        if definition is None:
            return P.STATUS_ERROR, None, f"Unknown function: {name!r} is not registered on this page."
        if definition.kind != P.KIND_FUNCTION:
            return None  # tools check their own arguments; actions are refused by _execute
        if needs_validator(definition.parameters):
            await _prefetch_modules(("jsonschema",))
        problem = validate_arguments(definition.parameters, request["arguments"])
        if problem is not None:
            return P.STATUS_ERROR, None, f"Invalid arguments for {name!r}: {problem}"
        return None

    async def _execute(self, request: dict[str, Any]) -> tuple[str, Any, str | None]:
        name = request["name"]
        definition = self.registry.get(name)
        if definition is None:
            return P.STATUS_ERROR, None, f"Unknown function: {name!r} is not registered on this page."
        if definition.kind == P.KIND_TOOL:
            return await self._execute_tool(request, self._tools[name])
        if definition.kind == P.KIND_ACTION:
            return P.STATUS_ERROR, None, f"{name!r} is an action: the model may offer it, never call it."
        args = request["arguments"]
        if definition.sensitive:
            if await self._confirm(request) != "allow":
                return P.STATUS_ERROR, None, P.MSG_SENSITIVE_DENIED
        try:
            value = definition.handler(args, {"id": request["id"], "name": name, "timestamp": request["timestamp"]})
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:  # noqa: BLE001 - a page handler may raise anything
            return P.STATUS_ERROR, None, handler_error(name, exc)
        if isinstance(value, Navigate):
            return P.STATUS_SUCCESS, value, None
        try:
            return P.STATUS_SUCCESS, to_json_value(value, f"The result of {name!r}"), None
        except TypeError as exc:
            return P.STATUS_ERROR, None, str(exc)

    # ------------------------------------------------------------------ tools and actions (seed 002)
    def tools(self, config: dict[str, Any]) -> list[str]:
        """Declare seed-002 tools and actions (``{name: {description, parameters, confirm, run, ...}}``);
        returns warnings (also logged). Checked at once: ConfigError says what is wrong."""
        specs, warnings = parse_tools(config)
        for spec in specs:
            existing = self.registry.get(spec.name)
            if existing is not None and spec.name not in self._tools:
                raise ConfigError(f"{spec.name!r} is already registered as a function; tools need their own names.")
        for spec in specs:
            self._tools[spec.name] = spec
            self.registry.register(
                FunctionDefinition(
                    name=spec.name,
                    handler=self._tool_placeholder,
                    description=spec.description,
                    parameters=spec.parameters,
                    kind=spec.kind,
                    extra=self._tool_extra(spec),
                )
            )
        for w in warnings:
            log.warning(w)
        self._functions_changed()
        return warnings

    def register_tool(self, name: str, handler: Callable[..., Any]) -> Callable[[], None]:
        """A page handler for tool/action ``name`` (wins over the relay config and the declarative run);
        it gets the checked arguments and ``{question, page, signal}``. Returns a function that removes it."""
        if not callable(handler):
            raise ConfigError(f"register_tool({name!r}): handler must be callable.")
        self._tool_handlers[name] = handler
        self._refresh_tool(name)

        def remove() -> None:
            if self._tool_handlers.get(name) is handler:
                del self._tool_handlers[name]
                self._refresh_tool(name)

        return remove

    def _refresh_tool(self, name: str) -> None:
        spec = self._tools.get(name)
        definition = self.registry.get(name)
        if spec is not None and definition is not None:
            definition.extra = self._tool_extra(spec)
            self._functions_changed()

    def _tool_extra(self, spec: ToolSpec) -> dict[str, Any]:
        base = spec.descriptor(spec.name in self._tool_handlers)
        return {k: v for k, v in base.items() if k not in ("name", "kind", "description", "parameters", "sensitive", "source")}

    @staticmethod
    def _tool_placeholder(args: dict[str, Any], context: dict[str, Any]) -> Any:
        raise WidgetError("tools run through their spec, not a function handler")

    def _tool_context(self, signal: Signal) -> dict[str, Any]:
        question = next((m.get("content") for m in reversed(self.messages) if m.get("role") == "user"), None)
        page = self.env.page_info() if self.env is not None else None
        return {"question": question, "page": page, "signal": signal}

    async def _execute_tool(self, request: dict[str, Any], spec: ToolSpec) -> tuple[str, Any, str | None]:
        args, problem = check_tool_arguments(spec.parameters, request["arguments"])
        if problem is not None:
            return P.STATUS_ERROR, None, f"Invalid arguments for {spec.name!r}: {problem}"
        signal = Signal()
        try:
            value = await asyncio.wait_for(self._run_tool(spec, args, signal), P.TOOL_CALL_TIMEOUT_S)
            return P.STATUS_SUCCESS, to_json_value(value, f"The reply of {spec.name!r}"), None
        except asyncio.TimeoutError:
            signal.abort("timeout")
            return P.STATUS_ERROR, None, f"{spec.name!r} did not finish within {P.TOOL_CALL_TIMEOUT_S:g} s."
        except Exception as exc:  # noqa: BLE001 - handlers, templates and fetches may fail in many ways
            return P.STATUS_ERROR, None, str(exc) or type(exc).__name__

    async def _run_tool(self, spec: ToolSpec, args: dict[str, Any], signal: Signal) -> Any:
        context = self._tool_context(signal)
        handler = self._tool_handlers.get(spec.name)
        if handler is not None:
            value = handler(args, context)
            return await value if inspect.isawaitable(value) else value
        run = spec.run or {}
        if self.env is None:
            raise WidgetError(f"{spec.name!r} has no page handler and no page to run it in.")
        if "fetch" in run:
            body = None
            if run.get("method") == "POST":
                body = {"tool": spec.name, "args": args, "context": {k: context[k] for k in ("question", "page")}}
            status, content_type, text = await self.env.fetch(run["method"], expand(run["fetch"], args), body, signal)
            if status >= 400:
                raise WidgetError(f"{spec.name!r} failed: HTTP {status}" + (f": {text[:200]}" if text else ""))
            if "json" in content_type:
                import json

                try:
                    return json.loads(text)
                except ValueError:
                    return text
            return text
        if "href" in run:
            return {"opened": expand(run["href"], args), "how": self.env.navigate(expand(run["href"], args))}
        if "event" in run:
            self.env.dispatch_event(
                run["event"], {"tool": spec.name, "args": args, "context": {k: context[k] for k in ("question", "page")}}
            )
            return None
        raise WidgetError(f"{spec.name!r} has no page handler and no run.")

    def get_offered_actions(self, message_id: str) -> list[dict[str, Any]]:
        """Live action offers on an assistant message, with the page's label, schema and state."""
        out = []
        for offer in self._offers.get(message_id, []):
            spec = self._tools.get(offer["name"])
            if spec is None or spec.kind != P.KIND_ACTION:
                continue
            out.append({
                **offer,
                "label": spec.label or spec.title or spec.name,
                "title": spec.title,
                "confirm": spec.confirm,
                "parameters": spec.parameters,
            })
        return out

    def _record_offers(self, message: Any) -> None:
        if not isinstance(message, dict) or not isinstance(message.get("actions"), list):
            return
        offers = [
            {"id": a["id"], "name": a["name"], "arguments": a.get("arguments") or {}, "status": "offered", "outcome": None}
            for a in message["actions"][: P.MAX_ACTIONS]
            if isinstance(a, dict) and isinstance(a.get("id"), str) and isinstance(a.get("name"), str)
        ]
        if offers and isinstance(message.get("id"), str):
            self._offers[message["id"]] = offers
            self.events.emit("actionsOffered", {"message_id": message["id"], "actions": self.get_offered_actions(message["id"])})

    async def run_action(
        self, message_id: str, action_id: str, arguments: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Run an offered action the reader pressed (button) or sent (form, with the reader's ``arguments``).

        Returns ``{ok, outcome}``; the outcome is recorded with the relay for the model's next turn.
        ConfigError when the offer is unknown, already done, or the form's values fail the schema.
        """
        offer = next((o for o in self._offers.get(message_id, []) if o["id"] == action_id), None)
        spec = self._tools.get(offer["name"]) if offer else None
        if offer is None or spec is None or spec.kind != P.KIND_ACTION:
            raise ConfigError("That action is not on offer (a restored conversation has no live actions).")
        if offer["status"] in ("done", "running"):
            raise ConfigError(f"{spec.label or spec.name} is already {offer['status']}.")
        given = arguments if (spec.confirm == "form" and arguments is not None) else offer["arguments"]
        args, problem = check_tool_arguments(spec.parameters, given)
        if problem is not None:
            raise ConfigError(problem[0].upper() + problem[1:] + ".")
        offer["status"] = "running"
        self.events.emit("actionStarted", {"message_id": message_id, "action_id": action_id, "name": spec.name})
        signal = Signal()
        leave_to: str | None = None
        try:
            if "href" in (spec.run or {}) and spec.name not in self._tool_handlers:
                # Leaving the page would lose the outcome: record it first, navigate after the ack (D12).
                leave_to = expand(spec.run["href"], args)
                value: Any = None
            else:
                value = await asyncio.wait_for(self._run_tool(spec, args, signal), P.TOOL_CALL_TIMEOUT_S)
            ok = True
            if isinstance(value, str) and value.strip():
                outcome = value.strip()
            elif isinstance(value, dict) and isinstance(value.get("message"), str):
                outcome = value["message"]
            else:
                outcome = "Done."
        except asyncio.TimeoutError:
            signal.abort("timeout")
            ok, outcome = False, f"No answer within {P.TOOL_CALL_TIMEOUT_S:g} s."
        except asyncio.CancelledError:
            signal.abort("cancelled")
            offer["status"] = "offered"  # nothing finished: the reader may press it again
            raise
        except Exception as exc:  # noqa: BLE001 - shown to the reader, who may retry
            ok, outcome = False, str(exc) or type(exc).__name__
        offer.update(status="done" if ok else "failed", outcome=outcome)
        result = {"ok": ok, "outcome": outcome, "message_id": message_id, "action_id": action_id, "name": spec.name}
        self.events.emit("actionOutcome", result)
        payload = {
            "message_id": message_id, "action_id": action_id, "name": spec.name, "arguments": args,
            "ok": ok, "outcome": outcome, "idempotency_key": self._key("o"),
        }
        try:
            await self._emit_checked(P.EV_ACTION_OUTCOME, payload)
        except WidgetError as exc:
            log.warning("action outcome not recorded by the relay: %s", exc)
        if leave_to is not None and self.env is not None:
            self.env.navigate(leave_to)
        return {"ok": ok, "outcome": outcome}

    def _action_recorded(self, message: dict[str, Any]) -> None:
        """An outcome recorded by any tab: a successful action is done here too, never run twice."""
        if message.get("role") != "action" or message.get("ok") is not True:
            return
        for offer in self._offers.get(str(message.get("message_id")), []):
            if offer["id"] == message.get("action_id"):
                offer.update(status="done", outcome=message.get("outcome"))

    # ------------------------------------------------------------------ connection
    async def connect(
        self,
        conversation_url: str | None = None,
        *,
        relay_url: str | None = None,
        app_id: str | None = None,
        sync_state_before_function_response: bool = True,
        sync_state_before_function_response_timeout_ms: float = P.SYNC_STATE_BEFORE_FUNCTION_RESPONSE_TIMEOUT_MS,
        context_resolution_timeout_ms: float = P.CONTEXT_RESOLUTION_TIMEOUT_MS,
        function_call_history_limit: int = P.FUNCTION_CALL_HISTORY_LIMIT,
        join_after: Awaitable[Any] | None = None,
    ) -> dict[str, Any]:
        """Seed 001 steps 1-4: GET the conversation, open the socket, join, receive the snapshot, sync.

        Pass ``conversation_url`` (a site created it), or ``relay_url`` and ``app_id`` to resume the stored
        conversation of that app or create one (D2). ``join_after``: the socket opens at once but the join (and so
        the first state sync) waits for it, e.g. for page code that is still registering functions. Returns the
        conversation.
        """
        if conversation_url is None and (not relay_url or not app_id):
            raise ConfigError("connect() needs conversation_url, or both relay_url and app_id.")
        if function_call_history_limit < 1:
            raise ConfigError("function_call_history_limit must be at least 1.")
        self._connect_options = {
            "sync_state_before_function_response": sync_state_before_function_response,
            "sync_state_before_function_response_timeout_ms": sync_state_before_function_response_timeout_ms,
            "context_resolution_timeout_ms": context_resolution_timeout_ms,
            "function_call_history_limit": function_call_history_limit,
        }
        self._opts.update(
            sync_state_before_function_response=bool(sync_state_before_function_response),
            sync_state_before_function_response_timeout_ms=float(sync_state_before_function_response_timeout_ms),
            context_resolution_timeout_ms=float(context_resolution_timeout_ms),
        )
        if function_call_history_limit != self._history.maxlen:
            self._history = collections.deque(self._history, maxlen=function_call_history_limit)
        self._relay_url = relay_url.rstrip("/") if relay_url else None
        self._app_id = app_id
        self._closing = False
        # A socket opened by connect() is joined by connect() itself; only a reconnection it did not ask for
        # rejoins on its own.
        self._joined_once = False
        self._set_connection_state(CONNECTING)
        try:
            if conversation_url is None:
                conversation_url = await self._resolve_conversation_url()
            self.conversation_url = conversation_url
            info = await self._get_conversation(conversation_url)
            if info is None:
                # A stored conversation that no longer exists: start a new one (D2).
                self.storage.pop(storage_key(app_id or ""), None)
                conversation_url = await self._create_conversation()
                self.conversation_url = conversation_url
                info = await self._get_conversation(conversation_url)
                if info is None:
                    raise ProtocolError(P.ERR_NOT_FOUND, "The new conversation could not be read back.")
            self._load_conversation(info)
            await self._with_timeout(
                self.transport.connect(info["relay_url"], info.get("relay_path") or P.DEFAULT_RELAY_PATH),
                f"Could not connect to the relay at {info['relay_url']}",
            )
            if join_after is not None:
                await join_after
            await self._join(info)
        except WidgetError as exc:
            err = _error_payload(exc)
            self._set_connection_state(ERROR, err)
            self.events.emit("error", err)
            await self._quiet_disconnect()
            raise
        return self.conversation or {}

    async def _with_timeout(self, aw: Awaitable[Any], what: str) -> Any:
        try:
            return await asyncio.wait_for(aw, self._step_timeout)
        except asyncio.TimeoutError:
            raise ConnectionFailed(f"{what}: no answer within {self._step_timeout:g} s.") from None

    async def _resolve_conversation_url(self) -> str:
        stored = self.storage.get(storage_key(self._app_id or ""))
        if stored:
            return stored
        return await self._create_conversation()

    async def _create_conversation(self) -> str:
        if not self._relay_url or not self._app_id:
            raise ConfigError("Creating a conversation needs relay_url and app_id.")
        url = self._relay_url + P.HTTP_CREATE_CONVERSATION.format(app_id=self._app_id)
        status, body = await self._http("POST", url, {})
        if status != 201 or not isinstance(body, dict) or not isinstance(body.get("url"), str):
            raise _http_error(status, body, f"Creating a conversation at {url} failed")
        self.storage[storage_key(self._app_id)] = body["url"]
        return body["url"]

    async def _get_conversation(self, url: str) -> dict[str, Any] | None:
        status, body = await self._http("GET", url)
        if status == 404:
            return None
        if status != 200 or not isinstance(body, dict):
            raise _http_error(status, body, f"Reading the conversation at {url} failed")
        for key in ("relay_url", "token", "conversation"):
            if key not in body:
                raise ProtocolError(P.ERR_BAD_REQUEST, f"The relay's conversation response lacks {key!r}.")
        return body

    async def _http(self, method: str, url: str, body: Any = None) -> tuple[int, Any]:
        try:
            return await self._with_timeout(
                self.transport.request(method, url, body, self.headers or None), f"{method} {url}"
            )
        except TransportError as exc:
            raise ConnectionFailed(f"Cannot reach the relay: {exc}") from exc

    def _load_conversation(self, info: dict[str, Any]) -> None:
        self.conversation = info["conversation"]
        self.session.load(info.get("messages") or [])
        self.seq.reset(int(self.conversation.get("seq") or 0))
        self._set_pending_ask_user(info.get("pending_ask_user") or [])
        self.events.emit("conversationLoaded", {"conversation": self.conversation, "messages": self.session.messages})

    async def _join(self, info: dict[str, Any]) -> None:
        loop = self._loop()
        if self._state_waiter is not None and not self._state_waiter.done():
            self._state_waiter.cancel()  # a join still waiting is superseded by this one
        waiter: asyncio.Future[Any] = loop.create_future()
        self._state_waiter = waiter
        ack = await self._with_timeout(
            self.transport.emit(
                P.EV_JOIN, {"token": info["token"], "version": P.PROTOCOL_VERSION, "last_seq": self.seq.last_seq}
            ),
            "The relay did not answer join",
        )
        if not isinstance(ack, dict) or not ack.get("ok"):
            err = ack.get("error", {}) if isinstance(ack, dict) else {}
            raise ProtocolError(err.get("code", P.ERR_INTERNAL), err.get("message", "join refused"))
        snapshot = await self._with_timeout(waiter, "The relay sent no state snapshot")
        if self._state_waiter is waiter:
            self._state_waiter = None
        self.active = bool(ack.get("active", True))
        self.state.snapshot(snapshot.get("functions"), snapshot.get("context"))
        self._joined_once = True
        self._joined = True
        # The role is known before the state change is announced, so views never see "connected, read-only".
        self._set_connection_state(CONNECTED_STATE)
        self.events.emit("joined", {"conversation_id": ack.get("conversation_id"), "active": self.active})
        if self.active:
            # Results the relay has not taken go out first: after a relay restart they are what keeps a call
            # from being run a second time.
            self._resend_outbox()
            ok = await self._flush_now()
            if not ok and self.state.base is not None:
                log.warning("initial state sync was not acknowledged")
            self._run_pending_calls(ack)
        self.events.emit("ready", {"conversation": self.conversation})

    def _run_pending_calls(self, ack: dict[str, Any]) -> None:
        """Run the calls a join or an activate hands to this client (each at most once)."""
        for call in ack.get("pending_calls") or []:
            if isinstance(call, dict):
                self._spawn(self._run_call(call))

    async def _rejoin(self) -> None:
        if self._closing or self.conversation_url is None:
            return
        try:
            info = await self._get_conversation(self.conversation_url)
            if info is None:
                raise ProtocolError(P.ERR_NOT_FOUND, "The conversation no longer exists.")
            self.conversation = info["conversation"]
            await self._join(info)
        except WidgetError as exc:
            err = _error_payload(exc)
            self._set_connection_state(ERROR, err)
            self.events.emit("error", err)

    def _clear_outbox(self) -> None:
        for entry in self._outbox.values():
            if entry.retry is not None:
                entry.retry.cancel()
        self._outbox.clear()

    async def _quiet_disconnect(self) -> None:
        self._closing = True
        try:
            await self.transport.disconnect()
        except Exception:  # noqa: BLE001 - best effort on an already failed connection
            pass

    async def disconnect(self) -> None:
        """Close the connection; pending holds and gates settle, history is kept."""
        self._closing = True
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        await self.transport.disconnect()
        for fut in list(self._patch_acks.values()):
            if not fut.done():
                fut.set_result(False)
        for task in list(self._tasks):
            task.cancel()
        for entry in self._outbox.values():
            if entry.retry is not None:
                entry.retry.cancel()
                entry.retry = None
        self.state.disconnected()
        self.active = False
        self._set_connection_state(DISCONNECTED_STATE)

    # ------------------------------------------------------------------ incoming
    def _on_transport_event(self, event: str, data: Any) -> None:
        if event in (CONNECTED, DISCONNECTED):
            self._joined = False
        if event == CONNECTED:
            if self._joined_once and not self._closing:
                self._spawn(self._rejoin())
            return
        if event == DISCONNECTED:
            self.state.disconnected()
            self.active = False
            if not self._closing:
                self._set_connection_state(RECONNECTING)
            return
        if event == P.EV_STATE:
            if self._state_waiter is not None and not self._state_waiter.done():
                self._state_waiter.set_result(data if isinstance(data, dict) else {})
            return
        if event == P.EV_CLIENT_ROLE:
            self.active = bool(isinstance(data, dict) and data.get("active"))
            self.events.emit("roleChanged", {"active": self.active})
            return
        if event in P.SEQUENCED_EVENTS:
            self._on_sequenced(event, data)
            return
        log.debug("unhandled relay event %r", event)

    def _on_sequenced(self, event: str, data: Any) -> None:
        if not isinstance(data, dict):
            log.warning("relay event %r ignored: payload is not an object", event)
            return
        verdict = self.seq.classify(data.get("seq"))
        if verdict == DUPLICATE:
            return
        if verdict == GAP:
            self._request_replay()
            return
        if event == P.EV_MESSAGE:
            message = data.get("message")
            if isinstance(message, dict):
                self.session.add_message(message)
                self._action_recorded(message)
        elif event == P.EV_MESSAGES_WITHDRAWN:
            ids = data.get("message_ids")
            self.session.withdraw(ids if isinstance(ids, list) else [])
        elif event == P.EV_ASK_USER_REQUEST:
            prompts = data.get("prompts")
            self._set_pending_ask_user(prompts if isinstance(prompts, list) else [])
        elif event != P.EV_USER_INPUT:
            self.session.handle(event, data)
            if event == P.EV_COMPLETION_ENDED:
                self._record_offers(data.get("message"))
        if event == P.EV_FUNCTION_CALL_BEGIN and data.get("run") is True and self.active:
            self._spawn(self._run_call(data))
        elif event == P.EV_FUNCTION_CALL_END:
            self._mark_call_ended(data.get("id"))
        self.events.emit(event, data)
        self.events.emit("messagesChanged", None)

    def _request_replay(self) -> None:
        if self._replay_pending or not self.transport.connected:
            return
        self._replay_pending = True

        async def replay() -> None:
            try:
                await self.transport.emit(P.EV_REPLAY, {"last_seq": self.seq.last_seq})
            except TransportError as exc:
                log.warning("replay request failed: %s", exc)
            finally:
                self._replay_pending = False

        self._spawn(replay())

    # ------------------------------------------------------------------ user input
    def _key(self, kind: str) -> str:
        return f"{kind}{self._instance}-{next(self._keys)}"

    async def send_message(self, text: str) -> str:
        """Send a user message; returns its id (ProtocolError when the relay refuses it)."""
        if not isinstance(text, str) or not text.strip():
            raise ConfigError("A message needs some text.")
        if len(text) > P.MAX_USER_MESSAGE_CHARS:
            raise ProtocolError(
                P.ERR_MESSAGE_TOO_LONG,
                f"The message is {len(text)} characters; the limit is {P.MAX_USER_MESSAGE_CHARS}.",
            )
        if self.state.is_dirty() and self._can_send():
            # The model answers from the state the page had when the reader sent the message: a function
            # registered or context set just before must not lose the race against its debounce.
            timeout = self._opts["sync_state_before_function_response_timeout_ms"] / 1000
            try:
                await asyncio.wait_for(asyncio.shield(self._flush_now()), timeout)
            except asyncio.TimeoutError:
                log.warning("state not acknowledged before the message; sending it anyway")
        ack = await self._emit_checked(P.EV_USER_MESSAGE, {"text": text, "idempotency_key": self._key("m")})
        return str(ack.get("message_id", ""))

    async def cancel(self) -> bool:
        """Stop the running completion; True when one was cancelled."""
        ack = await self._emit_checked(P.EV_CANCEL, {"idempotency_key": self._key("c")})
        return bool(ack.get("cancelled"))

    async def retry(self) -> None:
        """Go on with the conversation's failed turn (ProtocolError ``nothing_to_retry`` when none failed)."""
        await self._emit_checked(P.EV_RETRY, {"idempotency_key": self._key("r")})

    async def regenerate(self) -> None:
        """Replace the last assistant answer with a new one."""
        await self._emit_checked(P.EV_REGENERATE, {"idempotency_key": self._key("g")})

    async def activate(self) -> None:
        """Make this client the active one ("use here")."""
        ack = await self._emit_checked(P.EV_ACTIVATE, {})
        self.active = True
        self.events.emit("roleChanged", {"active": True})
        self.state.mark_all_due()
        self._schedule_flush()
        self._resend_outbox()
        self._run_pending_calls(ack)

    async def _emit_checked(self, event: str, payload: dict[str, Any]) -> dict[str, Any]:
        if not self.transport.connected:
            raise ConnectionFailed("Not connected to the relay.")
        ack = await self.transport.emit(event, payload)
        if not isinstance(ack, dict) or not ack.get("ok"):
            err = ack.get("error", {}) if isinstance(ack, dict) else {}
            raise ProtocolError(err.get("code", P.ERR_INTERNAL), err.get("message", f"{event} refused"))
        return ack

    # ------------------------------------------------------------------ ask user
    def get_pending_ask_user(self) -> list[dict[str, Any]]:
        """Prompts the model is waiting on."""
        return [dict(p) for p in self.pending_ask_user]

    def _set_pending_ask_user(self, prompts: list[dict[str, Any]]) -> None:
        had = bool(self.pending_ask_user)
        self.pending_ask_user = [p for p in prompts if isinstance(p, dict)]
        if self.pending_ask_user:
            self.events.emit("askUserRequired", {"prompts": self.get_pending_ask_user()})
        elif had:
            self.events.emit("askUserCleared", None)

    async def respond_to_ask_user(self, answers: dict[str, Any] | list[dict[str, Any]]) -> dict[str, Any]:
        """Post answers to every pending prompt; returns the conversation response."""
        from .core.ask_user import check_answers

        answer_list = [answers] if isinstance(answers, dict) else list(answers)
        check_answers(self.pending_ask_user, answer_list)
        if self.conversation is None or self.conversation_url is None:
            raise ConnectionFailed("Not connected to a conversation.")
        url = self.conversation_url.rstrip("/") + "/ask_user"
        status, body = await self._http(
            "POST", url, {"answers": answer_list, "idempotency_key": self._key("a")}
        )
        if status != 200 or not isinstance(body, dict):
            raise _http_error(status, body, "Answering the prompts failed")
        self._set_pending_ask_user(body.get("pending_ask_user") or [])
        return body

    # ------------------------------------------------------------------ conversation
    @property
    def messages(self) -> list[dict[str, Any]]:
        """Committed messages of the conversation."""
        return self.session.messages

    async def new_conversation(self) -> dict[str, Any]:
        """Start a fresh conversation for this app (D2 "New chat") and connect to it."""
        if not self._relay_url or not self._app_id:
            raise ConfigError("new_conversation() needs a client connected with relay_url and app_id.")
        await self._quiet_disconnect()
        self.storage.pop(storage_key(self._app_id), None)
        self._joined_once = False
        self._started_calls.clear()
        self._clear_outbox()
        self.state.disconnected()
        return await self.connect(relay_url=self._relay_url, app_id=self._app_id, **self._connect_options)


class _CallEnded(Exception):
    """The relay ended a call while it waited for the reader's confirmation."""


async def _prefetch_modules(names: tuple[str, ...]) -> None:
    """In the browser build, fetch the lazily loaded zip holding these modules without blocking the page (the
    import would otherwise fetch it synchronously); elsewhere nothing to do."""
    try:
        import _autopilot_stdlib  # written by build.py into the browser's stdlib zip
    except ImportError:
        return
    await _autopilot_stdlib.prefetch(names)


def _error_payload(exc: WidgetError) -> dict[str, Any]:
    """The ``error`` event payload: a code and a message a reader can act on."""
    return {"code": getattr(exc, "code", "connection_failed"), "message": getattr(exc, "message", None) or str(exc)}


def _http_error(status: int, body: Any, what: str) -> WidgetError:
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return ProtocolError(str(err.get("code", "http_error")), f"{what}: {err.get('message', status)}")
    return ProtocolError("http_error", f"{what}: HTTP {status}")

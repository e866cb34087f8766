"""Running a page function call for ``AutopilotClient``: the argument check, the reader's confirmation of a
sensitive function, the handler, and leaving the page after the response (``Navigate``).

What happens to the result - withholding, sending, resending, the history - is decided by the sans-I/O session
(``widget.core.session``); this module only does what needs page code and awaiting.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from . import protocol as P
from .protocol import ClientEvent, ConfirmationDecision, ConfirmationReason
from .core.mcp_names import is_mcp_name
from .core.pyfunctions import handler_error
from .core.registry import FunctionRegistry
from .core.state import to_json_value
from .core.validation import needs_validator, prefetch_checker, validate_arguments
from .env import PageEnv
from .errors import ConfigError

if TYPE_CHECKING:
    from .core.events import Emitter
    from .core.effects import CallToRun
    from .core.session import ClientSession, Effect
    from .core.tools import ToolSpec

log = logging.getLogger("widget")

ConfirmationHandler = Callable[[dict[str, Any]], "str | Awaitable[str]"]
#: What running a call gives: status, the JSON result (or a ``Navigate``), the error text.
Outcome = tuple[str, Any, "str | None"]


class Navigate:
    """Return this from a handler that leaves the page: the response goes out, the relay acknowledges it, then the
    page navigates to ``url`` - so a multi-page site never loses the call's result."""

    def __init__(self, url: str, result: Any = None, *, ack_timeout_s: float = 10.0) -> None:
        if not isinstance(url, str) or not url:
            raise ConfigError("Navigate needs a URL.")
        self.url = url
        self.result = result if result is not None else f"Navigating to {url}."
        self.ack_timeout_s = ack_timeout_s


#: The limit of a call answered on the page, by the entry's kind, as the relay's calls have it: a function's 30 s
#: include the reader's confirmation; a tool's 10 s are its own (``_execute_tool``); an action waits for the reader
#: as long as a sensitive function may, then runs within the tools' 10 s.
LOCAL_LIMITS_S: dict[str, float | None] = {P.KIND_FUNCTION: P.FUNCTION_CALL_TIMEOUT_S, P.KIND_TOOL: None,
                                           P.KIND_ACTION: P.FUNCTION_CALL_TIMEOUT_S}


class _CallEnded(Exception):
    """The relay ended a call while it waited for the reader's confirmation."""


def unwrap_navigate(
    name: str, status: str, result: Any, error: str | None
) -> tuple[str, Any, str | None, Navigate | None]:
    """A handler's outcome with a ``Navigate`` taken apart: ``(status, JSON result, error, the navigation or None)``
    (a navigation's result that is not JSON turns the call into an error)."""
    if status != P.STATUS_SUCCESS or not isinstance(result, Navigate):
        return status, result, error, None
    try:
        return status, to_json_value(result.result, f"The result of {name!r}"), error, result
    except TypeError as exc:
        return P.STATUS_ERROR, None, str(exc), result


class CallsMixin:
    """Page-function execution of ``AutopilotClient`` (see ``widget.client``)."""

    registry: FunctionRegistry
    env: PageEnv | None
    events: Emitter
    core: ClientSession
    _tools: dict[str, ToolSpec]
    _confirmation_handler: ConfirmationHandler | None
    _ended_calls: dict[str, asyncio.Future[None]]
    #: Calls whose page is left once the relay took their response (resolved by ``functionResponseSent``).
    _delivered: dict[str, asyncio.Future[None]]
    _clock: Callable[[], float]
    _wall: Callable[[], float]

    if TYPE_CHECKING:  # provided by the client and the tools mixin

        def _apply(self, effects: list[Effect]) -> None: ...

        async def _execute_tool(self, request: dict[str, Any], spec: ToolSpec, *, confirm: bool = False) -> Outcome: ...

    # ------------------------------------------------------------------ confirmation
    def set_confirmation_handler(self, handler: ConfirmationHandler | None) -> None:
        """One handler per client deciding 'allow' or 'deny' for sensitive calls; None clears it."""
        if handler is not None and not callable(handler):
            raise ConfigError("Confirmation handler must be callable or None.")
        self._confirmation_handler = handler

    @property
    def confirmation_handler(self) -> ConfirmationHandler | None:
        """The handler set by ``set_confirmation_handler`` (None: sensitive calls are denied)."""
        return self._confirmation_handler

    async def _confirm(self, request: dict[str, Any]) -> ConfirmationDecision:
        """Ask the confirmation handler; deny on no handler, an exception, any other answer, or once the relay
        has ended the call (timed out or cancelled): a late 'allow' never runs it."""
        self.events.emit(ClientEvent.FUNCTION_CONFIRMATION_REQUIRED, {"request": request})
        decision, reason = ConfirmationDecision.DENY, ConfirmationReason.NO_HANDLER
        handler = self._confirmation_handler
        ended = self._call_ended_future(request["id"])
        if handler is not None:
            try:
                value = handler(request)
                if inspect.isawaitable(value):
                    answer: asyncio.Future[Any] = asyncio.ensure_future(value)
                    waits: set[asyncio.Future[Any]] = {answer, ended}
                    done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                    if answer not in done:
                        answer.cancel()
                        raise _CallEnded()
                    value = answer.result()
                if ended.done():
                    raise _CallEnded()
                if value == ConfirmationDecision.ALLOW:
                    decision, reason = ConfirmationDecision.ALLOW, ConfirmationReason.ALLOWED
                else:
                    decision, reason = ConfirmationDecision.DENY, ConfirmationReason.DENIED
            except _CallEnded:
                decision, reason = ConfirmationDecision.DENY, ConfirmationReason.EXPIRED
            except Exception as exc:  # noqa: BLE001 - fail closed
                log.warning("confirmation handler raised, denying: %r", exc)
                decision, reason = ConfirmationDecision.DENY, ConfirmationReason.HANDLER_ERROR
        self.events.emit(
            ClientEvent.FUNCTION_CONFIRMATION_RESOLVED, {"request": request, "decision": decision, "reason": reason}
        )
        return decision

    def _call_ended_future(self, call_id: str) -> asyncio.Future[None]:
        fut = self._ended_calls.get(call_id)
        if fut is None:
            fut = asyncio.get_event_loop().create_future()
            self._ended_calls[call_id] = fut
        return fut

    def _mark_call_ended(self, call_id: str) -> None:
        fut = self._call_ended_future(call_id)
        if not fut.done():
            fut.set_result(None)

    # ------------------------------------------------------------------ running a call
    async def _run_call(self, call: CallToRun) -> None:
        call_id, name, args = call["id"], call["name"], call["arguments"]
        status, result, error, navigate = await self._call_through(call_id, name, args, self._execute)
        self._apply(self.core.call_settled(call_id, status, result, error, self._clock()))
        if navigate is not None:
            await self._navigate_after_ack(call_id, navigate)

    async def answer_call_locally(self, call_id: str, name: str, args: Any) -> Outcome:
        """Run a call that came from the page itself (an agent in the browser, not the relay) through the same path
        as the relay's calls - record, events, argument check, the reader's confirmation, handler, time limit -
        and answer it here: nothing goes to the relay. An action (which the relay never calls) runs after the
        reader's confirmation. ``(status, JSON result, error)``; a ``Navigate`` leaves the page just after."""
        definition = self.registry.get(name)
        limit = LOCAL_LIMITS_S.get(definition.kind if definition else P.KIND_FUNCTION, P.FUNCTION_CALL_TIMEOUT_S)

        async def execute(request: dict[str, Any]) -> Outcome:
            if definition is not None and definition.kind == P.KIND_ACTION:
                run = self._execute_tool(request, self._tools[name], confirm=True)
            else:
                run = self._execute(request)
            try:
                return await asyncio.wait_for(run, limit)
            except asyncio.TimeoutError:
                return P.STATUS_ERROR, None, f"The page did not answer within {limit or 0:g} s."

        status, result, error, navigate = await self._call_through(call_id, name, args, execute)
        self._apply(self.core.local_call_settled(call_id, status, result, error, self._clock()))
        if navigate is not None and self.env is not None:
            env, url = self.env, navigate.url
            asyncio.get_event_loop().call_later(0.05, lambda: env.navigate(url))  # after the answer is handed out
        return status, result, error

    async def _call_through(
        self, call_id: str, name: str, args: Any, execute: Callable[[dict[str, Any]], Awaitable[Outcome]]
    ) -> tuple[str, Any, str | None, Navigate | None]:
        """One call's record, argument check and ``execute``; its outcome with a ``Navigate`` taken apart."""
        request, effects = self.core.call_received(call_id, name, args, self._wall() * 1000)
        self._apply(effects)
        try:
            # Checking the arguments may first load the schema validator (a lazily fetched module in the
            # browser): that is the widget's cost, not the handler's, so the clocks start once the call can run.
            refused = await self._check_call(request)
            self.core.call_ready(call_id, self._clock(), self._wall() * 1000)
            status, result, error = refused if refused is not None else await execute(request)
        except asyncio.CancelledError:
            self.core.call_forgotten(call_id)
            raise
        finally:
            self._ended_calls.pop(call_id, None)
        return unwrap_navigate(name, status, result, error)

    async def _navigate_after_ack(self, call_id: str, navigate: Navigate) -> None:
        # Until the relay has the response, leaving the page would lose it: wait for it (a resend after a
        # reconnect included) up to the limit, then go anyway - the reader asked to go.
        if call_id in self.core.outbox:
            delivered = self._delivered.setdefault(call_id, asyncio.get_event_loop().create_future())
            try:
                await asyncio.wait_for(asyncio.shield(delivered), navigate.ack_timeout_s)
            except asyncio.TimeoutError:
                log.warning("navigating before the relay acknowledged call %s", call_id)
            finally:
                self._delivered.pop(call_id, None)
        if self.env is None:
            log.error("cannot navigate to %s: no page environment", navigate.url)
            return
        self.env.navigate(navigate.url)

    async def _check_call(self, request: dict[str, Any]) -> Outcome | None:
        """Why the call cannot run (the error response), or None when it can."""
        name = request["name"]
        definition = self.registry.get(name)
        if definition is None and is_mcp_name(name):
            return None  # the relay asks the reader to confirm a sensitive MCP server tool
        if definition is None:
            return P.STATUS_ERROR, None, f"Unknown function: {name!r} is not registered on this page."
        if definition.kind != P.KIND_FUNCTION:
            return None  # tools check their own arguments; actions are refused by _execute
        if needs_validator(definition.parameters):
            await prefetch_checker()
        problem = validate_arguments(definition.parameters, request["arguments"])
        if problem is not None:
            return P.STATUS_ERROR, None, f"Invalid arguments for {name!r}: {problem}"
        return None

    async def _execute(self, request: dict[str, Any]) -> Outcome:
        name = request["name"]
        definition = self.registry.get(name)
        if definition is None and is_mcp_name(name):  # the relay runs it once the reader allows it
            allowed = await self._confirm(request) == ConfirmationDecision.ALLOW
            if allowed:
                return P.STATUS_SUCCESS, ConfirmationDecision.ALLOW.value, None
            return P.STATUS_ERROR, None, P.MSG_SENSITIVE_DENIED
        if definition is None:
            return P.STATUS_ERROR, None, f"Unknown function: {name!r} is not registered on this page."
        if definition.kind == P.KIND_TOOL:
            return await self._execute_tool(request, self._tools[name])
        if definition.kind == P.KIND_ACTION:
            return P.STATUS_ERROR, None, f"{name!r} is an action: the model may offer it, never call it."
        args = request["arguments"]
        if definition.sensitive:
            if await self._confirm(request) != ConfirmationDecision.ALLOW:
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

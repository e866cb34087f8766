"""The reader's confirmation of a sensitive call: one handler per client answers 'allow' or 'deny'; no handler, an
exception, any other answer, or the relay ending the call first (timed out, cancelled) means deny."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..core.events import Emitter
from ..errors import ConfigError
from ..protocol import ClientEvent, ConfirmationDecision, ConfirmationReason

log = logging.getLogger("widget")

ConfirmationHandler = Callable[[dict[str, Any]], "str | Awaitable[str]"]


class _CallEnded(Exception):
    """The relay ended a call while it waited for the reader's confirmation."""


class Confirmation:
    """The confirmation handler and the calls the relay ended while one may wait on it."""

    def __init__(self, events: Emitter) -> None:
        self._events = events
        self.handler: ConfirmationHandler | None = None
        #: Resolved when the relay ends the call of that id (a pending answer is then void).
        self.ended: dict[str, asyncio.Future[None]] = {}

    def set_handler(self, handler: ConfirmationHandler | None) -> None:
        """See ``AutopilotClient.set_confirmation_handler``."""
        if handler is not None and not callable(handler):
            raise ConfigError("Confirmation handler must be callable or None.")
        self.handler = handler

    async def confirm(self, request: dict[str, Any]) -> ConfirmationDecision:
        """Ask the confirmation handler; deny on no handler, an exception, any other answer, or once the relay
        has ended the call (timed out or cancelled): a late 'allow' never runs it."""
        self._events.emit(ClientEvent.FUNCTION_CONFIRMATION_REQUIRED, {"request": request})
        decision, reason = ConfirmationDecision.DENY, ConfirmationReason.NO_HANDLER
        handler = self.handler
        ended = self._ended_future(request["id"])
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
        self._events.emit(
            ClientEvent.FUNCTION_CONFIRMATION_RESOLVED, {"request": request, "decision": decision, "reason": reason}
        )
        return decision

    def _ended_future(self, call_id: str) -> asyncio.Future[None]:
        fut = self.ended.get(call_id)
        if fut is None:
            fut = asyncio.get_event_loop().create_future()
            self.ended[call_id] = fut
        return fut

    def call_ended(self, call_id: str) -> None:
        """The relay ended the call (the session's ``EndCall``): a confirmation still pending is void."""
        fut = self._ended_future(call_id)
        if not fut.done():
            fut.set_result(None)

    def forget(self, call_id: str) -> None:
        """The call is over here: nothing waits for its end any more."""
        self.ended.pop(call_id, None)

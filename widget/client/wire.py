"""The client's two ways of asking the relay something: an HTTP request (with the page's headers, within the step
timeout) and a socket emit whose acknowledgement may refuse (``emit_checked``). Both turn failures into the
widget's errors (``ConnectionFailed``, ``ProtocolError``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from .. import protocol as P
from ..errors import ConnectionFailed, ProtocolError, WidgetError
from ..transports.base import Transport, TransportError

T = TypeVar("T")


class Wire:
    """HTTP requests and checked emits over one transport."""

    def __init__(self, transport: Transport, headers: dict[str, str], step_timeout_s: float) -> None:
        self.transport = transport
        #: Sent with every HTTP request (e.g. ``Authorization: Bearer <app secret>`` from a backend).
        self.headers = headers
        self.step_timeout_s = step_timeout_s

    async def within_step(self, aw: Awaitable[T], what: str) -> T:
        """``aw``'s value, or ``ConnectionFailed`` saying ``what`` got no answer within the step timeout."""
        try:
            return await asyncio.wait_for(aw, self.step_timeout_s)
        except TimeoutError:
            raise ConnectionFailed(f"{what}: no answer within {self.step_timeout_s:g} s.") from None

    async def http(self, method: str, url: str, body: Any = None) -> tuple[int, Any]:
        """One HTTP request: ``(status, parsed JSON body)``; ``ConnectionFailed`` when the relay cannot be reached."""
        try:
            return await self.within_step(
                self.transport.request(method, url, body, self.headers or None), f"{method} {url}"
            )
        except TransportError as exc:
            raise ConnectionFailed(f"Cannot reach the relay: {exc}") from exc

    async def emit_checked(self, event: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Emit ``event`` and return its acknowledgement; ``ProtocolError`` when the relay refused it."""
        if not self.transport.connected:
            raise ConnectionFailed("Not connected to the relay.")
        ack = await self.transport.emit(event, payload)
        refused = P.refusal_of(ack, f"{event} refused")
        if refused is not None:
            raise ProtocolError(refused.code, refused.message)
        accepted: dict[str, Any] = ack  # refusal_of accepts only a dict with ok: true
        return accepted


def http_error(status: int, body: Any, what: str) -> WidgetError:
    """The error of a failed HTTP step: the relay's ``{error: {code, message}}`` when it sent one."""
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return ProtocolError(str(err.get("code", "http_error")), f"{what}: {err.get('message', status)}")
    return ProtocolError("http_error", f"{what}: HTTP {status}")


def error_payload(exc: WidgetError) -> dict[str, Any]:
    """The ``error`` event payload: a code and a message a reader can act on."""
    payload: dict[str, Any] = {
        "code": getattr(exc, "code", "connection_failed"),
        "message": getattr(exc, "message", None) or str(exc),
    }
    retry_after = getattr(exc, "retry_after", None)
    if isinstance(retry_after, float):
        payload["retry_after"] = retry_after  # how long a rate_limited refusal asks to wait, seconds
    return payload

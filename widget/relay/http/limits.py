"""Bounds on the relay's HTTP edge: what one client can hold of the process before any route runs.

- ``BodyLimit`` (ASGI): a request body over its limit is refused by ``Content-Length`` before any of it is read,
  and cut while streaming when the length is absent or lies: 413 ``body_too_large``; the route sees a disconnect.
  What the client still sends is read and dropped until the body deadline (closing at once would reset the
  connection and lose the 413 on its way). Memory per request stays at one read chunk (uvicorn pauses reading
  at 64 KB).
- ``GuardedH11Protocol`` (uvicorn's HTTP/1.1 protocol): request headers must arrive within a deadline counted from
  the request's first byte (or from the connection for one that sends nothing), a body within its own deadline
  after the headers, idle keep-alive connections close (uvicorn's keep-alive timeout); open connections are capped
  per client address and in all (a connection over a cap gets a 503 and is closed before anything is read). A
  WebSocket connection counts until it closes.
- ``LogStormFilter``: one log line per cause per interval, then a count of the lines it held back; a failed
  ``accept()`` (the descriptor limit) is one line without a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from ... import protocol as P

log = logging.getLogger("widget.relay.http")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def json_error_bytes(code: str, message: str) -> bytes:
    """The relay's JSON error body (``{"ok": false, "error": {"code", "message"}}``) as bytes."""
    return json.dumps(P.error(code, message)).encode("utf-8")


# ---------------------------------------------------------------------------------------------
# Request bodies


class BodyLimit:
    """ASGI middleware: refuse HTTP request bodies over ``limit_for(path)`` bytes without reading them whole."""

    def __init__(self, app: Any, limit_for: Callable[[str], int]) -> None:
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope.get("path", ""))
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _send_too_large(send, limit, declared)
            return
        state = {"read": 0, "refused": False, "started": False}

        async def limited_receive() -> Message:
            if state["refused"]:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                state["read"] += len(message.get("body") or b"")
                if state["read"] > limit:
                    state["refused"] = True
                    if not state["started"]:
                        state["started"] = True
                        await _send_too_large(send, limit, None)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            if state["refused"]:
                return  # the 413 went out; the route's own answer is dropped
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not state["refused"]:
                raise
            # The route failed on the disconnect it was handed after the 413: nothing to report.


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # h11 refuses such a request before it gets here
    return None


async def _send_too_large(send: Send, limit: int, declared: int | None) -> None:
    size = f"{declared} bytes" if declared is not None else "more"
    body = json_error_bytes(P.ErrorCode.BODY_TOO_LARGE,
                            f"The request body is {size}; at most {limit} bytes are accepted here.")
    await send({"type": "http.response.start", "status": 413, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store")]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


# ---------------------------------------------------------------------------------------------
# Connections


@dataclass
class EdgeSettings:
    """The connection bounds of one server (from ``RelayConfig``)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections_per_address: int = 256
    #: 0: no cap of the process's own (the descriptor limit is the cap)
    max_connections: int = 0
    #: addresses whose connections are not capped per address (a reverse proxy in front carries many clients)
    uncapped_addresses: frozenset[str] = frozenset()


class ConnectionGuard:
    """Counts a server's open connections (HTTP and WebSocket) per client address and in all."""

    def __init__(self, settings: EdgeSettings) -> None:
        self.settings = settings
        self.by_address: dict[str, set[Any]] = {}
        self.count = 0
        self.refused = 0

    def admit(self, address: str, transport: Any) -> str | None:
        """Count a new connection, or say why it is refused (nothing counted)."""
        s = self.settings
        if s.max_connections > 0 and self.count >= s.max_connections:
            self.refused += 1
            return f"the relay has {self.count} connections open, its limit (max_connections)"
        mine = self.by_address.get(address)
        if (mine is not None and address not in s.uncapped_addresses and s.max_connections_per_address > 0
                and len(mine) >= s.max_connections_per_address):
            self.refused += 1
            return (f"{len(mine)} connections are open from {address}, the limit per address "
                    f"(max_connections_per_address)")
        if mine is None:
            mine = self.by_address[address] = set()
        mine.add(transport)
        self.count += 1
        return None

    def release(self, address: str, transport: Any) -> None:
        """A counted connection closed (once per connection; later calls do nothing)."""
        mine = self.by_address.get(address)
        if mine is None or transport not in mine:
            return
        mine.discard(transport)
        self.count -= 1
        if not mine:
            del self.by_address[address]


class GuardedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with connection caps and header/body deadlines (see the module doc). Bind a
    guard with :func:`protocol_for`."""

    guard: ConnectionGuard

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._timer: asyncio.TimerHandle | None = None
        self._phase = "headers"
        self._address = self.client[0] if self.client else "?"
        refused = self.guard.admit(self._address, transport)
        self._counted = refused is None
        if refused is not None:
            log.warning("refusing a connection: %s", refused)
            body = json_error_bytes(P.ErrorCode.TOO_MANY_CONNECTIONS,
                                    f"Too many connections: {refused}. Close some and retry.")
            transport.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                            b"retry-after: 5\r\nconnection: close\r\ncontent-length: " + str(len(body)).encode()
                            + b"\r\n\r\n" + body)
            transport.close()
            return
        # A connection that sends nothing is closed at the header deadline too.
        self._arm(self.guard.settings.header_timeout_s, "headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._counted:
            self.guard.release(self._address, self.transport)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._counted:
            return
        if self._phase == "idle":  # the first bytes of the next request on a kept-alive connection
            self._phase = "headers"
            self._arm(self.guard.settings.header_timeout_s, "headers")
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def handle_websocket_upgrade(self, event: Any) -> None:
        self._disarm()
        transport, address = self.transport, self._address
        super().handle_websocket_upgrade(event)
        self._counted = False  # the WebSocket protocol now owns the connection; it releases it
        ws = transport.get_protocol()
        lost = ws.connection_lost

        def connection_lost(exc: Exception | None) -> None:
            self.guard.release(address, transport)
            lost(exc)

        ws.connection_lost = connection_lost  # type: ignore[method-assign]  # uvicorn has no hook for this

    def _follow(self) -> None:
        """Move the deadline with the request's progress (after h11 has read what arrived)."""
        if self.transport.is_closing() or self.transport.get_protocol() is not self:
            return
        cycle = self.cycle
        if cycle is None:
            return  # the first request's headers: their deadline runs
        if cycle.response_complete:
            if cycle.more_body and self._phase == "body":
                return  # answered early (a refused body): the rest is read and dropped until the body deadline
            if self._phase in ("body", "app"):
                self._phase = "idle"  # uvicorn's keep-alive timeout closes an idle connection
                self._disarm()
            return  # "headers" of the next request keep their deadline
        if cycle.more_body:
            if self._phase != "body":
                self._phase = "body"
                self._arm(self.guard.settings.body_timeout_s, "body")
        elif self._phase != "app":
            self._phase = "app"  # the request is read; the route's time is the route's
            self._disarm()

    def _arm(self, seconds: float, phase: str) -> None:
        self._disarm()
        if seconds > 0:
            self._timer = self.loop.call_later(seconds, self._expired, phase, seconds)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self, phase: str, seconds: float) -> None:
        self._timer = None
        if self._phase != phase or self.transport.is_closing() or self.transport.get_protocol() is not self:
            return
        what = "complete request headers" if phase == "headers" else "the whole request body"
        log.warning("closing a connection from %s: no %s within %g s", self._address, what, seconds)
        self.transport.close()


def protocol_for(guard: ConnectionGuard) -> type[GuardedH11Protocol]:
    """A ``GuardedH11Protocol`` class bound to ``guard`` (uvicorn's ``http=`` takes a class)."""
    return type("BoundGuardedH11Protocol", (GuardedH11Protocol,), {"guard": guard})


# ---------------------------------------------------------------------------------------------
# Log storms


class LogStormFilter(logging.Filter):
    """Lets one record per cause (logger, message template, exception type) through per ``interval_s``; the next
    one let through says how many were held back. A failed ``accept()`` loses its traceback (its cause is one
    line: the descriptor limit)."""

    def __init__(self, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.clock = clock
        #: cause -> (time of the last record let through, records held back since)
        self._seen: dict[tuple[str, str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if self.interval_s <= 0:
            return True
        exc_type = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else ""
        cause = (record.name, str(record.msg)[:200], exc_type)
        now = self.clock()
        last = self._seen.get(cause)
        if last is not None and now - last[0] < self.interval_s:
            self._seen[cause] = (last[0], last[1] + 1)
            return False
        if len(self._seen) > 1000:  # causes are templates: few; forget the old ones if a caller formats its own
            self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self.interval_s}
            if len(self._seen) > 5000:  # a burst of distinct lines: start over rather than grow
                self._seen = {}
        self._seen[cause] = (now, 0)
        if "out of system resource" in str(record.msg) and record.exc_info:
            exc = record.exc_info[1]
            record.msg = f"{record.getMessage()}: {exc} (new connections wait; the descriptor limit is reached)"
            record.args = ()
            record.exc_info = None
            record.exc_text = None
        if last is not None and last[1]:
            record.msg = f"{record.getMessage()} [{last[1]} more like this in the last {now - last[0]:.0f} s]"
            record.args = ()
        return True

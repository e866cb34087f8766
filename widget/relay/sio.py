"""The relay's Socket.IO server: python-socketio's, made strict about malformed packets.

python-socketio / python-engineio raise on a malformed packet (truncated JSON, a packet without an event, an
event name that is not a string, unknown packet types, text nested past the recursion limit, a 5,000-digit
integer, binary junk) inside a background task: a traceback is logged per packet and the socket stays open,
unanswered. Here every such packet closes its connection with one log line (no traceback), before any handler
runs; a well-formed packet goes the library's way unchanged. A long-polling POST over the Engine.IO buffer is
answered 400 at once (the library left it hanging).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import socketio
from engineio import async_socket as eio_socket
from engineio import exceptions as eio_exceptions
from engineio import packet as eio_packet
from socketio import packet as sio_packet

log = logging.getLogger("widget.relay")

_EIO_TYPES = frozenset({eio_packet.PING, eio_packet.PONG, eio_packet.MESSAGE, eio_packet.UPGRADE, eio_packet.CLOSE})


async def _close_now(s: Any) -> None:
    """Close an Engine.IO socket and its transport now: the CLOSE packet, then the end of its send queue (the
    WebSocket writer closes the connection; ``close()`` alone leaves it open until the ping timeout)."""
    if s.closed or s.closing:
        return
    await s.close(wait=False, reason=s.server.reason.SERVER_DISCONNECT)
    await s.queue.put(None)


class _StrictEioSocket(eio_socket.AsyncSocket):  # type: ignore[misc]  # python-socketio ships no types: its classes are Any
    """An Engine.IO socket that closes on a packet type it does not know (the library ignores it silently)."""

    async def receive(self, pkt: Any) -> None:
        if pkt.packet_type not in _EIO_TYPES:
            log.warning("socket %s sent an unknown Engine.IO packet type %r; closing it", self.sid, pkt.packet_type)
            await _close_now(self)
            return
        await super().receive(pkt)

    async def handle_post_request(self, environ: dict[str, Any]) -> None:
        """A long-polling POST over the buffer: the library raises ContentTooLongError and the server then waits
        (``disconnect`` joins the send queue) for a poll that never comes, so the request hangs. Close the socket
        first: the server's handler then answers 400 at once."""
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > self.server.max_http_buffer_size:
            log.warning("socket %s sent a polling POST of %s bytes, over the %d-byte buffer; closing it",
                        self.sid, environ.get("CONTENT_LENGTH"), self.server.max_http_buffer_size)
            await _close_now(self)
            raise eio_exceptions.ContentTooLongError()
        await super().handle_post_request(environ)


class _CheckedPacket(sio_packet.Packet):  # type: ignore[misc]  # python-socketio ships no types: its classes are Any
    """A Socket.IO packet that refuses, while decoding, an event that is not ``[name: str, ...]``."""

    def decode(self, encoded_packet: Any) -> Any:
        count = super().decode(encoded_packet)
        if self.packet_type in (sio_packet.EVENT, sio_packet.BINARY_EVENT) and not (
                isinstance(self.data, list) and self.data and isinstance(self.data[0], str)):
            raise ValueError("an event packet must carry [name, ...data]")
        return count


class RelaySocketServer(socketio.AsyncServer):  # type: ignore[misc]  # python-socketio ships no types: its classes are Any
    """``socketio.AsyncServer`` that closes a connection sending a malformed packet (see the module doc) and
    refuses a new session from an address that already has ``max_sockets_per_address`` of them (WebSocket or
    long-polling alike: a polling session holds no connection between its requests)."""

    #: Engine.IO sessions per client address (0: no cap); set by the relay from its config.
    max_sockets_per_address = 0
    #: Called with an Engine.IO session's id once it has ended (the hub forgets what it kept for it).
    on_connection_closed: Callable[[str], None] | None = None

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("serializer", _CheckedPacket)
        super().__init__(**kwargs)
        self._sessions_of: dict[str, set[str]] = {}
        self._address_of: dict[str, str] = {}

    async def _handle_eio_connect(self, eio_sid: str, environ: dict[str, Any]) -> Any:
        client = (environ.get("asgi.scope") or {}).get("client")
        address = str(client[0]) if client else "?"
        mine = self._sessions_of.get(address, set())
        if self.max_sockets_per_address > 0 and len(mine) >= self.max_sockets_per_address:
            log.warning("refusing a Socket.IO session from %s: %d are open from it (max_sockets_per_address)",
                        address, len(mine))
            # Engine.IO answers 401 with this message and forgets the session.
            return (f"Too many Socket.IO sessions from {address} ({len(mine)}, the limit per address); close some and "
                    "retry.")
        self._sessions_of.setdefault(address, set()).add(eio_sid)
        self._address_of[eio_sid] = address
        s = self.eio.sockets.get(eio_sid)
        if s is not None and type(s) is eio_socket.AsyncSocket:
            s.__class__ = _StrictEioSocket  # before its transport loop reads any packet
        return await super()._handle_eio_connect(eio_sid, environ)

    async def _handle_eio_disconnect(self, eio_sid: str, *args: Any) -> None:
        address = self._address_of.pop(eio_sid, None)
        if address is not None:
            mine = self._sessions_of.get(address)
            if mine is not None:
                mine.discard(eio_sid)
                if not mine:
                    del self._sessions_of[address]
        try:
            await super()._handle_eio_disconnect(eio_sid, *args)
        finally:
            if self.on_connection_closed is not None:
                self.on_connection_closed(eio_sid)

    async def close_connection(self, eio_sid: str, sid: str | None) -> None:
        """Close an Engine.IO connection: the Socket.IO disconnect packet of its namespace (``sid``, when one is
        connected), then the connection itself."""
        if sid is not None:
            try:
                await self.disconnect(sid)
            except Exception as exc:  # noqa: BLE001 - the connection is closed below anyway
                log.warning("could not disconnect socket %s: %s", sid, exc)
        s = self.eio.sockets.get(eio_sid)
        if s is not None:
            await _close_now(s)

    def sessions_from(self, address: str) -> int:
        """How many Engine.IO sessions are open from ``address``."""
        return len(self._sessions_of.get(address, ()))

    async def _handle_eio_message(self, eio_sid: str, data: Any) -> None:
        # The packet is decoded (by _CheckedPacket) and its type checked synchronously in here; handlers run
        # in tasks of their own (async_handlers) and answer their own errors, so what is caught is the packet's.
        try:
            await super()._handle_eio_message(eio_sid, data)
        except (ValueError, TypeError, IndexError, KeyError, AttributeError, RecursionError) as exc:
            await self._refuse(eio_sid, f"a malformed Socket.IO packet ({type(exc).__name__}: {str(exc)[:80]})")

    async def _refuse(self, eio_sid: str, what: str) -> None:
        log.warning("socket %s sent %s; closing it", eio_sid, what)
        s = self.eio.sockets.get(eio_sid)
        if s is not None:
            await _close_now(s)

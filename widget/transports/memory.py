"""An in-memory transport for unit tests: a peer object plays the relay, no sockets involved."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from .base import CONNECTED, DISCONNECTED, EventHandler, TransportError


class MemoryPeer(Protocol):
    """What plays the relay behind a MemoryTransport."""

    async def handle_request(self, method: str, url: str, body: Any) -> tuple[int, Any]:
        """Answer one HTTP request."""
        ...

    async def handle_emit(self, transport: "MemoryTransport", event: str, data: Any) -> Any:
        """Answer one emit with its ack value."""
        ...


class MemoryTransport:
    """Delivers emits to ``peer`` and the peer's events (``deliver``) to the client, on the same loop."""

    def __init__(self, peer: MemoryPeer) -> None:
        self.peer = peer
        self._handler: EventHandler = lambda event, data: None
        self._connected = False
        self.refuse_connect: str | None = None
        self.sent: list[tuple[str, Any]] = []

    def set_handler(self, handler: EventHandler) -> None:
        """Route incoming events to ``handler``."""
        self._handler = handler

    @property
    def connected(self) -> bool:
        """Whether the fake socket is up."""
        return self._connected

    async def request(
        self, method: str, url: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """Forward to the peer."""
        return await self.peer.handle_request(method, url, body)

    async def connect(self, url: str, path: str) -> None:
        """Mark connected (or fail as told by ``refuse_connect``)."""
        if self.refuse_connect:
            raise TransportError(self.refuse_connect)
        self._connected = True
        self._handler(CONNECTED, None)

    async def emit(self, event: str, data: Any, timeout: float | None = None) -> Any:
        """Forward to the peer and return its ack."""
        if not self._connected:
            raise TransportError(f"Cannot emit {event!r}: not connected")
        self.sent.append((event, data))
        await asyncio.sleep(0)
        return await self.peer.handle_emit(self, event, data)

    def deliver(self, event: str, data: Any) -> None:
        """The peer pushes an event to the client."""
        self._handler(event, data)

    def drop(self) -> None:
        """Simulate a dropped connection."""
        self._connected = False
        self._handler(DISCONNECTED, None)

    def restore(self) -> None:
        """Simulate the socket coming back (the client rejoins)."""
        self._connected = True
        self._handler(CONNECTED, None)

    async def disconnect(self) -> None:
        """Close."""
        if self._connected:
            self._connected = False
            self._handler(DISCONNECTED, None)

"""The transport seam between the client runtime and the network.

A transport does HTTP requests and one Socket.IO connection, and reports incoming events through a single
callback. Payloads cross it as plain JSON values (dict/list/str/int/float/bool/None).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..errors import ConnectionFailed

#: Pseudo-events a transport reports besides the relay's own.
CONNECTED = "__connected__"
DISCONNECTED = "__disconnected__"
CONNECT_ERROR = "__connect_error__"

EventHandler = Callable[[str, Any], None]


class TransportError(ConnectionFailed):
    """The network failed under a transport (maps library errors at the adapter)."""


class Transport(Protocol):
    """What the runtime needs from the network."""

    async def request(
        self, method: str, url: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """One HTTP request with a JSON body; returns (status, parsed JSON or None)."""
        ...

    async def connect(self, url: str, path: str) -> None:
        """Open the Socket.IO connection (raises TransportError when it cannot)."""
        ...

    async def emit(self, event: str, data: Any, timeout: float | None = None) -> Any:
        """Emit with an acknowledgement and return the ack value (TransportError on timeout/disconnect)."""
        ...

    def set_handler(self, handler: EventHandler) -> None:
        """Route every incoming event (and the pseudo-events above) to ``handler``."""
        ...

    @property
    def connected(self) -> bool:
        """Whether the socket is up."""
        ...

    async def disconnect(self) -> None:
        """Close the socket for good (no reconnection)."""
        ...

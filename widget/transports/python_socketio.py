"""CPython transport: aiohttp for HTTP and python-socketio's AsyncClient for the relay."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import aiohttp
import socketio

from .base import CONNECT_ERROR, CONNECTED, DISCONNECTED, EventHandler, TransportError


class PythonSocketIOTransport:
    """The transport used under CPython (tests, scripts, bots)."""

    def __init__(self, *, reconnection: bool = True, request_timeout: float = 10.0) -> None:
        self._handler: EventHandler = lambda event, data: None
        self._request_timeout = request_timeout
        self._reconnection = reconnection
        #: (url, path) of the socket while it should be open (None after disconnect())
        self._target: tuple[str, str] | None = None
        self._reconnecting: asyncio.Future[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        self.sio = socketio.AsyncClient(
            reconnection=reconnection,
            reconnection_delay=0.2,
            reconnection_delay_max=2.0,
            randomization_factor=0.2,
        )
        self.sio.on("*", self._on_any)
        self.sio.on("connect", lambda: self._handler(CONNECTED, None))
        self.sio.on("disconnect", self._on_disconnect)
        self.sio.on("connect_error", lambda data=None: self._handler(CONNECT_ERROR, data))

    def _on_disconnect(self, reason: Any = None) -> None:
        self._handler(DISCONNECTED, None)
        # A relay that shuts down sends a Socket.IO disconnect, after which python-socketio does not reconnect by
        # itself: reconnect here (a balancer picks a relay process that runs).
        if reason == self.sio.reason.SERVER_DISCONNECT and self._reconnection and self._target is not None:
            self._reconnecting = asyncio.ensure_future(self._reconnect(*self._target))

    async def _reconnect(self, url: str, path: str) -> None:
        delay = 0.25
        while self._target is not None and not self.sio.connected:
            await asyncio.sleep(delay * (0.5 + random.random()))
            try:
                await self.connect(url, path)
            except TransportError:
                delay = min(delay * 2, 5.0)

    def _on_any(self, event: str, data: Any = None) -> None:
        self._handler(event, data)

    def set_handler(self, handler: EventHandler) -> None:
        """Route incoming events to ``handler``."""
        self._handler = handler

    @property
    def connected(self) -> bool:
        """Whether the socket is up."""
        return bool(self.sio.connected)

    async def request(
        self, method: str, url: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """One JSON HTTP request."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        try:
            async with self._session.request(
                method,
                url,
                json=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self._request_timeout),
            ) as resp:
                try:
                    data = await resp.json(content_type=None)
                except ValueError:
                    data = None
                return resp.status, data
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
            raise TransportError(f"{method} {url} failed: {exc or type(exc).__name__}") from exc

    async def connect(self, url: str, path: str) -> None:
        """Open the socket (WebSocket first, polling fallback)."""
        self._target = (url, path)
        try:
            await self.sio.connect(
                url,
                socketio_path=path,
                transports=["websocket", "polling"],
                wait_timeout=10,
            )
        except (socketio.exceptions.ConnectionError, OSError, ValueError) as exc:
            raise TransportError(f"Socket.IO connection to {url} ({path}) failed: {exc}") from exc

    async def emit(self, event: str, data: Any, timeout: float | None = None) -> Any:
        """Emit and wait for the acknowledgement."""
        try:
            return await self.sio.call(event, data, timeout=timeout or 10)
        except socketio.exceptions.TimeoutError as exc:
            raise TransportError(f"No acknowledgement for {event!r} within {timeout or 10} s") from exc
        except socketio.exceptions.BadNamespaceError as exc:
            raise TransportError(f"Cannot emit {event!r}: not connected") from exc
        except socketio.exceptions.SocketIOError as exc:
            raise TransportError(f"Emit {event!r} failed: {exc}") from exc

    async def disconnect(self) -> None:
        """Close the socket and the HTTP session."""
        self._target = None
        if self._reconnecting is not None and self._reconnecting is not asyncio.current_task():
            self._reconnecting.cancel()
        try:
            await self.sio.disconnect()
        finally:
            if self._session is not None:
                await self._session.close()
                self._session = None

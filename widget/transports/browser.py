"""Browser transport: the JS bridge (``autopilot_bridge``, over socket.io-client) under Pyodide.

JSON text crosses the boundary in both directions, so each payload is converted exactly once. Streamed text
events may arrive together, as one ``__batch__`` call (see static/bridge.mjs): they are applied one by one, in
order, exactly as if each had come alone.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from .base import EventHandler, TransportError

log = logging.getLogger("widget")

#: The event name under which the bridge hands over several events at once: a JSON array of ``[name, payload]``.
BATCH = "__batch__"


class BrowserTransport:
    """The transport used in the page; ``bridge`` is the registered JS module."""

    def __init__(self, bridge: Any) -> None:
        self._bridge = bridge
        self._handler: EventHandler = lambda event, data: None
        self._proxy: Any = None

    def set_handler(self, handler: EventHandler) -> None:
        """Route incoming events to ``handler``."""
        self._handler = handler

    def _on_event(self, name: str, text: str) -> None:
        try:
            data = json.loads(text) if text is not None else None
        except ValueError:
            data = None
        if name != BATCH:
            self._handler(name, data)
            return
        for item in data if isinstance(data, list) else ():
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
                continue
            try:
                self._handler(item[0], item[1])
            except Exception:  # one failing event must not lose the rest of the batch
                log.exception("handling relay event %r failed", item[0])

    @property
    def connected(self) -> bool:
        """Whether the socket is up."""
        return bool(self._bridge.connected())

    async def request(
        self, method: str, url: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """One JSON HTTP request through ``fetch``."""
        from pyodide.ffi import JsException  # only in the browser

        try:
            result = await self._bridge.request(method, url, None if body is None else json.dumps(body))
        except JsException as exc:
            raise TransportError(f"{method} {url} failed: {exc}") from None
        status, text = int(result[0]), str(result[1])
        try:
            data = json.loads(text) if text else None
        except ValueError:
            data = None
        return status, data

    async def connect(self, url: str, path: str) -> None:
        """Open the socket through the bridge."""
        from pyodide.ffi import JsException, create_proxy

        self._drop_proxy()
        # A persistent proxy: a plain function would be a borrowed proxy destroyed after the first call.
        self._proxy = create_proxy(self._on_event)
        try:
            await self._bridge.connect(url, path, self._proxy)
        except JsException as exc:
            self._bridge.close()
            self._drop_proxy()
            raise TransportError(str(exc).removeprefix("Error: ")) from None

    async def emit(self, event: str, data: Any, timeout: float | None = None) -> Any:
        """Emit with an acknowledgement through the bridge."""
        from pyodide.ffi import JsException

        try:
            text = await self._bridge.emitAck(event, json.dumps(data), int((timeout or 10) * 1000))
        except JsException as exc:
            raise TransportError(f"Emit {event!r} failed: {exc}") from None
        return json.loads(text)

    async def disconnect(self) -> None:
        """Close the socket and release the event proxy."""
        self._bridge.close()
        self._handler("__disconnected__", None)
        self._drop_proxy()

    def _drop_proxy(self) -> None:
        if self._proxy is not None:
            self._proxy.destroy()
            self._proxy = None

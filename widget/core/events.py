"""A small typed event emitter: ``on`` returns an unsubscribe; one throwing listener never breaks the others."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("widget")

Listener = Callable[[Any], Any]


class Emitter:
    """Maps event names to listeners; a listener receives one payload dict."""

    def __init__(self) -> None:
        self._listeners: dict[str, list[Listener]] = {}
        #: Called with (event, exception) when a listener raises; the runtime logs it to the console.
        self.on_listener_error: Callable[[str, BaseException], None] | None = None

    def on(self, event: str, listener: Listener) -> Callable[[], None]:
        """Subscribe ``listener`` to ``event``; returns a function that unsubscribes it."""
        self._listeners.setdefault(event, []).append(listener)

        def off() -> None:
            self.off(event, listener)

        return off

    def once(self, event: str, listener: Listener) -> Callable[[], None]:
        """Subscribe for one delivery only."""

        def wrapper(payload: Any) -> Any:
            off()
            return listener(payload)

        off = self.on(event, wrapper)
        return off

    def off(self, event: str, listener: Listener) -> bool:
        """Remove one subscription; True when it existed."""
        listeners = self._listeners.get(event)
        if not listeners or listener not in listeners:
            return False
        listeners.remove(listener)
        return True

    def emit(self, event: str, payload: Any = None) -> None:
        """Deliver ``payload`` to every listener of ``event`` and of ``"*"``."""
        # Copy: a listener may unsubscribe itself (``once``) while we iterate.
        for name in (event, "*"):
            for listener in list(self._listeners.get(name, ())):
                try:
                    if name == "*":
                        listener({"event": event, "payload": payload})
                    else:
                        listener(payload)
                except Exception as exc:  # isolation is the point
                    if self.on_listener_error is not None:
                        self.on_listener_error(event, exc)
                    else:
                        log.exception("listener for %r raised", event)

    def listener_count(self, event: str) -> int:
        """How many listeners ``event`` has (for leak checks)."""
        return len(self._listeners.get(event, ()))

    def clear(self) -> None:
        """Drop every listener."""
        self._listeners.clear()

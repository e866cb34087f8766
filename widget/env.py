"""The page seam: what declarative tool runs need from the page (fetch, navigate, events, page info).

The browser implementation lives in ``widget.browser``; ``MemoryEnv`` records effects for tests and CPython.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


class Signal:
    """An abort signal handed to tool handlers (docs/tools.md ``{signal}``): ``aborted`` turns true at the limit."""

    def __init__(self) -> None:
        self.aborted = False
        self.reason: str | None = None
        self._callbacks: list[Any] = []

    def add_listener(self, callback: Any) -> None:
        """Call ``callback()`` when aborted (at once if already aborted)."""
        if self.aborted:
            callback()
        else:
            self._callbacks.append(callback)

    def abort(self, reason: str) -> None:
        """Abort (idempotent)."""
        if self.aborted:
            return
        self.aborted, self.reason = True, reason
        for cb in self._callbacks:
            try:
                cb()
            except Exception:  # noqa: BLE001 - an abort callback must not break the abort
                pass
        self._callbacks.clear()


class PageEnv(Protocol):
    """Effects of declarative runs, performed in the page."""

    def page_info(self) -> dict[str, Any]:
        """``{"url", "title"}`` of the current page."""
        ...

    async def fetch(self, method: str, url: str, body: Any, signal: Signal) -> tuple[int, str, str]:
        """One request (same-origin cookies allowed); returns (status, content type, text)."""
        ...

    def navigate(self, url: str) -> str:
        """Open ``url``: in place on the page's own host, else in a new tab without opener; returns which."""
        ...

    def dispatch_event(self, name: str, detail: dict[str, Any]) -> None:
        """Dispatch ``CustomEvent(name, {detail})`` on ``window``."""
        ...


@dataclass
class MemoryEnv:
    """A PageEnv for tests: canned fetch replies, recorded navigations and events."""

    url: str = "https://shop.example/pricing"
    title: str = "Pricing"
    replies: dict[tuple[str, str], tuple[int, str, str]] = field(default_factory=dict)
    fetches: list[tuple[str, str, Any]] = field(default_factory=list)
    navigations: list[str] = field(default_factory=list)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    delay_s: float = 0.0

    def page_info(self) -> dict[str, Any]:
        return {"url": self.url, "title": self.title}

    async def fetch(self, method: str, url: str, body: Any, signal: Signal) -> tuple[int, str, str]:
        import asyncio

        self.fetches.append((method, url, body))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return self.replies.get((method, url), (404, "text/plain", "not found"))

    def navigate(self, url: str) -> str:
        self.navigations.append(url)
        return "same-tab"

    def dispatch_event(self, name: str, detail: dict[str, Any]) -> None:
        self.events.append((name, detail))

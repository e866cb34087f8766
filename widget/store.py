"""The headless store between the client and any UI (seed 001's Vue-store role): no DOM here.

It copies client events into plain state and tells subscribers what changed, so the bar (or a page's own UI)
renders from it alone.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, Callable

from .client import AutopilotClient
from .core.conversation import visible_messages

Subscriber = Callable[[str], None]


class Store:
    """Reactive-by-subscription state of one client's conversation."""

    def __init__(self, client: AutopilotClient) -> None:
        self.client = client
        self.connection_state: str = client.connection_state
        self.errors: list[dict[str, Any]] = []
        self.pending_confirmations: list[dict[str, Any]] = []
        self.pending_ask_user: list[dict[str, Any]] = client.get_pending_ask_user()
        self.context_resolutions = 0
        self._subscribers: list[Subscriber] = []
        self._futures: dict[int, asyncio.Future[str]] = {}
        self._ids = itertools.count(1)
        on = client.on
        self._unsubscribe = [
            on("connectionStateChanged", self._on_connection),
            on("roleChanged", lambda p: self._notify("active")),
            on("messagesChanged", lambda p: self._notify("messages")),
            on("conversationLoaded", lambda p: self._notify("messages")),
            on("askUserRequired", lambda p: self._set("pending_ask_user", p["prompts"])),
            on("askUserCleared", lambda p: self._set("pending_ask_user", [])),
            on("contextResolutionChanged", lambda p: self._set("context_resolutions", p["pending"])),
            on("functionResponseSent", lambda p: self._notify("calls")),
            on("functionSuccess", lambda p: self._notify("calls")),
            on("functionError", lambda p: self._notify("calls")),
            on("stateError", lambda p: self._add_error(p)),
        ]

    # --- reading ---------------------------------------------------------------
    @property
    def visible_messages(self) -> list[dict[str, Any]]:
        """User/assistant/error messages, tool results paired onto calls."""
        return visible_messages(self.client.messages)

    @property
    def active(self) -> bool:
        """Whether this tab is the conversation's active client."""
        return self.client.active

    @property
    def streaming_message(self) -> dict[str, Any] | None:
        """The assistant message being streamed, if any."""
        return self.client.session.streaming_message

    @property
    def is_streaming(self) -> bool:
        """Whether a completion is in progress."""
        return self.client.session.is_streaming

    @property
    def function_calls(self) -> list[dict[str, Any]]:
        """Call records with timings, newest first (the activity log)."""
        return self.client.get_function_call_history()

    # --- subscribing -------------------------------------------------------------
    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        """Call ``fn(what)`` after each change; returns an unsubscribe function."""
        self._subscribers.append(fn)
        return lambda: self._subscribers.remove(fn) if fn in self._subscribers else None

    def _notify(self, what: str) -> None:
        for fn in list(self._subscribers):
            try:
                fn(what)
            except Exception as exc:  # noqa: BLE001 - one broken view must not break the others
                import logging

                logging.getLogger("widget").error("store subscriber raised: %r", exc)

    def _set(self, attr: str, value: Any) -> None:
        setattr(self, attr, value)
        self._notify(attr)

    def _on_connection(self, payload: dict[str, Any]) -> None:
        self.connection_state = payload["state"]
        if payload.get("error"):
            self._add_error(payload["error"])
        self._notify("connection_state")

    def _add_error(self, error: dict[str, Any]) -> None:
        self.errors.append(error)
        self._notify("errors")

    def dismiss_errors(self) -> None:
        """Forget shown errors."""
        self._set("errors", [])

    # --- confirmations -------------------------------------------------------------
    def confirmation_handler(self, request: dict[str, Any]) -> asyncio.Future[str]:
        """A confirmation handler that waits for the UI to call ``resolve_confirmation``."""
        fut: asyncio.Future[str] = asyncio.get_event_loop().create_future()
        cid = next(self._ids)
        self._futures[cid] = fut
        self.pending_confirmations.append({"id": cid, "request": request})
        self._notify("pending_confirmations")
        return fut

    def resolve_confirmation(self, cid: int, decision: str) -> None:
        """The reader's answer: 'allow' or anything else (deny). Single use."""
        fut = self._futures.pop(cid, None)
        self.pending_confirmations = [c for c in self.pending_confirmations if c["id"] != cid]
        if fut is not None and not fut.done():
            fut.set_result("allow" if decision == "allow" else "deny")
        self._notify("pending_confirmations")

    def close(self) -> None:
        """Unsubscribe from the client; pending confirmations are denied (fail closed)."""
        for off in self._unsubscribe:
            off()
        for cid in list(self._futures):
            self.resolve_confirmation(cid, "deny")
        self._subscribers.clear()

"""Confirmations waiting for the reader: the client's confirmation handler, answered by the UI."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any


class ConfirmationQueue:
    """Pending Allow / Deny requests, each with the future the client waits on."""

    def __init__(self, changed: Callable[[], None]) -> None:
        #: ``[{"id": int, "request": {id, name, arguments, timestamp}}]`` waiting for Allow / Deny.
        self.pending: list[dict[str, Any]] = []
        self._futures: dict[int, asyncio.Future[str]] = {}
        self._ids = itertools.count(1)
        self._changed = changed  # says "confirmations" (and updates what the relay waits for)

    def handler(self, request: dict[str, Any]) -> asyncio.Future[str]:
        """A new prompt; its future resolves to "allow" or "deny" (see ``Store.confirmation_handler``)."""
        fut: asyncio.Future[str] = asyncio.get_event_loop().create_future()
        cid = next(self._ids)
        self._futures[cid] = fut
        self.pending.append({"id": cid, "request": request})
        fut.add_done_callback(lambda _f: self._done(cid))
        self._changed()
        return fut

    def resolve(self, cid: int, decision: str) -> None:
        """The reader's answer: 'allow' or anything else (deny). Single use."""
        fut = self._futures.pop(cid, None)
        if fut is not None and not fut.done():
            fut.set_result("allow" if decision == "allow" else "deny")
        self._done(cid)

    def deny_all(self) -> None:
        """Deny every pending request (fail closed)."""
        for cid in list(self._futures):
            self.resolve(cid, "deny")

    def _done(self, cid: int) -> None:
        self._futures.pop(cid, None)
        before = len(self.pending)
        self.pending = [c for c in self.pending if c["id"] != cid]
        if len(self.pending) != before:
            self._changed()

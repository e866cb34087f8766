"""Local error messages: failures of this tab's own requests, shown in the conversation where they happened."""

from __future__ import annotations

import itertools
from typing import Any


class LocalErrors:
    """Errors no relay message carries (a send the relay refused, a failed Retry), each after the message it
    followed; a failed send keeps its text for Retry."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self._ids = itertools.count(1)

    def clear(self) -> None:
        """Forget them all (a new conversation)."""
        self.items.clear()

    def find(self, error_id: Any) -> dict[str, Any] | None:
        """The local error ``error_id``, if shown."""
        return next((e for e in self.items if e["id"] == error_id), None)

    def add(self, shown: list[dict[str, Any]], text: str, *, retry_text: str | None, code: str) -> None:
        """A new error after the last shown message that is not itself a local error."""
        anchor = shown[-1].get("id") if shown else None
        while anchor is not None and str(anchor).startswith("local-"):
            anchor = next((e["after"] for e in self.items if e["id"] == anchor), None)
        self.items.append(
            {
                "id": f"local-{next(self._ids)}",
                "role": "error",
                "local": True,
                "content": text,
                "code": code,
                "retryable": retry_text is not None,
                "retry_text": retry_text,
                "after": anchor,
            }
        )

    def remove(self, error_id: Any) -> bool:
        """Remove one; True when it was there."""
        before = len(self.items)
        self.items = [e for e in self.items if e["id"] != error_id]
        return len(self.items) != before

    def merge(self, shown: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``shown`` with each local error after the message it followed when it happened."""
        if not self.items:
            return shown
        by_anchor: dict[Any, list[dict[str, Any]]] = {}
        for e in self.items:
            by_anchor.setdefault(e["after"], []).append(e)
        out = list(by_anchor.pop(None, []))
        for m in shown:
            out.append(m)
            out.extend(by_anchor.pop(m.get("id"), []))
        for rest in by_anchor.values():  # anchors no longer shown (trimmed): keep them at the end
            out.extend(rest)
        return out

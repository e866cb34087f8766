"""The store's part for past conversations: the list the bar shows, and reopening or deleting one.

``entries`` are the client's ``conversations()`` that have a title (a conversation without a message is nothing to
come back to), most recently active first, the current one marked. The list is read when a view asks
(``refresh``: the bar does when its list opens) and again after each change made here. Deleting asks first:
``ask_delete`` marks the entry being confirmed, ``delete`` does it. Operations never raise: a failure becomes
``error`` (shown with the list) and the list stays as it was. Each change is announced as ``history``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..client.history import PastConversation
from .context import HistoryClient
from .forms import message_of


class PastConversations:
    """Entries, loading and error state, the entry whose deletion is being confirmed (see the module doc)."""

    def __init__(self, client: HistoryClient, changed: Callable[[], None], before_switch: Callable[[], None]) -> None:
        self.client = client
        self._changed = changed
        self._before_switch = before_switch
        #: Titled conversations of this browser with the app, most recently active first.
        self.entries: list[PastConversation] = []
        self.loaded = False
        self.loading = False
        #: Why the last operation failed (None when it did not).
        self.error: str | None = None
        #: The id whose deletion waits for the reader's confirmation.
        self.confirming: str | None = None
        #: The id being opened or deleted now.
        self.busy: str | None = None
        self._reads = 0  # refreshes started (only the latest one's answer is shown)

    def _set(self, **fields: Any) -> None:
        for name, value in fields.items():
            setattr(self, name, value)
        self._changed()

    def begin_refresh(self) -> None:
        """Mark the list as being read (before ``refresh`` runs: a view shows it at once)."""
        self.loading = True

    async def refresh(self) -> bool:
        """Read the list again; True when it was read (and it is the latest read)."""
        self._reads += 1
        read = self._reads
        self._set(loading=True)
        try:
            listed = await self.client.conversations()
        except Exception as exc:  # noqa: BLE001 - shown with the list
            if read == self._reads:
                self._set(loading=False, error=message_of(exc))
            return False
        if read != self._reads:
            return False  # a later read is under way: its answer is the one to show
        current = self.client.conversation_id
        entries = [e for e in listed if e["title"]]
        for e in entries:
            e["current"] = e["id"] == current
        self._set(entries=entries, loading=False, loaded=True, error=None)
        return True

    async def open(self, conversation_id: str) -> bool:
        """Switch the client to a past conversation; True when it is shown."""
        self._before_switch()
        self._set(busy=conversation_id, confirming=None, error=None)
        try:
            await self.client.open_conversation(conversation_id)
        except Exception as exc:  # noqa: BLE001 - shown with the list
            self._set(busy=None, error=message_of(exc))
            await self.refresh()
            return False
        self._set(busy=None)
        await self.refresh()
        return True

    def ask_delete(self, conversation_id: str | None) -> None:
        """Ask the reader to confirm deleting ``conversation_id`` (None: no longer)."""
        self._set(confirming=conversation_id, error=None)

    async def delete(self, conversation_id: str) -> bool:
        """Delete a past conversation (the current one: a fresh one takes its place); True when done."""
        if conversation_id == self.client.conversation_id:
            self._before_switch()
        self._set(busy=conversation_id, confirming=None, error=None)
        try:
            await self.client.delete_conversation(conversation_id)
        except Exception as exc:  # noqa: BLE001 - shown with the list
            self._set(busy=None, error=message_of(exc))
            return False
        self._set(busy=None, entries=[e for e in self.entries if e["id"] != conversation_id])
        await self.refresh()
        return True

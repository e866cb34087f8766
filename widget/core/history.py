"""The ids of this browser's own conversations with an app: the list "Past conversations" is built from.

One storage key per app (``autopilot:conversations:<app_id>``) holds a JSON array of conversation ids, the most
recently added first, at most ``MAX_SUMMARY_IDS`` (the oldest are dropped). The ids are capabilities, so only this
browser's own are ever here, and the relay answers for the ids it is given and no others.

Storage is the page's (``localStorage`` in a browser) and may misbehave: a value that is not JSON, not a list, or
holds things that are not ids is read as the ids it does hold (the next write cleans it up); a write that fails
(storage full or refused) moves the list to memory for the rest of the page's life. Each read goes to storage, so
tabs of the same site share the list. Pure logic: no I/O of its own, runs under CPython and Pyodide.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import MutableMapping

from ..protocol import MAX_SUMMARY_IDS

log = logging.getLogger("widget")

#: What a conversation id looks like (the relay's ids: "c_" and 16-64 URL-safe characters).
CONVERSATION_ID_RE = re.compile(r"^c_[A-Za-z0-9_-]{16,64}$")


def history_key(app_id: str) -> str:
    """The storage key of the list of ``app_id``'s conversations kept by this browser."""
    return f"autopilot:conversations:{app_id}"


def is_conversation_id(value: object) -> bool:
    """Whether ``value`` has the shape of a conversation id."""
    return isinstance(value, str) and CONVERSATION_ID_RE.match(value) is not None


def conversation_id_of(url: str) -> str | None:
    """The conversation id at the end of a conversation URL (None when it does not end with one)."""
    tail = url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return tail if is_conversation_id(tail) else None


class ConversationList:
    """The conversation ids kept for one app, most recently added first, at most ``limit`` (see the module doc)."""

    def __init__(self, storage: MutableMapping[str, str], app_id: str, limit: int = MAX_SUMMARY_IDS) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.storage = storage
        self.key = history_key(app_id)
        self.limit = limit
        #: The list in memory once storage refused a write (then storage is no longer read either).
        self._memory: list[str] | None = None

    def ids(self) -> list[str]:
        """The ids, most recently added first."""
        if self._memory is not None:
            return list(self._memory)
        try:
            raw = self.storage.get(self.key)
        except Exception as exc:  # noqa: BLE001 - storage that cannot be read holds nothing for us
            log.warning("the list of past conversations cannot be read: %r", exc)
            return []
        return _parse(raw)[: self.limit]

    def add(self, conversation_id: str) -> bool:
        """Put ``conversation_id`` first (moving it there when held); True when the list changed."""
        if not is_conversation_id(conversation_id):
            return False
        ids = self.ids()
        new = [conversation_id, *(i for i in ids if i != conversation_id)][: self.limit]
        return self._write(ids, new)

    def remove(self, conversation_id: str) -> bool:
        """Forget ``conversation_id``; True when it was held."""
        ids = self.ids()
        return self._write(ids, [i for i in ids if i != conversation_id])

    def keep_only(self, existing: set[str] | frozenset[str], asked: list[str]) -> list[str]:
        """Forget the ids of ``asked`` that are not in ``existing`` (the relay did not know them); those ids."""
        gone = [i for i in asked if i not in existing]
        if gone:
            ids = self.ids()
            self._write(ids, [i for i in ids if i not in gone])
        return gone

    def _write(self, old: list[str], new: list[str]) -> bool:
        if new == old:
            return False
        if self._memory is not None:
            self._memory = new
            return True
        try:
            if new:
                self.storage[self.key] = json.dumps(new, separators=(",", ":"))
            else:
                self.storage.pop(self.key, None)
        except Exception as exc:  # noqa: BLE001 - storage full or refused: the page keeps the list
            log.warning("the list of past conversations is kept for this page only: storage refused it (%r)", exc)
            self._memory = new
        return True


def _parse(raw: object) -> list[str]:
    """The ids a stored value holds, in order, each once; anything else in it is ignored."""
    if not isinstance(raw, str):
        return []
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return []
    if not isinstance(value, list):
        return []
    return list(dict.fromkeys(i for i in value if is_conversation_id(i)))

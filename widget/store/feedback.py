"""The reader's ratings of answers and their comments, as the bar shows them: restored with the conversation,
changed by any tab.

A rating and its comment are stored together (one record per answer): changing the thumb keeps the comment, and
sending a comment sends the rating with it. Nothing here raises: a failure is returned (or kept) as text to show.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..protocol import MAX_FEEDBACK_COMMENT_CHARS, ClientEvent, FeedbackRating
from .context import RatingsClient

log = logging.getLogger("widget")


def comment_text(text: str) -> str | None:
    """What the relay stores for a typed comment: trimmed, ``None`` when nothing is left."""
    return text.strip() or None


def comment_over(text: str) -> int:
    """How many characters a typed comment is over ``MAX_FEEDBACK_COMMENT_CHARS`` (0 when it fits)."""
    return max(0, len(text.strip()) - MAX_FEEDBACK_COMMENT_CHARS)


class Ratings:
    """``message id -> rating`` (``"up"``/``"down"``) and ``message id -> comment`` of the conversation."""

    def __init__(self, client: RatingsClient, changed: Callable[[], None]) -> None:
        self.client = client
        self._changed = changed
        self.by_message: dict[str, str] = {}
        #: The stored comment of each rated answer that has one.
        self.comments: dict[str, str] = {}
        #: Why the last rating of an answer failed (an answer is absent when its last rating went through).
        self.errors: dict[str, str] = {}
        self.unsubscribe = [client.on(ClientEvent.CONVERSATION_LOADED, self._loaded),
                            client.on(ClientEvent.FEEDBACK, self._record)]

    def _loaded(self, payload: Any) -> None:
        records = payload.get("feedback") if isinstance(payload, dict) else None
        self.by_message = {}
        self.comments = {}
        self.errors = {}
        for r in records if isinstance(records, list) else []:
            self._put(r)
        self._changed()

    def _put(self, record: Any) -> None:
        if not isinstance(record, dict) or not isinstance(record.get("message_id"), str):
            return
        mid = record["message_id"]
        rating = record.get("rating")
        comment = record.get("comment")
        if rating in (FeedbackRating.UP, FeedbackRating.DOWN):
            self.by_message[mid] = rating
            if isinstance(comment, str) and comment:
                self.comments[mid] = comment
            else:
                self.comments.pop(mid, None)
        else:
            self.by_message.pop(mid, None)
            self.comments.pop(mid, None)

    def _record(self, record: Any) -> None:
        self._put(record)
        self._changed()

    def rating(self, message_id: Any) -> str | None:
        """The reader's rating of an answer, or None."""
        return self.by_message.get(message_id) if isinstance(message_id, str) else None

    def comment(self, message_id: Any) -> str | None:
        """The stored comment on an answer, or None."""
        return self.comments.get(message_id) if isinstance(message_id, str) else None

    async def rate(self, message_id: str, rating: str) -> None:
        """Press a thumb: set it (its comment stays), or take it back when it is the one already set."""
        new = None if self.rating(message_id) == rating else rating
        try:
            record = await self.client.rate_answer(message_id, new, self.comment(message_id) if new else None)
        except Exception as exc:  # noqa: BLE001 - shown to the reader, the conversation goes on
            log.warning("rating the answer failed: %s", exc)
            self.errors[message_id] = str(exc)
            self._changed()
            return
        self.errors.pop(message_id, None)
        self._record(record)

    async def send_comment(self, message_id: str, rating: str, text: str) -> str | None:
        """Store ``rating`` with the comment ``text`` (blank: no comment); None when stored, else why not."""
        try:
            record = await self.client.rate_answer(message_id, rating, comment_text(text))
        except Exception as exc:  # noqa: BLE001 - shown next to the comment, whose text stays
            log.warning("sending the comment failed: %s", exc)
            return str(exc) or type(exc).__name__
        self.errors.pop(message_id, None)
        self._record(record)
        return None

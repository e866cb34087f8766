"""The reader's ratings of answers, as the bar shows them: restored with the conversation, changed by any tab."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..protocol import ClientEvent, FeedbackRating

if TYPE_CHECKING:
    from ..client import AutopilotClient

log = logging.getLogger("widget")


class Ratings:
    """``message id -> rating`` (``"up"``/``"down"``) of the conversation, kept from the client's events."""

    def __init__(self, client: AutopilotClient, changed: Callable[[], None]) -> None:
        self.client = client
        self._changed = changed
        self.by_message: dict[str, str] = {}
        #: Why the last rating failed (None when it did not).
        self.error: str | None = None
        self.unsubscribe = [client.on(ClientEvent.CONVERSATION_LOADED, self._loaded),
                            client.on(ClientEvent.FEEDBACK, self._record)]

    def _loaded(self, payload: Any) -> None:
        records = payload.get("feedback") if isinstance(payload, dict) else None
        self.by_message = {}
        for r in records if isinstance(records, list) else []:
            self._put(r)
        self._changed()

    def _put(self, record: Any) -> None:
        if not isinstance(record, dict) or not isinstance(record.get("message_id"), str):
            return
        rating = record.get("rating")
        if rating in (FeedbackRating.UP, FeedbackRating.DOWN):
            self.by_message[record["message_id"]] = rating
        else:
            self.by_message.pop(record["message_id"], None)

    def _record(self, record: Any) -> None:
        self._put(record)
        self._changed()

    def rating(self, message_id: Any) -> str | None:
        """The reader's rating of an answer, or None."""
        return self.by_message.get(message_id) if isinstance(message_id, str) else None

    async def rate(self, message_id: str, rating: str) -> None:
        """Press a thumb: set it, or take it back when it is the one already set."""
        new = None if self.rating(message_id) == rating else rating
        try:
            record = await self.client.rate_answer(message_id, new)
        except Exception as exc:  # noqa: BLE001 - shown to the reader, the conversation goes on
            log.warning("rating the answer failed: %s", exc)
            self.error = str(exc)
            self._changed()
            return
        self.error = None
        self._record(record)

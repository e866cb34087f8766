"""The reader's rating of an answer: ``rate_answer`` posts it to the relay.

The relay stores one rating per answer (``up``, ``down``, or ``None`` to take it back, with an optional comment
that the same call replaces: sending the same rating and comment again changes nothing),
tells every socket of the conversation (the page's ``feedback`` event, this tab's included) and returns the stored
ratings with the conversation (``conversationLoaded``'s ``feedback``).
"""

from __future__ import annotations

from typing import Any

from .. import protocol as P
from ..errors import ConfigError, ConnectionFailed
from .connection import Link
from .wire import Wire, http_error


class Feedback:
    """``rate_answer`` of ``AutopilotClient`` (see the module doc)."""

    def __init__(self, wire: Wire, link: Link) -> None:
        self._wire = wire
        self._link = link

    async def rate_answer(self, message_id: str, rating: str | None, comment: str | None = None) -> dict[str, Any]:
        """See ``AutopilotClient.rate_answer``."""
        if rating is not None and rating not in (P.FeedbackRating.UP, P.FeedbackRating.DOWN):
            raise ConfigError('rating must be "up", "down" or None')
        if comment is not None and not isinstance(comment, str):
            raise ConfigError("comment must be a string or None")
        if comment is not None and len(comment.strip()) > P.MAX_FEEDBACK_COMMENT_CHARS:
            raise ConfigError(f"comment is over {P.MAX_FEEDBACK_COMMENT_CHARS} characters")
        if self._link.conversation is None or self._link.conversation_url is None:
            raise ConnectionFailed("Not connected to a conversation.")
        url = self._link.conversation_url.rstrip("/") + "/feedback"
        status, body = await self._wire.http("POST", url, {"message_id": message_id, "rating": rating,
                                                           "comment": comment})
        if status != 200 or not isinstance(body, dict):
            raise http_error(status, body, "Rating the answer failed")
        record: dict[str, Any] = body["feedback"]
        return record

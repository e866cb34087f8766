"""The reader's rating of an answer through ``AutopilotClient``: ``rate_answer`` posts it to the relay.

The relay stores one rating per answer (``up``, ``down``, or ``None`` to take it back, with an optional comment
that the same call replaces: sending the same rating and comment again changes nothing),
tells every socket of the conversation (the page's ``feedback`` event, this tab's included) and returns the stored
ratings with the conversation (``conversationLoaded``'s ``feedback``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import protocol as P
from .client_connection import _http_error
from .errors import ConfigError, ConnectionFailed

if TYPE_CHECKING:
    from .core.session import ClientSession


class FeedbackMixin:
    """``rate_answer`` of ``AutopilotClient`` (see the module doc)."""

    conversation: dict[str, Any] | None
    conversation_url: str | None
    core: ClientSession

    if TYPE_CHECKING:  # provided by the connection mixin

        async def _http(self, method: str, url: str, body: Any = None) -> tuple[int, Any]: ...

    async def rate_answer(self, message_id: str, rating: str | None, comment: str | None = None) -> dict[str, Any]:
        """Rate one answer: ``"up"``, ``"down"`` or ``None`` (take the rating back), with an optional ``comment``
        (it replaces the stored one; ``None`` or blank: no comment); the record the relay stored."""
        if rating is not None and rating not in (P.FeedbackRating.UP, P.FeedbackRating.DOWN):
            raise ConfigError('rating must be "up", "down" or None')
        if comment is not None and not isinstance(comment, str):
            raise ConfigError("comment must be a string or None")
        if comment is not None and len(comment.strip()) > P.MAX_FEEDBACK_COMMENT_CHARS:
            raise ConfigError(f"comment is over {P.MAX_FEEDBACK_COMMENT_CHARS} characters")
        if self.conversation is None or self.conversation_url is None:
            raise ConnectionFailed("Not connected to a conversation.")
        url = self.conversation_url.rstrip("/") + "/feedback"
        status, body = await self._http("POST", url, {"message_id": message_id, "rating": rating, "comment": comment})
        if status != 200 or not isinstance(body, dict):
            raise _http_error(status, body, "Rating the answer failed")
        record: dict[str, Any] = body["feedback"]
        return record

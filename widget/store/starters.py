"""What the reader can send with one press, as the bar shows it: starter prompts while the conversation is empty,
the model's follow-up suggestions under the last answer until the reader sends the next message.

Both are the reader's own words: ``send_prompt`` sends the text exactly as if it had been typed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..core.starters import suggestions_of
from ..protocol import Role
from .context import Changed, PromptsClient


class Prompts:
    """``starters``, ``suggestions`` and ``send_prompt`` of ``Store`` (see the module doc); a part of ``Store``.

    It gets the client's starters and messages, the shown messages and whether an answer streams (read when
    asked), the store's send (a prompt is sent as a typed message is) and ``changed(what)``.
    """

    def __init__(
        self,
        client: PromptsClient,
        *,
        shown: Callable[[], list[dict[str, Any]]],
        streaming: Callable[[], bool],
        send: Callable[[str], Awaitable[bool]],
        changed: Changed,
    ) -> None:
        self._client = client
        self._shown = shown
        self._streaming = streaming
        self._send = send
        self._changed = changed
        #: The answer whose suggestion the reader pressed (hidden at once, before the relay echoes the message).
        self._suggestion_used: str | None = None

    @property
    def starters(self) -> list[str]:
        """The starter prompts to show: the client's (the page's or the app's) while nothing was said yet."""
        if self._shown() or self._streaming():
            return []
        return self._client.starters

    @property
    def suggestions(self) -> tuple[str | None, list[str]]:
        """``(answer id, texts)``: the model's follow-up suggestions on the last answer, while it is the last thing
        shown and nothing streams; ``(None, [])`` otherwise."""
        if self._streaming():
            return None, []
        shown = self._shown()
        if not shown or shown[-1].get("role") != Role.ASSISTANT:
            return None, []  # a newer message of the reader, or an error, after the answer
        message_id, texts = suggestions_of(self._client.messages)
        if message_id is None or message_id == self._suggestion_used:
            return None, []
        return message_id, texts

    async def send_prompt(self, text: str) -> bool:
        """Send a starter or a suggestion as the reader's message (exactly as typed). A pressed suggestion's row goes
        at once; if the send fails the failure is shown like a typed message's (with Retry)."""
        message_id, texts = self.suggestions
        if message_id is not None and text in texts:
            self._suggestion_used = message_id
            self._changed("messages")
        return await self._send(text)

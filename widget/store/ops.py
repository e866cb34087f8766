"""What the reader does with the conversation, as store operations that never raise (a failure is shown)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from .context import SendingClient
from .forms import message_of
from .local import LocalErrors


class ConversationOps:
    """Send, Stop, Retry, Regenerate, New chat, Use here and dismissing; a part of ``Store``.

    A failure becomes a local error message (a failed send keeps its text for Retry) or a ``notice``. It gets the
    client's calls it makes, the local errors it adds to, the shown messages (where a new error goes) and callbacks
    for the store's notice, its "messages changed" and denying pending confirmations.
    """

    def __init__(
        self,
        client: SendingClient,
        local_errors: LocalErrors,
        *,
        shown: Callable[[], list[dict[str, Any]]],
        set_notice: Callable[[dict[str, Any] | None], None],
        messages_changed: Callable[[], None],
        deny_confirmations: Callable[[], None],
    ) -> None:
        self._client = client
        self._local_errors = local_errors
        self._shown = shown
        self._set_notice = set_notice
        self._messages_changed = messages_changed
        self._deny_confirmations = deny_confirmations
        #: The reader pressed Stop and the turn has not finished yet (``turn_ended`` clears it).
        self.stopping = False

    def turn_ended(self) -> None:
        """The turn finished: a Stop pressed during it is done."""
        self.stopping = False

    async def send(self, text: str) -> bool:
        """Send a user message; on failure a local error message with Retry appears. True when sent."""
        if not isinstance(text, str) or not text.strip():
            return False
        try:
            await self._client.send_message(text)
        except Exception as exc:  # noqa: BLE001 - shown in the conversation, with Retry
            self._add_local_error(message_of(exc), retry_text=text, code=getattr(exc, "code", "not_sent"))
            return False
        return True

    async def stop(self) -> bool:
        """Stop the streaming answer (relay ``cancel``); True when a turn was cancelled."""
        self.stopping = True  # calls the relay now ends were stopped by the reader: no "expired" notice
        try:
            return await self._client.cancel()
        except Exception as exc:  # noqa: BLE001
            self.stopping = False
            self._set_notice({"code": getattr(exc, "code", "cancel_failed"), "message": message_of(exc)})
            return False

    async def retry(self, error_id: Any = None) -> bool:
        """Retry after an error: a local send error sends its text again; a failed turn goes on (relay ``retry``,
        which withdraws the failed round and runs it again)."""
        local = self._local_errors.find(error_id)
        if local is not None:
            self.dismiss_error(local["id"])
            return await self.send(local["retry_text"]) if local.get("retry_text") else False
        return await self._relay_op(self._client.retry, "retry_failed")

    async def regenerate(self) -> bool:
        """Replace the last answer with a new one (relay ``regenerate``)."""
        return await self._relay_op(self._client.regenerate, "regenerate_failed")

    async def _relay_op(self, op: Callable[[], Awaitable[Any]], code: str) -> bool:
        try:
            await op()
            return True
        except Exception as exc:  # noqa: BLE001 - shown in the conversation
            self._add_local_error(message_of(exc), code=getattr(exc, "code", code))
            return False

    async def new_chat(self) -> bool:
        """Start a fresh conversation ("New chat")."""
        self._deny_confirmations()
        return await self._notice_op(self._client.new_conversation, "new_chat_failed")

    async def use_here(self) -> bool:
        """Make this tab the active client ("Use here")."""
        return await self._notice_op(self._client.activate, "activate_failed")

    async def _notice_op(self, op: Callable[[], Awaitable[Any]], code: str) -> bool:
        try:
            await op()
            return True
        except Exception as exc:  # noqa: BLE001 - shown as the notice
            self._set_notice({"code": getattr(exc, "code", code), "message": message_of(exc)})
            return False

    def dismiss_error(self, error_id: Any) -> None:
        """Remove a local error message."""
        if self._local_errors.remove(error_id):
            self._messages_changed()

    def _add_local_error(self, text: str, *, retry_text: str | None = None, code: str = "error") -> None:
        self._local_errors.add(self._shown(), text, retry_text=retry_text, code=code)
        self._messages_changed()

"""What the reader does with the conversation, as store operations that never raise (a failure is shown)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .confirm import ConfirmationQueue
from .forms import message_of
from .local import LocalErrors

if TYPE_CHECKING:
    from ..client import AutopilotClient


class ConversationOps:
    """Send, Stop, Retry, Regenerate, New chat, Use here and dismissing; a part of ``Store``.

    A failure becomes a local error message (a failed send keeps its text for Retry) or a ``notice``.
    """

    client: AutopilotClient
    errors: list[dict[str, Any]]
    _stopping: bool
    _local_errors: LocalErrors
    _confirmations: ConfirmationQueue
    messages: Any  # the store's shown messages (a property there)

    def _set(self, attr: str, value: Any, what: str | None = None) -> None:
        raise NotImplementedError

    def _messages_changed(self) -> None:
        raise NotImplementedError

    async def send(self, text: str) -> bool:
        """Send a user message; on failure a local error message with Retry appears. True when sent."""
        if not isinstance(text, str) or not text.strip():
            return False
        try:
            await self.client.send_message(text)
        except Exception as exc:  # noqa: BLE001 - shown in the conversation, with Retry
            self._add_local_error(message_of(exc), retry_text=text, code=getattr(exc, "code", "not_sent"))
            return False
        return True

    async def stop(self) -> bool:
        """Stop the streaming answer (relay ``cancel``); True when a turn was cancelled."""
        self._stopping = True  # calls the relay now ends were stopped by the reader: no "expired" notice
        try:
            return await self.client.cancel()
        except Exception as exc:  # noqa: BLE001
            self._stopping = False
            self._set("notice", {"code": getattr(exc, "code", "cancel_failed"), "message": message_of(exc)})
            return False

    async def retry(self, error_id: Any = None) -> bool:
        """Retry after an error: a local send error sends its text again; a failed turn goes on (relay ``retry``,
        which withdraws the failed round and runs it again)."""
        local = self._local_errors.find(error_id)
        if local is not None:
            self.dismiss_error(local["id"])
            return await self.send(local["retry_text"]) if local.get("retry_text") else False
        return await self._relay_op(self.client.retry, "retry_failed")

    async def regenerate(self) -> bool:
        """Replace the last answer with a new one (relay ``regenerate``)."""
        return await self._relay_op(self.client.regenerate, "regenerate_failed")

    async def _relay_op(self, op: Callable[[], Any], code: str) -> bool:
        try:
            await op()
            return True
        except Exception as exc:  # noqa: BLE001 - shown in the conversation
            self._add_local_error(message_of(exc), code=getattr(exc, "code", code))
            return False

    async def new_chat(self) -> bool:
        """Start a fresh conversation ("New chat")."""
        self._confirmations.deny_all()
        try:
            await self.client.new_conversation()
            return True
        except Exception as exc:  # noqa: BLE001
            self._set("notice", {"code": getattr(exc, "code", "new_chat_failed"), "message": message_of(exc)})
            return False

    async def use_here(self) -> bool:
        """Make this tab the active client ("Use here")."""
        try:
            await self.client.activate()
            return True
        except Exception as exc:  # noqa: BLE001
            self._set("notice", {"code": getattr(exc, "code", "activate_failed"), "message": message_of(exc)})
            return False

    def dismiss_notice(self) -> None:
        """Hide the notice."""
        self._set("notice", None)

    def dismiss_error(self, error_id: Any) -> None:
        """Remove a local error message."""
        if self._local_errors.remove(error_id):
            self._messages_changed()

    def dismiss_errors(self) -> None:
        """Forget shown errors (compatibility)."""
        self.errors = []
        self._set("notice", None)

    def _add_local_error(self, text: str, *, retry_text: str | None = None, code: str = "error") -> None:
        self._local_errors.add(self.messages, text, retry_text=retry_text, code=code)
        self._messages_changed()

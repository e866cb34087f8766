"""The prompts the model waits on (ask-user) and the reader's answers to them, as the bar shows them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .context import AskUserClient
from .forms import message_of


class AskUserPrompts:
    """``pending`` prompts, ``error`` (why the last submission failed) and ``sending``; a part of ``Store``.

    It gets the client's prompts and answering them, and ``changed()``, which says "ask_user" (and updates what the
    relay waits for).
    """

    def __init__(self, client: AskUserClient, changed: Callable[[], None]) -> None:
        self._client = client
        self._changed = changed
        self.pending: list[dict[str, Any]] = client.get_pending_ask_user()
        #: Why the last submission failed (None when it did not).
        self.error: str | None = None
        self.sending = False

    def refresh(self) -> None:
        """The client's prompts changed (new ones, or answered or cleared)."""
        self.pending = self._client.get_pending_ask_user()
        self.error = None
        self._changed()

    async def submit(self, answers: list[dict[str, Any]]) -> bool:
        """Post the answers to every pending prompt; on failure ``error`` says why. True when accepted."""
        self.error = None
        self.sending = True
        self._changed()
        try:
            await self._client.respond_to_ask_user(answers)
            return True
        except Exception as exc:  # noqa: BLE001 - shown next to the prompts
            self.error = message_of(exc)
            return False
        finally:
            self.sending = False
            self._changed()

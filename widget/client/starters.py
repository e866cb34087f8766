"""Starter prompts: the app's (from the relay config, with the conversation) unless the page set its own with
``set_starters``. An empty bar shows them; pressing one sends its text as the reader's message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..core.starters import check_starters
from ..protocol import ClientEvent


class Starters:
    """``starters`` and ``set_starters`` of ``AutopilotClient`` (see the module doc)."""

    def __init__(self, emit: Callable[[str, Any], None]) -> None:
        self._emit = emit
        #: The page's own starters (``set_starters``); None: the app's.
        self._page: list[str] | None = None
        #: The app's starters, as the relay sent them with the conversation.
        self._app: tuple[str, ...] = ()

    @property
    def shown(self) -> list[str]:
        """The starter prompts an empty bar shows now: the page's (``set_starters``), else the app's."""
        return list(self._page if self._page is not None else self._app)

    def set(self, starters: Iterable[str] | None) -> list[str]:
        """See ``AutopilotClient.set_starters``."""
        if starters is None:
            page = None
        else:
            page = check_starters(list(starters) if not isinstance(starters, (str, bytes)) else starters)
        before = self.shown
        self._page = page
        self._changed(before)
        return self.shown

    def app_loaded(self, raw: Any) -> None:
        """The conversation GET's ``starters`` (anything malformed counts as none: the bar just shows none)."""
        before = self.shown
        try:
            self._app = tuple(check_starters(raw if raw is not None else []))
        except Exception:  # noqa: BLE001 - a relay's bad list must not break the connection
            self._app = ()
        self._changed(before)

    def _changed(self, before: list[str]) -> None:
        now = self.shown
        if now != before:
            self._emit(str(ClientEvent.STARTERS_CHANGED), {"starters": now})

"""Starter prompts through ``AutopilotClient``: the app's (from the relay config, with the conversation) unless the
page set its own with ``set_starters``. An empty bar shows them; pressing one sends its text as the reader's message.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .core.starters import check_starters
from .protocol import ClientEvent

if TYPE_CHECKING:
    from .core.events import Emitter


class StartersMixin:
    """``starters`` and ``set_starters`` of ``AutopilotClient`` (see the module doc)."""

    events: Emitter
    #: The page's own starters (``set_starters``); None: the app's.
    _page_starters: list[str] | None = None
    #: The app's starters, as the relay sent them with the conversation.
    _app_starters: tuple[str, ...] = ()

    @property
    def starters(self) -> list[str]:
        """The starter prompts an empty bar shows now: the page's (``set_starters``), else the app's."""
        return list(self._page_starters if self._page_starters is not None else self._app_starters)

    def set_starters(self, starters: Iterable[str] | None) -> list[str]:
        """Show these starter prompts on this page instead of the app's (at most ``MAX_STARTERS`` non-empty strings
        of at most ``MAX_STARTER_CHARS`` characters; ``[]``: none; ``None``: the app's again). ConfigError says
        which entry is wrong; nothing changes then. Returns the starters now shown."""
        if starters is None:
            page = None
        else:
            page = check_starters(list(starters) if not isinstance(starters, (str, bytes)) else starters)
        before = self.starters
        self._page_starters = page
        self._starters_changed(before)
        return self.starters

    def _app_starters_loaded(self, raw: Any) -> None:
        """The conversation GET's ``starters`` (anything malformed counts as none: the bar just shows none)."""
        before = self.starters
        try:
            self._app_starters = tuple(check_starters(raw if raw is not None else []))
        except Exception:  # noqa: BLE001 - a relay's bad list must not break the connection
            self._app_starters = ()
        self._starters_changed(before)

    def _starters_changed(self, before: list[str]) -> None:
        now = self.starters
        if now != before:
            self.events.emit(str(ClientEvent.STARTERS_CHANGED), {"starters": now})

"""The one accessor page Python uses to reach its client."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import WidgetError

if TYPE_CHECKING:
    from .client import AutopilotClient

_client: AutopilotClient | None = None


def get_client() -> AutopilotClient:
    """The page's autopilot client (set by the loader's boot before page Python runs)."""
    if _client is None:
        raise WidgetError(
            "The autopilot client is not set up yet: get_client() works in page Python run by the loader."
        )
    return _client


def set_client(client: AutopilotClient | None) -> None:
    """Install ``client`` as the page's client (the boot and tests call this)."""
    global _client
    _client = client

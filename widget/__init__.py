"""autopilot-widget: an in-page AI copilot whose client logic is Python (Pyodide in the browser)."""

from __future__ import annotations

from .client import AutopilotClient, Navigate
from .core.events import Emitter
from .core.schema import parameters_from_signature
from .core.streaming import StreamingSession
from .errors import (
    ConfigError,
    ConnectionFailed,
    ProtocolError,
    StateLimitError,
    WidgetError,
)
from .page import get_client, set_client
from .protocol import PROTOCOL_VERSION

__version__ = "0.1.0"

__all__ = [
    "AutopilotClient",
    "ConfigError",
    "ConnectionFailed",
    "Navigate",
    "Emitter",
    "PROTOCOL_VERSION",
    "ProtocolError",
    "StateLimitError",
    "StreamingSession",
    "WidgetError",
    "get_client",
    "parameters_from_signature",
    "set_client",
    "__version__",
]

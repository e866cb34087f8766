"""The one error root of the widget and its subclasses."""

from __future__ import annotations


class WidgetError(Exception):
    """Root of every error the widget raises on purpose."""


class ConfigError(WidgetError):
    """Bad configuration (client options, relay config, tool declarations)."""


class ProtocolError(WidgetError):
    """The other side answered with an error or something the protocol does not allow."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class ConnectionFailed(WidgetError):
    """The relay could not be reached or refused the connection."""


class StateLimitError(WidgetError):
    """The state document would exceed the D4 limits (64 KB or depth 32)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code

"""The one error root of the widget and its subclasses.

Every error the widget raises on purpose is a ``WidgetError`` with a machine-readable ``code`` and a
``message`` for people; ``str(error)`` is the message (``ProtocolError`` prefixes its code). Bad input
from the code that calls us (options, declarations, arguments) is a ``ConfigError``.
"""

from __future__ import annotations


class WidgetError(Exception):
    """Root of every error the widget raises on purpose: ``code`` for programs, ``message`` for people."""

    #: The code of this kind of error; an instance may carry a more precise one.
    code: str = "widget_error"

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class ConfigError(WidgetError):
    """Bad input from the caller: client options, relay config, tool declarations, arguments."""

    code = "config_error"


class ProtocolError(WidgetError):
    """The other side answered with an error or something the protocol does not allow (``code`` is the wire code)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message, code=code)
        # The text says which refusal it was: logs and tracebacks show "not_active: ...".
        self.args = (f"{code}: {message}",)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class ConnectionFailed(WidgetError):
    """The relay could not be reached or refused the connection."""

    code = "connection_failed"


class StateLimitError(WidgetError):
    """The state document would exceed its limits (65,536 bytes of compact JSON, or nesting depth 32)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message, code=code)

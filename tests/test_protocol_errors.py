"""The one error root: every error the widget raises on purpose has a ``code`` and a ``message``."""

from __future__ import annotations

import pytest

from widget import errors
from widget.core.limits import check_state
from widget.core.templates import TemplateError, expand
from widget.errors import (
    ConfigError,
    ConnectionFailed,
    ProtocolError,
    StateLimitError,
    WidgetError,
)
from widget.transports.base import TransportError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "exc,code,text",
    [
        (WidgetError("x"), "widget_error", "x"),
        (ConfigError("bad option"), "config_error", "bad option"),
        (ConnectionFailed("down"), "connection_failed", "down"),
        (TransportError("reset"), "connection_failed", "reset"),
        (StateLimitError("state_too_deep", "deep"), "state_too_deep", "deep"),
        (ProtocolError("not_active", "Another tab is active."), "not_active", "not_active: Another tab is active."),
        (WidgetError("y", code="custom"), "custom", "y"),
    ],
)
def test_code_message_and_text(exc: WidgetError, code: str, text: str) -> None:
    assert isinstance(exc, WidgetError) and isinstance(exc, Exception)
    assert exc.code == code and str(exc) == text
    assert exc.message == (text.split(": ", 1)[1] if isinstance(exc, ProtocolError) else text)


def test_every_error_class_has_a_code() -> None:
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, WidgetError)]
    assert len(classes) >= 5
    for cls in classes + [TemplateError, TransportError]:
        assert isinstance(cls.code, str) and cls.code


def test_template_error_is_in_the_root_and_still_a_value_error() -> None:
    with pytest.raises(TemplateError) as info:
        expand("/plans/{plan}", {})
    assert isinstance(info.value, WidgetError) and isinstance(info.value, ValueError)
    assert info.value.code == "template_error" and "Missing" in info.value.message


def test_state_limit_error_carries_the_wire_code() -> None:
    with pytest.raises(StateLimitError) as info:
        check_state({"a": "x" * 70_000})
    assert info.value.code == "state_too_large" and "65536" in str(info.value)


def test_one_rule_reads_every_ack() -> None:
    """Accepted, refused with a code and message (and a rate limit's wait), or malformed (``internal``)."""
    from widget.protocol import refusal_of

    assert refusal_of({"ok": True, "seq": 3}) is None
    r = refusal_of({"ok": False, "error": {"code": "rate_limited", "message": "Slow down.", "retry_after": 2}})
    assert r is not None and (r.code, r.message, r.retry_after) == ("rate_limited", "Slow down.", 2.0)
    for bad in (None, "ok", {"ok": "yes"}, {"ok": False}, {"ok": False, "error": "x"}):
        r = refusal_of(bad, "join refused")
        assert r is not None and (r.code, r.message, r.retry_after) == ("internal", "join refused", None)

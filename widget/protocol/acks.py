"""Reading an ack: accepted, or the refusal it carries (one rule for every place that reads acks)."""

from __future__ import annotations

from typing import NamedTuple

from .names import ErrorCode


class Refusal(NamedTuple):
    """What a refusing ack says: its error code, message, and (``rate_limited``) how long to wait."""

    code: str
    message: str
    retry_after: float | None = None


def refusal_of(ack: object, default_message: str = "Refused.") -> Refusal | None:
    """None when ``ack`` accepts (``{"ok": true, ...}``); else its refusal. Anything that is not a well-formed
    ack counts as a refusal with code ``internal``."""
    if isinstance(ack, dict) and ack.get("ok") is True:
        return None
    err = ack.get("error") if isinstance(ack, dict) else None
    if not isinstance(err, dict):
        return Refusal(ErrorCode.INTERNAL.value, default_message)
    wait = err.get("retry_after")
    return Refusal(
        str(err.get("code") or ErrorCode.INTERNAL.value),
        str(err.get("message") or default_message),
        float(wait) if isinstance(wait, (int, float)) and not isinstance(wait, bool) else None,
    )

"""Join tokens: HMAC-SHA256 signed, bound to one conversation, expiring (docs/protocol.md §2.2)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time

from ..errors import ProtocolError
from ..protocol import JOIN_TOKEN_TTL_S, ErrorCode


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenSigner:
    """``<payload>.<signature>``; payload is base64url JSON ``{"c": conversation_id, "e": expires_at}``."""

    def __init__(self, secret: str | bytes | None = None, ttl_s: float = JOIN_TOKEN_TTL_S) -> None:
        if secret is None:
            secret = secrets.token_bytes(32)
        self._key = secret.encode("utf-8") if isinstance(secret, str) else secret
        self.ttl_s = ttl_s

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._key, b"autopilot-join." + payload.encode("ascii"), hashlib.sha256).digest())

    def issue(self, conversation_id: str, now: float | None = None) -> tuple[str, float]:
        expires_at = round((time.time() if now is None else now) + self.ttl_s, 3)
        payload = _b64(json.dumps({"c": conversation_id, "e": expires_at}, separators=(",", ":")).encode())
        return f"{payload}.{self._sign(payload)}", expires_at

    def verify(self, token: object, now: float | None = None) -> str:
        """Return the conversation id, or raise ProtocolError(invalid_token | token_expired)."""
        if not isinstance(token, str) or len(token) > 1024 or token.count(".") != 1:
            raise ProtocolError(ErrorCode.INVALID_TOKEN, "The join token is malformed.")
        payload, signature = token.split(".")
        if not hmac.compare_digest(self._sign(payload), signature):
            raise ProtocolError(ErrorCode.INVALID_TOKEN, "The join token was not issued by this relay.")
        try:
            data = json.loads(_unb64(payload))
            conversation_id, expires_at = data["c"], float(data["e"])
            if not isinstance(conversation_id, str):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            raise ProtocolError(ErrorCode.INVALID_TOKEN, "The join token is malformed.") from None
        if (time.time() if now is None else now) >= expires_at:
            raise ProtocolError(
                ErrorCode.TOKEN_EXPIRED, "The join token has expired; GET the conversation for a new one."
            )
        return conversation_id

"""Transports: one small Protocol, three implementations (python-socketio, the browser bridge, in-memory)."""

from .base import Transport, TransportError

__all__ = ["Transport", "TransportError"]

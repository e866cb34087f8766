"""Transports: one small Protocol, two implementations (python-socketio under CPython, the browser bridge); the
tests add an in-memory one (tests/fake_relay.py)."""

from .base import Transport, TransportError

__all__ = ["Transport", "TransportError"]

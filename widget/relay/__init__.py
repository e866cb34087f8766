"""The autopilot relay: HTTP API, Socket.IO relay, model loop and storage (docs/protocol.md).

Run it with ``python -m widget.relay``; embed it with :func:`create_app` (under a path prefix of your own ASGI
app: :func:`mount`); start one in tests with
:func:`start_relay` (async) or :func:`serve_in_thread`.
"""

from __future__ import annotations

from .app import create_app
from .config import AppConfig, ModelConfig, RelayConfig, load_config
from .http.mount import PrefixedRelay, mount
from .server import RelayHandle, serve_in_thread, start_relay

__all__ = [
    "AppConfig",
    "ModelConfig",
    "PrefixedRelay",
    "RelayConfig",
    "RelayHandle",
    "create_app",
    "load_config",
    "mount",
    "serve_in_thread",
    "start_relay",
]

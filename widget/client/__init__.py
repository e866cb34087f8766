"""The autopilot client: the asyncio driver of the sans-I/O session, and the public object pages use.

``AutopilotClient`` (``facade.py``) is put together from parts, one feature each, each given only what it uses:

- ``driver``: performs the session's effects (sends and their acks, the timer, tasks, notifications);
- ``wire``: HTTP requests and checked emits to the relay;
- ``connection``: connect, join, rejoin, disconnect, New chat; ``Link`` says which conversation is on;
- ``functions``: the registry (``Catalog``) and registering page functions; ``context``: the page context and
  context resolutions;
- ``calls`` and ``confirmation``: running the model's calls, the reader's confirmation of sensitive ones;
- ``tools``: declared tools and offered actions; ``input``: the reader's messages and answers;
- ``history``: past conversations; ``feedback``: ratings of answers; ``starters``: starter prompts.
"""

from __future__ import annotations

from ..core.session import CONNECTED, CONNECTING, DISCONNECTED, ERROR, IDLE, RECONNECTING
from .calls import Navigate
from .confirmation import ConfirmationHandler
from .connection import storage_key
from .facade import AutopilotClient
from .history import PastConversation

#: Connection states reported by ``connectionStateChanged``, under the names this module always had.
CONNECTED_STATE, DISCONNECTED_STATE = CONNECTED, DISCONNECTED

__all__ = [
    "AutopilotClient", "Navigate", "ConfirmationHandler", "PastConversation", "storage_key",
    "IDLE", "CONNECTING", "CONNECTED_STATE", "RECONNECTING", "DISCONNECTED_STATE", "ERROR",
]

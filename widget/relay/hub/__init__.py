"""The relay's live side: Socket.IO handlers (docs/protocol.md §3–4) and the model loop, one module per
responsibility:

- ``core``: the ``Hub`` that puts them together; stores and emits sequenced events. Each part gets a narrow context
  of what it uses (``context``: the small types those contexts are made of), never the ``Hub``;
- ``skeleton``: the one decorator every socket event goes through (shape, join, idempotency, lock, errors);
- ``joining`` / ``writes``: the socket handlers;
- ``turns``: the turn loop, one typed ``Round`` at a time;
- ``dispatch``: which socket runs a call, waiting for its answer, relay config functions;
- ``fanout``: keeping several relay processes' sockets gap-free;
- ``prompts``: what the model is sent; ``ask_user``: prompts and answers;
- ``patching``: state patches, all or nothing; ``lifecycle``: cancel, recovery, deletion;
- ``runtime``: what this process keeps per conversation; ``rounds``: a round's message and a call's tool message.
"""

from __future__ import annotations

from ...core.tools import check_tool_arguments
from ..ratelimit import RateLimiter
from .ask_user import check_answer as _check_answer
from .ask_user import prompt_from as _prompt_from
from .core import Hub
from .patching import PatchFailed, _PatchFailed, apply_patch_atomic
from .runtime import ConvRuntime, empty_state, new_id

__all__ = ["ConvRuntime", "Hub", "PatchFailed", "RateLimiter", "_PatchFailed", "_check_answer", "_prompt_from",
           "apply_patch_atomic", "check_tool_arguments", "empty_state", "new_id"]

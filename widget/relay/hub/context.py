"""What the hub's parts share: the small types their contexts are made of.

Each part of the hub (``fanout``, ``dispatch``, ``turns``, ...) is given a narrow context listing what it uses (the
store, the configuration, the runtimes, a ``spawn``, a few of its siblings' operations as callables), never the
``Hub``; ``core`` puts them together. This module is below every part: it imports none of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from ... import protocol as P
from ...errors import ProtocolError
from ..config import AppConfig, RelayConfig
from ..ratelimit import RateLimiter
from .runtime import ConvRuntime

#: Run a coroutine as a task the hub cancels on shutdown (``Hub.spawn``).
Spawn = Callable[[Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]


class EmitEvent(Protocol):
    """Store a sequenced event (taking the next seq), then emit it to the conversation (``Hub.emit_event``)."""

    def __call__(self, cid: str, name: str, payload: dict[str, Any], **store_kw: Any) -> Awaitable[int]: ...


class EmitLocked(Protocol):
    """``EmitEvent`` for a caller that holds the conversation's lock (``Hub.emit_locked``)."""

    def __call__(
        self, rt: ConvRuntime, cid: str, name: str, payload: dict[str, Any], **store_kw: Any
    ) -> Awaitable[int]: ...


@dataclass
class Switches:
    """The relay process's shutdown flags, read by the parts when they act (``Hub.closing``, ``Hub.draining``)."""

    #: the relay is shutting down: running turns are left for the next open to recover
    closing: bool = False
    #: a graceful shutdown (widget.relay.drain): no new joins or turns, running turns end with turn_interrupted when
    #: cancelled
    draining: bool = False

    def refuse_new_work(self) -> None:
        """While the relay drains for shutdown, a join or a new turn is refused ``unavailable``."""
        if self.draining:
            raise ProtocolError(
                P.ErrorCode.UNAVAILABLE, "The relay is shutting down; reconnect (another relay process answers)."
            )


@dataclass
class Limiters:
    """The hub's rate limiters (``Hub.message_limiter`` and the others read and replace them here)."""

    message: RateLimiter  # per conversation
    join: RateLimiter  # per address
    replay: RateLimiter  # per socket
    patch: RateLimiter  # per conversation
    cancel: RateLimiter  # per socket
    refused: RateLimiter  # per socket

    @classmethod
    def of(cls, config: RelayConfig) -> Limiters:
        """The limiters of a relay configuration."""
        return cls(
            message=RateLimiter(config.message_rate_per_minute),
            join=RateLimiter(config.join_rate_per_minute),
            replay=RateLimiter(config.replay_rate_per_minute),
            patch=RateLimiter(config.state_patch_rate_per_minute),
            cancel=RateLimiter(config.cancel_rate_per_minute),
            refused=RateLimiter(config.refused_write_rate_per_minute),
        )


def app_of(config: RelayConfig, conv: dict[str, Any]) -> AppConfig:
    """The app configuration of a conversation (the defaults for an app no longer configured)."""
    return config.apps.get(conv["app_id"]) or AppConfig()

"""The one skeleton every socket event goes through: payload shape, membership, idempotency, the
conversation's lock and the error ack. A handler says what it needs with ``@socket_event`` and only
holds its own logic."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ... import protocol as P
from ...errors import ProtocolError
from ..http.contract import refusal
from ..http.edge import is_store_failure
from ..storage import store as S
from .runtime import ConvRuntime, Runtimes

log = logging.getLogger("widget.relay")

Ack = dict[str, Any]


def unstorable(data: Any) -> str | None:
    """Why a decoded event payload cannot be stored, or None: a string or key with a lone surrogate (JSON
    ``"\\ud800"`` decodes to one; it has no UTF-8 form, SQLite and PostgreSQL refuse it). Iterative: the
    decoder's nesting limit is the only bound on depth."""
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return "The payload contains a string that is not valid Unicode (a lone surrogate); nothing was done."
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return None


def key_of(data: dict[str, Any]) -> str:
    """The payload's ``idempotency_key``, or ``bad_request``."""
    key = data.get("idempotency_key")
    if not isinstance(key, str) or not key or len(key) > P.MAX_IDEMPOTENCY_KEY_CHARS:
        raise ProtocolError(
            P.ErrorCode.BAD_REQUEST,
            f"idempotency_key must be a non-empty string of at most {P.MAX_IDEMPOTENCY_KEY_CHARS} characters",
        )
    return key


class RateLimited(ProtocolError):
    """``rate_limited``, with how long to wait (the ack's ``error.retry_after``, seconds)."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(P.ErrorCode.RATE_LIMITED, message)
        self.retry_after = retry_after


def check_rate(limiter: Any, key: str, message: str) -> None:
    """Count a hit on ``limiter`` for ``key``, or raise ``RateLimited`` (nothing counted)."""
    if not limiter.allow(key):
        raise RateLimited(message, round(max(limiter.retry_after(key), 0.001), 3))


def key_reused_message(stored: str, event: str) -> str:
    """The message of ``idempotency_key_reused``."""
    return (
        f"This idempotency_key was already used for a {stored} in this conversation; a {event} needs a key "
        "of its own. Nothing was done."
    )


@dataclass
class Ctx:
    """One incoming event: the socket, and (for a joined socket) its conversation and idempotency key."""

    event: str
    sid: str
    cid: str = ""
    rt: ConvRuntime | None = None
    key: str = ""

    def idempotency(self, ack: Ack) -> S.Ack:
        """What the store keeps with this write: the ack under the event's key, for this kind of event."""
        return (self.key, ack, self.event)

    @property
    def conv_rt(self) -> ConvRuntime:
        """The conversation's runtime (a joined socket's event has one)."""
        assert self.rt is not None
        return self.rt


Handler = Callable[[Any, Ctx, Any], Awaitable[Ack]]


@dataclass(frozen=True)
class EventSpec:
    """What the skeleton does before a handler runs."""

    event: str
    #: the ``bad_request`` message when the payload is not an object (None: any payload reaches the handler)
    shape: str | None = None
    #: the socket must have joined a conversation (``not_joined`` otherwise)
    joined: bool = True
    #: the payload carries an ``idempotency_key``; a repeat gets the stored ack and nothing is done again
    idempotent: bool = False
    #: the handler runs under the conversation's lock (the stored-ack check too)
    locked: bool = False
    #: runs before the lock is taken (work that takes the lock itself)
    before: Callable[[Any, Ctx], Awaitable[None]] | None = None


def socket_event(
    event: str,
    *,
    shape: str | None = None,
    joined: bool = True,
    idempotent: bool = False,
    locked: bool = False,
    before: Callable[[Any, Ctx], Awaitable[None]] | None = None,
) -> Callable[[Handler], Handler]:
    """Mark a method as the handler of a client → relay event (see ``EventSpec``)."""
    spec = EventSpec(event, shape, joined, idempotent, locked, before)

    def mark(fn: Handler) -> Handler:
        fn.__socket_event__ = spec  # type: ignore[attr-defined]
        return fn

    return mark


def handlers_of(owner: Any) -> dict[str, tuple[EventSpec, Callable[[Ctx, Any], Awaitable[Ack]]]]:
    """The ``@socket_event`` methods of ``owner``, by event name."""
    out = {}
    for name in dir(type(owner)):
        spec = getattr(getattr(type(owner), name), "__socket_event__", None)
        if isinstance(spec, EventSpec):
            out[spec.event] = (spec, getattr(owner, name))
    return out


def wrap(
    runtimes: Runtimes, store: S.Store, owner: Any, spec: EventSpec, fn: Callable[[Ctx, Any], Awaitable[Ack]]
) -> Callable[..., Awaitable[Ack]]:
    """The Socket.IO handler for one event: the skeleton around ``fn`` (``runtimes``: which conversation a socket
    joined; ``store``: the stored acks of idempotent events)."""

    async def handle(sid: str, data: Any = None, *extra: Any) -> Ack:
        if extra:
            return P.error(P.ErrorCode.BAD_REQUEST, "An event carries one argument (an object).")
        problem = unstorable(data)
        if problem is not None:
            return P.error(P.ErrorCode.BAD_REQUEST, problem)
        try:
            ctx = Ctx(spec.event, sid)
            if spec.joined:
                ctx.cid, ctx.rt = runtimes.joined(sid)
            if spec.shape is not None and not isinstance(data, dict):
                raise ProtocolError(P.ErrorCode.BAD_REQUEST, spec.shape)
            if spec.idempotent:
                ctx.key = key_of(data)
            if refused := refusal(spec.event, data):  # the payload's schema (widget.relay.http.contract)
                raise ProtocolError(*refused)
            if spec.before is not None:
                await spec.before(owner, ctx)
            if not spec.locked:
                if spec.idempotent:
                    stored = await store.get_ack(ctx.cid, ctx.key, spec.event)
                    if stored is not None:
                        return stored
                return await fn(ctx, data)
            async with ctx.conv_rt.lock:
                if spec.idempotent:
                    stored = await store.get_ack(ctx.cid, ctx.key, spec.event)
                    if stored is not None:
                        return stored
                return await fn(ctx, data)
        except RateLimited as exc:
            ack = P.error(exc.code, exc.message)
            ack["error"]["retry_after"] = exc.retry_after  # type: ignore[index]
            return ack
        except ProtocolError as exc:
            return P.error(exc.code, exc.message)
        except S.IdempotencyConflict as exc:
            return P.error(P.ErrorCode.IDEMPOTENCY_KEY_REUSED, key_reused_message(exc.kind, spec.event))
        except Exception as exc:
            if is_store_failure(exc):  # as the HTTP API answers it (503 unavailable): the client tries again
                log.warning("the store failed during %s: %s: %s", spec.event, type(exc).__name__, str(exc)[:160])
                return P.error(P.ErrorCode.UNAVAILABLE, "The relay's store did not answer; try again in a moment.")
            log.exception("relay handler failed")
            return P.error(P.ErrorCode.INTERNAL, "The relay failed to handle this event.")

    handle.__name__ = f"on_{spec.event}"
    return handle

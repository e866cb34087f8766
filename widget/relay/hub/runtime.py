"""What one relay process keeps per conversation: its own sockets, its turn task, its waiters.

The store is the source of truth for calls, prompts, state, the active client, which socket a call was
dispatched to and which relay instance runs a turn; a ``ConvRuntime`` only tracks this process's own
sockets and tasks, and is dropped as soon as none of them is left (``Runtimes.release``).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ... import protocol as P
from ...errors import ProtocolError
from ...protocol import ConversationStatus

#: How often a waiting turn re-reads a pending call from the store (another process may answer it).
CALL_POLL_S = 0.5
#: How often a relay instance marks itself alive in the store (``storage.INSTANCE_TTL_S`` ends it).
HEARTBEAT_S = 2.0
#: With a shared store: how often the hub checks its sockets' conversations for events they missed and
#: turns whose relay died; faster while the Redis connection is down.
POLL_S = 1.0
POLL_DEGRADED_S = 0.25
BUSY_STATUSES = {
    ConversationStatus.RUNNING,
    ConversationStatus.WAITING_FOR_FUNCTION,
    ConversationStatus.WAITING_FOR_ASK_USER,
}
IDLE_STATUSES = (ConversationStatus.IDLE, ConversationStatus.FAILED)
LIVE_STATUSES = (ConversationStatus.RUNNING, ConversationStatus.WAITING_FOR_FUNCTION)
#: The largest ``seq`` a client may name (``last_seq``): stores keep it in a signed 64-bit integer.
MAX_SEQ = 2**63 - 1


def new_id(prefix: str, nbytes: int = 9) -> str:
    """A random id with a readable prefix (``m_``, ``t_``, ``call_``...)."""
    return prefix + secrets.token_urlsafe(nbytes)


def empty_state() -> dict[str, Any]:
    """The state document of a new conversation."""
    return {P.STATE_ROOT: {"functions": {}, "context": {}}}


@dataclass
class ConvRuntime:
    """This process's side of a conversation: its own sockets and tasks. The active client and call
    dispatch live in the store (any process may hold the active socket)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: this process's sockets joined to the conversation, and those whose join replay is done
    sids: set[str] = field(default_factory=set)
    ready: set[str] = field(default_factory=set)
    turn: asyncio.Task[None] | None = None
    call_events: dict[str, asyncio.Event] = field(default_factory=dict)
    #: every event up to this seq has reached this process's ready sockets in order (emitted here, or
    #: by another process through Redis); the catch-up resends from here. It moves on only without a
    #: gap: an event that overtook missed ones (dropped during a Redis outage) does not stand for them.
    seen_seq: int = 0
    #: a store seq the last poll found ahead of ``seen_seq`` (caught up if still missing at the next)
    lag: int = 0
    #: a catch-up is spawned and has not started reading yet (one is enough for a burst of gaps)
    catch_up_queued: bool = False
    #: ``(sid, seq)``: another process's ``run: true`` copy of a call reached this socket in order;
    #: the room copy that follows skips that socket
    direct: tuple[str, int] | None = None
    #: tasks of this process working on the conversation outside the lock (they keep the entry alive)
    users: int = 0

    def unused(self) -> bool:
        """No socket, task, waiter or lock holder of this process needs the entry."""
        return (
            not self.sids
            and (self.turn is None or self.turn.done())
            and not self.lock.locked()
            and not self.call_events
            and self.users == 0
        )


class Runtimes:
    """This process's conversations (``convs``) and which conversation each of its sockets joined
    (``clients``). An entry exists while something of this process uses it."""

    def __init__(self) -> None:
        self.convs: dict[str, ConvRuntime] = {}
        self.clients: dict[str, str] = {}  # sid -> conversation id

    def rt(self, cid: str) -> ConvRuntime:
        """The conversation's entry, made if missing."""
        rt = self.convs.get(cid)
        if rt is None:
            rt = self.convs[cid] = ConvRuntime()
        return rt

    def joined(self, sid: str) -> tuple[str, ConvRuntime]:
        """The conversation a socket joined, or ``not_joined``."""
        cid = self.clients.get(sid)
        if cid is None:
            raise ProtocolError(P.ErrorCode.NOT_JOINED, "Join a conversation first.")
        return cid, self.rt(cid)

    @contextmanager
    def using(self, cid: str) -> Iterator[ConvRuntime]:
        """The conversation's entry, kept while the block runs (and dropped after it if unused)."""
        rt = self.rt(cid)
        rt.users += 1
        try:
            yield rt
        finally:
            rt.users -= 1
            self.release(cid)

    def release(self, cid: str) -> None:
        """Drop the conversation's entry if nothing of this process uses it any more."""
        rt = self.convs.get(cid)
        if rt is not None and rt.unused():
            del self.convs[cid]

    def leave(self, sid: str) -> str | None:
        """Forget a socket's membership; the conversation it had joined, or None."""
        cid = self.clients.pop(sid, None)
        if cid is None:
            return None
        rt = self.convs.get(cid)
        if rt is not None:
            rt.sids.discard(sid)
            rt.ready.discard(sid)
            self.release(cid)
        return cid

"""A bound on what one socket's send queue may hold, and back-pressure for replays.

Engine.IO queues every packet for a socket until its transport writes it; a client that stops reading
makes that queue grow without end (each live event and each replayed one adds to it). Each socket's
queue is bounded here: a packet that would take it past ``socket_send_queue_bytes`` disconnects the
socket instead (its queue is dropped): a slow reader is disconnected, not buffered. Replays, which send
many events at once, wait while the queue is over a quarter of the bound, so a reader that is merely
slow is fed at its own pace and is not disconnected.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from engineio import packet as eio_packet

from ..config import RelayConfig
from ..sio import RelaySocketServer

log = logging.getLogger("widget.relay")

#: How long a replay waits for a socket to read before it is disconnected.
DRAIN_TIMEOUT_S = 10.0
_DRAIN_POLL_S = 0.01


def _size(pkt: Any) -> int:
    data = getattr(pkt, "data", None)
    return len(data) + 1 if isinstance(data, (str, bytes)) else 16


class _Bounded:
    """Mixed into a socket's Engine.IO class: counts the bytes queued for its transport."""

    queued_bytes = 0
    max_queued_bytes = 0
    overflowed = False
    on_overflow: Any = None

    async def send(self, pkt: Any) -> None:
        if pkt.packet_type == eio_packet.MESSAGE and self.max_queued_bytes:
            size = _size(pkt)
            if self.queued_bytes + size > self.max_queued_bytes:
                await self._overflow()
                return
            self.queued_bytes += size
        await super().send(pkt)  # type: ignore[misc]

    async def poll(self) -> Any:
        packets = await super().poll()  # type: ignore[misc]
        taken = sum(_size(p) for p in packets if p is not None and p.packet_type == eio_packet.MESSAGE)
        self.queued_bytes = max(0, self.queued_bytes - taken)
        return packets

    async def _overflow(self) -> None:
        if self.overflowed:
            return
        self.overflowed = True
        if self.on_overflow is not None:
            self.on_overflow()
        s: Any = self
        log.warning("socket %s does not read what it is sent (%d bytes queued, bound %d); disconnecting it",
                    s.sid, self.queued_bytes, self.max_queued_bytes)
        while True:  # drop what it did not read: that memory is the point
            try:
                s.queue.get_nowait()
                s.queue.task_done()
            except asyncio.QueueEmpty:
                break
        self.queued_bytes = 0
        if not s.closed and not s.closing:
            await s.close(wait=False, reason=s.server.reason.SERVER_DISCONNECT)
            await s.queue.put(None)  # the WebSocket writer ends and closes the connection


_classes: dict[type, type] = {}


class SendQueues:
    """The hub's bound on each socket's send queue (``socket_send_queue_bytes``)."""

    def __init__(self, config: RelayConfig, sio: RelaySocketServer) -> None:
        self._config = config
        self._sio = sio
        #: sockets disconnected for not reading (since start)
        self.disconnected = 0
        #: how long a replay waits for a socket to read before it is disconnected
        self.drain_timeout_s = DRAIN_TIMEOUT_S

    def _eio_socket(self, sid: str) -> Any:
        sio = self._sio
        try:
            eio_sid = sio.manager.eio_sid_from_sid(sid, "/")
        except Exception:  # noqa: BLE001 - not connected (any more)
            return None
        return sio.eio.sockets.get(eio_sid) if eio_sid else None

    def bound(self, sid: str) -> None:
        """Bound a newly connected socket's queue."""
        limit = self._config.socket_send_queue_bytes
        s = self._eio_socket(sid)
        if not limit or s is None:
            return
        cls = type(s)
        if not issubclass(cls, _Bounded):
            bounded = _classes.get(cls)
            if bounded is None:
                bounded = _classes[cls] = type("Bounded" + cls.__name__, (_Bounded, cls), {})
            s.__class__ = bounded
        s.max_queued_bytes = limit
        s.on_overflow = self._count

    def _count(self) -> None:
        self.disconnected += 1

    def queued(self, sid: str) -> int:
        """Bytes queued for the socket's transport (0 when unknown)."""
        s = self._eio_socket(sid)
        return getattr(s, "queued_bytes", 0) if s is not None else 0

    async def drained(self, sid: str, timeout: float | None = None) -> bool:
        """Wait until the socket's queue is at most a quarter of the bound; False when the socket is gone,
        or has not read that far within ``timeout`` (it is disconnected then)."""
        limit = self._config.socket_send_queue_bytes
        s = self._eio_socket(sid)
        if s is None:
            return False
        if not limit:
            return True
        deadline = time.monotonic() + (self.drain_timeout_s if timeout is None else timeout)
        while getattr(s, "queued_bytes", 0) > limit // 4:
            if s.closed or s.closing:
                return False
            if time.monotonic() > deadline:
                await s._overflow()
                return False
            await asyncio.sleep(_DRAIN_POLL_S)
        return not (s.closed or s.closing)

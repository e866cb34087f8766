"""Test doubles of the relay for the client's tests: an in-memory transport (no sockets) and a small relay behind
it that applies real JSON Patch."""

from __future__ import annotations

import asyncio
import copy
from typing import Any, Protocol

import jsonpatch

from widget import protocol as P
from widget.core.limits import check_state
from widget.errors import StateLimitError
from widget.transports.base import CONNECTED, DISCONNECTED, EventHandler, TransportError

BASE = "http://relay.test"


class MemoryPeer(Protocol):
    """What plays the relay behind a MemoryTransport."""

    async def handle_request(self, method: str, url: str, body: Any) -> tuple[int, Any]:
        """Answer one HTTP request."""
        ...

    async def handle_emit(self, transport: MemoryTransport, event: str, data: Any) -> Any:
        """Answer one emit with its ack value."""
        ...


class MemoryTransport:
    """Delivers emits to ``peer`` and the peer's events (``deliver``) to the client, on the same loop."""

    def __init__(self, peer: MemoryPeer) -> None:
        self.peer = peer
        self._handler: EventHandler = lambda event, data: None
        self._connected = False
        self.refuse_connect: str | None = None
        self.sent: list[tuple[str, Any]] = []

    def set_handler(self, handler: EventHandler) -> None:
        """Route incoming events to ``handler``."""
        self._handler = handler

    @property
    def connected(self) -> bool:
        """Whether the fake socket is up."""
        return self._connected

    async def request(
        self, method: str, url: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """Forward to the peer."""
        return await self.peer.handle_request(method, url, body)

    async def connect(self, url: str, path: str) -> None:
        """Mark connected (or fail as told by ``refuse_connect``)."""
        if self.refuse_connect:
            raise TransportError(self.refuse_connect)
        self._connected = True
        self._handler(CONNECTED, None)

    async def emit(self, event: str, data: Any, timeout: float | None = None) -> Any:
        """Forward to the peer and return its ack."""
        if not self._connected:
            raise TransportError(f"Cannot emit {event!r}: not connected")
        self.sent.append((event, data))
        await asyncio.sleep(0)
        return await self.peer.handle_emit(self, event, data)

    def deliver(self, event: str, data: Any) -> None:
        """The peer pushes an event to the client."""
        self._handler(event, data)

    def drop(self) -> None:
        """Simulate a dropped connection."""
        self._connected = False
        self._handler(DISCONNECTED, None)

    def restore(self) -> None:
        """Simulate the socket coming back (the client rejoins)."""
        self._connected = True
        self._handler(CONNECTED, None)

    async def disconnect(self) -> None:
        """Close."""
        if self._connected:
            self._connected = False
            self._handler(DISCONNECTED, None)


class FakeRelay:
    """Plays the relay: conversations over 'HTTP', join/state/patch/response over 'Socket.IO'."""

    def __init__(self) -> None:
        self.doc: dict[str, Any] = {"autopilot": {"functions": {}, "context": {}}}
        self.seq = 0
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.responses: list[dict[str, Any]] = []
        self.outcomes: list[dict[str, Any]] = []
        self.patches: list[list[dict[str, Any]]] = []
        self.keys: dict[str, Any] = {}
        self.join_error: dict[str, Any] | None = None
        self.ack_patches = True
        #: While set to an unset asyncio.Event, state_patch acks wait for it (a lost acknowledgement).
        self.hold_patch_acks: object | None = None
        #: While set to an unset asyncio.Event, conversation GETs wait for it (a slow rejoin).
        self.hold_gets: object | None = None
        self.pending_calls: list[dict[str, Any]] = []
        #: Error codes the next function responses are refused with, one per response (e.g. a full disk).
        self.response_errors: list[str] = []
        #: Calls handed over by an ``activate`` ack ("Use here").
        self.activate_calls: list[dict[str, Any]] = []
        #: Tokens a join is refused with (a relay restarted with a new secret).
        self.refused_tokens: set[str] = set()
        self.requests: list[tuple[str, str]] = []
        self.joined = False
        self.created = 0

    async def handle_request(self, method: str, url: str, body: Any) -> tuple[int, Any]:
        self.requests.append((method, url))
        if self.hold_gets is not None and method == "GET":
            await self.hold_gets.wait()  # type: ignore[attr-defined]
        if method == "POST" and url.endswith("/conversations"):
            self.created += 1
            return 201, {"ok": True, "id": f"c{self.created}", "url": f"{BASE}/api/conversations/c{self.created}"}
        if method == "GET" and "/api/conversations/" in url:
            if url.endswith("/missing"):
                return 404, P.error(P.ErrorCode.NOT_FOUND, "no such conversation")
            return 200, {
                "ok": True,
                "conversation": {"id": url.rsplit("/", 1)[-1], "seq": self.seq, "status": "idle"},
                "messages": [],
                "relay_url": BASE,
                "relay_path": "/socket.io",
                "token": f"tok{len(self.requests)}",
            }
        return 404, P.error(P.ErrorCode.NOT_FOUND, "nope")

    async def handle_emit(self, transport: MemoryTransport, event: str, data: Any) -> Any:
        key = data.get("idempotency_key") if isinstance(data, dict) else None
        if key and key in self.keys:
            return self.keys[key]
        ack = await self._handle(transport, event, data)
        transient = isinstance(ack, dict) and (ack.get("error") or {}).get("code") in (P.ErrorCode.INTERNAL,
                                                                                       P.ErrorCode.RATE_LIMITED)
        if key and not transient:  # like the relay: a write that failed stores no acknowledgement either
            self.keys[key] = ack
        return ack

    async def _handle(self, transport: MemoryTransport, event: str, data: Any) -> Any:
        if event == P.Event.JOIN:
            if self.join_error:
                return {"ok": False, "error": self.join_error}
            if data.get("token") in self.refused_tokens:
                return P.error(P.ErrorCode.INVALID_TOKEN, "Join token is invalid.")
            if data.get("version") != P.PROTOCOL_VERSION:
                return P.error(P.ErrorCode.VERSION_MISMATCH, "bad version")
            self.joined = True
            transport.deliver(P.Event.STATE, copy.deepcopy(self.doc["autopilot"]))
            for name, payload in self.events:
                if payload["seq"] > (data.get("last_seq") or 0):
                    transport.deliver(name, payload)
            return P.ok(conversation_id="c1", seq=self.seq, active=True, pending_calls=self.pending_calls)
        if event == P.Event.STATE_PATCH:
            if self.hold_patch_acks is not None:
                await self.hold_patch_acks.wait()  # type: ignore[attr-defined]
            if not self.ack_patches:
                return P.error(P.ErrorCode.INTERNAL, "refused for the test")
            self.patches.append(data["patch"])
            try:
                new = jsonpatch.apply_patch(self.doc, data["patch"])
                check_state(new)
            except StateLimitError as exc:
                return P.error(exc.code, str(exc))
            except Exception as exc:  # noqa: BLE001
                return P.error(P.ErrorCode.PATCH_FAILED, str(exc))
            self.doc = new
            return P.ok()
        if event == P.Event.FUNCTION_RESPONSE:
            if not self.joined:
                return P.error(P.ErrorCode.NOT_JOINED, "Join a conversation first.")
            if self.response_errors:
                return P.error(self.response_errors.pop(0), "refused for the test")
            self.responses.append(data)
            return P.ok()
        if event == P.Event.ACTIVATE:
            # Like the relay: the stored state follows the ack.
            asyncio.get_running_loop().call_soon(transport.deliver, P.Event.STATE, copy.deepcopy(self.doc["autopilot"]))
            return P.ok(active=True, pending_calls=self.activate_calls)
        if event == P.Event.USER_MESSAGE:
            return P.ok(message_id="m1")
        if event == P.Event.ACTION_OUTCOME:
            self.outcomes.append(data)
            return P.ok(message_id=f"o{len(self.outcomes)}")
        if event == P.Event.REPLAY:
            for name, payload in self.events:
                if payload["seq"] > data["last_seq"]:
                    transport.deliver(name, payload)
            return P.ok(seq=self.seq)
        return P.error(P.ErrorCode.BAD_REQUEST, f"unknown event {event}")

    def push(self, transport: MemoryTransport, name: str, payload: dict[str, Any], deliver: bool = True) -> None:
        """Record a sequenced event and (optionally) deliver it live."""
        self.seq += 1
        payload = {**payload, "seq": self.seq}
        self.events.append((name, payload))
        if deliver:
            transport.deliver(name, payload)

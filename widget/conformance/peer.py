"""The suite's instruments: a recording Socket.IO peer read packet by packet, and the relay's HTTP API."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlsplit

import aiohttp
import socketio

from ..protocol import PROTOCOL_VERSION, SEQUENCED_EVENTS, Event


class Mismatch(AssertionError):
    """The relay did something the protocol does not say (the message says what was expected and what came)."""


class Skipped(Exception):
    """The flow cannot run against this relay as the suite was started (the message says what it needs): its own
    outcome, never a pass."""


def check(condition: bool, message: str) -> None:
    """Raise ``Mismatch(message)`` unless ``condition``."""
    if not condition:
        raise Mismatch(message)


def error_code(ack: Any) -> str | None:
    """The ``error.code`` of a refusal, None for a success."""
    if isinstance(ack, dict) and ack.get("ok") is False and isinstance(ack.get("error"), dict):
        code = ack["error"].get("code")
        return code if isinstance(code, str) else None
    return None


def refused(ack: Any, code: str, what: str) -> None:
    """Check that ``ack`` is ``{"ok": false, "error": {"code": code, "message": <non-empty>}}``."""
    check(error_code(ack) == code, f"{what}: expected a {code!r} refusal, got {ack!r}")
    check(
        isinstance(ack["error"].get("message"), str) and bool(ack["error"]["message"]),
        f"{what}: a refusal's message must be a non-empty sentence, got {ack!r}",
    )


def accepted(ack: Any, what: str) -> dict[str, Any]:
    """Check that ``ack`` is a success (``ok: true``); return it."""
    check(isinstance(ack, dict) and ack.get("ok") is True, f"{what}: expected ok: true, got {ack!r}")
    return cast(dict[str, Any], ack)


@dataclass
class Peer:
    """One Socket.IO client: records every event; ``expect`` reads them in order, one packet at a time."""

    relay_url: str
    relay_path: str
    timeout: float = 10.0
    events: list[tuple[str, Any]] = field(default_factory=list)
    cursor: int = 0
    #: ``replay.done`` payloads, each with the number of events received before it (kept out of ``events``:
    #: the flows read the conversation's events; ``replay_done`` says where each join's replay ended)
    replay_done: list[tuple[int, Any]] = field(default_factory=list)
    #: Every packet in the order it reached the socket: ``"event <name>"`` or ``"ack <name>"`` (``call`` records
    #: its ack here the moment the ack packet is handled, so the order of acks and events can be checked).
    arrivals: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sio = socketio.AsyncClient(reconnection=False)
        self._changed = asyncio.Event()
        self.sio.on("*", self._record)

    async def _record(self, event: str, data: Any = None) -> None:
        self.arrivals.append(f"event {event}")
        if event == Event.REPLAY_DONE:
            self.replay_done.append((len(self.events), data))
        else:
            self.events.append((event, data))
        self._changed.set()

    async def connect(self) -> Peer:
        """Open the socket (WebSocket transport)."""
        await self.sio.connect(self.relay_url, socketio_path=self.relay_path, transports=["websocket"])
        return self

    async def close(self) -> None:
        """Disconnect (no-op when already closed)."""
        if self.sio.connected:
            await self.sio.disconnect()

    async def call(self, event: str, data: Any = None) -> Any:
        """Emit ``event`` and return its ack (noted in ``arrivals`` when its packet is handled)."""
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def on_ack(*args: Any) -> None:
            self.arrivals.append(f"ack {event}")
            if not done.done():
                done.set_result(args[0] if len(args) == 1 else list(args))

        await self.sio.emit(event, data, callback=on_ack)
        try:
            return await asyncio.wait_for(done, self.timeout)
        except TimeoutError:
            raise Mismatch(f"no ack to {event!r} within {self.timeout:g} s") from None

    def order(self, first: str, then: str, since: int = 0) -> None:
        """``first`` reached the socket before ``then`` (both ``arrivals`` entries, searched from ``since``)."""
        seen = self.arrivals[since:]
        check(
            first in seen and then in seen and seen.index(first) < seen.index(then),
            f"expected {first!r} before {then!r}, got {seen}",
        )

    async def join(self, token: str, last_seq: int | None = 0) -> Any:
        """``join`` with this protocol version."""
        return await self.call(Event.JOIN, {"token": token, "version": PROTOCOL_VERSION, "last_seq": last_seq})

    async def next(self, timeout: float | None = None) -> tuple[str, Any]:
        """The next event not read yet (waits for it)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while self.cursor >= len(self.events):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Mismatch(
                    f"no event within {self.timeout if timeout is None else timeout:g} s "
                    f"(read so far: {[e for e, _ in self.events]})"
                )
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass
        item = self.events[self.cursor]
        self.cursor += 1
        return item

    async def expect(self, name: str, /, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        """The next event must be ``name`` (and carry ``fields`` with these values); return its payload."""
        event, data = await self.next(timeout)
        check(event == name, f"expected event {name!r}, got {event!r} {str(data)[:300]}")
        check(isinstance(data, dict), f"{name}: the payload must be an object, got {data!r}")
        for key, value in fields.items():
            check(data.get(key) == value, f"{name}: expected {key} = {value!r}, got {data.get(key)!r} in {data!r}")
        return cast(dict[str, Any], data)

    async def stream(self, message_id: str) -> str:
        """Read ``completion_stream`` events of one message up to (not including) the next other event; their text."""
        text: list[str] = []
        while True:
            await self._peek()
            event, data = self.events[self.cursor]
            if event != Event.COMPLETION_STREAM:
                return "".join(text)
            self.cursor += 1
            check(
                data.get("message_id") == message_id,
                f"completion_stream of {data.get('message_id')!r} inside message {message_id!r}",
            )
            check(isinstance(data.get("delta"), str), f"completion_stream without a string delta: {data!r}")
            text.append(data["delta"])

    async def _peek(self) -> None:
        if self.cursor >= len(self.events):
            await self.next()
            self.cursor -= 1

    async def quiet(self, settle: float = 0.3) -> None:
        """Nothing more may arrive: wait ``settle`` seconds and check that no event came."""
        await asyncio.sleep(settle)
        extra = self.events[self.cursor :]
        check(not extra, f"unexpected events: {[e for e, _ in extra]}")

    def sequenced(self) -> list[tuple[str, dict[str, Any]]]:
        """Every sequenced event received so far, in arrival order."""
        return [(e, d) for e, d in self.events if e in SEQUENCED_EVENTS]


@dataclass
class Relay:
    """The relay under test: one or more base URLs of the same deployment (several processes behind one store)."""

    urls: list[str]
    app: str
    origin: str | None = None
    secret: str | None = None
    timeout: float = 10.0
    _next: int = 0

    def __post_init__(self) -> None:
        self.urls = [u.rstrip("/") for u in self.urls]
        if self.origin is None:
            parts = urlsplit(self.urls[0])
            self.origin = f"{parts.scheme}://{parts.netloc}"
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))

    async def close(self) -> None:
        """Close the HTTP session."""
        await self.http.close()

    def base(self) -> str:
        """The next base URL, round robin (so sockets of one conversation reach different processes)."""
        url = self.urls[self._next % len(self.urls)]
        self._next += 1
        return url

    def create_headers(self, app: str | None = None, secret: str | None = None) -> dict[str, str]:
        """How this suite may create conversations: the app's secret when given, else the allowed Origin."""
        secret = secret if secret is not None else (self.secret if app in (None, self.app) else None)
        return {"Authorization": f"Bearer {secret}"} if secret else {"Origin": self.origin or ""}

    async def request(self, method: str, url: str, **kw: Any) -> tuple[int, Any, Any]:
        """``(status, JSON body or None, headers)``."""
        async with self.http.request(method, url, **kw) as r:
            raw = await r.read()
            body = None
            if raw and "json" in (r.content_type or ""):
                body = await r.json(content_type=None)
            return r.status, body, r.headers

    async def create(self, app: str | None = None, secret: str | None = None) -> str:
        """Create a conversation; its URL."""
        status, body, _ = await self.request(
            "POST",
            f"{self.base()}/api/apps/{app or self.app}/conversations",
            headers=self.create_headers(app, secret),
            json={},
        )
        check(status == 201 and isinstance(body, dict), f"create: expected 201, got {status} {body!r}")
        return str(body["url"])

    async def get(self, url: str, base: str | None = None) -> dict[str, Any]:
        """GET a conversation (through ``base`` when given: another process of the deployment)."""
        if base is not None:
            url = base + urlsplit(url).path
        status, body, _ = await self.request("GET", url)
        check(status == 200 and isinstance(body, dict), f"GET conversation: expected 200, got {status} {body!r}")
        return cast(dict[str, Any], body)

    async def peer(
        self, url: str, last_seq: int | None = 0, *, expect_state: bool = True
    ) -> tuple[Peer, dict[str, Any]]:
        """A socket joined to the conversation at ``url`` (through the next base URL); ``(peer, join ack)``."""
        info = await self.get(url, self.base())
        peer = await Peer(info["relay_url"], info["relay_path"], self.timeout).connect()
        ack = accepted(await peer.join(info["token"], last_seq), "join")
        if expect_state:
            await peer.expect(Event.STATE)
        return peer, ack

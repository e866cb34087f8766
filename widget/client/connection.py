"""Connecting the client to a relay: the HTTP steps (create or resume the conversation, read it), the socket, the
join handshake, rejoining after a drop, and closing. What a join means for calls and state is decided by the
sans-I/O session (``widget.core.session``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from .. import protocol as P
from ..core.session import ClientSession, Effect, Options
from ..errors import ConfigError, ProtocolError, WidgetError
from ..transports import base as transport_events
from ..transports.base import Transport
from .wire import Wire, error_payload, http_error

log = logging.getLogger("widget")


def storage_key(app_id: str) -> str:
    """The storage key under which a conversation URL is kept for ``app_id`` (one conversation per app)."""
    return f"autopilot:conversation:{app_id}"


class StorageSlot(MutableMapping[str, str]):
    """The client's storage as the parts hold it: a page may hand the client another mapping after it was made
    (``client.storage = ...``, e.g. two clients sharing one browser's storage), and every part follows."""

    def __init__(self, target: MutableMapping[str, str]) -> None:
        self.target = target

    def __getitem__(self, key: str) -> str:
        return self.target[key]

    def __setitem__(self, key: str, value: str) -> None:
        self.target[key] = value

    def __delitem__(self, key: str) -> None:
        del self.target[key]

    def __contains__(self, key: object) -> bool:
        return key in self.target

    def __iter__(self) -> Iterator[str]:
        return iter(self.target)

    def __len__(self) -> int:
        return len(self.target)


@dataclass
class Link:
    """Which conversation the client is on and how it got there: written by ``Connection``, read by the parts
    that address the conversation (history, feedback, the reader's input)."""

    #: The conversation record of the last read (None before the first).
    conversation: dict[str, Any] | None = None
    conversation_url: str | None = None
    #: With ``app_id``, how "New chat" and the past conversations find the app (None: given a URL only).
    relay_url: str | None = None
    app_id: str | None = None
    #: The options of the first ``connect``, for the connects that follow (New chat, reopening one).
    connect_options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ConnectionContext:
    """What connecting uses: the session and its driver's hooks, the network, the storage, and the parts that
    hear of a loaded or vanished conversation."""

    core: ClientSession
    transport: Transport
    wire: Wire
    storage: MutableMapping[str, str]
    link: Link
    apply: Callable[[list[Effect]], None]
    now: Callable[[], float]
    new_future: Callable[[], asyncio.Future[Any]]
    #: The acknowledgements of the state patches in flight.
    patch_waits: Callable[[], list[asyncio.Future[bool]]]
    #: The connection closed: settle what waits on the relay, cancel the running tasks.
    stop_effects: Callable[[], None]
    #: A conversation was read (before its load's events: a view sees its list and starters with it).
    loaded: Callable[[dict[str, Any]], None]
    #: The stored conversation (by URL) no longer exists.
    gone: Callable[[str], None]
    #: "New chat" is about to leave the current conversation.
    leaving: Callable[[], None]


class Connection:
    """``connect``, ``disconnect``, ``new_conversation`` and the socket's events."""

    def __init__(self, ctx: ConnectionContext) -> None:
        self._ctx = ctx
        self._state_waiter: asyncio.Future[Any] | None = None

    async def connect(
        self,
        conversation_url: str | None = None,
        *,
        relay_url: str | None = None,
        app_id: str | None = None,
        sync_state_before_function_response: bool = True,
        sync_state_before_function_response_timeout_ms: float = P.SYNC_STATE_BEFORE_FUNCTION_RESPONSE_TIMEOUT_MS,
        context_resolution_timeout_ms: float = P.CONTEXT_RESOLUTION_TIMEOUT_MS,
        function_call_history_limit: int = P.FUNCTION_CALL_HISTORY_LIMIT,
        join_after: Awaitable[Any] | None = None,
    ) -> dict[str, Any]:
        """See ``AutopilotClient.connect``."""
        ctx, link, core = self._ctx, self._ctx.link, self._ctx.core
        if conversation_url is None and (not relay_url or not app_id):
            raise ConfigError("connect() needs conversation_url, or both relay_url and app_id.")
        if function_call_history_limit < 1:
            raise ConfigError("function_call_history_limit must be at least 1.")
        link.connect_options = {
            "sync_state_before_function_response": sync_state_before_function_response,
            "sync_state_before_function_response_timeout_ms": sync_state_before_function_response_timeout_ms,
            "context_resolution_timeout_ms": context_resolution_timeout_ms,
            "function_call_history_limit": function_call_history_limit,
        }
        core.options = Options(
            sync_state_before_function_response=bool(sync_state_before_function_response),
            sync_state_before_function_response_timeout_ms=float(sync_state_before_function_response_timeout_ms),
            context_resolution_timeout_ms=float(context_resolution_timeout_ms),
        )
        core.set_history_limit(function_call_history_limit)
        link.relay_url = relay_url.rstrip("/") if relay_url else None
        link.app_id = app_id
        ctx.apply(core.connecting())
        try:
            if conversation_url is None:
                conversation_url = await self._resolve_conversation_url()
            link.conversation_url = conversation_url
            info = await self._get_conversation(conversation_url)
            if info is None:
                # A stored conversation that no longer exists: start a new one (and forget it in the app's list).
                ctx.gone(conversation_url)
                ctx.storage.pop(storage_key(app_id or ""), None)
                conversation_url = await self._create_conversation()
                link.conversation_url = conversation_url
                info = await self._get_conversation(conversation_url)
                if info is None:
                    raise ProtocolError(P.ErrorCode.NOT_FOUND, "The new conversation could not be read back.")
            self._load_conversation(info)
            await ctx.wire.within_step(
                ctx.transport.connect(info["relay_url"], info.get("relay_path") or P.DEFAULT_RELAY_PATH),
                f"Could not connect to the relay at {info['relay_url']}",
            )
            if join_after is not None:
                await join_after
            await self._join(info)
        except WidgetError as exc:
            ctx.apply(core.failed(error_payload(exc)))
            await self.quiet_disconnect()
            raise
        return link.conversation or {}

    async def connect_app(self, relay_url: str, app_id: str) -> dict[str, Any]:
        """Connect to the app's stored conversation (or a new one) with the options of the first connect."""
        return await self.connect(relay_url=relay_url, app_id=app_id, **self._ctx.link.connect_options)

    async def _resolve_conversation_url(self) -> str:
        stored = self._ctx.storage.get(storage_key(self._ctx.link.app_id or ""))
        if stored:
            return stored
        return await self._create_conversation()

    async def _create_conversation(self) -> str:
        relay_url, app_id = self._ctx.link.relay_url, self._ctx.link.app_id
        if not relay_url or not app_id:
            raise ConfigError("Creating a conversation needs relay_url and app_id.")
        url = relay_url + P.HTTP_CREATE_CONVERSATION.format(app_id=app_id)
        status, body = await self._ctx.wire.http("POST", url, {})
        if status != 201 or not isinstance(body, dict) or not isinstance(body.get("url"), str):
            raise http_error(status, body, f"Creating a conversation at {url} failed")
        created: str = body["url"]
        self._ctx.storage[storage_key(app_id)] = created
        return created

    async def _get_conversation(self, url: str) -> dict[str, Any] | None:
        status, body = await self._ctx.wire.http("GET", url)
        if status == 404:
            return None
        if status != 200 or not isinstance(body, dict):
            raise http_error(status, body, f"Reading the conversation at {url} failed")
        for key in ("relay_url", "token", "conversation"):
            if key not in body:
                raise ProtocolError(P.ErrorCode.BAD_REQUEST, f"The relay's conversation response lacks {key!r}.")
        if isinstance(body["token"], str):
            self._ctx.core.token_received(body["token"], self._ctx.now())
        return body

    def _load_conversation(self, info: dict[str, Any]) -> None:
        self._ctx.link.conversation = info["conversation"]
        self._ctx.loaded(info)
        self._ctx.apply(self._ctx.core.load(info))

    async def _join(self, info: dict[str, Any]) -> None:
        ctx, core = self._ctx, self._ctx.core
        if self._state_waiter is not None and not self._state_waiter.done():
            self._state_waiter.cancel()  # a join still waiting is superseded by this one
        waiter: asyncio.Future[Any] = ctx.new_future()
        self._state_waiter = waiter
        ack = await ctx.wire.within_step(
            ctx.transport.emit(P.Event.JOIN, core.join_payload(info["token"])), "The relay did not answer join"
        )
        refused = P.refusal_of(ack, "join refused")
        if refused is not None:
            refusal = ProtocolError(refused.code, refused.message)
            if refused.retry_after is not None:
                refusal.retry_after = refused.retry_after  # type: ignore[attr-defined]
            raise refusal
        snapshot = await ctx.wire.within_step(waiter, "The relay sent no state snapshot")
        if self._state_waiter is waiter:
            self._state_waiter = None
        joined = core.joined_relay(ack, snapshot, ctx.now())
        ctx.apply(joined.effects)
        if core.active:
            results = await asyncio.gather(*ctx.patch_waits())
            if not all(results) and core.state.base is not None:
                log.warning("initial state sync was not acknowledged")
        ctx.apply(core.initial_sync_done(ack, ctx.link.conversation, ctx.now()))

    async def rejoin(self) -> None:
        """Join again after the socket came back (the session's ``Rejoin``); a failure is the ``error`` event."""
        ctx, core, link = self._ctx, self._ctx.core, self._ctx.link
        if core.closing or link.conversation_url is None:
            return
        try:
            token = core.reusable_token(ctx.now())
            if token is not None:
                # Straight to the join: reading the conversation first could make a restarted relay give up on
                # a call whose result this client holds before the join delivers it.
                try:
                    await self._join({"token": token})
                    return
                except ProtocolError as exc:
                    if exc.code not in (P.ErrorCode.INVALID_TOKEN, P.ErrorCode.TOKEN_EXPIRED):
                        raise
                    log.info("join token refused on rejoin (%s); reading the conversation again", exc.code)
            info = await self._get_conversation(link.conversation_url)
            if info is None:
                raise ProtocolError(P.ErrorCode.NOT_FOUND, "The conversation no longer exists.")
            link.conversation = info["conversation"]
            await self._join(info)
        except WidgetError as exc:
            ctx.apply(core.rejoin_failed(error_payload(exc), ctx.now()))

    async def quiet_disconnect(self) -> None:
        """Close the socket, ignoring a failure (the connection is being left anyway)."""
        self._ctx.core.closing = True
        try:
            await self._ctx.transport.disconnect()
        except Exception:  # noqa: BLE001 - best effort on an already failed connection
            pass

    async def disconnect(self) -> None:
        """See ``AutopilotClient.disconnect``."""
        self._ctx.core.closing = True
        await self._ctx.transport.disconnect()
        self._ctx.stop_effects()
        self._ctx.apply(self._ctx.core.closed())

    async def new_conversation(self) -> dict[str, Any]:
        """See ``AutopilotClient.new_conversation``."""
        relay_url, app_id = self._ctx.link.relay_url, self._ctx.link.app_id
        if not relay_url or not app_id:
            raise ConfigError("new_conversation() needs a client connected with relay_url and app_id.")
        self._ctx.leaving()  # an empty chat left behind is not a past conversation
        await self.quiet_disconnect()
        self._ctx.storage.pop(storage_key(app_id), None)
        self._ctx.core.new_conversation()
        return await self.connect_app(relay_url, app_id)

    # ------------------------------------------------------------------ incoming
    def on_transport_event(self, event: str, data: Any) -> None:
        """Every event the transport reports: the socket's coming and going, the state snapshot, the relay's
        sequenced events."""
        ctx, core = self._ctx, self._ctx.core
        now = ctx.now()
        if event == transport_events.CONNECTED:
            ctx.apply(core.transport_connected(now))
        elif event == transport_events.DISCONNECTED:
            ctx.apply(core.transport_disconnected(now))
        elif event == P.Event.STATE:
            if self._state_waiter is not None and not self._state_waiter.done():
                self._state_waiter.set_result(data if isinstance(data, dict) else {})
            else:
                ctx.apply(core.state_received(data, now))
        elif event in P.SEQUENCED_EVENTS or event in (P.Event.CLIENT_ROLE, P.Event.REPLAY_DONE, P.Event.FEEDBACK):
            ctx.apply(core.received(event, data, now))
        else:
            log.debug("unhandled relay event %r", event)

"""Connecting ``AutopilotClient`` to a relay: the HTTP steps (create or resume the conversation, read it), the
socket, the join handshake, rejoining after a drop, and closing. What a join means for calls and state is decided by
the sans-I/O session (``widget.core.session``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, MutableMapping
from typing import TYPE_CHECKING, Any, Callable

from . import protocol as P
from .core.session import ClientSession, Options
from .errors import ConfigError, ConnectionFailed, ProtocolError, WidgetError
from .transports.base import Transport, TransportError

if TYPE_CHECKING:
    from .core.session import Effect

log = logging.getLogger("widget")


def storage_key(app_id: str) -> str:
    """The storage key under which a conversation URL is kept for ``app_id`` (one conversation per app)."""
    return f"autopilot:conversation:{app_id}"


class ConnectionMixin:
    """Connection steps of ``AutopilotClient`` (see ``widget.client``)."""

    transport: Transport
    core: ClientSession
    storage: MutableMapping[str, str]
    headers: dict[str, str]
    conversation: dict[str, Any] | None
    conversation_url: str | None
    _relay_url: str | None
    _app_id: str | None
    _step_timeout: float
    _connect_options: dict[str, Any]
    _state_waiter: asyncio.Future[Any] | None
    _patch_acks: dict[str, asyncio.Future[bool]]
    _tasks: set[asyncio.Task[Any]]
    _clock: Callable[[], float]

    if TYPE_CHECKING:  # provided by the client

        def _apply(self, effects: list[Effect]) -> None: ...

        def _settle_patch(self, tag: str, ok: bool) -> None: ...

        def _loop(self) -> asyncio.AbstractEventLoop: ...

        def _remember_conversation(self, info: dict[str, Any]) -> None: ...

        def _forget_stored_url(self, url: str) -> None: ...

        def _leaving_current(self) -> None: ...
        def _app_starters_loaded(self, raw: Any) -> None: ...

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
        """Read the conversation, open the socket, join, receive the state snapshot, sync the local state.

        Pass ``conversation_url`` (a site created it), or ``relay_url`` and ``app_id`` to resume the stored
        conversation of that app or create one. ``join_after``: the socket opens at once but the join (and so
        the first state sync) waits for it, e.g. for page code that is still registering functions. Returns the
        conversation.
        """
        if conversation_url is None and (not relay_url or not app_id):
            raise ConfigError("connect() needs conversation_url, or both relay_url and app_id.")
        if function_call_history_limit < 1:
            raise ConfigError("function_call_history_limit must be at least 1.")
        self._connect_options = {
            "sync_state_before_function_response": sync_state_before_function_response,
            "sync_state_before_function_response_timeout_ms": sync_state_before_function_response_timeout_ms,
            "context_resolution_timeout_ms": context_resolution_timeout_ms,
            "function_call_history_limit": function_call_history_limit,
        }
        self.core.options = Options(
            sync_state_before_function_response=bool(sync_state_before_function_response),
            sync_state_before_function_response_timeout_ms=float(sync_state_before_function_response_timeout_ms),
            context_resolution_timeout_ms=float(context_resolution_timeout_ms),
        )
        self.core.set_history_limit(function_call_history_limit)
        self._relay_url = relay_url.rstrip("/") if relay_url else None
        self._app_id = app_id
        self._apply(self.core.connecting())
        try:
            if conversation_url is None:
                conversation_url = await self._resolve_conversation_url()
            self.conversation_url = conversation_url
            info = await self._get_conversation(conversation_url)
            if info is None:
                # A stored conversation that no longer exists: start a new one (and forget it in the app's list).
                self._forget_stored_url(conversation_url)
                self.storage.pop(storage_key(app_id or ""), None)
                conversation_url = await self._create_conversation()
                self.conversation_url = conversation_url
                info = await self._get_conversation(conversation_url)
                if info is None:
                    raise ProtocolError(P.ERR_NOT_FOUND, "The new conversation could not be read back.")
            self._load_conversation(info)
            await self._with_timeout(
                self.transport.connect(info["relay_url"], info.get("relay_path") or P.DEFAULT_RELAY_PATH),
                f"Could not connect to the relay at {info['relay_url']}",
            )
            if join_after is not None:
                await join_after
            await self._join(info)
        except WidgetError as exc:
            self._apply(self.core.failed(_error_payload(exc)))
            await self._quiet_disconnect()
            raise
        return self.conversation or {}

    async def _with_timeout(self, aw: Awaitable[Any], what: str) -> Any:
        try:
            return await asyncio.wait_for(aw, self._step_timeout)
        except asyncio.TimeoutError:
            raise ConnectionFailed(f"{what}: no answer within {self._step_timeout:g} s.") from None

    async def _resolve_conversation_url(self) -> str:
        stored = self.storage.get(storage_key(self._app_id or ""))
        if stored:
            return stored
        return await self._create_conversation()

    async def _create_conversation(self) -> str:
        if not self._relay_url or not self._app_id:
            raise ConfigError("Creating a conversation needs relay_url and app_id.")
        url = self._relay_url + P.HTTP_CREATE_CONVERSATION.format(app_id=self._app_id)
        status, body = await self._http("POST", url, {})
        if status != 201 or not isinstance(body, dict) or not isinstance(body.get("url"), str):
            raise _http_error(status, body, f"Creating a conversation at {url} failed")
        created: str = body["url"]
        self.storage[storage_key(self._app_id)] = created
        return created

    async def _get_conversation(self, url: str) -> dict[str, Any] | None:
        status, body = await self._http("GET", url)
        if status == 404:
            return None
        if status != 200 or not isinstance(body, dict):
            raise _http_error(status, body, f"Reading the conversation at {url} failed")
        for key in ("relay_url", "token", "conversation"):
            if key not in body:
                raise ProtocolError(P.ERR_BAD_REQUEST, f"The relay's conversation response lacks {key!r}.")
        if isinstance(body["token"], str):
            self.core.token_received(body["token"], self._clock())
        return body

    async def _http(self, method: str, url: str, body: Any = None) -> tuple[int, Any]:
        try:
            answer: tuple[int, Any] = await self._with_timeout(
                self.transport.request(method, url, body, self.headers or None), f"{method} {url}"
            )
            return answer
        except TransportError as exc:
            raise ConnectionFailed(f"Cannot reach the relay: {exc}") from exc


    def _load_conversation(self, info: dict[str, Any]) -> None:
        self.conversation = info["conversation"]
        self._remember_conversation(info)  # the app's list of past conversations (widget.client_history)
        self._app_starters_loaded(info.get("starters"))  # before the load's events: a view sees both at once
        self._apply(self.core.load(info))

    async def _join(self, info: dict[str, Any]) -> None:
        if self._state_waiter is not None and not self._state_waiter.done():
            self._state_waiter.cancel()  # a join still waiting is superseded by this one
        waiter: asyncio.Future[Any] = self._loop().create_future()
        self._state_waiter = waiter
        ack = await self._with_timeout(
            self.transport.emit(P.EV_JOIN, self.core.join_payload(info["token"])), "The relay did not answer join"
        )
        refused = P.refusal_of(ack, "join refused")
        if refused is not None:
            refusal = ProtocolError(refused.code, refused.message)
            if refused.retry_after is not None:
                refusal.retry_after = refused.retry_after  # type: ignore[attr-defined]
            raise refusal
        snapshot = await self._with_timeout(waiter, "The relay sent no state snapshot")
        if self._state_waiter is waiter:
            self._state_waiter = None
        joined = self.core.joined_relay(ack, snapshot, self._clock())
        self._apply(joined.effects)
        if self.core.active:
            waits = [self._patch_acks[t] for t in self.core.patches_in_flight() if t in self._patch_acks]
            results = await asyncio.gather(*waits)
            if not all(results) and self.core.state.base is not None:
                log.warning("initial state sync was not acknowledged")
        self._apply(self.core.initial_sync_done(ack, self.conversation, self._clock()))

    async def _rejoin(self) -> None:
        if self.core.closing or self.conversation_url is None:
            return
        try:
            token = self.core.reusable_token(self._clock())
            if token is not None:
                # Straight to the join: reading the conversation first could make a restarted relay give up on
                # a call whose result this client holds before the join delivers it.
                try:
                    await self._join({"token": token})
                    return
                except ProtocolError as exc:
                    if exc.code not in (P.ERR_INVALID_TOKEN, P.ERR_TOKEN_EXPIRED):
                        raise
                    log.info("join token refused on rejoin (%s); reading the conversation again", exc.code)
            info = await self._get_conversation(self.conversation_url)
            if info is None:
                raise ProtocolError(P.ERR_NOT_FOUND, "The conversation no longer exists.")
            self.conversation = info["conversation"]
            await self._join(info)
        except WidgetError as exc:
            self._apply(self.core.rejoin_failed(_error_payload(exc), self._clock()))

    async def _quiet_disconnect(self) -> None:
        self.core.closing = True
        try:
            await self.transport.disconnect()
        except Exception:  # noqa: BLE001 - best effort on an already failed connection
            pass

    async def disconnect(self) -> None:
        """Close the connection; pending holds and gates settle, history is kept."""
        self.core.closing = True
        await self.transport.disconnect()
        for tag in list(self._patch_acks):
            self._settle_patch(tag, False)
        for task in list(self._tasks):
            task.cancel()
        self._apply(self.core.closed())


    async def new_conversation(self) -> dict[str, Any]:
        """Start a fresh conversation for this app ("New chat") and connect to it."""
        if not self._relay_url or not self._app_id:
            raise ConfigError("new_conversation() needs a client connected with relay_url and app_id.")
        self._leaving_current()  # an empty chat left behind is not a past conversation
        await self._quiet_disconnect()
        self.storage.pop(storage_key(self._app_id), None)
        self.core.new_conversation()
        return await self.connect(relay_url=self._relay_url, app_id=self._app_id, **self._connect_options)




def _error_payload(exc: WidgetError) -> dict[str, Any]:
    """The ``error`` event payload: a code and a message a reader can act on."""
    payload: dict[str, Any] = {
        "code": getattr(exc, "code", "connection_failed"),
        "message": getattr(exc, "message", None) or str(exc),
    }
    retry_after = getattr(exc, "retry_after", None)
    if isinstance(retry_after, float):
        payload["retry_after"] = retry_after  # how long a rate_limited refusal asks to wait, seconds
    return payload


def _http_error(status: int, body: Any, what: str) -> WidgetError:
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return ProtocolError(str(err.get("code", "http_error")), f"{what}: {err.get('message', status)}")
    return ProtocolError("http_error", f"{what}: HTTP {status}")

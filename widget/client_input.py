"""What the reader does through ``AutopilotClient``: send a message, stop, retry, regenerate, take the active role,
answer the model's prompts."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Callable

from . import protocol as P
from .client_connection import _http_error
from .core.session import ClientSession
from .errors import ConfigError, ConnectionFailed, ProtocolError
from .transports.base import Transport

if TYPE_CHECKING:
    from .core.session import Effect, FlushResult

log = logging.getLogger("widget")


class InputMixin:
    """The reader's writes of ``AutopilotClient`` (see ``widget.client``)."""

    transport: Transport
    core: ClientSession
    conversation: dict[str, Any] | None
    conversation_url: str | None
    _clock: Callable[[], float]

    if TYPE_CHECKING:  # provided by the client and the connection mixin

        def _apply(self, effects: list[Effect]) -> None: ...

        def _flush_now(self, result: FlushResult | None = None) -> asyncio.Future[bool]: ...

        async def _http(self, method: str, url: str, body: Any = None) -> tuple[int, Any]: ...

        @property
        def pending_ask_user(self) -> list[dict[str, Any]]: ...

    # ------------------------------------------------------------------ user input
    async def send_message(self, text: str) -> str:
        """Send a user message; returns its id (ProtocolError when the relay refuses it)."""
        if not isinstance(text, str) or not text.strip():
            raise ConfigError("A message needs some text.")
        if len(text) > P.MAX_USER_MESSAGE_CHARS:
            raise ProtocolError(
                P.ERR_MESSAGE_TOO_LONG,
                f"The message is {len(text)} characters; the limit is {P.MAX_USER_MESSAGE_CHARS}.",
            )
        flush = self.core.flush_before_message(self._clock())
        if flush is not None:
            timeout = self.core.options.sync_state_before_function_response_timeout_ms / 1000
            try:
                await asyncio.wait_for(asyncio.shield(self._flush_now(flush)), timeout)
            except asyncio.TimeoutError:
                log.warning("state not acknowledged before the message; sending it anyway")
        ack = await self._emit_checked(P.EV_USER_MESSAGE, {"text": text, "idempotency_key": self.core.next_key("m")})
        return str(ack.get("message_id", ""))

    async def cancel(self) -> bool:
        """Stop the running completion; True when one was cancelled."""
        ack = await self._emit_checked(P.EV_CANCEL, {"idempotency_key": self.core.next_key("c")})
        return bool(ack.get("cancelled"))

    async def retry(self) -> None:
        """Go on with the conversation's failed turn (ProtocolError ``nothing_to_retry`` when none failed)."""
        await self._emit_checked(P.EV_RETRY, {"idempotency_key": self.core.next_key("r")})

    async def regenerate(self) -> None:
        """Replace the last assistant answer with a new one."""
        await self._emit_checked(P.EV_REGENERATE, {"idempotency_key": self.core.next_key("g")})

    async def activate(self) -> None:
        """Make this client the active one ("use here"); the calls the relay hands over with it run here."""
        ack = await self._emit_checked(P.EV_ACTIVATE, {})
        self._apply(self.core.activated(ack, self._clock()))

    async def _emit_checked(self, event: str, payload: dict[str, Any]) -> dict[str, Any]:
        if not self.transport.connected:
            raise ConnectionFailed("Not connected to the relay.")
        ack = await self.transport.emit(event, payload)
        refused = P.refusal_of(ack, f"{event} refused")
        if refused is not None:
            raise ProtocolError(refused.code, refused.message)
        return ack

    # ------------------------------------------------------------------ ask user
    def get_pending_ask_user(self) -> list[dict[str, Any]]:
        """Prompts the model is waiting on."""
        return [dict(p) for p in self.core.pending_ask_user]

    def _set_pending_ask_user(self, prompts: list[dict[str, Any]]) -> None:
        self._apply(self.core.set_pending_ask_user(prompts))

    async def respond_to_ask_user(self, answers: dict[str, Any] | list[dict[str, Any]]) -> dict[str, Any]:
        """Post answers to every pending prompt; returns the conversation response."""
        from .core.ask_user import check_answers

        answer_list = [answers] if isinstance(answers, dict) else list(answers)
        check_answers(self.pending_ask_user, answer_list)
        if self.conversation is None or self.conversation_url is None:
            raise ConnectionFailed("Not connected to a conversation.")
        url = self.conversation_url.rstrip("/") + "/ask_user"
        status, body = await self._http(
            "POST", url, {"answers": answer_list, "idempotency_key": self.core.next_key("a")}
        )
        if status != 200 or not isinstance(body, dict):
            raise _http_error(status, body, "Answering the prompts failed")
        self._set_pending_ask_user(body.get("pending_ask_user") or [])
        return body


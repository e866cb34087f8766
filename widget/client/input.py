"""What the reader does through the client: send a message, stop, retry, regenerate, take the active role, answer
the model's prompts."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import protocol as P
from ..core.session import ClientSession, Effect, FlushResult
from ..errors import ConfigError, ConnectionFailed, ProtocolError
from .connection import Link
from .wire import Wire, http_error

log = logging.getLogger("widget")


@dataclass(frozen=True)
class InputContext:
    """What the reader's writes use."""

    core: ClientSession
    wire: Wire
    link: Link
    apply: Callable[[list[Effect]], None]
    now: Callable[[], float]
    #: Perform a flush and resolve once the relay acknowledged it (``Driver.flush_now``).
    flush_now: Callable[[FlushResult], asyncio.Future[bool]]


class Input:
    """``send_message``, ``cancel``, ``retry``, ``regenerate``, ``activate`` and the answers to the model's prompts."""

    def __init__(self, ctx: InputContext) -> None:
        self._ctx = ctx

    async def send_message(self, text: str) -> str:
        """See ``AutopilotClient.send_message``."""
        ctx, core = self._ctx, self._ctx.core
        if not isinstance(text, str) or not text.strip():
            raise ConfigError("A message needs some text.")
        if len(text) > P.MAX_USER_MESSAGE_CHARS:
            raise ProtocolError(
                P.ErrorCode.MESSAGE_TOO_LONG,
                f"The message is {len(text)} characters; the limit is {P.MAX_USER_MESSAGE_CHARS}.",
            )
        flush = core.flush_before_message(ctx.now())
        if flush is not None:
            timeout = core.options.sync_state_before_function_response_timeout_ms / 1000
            try:
                await asyncio.wait_for(asyncio.shield(ctx.flush_now(flush)), timeout)
            except TimeoutError:
                log.warning("state not acknowledged before the message; sending it anyway")
        ack = await ctx.wire.emit_checked(P.Event.USER_MESSAGE, {"text": text, "idempotency_key": core.next_key("m")})
        return str(ack.get("message_id", ""))

    async def cancel(self) -> bool:
        """See ``AutopilotClient.cancel``."""
        ack = await self._ctx.wire.emit_checked(P.Event.CANCEL, {"idempotency_key": self._ctx.core.next_key("c")})
        return bool(ack.get("cancelled"))

    async def retry(self) -> None:
        """See ``AutopilotClient.retry``."""
        await self._ctx.wire.emit_checked(P.Event.RETRY, {"idempotency_key": self._ctx.core.next_key("r")})

    async def regenerate(self) -> None:
        """See ``AutopilotClient.regenerate``."""
        await self._ctx.wire.emit_checked(P.Event.REGENERATE, {"idempotency_key": self._ctx.core.next_key("g")})

    async def activate(self) -> None:
        """See ``AutopilotClient.activate``."""
        ack = await self._ctx.wire.emit_checked(P.Event.ACTIVATE, {})
        self._ctx.apply(self._ctx.core.activated(ack, self._ctx.now()))

    # ------------------------------------------------------------------ ask user
    def set_pending_ask_user(self, prompts: list[dict[str, Any]]) -> None:
        """Replace the prompts the model waits on (the relay's answer to ours)."""
        self._ctx.apply(self._ctx.core.set_pending_ask_user(prompts))

    async def respond_to_ask_user(self, answers: dict[str, Any] | list[dict[str, Any]]) -> dict[str, Any]:
        """See ``AutopilotClient.respond_to_ask_user``."""
        from ..core.ask_user import check_answers  # imported on the first answer, not at boot

        link = self._ctx.link
        answer_list = [answers] if isinstance(answers, dict) else list(answers)
        check_answers(self._ctx.core.pending_ask_user, answer_list)
        if link.conversation is None or link.conversation_url is None:
            raise ConnectionFailed("Not connected to a conversation.")
        url = link.conversation_url.rstrip("/") + "/ask_user"
        status, body = await self._ctx.wire.http(
            "POST", url, {"answers": answer_list, "idempotency_key": self._ctx.core.next_key("a")}
        )
        if status != 200 or not isinstance(body, dict):
            raise http_error(status, body, "Answering the prompts failed")
        self.set_pending_ask_user(body.get("pending_ask_user") or [])
        return body

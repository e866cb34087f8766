"""What each part of the store uses of the client: narrow surfaces, so a part gets only the calls it makes.

``AutopilotClient`` has them all (checked by mypy where ``Store`` hands it to its parts); a test or another UI may
give a part anything that has these few members.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..client.history import PastConversation

#: ``changed(what)``: the part's state changed; the store announces ``what`` to its subscribers.
Changed = Callable[[str], None]


class SendingClient(Protocol):
    """The client's calls behind Send, Stop, Retry, Regenerate, New chat and Use here."""

    async def send_message(self, text: str) -> str: ...
    async def cancel(self) -> bool: ...
    async def retry(self) -> None: ...
    async def regenerate(self) -> None: ...
    async def new_conversation(self) -> dict[str, Any]: ...
    async def activate(self) -> None: ...


class PromptsClient(Protocol):
    """The client's starter prompts and the messages whose last answer carries the model's suggestions."""

    @property
    def starters(self) -> list[str]: ...

    @property
    def messages(self) -> list[dict[str, Any]]: ...


class OffersClient(Protocol):
    """The client's live action offers, running one, and the messages that record outcomes."""

    @property
    def messages(self) -> list[dict[str, Any]]: ...

    def get_offered_actions(self, message_id: str) -> list[dict[str, Any]]: ...

    async def run_action(
        self, message_id: str, action_id: str, arguments: dict[str, Any] | None = None
    ) -> dict[str, Any]: ...


class RatingsClient(Protocol):
    """The client's feedback events and rating an answer."""

    def on(self, event: str, listener: Callable[[Any], Any]) -> Callable[[], None]: ...

    async def rate_answer(
        self, message_id: str, rating: str | None, comment: str | None = None
    ) -> dict[str, Any]: ...


class HistoryClient(Protocol):
    """The client's past conversations: listing, opening and deleting them, and which one is shown."""

    @property
    def conversation_id(self) -> str | None: ...

    async def conversations(self) -> list[PastConversation]: ...

    async def open_conversation(self, conversation_id: str) -> dict[str, Any]: ...

    async def delete_conversation(self, conversation_id: str) -> bool: ...


class AskUserClient(Protocol):
    """The prompts the model waits on and answering them."""

    def get_pending_ask_user(self) -> list[dict[str, Any]]: ...

    async def respond_to_ask_user(self, answers: dict[str, Any] | list[dict[str, Any]]) -> dict[str, Any]: ...

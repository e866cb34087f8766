"""What each part of the store uses of the client: narrow surfaces, so a part gets only the calls it makes.

``AutopilotClient`` has them all (checked by mypy where ``Store`` hands it to its parts); a test or another UI may
give a part anything that has these few members.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

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

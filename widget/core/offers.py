"""Actions the model offers on its answers, as the client tracks them (sans-I/O)."""

from __future__ import annotations

from typing import Any, TypedDict

from .. import protocol as P


class Offer(TypedDict):
    """One offered action and the reader's side of it."""

    id: str
    name: str
    arguments: dict[str, Any]
    status: P.OfferStatus
    outcome: str | None


class OfferBook:
    """The live offers of this page, by assistant message id (a restored conversation has none)."""

    def __init__(self) -> None:
        self._by_message: dict[str, list[Offer]] = {}

    def record(self, message: Any) -> str | None:
        """Record the offers of a committed assistant message; its id when it offered any."""
        if not isinstance(message, dict) or not isinstance(message.get("actions"), list):
            return None
        offers: list[Offer] = [
            {"id": a["id"], "name": a["name"], "arguments": a.get("arguments") or {},
             "status": P.OfferStatus.OFFERED, "outcome": None}
            for a in message["actions"][: P.MAX_ACTIONS]
            if isinstance(a, dict) and isinstance(a.get("id"), str) and isinstance(a.get("name"), str)
        ]
        if not offers or not isinstance(message.get("id"), str):
            return None
        self._by_message[message["id"]] = offers
        return str(message["id"])

    def of(self, message_id: str) -> list[Offer]:
        """The offers on one message (the book's own records: the driver updates their status in place)."""
        return self._by_message.get(message_id, [])

    def get(self, message_id: str, action_id: str) -> Offer | None:
        """One offer, or None."""
        return next((o for o in self.of(message_id) if o["id"] == action_id), None)

    def all(self) -> dict[str, list[Offer]]:
        """Every live offer by message id."""
        return self._by_message

    def outcome_recorded(self, message: dict[str, Any]) -> None:
        """An outcome recorded by any tab: a successful action is done here too, never run twice."""
        if message.get("role") != P.Role.ACTION or message.get("ok") is not True:
            return
        offer = self.get(str(message.get("message_id")), str(message.get("action_id")))
        if offer is not None:
            offer["status"] = P.OfferStatus.DONE
            offer["outcome"] = message.get("outcome")

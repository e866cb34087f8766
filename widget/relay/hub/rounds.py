"""A model round's assistant message as the turn loop builds it, and the stored ``tool`` message of a call's end
(shared by the turn loop, the resume of an interrupted round and recovery)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, cast

from ...protocol import Role, ToolMessageKind
from ...protocol.messages import CallRecord
from .runtime import new_id


@dataclass
class Round:
    """One model round's assistant message as it is built."""

    #: the streaming message's id (None once committed)
    message_id: str | None = None
    text: list[str] = field(default_factory=list)
    #: ``{"id", "name", "arguments"}`` of every call the model made (its ``function_calls``)
    calls: list[dict[str, Any]] = field(default_factory=list)
    #: the tool messages answering them, stored with the message
    tools: list[CallRecord] = field(default_factory=list)
    #: ``completion.started`` was emitted
    started: bool = False
    #: the round's offer of actions (``offer_actions``), stored with the message
    offer: dict[str, Any] | None = None
    #: the follow-up questions the round suggested (``suggest_followups``), stored on the message
    suggestions: list[str] = field(default_factory=list)
    #: a ``suggest_followups`` call of the round showed nothing (the model was told why: the turn goes on)
    suggestions_failed: bool = False
    #: the round's committed assistant message, its tool messages and whether it showed an offer (``end_message``)
    ended: tuple[dict[str, Any], list[CallRecord], bool] | None = None


def tool_message(call_id: str, name: str, kind: ToolMessageKind | str, end: dict[str, Any]) -> CallRecord:
    """The stored ``tool`` message of a call's end."""
    return {
        "id": new_id("m_"), "role": Role.TOOL, "function_call_id": call_id, "name": name,
        "kind": cast(ToolMessageKind, kind),  # a stored call kind (function, tool) or relay
        "status": end["status"], "result": end.get("result"), "error": end.get("error"),
        "duration_ms": end.get("duration_ms"), "total_ms": end.get("total_ms"), "created_at": time.time(),
    }

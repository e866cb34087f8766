"""The streaming-message state machine for the relay's completion events, as a transition table.

Rules:
- Two states: ``idle`` and ``streaming``. ``completion.started`` enters ``streaming`` with a fresh streaming
  message; ``completion.finished`` returns to ``idle``.
- ``completion_stream`` appends to the streaming message; ``function_call.begin``/``.end`` record calls on it.
- ``completion.ended`` commits the message (the relay's copy when it sends one) to ``messages``.
- ``function_call_iteration`` starts the next round; text streamed so far stays.
- An event that makes no sense in the current state (or is unknown) is reported and ignored: the machine never
  raises on input from the wire.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..protocol import CallProgress, CallStatus, Event, Role


class StreamState(StrEnum):
    """Where the machine stands: between turns, or inside one."""

    IDLE = "idle"
    STREAMING = "streaming"


IDLE = StreamState.IDLE
STREAMING = StreamState.STREAMING


@dataclass
class StreamingSession:
    """Holds ``is_streaming``, the streaming message, committed messages and function-call records."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    streaming_message: dict[str, Any] | None = None
    state: StreamState = IDLE
    iteration: int = 0
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Receives a one-line reason for each ignored event.
    on_ignored: Callable[[str], None] | None = None
    #: Bumped whenever ``messages`` changes (a view compares it instead of the list).
    revision: int = 0

    @property
    def is_streaming(self) -> bool:
        """Whether a completion is in progress."""
        return self.state == STREAMING

    def load(self, messages: list[dict[str, Any]]) -> None:
        """Replace committed messages (a conversation GET) and forget any stream."""
        self.messages = [copy.deepcopy(m) for m in messages]
        self.revision += 1
        self.streaming_message = None
        self.state = IDLE
        self.iteration = 0

    def handle(self, event: Event | str, payload: Any) -> bool:
        """Apply one event; False when it was ignored."""
        action = _TABLE.get((self.state, event))
        if action is None:
            self._ignore(f"{event!r} ignored in state {self.state!r}")
            return False
        if not isinstance(payload, dict):
            self._ignore(f"{event!r} ignored: payload is not an object")
            return False
        return action(self, payload) is not False

    def _ignore(self, reason: str) -> None:
        if self.on_ignored is not None:
            self.on_ignored(reason)

    # --- actions --------------------------------------------------------------------
    def _started(self, p: dict[str, Any]) -> None:
        if self.streaming_message is not None:
            self._commit(None)
        self.state = STREAMING
        self.iteration = 0
        self.streaming_message = _new_message(p.get("message_id"))

    def _stream(self, p: dict[str, Any]) -> bool:
        delta = p.get("delta")
        if not isinstance(delta, str):
            self._ignore("completion_stream ignored: delta is not a string")
            return False
        if self.streaming_message is None:
            self.streaming_message = _new_message(p.get("message_id"))
        self.streaming_message["content"] += delta
        return True

    def _call_begin(self, p: dict[str, Any]) -> bool:
        call_id = p.get("id")
        if not isinstance(call_id, str):
            self._ignore("function_call.begin ignored: no id")
            return False
        record = {
            "id": call_id,
            "name": p.get("name"),
            "arguments": p.get("arguments"),
            "status": CallProgress.RUNNING,
            "result": None,
            "error": None,
            "duration_ms": None,
            "total_ms": None,
        }
        self.calls[call_id] = record
        if self.streaming_message is None:
            self.streaming_message = _new_message(p.get("message_id"))
        self.streaming_message["function_calls"].append(record)
        return True

    def _call_end(self, p: dict[str, Any]) -> bool:
        record = self.calls.get(p.get("id"))  # type: ignore[arg-type]
        if record is None:
            self._ignore(f"function_call.end ignored: unknown call {p.get('id')!r}")
            return False
        record["status"] = p.get("status", CallStatus.SUCCESS)
        for key in ("result", "error", "duration_ms", "total_ms"):
            if key in p:
                record[key] = p[key]
        return True

    def _iteration(self, p: dict[str, Any]) -> None:
        self.iteration = int(p.get("iteration", self.iteration + 1) or 0)

    def _ended(self, p: dict[str, Any]) -> None:
        message = p.get("message")
        self._commit(message if isinstance(message, dict) else None)
        # The round's tool messages ride along, so the live view pairs results exactly as a reload does.
        tool_messages = p.get("tool_messages")
        if isinstance(tool_messages, list):
            for tool in tool_messages:
                if isinstance(tool, dict):
                    self.add_message(tool)

    def _finished(self, p: dict[str, Any]) -> None:
        if self.streaming_message is not None and (
            self.streaming_message["content"] or self.streaming_message["function_calls"]
        ):
            # A cancelled or failed turn keeps what the reader already saw.
            self._commit(None)
        self.streaming_message = None
        self.state = IDLE

    def _commit(self, message: dict[str, Any] | None) -> None:
        local = self.streaming_message
        if message is None:
            message = local
        elif local is not None and not message.get("function_calls") and local["function_calls"]:
            # Keep live call records (with timings) when the relay's copy omits them.
            message = {**message, "function_calls": local["function_calls"]}
        if message is not None:
            mid = message.get("id")
            if mid is None or all(m.get("id") != mid for m in self.messages):
                self.messages.append(message)
                self.revision += 1
        self.streaming_message = None

    def withdraw(self, message_ids: list[Any]) -> int:
        """Remove withdrawn messages (retry/regenerate replaces them); returns how many were removed."""
        ids = {m for m in message_ids if isinstance(m, str)}
        before = len(self.messages)
        self.messages = [m for m in self.messages if m.get("id") not in ids]
        if len(self.messages) != before:
            self.revision += 1
        return before - len(self.messages)

    def add_message(self, message: dict[str, Any]) -> None:
        """A non-streamed message (user, error) from a ``message`` event."""
        mid = message.get("id")
        if mid is None or all(m.get("id") != mid for m in self.messages):
            self.messages.append(message)
            self.revision += 1


def _new_message(message_id: Any) -> dict[str, Any]:
    return {"id": message_id, "role": Role.ASSISTANT, "content": "", "function_calls": []}


_S = StreamingSession
_TABLE: dict[tuple[str, str], Callable[[StreamingSession, dict[str, Any]], Any]] = {
    (IDLE, Event.COMPLETION_STARTED): _S._started,
    (STREAMING, Event.COMPLETION_STARTED): _S._started,
    (STREAMING, Event.COMPLETION_STREAM): _S._stream,
    (STREAMING, Event.FUNCTION_CALL_BEGIN): _S._call_begin,
    (STREAMING, Event.FUNCTION_CALL_END): _S._call_end,
    (IDLE, Event.FUNCTION_CALL_END): _S._call_end,
    (STREAMING, Event.FUNCTION_CALL_ITERATION): _S._iteration,
    (STREAMING, Event.COMPLETION_ENDED): _S._ended,
    (STREAMING, Event.COMPLETION_FINISHED): _S._finished,
    (IDLE, Event.COMPLETION_FINISHED): _S._finished,
}

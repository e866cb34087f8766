"""The activity log's entries: every call of the conversation (and page or state errors), newest first.

A call's record exists twice: on its message (the relay's copy: ``duration_ms`` / ``total_ms``) and in this tab's
call history (``handlerMs`` / ``totalMs``, for calls this tab ran). One entry per call, the relay's numbers first.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from ..protocol import MSG_CALL_CANCELLED, CallProgress, CallStatus


def cancelled(call: dict[str, Any]) -> bool:
    """Whether a call was ended by the relay because its turn stopped (not a failure of the call itself)."""
    return call.get("status") == CallStatus.ERROR and call.get("error") == MSG_CALL_CANCELLED


def num(value: Any) -> float | None:
    """A number as float; None for anything else (booleans included)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def ms(seconds: Any) -> float | None:
    """Seconds (the relay's ``created_at``) as milliseconds."""
    return float(seconds) * 1000 if isinstance(seconds, (int, float)) else None


def call_timing(call: dict[str, Any], history: dict[Any, dict[str, Any]]) -> tuple[float | None, float | None]:
    """``(duration_ms, total_ms)`` of a call record: the relay's copy, else this tab's own measurement."""
    duration, total = call.get("duration_ms"), call.get("total_ms")
    if duration is None or total is None:
        record = history.get(call.get("id"))
        if record is not None:
            duration = duration if duration is not None else record.get("handlerMs")
            total = total if total is not None else record.get("totalMs")
    return num(duration), num(total)


def build_activity(messages: list[dict[str, Any]], streaming: dict[str, Any] | None,
                   history: dict[Any, dict[str, Any]], page_events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entries from the shown messages' calls, the streaming message's, calls only this tab knows, and errors."""
    entries: list[dict[str, Any]] = []
    seen: set[Any] = set()
    sources = list(messages)
    if streaming is not None:
        sources.append(streaming)
    for m in sources:
        for call in m.get("function_calls") or []:
            if not isinstance(call, dict) or call.get("id") in seen:
                continue
            seen.add(call.get("id"))
            duration, total = call_timing(call, history)
            record = history.get(call.get("id")) or {}
            status = call.get("status") or record.get("status") or CallProgress.RUNNING
            entries.append(
                {
                    "kind": "call",
                    "id": call.get("id"),
                    "name": call.get("name") or record.get("name") or "",
                    "arguments": call.get("arguments"),
                    "status": status,
                    "result": call.get("result"),
                    "error": call.get("error"),
                    "duration_ms": duration,
                    "total_ms": total,
                    "started_at": record.get("startedAt") or ms(m.get("created_at")),
                    "stopped": bool(call.get("stopped")),
                }
            )
    # Calls this tab ran that no message shows yet (e.g. the relay has not echoed them).
    for call_id, record in history.items():
        if call_id in seen:
            continue
        entries.append(
            {
                "kind": "call",
                "id": call_id,
                "name": record.get("name", ""),
                "arguments": None,
                "status": record.get("status", CallProgress.RUNNING),
                "result": None,
                "error": None,
                "duration_ms": num(record.get("handlerMs")),
                "total_ms": num(record.get("totalMs")),
                "started_at": record.get("startedAt"),
            }
        )
    entries.reverse()  # newest first
    if page_events:
        entries = sorted(
            list(reversed(page_events)) + entries,
            key=lambda e: -(e.get("started_at") or 0),
        )
    return entries


def error_entry(kind: str, number: int, name: str, error: str, now_ms: float, code: Any = None) -> dict[str, Any]:
    """An activity entry for a page-Python error (``kind`` "page") or a state-sync error ("state")."""
    entry: dict[str, Any] = {
        "kind": "error",
        "id": f"{kind}-{number}",
        "name": name,
        "status": CallStatus.ERROR,
        "error": error,
        "started_at": now_ms,
    }
    if kind == "state":
        entry["code"] = code
    return entry


class PageEvents:
    """The page and state errors of the activity log (a part of ``Store``): errors no message carries."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self._ids = itertools.count(1)

    def state_error(self, payload: dict[str, Any]) -> None:
        """A state sync error (``stateError``)."""
        self.entries.append(error_entry("state", next(self._ids), "State sync", str(payload.get("message", "")),
                                        time.time() * 1000, payload.get("code")))

    def page_error(self, payload: dict[str, Any]) -> None:
        """The page's Python failed (``pageError``)."""
        name = f"Page Python {payload.get('source', '')}".strip()
        error = str(payload.get("traceback") or payload.get("message") or "")
        self.entries.append(error_entry("page", next(self._ids), name, error, time.time() * 1000))

"""Conversation helpers: pair tool results onto calls, and the messages readers care about."""

from __future__ import annotations

import copy
from typing import Any

from ..protocol import RelayTool, Role

#: The roles a reader sees (tool results are shown on their calls, action outcomes on their offers).
VISIBLE_ROLES = (Role.USER, Role.ASSISTANT, Role.ERROR)


def enrich_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``messages`` where each assistant function call carries its tool message's result."""
    results: dict[str, dict[str, Any]] = {}
    for m in messages:
        if m.get("role") == Role.TOOL and isinstance(m.get("function_call_id"), str):
            results[m["function_call_id"]] = m
    out = []
    for m in messages:
        m = copy.deepcopy(m)
        calls = m.get("function_calls")
        if m.get("role") == Role.ASSISTANT and isinstance(calls, list):
            for call in calls:
                if not isinstance(call, dict):
                    continue
                tool = results.get(call.get("id"))  # type: ignore[arg-type]
                if tool is not None:
                    call.setdefault("status", tool.get("status"))
                    for key in ("result", "error", "duration_ms", "total_ms"):
                        if call.get(key) is None and key in tool:
                            call[key] = tool[key]
        out.append(m)
    return out


def _only_calls(m: dict[str, Any]) -> bool:
    return m.get("role") == Role.ASSISTANT and not (m.get("content") or "").strip() and bool(m.get("function_calls"))


#: Relay tools whose calls are not shown as calls: suggestions are shown as the reader's words, and what a docs
#: search found is shown as the answer's sources.
UNSHOWN_CALLS = frozenset({RelayTool.SUGGEST_FOLLOWUPS, RelayTool.SEARCH_DOCS})


def visible_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """User, assistant and error messages; consecutive empty assistant messages with only calls merged; calls of
    the ``UNSHOWN_CALLS`` relay tools left out."""
    out: list[dict[str, Any]] = []
    for m in enrich_messages(messages):
        if m.get("role") not in VISIBLE_ROLES:
            continue
        calls = m.get("function_calls")
        if isinstance(calls, list) and any(isinstance(c, dict) and c.get("name") in UNSHOWN_CALLS for c in calls):
            kept = [c for c in calls if not (isinstance(c, dict) and c.get("name") in UNSHOWN_CALLS)]
            if kept:
                m["function_calls"] = kept
            else:
                del m["function_calls"]
        if m.get("role") == Role.ASSISTANT and not (m.get("content") or "").strip() and not m.get("function_calls"):
            continue
        if out and _only_calls(m) and out[-1].get("role") == Role.ASSISTANT and _only_calls(out[-1]):
            out[-1]["function_calls"] = list(out[-1]["function_calls"]) + list(m["function_calls"])
            continue
        out.append(m)
    return out

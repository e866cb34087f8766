"""Ask-user answers checked against their prompts before they are sent (text: a string, bool: a
boolean, radiolist: one option value, checklist: a list of option values)."""

from __future__ import annotations

import json
from typing import Any

from ..errors import ConfigError
from ..protocol import MAX_USER_MESSAGE_CHARS, AskUserType

#: Every prompt type, in the order the docs list them.
TYPES = tuple(AskUserType)


def _option_values(prompt: dict[str, Any]) -> list[str]:
    options = (prompt.get("arguments") or {}).get("options") or []
    return [o["value"] for o in options if isinstance(o, dict) and isinstance(o.get("value"), str)]


def short(value: Any, limit: int = 80) -> str:
    """A value as an error message quotes it (JSON, strings in quotes, cut at ``limit``)."""
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def answer_problem(prompt: dict[str, Any], result: Any) -> str | None:
    """What is wrong with ``result`` as the answer to ``prompt``, or None: the one answer check of the client
    (before sending) and the relay (before storing). Text → a string of at most the user-message length,
    bool → a boolean, radiolist → one option value, checklist → a list of distinct option values."""
    kind = prompt.get("type")
    values = _option_values(prompt)
    where = f"The answer to prompt {prompt.get('id')!r} ({kind})"
    got = f"got {short(result)}"
    if kind == AskUserType.TEXT:
        if not isinstance(result, str):
            return f"{where} must be a string; {got}."
        if len(result) > MAX_USER_MESSAGE_CHARS:
            return f"{where} may have at most {MAX_USER_MESSAGE_CHARS} characters; it has {len(result)}."
    elif kind == AskUserType.BOOL:
        if not isinstance(result, bool):
            return f"{where} must be true or false; {got}."
    elif kind == AskUserType.RADIOLIST:
        if not isinstance(result, str) or result not in values:
            return f"{where} must be one of the option values {values}; {got}."
    elif kind == AskUserType.CHECKLIST:
        if not isinstance(result, list) or not all(isinstance(v, str) for v in result):
            return f"{where} must be a list of option values from {values}; {got}."
        bad = [v for v in result if v not in values]
        if bad:
            return f"{where}: {short(bad[0])} is not one of the option values {values}."
        if len(set(result)) != len(result):
            return f"{where} lists a value twice; each option at most once."
    else:
        return f"Prompt {prompt.get('id')!r} has unknown type {kind!r}."
    return None


def check_answer(prompt: dict[str, Any], result: Any) -> None:
    """Raise ConfigError when ``result`` is not a valid answer to ``prompt``."""
    problem = answer_problem(prompt, result)
    if problem is not None:
        raise ConfigError(problem)


def check_answers(prompts: list[dict[str, Any]], answers: list[dict[str, Any]]) -> None:
    """Every pending prompt answered once, each answer valid for its prompt's type."""
    by_id = {p.get("id"): p for p in prompts}
    seen: set[Any] = set()
    for answer in answers:
        if not isinstance(answer, dict) or "id" not in answer or "result" not in answer:
            raise ConfigError("Each answer must be an object with 'id' and 'result'.")
        pid = answer["id"]
        if pid not in by_id:
            raise ConfigError(f"No pending prompt has id {pid!r}.")
        if pid in seen:
            raise ConfigError(f"Prompt {pid!r} is answered twice.")
        seen.add(pid)
        check_answer(by_id[pid], answer["result"])
    missing = [pid for pid in by_id if pid not in seen]
    if missing:
        raise ConfigError(f"Answer all pending prompts in one request; missing: {missing}.")

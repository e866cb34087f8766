"""Ask-user answers checked against their prompts before they are sent (text: a string, bool: a
boolean, radiolist: one option value, checklist: a list of option values)."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ..protocol import AskUserType

#: Every prompt type, in the order the docs list them.
TYPES = tuple(AskUserType)


def _option_values(prompt: dict[str, Any]) -> list[str]:
    options = (prompt.get("arguments") or {}).get("options") or []
    return [o["value"] for o in options if isinstance(o, dict) and isinstance(o.get("value"), str)]


def check_answer(prompt: dict[str, Any], result: Any) -> None:
    """Raise ConfigError when ``result`` is not a valid answer to ``prompt``."""
    kind = prompt.get("type")
    pid = prompt.get("id")
    if kind == AskUserType.TEXT:
        if not isinstance(result, str):
            raise ConfigError(f"Answer to {pid!r} (text) must be a string.")
    elif kind == AskUserType.BOOL:
        if not isinstance(result, bool):
            raise ConfigError(f"Answer to {pid!r} (bool) must be True or False.")
    elif kind == AskUserType.RADIOLIST:
        if result not in _option_values(prompt) or not isinstance(result, str):
            raise ConfigError(f"Answer to {pid!r} (radiolist) must be one of {_option_values(prompt)}.")
    elif kind == AskUserType.CHECKLIST:
        values = _option_values(prompt)
        if not isinstance(result, list) or any(v not in values or not isinstance(v, str) for v in result):
            raise ConfigError(f"Answer to {pid!r} (checklist) must be a list of values from {values}.")
        if len(set(result)) != len(result):
            raise ConfigError(f"Answer to {pid!r} (checklist) lists a value twice.")
    else:
        raise ConfigError(f"Prompt {pid!r} has unknown type {kind!r}.")


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

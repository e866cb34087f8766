"""Texts the reader can send with one press: starter prompts on an empty bar, follow-up suggestions under the last
answer. Both are the reader's own words (a press sends the text as their message), never anything that runs.

Sans-I/O, shared by the relay (config checks, the ``suggest_followups`` tool) and the client (``set_starters``,
what the bar shows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import protocol as P
from ..errors import ConfigError
from ..protocol import Role


def _show(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_starters(value: Any, what: str = "starters") -> list[str]:
    """A list of at most ``MAX_STARTERS`` distinct non-empty strings of at most ``MAX_STARTER_CHARS`` characters
    (each stripped), or ConfigError saying which entry is wrong and why."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(f"{what} must be a list of strings, got {_show(value)}")
    if len(value) > P.MAX_STARTERS:
        raise ConfigError(f"{what} has {len(value)} entries; at most {P.MAX_STARTERS} are shown")
    out: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ConfigError(f"{what}[{i}] must be a string, got {_show(item)}")
        text = item.strip()
        if not text:
            raise ConfigError(f"{what}[{i}] is empty")
        if len(text) > P.MAX_STARTER_CHARS:
            raise ConfigError(f"{what}[{i}] has {len(text)} characters; the limit is {P.MAX_STARTER_CHARS}")
        if text in out:
            raise ConfigError(f"{what}[{i}] repeats entry {out.index(text)}")
        out.append(text)
    return out


def check_suggestions(arguments: Any, already: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """The suggestions of one ``suggest_followups`` call: ``(kept, problems)``. Kept: distinct non-empty strings
    (whitespace collapsed) of at most ``MAX_SUGGESTION_CHARS`` characters, at most ``MAX_SUGGESTIONS`` counting
    ``already`` (kept from an earlier call of the same response). Each problem names the entry and why it was
    dropped, in words the model can act on."""
    listed = arguments.get("suggestions") if isinstance(arguments, dict) else None
    if not isinstance(listed, list):
        return [], ["the arguments must be an object with a 'suggestions' list of strings"]
    kept: list[str] = []
    problems: list[str] = []
    for i, item in enumerate(listed):
        where = f"suggestions[{i}]"
        if not isinstance(item, str):
            problems.append(f"{where} is not a string")
            continue
        text = " ".join(item.split())
        if not text:
            problems.append(f"{where} is empty")
        elif len(text) > P.MAX_SUGGESTION_CHARS:
            problems.append(f"{where} has {len(text)} characters (at most {P.MAX_SUGGESTION_CHARS})")
        elif text in kept or text in already:
            problems.append(f"{where} is a repeat")
        elif len(kept) + len(already) >= P.MAX_SUGGESTIONS:
            problems.append(f"{where}: more than {P.MAX_SUGGESTIONS} suggestions")
        else:
            kept.append(text)
    if not listed:
        problems.append("the 'suggestions' list is empty")
    return kept, problems


def suggestions_of(messages: Sequence[Any]) -> tuple[str | None, list[str]]:
    """``(assistant message id, suggestions)`` for the end of a conversation: the suggestions of the latest model
    round after the reader's last message that made any (a model may suggest in the round that calls a page
    function and answer in the next); ``(None, [])`` when none did, or after a newer message of the reader or an
    error."""
    for m in reversed(messages):
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role == Role.TOOL:
            continue
        if role != Role.ASSISTANT:
            return None, []
        raw = m.get("suggestions")
        if not isinstance(raw, list) or not isinstance(m.get("id"), str):
            continue
        shown = [s for s in raw if isinstance(s, str) and s.strip()][: P.MAX_SUGGESTIONS]
        if shown:
            return m["id"], [s[: P.MAX_SUGGESTION_CHARS] for s in shown]
    return None, []

"""Form actions' fields: what the reader typed, converted by each property's type and checked against it.

The reader-facing problem texts are made here from ``widget.core.tools.check_tool_arguments``' reasons.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..core.tools import check_tool_arguments
from ..errors import WidgetError

#: The form-level message when some fields need the reader's attention.
FORM_FIX = "Some fields need your attention."
REQUIRED = "Please fill in this field."


def arguments_text(arguments: Any) -> str:
    """An action's arguments as the reader reads them: ``plan: pro, quantity: 2`` (absent ones left out)."""
    if not isinstance(arguments, dict):
        return ""
    parts = []
    for name, value in arguments.items():
        if value is None:
            continue
        if isinstance(value, bool):
            text = "yes" if value else "no"
        elif isinstance(value, float) and value.is_integer():
            text = str(int(value))
        else:
            text = str(value)
        parts.append(f"{name}: {text}")
    return ", ".join(parts)


def form_arguments(parameters: dict[str, Any], values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The arguments a form's ``values`` make, and a reader-facing problem per field (empty when all pass).

    Strings from form fields are converted by the property's type (``"2"`` → 2 for an integer, ``"on"`` → True);
    an empty field is absent, which a required property refuses. Each value is then checked against its
    property with ``widget.core.tools.check_tool_arguments`` (enum, format, bounds), the same check the client
    and the relay make.
    """
    props: dict[str, Any] = (parameters or {}).get("properties") or {}
    required = set((parameters or {}).get("required") or [])
    args: dict[str, Any] = {}
    problems: dict[str, str] = {}
    for name, prop in props.items():
        value, problem = _coerce(prop, values.get(name))
        if problem is None and value is None and name in required:
            problem = REQUIRED
        if problem is None and value is not None:
            _, found = check_tool_arguments({"type": "object", "properties": {name: prop}}, {name: value})
            if found:
                problem = _reader_problem(name, prop, found)
        if problem:
            problems[name] = problem
        elif value is not None:
            args[name] = value
    return args, problems


def _coerce(prop: dict[str, Any], raw: Any) -> tuple[Any, str | None]:
    ptype = prop.get("type")
    if raw is None:
        return None, None
    if ptype == "string":
        if not isinstance(raw, str):
            return raw, None
        text = raw if prop.get("format") == "multiline" else raw.strip()
        return (text if text.strip() else None), None
    if ptype == "boolean":
        if isinstance(raw, bool):
            return raw, None
        text = str(raw).strip().lower()
        if text in ("true", "on", "yes", "1"):
            return True, None
        if text in ("false", "off", "no", "0"):
            return False, None
        return (None, None) if not text else (raw, "Choose yes or no.")
    if ptype in ("number", "integer"):
        if isinstance(raw, bool):
            return raw, None
        if isinstance(raw, (int, float)):
            return raw, None
        text = str(raw).strip().replace("\u2212", "-")
        if not text:
            return None, None
        if re.fullmatch(r"[+-]?\d+", text):
            return int(text), None
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            return None, "Enter a whole number." if ptype == "integer" else "Enter a number."
        if ptype == "integer":
            if not number.is_integer():
                return None, "Enter a whole number."
            return int(number), None
        return number, None
    return raw, None


def _reader_problem(name: str, prop: dict[str, Any], problem: str) -> str:
    """``check_tool_arguments``' reason (it names the argument) as a sentence for the field's reader."""
    rest = problem[len(name) + 1:] if problem.startswith(name + " ") else problem
    if rest == "is not an email address":
        return "Enter an email address, like name@example.com."
    if rest == "is not an http(s) URL":
        return "Enter a web address that starts with https://."
    if rest.startswith("is not a date-time"):
        return "Enter a date and time, like 2025-01-31T14:30."
    if rest.startswith("is not a date"):
        return "Enter a date, like 2025-01-31."
    if rest.startswith("must be one of"):
        return "Choose one of: " + ", ".join(str(e) for e in prop.get("enum") or []) + "."
    if rest == "must be an integer":
        return "Enter a whole number."
    if rest == "must be a number":
        return "Enter a number."
    if rest == "must be a string":
        return "Enter some text."
    if rest == "must be a boolean":
        return "Choose yes or no."
    m = re.fullmatch(r"must have at (least|most) (\d+) characters", rest)
    if m:
        return f"Use at {m.group(1)} {m.group(2)} characters."
    m = re.fullmatch(r"must be (at least|at most|more than|less than) (.+)", rest)
    if m:
        return f"Enter a number {m.group(1)} {m.group(2)}."
    return f"This value {rest}."


def message_of(exc: BaseException) -> str:
    """A failure as the reader reads it: a widget error's message, else the exception's text or name."""
    if isinstance(exc, WidgetError):
        return getattr(exc, "message", None) or str(exc)
    return str(exc) or type(exc).__name__

"""Form actions' fields: what the reader typed, converted by each property's type and checked against it.

The reader-facing problem texts are made here from the structured problems of ``widget.core.tools``.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..core.problems import Problem, ProblemCode
from ..core.tools import value_problem
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
    property with ``widget.core.tools.value_problem`` (enum, format, bounds), the same check the client
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
            found = value_problem(name, prop, value)
            if found:
                problem = reader_text(found)
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


#: The reader's sentence for each format a value failed.
_FORMAT_READER = {
    "email": "Enter an email address, like name@example.com.",
    "uri": "Enter a web address that starts with https://.",
    "date-time": "Enter a date and time, like 2025-01-31T14:30.",
    "date": "Enter a date, like 2025-01-31.",
}
_TYPE_READER = {"integer": "Enter a whole number.", "number": "Enter a number.", "string": "Enter some text.",
                "boolean": "Choose yes or no."}
_BOUND_READER = {ProblemCode.MINIMUM: "at least", ProblemCode.MAXIMUM: "at most",
                 ProblemCode.EXCLUSIVE_MINIMUM: "more than", ProblemCode.EXCLUSIVE_MAXIMUM: "less than"}


def reader_text(problem: Problem) -> str:
    """A field's problem as a sentence for the reader filling the form."""
    p = problem.params
    match problem.code:
        case ProblemCode.FORMAT if p.get("format") in _FORMAT_READER:
            return _FORMAT_READER[p["format"]]
        case ProblemCode.ENUM:
            return "Choose one of: " + ", ".join(str(e) for e in p["enum"]) + "."
        case ProblemCode.TYPE:
            return _TYPE_READER.get(p["expected"], f"This value must be a {p['expected']}.")
        case ProblemCode.MIN_LENGTH:
            return f"Use at least {p['limit']} characters."
        case ProblemCode.MAX_LENGTH:
            return f"Use at most {p['limit']} characters."
        case ProblemCode.REQUIRED:
            return REQUIRED
        case code if code in _BOUND_READER:
            return f"Enter a number {_BOUND_READER[code]} {p['limit']}."
    rest = problem.text()
    return f"This value {rest[len(problem.name) + 1:] if rest.startswith(problem.name + ' ') else rest}."


def message_of(exc: BaseException) -> str:
    """A failure as the reader reads it: a widget error's message, else the exception's text or name."""
    if isinstance(exc, WidgetError):
        return getattr(exc, "message", None) or str(exc)
    return str(exc) or type(exc).__name__

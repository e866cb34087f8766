"""What is wrong with an input, as data: a code, where, and the values the text needs.

Checks return a :class:`Problem`; each audience's sentence is made from it (``text()`` for the model and for
developers, the reader's sentence in ``widget.store.forms``), so no caller parses a message back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class ProblemCode(StrEnum):
    """The kinds of problems a flat (tool or action) argument check reports."""

    NOT_OBJECT = "not_object"
    UNKNOWN = "unknown"
    REQUIRED = "required"
    TYPE = "type"
    ENUM = "enum"
    MIN_LENGTH = "min_length"
    MAX_LENGTH = "max_length"
    FORMAT = "format"
    MINIMUM = "minimum"
    MAXIMUM = "maximum"
    EXCLUSIVE_MINIMUM = "exclusive_minimum"
    EXCLUSIVE_MAXIMUM = "exclusive_maximum"


#: What a value of each ``format`` is not, in the model-facing sentence.
FORMAT_TEXT = {
    "email": "is not an email address",
    "uri": "is not an http(s) URL",
    "date": "is not a date (YYYY-MM-DD)",
    "date-time": "is not a date-time (ISO 8601)",
}


@dataclass(frozen=True)
class Problem:
    """One problem: its code, the argument it concerns (``name``; '' for the whole input) and the values its
    text needs (``expected`` type, ``enum``, ``limit``, ``format``, ``names``, ``got``)."""

    code: ProblemCode
    name: str = ""
    params: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        """The sentence the model (and a developer) reads; it names the argument."""
        f, p = self.name, self.params
        match self.code:
            case ProblemCode.NOT_OBJECT:
                return f"arguments must be an object, got {p['got']}"
            case ProblemCode.UNKNOWN:
                return f"unknown argument {f!r}"
            case ProblemCode.REQUIRED:
                names = p.get("names") or [f]
                return f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} required"
            case ProblemCode.TYPE:
                t = p["expected"]
                return f"{f} must be {'an' if t == 'integer' else 'a'} {t}"
            case ProblemCode.ENUM:
                return f"{f} must be one of {p['enum']}"
            case ProblemCode.MIN_LENGTH:
                return f"{f} must have at least {p['limit']} characters"
            case ProblemCode.MAX_LENGTH:
                return f"{f} must have at most {p['limit']} characters"
            case ProblemCode.FORMAT:
                return f"{f} {FORMAT_TEXT.get(p['format'], 'is not a valid ' + str(p['format']))}"
            case ProblemCode.MINIMUM:
                return f"{f} must be at least {p['limit']}"
            case ProblemCode.MAXIMUM:
                return f"{f} must be at most {p['limit']}"
            case ProblemCode.EXCLUSIVE_MINIMUM:
                return f"{f} must be more than {p['limit']}"
            case ProblemCode.EXCLUSIVE_MAXIMUM:
                return f"{f} must be less than {p['limit']}"
        return f"{f} is not valid"  # pragma: no cover - every code is handled above

"""Page-function argument errors list every problem at once (issue 31, item 6), as FastAPI does: the model (or a
developer) fixes them all in one go, and a union says what each of its choices wanted."""

from __future__ import annotations

import pytest

from widget.core.validation import MAX_SHOWN, validate

pytestmark = pytest.mark.unit

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "units": {"enum": ["metric", "imperial"]},
    },
    "required": ["city", "units"],
}


def test_every_problem_is_listed() -> None:
    reason = validate(SCHEMA, {"days": 1.5, "units": "kelvin"})
    assert reason == ("(root): 'city' is a required property; days: 1.5 is not of type 'integer' or 'null'; "
                      "units: 'kelvin' is not one of ['metric', 'imperial']")
    assert "not valid under any of the given schemas" not in reason


def test_a_long_list_is_bounded() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    reason = validate(schema, {f"k{i:02d}": "x" for i in range(MAX_SHOWN + 5)})
    assert reason is not None and reason.count("is not of type") == MAX_SHOWN and reason.endswith("; and 5 more")


def test_a_valid_call_has_no_reason() -> None:
    assert validate(SCHEMA, {"city": "Oslo", "units": "metric", "days": None}) is None

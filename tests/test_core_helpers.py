"""Emitter, conversation helpers, schema-from-hints and ask-user answer checks (pure, sans-I/O)."""

import dataclasses
import enum
from typing import Annotated, Literal, TypedDict

import pytest

from widget.core.ask_user import check_answers
from widget.core.conversation import enrich_messages, visible_messages
from widget.core.events import Emitter
from widget.core.schema import parameters_from_signature
from widget.core.validation import validate_arguments
from widget.errors import ConfigError

pytestmark = pytest.mark.unit


def test_emitter_isolates_listeners_and_unsubscribes():
    e = Emitter()
    errors, got = [], []
    e.on_listener_error = lambda ev, exc: errors.append((ev, str(exc)))
    e.on("x", lambda p: 1 / 0)
    off = e.on("x", got.append)
    e.once("x", lambda p: got.append(("once", p)))
    e.emit("x", 1)
    e.emit("x", 2)
    off()
    e.emit("x", 3)
    assert got == [1, ("once", 1), 2]
    assert len(errors) == 3 and errors[0][0] == "x"
    assert e.listener_count("x") == 1


def test_enrich_and_visible_messages():
    msgs = [
        {"id": "u", "role": "user", "content": "hi"},
        {"id": "a1", "role": "assistant", "content": "", "function_calls": [{"id": "c1", "name": "f"}]},
        {"id": "t1", "role": "tool", "function_call_id": "c1", "status": "success", "result": 1, "total_ms": 2.0},
        {"id": "a2", "role": "assistant", "content": "", "function_calls": [{"id": "c2", "name": "g"}]},
        {"id": "t2", "role": "tool", "function_call_id": "c2", "status": "error", "error": "boom"},
        {"id": "a3", "role": "assistant", "content": "Done."},
        {"id": "s", "role": "system", "content": "hidden"},
        {"id": "e", "role": "error", "content": "provider down"},
    ]
    enriched = enrich_messages(msgs)
    assert enriched[1]["function_calls"][0]["result"] == 1
    assert msgs[1]["function_calls"][0].get("result") is None  # input untouched
    vis = visible_messages(msgs)
    assert [m["id"] for m in vis] == ["u", "a1", "a3", "e"]
    merged = vis[1]["function_calls"]
    assert [(c["id"], c["status"]) for c in merged] == [("c1", "success"), ("c2", "error")]


class Units(enum.Enum):
    C = "c"
    F = "f"


class Address(TypedDict):
    city: str
    zip: str | None


@dataclasses.dataclass
class Item:
    sku: str
    qty: int = 1


def test_schema_from_hints_nested_and_checked():
    def order(items: list[Item], ship_to: Address, units: Units = Units.C,
              note: Annotated[str, "A note for the courier"] = "", mode: Literal["fast", "cheap"] = "cheap") -> str:
        return ""

    schema = parameters_from_signature(order)
    assert schema["required"] == ["items", "ship_to"]
    assert schema["properties"]["items"]["items"]["required"] == ["sku"]
    assert schema["properties"]["units"] == {"enum": ["c", "f"], "default": "c"}
    assert schema["properties"]["note"]["description"] == "A note for the courier"
    good = {"items": [{"sku": "a", "qty": 2}], "ship_to": {"city": "Oslo", "zip": None}}
    assert validate_arguments(schema, good) is None
    bad = {"items": [{"qty": 2}], "ship_to": {"city": "Oslo", "zip": None}}
    assert "sku" in validate_arguments(schema, bad)
    assert validate_arguments(schema, [1]) == "arguments must be an object, got list"


def test_schema_refuses_what_it_cannot_express():
    def f(x: object) -> None: ...

    with pytest.raises(ConfigError, match="cannot describe"):
        parameters_from_signature(f)

    def g(*args: int) -> None: ...

    with pytest.raises(ConfigError, match="ordinary named parameter"):
        parameters_from_signature(g)


def test_broken_schema_never_runs_the_handler():
    problem = validate_arguments({"type": "object", "properties": {"x": {"pattern": "\\p{L}"}}}, {"x": "a"})
    assert problem is not None and "could not be checked" in problem


PROMPTS = [
    {"id": "t", "type": "text", "question": "?"},
    {"id": "b", "type": "bool", "question": "?"},
    {"id": "r", "type": "radiolist", "question": "?", "arguments": {"options": [{"value": "x", "label": "X"}]}},
    {"id": "c", "type": "checklist", "question": "?",
     "arguments": {"options": [{"value": "a", "label": "A"}, {"value": "b", "label": "B"}]}},
]


def test_ask_user_answers_checked_per_type():
    ok = [{"id": "t", "result": "hi"}, {"id": "b", "result": True}, {"id": "r", "result": "x"},
          {"id": "c", "result": ["a", "b"]}]
    check_answers(PROMPTS, ok)
    for bad, msg in [
        ([*ok[:3]], "missing"),
        ([{**ok[0], "result": 1}, *ok[1:]], "string"),
        ([ok[0], {"id": "b", "result": "yes"}, *ok[2:]], "true or false"),
        ([*ok[:2], {"id": "r", "result": "y"}, ok[3]], "one of"),
        ([*ok[:3], {"id": "c", "result": ["a", "z"]}], "'z' is not one of the option values"),
        ([*ok, {"id": "t", "result": "again"}], "twice"),
        ([*ok, {"id": "zz", "result": 1}], "No pending prompt"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            check_answers(PROMPTS, bad)

"""Page functions as typed as FastAPI's: schema from hints, the model's JSON converted to the declared types and
back, parameter descriptions from docstrings, explicit schemas checked against the metaschema (pure, sans-I/O)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import enum
import inspect
import uuid
from typing import Annotated, Any, Literal, NewType, Optional, TypedDict, Union

import pytest

from widget.core.convert import ArgumentError, from_json, to_json
from widget.core.docstrings import parse_docstring
from widget.core.pyfunctions import InvalidArguments, bind_function, handler_error
from widget.core.registry import FunctionDefinition, FunctionRegistry
from widget.core.schema import parameters_from_signature, schema_for
from widget.core.validation import schema_problem, validate, validate_arguments
from widget.errors import ConfigError

pytestmark = pytest.mark.unit


class Size(enum.Enum):
    S = "s"
    M = "m"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass
class Address:
    """A postal address.

    Attributes:
        city: The city's name.
        zip: Postal code, if known.
    """

    city: str
    zip: str | None = None


@dataclasses.dataclass
class Order:
    items: list[Size]
    ship_to: Address
    when: dt.date
    tags: set[str] = dataclasses.field(default_factory=set)
    level: Level = Level.LOW


class Point(TypedDict):
    x: int
    at: dt.datetime


UserId = NewType("UserId", int)
UID = uuid.UUID("123e4567-e89b-12d3-a456-426614174000")

#: (annotation, JSON in, Python value out, schema). Every JSON value must pass its schema, the schema must be
#: valid JSON Schema, the value must convert to exactly the Python value, and to_json must give the JSON back.
TABLE: list[tuple[Any, Any, Any, dict[str, Any]]] = [
    (str, "a", "a", {"type": "string"}),
    (int, 3, 3, {"type": "integer"}),
    (float, 2, 2.0, {"type": "number"}),
    (bool, True, True, {"type": "boolean"}),
    (Any, {"k": [1]}, {"k": [1]}, {}),
    (Literal["a", "b"], "b", "b", {"enum": ["a", "b"]}),
    (Literal[1, 2], 2, 2, {"enum": [1, 2]}),
    # typing.Optional and typing.Union are forms the converter must take as well as X | Y: spelled out on purpose.
    (Optional[int], None, None, {"anyOf": [{"type": "integer"}, {"type": "null"}]}),  # noqa: UP045
    (Optional[int], 4, 4, {"anyOf": [{"type": "integer"}, {"type": "null"}]}),  # noqa: UP045
    (int | str, "x", "x", {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
    (Union[int, float], 3, 3, {"anyOf": [{"type": "integer"}, {"type": "number"}]}),  # noqa: UP007
    (Size, "m", Size.M, {"enum": ["s", "m"]}),
    (Level, 2, Level.HIGH, {"enum": [1, 2]}),
    (list[Size], ["s", "m"], [Size.S, Size.M], {"type": "array", "items": {"enum": ["s", "m"]}}),
    (tuple[int, str], [1, "a"], (1, "a"),
     {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "minItems": 2, "maxItems": 2,
      "items": False}),
    (tuple[Size, ...], ["s", "s"], (Size.S, Size.S), {"type": "array", "items": {"enum": ["s", "m"]}}),
    (frozenset[int], [1, 2], frozenset({1, 2}), {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}),
    (dict[str, Size], {"a": "s"}, {"a": Size.S}, {"type": "object", "additionalProperties": {"enum": ["s", "m"]}}),
    (dict[int, str], {"1": "a"}, {1: "a"},
     {"type": "object", "propertyNames": {"pattern": "^-?[0-9]+$"}, "additionalProperties": {"type": "string"}}),
    (dict[Size, int], {"m": 1}, {Size.M: 1},
     {"type": "object", "propertyNames": {"enum": ["s", "m"]}, "additionalProperties": {"type": "integer"}}),
    (dt.date, "2026-12-01", dt.date(2026, 12, 1), {"type": "string", "format": "date"}),
    (dt.datetime, "2026-12-01T09:30:00+00:00", dt.datetime(2026, 12, 1, 9, 30, tzinfo=dt.UTC),
     {"type": "string", "format": "date-time"}),
    (dt.time, "09:30:00", dt.time(9, 30), {"type": "string", "format": "time"}),
    (uuid.UUID, str(UID), UID, {"type": "string", "format": "uuid"}),
    (UserId, 7, 7, {"type": "integer"}),
    (Annotated[int, "how many"], 5, 5, {"type": "integer", "description": "how many"}),
    (Point, {"x": 1, "at": "2026-12-01T00:00:00+00:00"}, {"x": 1, "at": dt.datetime(2026, 12, 1, tzinfo=dt.UTC)},
     {"type": "object", "properties": {"x": {"type": "integer"}, "at": {"type": "string", "format": "date-time"}},
      "required": ["at", "x"], "additionalProperties": False}),
    (Address, {"city": "Oslo"}, Address("Oslo"),
     {"type": "object", "description": "A postal address.",
      "properties": {"city": {"type": "string", "description": "The city's name."},
                     "zip": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "Postal code, if known.",
                             "default": None}},
      "required": ["city"], "additionalProperties": False}),
    (Order, {"items": ["s"], "ship_to": {"city": "Oslo", "zip": "0150"}, "when": "2026-12-24", "tags": ["a"],
             "level": 2},
     Order([Size.S], Address("Oslo", "0150"), dt.date(2026, 12, 24), {"a"}, Level.HIGH), None),
]


@pytest.mark.parametrize("tp,raw,value,schema", TABLE, ids=[str(i) for i in range(len(TABLE))])
def test_types_table(tp, raw, value, schema):
    got_schema = schema_for(tp, "f(x)")
    if schema is not None:
        assert got_schema == schema
    assert schema_problem(got_schema) is None
    assert validate(got_schema, raw) is None
    converted = from_json(tp, raw)
    assert converted == value and type(converted) is type(value)
    back = to_json(converted)
    if isinstance(value, Address) or tp is Order:
        assert validate(got_schema, back) is None
    else:
        assert back == raw or sorted(back) == sorted(raw)


def test_nested_dataclass_converts_all_the_way_down():
    order = from_json(Order, TABLE[-1][1])
    assert order.ship_to.city == "Oslo" and order.items[0] is Size.S and order.level is Level.HIGH
    assert to_json(order) == {"items": ["s"], "ship_to": {"city": "Oslo", "zip": "0150"}, "when": "2026-12-24",
                              "tags": ["a"], "level": 2}
    schema = schema_for(Order, "f(o)")
    assert schema["properties"]["tags"]["default"] == [] and schema["properties"]["level"]["default"] == 1
    assert schema["required"] == ["items", "ship_to", "when"]


@pytest.mark.parametrize("tp,raw,where,reason", [
    (dt.date, "2026-13-01", "(root)", "date string"),
    (Size, "xl", "(root)", "one of ['s', 'm']"),
    (tuple[int, int], [1], "(root)", "exactly 2 items"),
    (list[dt.date], ["2026-01-01", "soon"], "1", "date string"),
    (Order, {"items": ["s"], "ship_to": {"city": 1}, "when": "2026-01-01"}, "ship_to/city", "a string"),
    (Address, {"city": "a", "street": "b"}, "(root)", "unexpected field"),
    (Address, {"zip": "1"}, "(root)", "needs 'city'"),
    (int | dt.date, "x", "(root)", "matches none"),
    (dict[int, str], {"a": "x"}, "a", "integer key"),
    (uuid.UUID, "nope", "(root)", "uuid"),
])
def test_conversion_errors_name_the_path(tp, raw, where, reason):
    with pytest.raises(ArgumentError) as info:
        from_json(tp, raw)
    assert info.value.where == where and reason in info.value.message


def test_decorated_function_gets_its_types_and_returns_json():
    seen = {}

    def book(address: Address, when: dt.datetime, size: Size = Size.S, party: tuple[int, int] = (1, 0),
             notes: dict[str, int] = None) -> Order:  # the None default is the point
        """Book a table.

        Args:
            address: Where.
            when: At what time.
            size: Table size.
        """
        seen.update(address=address, when=when, size=size, party=party, notes=notes)
        return Order([size], address, when.date())

    bound = bind_function(book)
    assert bound.description == "Book a table."
    props = bound.parameters["properties"]
    assert props["address"]["description"] == "Where." and props["size"] == {"enum": ["s", "m"], "default": "s",
                                                                             "description": "Table size."}
    assert props["party"]["default"] == [1, 0] and props["party"]["maxItems"] == 2
    # A None default: nullable, so the default is valid against its own schema.
    assert props["notes"] == {"anyOf": [{"type": "object", "additionalProperties": {"type": "integer"}},
                                        {"type": "null"}], "default": None}
    args = {"address": {"city": "Oslo"}, "when": "2026-12-01T19:00:00Z", "size": "m", "party": [2, 1], "notes": None}
    assert validate_arguments(bound.parameters, args) is None
    result = bound.handler(args, {})
    assert seen == {"address": Address("Oslo"), "when": dt.datetime(2026, 12, 1, 19, tzinfo=dt.UTC),
                    "size": Size.M, "party": (2, 1), "notes": None}
    assert result == {"items": ["m"], "ship_to": {"city": "Oslo", "zip": None}, "when": "2026-12-01", "tags": [],
                      "level": 1}
    with pytest.raises(InvalidArguments, match=r"^Invalid arguments for 'book': when: 'tomorrow' is not a date-time"):
        bound.handler({"address": {"city": "Oslo"}, "when": "tomorrow"}, {})
    with pytest.raises(InvalidArguments, match="unexpected argument"):
        bound.handler({"address": {"city": "Oslo"}, "when": "2026-12-01", "x": 1}, {})


def test_async_function_converts_too():
    async def when(d: dt.date) -> dt.date:
        return d + dt.timedelta(days=1)

    bound = bind_function(when, name="next_day")
    assert bound.name == "next_day" and inspect.iscoroutinefunction(bound.handler)
    assert asyncio.run(bound.handler({"d": "2026-12-31"}, {})) == "2027-01-01"


def test_handler_error_text_and_console(caplog):
    with caplog.at_level("ERROR", logger="widget"):
        try:
            {}["missing"]
        except KeyError as exc:
            assert handler_error("f", exc) == "KeyError: 'missing'"
    assert "function f raised" in caplog.text and "Traceback" in caplog.text and "KeyError" in caplog.text
    assert handler_error("f", ConfigError("plain message")) == "plain message"
    assert handler_error("f", ValueError()) == "ValueError"


DOCS = [
    ("google", """Find flights.

    More words.

    Args:
        origin (str): Where from,
            on two lines.
        dest: Where to.

    Returns:
        The flights.
    """, "Find flights.\n\nMore words.\n\nReturns:\n    The flights.",
    {"origin": "Where from, on two lines.", "dest": "Where to."}),
    ("numpy", """Find flights.

    Parameters
    ----------
    origin : str
        Where from.
    dest, via : str
        Airports.

    Returns
    -------
    list
        The flights.
    """, "Find flights.\n\nReturns\n-------\nlist\n    The flights.",
    {"origin": "Where from.", "dest": "Airports.", "via": "Airports."}),
    ("rest", """Find flights.

    :param origin: Where from,
        on two lines.
    :type origin: str
    :param str dest: Where to.
    :returns: The flights.
    """, "Find flights.\n\n:returns: The flights.", {"origin": "Where from, on two lines.", "dest": "Where to."}),
    ("plain", "Just a description.\n\nWith a second paragraph.", "Just a description.\n\nWith a second paragraph.", {}),
    ("none", None, "", {}),
]


@pytest.mark.parametrize("style,doc,description,params", DOCS, ids=[d[0] for d in DOCS])
def test_docstring_styles(style, doc, description, params):
    parsed = parse_docstring(inspect.cleandoc(doc) if doc else doc)
    assert parsed.description == description and parsed.params == params


def test_annotated_description_wins_over_the_docstring():
    def f(x: Annotated[int, "from Annotated"], y: int = 0) -> None:
        """F.

        Args:
            x: from the docstring
            y: also from the docstring
        """

    bound = bind_function(f)
    assert bound.parameters["properties"]["x"]["description"] == "from Annotated"
    assert bound.parameters["properties"]["y"] == {"type": "integer", "description": "also from the docstring",
                                                   "default": 0}


def test_explicit_schemas_are_checked_against_the_metaschema():
    registry = FunctionRegistry()
    good = [
        {"type": "object", "properties": {"city": {"type": "string", "pattern": "^[A-Z]"}}, "required": ["city"]},
        {"type": "object", "properties": {"p": {"type": "array", "prefixItems": [{"type": "number"}], "items": False}}},
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
         "properties": {"t": {"type": "array", "items": [{"type": "string"}]}}},
    ]
    for i, schema in enumerate(good):
        registry.register(FunctionDefinition(name=f"ok{i}", handler=lambda a, c: None, parameters=schema))
    bad = [
        ({"type": "object", "properties": {"city": {"type": "strin"}}}, "properties/city/type"),
        ({"type": "object", "required": "city"}, "required"),
        ({"type": "object", "properties": {"n": {"type": "integer", "minimum": "0"}}}, "properties/n/minimum"),
        ({"type": "object", "properties": {"s": {"type": "string", "pattern": "(("}}}, "properties/s/pattern"),
        ({"type": "object", "properties": []}, "properties"),
    ]
    for schema, where in bad:
        with pytest.raises(ConfigError) as info:
            registry.register(FunctionDefinition(name="bad", handler=lambda a, c: None, parameters=schema))
        assert f"Function 'bad': parameters is not a valid JSON Schema: {where}:" in str(info.value)
        assert not registry.has("bad")


def test_every_derived_schema_is_valid_json_schema():
    def everything(a: Order, b: list[tuple[int, Size]], c: dict[str, Address] = None,
                   d: Literal["x"] = "x", e: Point | None = None) -> None: ...

    schema = parameters_from_signature(everything)
    assert schema_problem(dict(schema)) is None
    assert schema["properties"]["c"]["default"] is None and schema["required"] == ["a", "b"]


def test_page_python_errors_name_the_block_and_line():
    import linecache
    import sys

    from widget.browser import PAGE_MODULE_NAME, PAGE_NAMESPACE, page_error, page_error_text

    assert sys.modules[PAGE_MODULE_NAME].__dict__ is PAGE_NAMESPACE
    for source, want in [("x = 1\n\nraise KeyError('k')\n", "line 3: KeyError: 'k'"),
                         ("def f(:\n", "line 1: SyntaxError: ")]:
        try:
            exec(compile(source, "<page script 4>", "exec"), {})  # noqa: S102 - page code fails as page code does
        except Exception as exc:  # noqa: BLE001
            payload = page_error("<page script 4>", exc)
        assert payload["message"].startswith(f"page Python failed: <page script 4>, {want}"), payload["message"]
        assert payload["source"] == "<page script 4>" and want.split()[2] in payload["traceback"]
    linecache.cache.pop("<page script 4>", None)
    # A PyScript block's error arrives as traceback text: its last "<exec>" frame is the block's line.
    tb = ('Traceback (most recent call last):\n  File "/lib/python3.14/_pyodide/_base.py", line 597, in eval_code\n'
          '  File "<exec>", line 7, in <module>\n  File "<exec>", line 3, in helper\nValueError: bad\n')
    assert page_error_text("<py script 2>",
                           tb)["message"] == "page Python failed: <py script 2>, line 3: ValueError: bad"
    assert page_error_text("<py script 2>", "")["message"] == "page Python failed: <py script 2>: error"

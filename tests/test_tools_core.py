"""Tool and action declarations and argument checks (sans-I/O)."""

import pytest

from widget.core.tools import check_tool_arguments, parse_tool, parse_tools
from widget.errors import ConfigError
from widget.relay.tools import strict_schema

pytestmark = pytest.mark.unit

PLAN = {"type": "object", "properties": {"plan": {"type": "string", "enum": ["free", "pro", "team"]}},
        "required": ["plan"]}
SUPPORT = {
    "type": "object",
    "properties": {
        "email": {"type": "string", "format": "email", "description": "Where support replies"},
        "message": {"type": "string", "format": "multiline", "description": "The problem"},
        "seats": {"type": "integer", "minimum": 1, "maximum": 500},
        "urgent": {"type": "boolean"},
    },
    "required": ["email", "message"],
}


def test_kinds_from_confirm():
    assert parse_tool("plan_limits",
                      {"description": "d", "parameters": PLAN, "run": {"fetch": "/api/plans/{plan}"}}).kind == "tool"
    b = parse_tool("open_pricing", {"description": "d", "parameters": PLAN, "confirm": True, "label": "Open pricing",
                                    "run": {"href": "/pricing?plan={plan}"}})
    assert (b.kind, b.confirm) == ("action", "button")
    f = parse_tool("contact", {"description": "d", "parameters": SUPPORT, "confirm": "form",
                               "run": {"fetch": "/api/support", "method": "POST"}})
    assert (f.kind, f.confirm) == ("action", "form")
    assert f.descriptor(False)["label"] == "contact" and "run" not in f.descriptor(False)


@pytest.mark.parametrize("run,word", [({"fetch": "/api/x", "method": "POST"}, "POST"),
                                      ({"href": "/x"}, "navigate"), ({"event": "acme:x"}, "event")])
def test_function_tool_must_only_read(run, word):
    with pytest.raises(ConfigError, match=f"{word}.*Make it an action"):
        parse_tool("t", {"description": "d", "run": run})


@pytest.mark.parametrize("params,msg", [
    ({"type": "object", "properties": {"a": {"type": "object"}}}, "nested"),
    ({"type": "object", "properties": {"a": {"type": "array"}}}, "nested"),
    ({"type": "object", "properties": {"a": {"type": "string", "format": "color"}}}, "format"),
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}}, "unsupported"),
    ({"type": "object", "properties": {}, "required": ["x"]}, "required"),
    ({"type": "string"}, "type 'object'"),
])
def test_parameters_must_be_flat(params, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_tool("t", {"description": "d", "parameters": params})


def test_placeholder_in_host_refused_and_more_than_twelve_warns():
    with pytest.raises(ConfigError, match="scheme or host"):
        parse_tool("t", {"description": "d", "run": {"fetch": "https://{plan}.example.com/x"}})
    specs, warnings = parse_tools({f"t{i}": {"description": "d", "run": {"fetch": "/x"}} for i in range(13)})
    assert len(specs) == 13 and "twelve" in warnings[0]
    with pytest.raises(ConfigError, match="description"):
        parse_tool("t", {"run": {"fetch": "/x"}})
    with pytest.raises(ConfigError, match="unknown key"):
        parse_tool("t", {"description": "d", "handler": "x"})
    with pytest.raises(ConfigError, match="needs a run"):
        parse_tool("t", {"description": "d", "confirm": True})


def test_arguments_checked_in_code():
    ok, err = check_tool_arguments(SUPPORT, {"email": "a@b.co", "message": "hi", "seats": 3, "urgent": None})
    assert err is None and ok == {"email": "a@b.co", "message": "hi", "seats": 3}
    cases = [
        ({"email": "not-an-email", "message": "m"}, "email address"),
        ({"email": "a@b", "message": "m"}, "email address"),
        ({"email": "a@b.co"}, "message is required"),
        ({"email": "a@b.co", "message": "m", "seats": 0}, "at least 1"),
        ({"email": "a@b.co", "message": "m", "seats": 2.5}, "integer"),
        ({"email": "a@b.co", "message": "m", "urgent": 0}, "boolean"),
        ({"email": "a@b.co", "message": "m", "extra": 1}, "unknown argument"),
        ({"email": None, "message": "m"}, "email is required"),
    ]
    for args, msg in cases:
        clean, err = check_tool_arguments(SUPPORT, args)
        assert err is not None and msg in err, (args, err)
    assert check_tool_arguments(PLAN, {"plan": "premium"})[1] == "plan must be one of ['free', 'pro', 'team']"
    enum_bool = {"type": "object", "properties": {"n": {"type": "integer", "enum": [0, 1]}}}
    assert check_tool_arguments(enum_bool, {"n": False})[1] is not None  # false is not 0
    # A form may leave required values to the reader.
    assert check_tool_arguments(SUPPORT, {"email": "a@b.co"}, allow_missing_required=True)[1] is None


@pytest.mark.parametrize("fmt,good,bad", [
    ("uri", "https://example.com/x", "javascript:alert(1)"),
    ("date", "2026-11-30", "30/11/2026"),
    ("date-time", "2026-11-30T10:00:00Z", "2026-11-30 25:00"),
])
def test_formats_really_checked(fmt, good, bad):
    params = {"type": "object", "properties": {"v": {"type": "string", "format": fmt}}}
    assert check_tool_arguments(params, {"v": good})[1] is None
    assert check_tool_arguments(params, {"v": bad})[1] is not None


def test_strict_schema_makes_optional_nullable():
    s = strict_schema(parse_tool("c", {"description": "d", "parameters": SUPPORT, "confirm": "form",
                                       "run": {"event": "x"}}).parameters)
    assert s["required"] == ["email", "message", "seats", "urgent"]
    assert s["properties"]["seats"]["type"] == ["integer", "null"]
    assert s["properties"]["email"]["type"] == "string" and "format" not in s["properties"]["email"]


@pytest.mark.parametrize("name", ["get_cart\n", "", "1abc", "a" * 65, "with space"])
def test_one_name_rule_for_functions_tools_and_relay_tools(name: str) -> None:
    """Functions, tools and relay config functions share the vocabulary's name rule (``$`` once let
    "get_cart\\n" through)."""
    from widget.core.registry import validate_definition
    from widget.relay.config import ToolConfig, _bind_tool

    with pytest.raises(ConfigError):
        parse_tool(name, {"description": "d", "run": {"kind": "event", "event": "x"}})
    with pytest.raises(ConfigError):
        validate_definition(name, lambda: None, "d", None, False)
    with pytest.raises(ConfigError):
        _bind_tool("test", name, ToolConfig(callable=lambda args, context: None, description="d"))


def test_problems_are_data_and_each_audience_gets_its_sentence():
    """A failed check is a structured problem; the model's sentence and the reader's are both made from it."""
    from widget.core.problems import ProblemCode
    from widget.core.tools import tool_argument_problem
    from widget.store.forms import reader_text

    _, p = tool_argument_problem(SUPPORT, {"email": "nope", "message": "m"})
    assert (p.code, p.name, p.params) == (ProblemCode.FORMAT, "email", {"format": "email"})
    assert p.text() == "email is not an email address"
    assert reader_text(p) == "Enter an email address, like name@example.com."
    _, p = tool_argument_problem(SUPPORT, {"email": "a@b.co", "message": "m", "seats": 0})
    assert (p.code, p.params) == (ProblemCode.MINIMUM, {"limit": 1})
    assert p.text() == "seats must be at least 1" and reader_text(p) == "Enter a number at least 1."
    _, p = tool_argument_problem(SUPPORT, {})
    assert p.code == ProblemCode.REQUIRED and p.text() == "email, message are required"

"""Tools and actions (docs/tools.md): declarations checked at registration, arguments checked in code (D5, D6).

Rules:
- ``confirm`` decides the kind: absent → a function tool (must only read), ``True`` → a button action,
  ``"form"`` → a form action.
- A function tool's ``run`` may only be a GET ``fetch``: a POST, an ``href`` or an ``event`` changes something
  without the reader, so it must be an action.
- ``parameters`` is a flat object: string, number, integer or boolean properties with optional ``enum``,
  ``format``, bounds and ``description``. Nested objects and arrays are refused.
- Arguments are checked in code: ``null`` (or absence) for an optional property means absent; ``enum``,
  ``format`` (the formats below, really checked) and bounds are enforced; required values must be present
  (a form action may leave them to the reader).
- More than twelve tools is allowed with a warning: the model chooses worse among many.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError
from ..protocol import MAX_TOOLS_ADVISED, Kind, is_tool_name
from .problems import Problem, ProblemCode
from .templates import placeholders

_TYPES = {"string", "number", "integer", "boolean"}
_PROPERTY_KEYS = {
    "type", "enum", "format", "description", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "minLength", "maxLength", "default", "title",
}
#: Formats we check ourselves (``multiline`` is a UI hint for a string field).
FORMATS = ("email", "uri", "date", "date-time", "multiline")
_EMAIL = re.compile(
    r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+"  # the local part
    r"@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"  # the first label of the domain
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$"  # and at least one more
)


@dataclass
class ToolSpec:
    """One declared tool or action."""

    name: str
    description: str
    parameters: dict[str, Any]
    kind: str  # "tool" or "action"
    confirm: str | None = None  # None (tool), "button" or "form"
    run: dict[str, Any] | None = None
    label: str | None = None
    title: str | None = None
    warnings: list[str] = field(default_factory=list)

    def descriptor(self, has_page_handler: bool) -> dict[str, Any]:
        """The entry mirrored to ``/autopilot/functions`` (docs/protocol.md §8); ``run`` stays in the page."""
        d: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "description": self.description,
            "parameters": self.parameters,
            "sensitive": False,
            "source": "client",
        }
        if self.kind == Kind.TOOL:
            d["handler"] = "page" if has_page_handler else "run"
        else:
            d.update(confirm=self.confirm, label=self.label or self.title or self.name, title=self.title)
        return d


def check_parameters(name: str, parameters: Any) -> dict[str, Any]:
    """A normalised flat ``parameters`` schema; ConfigError naming what is wrong."""
    if parameters is None:
        return {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
        raise ConfigError(f"Tool {name!r}: parameters must be a JSON Schema object with type 'object'.")
    props = parameters.get("properties") or {}
    if not isinstance(props, dict):
        raise ConfigError(f"Tool {name!r}: parameters.properties must be an object.")
    required = parameters.get("required") or []
    if not isinstance(required, list) or any(r not in props for r in required):
        raise ConfigError(f"Tool {name!r}: required must list properties that exist.")
    for pname, prop in props.items():
        where = f"Tool {name!r}, parameter {pname!r}"
        if not isinstance(prop, dict):
            raise ConfigError(f"{where}: must be a schema object.")
        ptype = prop.get("type")
        if ptype not in _TYPES:
            raise ConfigError(
                f"{where}: type must be string, number, integer or boolean (nested objects and arrays are not "
                f"supported yet), got {ptype!r}."
            )
        unknown = set(prop) - _PROPERTY_KEYS
        if unknown:
            raise ConfigError(f"{where}: unsupported keyword(s) {sorted(unknown)}.")
        if "enum" in prop and (not isinstance(prop["enum"], list) or not prop["enum"]):
            raise ConfigError(f"{where}: enum must be a non-empty list.")
        if "format" in prop:
            if ptype != "string" or prop["format"] not in FORMATS:
                raise ConfigError(f"{where}: format must be one of {', '.join(FORMATS)} on a string.")
        for bound in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if bound in prop and (ptype not in ("number", "integer") or not _is_number(prop[bound])):
                raise ConfigError(f"{where}: {bound} needs a number type and a number value.")
        for bound in ("minLength", "maxLength"):
            if bound in prop and (ptype != "string" or not isinstance(prop[bound], int) or prop[bound] < 0):
                raise ConfigError(f"{where}: {bound} needs a string type and a non-negative integer.")
    return {"type": "object", "properties": props, "required": list(required), "additionalProperties": False}


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_run(name: str, run: Any, kind: str) -> dict[str, Any] | None:
    if run is None:
        return None
    if not isinstance(run, dict) or len([k for k in ("fetch", "href", "event") if k in run]) != 1:
        raise ConfigError(f"Tool {name!r}: run must be one of {{fetch}}, {{href}} or {{event}}.")
    if "fetch" in run:
        method = str(run.get("method", "GET")).upper()
        if method not in ("GET", "POST"):
            raise ConfigError(f"Tool {name!r}: run.method must be GET or POST.")
        placeholders(run["fetch"])
        if kind == Kind.TOOL and method != "GET":
            raise ConfigError(
                f"Tool {name!r} would POST: a function tool must only read. "
                "Make it an action (confirm: true or 'form')."
            )
        return {"fetch": run["fetch"], "method": method}
    if "href" in run:
        placeholders(run["href"])
        if kind == Kind.TOOL:
            raise ConfigError(f"Tool {name!r} would navigate: a function tool must only read. Make it an action.")
        return {"href": run["href"]}
    event = run["event"]
    if not isinstance(event, str) or not event:
        raise ConfigError(f"Tool {name!r}: run.event must be a non-empty event name.")
    if kind == Kind.TOOL:
        raise ConfigError(f"Tool {name!r} would fire an event: a function tool must only read. Make it an action.")
    return {"event": event}


def parse_tool(name: str, config: Any) -> ToolSpec:
    """Check one ``tools`` entry (the shape docs/tools.md gives); ConfigError naming what is wrong."""
    if not is_tool_name(name):
        raise ConfigError(f"Tool name {name!r} is invalid: use letters, digits, '_' or '-' (at most 64).")
    if not isinstance(config, dict):
        raise ConfigError(f"Tool {name!r}: the declaration must be an object.")
    known = {"description", "parameters", "title", "label", "confirm", "run"}
    unknown = set(config) - known
    if unknown:
        raise ConfigError(f"Tool {name!r}: unknown key(s) {sorted(unknown)} (known: {sorted(known)}).")
    description = config.get("description")
    if not isinstance(description, str) or not description.strip():
        raise ConfigError(f"Tool {name!r}: a description is required (the model chooses tools by it).")
    confirm = config.get("confirm")
    if confirm is None:
        kind, confirm_kind = Kind.TOOL, None
    elif confirm is True:
        kind, confirm_kind = Kind.ACTION, "button"
    elif confirm == "form":
        kind, confirm_kind = Kind.ACTION, "form"
    else:
        raise ConfigError(f"Tool {name!r}: confirm must be absent, true or 'form'.")
    for key in ("title", "label"):
        if config.get(key) is not None and not isinstance(config[key], str):
            raise ConfigError(f"Tool {name!r}: {key} must be a string.")
    spec = ToolSpec(
        name=name,
        description=description.strip(),
        parameters=check_parameters(name, config.get("parameters")),
        kind=kind,
        confirm=confirm_kind,
        run=_check_run(name, config.get("run"), kind),
        label=config.get("label"),
        title=config.get("title"),
    )
    if kind == Kind.ACTION and spec.run is None:
        raise ConfigError(f"Action {name!r} needs a run ({{fetch}}, {{href}} or {{event}}).")
    return spec


def parse_tools(config: Any) -> tuple[list[ToolSpec], list[str]]:
    """Check a whole ``tools`` mapping; returns the specs and warnings (e.g. more than twelve tools)."""
    if not isinstance(config, dict):
        raise ConfigError("tools must be a mapping of tool name to declaration.")
    specs = [parse_tool(name, entry) for name, entry in config.items()]
    warnings = []
    if len(specs) > MAX_TOOLS_ADVISED:
        warnings.append(
            f"{len(specs)} tools declared: twelve is the ceiling; a handful the model can tell apart works better."
        )
    return specs, warnings


def _format_ok(fmt: str, value: str) -> bool:
    if fmt == "email":
        return bool(_EMAIL.match(value)) and len(value) <= 254
    if fmt == "uri":
        parts = urlsplit(value)
        return parts.scheme in ("http", "https") and bool(parts.netloc)
    if fmt == "date":
        try:
            date.fromisoformat(value)
        except ValueError:
            return False
        return re.fullmatch(r"\d{4}-\d{2}-\d{2}", value) is not None
    if fmt == "date-time":
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:\d{2})?", value):
            return False
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            return False
    return True


def value_problem(pname: str, prop: dict[str, Any], value: Any) -> Problem | None:
    """What is wrong with ``value`` for the flat property ``prop`` (type, enum, length, format, bounds)."""
    ptype = prop["type"]
    ok = {
        "string": isinstance(value, str),
        "boolean": isinstance(value, bool),
        "integer": isinstance(value, int) and not isinstance(value, bool)
        or (isinstance(value, float) and value.is_integer()),
        "number": _is_number(value),
    }[ptype]
    if not ok:
        return Problem(ProblemCode.TYPE, pname, {"expected": ptype})
    # enum compares by type too: JSON false is not 0 (a known jsonschema 4.17.3 defect we do not copy).
    if "enum" in prop and not any(type(value) is type(e) and value == e for e in prop["enum"]) and not (
        ptype in ("number", "integer") and any(_is_number(e) and e == value for e in prop["enum"])
    ):
        return Problem(ProblemCode.ENUM, pname, {"enum": prop["enum"]})
    if ptype == "string":
        if "minLength" in prop and len(value) < prop["minLength"]:
            return Problem(ProblemCode.MIN_LENGTH, pname, {"limit": prop["minLength"]})
        if "maxLength" in prop and len(value) > prop["maxLength"]:
            return Problem(ProblemCode.MAX_LENGTH, pname, {"limit": prop["maxLength"]})
        if "format" in prop and not _format_ok(prop["format"], value):
            return Problem(ProblemCode.FORMAT, pname, {"format": prop["format"]})
    if ptype in ("number", "integer"):
        for key, code, fails in (
            ("minimum", ProblemCode.MINIMUM, operator.lt),
            ("maximum", ProblemCode.MAXIMUM, operator.gt),
            ("exclusiveMinimum", ProblemCode.EXCLUSIVE_MINIMUM, operator.le),
            ("exclusiveMaximum", ProblemCode.EXCLUSIVE_MAXIMUM, operator.ge),
        ):
            if key in prop and fails(value, prop[key]):
                return Problem(code, pname, {"limit": prop[key]})
    return None


def tool_argument_problem(
    parameters: dict[str, Any], args: Any, *, allow_missing_required: bool = False
) -> tuple[dict[str, Any], Problem | None]:
    """(clean arguments, None) when ``args`` pass the flat schema, else ({}, the first problem).

    ``null`` for an optional property means absent and is dropped from the clean arguments.
    """
    if not isinstance(args, dict):
        return {}, Problem(ProblemCode.NOT_OBJECT, "", {"got": type(args).__name__})
    props: dict[str, Any] = parameters.get("properties") or {}
    required = set(parameters.get("required") or [])
    clean: dict[str, Any] = {}
    for key, value in args.items():
        if key not in props:
            return {}, Problem(ProblemCode.UNKNOWN, key)
        if value is None:
            if key in required and not allow_missing_required:
                return {}, Problem(ProblemCode.REQUIRED, key)
            continue
        problem = value_problem(key, props[key], value)
        if problem:
            return {}, problem
        if props[key]["type"] == "integer" and isinstance(value, float):
            value = int(value)
        clean[key] = value
    if not allow_missing_required:
        missing = sorted(r for r in required if r not in clean)
        if missing:
            return {}, Problem(ProblemCode.REQUIRED, missing[0], {"names": missing})
    return clean, None


def check_tool_arguments(
    parameters: dict[str, Any], args: Any, *, allow_missing_required: bool = False
) -> tuple[dict[str, Any], str | None]:
    """:func:`tool_argument_problem` with the problem as the sentence the model reads."""
    clean, problem = tool_argument_problem(parameters, args, allow_missing_required=allow_missing_required)
    return clean, None if problem is None else problem.text()

"""JSON Schema from Python type hints, for the ``@client.function`` decorator (nested types allowed).

Every type here is one ``convert.from_json`` turns the model's JSON into (and ``convert.to_json`` back).
A parameter or dataclass field whose default is ``None`` is nullable whatever its type says: the function
accepts None there, and a JSON Schema ``default`` should itself be valid against the schema.
"""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
import enum
import inspect
import json
import types
import typing
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError
from .convert import STRING_FORMATS, class_hints, to_json
from .docstrings import parse_docstring

_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    Any: {},
}


def schema_for(tp: Any, where: str, _depth: int = 0) -> dict[str, Any]:
    """The JSON Schema of one annotation; ConfigError naming ``where`` for a type it cannot express."""
    if _depth > 16:
        raise ConfigError(f"{where}: type nesting is too deep (recursive type?).")
    if tp in _SCALARS:
        return dict(_SCALARS[tp])
    if tp in STRING_FORMATS:
        return {"type": "string", "format": STRING_FORMATS[tp][0]}
    if hasattr(tp, "__supertype__"):  # typing.NewType
        return schema_for(tp.__supertype__, where, _depth + 1)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        inner = schema_for(args[0], where, _depth + 1)
        for extra in args[1:]:
            if isinstance(extra, str):
                inner["description"] = extra
        return inner
    if origin is typing.Literal:
        if not all(isinstance(a, (str, int, float, bool)) for a in args):
            raise ConfigError(f"{where}: Literal values must be str, int, float or bool.")
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        schemas = [schema_for(a, where, _depth + 1) for a in non_null]
        if len(non_null) < len(args):
            schemas.append({"type": "null"})
        return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    container = origin or tp
    if container is tuple:
        return _tuple_schema(args, where, _depth)
    if container in _ARRAYS:
        out: dict[str, Any] = {"type": "array"}
        if args:
            out["items"] = schema_for(args[0], where, _depth + 1)
        if container in (set, frozenset, cabc.Set, cabc.MutableSet):
            out["uniqueItems"] = True
        return out
    if container in (dict, cabc.Mapping, cabc.MutableMapping):
        out = {"type": "object"}
        if len(args) == 2:
            keys = _key_schema(args[0], where)
            if keys:
                out["propertyNames"] = keys
            out["additionalProperties"] = schema_for(args[1], where, _depth + 1)
        return out
    if inspect.isclass(tp) and issubclass(tp, enum.Enum):
        values = [m.value for m in tp]
        return {"enum": values}
    if inspect.isclass(tp) and typing.is_typeddict(tp):
        hints = typing.get_type_hints(tp, include_extras=True)
        required = sorted(getattr(tp, "__required_keys__", set(hints)))
        return {
            "type": "object",
            "properties": {k: schema_for(v, f"{where}.{k}", _depth + 1) for k, v in hints.items()},
            "required": required,
            "additionalProperties": False,
        }
    if dataclasses.is_dataclass(tp) and inspect.isclass(tp):
        return _dataclass_schema(tp, where, _depth)
    raise ConfigError(f"{where}: cannot describe type {tp!r} in JSON Schema; use parameters= explicitly.")


_ARRAYS = (list, set, frozenset, cabc.Sequence, cabc.MutableSequence, cabc.Iterable, cabc.Collection, cabc.Set,
           cabc.MutableSet)
#: Factories whose value is the same every time, so it can be shown as the default.
_PLAIN_FACTORIES = (list, dict, set, frozenset, tuple, str, int, float, bool)


def _tuple_schema(args: tuple[Any, ...], where: str, depth: int) -> dict[str, Any]:
    if not args:
        return {"type": "array"}
    if len(args) == 2 and args[1] is Ellipsis:
        return {"type": "array", "items": schema_for(args[0], where, depth + 1)}
    if args == ((),):
        args = ()
    out: dict[str, Any] = {"type": "array", "minItems": len(args), "maxItems": len(args)}
    if args:
        out["prefixItems"] = [schema_for(a, where, depth + 1) for a in args]
    out["items"] = False
    return out


def _key_schema(tp: Any, where: str) -> dict[str, Any] | None:
    if tp in (str, Any):
        return None
    if tp is int:
        return {"pattern": "^-?[0-9]+$"}
    if inspect.isclass(tp) and issubclass(tp, enum.Enum) and all(isinstance(m.value, str) for m in tp):
        return {"enum": [m.value for m in tp]}
    raise ConfigError(f"{where}: dict keys must be str, int or a string Enum, got {tp!r}.")


def _dataclass_schema(tp: type, where: str, depth: int) -> dict[str, Any]:
    hints = class_hints(tp)
    docs = parse_docstring(inspect.getdoc(tp) if tp.__doc__ and not tp.__doc__.startswith(tp.__name__ + "(") else "")
    props: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(tp):
        if not f.init:
            continue
        schema = schema_for(hints.get(f.name, Any), f"{where}.{f.name}", depth + 1)
        if f.name in docs.params and not _annotated_description(hints.get(f.name)):
            schema["description"] = docs.params[f.name]
        if f.default is not dataclasses.MISSING:
            schema = with_default(schema, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            if f.default_factory in _PLAIN_FACTORIES:
                schema = with_default(schema, f.default_factory())
        else:
            required.append(f.name)
        props[f.name] = schema
    out: dict[str, Any] = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    if docs.description:
        out["description"] = docs.description
    return out


def _annotated_description(tp: Any) -> bool:
    """Whether ``tp`` is ``Annotated[..., "a description"]`` (which wins over the docstring's)."""
    return typing.get_origin(tp) is typing.Annotated and any(isinstance(x, str) for x in typing.get_args(tp)[1:])


def _is_nullable(schema: dict[str, Any]) -> bool:
    if schema == {} or schema.get("type") == "null" or None in schema.get("enum", ()):
        return True
    t = schema.get("type")
    return isinstance(t, list) and "null" in t or any(_is_nullable(s) for s in schema.get("anyOf", ()))


def with_default(schema: dict[str, Any], default: Any) -> dict[str, Any]:
    """``schema`` with ``default`` shown (as JSON); a None default makes the schema nullable; a default
    that is not JSON data is left out (the model then just omits the argument)."""
    value = to_json(default)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return schema
    if value is None and not _is_nullable(schema):
        description = schema.pop("description", None)
        schema = {"anyOf": [schema, {"type": "null"}]}
        if description is not None:
            schema["description"] = description
    schema["default"] = value
    return schema


class DerivedSchema(dict[str, Any]):
    """A ``parameters`` schema made here from type hints: valid JSON Schema by construction (the tests check
    every type against the metaschema), so registration skips the metaschema check for it."""


def parameters_from_signature(func: Callable[..., Any], descriptions: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``parameters`` object schema of ``func``'s keyword-callable parameters (``descriptions``: per
    parameter, from the docstring; an ``Annotated`` description wins)."""
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except Exception as exc:  # noqa: BLE001 - unresolved forward references
        raise ConfigError(f"Cannot read the type hints of {func.__name__}: {exc}") from None
    props: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in inspect.signature(func).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ConfigError(f"{func.__name__}: parameter {pname!r} must be an ordinary named parameter.")
        schema = schema_for(hints.get(pname, Any), f"{func.__name__}({pname})")
        if descriptions and pname in descriptions and not _annotated_description(hints.get(pname)):
            schema["description"] = descriptions[pname]
        if param.default is inspect.Parameter.empty:
            required.append(pname)
        else:
            schema = with_default(schema, param.default)
        props[pname] = schema
    out = DerivedSchema(type="object", properties=props)
    if required:
        out["required"] = required
    return out

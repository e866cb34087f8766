"""JSON Schema from Python type hints, for the ``@client.function`` decorator (D5: nested allowed)."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import types
import typing
from typing import Any, Callable

from ..errors import ConfigError

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
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple, set, frozenset):
        out: dict[str, Any] = {"type": "array"}
        if args:
            out["items"] = schema_for(args[0], where, _depth + 1)
        if origin in (set, frozenset):
            out["uniqueItems"] = True
        return out
    if origin is dict or tp is dict:
        out = {"type": "object"}
        if len(args) == 2:
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
        hints = typing.get_type_hints(tp, include_extras=True)
        props: dict[str, Any] = {}
        required: list[str] = []
        for f in dataclasses.fields(tp):
            props[f.name] = schema_for(hints.get(f.name, Any), f"{where}.{f.name}", _depth + 1)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                required.append(f.name)
        return {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    raise ConfigError(f"{where}: cannot describe type {tp!r} in JSON Schema; use parameters= explicitly.")


def parameters_from_signature(func: Callable[..., Any]) -> dict[str, Any]:
    """The ``parameters`` object schema of ``func``'s keyword-callable parameters."""
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
        if param.default is inspect.Parameter.empty:
            required.append(pname)
        else:
            default = param.default
            if isinstance(default, enum.Enum):
                default = default.value
            if isinstance(default, (str, int, float, bool, type(None))):
                schema["default"] = default
        props[pname] = schema
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return out

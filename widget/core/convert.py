"""Arguments to the types a page function declares, and its return value back to JSON.

The arguments have passed the JSON Schema check (``validation``) already; this turns JSON data into the
declared Python values: dataclasses (nested), Enums, tuples, sets, ``datetime``/``date``/``time``/``UUID``
from their string formats, and containers of those. A TypedDict stays a dict (its values converted). What
cannot be converted raises :class:`ArgumentError`, whose text has the same ``path: reason`` shape as a
schema failure. ``to_json`` is the way back for a return value.
"""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
import datetime as dt
import enum
import inspect
import types
import typing
import uuid
from typing import Any

from ..errors import WidgetError

#: Strings in these formats become these types (the schema says the format, the value parses or is refused).
STRING_FORMATS: dict[type, tuple[str, str]] = {
    dt.datetime: ("date-time", "2026-12-01T09:30:00+00:00"),
    dt.date: ("date", "2026-12-01"),
    dt.time: ("time", "09:30:00"),
    uuid.UUID: ("uuid", "123e4567-e89b-12d3-a456-426614174000"),
}

_SEQUENCES = {list: list, cabc.Sequence: list, cabc.MutableSequence: list, cabc.Iterable: list,
              cabc.Collection: list, set: set, cabc.Set: frozenset, cabc.MutableSet: set, frozenset: frozenset}
_MAPPINGS = (dict, cabc.Mapping, cabc.MutableMapping)
_hints_cache: dict[type, dict[str, Any]] = {}


class ArgumentError(WidgetError):
    """An argument that passed the schema but is not a value of the declared type (``where`` is its path)."""

    code = "invalid_arguments"

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


def _where(path: tuple[Any, ...]) -> str:
    return "/".join(str(p) for p in path) or "(root)"


def class_hints(tp: type) -> dict[str, Any]:
    """``typing.get_type_hints`` of a dataclass or TypedDict, once per class."""
    hints = _hints_cache.get(tp)
    if hints is None:
        hints = _hints_cache[tp] = typing.get_type_hints(tp, include_extras=True)
    return hints


def _fail(path: tuple[Any, ...], value: Any, what: str) -> ArgumentError:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return ArgumentError(_where(path), f"{shown} is not {what}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def from_json(tp: Any, value: Any, path: tuple[Any, ...] = ()) -> Any:
    """``value`` (JSON data) as a value of the annotation ``tp``; ArgumentError naming the path if it cannot be."""
    if tp is Any or tp is object or tp is inspect.Parameter.empty:
        return value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return from_json(args[0], value, path)
    if hasattr(tp, "__supertype__"):  # typing.NewType
        return from_json(tp.__supertype__, value, path)
    if tp is None or tp is type(None):
        if value is not None:
            raise _fail(path, value, "null")
        return None
    if origin is typing.Literal:
        for option in args:
            same_type = type(option) is type(value) or _is_number(option) and _is_number(value)
            if same_type and option == value:
                return option
        raise _fail(path, value, f"one of {list(args)!r}")
    if origin in (typing.Union, types.UnionType):
        return _from_union(args, value, path)
    if tp is bool:
        if not isinstance(value, bool):
            raise _fail(path, value, "a boolean")
        return value
    if tp is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)  # JSON has one number type: 2.0 is the integer 2
        if not isinstance(value, int) or isinstance(value, bool):
            raise _fail(path, value, "an integer")
        return value
    if tp is float:
        if not _is_number(value):
            raise _fail(path, value, "a number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise _fail(path, value, "a string")
        return value
    if inspect.isclass(tp) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise _fail(path, value, f"one of {[m.value for m in tp]!r} ({tp.__name__})") from None
    if tp in STRING_FORMATS:
        return _from_string_format(tp, value, path)
    if inspect.isclass(tp) and typing.is_typeddict(tp):
        if not isinstance(value, dict):
            raise _fail(path, value, "an object")
        hints = class_hints(tp)
        return {k: from_json(hints.get(k, Any), v, (*path, k)) for k, v in value.items()}
    if inspect.isclass(tp) and dataclasses.is_dataclass(tp):
        return _from_dataclass(tp, value, path)
    container = origin or tp
    if container is tuple:
        return _from_tuple(args, value, path)
    if container in _SEQUENCES:
        if not isinstance(value, list):
            raise _fail(path, value, "an array")
        item = args[0] if args else Any
        return _SEQUENCES[container](from_json(item, v, (*path, i)) for i, v in enumerate(value))
    if container in _MAPPINGS:
        if not isinstance(value, dict):
            raise _fail(path, value, "an object")
        key_tp, val_tp = args if len(args) == 2 else (Any, Any)
        return {_from_key(key_tp, k, path): from_json(val_tp, v, (*path, k)) for k, v in value.items()}
    if inspect.isclass(tp) and isinstance(value, tp):
        return value
    raise ArgumentError(_where(path), f"cannot convert to {getattr(tp, '__name__', tp)!s}")


def _from_union(args: tuple[Any, ...], value: Any, path: tuple[Any, ...]) -> Any:
    if value is None and type(None) in args:
        return None
    options = [a for a in args if a is not type(None)]
    # A value already of one of the plain types keeps it (``int | float`` leaves 3 an int); then left to right.
    for option in options:
        if option in (str, int, float, bool) and type(value) is option:
            return value
    first: ArgumentError | None = None
    for option in options:
        try:
            return from_json(option, value, path)
        except ArgumentError as exc:
            first = first or exc
    names = " | ".join(getattr(a, "__name__", str(a)) for a in args)
    raise ArgumentError(_where(path), f"matches none of {names}" + (f" ({first.message})" if first else ""))


def _from_string_format(tp: type, value: Any, path: tuple[Any, ...]) -> Any:
    fmt, example = STRING_FORMATS[tp]
    if isinstance(value, str):
        try:
            if tp is uuid.UUID:
                return uuid.UUID(value)
            text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) and tp is not dt.date else value
            return tp.fromisoformat(text)  # type: ignore[attr-defined]
        except ValueError:
            pass
    raise _fail(path, value, f"a {fmt} string (like {example})")


def _from_tuple(args: tuple[Any, ...], value: Any, path: tuple[Any, ...]) -> tuple[Any, ...]:
    if not isinstance(value, list):
        raise _fail(path, value, "an array")
    if not args:
        return tuple(value)
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(from_json(args[0], v, (*path, i)) for i, v in enumerate(value))
    if args == ((),):  # tuple[()]: the empty tuple
        args = ()
    if len(value) != len(args):
        raise ArgumentError(_where(path), f"needs exactly {len(args)} items, got {len(value)}")
    return tuple(from_json(a, v, (*path, i)) for i, (a, v) in enumerate(zip(args, value, strict=True)))


def _from_key(tp: Any, key: str, path: tuple[Any, ...]) -> Any:
    if tp is int:
        try:
            return int(key)
        except ValueError:
            raise _fail((*path, key), key, "an integer key") from None
    if inspect.isclass(tp) and issubclass(tp, enum.Enum):
        return from_json(tp, key, (*path, key))
    return key


def _from_dataclass(tp: type, value: Any, path: tuple[Any, ...]) -> Any:
    if not isinstance(value, dict):
        raise _fail(path, value, f"an object ({tp.__name__})")
    hints = class_hints(tp)
    fields = {f.name: f for f in dataclasses.fields(tp) if f.init}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise ArgumentError(_where(path), f"unexpected field(s) {', '.join(map(repr, unknown))} for {tp.__name__}")
    kwargs: dict[str, Any] = {}
    for name, raw in value.items():
        f = fields[name]
        if raw is None and f.default is None:
            kwargs[name] = None  # ``x: T = None``: null means the default
        else:
            kwargs[name] = from_json(hints.get(name, Any), raw, (*path, name))
    missing = [n for n, f in fields.items() if n not in kwargs
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ArgumentError(_where(path), f"{tp.__name__} needs {', '.join(map(repr, missing))}")
    try:
        return tp(**kwargs)
    except (TypeError, ValueError) as exc:  # a __post_init__ that refuses the values
        raise ArgumentError(_where(path), f"{tp.__name__}: {exc}") from None


def to_json(value: Any) -> Any:
    """A return value as JSON data: dataclasses become objects, Enums their values, tuples and sets arrays,
    dates ISO strings, UUIDs strings; anything else is left for the JSON check to accept or refuse."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value.value if isinstance(value, enum.Enum) else value
    if isinstance(value, enum.Enum):
        return to_json(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {_key_to_json(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [to_json(v) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, (dt.date, dt.time)):  # datetime is a date
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _key_to_json(key: Any) -> Any:
    key = to_json(key)
    return str(key) if isinstance(key, int) and not isinstance(key, bool) else key

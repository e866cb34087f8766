"""A plain Python function as a page function: its schema from the type hints, its description and parameter
descriptions from the docstring, the model's arguments converted to the declared types before it runs and
its return value converted back to JSON. Also how a failing handler is reported (model, console)."""

from __future__ import annotations

import functools
import inspect
import logging
import traceback
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, WidgetError
from .convert import ArgumentError, from_json, to_json
from .docstrings import parse_docstring
from .schema import parameters_from_signature

log = logging.getLogger("widget")

Handler = Callable[[dict[str, Any], dict[str, Any]], Any]


@dataclass
class BoundFunction:
    """What ``register_function`` needs for a decorated function."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler


class InvalidArguments(WidgetError):
    """Arguments that passed the schema but could not become the declared types."""

    code = "invalid_arguments"


def bind_function(func: Callable[..., Any], name: str | None = None, description: str | None = None) -> BoundFunction:
    """Schema, description and a ``handler(args, context)`` that converts, calls ``func`` and converts back."""
    if not callable(func):
        raise ConfigError(f"function(): {func!r} is not callable.")
    fname = name or func.__name__
    doc = parse_docstring(inspect.getdoc(func))
    parameters = parameters_from_signature(func, doc.params)
    hints = typing.get_type_hints(func, include_extras=True)  # parameters_from_signature proved it resolves
    signature = inspect.signature(func)

    def convert(args: dict[str, Any]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        for key, raw in args.items():
            param = signature.parameters.get(key)
            try:
                if param is None:
                    takes = ", ".join(signature.parameters) or "none"
                    raise ArgumentError(key, f"unexpected argument ({fname} takes {takes})")
                if raw is None and param.default is None:
                    kwargs[key] = None  # ``x: T = None``: null means the default
                else:
                    kwargs[key] = from_json(hints.get(key, Any), raw, (key,))
            except ArgumentError as exc:
                raise InvalidArguments(f"Invalid arguments for {fname!r}: {exc}") from None
        return kwargs

    async def call_async(args: dict[str, Any], context: dict[str, Any]) -> Any:
        return to_json(await func(**convert(args)))

    def call(args: dict[str, Any], context: dict[str, Any]) -> Any:
        result = func(**convert(args))
        if inspect.isawaitable(result):
            return _awaited(result)
        return to_json(result)

    handler: Handler = call_async if inspect.iscoroutinefunction(func) else call
    functools.update_wrapper(handler, func, assigned=(), updated=())  # only __wrapped__: tracebacks, introspection
    return BoundFunction(fname, description if description is not None else doc.description, parameters, handler)


async def _awaited(result: Any) -> Any:
    return to_json(await result)


def handler_error(name: str, exc: BaseException) -> str:
    """The error text the model gets for a handler that raised, and the console's record of it: a widget
    error (refused arguments, a JS handler's error) is its message; any other exception is ``Type: message``
    with its traceback in the console."""
    if isinstance(exc, WidgetError):
        text = str(exc) or type(exc).__name__
        log.warning("function %s failed: %s", name, text)
        return text
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    log.error("function %s raised:\n%s", name, "".join(traceback.format_exception(exc)).rstrip())
    return text

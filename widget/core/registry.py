"""Client-function storage and the descriptors the relay sees (seed 000 ``registerFunction``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import ConfigError
from ..protocol import KIND_FUNCTION

#: The name rule every model provider accepts for tool names.
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")

Handler = Callable[..., Any]


@dataclass
class FunctionDefinition:
    """One registered function: the descriptor fields plus its handler."""

    name: str
    handler: Handler
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    sensitive: bool = False
    kind: str = KIND_FUNCTION
    #: Extra descriptor fields (seed-002 tools and actions: ``handler``, ``confirm``, ``label``, ``title``).
    extra: dict[str, Any] = field(default_factory=dict)

    def descriptor(self) -> dict[str, Any]:
        """The JSON descriptor mirrored to ``/autopilot/functions/<name>`` (no handler)."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "kind": self.kind,
            "sensitive": self.sensitive,
            "source": "client",
            **self.extra,
        }


def validate_definition(
    name: Any, handler: Any, description: Any, parameters: Any, sensitive: Any
) -> None:
    """Raise ConfigError naming what is wrong with a function definition."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ConfigError(
            f"Function name {name!r} is invalid: use 1-64 letters, digits, '_' or '-', starting with a letter or '_'."
        )
    if not callable(handler):
        raise ConfigError(f"Function {name!r}: handler must be callable, got {type(handler).__name__}.")
    if description is not None and not isinstance(description, str):
        raise ConfigError(f"Function {name!r}: description must be a string.")
    if parameters is not None:
        if not isinstance(parameters, dict):
            raise ConfigError(f"Function {name!r}: parameters must be a JSON Schema object (a dict).")
        if parameters.get("type", "object") != "object":
            raise ConfigError(f"Function {name!r}: parameters must have type 'object'.")
    if not isinstance(sensitive, bool):
        raise ConfigError(f"Function {name!r}: sensitive must be True or False.")


class FunctionRegistry:
    """Name → definition, in registration order."""

    def __init__(self) -> None:
        self._functions: dict[str, FunctionDefinition] = {}

    def register(self, definition: FunctionDefinition) -> None:
        """Add or replace a function."""
        validate_definition(
            definition.name,
            definition.handler,
            definition.description,
            definition.parameters,
            definition.sensitive,
        )
        self._functions[definition.name] = definition

    def unregister(self, name: str) -> bool:
        """Remove ``name``; True when it existed."""
        return self._functions.pop(name, None) is not None

    def clear(self) -> None:
        """Remove every function."""
        self._functions.clear()

    def has(self, name: str) -> bool:
        """Whether ``name`` is registered."""
        return name in self._functions

    def get(self, name: str) -> FunctionDefinition | None:
        """The definition of ``name``, or None."""
        return self._functions.get(name)

    def descriptors(self) -> dict[str, dict[str, Any]]:
        """Descriptors keyed by name, as stored at ``/autopilot/functions``."""
        return {name: d.descriptor() for name, d in self._functions.items()}

    def __len__(self) -> int:
        return len(self._functions)

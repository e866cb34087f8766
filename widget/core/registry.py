"""Client-function storage and the descriptors the relay sees (``registerFunction``).

An explicit ``parameters`` schema (from Python or JS) is checked against the JSON Schema metaschema when it is
registered. In the browser jsonschema sits in a zip fetched on first use, and importing it is a long task of
the main thread: when it is not loaded yet the check waits (``unchecked``) until ``check_pending`` runs, after
the boot (the browser boot calls it once page Python ran and the socket joins; the JS API before it answers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..protocol import Kind, Source, is_tool_name
from .schema import DerivedSchema
from .validation import checker_ready, prefetch_checker, schema_problem

#: The name rule every model provider accepts for tool names.

Handler = Callable[..., Any]


@dataclass
class FunctionDefinition:
    """One registered function: the descriptor fields plus its handler."""

    name: str
    handler: Handler
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    sensitive: bool = False
    kind: str = Kind.FUNCTION
    #: Extra descriptor fields (tools and actions: ``handler``, ``confirm``, ``label``, ``title``).
    extra: dict[str, Any] = field(default_factory=dict)
    #: Published to in-browser agents when the page opts in to WebMCP (``widget.webmcp``); never sent to the relay.
    webmcp: bool = True

    def descriptor(self) -> dict[str, Any]:
        """The JSON descriptor mirrored to ``/autopilot/functions/<name>`` (no handler)."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "kind": self.kind,
            "sensitive": self.sensitive,
            "source": Source.CLIENT.value,
            **self.extra,
        }


def validate_definition(
    name: Any, handler: Any, description: Any, parameters: Any, sensitive: Any
) -> None:
    """Raise ConfigError naming what is wrong with a function definition."""
    if not is_tool_name(name):
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


def check_schema(name: str, parameters: Any) -> None:
    """ConfigError naming the path when ``parameters`` is not valid JSON Schema."""
    problem = schema_problem(parameters)
    if problem is not None:
        raise ConfigError(f"Function {name!r}: parameters is not a valid JSON Schema: {problem}")


class FunctionRegistry:
    """Name → definition, in registration order."""

    def __init__(self) -> None:
        self._functions: dict[str, FunctionDefinition] = {}
        #: Functions whose explicit schema waits for the metaschema check (see the module docstring).
        self.unchecked: dict[str, FunctionDefinition] = {}

    def register(self, definition: FunctionDefinition) -> None:
        """Add or replace a function; ConfigError for a bad definition or an explicit schema that is not JSON
        Schema (checked now, or by ``check_pending`` when the checker is not loaded yet)."""
        validate_definition(
            definition.name,
            definition.handler,
            definition.description,
            definition.parameters,
            definition.sensitive,
        )
        self.unchecked.pop(definition.name, None)
        if definition.kind == Kind.FUNCTION and not isinstance(definition.parameters, DerivedSchema) \
                and definition.parameters not in ({"type": "object", "properties": {}}, {}):
            if checker_ready():
                check_schema(definition.name, definition.parameters)
            else:
                self.unchecked[definition.name] = definition
        self._functions[definition.name] = definition

    async def check_pending(self, names: list[str] | None = None) -> list[tuple[str, ConfigError]]:
        """Fetch the checker and check the schemas registered before it was there (``names`` of them, or all).
        Returns the functions whose schema is not JSON Schema (still registered: the caller unregisters them,
        which syncs the removal)."""
        names = list(self.unchecked) if names is None else [n for n in names if n in self.unchecked]
        if not names:
            return []
        await prefetch_checker()
        failed = []
        for name in names:
            definition = self.unchecked.pop(name, None)
            if definition is None:  # checked meanwhile, replaced by a checked one, or removed
                continue
            try:
                check_schema(name, definition.parameters)
            except ConfigError as exc:
                if self._functions.get(name) is definition:
                    failed.append((name, exc))
        return failed

    def unregister(self, name: str) -> bool:
        """Remove ``name``; True when it existed."""
        self.unchecked.pop(name, None)
        return self._functions.pop(name, None) is not None

    def clear(self) -> None:
        """Remove every function."""
        self._functions.clear()
        self.unchecked.clear()

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

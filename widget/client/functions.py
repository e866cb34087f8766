"""What the page offers the model: the registry of functions, tools and actions (``Catalog``, shared by the
functions and the tools), and the page API that registers plain functions (``Functions``). Every change is
mirrored to the session's state (``/autopilot/functions``) and, when the page publishes them, to in-browser
agents (WebMCP)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..core.pyfunctions import bind_function
from ..core.registry import FunctionDefinition, FunctionRegistry, Handler
from ..core.state import StateSync, to_json_value
from ..core.tools import ToolSpec
from ..errors import ConfigError


class Publisher(Protocol):
    """Publishes the registry to in-browser agents (``widget.webmcp.WebMcpPublisher``)."""

    def sync(self) -> None:
        """Publish the registry as it is now."""
        ...

    def close(self) -> None:
        """Withdraw everything published."""
        ...


class Catalog:
    """The registry, the declared tools' specs and the page's tool handlers; ``changed`` mirrors them."""

    def __init__(self, state: StateSync, now: Callable[[], float], reschedule: Callable[[], None]) -> None:
        self._state = state
        self._now = now
        self._reschedule = reschedule
        self.registry = FunctionRegistry()
        #: The declared tools and actions by name (``tools(config)``).
        self.specs: dict[str, ToolSpec] = {}
        #: The page's handlers of tools and actions (``register_tool``), by name.
        self.handlers: dict[str, Callable[..., Any]] = {}
        #: Publishes the registry to in-browser agents (``widget.webmcp.enable``); None: not published.
        self.publisher: Publisher | None = None

    def changed(self) -> None:
        """The registry changed: the session sends it with the next state patch; agents see it at once."""
        self._state.set_functions(self.registry.descriptors(), self._now())
        self._reschedule()
        if self.publisher is not None:
            self.publisher.sync()


class Functions:
    """``register_function``, ``function``, ``unregister_function`` and the registry's readers."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog

    def register(
        self,
        name: str,
        handler: Handler,
        *,
        description: str = "",
        parameters: dict[str, Any] | None = None,
        sensitive: bool = False,
        webmcp: bool = True,
    ) -> None:
        """See ``AutopilotClient.register_function``."""
        self._catalog.specs.pop(name, None)  # a function registered under a tool's name replaces the tool
        definition = FunctionDefinition(
            name=name,
            handler=handler,
            description=description or "",
            parameters=parameters if parameters is not None else {"type": "object", "properties": {}},
            sensitive=sensitive,
            webmcp=webmcp,
        )
        try:
            to_json_value(definition.parameters, f"Parameters of {name!r}")
        except TypeError as exc:
            raise ConfigError(str(exc)) from None
        self._catalog.registry.register(definition)
        self._catalog.changed()

    def decorator(
        self, name: str | None, description: str | None, sensitive: bool, webmcp: bool
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """The decorator of ``AutopilotClient.function``: registers a plain Python function, returns it as is."""

        def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
            bound = bind_function(func, name, description)
            self.register(bound.name, bound.handler, description=bound.description,
                          parameters=bound.parameters, sensitive=sensitive, webmcp=webmcp)
            return func

        return decorate

    def unregister(self, name: str) -> bool:
        """See ``AutopilotClient.unregister_function``."""
        existed = self._catalog.registry.unregister(name)
        if existed:
            self._catalog.changed()
        return existed

    def clear(self) -> None:
        """See ``AutopilotClient.clear_functions``."""
        self._catalog.registry.clear()
        self._catalog.changed()

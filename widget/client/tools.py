"""Declarative tools and offered actions of the client: declared from a config, run by a page handler or by the
spec's ``run`` (fetch, href, event), and actions the model offers on an answer run when the reader presses them."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .. import protocol as P
from ..core.events import Emitter
from ..core.registry import FunctionDefinition
from ..core.session import ClientSession
from ..core.state import to_json_value
from ..core.templates import expand
from ..core.tools import ToolSpec, check_tool_arguments, parse_tools
from ..env import PageEnv, Signal
from ..errors import ConfigError, WidgetError
from .functions import Catalog

log = logging.getLogger("widget")


@dataclass(frozen=True)
class ToolsContext:
    """What tools and actions use."""

    core: ClientSession
    catalog: Catalog
    env: PageEnv | None
    events: Emitter
    confirm: Callable[[dict[str, Any]], Awaitable[P.ConfirmationDecision]]
    #: Emit to the relay and return the acknowledgement (``Wire.emit_checked``).
    emit_checked: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


class Tools:
    """``tools``, ``register_tool``, ``get_offered_actions`` and ``run_action`` of ``AutopilotClient``, and running
    a tool when the model calls one."""

    def __init__(self, ctx: ToolsContext) -> None:
        self._ctx = ctx
        self._specs = ctx.catalog.specs
        self._handlers = ctx.catalog.handlers
        self._registry = ctx.catalog.registry

    def spec(self, name: str) -> ToolSpec | None:
        """The declared tool or action ``name`` (None: none)."""
        return self._specs.get(name)

    def declare(self, config: dict[str, Any]) -> list[str]:
        """Declare tools and actions (``{name: {description, parameters, confirm, run, ...}}``);
        returns warnings (also logged). Checked at once: ConfigError says what is wrong."""
        specs, warnings = parse_tools(config)
        for spec in specs:
            existing = self._registry.get(spec.name)
            if existing is not None and spec.name not in self._specs:
                raise ConfigError(f"{spec.name!r} is already registered as a function; tools need their own names.")
        for spec in specs:
            self._specs[spec.name] = spec
            self._registry.register(
                FunctionDefinition(
                    name=spec.name,
                    handler=self._tool_placeholder,
                    description=spec.description,
                    parameters=spec.parameters,
                    kind=spec.kind,
                    extra=self._tool_extra(spec),
                )
            )
        for w in warnings:
            log.warning(w)
        self._ctx.catalog.changed()
        return warnings

    def register_handler(self, name: str, handler: Callable[..., Any]) -> Callable[[], None]:
        """A page handler for tool/action ``name`` (wins over the relay config and the declarative run);
        it gets the checked arguments and ``{question, page, signal}``. Returns a function that removes it."""
        if not callable(handler):
            raise ConfigError(f"register_tool({name!r}): handler must be callable.")
        self._handlers[name] = handler
        self._refresh_tool(name)

        def remove() -> None:
            if self._handlers.get(name) is handler:
                del self._handlers[name]
                self._refresh_tool(name)

        return remove

    def _refresh_tool(self, name: str) -> None:
        spec = self._specs.get(name)
        definition = self._registry.get(name)
        if spec is not None and definition is not None:
            definition.extra = self._tool_extra(spec)
            self._ctx.catalog.changed()

    def _tool_extra(self, spec: ToolSpec) -> dict[str, Any]:
        base = spec.descriptor(spec.name in self._handlers)
        own = ("name", "kind", "description", "parameters", "sensitive", "source")
        return {k: v for k, v in base.items() if k not in own}

    @staticmethod
    def _tool_placeholder(args: dict[str, Any], context: dict[str, Any]) -> Any:
        raise WidgetError("tools run through their spec, not a function handler")

    def _tool_context(self, signal: Signal) -> dict[str, Any]:
        messages = self._ctx.core.stream.messages
        question = next((m.get("content") for m in reversed(messages) if m.get("role") == P.Role.USER), None)
        page = self._ctx.env.page_info() if self._ctx.env is not None else None
        return {"question": question, "page": page, "signal": signal}

    async def execute(
        self, request: dict[str, Any], spec: ToolSpec, *, confirm: bool = False
    ) -> tuple[str, Any, str | None]:
        """Run a tool (or, with ``confirm``, an action once the reader allows it) with its arguments checked."""
        args, problem = check_tool_arguments(spec.parameters, request["arguments"])
        if problem is not None:
            return P.CallStatus.ERROR, None, f"Invalid arguments for {spec.name!r}: {problem}"
        if confirm and await self._ctx.confirm({**request, "arguments": args}) != P.ConfirmationDecision.ALLOW:
            return P.CallStatus.ERROR, None, P.MSG_SENSITIVE_DENIED
        signal = Signal()
        try:
            value = await asyncio.wait_for(self._run_tool(spec, args, signal), P.TOOL_CALL_TIMEOUT_S)
            return P.CallStatus.SUCCESS, to_json_value(value, f"The reply of {spec.name!r}"), None
        except TimeoutError:
            signal.abort("timeout")
            return P.CallStatus.ERROR, None, f"{spec.name!r} did not finish within {P.TOOL_CALL_TIMEOUT_S:g} s."
        except Exception as exc:  # noqa: BLE001 - handlers, templates and fetches may fail in many ways
            return P.CallStatus.ERROR, None, str(exc) or type(exc).__name__

    async def _run_tool(self, spec: ToolSpec, args: dict[str, Any], signal: Signal) -> Any:
        context = self._tool_context(signal)
        handler = self._handlers.get(spec.name)
        if handler is not None:
            value = handler(args, context)
            return await value if inspect.isawaitable(value) else value
        run = spec.run or {}
        env = self._ctx.env
        if env is None:
            raise WidgetError(f"{spec.name!r} has no page handler and no page to run it in.")
        if "fetch" in run:
            body = None
            if run.get("method") == "POST":
                body = {"tool": spec.name, "args": args, "context": {k: context[k] for k in ("question", "page")}}
            status, content_type, text = await env.fetch(run["method"], expand(run["fetch"], args), body, signal)
            if status >= 400:
                raise WidgetError(f"{spec.name!r} failed: HTTP {status}" + (f": {text[:200]}" if text else ""))
            if "json" in content_type:
                try:
                    return json.loads(text)
                except ValueError:
                    return text
            return text
        if "href" in run:
            return {"opened": expand(run["href"], args), "how": env.navigate(expand(run["href"], args))}
        if "event" in run:
            env.dispatch_event(
                run["event"],
                {"tool": spec.name, "args": args, "context": {k: context[k] for k in ("question", "page")}},
            )
            return None
        raise WidgetError(f"{spec.name!r} has no page handler and no run.")

    def offered_actions(self, message_id: str) -> list[dict[str, Any]]:
        """Live action offers on an assistant message, with the page's label, schema and state."""
        out = []
        for offer in self._ctx.core.offers.of(message_id):
            spec = self._specs.get(offer["name"])
            if spec is None or spec.kind != P.Kind.ACTION:
                continue
            out.append({
                **offer,
                "label": spec.label or spec.title or spec.name,
                "title": spec.title,
                "confirm": spec.confirm,
                "parameters": spec.parameters,
            })
        return out

    async def run_action(
        self, message_id: str, action_id: str, arguments: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Run an offered action the reader pressed (button) or sent (form, with the reader's ``arguments``).

        Returns ``{ok, outcome}``; the outcome is recorded with the relay for the model's next turn.
        ConfigError when the offer is unknown, already done, or the form's values fail the schema.
        """
        offer = self._ctx.core.offers.get(message_id, action_id)
        spec = self._specs.get(offer["name"]) if offer else None
        if offer is None or spec is None or spec.kind != P.Kind.ACTION:
            raise ConfigError("That action is not on offer (a restored conversation has no live actions).")
        if offer["status"] in (P.OfferStatus.DONE, P.OfferStatus.RUNNING):
            raise ConfigError(f"{spec.label or spec.name} is already {offer['status']}.")
        given = arguments if (spec.confirm == P.ActionConfirm.FORM and arguments is not None) else offer["arguments"]
        args, problem = check_tool_arguments(spec.parameters, given)
        if problem is not None:
            raise ConfigError(problem[0].upper() + problem[1:] + ".")
        offer["status"] = P.OfferStatus.RUNNING
        started = {"message_id": message_id, "action_id": action_id, "name": spec.name}
        self._ctx.events.emit(P.ClientEvent.ACTION_STARTED, started)
        signal = Signal()
        leave_to: str | None = None
        try:
            run = spec.run or {}
            if "href" in run and spec.name not in self._handlers:
                # Leaving the page would lose the outcome: record it first, navigate after the ack.
                leave_to = expand(run["href"], args)
                value: Any = None
            else:
                value = await asyncio.wait_for(self._run_tool(spec, args, signal), P.TOOL_CALL_TIMEOUT_S)
            ok = True
            if isinstance(value, str) and value.strip():
                outcome = value.strip()
            elif isinstance(value, dict) and isinstance(value.get("message"), str):
                outcome = value["message"]
            else:
                outcome = "Done."
        except TimeoutError:
            signal.abort("timeout")
            ok, outcome = False, f"No answer within {P.TOOL_CALL_TIMEOUT_S:g} s."
        except asyncio.CancelledError:
            signal.abort("cancelled")
            offer["status"] = P.OfferStatus.OFFERED  # nothing finished: the reader may press it again
            raise
        except Exception as exc:  # noqa: BLE001 - shown to the reader, who may retry
            ok, outcome = False, str(exc) or type(exc).__name__
        offer["status"] = P.OfferStatus.DONE if ok else P.OfferStatus.FAILED
        offer["outcome"] = outcome
        result = {"ok": ok, "outcome": outcome, "message_id": message_id, "action_id": action_id, "name": spec.name}
        self._ctx.events.emit(P.ClientEvent.ACTION_OUTCOME, result)
        payload = {
            "message_id": message_id, "action_id": action_id, "name": spec.name, "arguments": args,
            "ok": ok, "outcome": outcome, "idempotency_key": self._ctx.core.next_key("o"),
        }
        try:
            await self._ctx.emit_checked(P.Event.ACTION_OUTCOME, payload)
        except WidgetError as exc:
            log.warning("action outcome not recorded by the relay: %s", exc)
        if leave_to is not None and self._ctx.env is not None:
            self._ctx.env.navigate(leave_to)
        return {"ok": ok, "outcome": outcome}


"""Running a page function call: the argument check, the reader's confirmation of a sensitive function, the
handler, and leaving the page after the response (``Navigate``).

What happens to the result - withholding, sending, resending, the history - is decided by the sans-I/O session
(``widget.core.session``); this module only does what needs page code and awaiting.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .. import protocol as P
from ..core.effects import CallToRun
from ..core.mcp_names import is_mcp_name
from ..core.pyfunctions import handler_error
from ..core.registry import FunctionRegistry
from ..core.session import ClientSession, Effect
from ..core.state import to_json_value
from ..core.tools import ToolSpec
from ..core.validation import needs_validator, prefetch_checker, validate_arguments
from ..env import PageEnv
from ..errors import ConfigError
from ..protocol import ConfirmationDecision

log = logging.getLogger("widget")

#: What running a call gives: status, the JSON result (or a ``Navigate``), the error text.
Outcome = tuple[str, Any, "str | None"]


class Navigate:
    """Return this from a handler that leaves the page: the response goes out, the relay acknowledges it, then the
    page navigates to ``url`` - so a multi-page site never loses the call's result."""

    def __init__(self, url: str, result: Any = None, *, ack_timeout_s: float = 10.0) -> None:
        if not isinstance(url, str) or not url:
            raise ConfigError("Navigate needs a URL.")
        self.url = url
        self.result = result if result is not None else f"Navigating to {url}."
        self.ack_timeout_s = ack_timeout_s


#: The limit of a call answered on the page, by the entry's kind, as the relay's calls have it: a function's 30 s
#: include the reader's confirmation; a tool's 10 s are its own (``Tools.execute``); an action waits for the reader
#: as long as a sensitive function may, then runs within the tools' 10 s.
LOCAL_LIMITS_S: dict[str, float | None] = {P.Kind.FUNCTION: P.FUNCTION_CALL_TIMEOUT_S, P.Kind.TOOL: None,
                                           P.Kind.ACTION: P.FUNCTION_CALL_TIMEOUT_S}


def unwrap_navigate(
    name: str, status: str, result: Any, error: str | None
) -> tuple[str, Any, str | None, Navigate | None]:
    """A handler's outcome with a ``Navigate`` taken apart: ``(status, JSON result, error, the navigation or None)``
    (a navigation's result that is not JSON turns the call into an error)."""
    if status != P.CallStatus.SUCCESS or not isinstance(result, Navigate):
        return status, result, error, None
    try:
        return status, to_json_value(result.result, f"The result of {name!r}"), error, result
    except TypeError as exc:
        return P.CallStatus.ERROR, None, str(exc), result


class ToolRunner(Protocol):
    """What running a call needs of the tools: their specs and their execution (``widget.client.tools``)."""

    def spec(self, name: str) -> ToolSpec | None:
        """The declared tool or action ``name`` (None: none)."""
        ...

    async def execute(self, request: dict[str, Any], spec: ToolSpec, *, confirm: bool = False) -> Outcome:
        """Run a tool (with ``confirm``: an action, once the reader allows it)."""
        ...


@dataclass(frozen=True)
class CallsContext:
    """What running a call uses."""

    core: ClientSession
    registry: FunctionRegistry
    env: PageEnv | None
    tools: ToolRunner
    confirm: Callable[[dict[str, Any]], Awaitable[ConfirmationDecision]]
    #: The call is over here (``Confirmation.forget``).
    forget_ended: Callable[[str], None]
    apply: Callable[[list[Effect]], None]
    now: Callable[[], float]
    #: Wall-clock seconds (the records' timestamps).
    wall: Callable[[], float]


class Calls:
    """The calls the relay (or an agent in the page) makes to the page's functions, tools and actions."""

    def __init__(self, ctx: CallsContext) -> None:
        self._ctx = ctx
        #: Calls whose page is left once the relay took their response (resolved by ``functionResponseSent``).
        self._delivered: dict[str, asyncio.Future[None]] = {}

    async def run(self, call: CallToRun) -> None:
        """Run a call the relay sent (the session's ``RunCall``) and settle it with the session."""
        ctx = self._ctx
        call_id, name, args = call["id"], call["name"], call["arguments"]
        status, result, error, navigate = await self._call_through(call_id, name, args, self._execute)
        ctx.apply(ctx.core.call_settled(call_id, status, result, error, ctx.now()))
        if navigate is not None:
            await self._navigate_after_ack(call_id, navigate)

    def delivered(self, call_id: str) -> None:
        """The relay took the call's response (``functionResponseSent``): a navigation waiting for it may go."""
        fut = self._delivered.get(call_id)
        if fut is not None and not fut.done():
            fut.set_result(None)

    async def answer_locally(self, call_id: str, name: str, args: Any) -> tuple[str, Any, str | None]:
        """See ``AutopilotClient.answer_call_locally``."""
        ctx = self._ctx
        definition = ctx.registry.get(name)
        limit = LOCAL_LIMITS_S.get(definition.kind if definition else P.Kind.FUNCTION, P.FUNCTION_CALL_TIMEOUT_S)

        async def execute(request: dict[str, Any]) -> Outcome:
            spec = ctx.tools.spec(name)
            if definition is not None and definition.kind == P.Kind.ACTION and spec is not None:
                run = ctx.tools.execute(request, spec, confirm=True)
            else:
                run = self._execute(request)
            try:
                return await asyncio.wait_for(run, limit)
            except TimeoutError:
                return P.CallStatus.ERROR, None, f"The page did not answer within {limit or 0:g} s."

        status, result, error, navigate = await self._call_through(call_id, name, args, execute)
        ctx.apply(ctx.core.local_call_settled(call_id, status, result, error, ctx.now()))
        if navigate is not None and ctx.env is not None:
            env, url = ctx.env, navigate.url
            asyncio.get_event_loop().call_later(0.05, lambda: env.navigate(url))  # after the answer is handed out
        return status, result, error

    async def _call_through(
        self, call_id: str, name: str, args: Any, execute: Callable[[dict[str, Any]], Awaitable[Outcome]]
    ) -> tuple[str, Any, str | None, Navigate | None]:
        """One call's record, argument check and ``execute``; its outcome with a ``Navigate`` taken apart."""
        ctx = self._ctx
        request, effects = ctx.core.call_received(call_id, name, args, ctx.wall() * 1000)
        ctx.apply(effects)
        try:
            # Checking the arguments may first load the schema validator (a lazily fetched module in the
            # browser): that is the widget's cost, not the handler's, so the clocks start once the call can run.
            refused = await self._check_call(request)
            ctx.core.call_ready(call_id, ctx.now(), ctx.wall() * 1000)
            status, result, error = refused if refused is not None else await execute(request)
        except asyncio.CancelledError:
            ctx.core.call_forgotten(call_id)
            raise
        finally:
            ctx.forget_ended(call_id)
        return unwrap_navigate(name, status, result, error)

    async def _navigate_after_ack(self, call_id: str, navigate: Navigate) -> None:
        # Until the relay has the response, leaving the page would lose it: wait for it (a resend after a
        # reconnect included) up to the limit, then go anyway - the reader asked to go.
        if call_id in self._ctx.core.outbox:
            delivered = self._delivered.setdefault(call_id, asyncio.get_event_loop().create_future())
            try:
                await asyncio.wait_for(asyncio.shield(delivered), navigate.ack_timeout_s)
            except TimeoutError:
                log.warning("navigating before the relay acknowledged call %s", call_id)
            finally:
                self._delivered.pop(call_id, None)
        if self._ctx.env is None:
            log.error("cannot navigate to %s: no page environment", navigate.url)
            return
        self._ctx.env.navigate(navigate.url)

    async def _check_call(self, request: dict[str, Any]) -> Outcome | None:
        """Why the call cannot run (the error response), or None when it can."""
        name = request["name"]
        definition = self._ctx.registry.get(name)
        if definition is None and is_mcp_name(name):
            return None  # the relay asks the reader to confirm a sensitive MCP server tool
        if definition is None:
            return P.CallStatus.ERROR, None, f"Unknown function: {name!r} is not registered on this page."
        if definition.kind != P.Kind.FUNCTION:
            return None  # tools check their own arguments; actions are refused by _execute
        if needs_validator(definition.parameters):
            await prefetch_checker()
        problem = validate_arguments(definition.parameters, request["arguments"])
        if problem is not None:
            return P.CallStatus.ERROR, None, f"Invalid arguments for {name!r}: {problem}"
        return None

    async def _execute(self, request: dict[str, Any]) -> Outcome:
        ctx = self._ctx
        name = request["name"]
        definition = ctx.registry.get(name)
        if definition is None and is_mcp_name(name):  # the relay runs it once the reader allows it
            allowed = await ctx.confirm(request) == ConfirmationDecision.ALLOW
            if allowed:
                return P.CallStatus.SUCCESS, ConfirmationDecision.ALLOW.value, None
            return P.CallStatus.ERROR, None, P.MSG_SENSITIVE_DENIED
        if definition is None:
            return P.CallStatus.ERROR, None, f"Unknown function: {name!r} is not registered on this page."
        spec = ctx.tools.spec(name)
        if definition.kind == P.Kind.TOOL and spec is not None:
            return await ctx.tools.execute(request, spec)
        if definition.kind == P.Kind.ACTION:
            return P.CallStatus.ERROR, None, f"{name!r} is an action: the model may offer it, never call it."
        args = request["arguments"]
        if definition.sensitive:
            if await ctx.confirm(request) != ConfirmationDecision.ALLOW:
                return P.CallStatus.ERROR, None, P.MSG_SENSITIVE_DENIED
        try:
            value = definition.handler(args, {"id": request["id"], "name": name, "timestamp": request["timestamp"]})
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:  # noqa: BLE001 - a page handler may raise anything
            return P.CallStatus.ERROR, None, handler_error(name, exc)
        if isinstance(value, Navigate):
            return P.CallStatus.SUCCESS, value, None
        try:
            return P.CallStatus.SUCCESS, to_json_value(value, f"The result of {name!r}"), None
        except TypeError as exc:
            return P.CallStatus.ERROR, None, str(exc)

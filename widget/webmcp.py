"""WebMCP: the page's functions, function tools and actions published to in-browser agents.

When the page opts in (``data-webmcp`` / ``AutopilotConfig.webmcp``) and the browser has
``document.modelContext`` (Chromium behind ``--enable-features=WebMCP`` today), every registered entry -
Python or JS, one registry - is registered with ``document.modelContext.registerTool`` and kept in step with
the registry: a function registered with ``webmcp=False`` stays private; a change re-registers the entry;
``unregister`` and ``destroy()`` remove it (each entry is registered with an ``AbortSignal``).

An agent's call runs through the client's own call path, as a call from the relay does: the same argument
check, the same handler, the reader's confirmation in the bar for a sensitive function or an action (inside
the agent's ``requestUserInteraction`` when the browser offers it), the call's record in
``get_function_call_history()`` with its timings, and the ``function*`` events; it is limited to 30 s
(functions) or 10 s (tools and actions). Its response goes back to the agent only, never to the relay.
Where the API is absent, nothing is published and nothing else changes.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from typing import TYPE_CHECKING, Any

from . import protocol as P
from .core.registry import FunctionDefinition

if TYPE_CHECKING:
    from .client import AutopilotClient

log = logging.getLogger("widget")

_ids = itertools.count(1)


def model_context() -> Any:
    """The page's ``document.modelContext``, or None (no browser, or no WebMCP in this browser)."""
    try:
        import js
    except ImportError:
        return None
    mc = getattr(js.document, "modelContext", None)
    return mc if mc is not None and hasattr(mc, "registerTool") else None


def tool_descriptor(d: FunctionDefinition) -> dict[str, Any]:
    """What an agent sees of an entry: its name, description and input schema, a tool marked read-only."""
    desc = d.description or d.name
    if d.kind == P.Kind.ACTION:
        desc += " (an action: the reader confirms it on the page)"
    elif d.sensitive:
        desc += " (the reader confirms each call on the page)"
    schema = d.parameters or {"type": "object", "properties": {}}
    out: dict[str, Any] = {"name": d.name, "description": desc, "inputSchema": schema}
    if d.kind == P.Kind.TOOL:
        out["annotations"] = {"readOnlyHint": True}
    return out


def enable(client: AutopilotClient) -> bool:
    """Publish ``client``'s registry with WebMCP from now on; False when the browser has no WebMCP."""
    if client.webmcp is not None:
        return True
    context = model_context()
    if context is None:
        return False
    client.webmcp = WebMcpPublisher(client, context)
    client.webmcp.sync()
    return True


class WebMcpPublisher:
    """Keeps ``document.modelContext`` in step with one client's registry (``AutopilotClient.webmcp``)."""

    def __init__(self, client: AutopilotClient, context: Any) -> None:
        self.client = client
        self.context = context
        #: name -> (descriptor JSON, its AbortController, the proxies to destroy on removal)
        self.published: dict[str, tuple[str, Any, list[Any]]] = {}
        self.closed = False

    def wanted(self) -> dict[str, dict[str, Any]]:
        """The descriptors that should be published now."""
        return {d.name: tool_descriptor(d) for d in self._definitions() if getattr(d, "webmcp", True)}

    def _definitions(self) -> list[FunctionDefinition]:
        reg = self.client.registry
        return [d for d in (reg.get(n) for n in reg.descriptors()) if d is not None and n_ok(d)]

    def sync(self) -> None:
        """Register what is new or changed, remove what is gone (called on every registry change)."""
        if self.closed:
            return
        wanted = self.wanted()
        for name in [n for n in self.published if n not in wanted]:
            self._remove(name)
        for name, desc in wanted.items():
            text = json.dumps(desc, sort_keys=True)
            old = self.published.get(name)
            if old is not None and old[0] == text:
                continue
            if old is not None:
                self._remove(name)
            self._register(name, desc, text)

    def _register(self, name: str, desc: dict[str, Any], text: str) -> None:
        import js
        from pyodide.ffi import create_proxy, to_js

        def execute(input_: Any, agent: Any = None) -> Any:
            args = input_.to_py() if hasattr(input_, "to_py") else input_
            task = asyncio.ensure_future(self.run(name, {} if args is None else args, agent))
            return _promise_of(task)

        proxy = create_proxy(execute)
        refused = create_proxy(lambda err: log.warning("WebMCP: %r not published: %s", name, err))
        controller = js.AbortController.new()
        obj = to_js({**desc, "execute": proxy}, dict_converter=js.Object.fromEntries)
        options = to_js({"signal": controller.signal}, dict_converter=js.Object.fromEntries)
        try:
            promise = self.context.registerTool(obj, options)
        except Exception as exc:  # noqa: BLE001 - the browser refused it: say so, keep the widget working
            log.warning("WebMCP: %r not published: %s", name, exc)
            proxy.destroy()
            refused.destroy()
            return
        self.published[name] = (text, controller, [proxy, refused])
        if hasattr(promise, "then"):
            promise.then(None, refused)

    def _remove(self, name: str) -> None:
        entry = self.published.pop(name, None)
        if entry is None:
            return
        _, controller, proxies = entry
        try:
            controller.abort()
        finally:
            for proxy in proxies:
                proxy.destroy()

    def close(self) -> None:
        """Remove every published entry (``destroy()``); later changes publish nothing."""
        self.closed = True
        for name in list(self.published):
            self._remove(name)

    # ------------------------------------------------------------------ an agent's call
    async def run(self, name: str, args: Any, agent: Any = None) -> Any:
        """Run an agent's call through the client's call path; the WebMCP result object (``isError`` on failure)."""
        import js
        from pyodide.ffi import to_js

        definition = self.client.registry.get(name)
        needs_reader = definition is not None and (definition.sensitive or definition.kind == P.Kind.ACTION)
        ask = getattr(agent, "requestUserInteraction", None) if agent is not None else None
        if needs_reader and callable(ask):
            from pyodide.ffi import create_once_callable

            box: dict[str, Any] = {}

            async def inside() -> None:
                box["out"] = await call_here(self.client, name, args)

            await ask(create_once_callable(lambda: asyncio.ensure_future(inside())))
            status, result, error = box.get("out") or (P.CallStatus.ERROR, None, P.MSG_SENSITIVE_DENIED)
        else:
            status, result, error = await call_here(self.client, name, args)
        if status == P.CallStatus.SUCCESS:
            text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
            out: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
        else:
            out = {"content": [{"type": "text", "text": error or "The function failed."}], "isError": True}
        return to_js(out, dict_converter=js.Object.fromEntries)


def _promise_of(task: asyncio.Future[Any]) -> Any:
    """A real JS Promise settled by ``task`` (the browser is handed a Promise, not a Python awaitable's proxy)."""
    import js
    from pyodide.ffi import create_once_callable

    def executor(resolve: Any, reject: Any) -> None:
        def settle(t: asyncio.Future[Any]) -> None:
            if t.cancelled():
                reject(js.Error.new("The call was cancelled."))
            elif t.exception() is not None:
                reject(js.Error.new(f"{type(t.exception()).__name__}: {t.exception()}"))
            else:
                resolve(t.result())

        task.add_done_callback(settle)

    return js.Promise.new(create_once_callable(executor))


def n_ok(d: FunctionDefinition) -> bool:
    """Whether an entry can be published at all (functions, tools and actions; no placeholder kinds)."""
    return d.kind in (P.Kind.FUNCTION, P.Kind.TOOL, P.Kind.ACTION)


async def call_here(client: AutopilotClient, name: str, args: Any) -> tuple[str, Any, str | None]:
    """Run one call that came from the page itself (not the relay) through the client's call path: its record,
    events, argument check, confirmation, handler and limit. ``(status, JSON result, error)``."""
    return await client.answer_call_locally(f"webmcp-{next(_ids)}", name, args)

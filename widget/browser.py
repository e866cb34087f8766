"""Browser boot: the loader calls ``boot`` once Pyodide and the bundle are in place (Pyodide only)."""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import linecache
import logging
import re
import sys
import traceback
import types
from collections.abc import Awaitable, Iterator, MutableMapping
from typing import Any, TypeVar

from .client import AutopilotClient
from .errors import WidgetError
from .page import set_client
from .protocol import ClientEvent
from .store import Store
from .transports.browser import BrowserTransport

log = logging.getLogger("widget")

T = TypeVar("T")

#: The module page Python runs in: every inline block and ``data-python`` file shares its globals. It is in
#: ``sys.modules`` like an imported .py file, so what looks a class or function up by its module works
#: (dataclasses, ``typing.get_type_hints`` with forward references, pickle, ``inspect.getsource``).
PAGE_MODULE_NAME = "__page__"
PAGE_MODULE = types.ModuleType(PAGE_MODULE_NAME, "Page Python (the page's autopilot-python blocks and files).")
sys.modules[PAGE_MODULE_NAME] = PAGE_MODULE
PAGE_NAMESPACE: dict[str, Any] = PAGE_MODULE.__dict__


class LocalStorage(MutableMapping[str, str]):
    """``window.localStorage`` as a mapping (falls back to memory when storage is blocked)."""

    def __init__(self) -> None:
        import js

        try:
            self._ls = js.window.localStorage
            self._ls.getItem("autopilot:probe")
        except Exception:  # noqa: BLE001 - storage disabled (privacy mode, sandboxed iframe)
            self._ls = None
        self._mem: dict[str, str] = {}

    def __getitem__(self, key: str) -> str:
        if self._ls is None:
            return self._mem[key]
        value = self._ls.getItem(key)
        # A missing key is JS null, which Pyodide hands over as ``jsnull``, not None: stored values are str.
        if not isinstance(value, str):
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value: str) -> None:
        if self._ls is None:
            self._mem[key] = value
        else:
            self._ls.setItem(key, value)

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        if self._ls is None:
            del self._mem[key]
        else:
            self._ls.removeItem(key)

    def __contains__(self, key: object) -> bool:
        try:
            self[key]  # type: ignore[index]
            return True
        except KeyError:
            return False

    def __iter__(self) -> Iterator[str]:
        if self._ls is None:
            return iter(list(self._mem))
        return iter([str(self._ls.key(i)) for i in range(int(self._ls.length))])

    def __len__(self) -> int:
        return len(self._mem) if self._ls is None else int(self._ls.length)


class ConsoleHandler(logging.Handler):
    """Widget log records to the browser console."""

    def emit(self, record: logging.LogRecord) -> None:
        import js

        text = "[autopilot] " + self.format(record)
        if record.levelno >= logging.ERROR:
            js.console.error(text)
        elif record.levelno >= logging.WARNING:
            js.console.warn(text)
        else:
            js.console.debug(text)


def page_error(source: str, exc: BaseException) -> dict[str, Any]:
    """The ``pageError`` payload for page Python that raised: where (the block or file and its line), the
    one-line ``message`` the bar shows the page's author, and the whole traceback."""
    line = getattr(exc, "lineno", None) if isinstance(exc, SyntaxError) and exc.filename == source else None
    if line is None:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == source]
        line = frames[-1].lineno if frames else None
    where = f"{source}, line {line}" if line else source
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    tb = "".join(traceback.format_exception(exc))
    return {"source": source, "line": line, "message": f"page Python failed: {where}: {what}", "traceback": tb}


def page_error_text(source: str, tb: str) -> dict[str, Any]:
    """``page_error`` for an exception known only by its traceback text (a PyScript block's)."""
    lines = [ln for ln in tb.strip().splitlines() if ln.strip()]
    what = lines[-1].strip() if lines else "error"
    # PyScript runs a block as "<exec>"; its last frame there is the block's failing line.
    numbers = [m.group(1) for m in (_EXEC_LINE.search(ln) for ln in lines) if m]
    line = int(numbers[-1]) if numbers else None
    where = f"{source}, line {line}" if line else source
    return {"source": source, "line": line, "message": f"page Python failed: {where}: {what}", "traceback": tb}


_EXEC_LINE = re.compile(r'File "<exec>", line (\d+)')


def report_page_error(client: AutopilotClient, payload: dict[str, Any]) -> None:
    """Page Python that failed: its traceback to the console, its one line to the bar (``pageError``)."""
    log.error("%s\n%s", payload["message"], payload.get("traceback") or "")
    client.events.emit(ClientEvent.PAGE_ERROR, payload)


async def run_page_python(sources: list[tuple[str, str]], client: AutopilotClient) -> list[str]:
    """Run each page block in the page module, in order; one that raises is reported and the next one runs."""
    failures = []
    for source, name in sources:
        # The source in linecache: tracebacks and inspect.getsource show the page's lines.
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
        try:
            code = compile(source, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(code, PAGE_NAMESPACE)  # noqa: S307 - the page author's own code, by design
            if asyncio.iscoroutine(result):
                await result
        except Exception as exc:  # noqa: BLE001 - page code may raise anything
            payload = page_error(name, exc)
            failures.append(payload["traceback"])
            report_page_error(client, payload)
    return failures


async def check_schemas_later(client: AutopilotClient, names: list[str]) -> None:
    """The metaschema check of page Python's explicit schemas that waited for jsonschema (kept off the boot
    path: its import is a long main-thread task): a function whose schema is not JSON Schema is removed and
    the bar and console say why."""
    for fname, exc in await client.registry.check_pending(names):
        client.unregister_function(fname)
        report_page_error(client, {"source": fname, "line": None, "traceback": "",
                                   "message": f"page Python failed: {exc}"})


#: What the first answer imports, in an order where each import runs few modules (each one its own task).
_FIRST_ANSWER_MODULES = (
    "xml.etree.ElementTree", "html.parser", "markdown.util", "markdown.htmlparser", "markdown.serializers",
    "markdown.inlinepatterns", "markdown.treeprocessors", "markdown.blockparser", "markdown.blockprocessors",
    "markdown.preprocessors", "markdown.postprocessors", "markdown.core", "markdown",
    "markdown.extensions.codehilite", "markdown.extensions.fenced_code", "markdown.extensions.tables",
)


async def warm_first_answer() -> None:
    """Import and build what rendering the first answer needs, one module per event-loop turn, while the socket
    joins and the reader types: otherwise it is one long main-thread task when the answer arrives. (A boot that
    restored the pre-warm worker's snapshot has it all already.)"""
    import importlib

    for name in _FIRST_ANSWER_MODULES:
        if name not in sys.modules:
            try:
                importlib.import_module(name)
            except ImportError:  # rendering then reports it where it happens
                return
            await asyncio.sleep(0.002)  # a real task boundary (a zero delay may run in the same task)
    from .core.markdown import render_markdown

    render_markdown("*a* `b`")


class Tasks:
    """The tasks the boot and the JS API start, kept until they finish and cancelled on teardown.

    asyncio holds only weak references to tasks, so a task nobody keeps may be collected while it waits; and a
    task that outlives the widget (a retry, a schema check, an op waiting for the relay) would act on a destroyed
    bar and store.
    """

    def __init__(self) -> None:
        self._running: set[asyncio.Future[Any]] = set()

    def start(self, aw: Awaitable[T], *, report: bool = True) -> asyncio.Future[T]:
        """Run ``aw`` as a kept task; with ``report`` a failure is logged (else the caller reports it)."""
        task = asyncio.ensure_future(aw)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        if report:
            task.add_done_callback(_log_failure)
        return task

    def cancel_all(self) -> None:
        """Cancel every task still running (teardown)."""
        for task in list(self._running):
            task.cancel()


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("widget task failed: %r", task.exception())


async def boot(config_json: str, page_sources: Any, loader: Any) -> Any:
    """Create the client, mount the bar, run page Python, then connect (in that order: the first state sync carries
    page Python's functions)."""
    import autopilot_bridge  # type: ignore[import-not-found]  # registered by the loader

    handler = ConsoleHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    config = json.loads(config_json)
    from .browser_env import BrowserEnv
    from .ui.labels import LABELS

    client = AutopilotClient(BrowserTransport(autopilot_bridge), storage=LocalStorage(), env=BrowserEnv())
    if config.get("webmcp"):
        from .webmcp import enable

        if not enable(client):
            log.info("webmcp is on but this browser has no document.modelContext: nothing is published")
    if config.get("tools"):
        try:
            client.tools(config["tools"])
        except Exception as exc:  # noqa: BLE001 - a bad tools config is the page author's to fix: say it loudly
            log.error("tools config refused: %s", exc)
    labels = config.get("labels") or {}
    unknown = sorted(set(labels) - set(LABELS))
    if unknown:
        log.warning("unknown label(s) %s are ignored (docs/embedding.md lists the keys)", ", ".join(map(repr, unknown)))
    labels = {k: str(v) for k, v in labels.items() if k in LABELS}
    set_client(client)
    store = Store(client)
    store.expect_connect()  # the first connect starts below, after the mount: no "Not connected" before it
    css = await loader.skinCss() if hasattr(loader, "skinCss") else ""
    from .ui.bar import enable_bar

    connect_after = getattr(loader, "connectAfter", None)
    tasks = Tasks()

    async def connect(join_after: Any = None) -> None:
        try:
            if config.get("conversationUrl"):
                await client.connect(config["conversationUrl"], relay_url=config.get("relay"), app_id=config.get("app"),
                                     join_after=join_after)
            else:
                await client.connect(relay_url=config["relay"], app_id=config["app"], join_after=join_after)
        except Exception as exc:  # noqa: BLE001 - shown in the bar with Retry; never a dead widget
            log.error("could not connect: %s", exc)

    page_done: asyncio.Future[None] = asyncio.get_event_loop().create_future()

    async def first_connect() -> None:
        if connect_after is not None:  # PyScript pages: after the page's own blocks ran
            await connect_after
        # The conversation is read and the socket opened while page Python runs; the join (and so the first
        # state sync) waits for page Python, so its functions are in the initial patch.
        await connect(page_done)

    def retry() -> None:
        tasks.start(connect())

    bar = enable_bar(store, loader=loader, css=str(css), title=config.get("title") or labels.get("title") or None,
                     on_retry=retry, position=config.get("position"), labels=labels)
    if config.get("theme") in ("light", "dark"):
        bar.host.setAttribute("data-theme", config["theme"])
    import js

    js.performance.mark("autopilot:mounted")
    client.on(ClientEvent.READY, lambda p: js.performance.mark("autopilot:joined"))
    if loader.wantOpen():
        bar.open()
    page = [(str(src), str(name)) for src, name in page_sources]
    # Connecting is not part of the boot: the bar is usable (and shows progress) meanwhile.
    connecting = tasks.start(first_connect())
    try:
        await run_page_python(page, client)
    finally:
        page_done.set_result(None)
    if client.registry.unchecked:
        tasks.start(check_schemas_later(client, list(client.registry.unchecked)))
    tasks.start(warm_first_answer())
    handle = _Handle(client, store, bar, getattr(loader, "api", None), tasks)
    handle.connecting = connecting
    return handle


def _js_error_text(exc: BaseException) -> str:
    """A JS error as its message (``Error: boom`` -> ``boom``)."""
    text = str(exc).strip()
    for prefix in ("Error: ", "TypeError: ", "RangeError: "):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


class _Handle:
    """What the loader keeps: the client, the store, the bar, and the JS API's entry point ``api``.

    ``window.Autopilot`` (static/autopilot.js) calls ``api(op, payload_json, settle)``; each op is applied at
    once, in call order, and ``settle`` gets ``{"ok": true, "value": ...}`` or ``{"ok": false, "error": ...}``
    as JSON text when it is done. JS handlers are called through ``host`` (the loader's ``jsHost``):
    ``invoke(kind, name, call_id, args_json, context_json)`` returns a Promise of JSON text.
    """

    #: How long ``send`` / ``newConversation`` from JS wait for the relay before giving up.
    CONNECT_WAIT_S = 30.0

    def __init__(self, client: AutopilotClient, store: Store, bar: Any, host: Any = None,
                 tasks: Tasks | None = None) -> None:
        self.client = client
        self.store = store
        self.bar = bar
        self.host = host
        self.connecting: asyncio.Future[None] | None = None
        #: The boot's tasks and the JS API's operations in flight (cancelled on teardown).
        self.tasks = tasks if tasks is not None else Tasks()
        #: The disconnect teardown started (None before): a Python caller may await it.
        self.disconnected: asyncio.Future[None] | None = None
        self._subscriptions: dict[str, Any] = {}
        self._tool_removers: dict[str, Any] = {}
        self._call_ids = 0
        self._torn_down = False

    # -- the JS API --------------------------------------------------------------------------------
    def api(self, op: str, payload_json: str, settle: Any) -> None:
        """One call of ``window.Autopilot`` (see the class docstring)."""

        def reply(ok: bool, value: Any = None, error: str = "") -> None:
            try:
                text = json.dumps({"ok": True, "value": value} if ok else {"ok": False, "error": error}, default=str)
            except (TypeError, ValueError) as exc:
                text = json.dumps({"ok": False, "error": f"{op}: the result is not JSON data ({exc})"})
            settle(text)

        method = getattr(self, "_op_" + str(op), None)
        if method is None or self._torn_down and op != "destroy":
            reply(False, error=f"{op}: " + ("the widget was destroyed" if method else "no such operation"))
            return
        try:
            result = method(json.loads(payload_json))
        except Exception as exc:  # noqa: BLE001 - reported to the JS caller as a rejected promise
            reply(False, error=str(exc) or type(exc).__name__)
            return
        if not inspect.isawaitable(result):
            reply(True, result)
            return

        def done(task: asyncio.Future[Any]) -> None:
            if task.cancelled():
                reply(False, error=f"{op}: cancelled")
            elif task.exception() is not None:
                exc = task.exception()
                reply(False, error=str(exc) or type(exc).__name__)
            else:
                reply(True, task.result())

        # Kept, and cancelled on teardown (the JS promise then rejects "<op>: cancelled"); ``done`` reports.
        self.tasks.start(result, report=False).add_done_callback(done)

    def _op_open(self, _: Any) -> bool:
        self.bar.open()
        return True

    def _op_close(self, _: Any) -> bool:
        self.bar.close()
        return False

    def _op_toggle(self, _: Any) -> bool:
        self.bar.toggle_open()
        return bool(self.bar.is_open)

    async def _until_connected(self) -> None:
        if self.client.connection_state == "connected":
            return
        fut: asyncio.Future[None] = asyncio.get_event_loop().create_future()

        def ready(_payload: Any) -> None:
            if not fut.done():
                fut.set_result(None)

        off = self.client.on(ClientEvent.READY, ready)
        try:
            await asyncio.wait_for(fut, self.CONNECT_WAIT_S)
        except TimeoutError:
            raise WidgetError(f"Not connected to the relay after {self.CONNECT_WAIT_S:g} s.") from None
        finally:
            off()

    async def _op_send(self, text: Any) -> bool:
        if not isinstance(text, str) or not text.strip():
            raise WidgetError("send(text) needs some text.")
        await self._until_connected()
        return await self.store.send(text)

    async def _op_newConversation(self, _: Any) -> bool:  # noqa: N802 - the JS name
        if self.client.conversation_url is None:
            await self._until_connected()
        return await self.store.new_chat()

    async def _op_conversations(self, _: Any) -> list[Any]:
        await self._until_connected()
        return list(await self.client.conversations())

    async def _op_openConversation(self, conversation_id: Any) -> bool:  # noqa: N802 - the JS name
        await self._until_connected()
        return await self.store.history.open(str(conversation_id))

    async def _op_deleteConversation(self, conversation_id: Any) -> bool:  # noqa: N802 - the JS name
        await self._until_connected()
        return await self.store.history.delete(str(conversation_id))

    def _op_subscribe(self, event: Any) -> None:
        name = str(event)
        if name not in self._subscriptions:

            def forward(payload: Any) -> None:
                self._emit(name, payload)

            self._subscriptions[name] = self.client.on(name, forward)

    def _op_unsubscribe(self, event: Any) -> None:
        off = self._subscriptions.pop(str(event), None)
        if off is not None:
            off()

    def _emit(self, event: str, payload: Any) -> None:
        if self.host is None:
            return
        try:
            text = json.dumps(payload, default=str)
        except (TypeError, ValueError):
            text = "null"
        self.host.emit(event, text)

    def _op_setContext(self, context: Any) -> None:  # noqa: N802 - the JS name
        if not isinstance(context, dict):
            raise WidgetError("setContext(context) needs an object.")
        self.client.set_context(context)

    def _op_updateContext(self, partial: Any) -> None:  # noqa: N802 - the JS name
        if not isinstance(partial, dict):
            raise WidgetError("updateContext(partial) needs an object.")
        self.client.update_context(partial)

    async def _invoke(self, kind: str, name: str, args: Any, context: dict[str, Any], signal: Any = None) -> Any:
        from pyodide.ffi import JsException

        self._call_ids += 1
        call_id = f"c{self._call_ids}"
        host = self.host
        if host is None:
            raise WidgetError(f"The JS handler of {name!r} is gone (the widget was destroyed).")
        if signal is not None:
            signal.add_listener(lambda: host.abort(call_id))
        try:
            text = await host.invoke(kind, name, call_id, json.dumps(args), json.dumps(context, default=str))
        except JsException as exc:
            raise WidgetError(_js_error_text(exc)) from None
        return json.loads(str(text))

    def _op_registerFunction(self, d: Any) -> Any:  # noqa: N802 - the JS name
        if not isinstance(d, dict) or not isinstance(d.get("name"), str):
            raise WidgetError("registerFunction() needs {name, handler, ...}.")
        name = d["name"]

        async def js_handler(args: dict[str, Any], context: dict[str, Any]) -> Any:
            return await self._invoke("function", name, args, context)

        self.client.register_function(name, js_handler, description=str(d.get("description") or ""),
                                      parameters=d.get("parameters"), sensitive=bool(d.get("sensitive")),
                                      webmcp=d.get("webmcp") is not False)
        if name in self.client.registry.unchecked:
            return self._check_schema_later(name)
        return None

    async def _check_schema_later(self, name: str) -> None:
        """The metaschema check of a schema registered before the checker was loaded: the JS promise
        rejects with the ConfigError and the function is removed again."""
        for removed, exc in await self.client.registry.check_pending([name]):
            self.client.unregister_function(removed)
            raise exc

    def _op_pageError(self, d: Any) -> None:  # noqa: N802 - the JS name
        """A PyScript block that raised (the loader watches PyScript's stderr): reported like page Python."""
        if isinstance(d, dict):
            report_page_error(self.client, page_error_text(str(d.get("source") or "<py script>"),
                                                           str(d.get("traceback") or "")))

    def _op_unregisterFunction(self, name: Any) -> bool:  # noqa: N802 - the JS name
        return self.client.unregister_function(str(name))

    def _op_setStarters(self, starters: Any) -> list[str]:  # noqa: N802 - the JS name
        """``Autopilot.setStarters(list | null)``: the page's starter prompts (``client.set_starters``)."""
        return self.client.set_starters(starters)

    def _op_registerTool(self, name: Any) -> None:  # noqa: N802 - the JS name
        name = str(name)

        async def js_tool(args: dict[str, Any], context: dict[str, Any]) -> Any:
            plain = {k: context.get(k) for k in ("question", "page")}
            return await self._invoke("tool", name, args, plain, context.get("signal"))

        old = self._tool_removers.pop(name, None)
        if old is not None:
            old()
        self._tool_removers[name] = self.client.register_tool(name, js_tool)

    def _op_removeTool(self, name: Any) -> None:  # noqa: N802 - the JS name
        remove = self._tool_removers.pop(str(name), None)
        if remove is not None:
            remove()

    def _op_destroy(self, _: Any) -> bool:
        self.teardown()
        return True

    # -- teardown ----------------------------------------------------------------------------------
    def teardown(self) -> None:
        """Tear down the bar, disconnect, drop the JS API's subscriptions and handlers.

        (JS calls this through the ``destroy`` op: a method named ``destroy`` on a PyProxy is Pyodide's own.)
        """
        if self._torn_down:
            return
        self._torn_down = True
        for off in self._subscriptions.values():
            off()
        self._subscriptions.clear()
        for remove in self._tool_removers.values():
            remove()
        self._tool_removers.clear()
        self.host = None
        if self.client.webmcp is not None:
            self.client.webmcp.close()
        # The first connect, retries, the schema check, the warm-up and the JS ops in flight: none outlives the
        # widget (``connecting`` is one of them).
        self.tasks.cancel_all()
        self.bar.destroy()
        self.store.close()
        # Teardown is synchronous (JS's destroy op settles at once); the disconnect goes on as a kept task.
        self.disconnected = self.tasks.start(self.client.disconnect())

    def destroy(self) -> None:
        """Python callers: the same as :meth:`teardown`."""
        self.teardown()

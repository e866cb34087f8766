"""Browser boot: the loader calls ``boot`` once Pyodide and the bundle are in place (Pyodide only)."""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import traceback
from collections.abc import MutableMapping
from typing import Any, Iterator

from .client import AutopilotClient
from .page import set_client
from .store import Store
from .transports.browser import BrowserTransport

log = logging.getLogger("widget")

#: Globals shared by every page Python block (D9).
PAGE_NAMESPACE: dict[str, Any] = {"__name__": "__page__"}


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


async def run_page_python(sources: list[tuple[str, str]], client: AutopilotClient) -> list[str]:
    """Run each page block in the shared namespace; a traceback goes to the console, the widget goes on."""
    failures = []
    for source, name in sources:
        try:
            code = compile(source, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(code, PAGE_NAMESPACE)  # noqa: S307 - the page author's own code, by design
            if asyncio.iscoroutine(result):
                await result
        except Exception:  # noqa: BLE001 - page code may raise anything
            tb = traceback.format_exc()
            failures.append(tb)
            log.error("page Python %s raised:\n%s", name, tb)
            client.events.emit("pageError", {"source": name, "traceback": tb})
    return failures


async def boot(config_json: str, page_sources: Any, loader: Any) -> Any:
    """Create the client, mount the bar, run page Python, then connect (D9 order)."""
    import autopilot_bridge  # type: ignore[import-not-found]  # registered by the loader

    handler = ConsoleHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    config = json.loads(config_json)
    from .browser_env import BrowserEnv

    client = AutopilotClient(BrowserTransport(autopilot_bridge), storage=LocalStorage(), env=BrowserEnv())
    if config.get("tools"):
        try:
            client.tools(config["tools"])
        except Exception as exc:  # noqa: BLE001 - a bad tools config is the page author's to fix: say it loudly
            log.error("tools config refused: %s", exc)
    set_client(client)
    store = Store(client)
    css = await loader.skinCss() if hasattr(loader, "skinCss") else ""
    from .ui.bar import enable_bar

    async def connect() -> None:
        try:
            if config.get("conversationUrl"):
                await client.connect(config["conversationUrl"], relay_url=config.get("relay"), app_id=config.get("app"))
            else:
                await client.connect(relay_url=config["relay"], app_id=config["app"])
        except Exception as exc:  # noqa: BLE001 - shown in the bar with Retry; never a dead widget
            log.error("could not connect: %s", exc)

    def retry() -> None:
        asyncio.ensure_future(connect())

    bar = enable_bar(store, loader=loader, css=str(css), title=config.get("title") or "Autopilot", on_retry=retry,
                     position=config.get("position"))
    import js

    js.performance.mark("autopilot:mounted")
    client.on("ready", lambda p: js.performance.mark("autopilot:joined"))
    if loader.wantOpen():
        bar.open()
    page = [(str(src), str(name)) for src, name in page_sources]
    await run_page_python(page, client)
    # Connecting is not part of the boot: the bar is usable (and shows progress) meanwhile.
    handle = _Handle(client, store, bar)
    handle.connecting = asyncio.ensure_future(connect())
    return handle


class _Handle:
    """What the loader keeps: the client, the store and the bar."""

    def __init__(self, client: AutopilotClient, store: Store, bar: Any) -> None:
        self.client = client
        self.store = store
        self.bar = bar
        self.connecting: asyncio.Future[None] | None = None

    def destroy(self) -> None:
        """Tear down the bar and disconnect."""
        self.bar.destroy()
        self.store.close()
        asyncio.ensure_future(self.client.disconnect())

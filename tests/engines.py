"""Firefox and WebKit for the browser tests, through the W3C WebDriver protocols their Debian packages speak.

- Firefox ESR (Debian ``firefox-esr``) has WebDriver BiDi built in (``--remote-debugging-port``): we talk to it
  over its WebSocket directly; Debian has no geckodriver, and Playwright cannot drive Debian's Firefox.
- WebKitGTK (Debian ``webkit2gtk-driver``): ``WebKitWebDriver`` (classic WebDriver over HTTP) starts WebKitGTK's
  MiniBrowser in automation mode; it needs an X display, so it runs under its own ``Xvfb``.

Both drivers offer the few things the engine tests need: load a URL, run an async JS function and get its
JSON result, real keyboard input (key actions, as a reader's keys arrive) and a real pointer click on an element
(shadow DOM included). No Selenium: each protocol is a handful of JSON commands.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from support import free_port, stop_process

FIREFOX = "/usr/bin/firefox-esr"
WEBKIT_DRIVER = "/usr/bin/WebKitWebDriver"
MINIBROWSER = "/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser"
XVFB = "/usr/bin/Xvfb"

#: WebDriver's codes for the keys the tests press.
KEYS = {"Alt": "\ue00a", "Shift": "\ue008", "Control": "\ue009", "Enter": "\ue007", "Escape": "\ue00c", "Tab": "\ue004"}


def _spawn(cmd: list[str], **kw: Any) -> subprocess.Popen[bytes]:
    """Start a helper program (the engines' start-up awaits nothing while it does)."""
    return subprocess.Popen(cmd, **kw)


def _x_display_exists(display: int) -> bool:
    """Whether an X server holds (or held and left the lock of) display ``:display``."""
    return os.path.exists(f"/tmp/.X{display}-lock") or os.path.exists(f"/tmp/.X11-unix/X{display}")


def key_actions(text: str = "", chord: list[str] | None = None) -> list[dict[str, Any]]:
    """A key input source's actions: each character of ``text`` pressed and released, or a chord held together."""
    actions: list[dict[str, Any]] = []
    if chord:
        codes = [KEYS.get(k, k) for k in chord]
        actions += [{"type": "keyDown", "value": c} for c in codes]
        actions += [{"type": "keyUp", "value": c} for c in reversed(codes)]
    for ch in text:
        actions += [{"type": "keyDown", "value": ch}, {"type": "keyUp", "value": ch}]
    return actions


def _wrap(function: str) -> str:
    """``function`` (JS source of a function, maybe async) as one taking and returning JSON text."""
    return f"async (...args) => JSON.stringify(await ({function})(...args.map((a) => JSON.parse(a))) ?? null)"


class EngineError(RuntimeError):
    """The engine or its driver refused a command."""


class Engine:
    """One browser session; subclasses speak the protocol."""

    name = ""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def goto(self, url: str) -> None: ...
    async def call(self, function: str, *args: Any) -> Any: ...
    async def _actions(self, sources: list[dict[str, Any]]) -> None: ...
    async def _element(self, function: str) -> Any: ...
    def _pointer_origin(self, ref: Any) -> dict[str, Any]: ...

    async def wait(self, function: str, *args: Any, timeout: float = 60.0) -> Any:
        """Poll ``function`` until it returns something truthy; its value."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = await self.call(function, *args)
            if last:
                return last
            await asyncio.sleep(0.1)
        raise TimeoutError(f"{self.name}: {function} stayed {last!r} for {timeout} s")

    async def type(self, text: str) -> None:
        """Type ``text`` key by key into whatever has the focus."""
        await self._actions([{"type": "key", "id": "keyboard", "actions": key_actions(text)}])

    async def press(self, *chord: str) -> None:
        """Press keys together (``press("Alt", "Shift", "a")``) or one key (``press("Enter")``)."""
        await self._actions([{"type": "key", "id": "keyboard", "actions": key_actions(chord=list(chord))}])

    async def click(self, function: str) -> None:
        """A real mouse click in the middle of the element ``function`` returns."""
        ref = await self._element(function)
        await self._actions([{"type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"}, "actions": [
            {"type": "pointerMove", "origin": self._pointer_origin(ref), "x": 0, "y": 0},
            {"type": "pointerDown", "button": 0}, {"type": "pointerUp", "button": 0}]}])


class Firefox(Engine):
    """Firefox ESR, headless, over WebDriver BiDi."""

    name = "firefox"

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.profile = tempfile.mkdtemp(prefix="autopilot-firefox-")
        self.http: aiohttp.ClientSession | None = None
        self.ws: Any = None
        self.context = ""
        self._ids = 0
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        port = free_port()
        log = Path(self.profile) / "firefox.log"
        # A fresh profile without first-run pages or update checks.
        (Path(self.profile) / "user.js").write_text(
            'user_pref("browser.shell.checkDefaultBrowser", false);\n'
            'user_pref("datareporting.policy.dataSubmissionEnabled", false);\n'
            'user_pref("app.update.disabledForTesting", true);\n')
        self.proc = _spawn([FIREFOX, "--headless", "--no-remote", "--profile", self.profile,
                                      "--remote-debugging-port", str(port), "about:blank"],
                                     stdout=log.open("wb"), stderr=subprocess.STDOUT)
        self.http = aiohttp.ClientSession()
        deadline = time.monotonic() + 60
        while True:
            try:
                self.ws = await self.http.ws_connect(f"ws://127.0.0.1:{port}/session", max_msg_size=0)
                break
            except aiohttp.ClientError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    text = log.read_text()
                    raise EngineError(f"Firefox did not open WebDriver BiDi on port {port}:\n{text}") from None
                await asyncio.sleep(0.2)
        self._reader = asyncio.ensure_future(self._read())
        await self._send("session.new", {"capabilities": {"alwaysMatch": {"acceptInsecureCerts": True}}})
        tree = await self._send("browsingContext.getTree", {})
        self.context = tree["contexts"][0]["context"]

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            fut = self._pending.pop(data.get("id"), None) if "id" in data else None
            if fut is not None and not fut.done():
                if data.get("type") == "error":
                    fut.set_exception(EngineError(f"{data.get('error')}: {data.get('message')}"))
                else:
                    fut.set_result(data.get("result"))

    async def _send(self, method: str, params: dict[str, Any]) -> Any:
        self._ids += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[self._ids] = fut
        await self.ws.send_str(json.dumps({"id": self._ids, "method": method, "params": params}))
        return await asyncio.wait_for(fut, 120)

    async def stop(self) -> None:
        if self.ws is not None:
            try:
                await asyncio.wait_for(self._send("session.end", {}), 10)
            except Exception:  # noqa: BLE001 - the browser is stopped below anyway
                pass
            await self.ws.close()
        if self._reader is not None:
            self._reader.cancel()
        if self.http is not None:
            await self.http.close()
        stop_process(self.proc)
        shutil.rmtree(self.profile, ignore_errors=True)

    async def goto(self, url: str) -> None:
        await self._send("browsingContext.navigate", {"context": self.context, "url": url, "wait": "complete"})

    async def call(self, function: str, *args: Any) -> Any:
        result = await self._send("script.callFunction", {
            "functionDeclaration": _wrap(function), "awaitPromise": True, "target": {"context": self.context},
            "arguments": [{"type": "string", "value": json.dumps(a)} for a in args]})
        if result.get("type") == "exception":
            raise EngineError(result["exceptionDetails"]["text"])
        return json.loads(result["result"]["value"])

    async def _element(self, function: str) -> Any:
        result = await self._send("script.callFunction", {
            "functionDeclaration": function, "awaitPromise": True, "target": {"context": self.context},
            "resultOwnership": "root"})
        if result.get("type") == "exception" or "sharedId" not in result.get("result", {}):
            raise EngineError(f"no element from {function}: {result}")
        return result["result"]["sharedId"]

    def _pointer_origin(self, ref: Any) -> dict[str, Any]:
        return {"type": "element", "element": {"sharedId": ref}}

    async def _actions(self, sources: list[dict[str, Any]]) -> None:
        await self._send("input.performActions", {"context": self.context, "actions": sources})


class WebKit(Engine):
    """WebKitGTK's MiniBrowser under WebKitWebDriver (classic WebDriver), on its own Xvfb display."""

    name = "webkit"

    def __init__(self) -> None:
        self.xvfb: subprocess.Popen[bytes] | None = None
        self.driver: subprocess.Popen[bytes] | None = None
        self.base = ""
        self.session = ""
        self.http: aiohttp.ClientSession | None = None
        self.tmp = tempfile.mkdtemp(prefix="autopilot-webkit-")

    async def _start_xvfb(self) -> int:
        """Xvfb on a display of our own: the first free one from a random start (another test run, or another
        program, may hold one); ready once its socket is there."""
        first = random.randrange(100, 900)
        for display in range(first, first + 50):
            if _x_display_exists(display):
                continue
            self.xvfb = _spawn([XVFB, f":{display}", "-screen", "0", "1280x900x24", "-nolisten", "tcp"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and self.xvfb.poll() is None:
                if os.path.exists(f"/tmp/.X11-unix/X{display}"):  # noqa: ASYNC240 - a stat, while polling
                    return display
                await asyncio.sleep(0.1)
            stop_process(self.xvfb)  # taken meanwhile, or too slow: the next one
        raise EngineError(f"Xvfb did not start on any display from :{first}")

    async def start(self) -> None:
        display = await self._start_xvfb()
        port = free_port()
        log = Path(self.tmp) / "webkitwebdriver.log"
        env = {**os.environ, "DISPLAY": f":{display}"}
        self.driver = _spawn([WEBKIT_DRIVER, f"--port={port}"], env=env,
                             stdout=log.open("wb"), stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{port}"
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=180))
        deadline = time.monotonic() + 60
        while True:
            try:
                async with self.http.get(self.base + "/status") as r:
                    if r.status == 200:
                        break
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline or self.driver.poll() is not None:
                raise EngineError(f"WebKitWebDriver did not answer on {self.base}:\n{log.read_text()}")
            await asyncio.sleep(0.2)
        caps = {"capabilities": {"alwaysMatch": {"browserName": "MiniBrowser", "webkitgtk:browserOptions": {
            "binary": MINIBROWSER, "args": ["--automation"]}}}}
        try:
            self.session = (await asyncio.wait_for(self._req("POST", "/session", caps), 90))["sessionId"]
        except (TimeoutError, EngineError) as exc:
            text = log.read_text()[-3000:]
            raise EngineError(f"WebKitWebDriver could not start MiniBrowser ({exc!r}):\n{text}") from None

    async def _req(self, method: str, path: str, body: Any = None) -> Any:
        assert self.http is not None
        async with self.http.request(method, self.base + path, json=body) as r:
            data = await r.json(content_type=None)
        value = data.get("value") if isinstance(data, dict) else None
        if r.status >= 400:
            raise EngineError(f"{method} {path}: {value}")
        return value

    async def stop(self) -> None:
        if self.session:
            try:
                await self._req("DELETE", f"/session/{self.session}")
            except Exception:  # noqa: BLE001 - the driver is stopped below anyway
                pass
        if self.http is not None:
            await self.http.close()
        stop_process(self.driver)
        stop_process(self.xvfb)
        shutil.rmtree(self.tmp, ignore_errors=True)

    async def goto(self, url: str) -> None:
        await self._req("POST", f"/session/{self.session}/url", {"url": url})

    async def call(self, function: str, *args: Any) -> Any:
        script = ("const done = arguments[arguments.length - 1];"
                  f"({_wrap(function)})(...Array.from(arguments).slice(0, -1))"
                  ".then(v => done({ok: v}), e => done({error: String(e && e.stack || e)}));")
        value = await self._req("POST", f"/session/{self.session}/execute/async",
                                {"script": script, "args": [json.dumps(a) for a in args]})
        if "error" in value:
            raise EngineError(value["error"])
        return json.loads(value["ok"])

    async def _element(self, function: str) -> Any:
        value = await self._req("POST", f"/session/{self.session}/execute/sync",
                                {"script": f"return ({function})();", "args": []})
        # (WebKitGTK names an element in a shadow root with another key than the W3C one: take what it gives.)
        keys = [k for k in value if k.startswith("element-6066-")] if isinstance(value, dict) else []
        if not keys:
            raise EngineError(f"no element from {function}: {value}")
        return {keys[0]: value[keys[0]]}

    def _pointer_origin(self, ref: Any) -> dict[str, Any]:
        return ref

    async def _actions(self, sources: list[dict[str, Any]]) -> None:
        await self._req("POST", f"/session/{self.session}/actions", {"actions": sources})
        await self._req("DELETE", f"/session/{self.session}/actions")


ENGINES: dict[str, tuple[type[Engine], list[str]]] = {
    "firefox": (Firefox, [FIREFOX]),
    "webkit": (WebKit, [WEBKIT_DRIVER, MINIBROWSER, XVFB]),
}

"""The page seam in the browser: fetch, navigation and events for declarative tool runs (Pyodide only)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urljoin, urlsplit

from .env import Signal


class BrowserEnv:
    """PageEnv backed by ``window``: same-origin fetch with the reader's cookies, safe navigation."""

    def page_info(self) -> dict[str, Any]:
        """The page's URL and title."""
        import js

        return {"url": str(js.location.href), "title": str(js.document.title)}

    async def fetch(self, method: str, url: str, body: Any, signal: Signal) -> tuple[int, str, str]:
        """``fetch`` with an AbortController tied to ``signal``."""
        import js
        from pyodide.ffi import create_once_callable, to_js

        controller = js.AbortController.new()
        signal.add_listener(create_once_callable(lambda: controller.abort()))
        init: dict[str, Any] = {"method": method, "credentials": "same-origin", "signal": controller.signal}
        if body is not None:
            init["headers"] = {"Content-Type": "application/json"}
            init["body"] = json.dumps(body)
        res = await js.fetch(url, to_js(init, dict_converter=js.Object.fromEntries))
        text = await res.text()
        return int(res.status), str(res.headers.get("content-type") or ""), str(text)

    def navigate(self, url: str) -> str:
        """Own host: in place. Another host: a new tab without ``window.opener``."""
        import js

        target = urljoin(str(js.location.href), url)
        if urlsplit(target).scheme not in ("http", "https"):
            raise ValueError(f"Refusing to open {target!r}: only http(s) links open.")
        if urlsplit(target).netloc == str(js.location.host):
            js.location.assign(target)
            return "same-tab"
        js.window.open(target, "_blank", "noopener,noreferrer")
        return "new-tab"

    def dispatch_event(self, name: str, detail: dict[str, Any]) -> None:
        """A CustomEvent on ``window`` whose ``detail`` is a plain JS object."""
        import js

        payload = js.JSON.parse(json.dumps(detail))
        init = js.Object.fromEntries(js.Array.of(js.Array.of("detail", payload)))
        js.window.dispatchEvent(js.CustomEvent.new(name, init))

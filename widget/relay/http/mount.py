"""The relay under a path prefix of an existing ASGI app (docs/embedding.md#mount).

::

    from starlette.applications import Starlette
    from .. import RelayConfig, mount

    app = Starlette(routes=[...])                       # or FastAPI()
    mount(app, "/copilot", RelayConfig(apps=...))       # /copilot/widget/autopilot.js, /copilot/api/...,
                                                        # /copilot/socket.io/

Everything the relay writes carries the prefix: conversation URLs, the Socket.IO path handed to clients
(``relay_path`` = ``/copilot/socket.io``; ``relay_url`` stays the origin, which Socket.IO clients connect to),
the PyScript config and the demo page's URLs. The relay's lifespan (storage, model loop) runs inside the host
app's. A plain ``Mount("/copilot", create_app(...))`` is not enough: Starlette neither forwards lifespan events to
mounted apps nor tells them their prefix in a way Socket.IO understands.

The relay's paths bypass the host app's middleware: requests under the prefix go to the relay before the host's
middleware stack sees them. A host ``CORSMiddleware`` would otherwise answer the relay's preflights with its own
origins (``400 Disallowed CORS origin``) or override the relay's per-app policy with ``*``; the relay answers CORS
for its apps' origins itself. Anything the host wants on the relay's paths (authentication, a proxy) goes in front
of the whole app.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

from ...errors import ConfigError


class PrefixedRelay:
    """ASGI: the relay app seen from under ``prefix``.

    Requests arrive with the full path (``/copilot/api/...``), as Starlette's ``Mount`` and the ASGI spec pass them,
    or already stripped; the relay gets the path without the prefix and ``root_path`` / ``app_root_path`` set to it,
    so its routes and Socket.IO match and the URLs it builds include the prefix.
    """

    def __init__(self, relay: Any, prefix: str) -> None:
        self.relay = relay
        self.prefix = _check_prefix(prefix)

    def __getattr__(self, name: str) -> Any:  # .hub, .config, .store of the relay
        return getattr(self.relay, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            root = str(scope.get("root_path") or "")
            if not root.endswith(self.prefix):
                root += self.prefix
            path = scope["path"]
            if path == root or path.startswith(root + "/"):
                path = path[len(root):] or "/"
            scope = {**scope, "path": path, "raw_path": path.encode("utf-8"), "root_path": root, "app_root_path": root}
        await self.relay(scope, receive, send)


def _check_prefix(prefix: str) -> str:
    if not isinstance(prefix, str) or not prefix.startswith("/") or prefix.endswith("/") or "//" in prefix:
        raise ConfigError(f"The prefix must look like '/copilot' (a leading slash, none at the end), got {prefix!r}.")
    return prefix


@contextlib.asynccontextmanager
async def lifespan_of(app: Any) -> AsyncIterator[None]:
    """Run ``app``'s ASGI lifespan (startup on enter, shutdown on exit) from inside another app's."""
    to_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    from_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
    task = asyncio.ensure_future(app(scope, to_app.get, from_app.put))
    await to_app.put({"type": "lifespan.startup"})
    msg = await from_app.get()
    if msg["type"] != "lifespan.startup.complete":
        await asyncio.gather(task, return_exceptions=True)
        raise RuntimeError(f"the relay did not start: {msg.get('message', msg['type'])}")
    try:
        yield
    finally:
        await to_app.put({"type": "lifespan.shutdown"})
        await from_app.get()
        await asyncio.gather(task, return_exceptions=True)


class _PrefixFirst:
    """ASGI: HTTP and WebSocket requests under ``prefix`` go to the relay; everything else (lifespan included) to
    the host's middleware stack."""

    def __init__(self, prefix: str, relay: Any, host_stack: Any) -> None:
        self.prefix = prefix
        self.relay = relay
        self.host_stack = host_stack

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            base = str(scope.get("root_path") or "").rstrip("/") + self.prefix
            path = scope.get("path", "")
            if not path.startswith(base):  # servers that pass the path without the root path
                base = self.prefix
            if path == base or path.startswith(base + "/"):
                await self.relay(scope, receive, send)
                return
        await self.host_stack(scope, receive, send)


def _bypass_host_middleware(app: Any, prefix: str, prefixed: PrefixedRelay) -> None:
    """Put the relay's paths in front of the host's middleware stack (built now or at the first request)."""
    build = getattr(app, "build_middleware_stack", None)
    if build is None:
        return  # not a Starlette app: its router routes the prefix

    def build_with_relay_first() -> Any:
        return _PrefixFirst(prefix, prefixed, build())

    app.build_middleware_stack = build_with_relay_first
    if getattr(app, "middleware_stack", None) is not None:  # already serving: rebuild with the relay in front
        app.middleware_stack = build_with_relay_first()


def mount(app: Any, prefix: str, config: Any = None, *, relay: Any = None) -> PrefixedRelay:
    """Mount a relay (``relay``, or ``create_app(config)``) under ``prefix`` of a Starlette or FastAPI ``app``;
    its lifespan joins ``app``'s. Returns the mounted relay (``.hub``, ``.config``, ``.store`` as usual)."""
    from starlette.routing import Mount

    from ..app import create_app

    prefix = _check_prefix(prefix)
    relay = relay if relay is not None else create_app(config)
    prefixed = PrefixedRelay(relay, prefix)
    router = getattr(app, "router", None)
    if router is None or not hasattr(router, "lifespan_context"):
        raise ConfigError("mount() needs a Starlette or FastAPI app; other ASGI servers can wrap PrefixedRelay and "
                          "run lifespan_of(relay) themselves.")
    # In front of the host's own routes, so a catch-all route there does not shadow it (url_for, route listings).
    router.routes.insert(0, Mount(prefix, app=prefixed))
    _bypass_host_middleware(app, prefix, prefixed)
    outer = router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(host_app: Any) -> AsyncIterator[Any]:
        async with lifespan_of(relay):
            async with outer(host_app) as state:
                yield state

    router.lifespan_context = lifespan
    return prefixed

"""``create_app(config)``: the relay as one ASGI app (Starlette for HTTP + python-socketio)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import socketio
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from .. import protocol as P
from .config import DEFAULT_APP, RelayConfig
from .http import docs_push, feedback, insight, summaries
from .http.api import Api
from .http.contract import routes as contract_routes
from .http.docs_site import DemoDocs, site_base
from .http.limits import BodyLimit
from .http.static import DistFiles
from .hub import Hub
from .models.base import ModelAdapter
from .storage import Store, make_store

log = logging.getLogger("widget.relay")

#: How long a store failure met by an API route keeps ``/readyz`` at 503, seconds.
STORE_FAILURE_WINDOW_S = 10.0


async def sweep_retention(hub: Hub, retention_days: float) -> list[str]:
    """Delete conversations idle for longer than ``retention_days`` (0: keep forever)."""
    if retention_days <= 0:
        return []
    ids = await hub.store.delete_inactive_before(time.time() - retention_days * 86400)
    for cid in ids:
        await hub.disconnect_conversation(cid)
    if ids:
        log.info("retention: deleted %d conversation(s) idle for more than %g days", len(ids), retention_days)
    return ids


def create_app(
    config: RelayConfig | None = None,
    *,
    store: Store | None = None,
    models: dict[str, ModelAdapter] | None = None,
) -> socketio.ASGIApp:
    """Build the relay. ``store`` defaults to PostgreSQL at ``config.database_url`` or SQLite at
    ``config.db_path``; ``models`` may replace adapters by name (tests). The returned app has
    ``.hub``, ``.config`` and ``.store`` attributes."""
    config = (config or RelayConfig()).finalized()
    store = store or make_store(config.database_url, config.db_path)
    hub = Hub(config, store, models)
    hub.sio.max_sockets_per_address = config.max_sockets_per_address
    api = Api(hub)
    # POST .../feedback, GET .../stats, POST .../summaries, PUT .../docs
    for feature in (feedback, insight, summaries, docs_push):
        feature.install(api)
    dist = DistFiles(config.dist_dir, config.all_allowed_origins(), demo_app=DEFAULT_APP in config.apps)
    demo_docs = DemoDocs(config.demo_docs, site_base(config)) if config.demo_docs is not None else None

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await store.open()
        await hub.start()
        await sweep_retention(hub, config.retention_days)
        if demo_docs is not None:
            try:
                await demo_docs.index(hub.docs)
            except Exception:  # the relay serves without the demo's docs
                log.exception("--demo-docs: indexing %s failed", config.demo_docs)
        warmer = asyncio.ensure_future(dist.warm())
        sweeper = None
        if config.retention_days > 0:
            interval = min(3600.0, max(60.0, config.retention_days * 86400 / 10))

            async def sweep_forever() -> None:
                while True:
                    await asyncio.sleep(interval)
                    try:
                        await sweep_retention(hub, config.retention_days)
                    except Exception:
                        log.exception("retention sweep failed")

            sweeper = asyncio.ensure_future(sweep_forever())
        try:
            yield
        finally:
            warmer.cancel()
            if sweeper is not None:
                sweeper.cancel()
            await hub.shutdown()
            await store.close()

    async def healthz(_request: Any) -> JSONResponse:
        """The process is up (a liveness probe: restart it when this fails)."""
        return JSONResponse({"ok": True, "protocol_version": P.PROTOCOL_VERSION, "instance": hub.instance})

    probe = ReadinessProbe(hub, config.readiness_timeout_s, api)

    async def readyz(_request: Any) -> JSONResponse:
        """The store takes a write and Redis (when configured) answers, each in time: send traffic here."""
        checks = await probe.run()
        if hub.draining or hub.closing:
            checks["relay"] = "error: shutting down"
        ok = all(v == "ok" for v in checks.values())
        body = {"ok": ok, "instance": hub.instance, "checks": checks}
        return JSONResponse(body, status_code=200 if ok else 503, headers={"Cache-Control": "no-store"})

    async def api_not_found(_request: Any) -> JSONResponse:
        return JSONResponse(P.error(P.ErrorCode.NOT_FOUND, "No such API endpoint."), status_code=404)

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        *api.routes(),  # the conversation API and the features' routes
        *contract_routes(),  # GET /api/protocol/{asyncapi,openapi,protocol.schema}.json
        Route("/api/{path:path}", api_not_found, methods=["GET", "POST", "DELETE", "OPTIONS"]),
        Route("/widget/{path:path}", dist.widget, methods=["GET", "HEAD"]),
        Route("/widget/{path:path}", dist.preflight, methods=["OPTIONS"]),
        *(demo_docs.routes() if demo_docs is not None else []),  # /docs/<name>.html
        Route("/", dist.demo, methods=["GET", "HEAD"]),
        Route("/{path:path}", dist.demo, methods=["GET", "HEAD"]),
    ]
    http_app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={Exception: _json_500})
    sio_app = socketio.ASGIApp(hub.sio, other_asgi_app=http_app, socketio_path=config.relay_path.strip("/"))
    return RelayApp(sio_app, hub, config, store, api)


class RelayApp:
    """The relay's ASGI app: Socket.IO and the HTTP routes behind the body limit (``.hub``, ``.config``,
    ``.store``, ``.api``)."""

    def __init__(self, inner: Any, hub: Hub, config: RelayConfig, store: Store, api: Api) -> None:
        self.hub, self.config, self.store, self.api = hub, config, store, api
        sio_path = "/" + config.relay_path.strip("/") + "/"

        def limit_for(path: str) -> int:
            # Engine.IO long-polling POSTs carry up to its buffer (checked again by Engine.IO itself).
            if path.startswith(sio_path):
                return P.ENGINEIO_MAX_BUFFER
            # A docs push carries a whole site's archive (checked again, with its own error, by the route).
            return docs_push.MAX_PUSH_BYTES if docs_push.is_push_path(path) else config.max_body_bytes

        self.inner = BodyLimit(inner, limit_for)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.inner(scope, receive, send)


async def _json_500(request: Any, exc: Exception) -> Response:
    """An unexpected failure outside the API's own handling: JSON under /api/, plain text elsewhere."""
    if request.url.path.startswith("/api/") or "/api/" in request.url.path:
        return JSONResponse(P.error(P.ErrorCode.INTERNAL, "The relay failed to handle this request."), status_code=500)
    return PlainTextResponse("Internal Server Error", status_code=500)


class ReadinessProbe:
    """``/readyz``'s checks, bounded: a write to the store (this instance's heartbeat row) and Redis, each within
    ``timeout_s``; a store failure an API route met within ``STORE_FAILURE_WINDOW_S`` also says not ready. One probe
    runs at a time; callers meanwhile share its result, so the probe cannot be used to pile work on a slow store."""

    def __init__(self, hub: Hub, timeout_s: float, api: Api | None = None) -> None:
        self.hub = hub
        self.timeout_s = timeout_s
        self.api = api
        self._running: asyncio.Task[dict[str, str]] | None = None
        self._store_write: asyncio.Task[Any] | None = None

    async def run(self) -> dict[str, str]:
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._checks())
        return dict(await asyncio.shield(self._running))

    async def _checks(self) -> dict[str, str]:
        checks: dict[str, str] = {}
        if self._store_write is not None and not self._store_write.done():
            # The write a previous probe started has not come back: the store is stuck, not ready.
            checks["store"] = "error: the previous write probe has not finished"
        else:
            self._store_write = asyncio.ensure_future(self.hub.store.heartbeat(self.hub.instance))
            checks["store"] = await self._bounded(asyncio.shield(self._store_write))
        failed = self.api.store_failure if self.api is not None else None
        if checks["store"] == "ok" and failed is not None and time.monotonic() - failed[0] < STORE_FAILURE_WINDOW_S:
            # The probe's one-row write can fit where a real write did not (a full disk reuses the space of the
            # failed transaction): a route's failure counts for a while too.
            checks["store"] = f"error: a write failed {time.monotonic() - failed[0]:.1f} s ago: {failed[1]}"
        if self.hub.redis is not None:
            checks["redis"] = await self._bounded(self.hub.redis.ping())
            if checks["redis"] == "ok" and not self.hub.redis.listening:
                # Redis answers, but this process's subscription is still reconnecting (with backoff,
                # after an outage): until it is back, other processes' events reach its sockets only by
                # polling and a client.role sent to them is lost.
                checks["redis"] = "error: not subscribed to the channel yet"
        return checks

    async def _bounded(self, awaitable: Any) -> str:
        try:
            await asyncio.wait_for(awaitable, self.timeout_s)
            return "ok"
        except TimeoutError:
            return f"error: no answer within {self.timeout_s:g} s"
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            return f"error: {type(exc).__name__}: {exc}"[:200]

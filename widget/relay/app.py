"""``create_app(config)``: the relay as one ASGI app (Starlette for HTTP + python-socketio)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, AsyncIterator

import socketio
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from .. import protocol as P
from .api import Api
from .config import RelayConfig
from .hub import Hub
from .model import ModelAdapter
from .static import DistFiles
from .storage import SQLiteStore, Store

log = logging.getLogger("widget.relay")


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


def make_store(config: RelayConfig) -> Store:
    """PostgreSQL when ``database_url`` is set, else the embedded SQLite file."""
    if config.database_url:
        from .pgstore import PostgresStore

        return PostgresStore(config.database_url)
    return SQLiteStore(config.db_path)


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
    store = store or make_store(config)
    hub = Hub(config, store, models)
    api = Api(hub)
    dist = DistFiles(config.dist_dir, config.all_allowed_origins())

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await store.open()
        await hub.start()
        await sweep_retention(hub, config.retention_days)
        warmer = asyncio.ensure_future(dist.warm())
        sweeper = None
        if config.retention_days > 0:
            interval = min(3600.0, max(60.0, config.retention_days * 86400 / 10))

            async def sweep_forever() -> None:
                while True:
                    await asyncio.sleep(interval)
                    try:
                        await sweep_retention(hub, config.retention_days)
                    except Exception:  # noqa: BLE001
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

    create_path = P.HTTP_CREATE_CONVERSATION.replace("{app_id}", "{app_id:str}")
    conv_path = P.HTTP_CONVERSATION.replace("{conversation_id}", "{conversation_id:str}")
    ask_path = P.HTTP_ASK_USER.replace("{conversation_id}", "{conversation_id:str}")
    async def healthz(_request: Any) -> JSONResponse:
        """The process is up (a liveness probe: restart it when this fails)."""
        return JSONResponse({"ok": True, "protocol_version": P.PROTOCOL_VERSION, "instance": hub.instance})

    async def readyz(_request: Any) -> JSONResponse:
        """The store (and Redis, when configured) answer: send traffic here (a readiness probe)."""
        checks: dict[str, str] = {}

        async def check(name: str, coro: Any) -> None:
            try:
                await asyncio.wait_for(coro, 2.0)
                checks[name] = "ok"
            except Exception as exc:  # noqa: BLE001 - reported, not raised
                checks[name] = f"error: {type(exc).__name__}: {exc}"[:200]

        await check("store", store.ping())
        if hub.redis is not None:
            await check("redis", hub.redis.ping())
            if checks["redis"] == "ok" and not hub.redis.listening:
                # Redis answers, but this process's subscription is still reconnecting (with backoff,
                # after an outage): until it is back, other processes' events reach its sockets only by
                # polling and a client.role sent to them is lost.
                checks["redis"] = "error: not subscribed to the channel yet"
        ok = all(v == "ok" for v in checks.values()) and not hub.closing
        body = {"ok": ok, "instance": hub.instance, "checks": checks}
        return JSONResponse(body, status_code=200 if ok else 503, headers={"Cache-Control": "no-store"})

    async def api_not_found(_request: Any) -> JSONResponse:
        return JSONResponse(P.error(P.ERR_NOT_FOUND, "No such API endpoint."), status_code=404)

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route(create_path, api.create, methods=["POST"]),
        Route(create_path, api.create_preflight, methods=["OPTIONS"]),
        Route(conv_path, api.get, methods=["GET"]),
        Route(conv_path, api.delete, methods=["DELETE"]),
        Route(conv_path, api.conversation_preflight, methods=["OPTIONS"]),
        Route(ask_path, api.ask_user, methods=["POST"]),
        Route(ask_path, api.conversation_preflight, methods=["OPTIONS"]),
        Route("/api/{path:path}", api_not_found, methods=["GET", "POST", "DELETE", "OPTIONS"]),
        Route("/widget/{path:path}", dist.widget, methods=["GET", "HEAD"]),
        Route("/widget/{path:path}", dist.preflight, methods=["OPTIONS"]),
        Route("/", dist.demo, methods=["GET", "HEAD"]),
        Route("/{path:path}", dist.demo, methods=["GET", "HEAD"]),
    ]
    http_app = Starlette(routes=routes, lifespan=lifespan)
    asgi = socketio.ASGIApp(hub.sio, other_asgi_app=http_app, socketio_path=config.relay_path.strip("/"))
    asgi.hub = hub  # type: ignore[attr-defined]
    asgi.config = config  # type: ignore[attr-defined]
    asgi.store = store  # type: ignore[attr-defined]
    asgi.api = api  # type: ignore[attr-defined]
    return asgi

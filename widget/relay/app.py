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


def create_app(
    config: RelayConfig | None = None,
    *,
    store: Store | None = None,
    models: dict[str, ModelAdapter] | None = None,
) -> socketio.ASGIApp:
    """Build the relay. ``store`` defaults to SQLite at ``config.db_path``; ``models`` may replace
    adapters by name (tests). The returned app has ``.hub``, ``.config`` and ``.store`` attributes."""
    config = (config or RelayConfig()).finalized()
    store = store or SQLiteStore(config.db_path)
    hub = Hub(config, store, models)
    api = Api(hub)
    dist = DistFiles(config.dist_dir, config.all_allowed_origins())

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await store.open()
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
        return JSONResponse({"ok": True, "protocol_version": P.PROTOCOL_VERSION})

    async def api_not_found(_request: Any) -> JSONResponse:
        return JSONResponse(P.error(P.ERR_NOT_FOUND, "No such API endpoint."), status_code=404)

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
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

"""The relay mounted in a FastAPI app whose own CORSMiddleware lists other origins or "*": the relay's paths answer
CORS for the relay's apps only, untouched by the host's middleware; the host's own routes keep the host's policy."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import socketio
import uvicorn
from relay_helpers import SHOP_ORIGIN, relay_config

from widget.relay import mount
from widget.relay.server import _bind

pytestmark = pytest.mark.relay

fastapi = pytest.importorskip("fastapi")
from fastapi.middleware.cors import CORSMiddleware  # noqa: E402

HOST_ORIGIN = "https://host-only.example"


async def serve(app: Any) -> tuple[uvicorn.Server, Any, str]:
    import asyncio

    sock = _bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started:
        assert not task.done(), task.result()
        await asyncio.sleep(0.01)
    return server, task, f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest_asyncio.fixture(params=[[HOST_ORIGIN], ["*"]], ids=["host-origins", "star"])
async def host(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    app = fastapi.FastAPI()
    app.add_middleware(CORSMiddleware, allow_origins=request.param, allow_methods=["*"], allow_headers=["*"])

    @app.get("/hello")
    async def hello() -> dict[str, str]:
        return {"hello": "world"}

    mount(app, "/copilot", relay_config(tmp_path))
    server, task, url = await serve(app)
    yield url
    server.should_exit = True
    await task


async def test_the_relay_answers_cors_itself_under_a_host_cors_middleware(host: str) -> None:
    create = f"{host}/copilot/api/apps/shop/conversations"
    async with aiohttp.ClientSession() as http:
        async with http.options(create, headers={"Origin": SHOP_ORIGIN, "Access-Control-Request-Method": "POST",
                                                 "Access-Control-Request-Headers": "content-type"}) as r:
            assert r.status == 204 and r.headers["Access-Control-Allow-Origin"] == SHOP_ORIGIN
        async with http.options(create, headers={"Origin": HOST_ORIGIN, "Access-Control-Request-Method": "POST"}) as r:
            # the host's origin: not the relay's
            assert r.status == 403 and "Access-Control-Allow-Origin" not in r.headers
        async with http.post(create, json={}, headers={"Origin": SHOP_ORIGIN}) as r:
            assert r.status == 201, await r.text()
            assert r.headers["Access-Control-Allow-Origin"] == SHOP_ORIGIN
            assert r.headers.getall("Vary") == ["Origin"]
            url = (await r.json())["url"]
        assert url.startswith(f"{host}/copilot/api/conversations/")
        async with http.get(url, headers={"Origin": "https://evil.example"}) as r:
            assert r.status == 200 and "Access-Control-Allow-Origin" not in r.headers  # never "*"
            data = await r.json()
        assert data["relay_path"] == "/copilot/socket.io"
        sio = socketio.AsyncClient(reconnection=False)
        await sio.connect(data["relay_url"], socketio_path=data["relay_path"], headers={"Origin": SHOP_ORIGIN},
                          transports=["websocket"])
        ack = await sio.call("join", {"token": data["token"], "version": 1, "last_seq": 0}, timeout=10)
        assert ack["ok"], ack
        await sio.disconnect()
        # The host's own route keeps the host's CORS.
        async with http.get(f"{host}/hello", headers={"Origin": HOST_ORIGIN}) as r:
            assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] in (HOST_ORIGIN, "*")

"""The relay behind nginx with docs/examples/nginx-relay.conf: the API, a Socket.IO join over WebSocket, the client
address taken from X-Forwarded-For (per-address limits apply per client, not to nginx), nginx's own refusals in
the relay's JSON error shape, a slowloris connection closed by nginx."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from relay_helpers import Recorder, launch
from support import free_port, stop_process

from widget import protocol as P

CONF = Path(__file__).resolve().parent.parent / "docs" / "examples" / "nginx-relay.conf"
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
pytestmark = [
    pytest.mark.relay,
    pytest.mark.skipif(NGINX is None, reason="nginx is not installed (Debian: apt-get install nginx-light)"),
]


@pytest_asyncio.fixture
async def proxied(tmp_path: Path) -> AsyncIterator[tuple[str, Any]]:
    relay = await launch(tmp_path, trusted_proxies=["127.0.0.1"], get_rate_per_minute=2,
                         max_connections_per_address=3)
    port = free_port()
    conf = tmp_path / "nginx.conf"
    conf.write_text(CONF.read_text().replace("{tmp}", str(tmp_path)).replace("{relay_port}", str(relay.port))
                    .replace("{port}", str(port)).replace("worker_processes auto;", "worker_processes 1;")
                    # as root, workers would run as nobody, who cannot enter the test's private temporary folder
                    + ("\nuser root;\n" if os.geteuid() == 0 else ""))
    proc = await asyncio.to_thread(subprocess.Popen, [NGINX, "-c", str(conf), "-p", str(tmp_path), "-g", "daemon off;"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)  # off the event loop
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(1000):
            try:
                _, w = await asyncio.open_connection("127.0.0.1", port)
                w.close()
                break
            except OSError:
                error_log = tmp_path / "error.log"
                assert proc.poll() is None, error_log.read_text() if error_log.exists() else ""
                await asyncio.sleep(0.02)
        yield url, relay
    finally:
        stop_process(proc)
        await relay.stop()


async def test_the_example_nginx_config_in_front_of_the_relay(proxied: tuple[str, Any]) -> None:
    url, relay = proxied
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{url}/api/apps/demo/conversations", json={}, headers={"Origin": relay.url}) as r:
            assert r.status == 201, await r.text()
            conv_url = (await r.json())["url"]
        assert conv_url.startswith(url)  # the Host nginx passes on
        async with http.get(conv_url) as r:
            data = await r.json()
        rec = Recorder(data["relay_url"], data["relay_path"])
        await rec.sio.connect(data["relay_url"], socketio_path=data["relay_path"], transports=["websocket"],
                              headers={"Origin": relay.url})
        assert (await rec.join(data["token"]))["ok"]
        await rec.disconnect()
        # The relay's per-address GET limit (2 a minute) counts the client nginx names, not nginx.
        async with http.get(conv_url) as r:
            assert r.status == 200
        async with http.get(conv_url) as r:
            assert r.status == 429 and int(r.headers["Retry-After"]) >= 1
        other = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
        async with aiohttp.ClientSession(connector=other) as http2:
            async with http2.get(conv_url) as r:
                assert r.status == 200
        # Its connection cap does not apply to nginx's own connections (3 per address here).
        statuses = await asyncio.gather(*(http.get(f"{url}/healthz") for _ in range(12)))
        assert [s.status for s in statuses] == [200] * 12
        # nginx's refusal of a body over 1 MB has the relay's error shape.
        async with http.post(f"{url}/api/apps/demo/conversations", data=b"x" * 2_000_000,
                             headers={"Origin": relay.url, "Content-Type": "application/json"}) as r:
            assert r.status == 413 and (await r.json())["error"]["code"] == P.ErrorCode.BODY_TOO_LARGE
        async with http.post(f"{url}/api/apps/demo/conversations", data=b"x" * 300_000,
                             headers={"Origin": relay.url, "Content-Type": "application/json"}) as r:
            assert r.status == 413 and (await r.json())["error"]["code"] == P.ErrorCode.BODY_TOO_LARGE  # the relay's
    # A connection that never completes its headers is closed by nginx (client_header_timeout).
    reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]))
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    t0 = time.monotonic()
    data = await asyncio.wait_for(reader.read(), 60)
    assert time.monotonic() - t0 >= 9 and (data == b"" or data.startswith(b"HTTP/1.1 408"))
    writer.close()

"""The relay's HTTP edge: body limits, header/body/idle deadlines, connection caps, rate limits with Retry-After,
JSON errors for store failures, a bounded readiness probe, ask-user content type and origin, refused-origin
messages, what a cut body logs (the start-up banner and the log-storm filter, pure: tests/test_relay_config.py,
tests/test_relay_limits.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import socketio
from relay_helpers import ASK_SECRET, SHOP_ORIGIN, create, launch

from widget import protocol as P
from widget.relay.config import AppConfig

pytestmark = pytest.mark.relay

#: Generous bounds for "it happened" (a loaded 2-core machine); the lower bounds are exact by construction.
WITHIN_S = 15.0


@pytest_asyncio.fixture
async def edge(tmp_path: Path) -> AsyncIterator[Any]:
    """A relay with short edge deadlines and small caps."""
    relay = await launch(tmp_path, http_header_timeout_s=0.4, http_body_timeout_s=0.6, max_connections_per_address=4,
                         max_sockets_per_address=2, get_rate_per_minute=1000, ask_user_rate_per_minute=1000)
    yield relay
    await relay.stop()


async def raw(relay: Any, source: str = "127.0.0.1") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", relay.port, local_addr=(source, 0))


async def read_until_closed(reader: asyncio.StreamReader) -> bytes:
    data = b""
    while chunk := await asyncio.wait_for(reader.read(65536), WITHIN_S):
        data += chunk
    return data


def parse(response: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = response.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body) if body.strip() else None


async def guard_count(relay: Any, address: str, want: int) -> None:
    guard = relay.server.config.guard
    for _ in range(1000):
        if len(guard.by_address.get(address, ())) == want:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{address}: {len(guard.by_address.get(address, ()))} connections counted, want {want}")


# ---------------------------------------------------------------------------------------------- bodies


async def test_a_declared_body_over_the_limit_is_refused_before_it_is_read(edge: Any,
                                                                           http: aiohttp.ClientSession) -> None:
    url = await create(http, edge.url)
    path = url.split(str(edge.port), 1)[1]
    for method, target in [("POST", "/api/apps/demo/conversations"), ("POST", f"{path}/ask_user"), ("GET", path),
                           ("DELETE", path), ("POST", "/api/unknown"), ("PUT", "/widget/autopilot.js")]:
        reader, writer = await raw(edge)
        writer.write(f"{method} {target} HTTP/1.1\r\nHost: x\r\nOrigin: {edge.url}\r\nContent-Type: "
                     "application/json\r\n"
                     f"Content-Length: 838860800\r\n\r\n".encode())  # 800 MB announced, none sent
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WITHIN_S)
        status, headers, _ = parse(head)
        body = json.loads(await reader.readexactly(int(headers["content-length"])))
        assert status == 413 and body["error"]["code"] == P.ErrorCode.BODY_TOO_LARGE, (target, body)
        assert "838860800" in body["error"]["message"] and "262144" in body["error"]["message"]
        writer.close()
    async with http.get(url) as r:
        assert r.status == 200  # the relay goes on serving


async def test_a_streamed_body_is_cut_at_the_limit(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    relay = await launch(tmp_path, max_body_bytes=50_000)
    try:
        sent = {"bytes": 0}

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: chunked
            for _ in range(40):
                sent["bytes"] += 16_384
                yield b" " * 16_384

        url = await create(http, relay.url, "ask")
        for target, headers in [(f"{relay.url}/api/apps/demo/conversations", {"Origin": relay.url}),
                                (f"{url}/ask_user", {})]:
            sent["bytes"] = 0
            async with http.post(target, data=chunks(), headers={**headers, "Content-Type": "application/json"}) as r:
                body = await r.json()
                assert r.status == 413 and body["error"]["code"] == P.ErrorCode.BODY_TOO_LARGE, body
        # A body at the limit is read.
        async with http.post(f"{relay.url}/api/apps/demo/conversations", data=b"{}" + b" " * 49_998,
                             headers={"Origin": relay.url, "Content-Type": "application/json"}) as r:
            assert r.status == 201
    finally:
        await relay.stop()


# ---------------------------------------------------------------------------------------------- deadlines


async def test_headers_must_arrive_in_time(edge: Any) -> None:
    """A slowloris connection (headers never completed) and an idle one are closed at the header deadline."""
    for opening in (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ", b""):
        t0 = time.monotonic()  # before the connection: the deadline starts when the relay accepts it
        reader, writer = await raw(edge)
        writer.write(opening)
        await writer.drain()
        assert await read_until_closed(reader) == b""
        assert time.monotonic() - t0 >= 0.4
        writer.close()


async def test_a_body_must_arrive_in_time(edge: Any) -> None:
    url_path = "/api/apps/demo/conversations"
    reader, writer = await raw(edge)
    t0 = time.monotonic()  # before the headers are sent: the body deadline starts when the relay has read them
    writer.write(f"POST {url_path} HTTP/1.1\r\nHost: x\r\nOrigin: {edge.url}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: 1000\r\n\r\n{{".encode())
    await writer.drain()
    assert await read_until_closed(reader) == b""
    assert time.monotonic() - t0 >= 0.6
    writer.close()


async def test_the_next_request_on_a_kept_alive_connection_has_its_own_header_deadline(edge: Any) -> None:
    reader, writer = await raw(edge)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WITHIN_S)
    status, headers, _ = parse(head)
    assert status == 200
    await reader.readexactly(int(headers["content-length"]))
    writer.write(b"GET /healthz HTTP/1.1\r\nHo")  # and never the rest
    await writer.drain()
    assert await read_until_closed(reader) == b""
    writer.close()


# ---------------------------------------------------------------------------------------------- caps


async def test_connections_are_capped_per_address(tmp_path: Path) -> None:
    relay = await launch(tmp_path, max_connections_per_address=4, http_header_timeout_s=60)
    try:
        held = [await raw(relay) for _ in range(3)]
        ws = socketio.AsyncClient(reconnection=False)
        await ws.connect(relay.url, headers={"Origin": relay.url}, transports=["websocket"])  # a WebSocket counts
        await guard_count(relay, "127.0.0.1", 4)
        reader, writer = await raw(relay)
        status, _, body = parse(await read_until_closed(reader))
        assert status == 503 and body["error"]["code"] == P.ErrorCode.TOO_MANY_CONNECTIONS
        assert "127.0.0.1" in body["error"]["message"]
        writer.close()
        # Another address is served meanwhile.
        reader, writer = await raw(relay, "127.0.0.2")
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert parse(await read_until_closed(reader))[0] == 200
        writer.close()
        # A closed WebSocket frees its place.
        await ws.disconnect()
        await guard_count(relay, "127.0.0.1", 3)
        reader, writer = await raw(relay)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert parse(await read_until_closed(reader))[0] == 200
        writer.close()
        for _, w in held:
            w.close()
        await guard_count(relay, "127.0.0.1", 0)
    finally:
        await relay.stop()


async def test_connections_are_capped_in_all(tmp_path: Path) -> None:
    relay = await launch(tmp_path, max_connections=3, http_header_timeout_s=60)
    try:
        held = [await raw(relay, f"127.0.0.{2 + i}") for i in range(3)]
        await guard_count(relay, "127.0.0.4", 1)
        reader, writer = await raw(relay, "127.0.0.9")
        status, headers, body = parse(await read_until_closed(reader))
        assert (
            status == 503
            and body["error"]["code"] == P.ErrorCode.TOO_MANY_CONNECTIONS
            and headers["retry-after"] == "5"
        )
        assert "max_connections" in body["error"]["message"]
        writer.close()
        for _, w in held:
            w.close()
    finally:
        await relay.stop()


async def test_socketio_sessions_are_capped_per_address(edge: Any, http: aiohttp.ClientSession) -> None:
    """Long-polling sessions (no connection held between polls) and WebSocket ones count alike."""
    poll = f"{edge.url}/socket.io/?EIO=4&transport=polling"
    async with http.get(poll, headers={"Origin": edge.url}) as r:  # opens a polling session, answered at once
        assert r.status == 200 and '"sid"' in await r.text()
    ws = socketio.AsyncClient(reconnection=False)
    await ws.connect(edge.url, headers={"Origin": edge.url}, transports=["websocket"])
    async with http.get(poll, headers={"Origin": edge.url}) as r:
        assert r.status == 401 and "Too many Socket.IO sessions from 127.0.0.1" in await r.text()
    extra = socketio.AsyncClient(reconnection=False)
    with pytest.raises(socketio.exceptions.ConnectionError):
        await extra.connect(edge.url, headers={"Origin": edge.url}, transports=["websocket"])
    await ws.disconnect()
    sio = edge.app.hub.sio
    for _ in range(1000):
        if sio.sessions_from("127.0.0.1") == 1:
            break
        await asyncio.sleep(0.01)
    again = socketio.AsyncClient(reconnection=False)
    await again.connect(edge.url, headers={"Origin": edge.url}, transports=["websocket"])
    await again.disconnect()


# ---------------------------------------------------------------------------------------------- rate limits


async def test_rate_limits_answer_429_with_retry_after(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    relay = await launch(tmp_path, get_rate_per_minute=2, ask_user_rate_per_minute=1, create_rate_per_minute=1)
    try:
        origin = {"Origin": relay.url}
        statuses = []
        for _ in range(2):
            async with http.post(f"{relay.url}/api/apps/demo/conversations", headers=origin) as r:
                statuses.append(r.status)
                last = (r.headers.get("Retry-After"), await r.json())
        assert statuses == [201, 429]
        url = (await (await http.post(f"{relay.url}/api/apps/ask/conversations",
                                      headers={"Authorization": f"Bearer {ASK_SECRET}"})).json())["url"]
        checks = [last]
        for _ in range(3):
            async with http.get(url) as r:
                statuses.append(r.status)
                last = (r.headers.get("Retry-After"), await r.json())
        checks.append(last)
        for _ in range(2):
            async with http.post(f"{url}/ask_user", json={"answers": {"id": "x", "result": 1}}) as r:
                statuses.append(r.status)
                last = (r.headers.get("Retry-After"), await r.json())
        checks.append(last)
        assert statuses == [201, 429, 200, 200, 429, 400, 429]
        for retry_after, body in checks:
            assert retry_after is not None and 1 <= int(retry_after) <= 60
            assert body == {
                "ok": False,
                "error": {"code": P.ErrorCode.RATE_LIMITED, "message": body["error"]["message"]},
            }
            assert f"retry in {retry_after} s" in body["error"]["message"]
    finally:
        await relay.stop()


# -------------------------------------------------------------------------------------------- store failures, readiness


async def test_a_store_failure_is_a_json_503_and_a_bug_a_json_500(edge: Any, http: aiohttp.ClientSession,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    url = await create(http, edge.url)
    store = edge.app.store

    async def locked(*_a: Any, **_k: Any) -> Any:
        raise sqlite3.OperationalError("database or disk is full")

    async def bug(*_a: Any, **_k: Any) -> Any:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(store, "snapshot", locked)
    monkeypatch.setattr(store, "create_conversation", locked)
    async with http.get(url) as r:
        assert r.status == 503 and r.headers["Retry-After"] == "5"
        assert (await r.json())["error"]["code"] == P.ErrorCode.UNAVAILABLE
    async with http.post(f"{edge.url}/api/apps/demo/conversations", headers={"Origin": edge.url}) as r:
        assert r.status == 503 and (await r.json())["error"]["code"] == P.ErrorCode.UNAVAILABLE
        assert r.headers["Access-Control-Allow-Origin"] == edge.url  # the page can read why
    async with http.get(f"{edge.url}/readyz") as r:  # its own probe's write works; the route's did not
        body = await r.json()
        assert r.status == 503 and body["checks"]["store"].startswith("error: a write failed"), body
        assert "database or disk is full" in body["checks"]["store"]
    monkeypatch.setattr(store, "snapshot", bug)
    async with http.get(url) as r:
        assert r.status == 500 and (await r.json())["error"]["code"] == P.ErrorCode.INTERNAL


async def test_readyz_is_bounded_and_says_not_ready_while_the_store_cannot_write(tmp_path: Path,
                                                                                 http: aiohttp.ClientSession) -> None:
    """A real lock on the SQLite file (another connection's exclusive transaction): the relay's writes wait,
    /readyz answers 503 within its timeout, then 200 once the lock is gone."""
    relay = await launch(tmp_path, readiness_timeout_s=0.3)
    try:
        async with http.get(f"{relay.url}/readyz") as r:
            assert r.status == 200 and (await r.json())["checks"]["store"] == "ok"
        locker = sqlite3.connect(str(tmp_path / "relay.sqlite3"), isolation_level=None, timeout=30)
        locker.execute("BEGIN EXCLUSIVE")
        try:
            # (the second probe finds the first one's write still waiting, unless the relay's 10 s busy timeout
            # ended it meanwhile on a very slow machine: then it waits, and says so, itself)
            for expected in (("no answer within 0.3 s",),
                             ("previous write probe has not finished", "no answer within 0.3 s")):
                t0 = time.monotonic()
                async with http.get(f"{relay.url}/readyz") as r:
                    body = await r.json()
                assert r.status == 503 and any(e in body["checks"]["store"] for e in expected), body
                assert time.monotonic() - t0 < WITHIN_S
        finally:
            locker.execute("ROLLBACK")
            locker.close()
        for _ in range(3000):
            async with http.get(f"{relay.url}/readyz") as r:
                if r.status == 200:
                    break
            await asyncio.sleep(0.01)
        assert r.status == 200
    finally:
        await relay.stop()


# ---------------------------------------------------------------------------------------------- origins


async def test_ask_user_needs_json_and_an_allowed_origin(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    relay = await launch(tmp_path,
                         apps={"ask": AppConfig(ask_user=True, secret=ASK_SECRET, allowed_origins=[SHOP_ORIGIN])})
    try:
        url = await create(http, relay.url, "ask")
        body = json.dumps({"answers": {"id": "call_x", "result": "yes"}})
        for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
            headers = {"Origin": "https://evil.example"} | ({"Content-Type": ctype} if ctype else {})
            async with http.post(f"{url}/ask_user", data=body.encode(), headers=headers) as r:
                err = (await r.json())["error"]
                assert r.status == 403 and err["code"] == P.ErrorCode.FORBIDDEN_ORIGIN, err
        async with http.post(f"{url}/ask_user", data=body.encode(), headers={"Content-Type": "text/plain"}) as r:
            err = (await r.json())["error"]
            assert r.status == 415 and err["code"] == P.ErrorCode.BAD_REQUEST and "application/json" in err["message"]
        async with http.post(f"{url}/ask_user", data=body.encode(),
                             headers={"Content-Type": "application/json", "Origin": SHOP_ORIGIN}) as r:
            err = (await r.json())["error"]
            assert r.status == 400 and "not waiting" in err["message"].lower() or "WAITING" in err["message"], err
        async with http.delete(url, headers={"Origin": "https://evil.example"}) as r:
            assert r.status == 403
        async with http.get(url) as r:
            assert r.status == 200  # not deleted
    finally:
        await relay.stop()


async def test_a_missing_conversation_is_a_404_its_sites_can_read(tmp_path: Path,
                                                                    http: aiohttp.ClientSession) -> None:
    """A conversation that is gone (retention, deleted): the 404 carries CORS for any site of the relay's apps,
    so a widget on another origin learns it is gone and starts a new one; other origins get no CORS."""
    relay = await launch(tmp_path, apps={"shop": AppConfig(allowed_origins=[SHOP_ORIGIN])})
    try:
        gone = f"{relay.url}/api/conversations/c_{'Z' * 32}"
        async with http.get(gone, headers={"Origin": SHOP_ORIGIN}) as r:
            assert r.status == 404 and (await r.json())["error"]["code"] == P.ErrorCode.NOT_FOUND
            assert r.headers["Access-Control-Allow-Origin"] == SHOP_ORIGIN
        async with http.get(gone, headers={"Origin": "https://evil.example"}) as r:
            assert r.status == 404 and "Access-Control-Allow-Origin" not in r.headers
    finally:
        await relay.stop()


async def test_a_refused_origin_is_explained_and_logged_once(tmp_path: Path, http: aiohttp.ClientSession,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    relay = await launch(tmp_path, apps={"my-site": AppConfig(allowed_origins=["http://127.0.0.1:9150"])})
    try:
        caplog.set_level(logging.WARNING, logger="widget.relay.http.api")
        want = ("origin http://localhost:9150 is not allowed for app my-site; allowed: http://127.0.0.1:9150 "
                "(localhost and 127.0.0.1 are different origins")
        for _ in range(3):
            async with http.post(f"{relay.url}/api/apps/my-site/conversations", json={},
                                 headers={"Origin": "http://localhost:9150"}) as r:
                err = (await r.json())["error"]
                assert r.status == 403 and err["code"] == P.ErrorCode.FORBIDDEN_ORIGIN
                assert want.capitalize()[:40] in err["message"] and "different origins" in err["message"]
                assert "Access-Control-Allow-Origin" not in r.headers
            async with http.get(f"{relay.url}/api/apps/my-site/origin",
                                headers={"Origin": "http://localhost:9150"}) as r:
                assert r.status == 403 and r.headers["Access-Control-Allow-Origin"] == "http://localhost:9150"
                assert (await r.json())["error"]["message"] == err["message"]
        async with http.get(f"{relay.url}/api/apps/my-site/origin", headers={"Origin": "http://127.0.0.1:9150"}) as r:
            assert r.status == 200 and (await r.json()) == {"ok": True, "app_id": "my-site",
                                                            "origin": "http://127.0.0.1:9150"}
        async with http.post(f"{relay.url}/api/apps/my-site/conversations",
                             headers={"Origin": "https://other.example"}) as r:
            assert r.status == 403
        lines = [rec.getMessage() for rec in caplog.records if rec.name == "widget.relay.http.api"]
        assert [line for line in lines if line.startswith(want)] == [lines[0]] and len(lines) == 2, lines
        assert lines[1].startswith("origin https://other.example is not allowed for app my-site")
    finally:
        await relay.stop()


# ---------------------------------------------------------------------------------------------- logs


async def test_a_cut_body_logs_nothing(tmp_path: Path, http: aiohttp.ClientSession,
                                       caplog: pytest.LogCaptureFixture) -> None:
    """The route that was reading a body the limit cut (or a client that left mid-body) logs no traceback."""
    relay = await launch(tmp_path, max_body_bytes=20_000)
    try:
        caplog.set_level(logging.INFO)

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(10):
                yield b" " * 8192

        async with http.post(f"{relay.url}/api/apps/demo/conversations", data=chunks(),
                             headers={"Origin": relay.url, "Content-Type": "application/json"}) as r:
            assert r.status == 413
        # (not asyncio's: another test's unclosed client, collected meanwhile, is reported there)
        assert [rec.getMessage() for rec in caplog.records
                if rec.levelno >= logging.WARNING and rec.name != "asyncio"] == []
    finally:
        await relay.stop()


async def test_a_refused_origin_loading_the_widget_files_is_logged_once(tmp_path: Path, http: aiohttp.ClientSession,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    relay = await launch(tmp_path, apps={"my-site": AppConfig(allowed_origins=["http://127.0.0.1:9150"])})
    try:
        caplog.set_level(logging.WARNING, logger="widget.relay.http.static")
        for origin in ("http://localhost:9150", "http://localhost:9150", "http://127.0.0.1:9150"):
            async with http.get(f"{relay.url}/widget/b123/app.py", headers={"Origin": origin}) as r:
                assert r.status == 200
                assert (r.headers.get("Access-Control-Allow-Origin") == origin) == (origin == "http://127.0.0.1:9150")
        lines = [rec.getMessage() for rec in caplog.records if rec.name == "widget.relay.http.static"]
        assert lines == ["origin http://localhost:9150 is not allowed by any app on this relay; allowed: "
                         "http://127.0.0.1:9150 (a page there cannot load the widget's modules: add the origin to "
                         "its app's allowed origins)"]
    finally:
        await relay.stop()

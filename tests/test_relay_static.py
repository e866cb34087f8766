"""Static files of the build output and the demo page, served by a real relay from a fake dist."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from relay_helpers import SHOP_ORIGIN, launch

pytestmark = pytest.mark.relay


@pytest_asyncio.fixture(scope="module")
async def srv(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    handle = await launch(tmp_path_factory.mktemp("static"))
    yield handle
    await handle.stop()


@pytest_asyncio.fixture(scope="module")
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(auto_decompress=False) as s:
        yield s


async def test_wasm_gzip_immutable_and_304(srv: Any, http: aiohttp.ClientSession) -> None:
    url = f"{srv.url}/widget/b123/pyodide/pyodide.asm.wasm"
    r = await http.get(url, headers={"Accept-Encoding": "gzip"})
    assert r.status == 200
    assert r.headers["Content-Type"] == "application/wasm"
    assert r.headers["Content-Encoding"] == "gzip"
    assert r.headers["Cache-Control"] == "public, max-age=31536000, immutable"
    raw = (srv.config.dist_dir / "b123/pyodide/pyodide.asm.wasm").read_bytes()
    assert gzip.decompress(await r.read()) == raw
    etag = r.headers["ETag"]
    r2 = await http.get(url, headers={"Accept-Encoding": "gzip", "If-None-Match": etag})
    assert r2.status == 304 and await r2.read() == b""
    plain = await http.get(url, headers={"Accept-Encoding": "identity"})
    assert "Content-Encoding" not in plain.headers and await plain.read() == raw
    assert plain.headers["ETag"] != etag
    head = await http.head(url, headers={"Accept-Encoding": "gzip"})
    assert head.status == 200 and head.headers["Content-Encoding"] == "gzip"


async def test_loader_no_cache_and_mime(srv: Any, http: aiohttp.ClientSession) -> None:
    r = await http.get(f"{srv.url}/widget/autopilot.js", headers={"Accept-Encoding": "gzip"})
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/javascript")
    assert r.headers["Cache-Control"] == "no-cache" and r.headers["Content-Encoding"] == "gzip"
    r = await http.get(f"{srv.url}/widget/manifest.json")
    assert r.headers["Content-Type"].startswith("application/json") and r.headers["Cache-Control"] == "no-cache"
    r = await http.get(f"{srv.url}/widget/b123/app.py")
    assert r.headers["Content-Type"].startswith("text/plain")


async def test_incompressible_zip_is_sent_as_is(srv: Any, http: aiohttp.ClientSession) -> None:
    r = await http.get(f"{srv.url}/widget/b123/pyodide/random.zip", headers={"Accept-Encoding": "gzip"})
    assert r.status == 200 and r.headers["Content-Type"] == "application/zip"
    assert "Content-Encoding" not in r.headers  # saves < 10 %


@pytest.mark.parametrize("path", ["../secret.txt", "..%2fsecret.txt", "b123/../../secret.txt", "%2e%2e/secret.txt",
                                  "b123/pyodide/", "nope.js", ".hidden"])
async def test_no_traversal(srv: Any, http: aiohttp.ClientSession, path: str) -> None:
    r = await http.get(f"{srv.url}/widget/{path}")
    assert r.status == 404
    assert b"outside" not in await r.read()


async def test_demo_page_and_cors(srv: Any, http: aiohttp.ClientSession) -> None:
    r = await http.get(f"{srv.url}/", headers={"Accept-Encoding": "identity"})
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/html")
    assert b"<title>demo</title>" in await r.read()
    r = await http.get(f"{srv.url}/widget/autopilot.js", headers={"Origin": SHOP_ORIGIN})
    assert r.headers["Access-Control-Allow-Origin"] == SHOP_ORIGIN
    r = await http.get(f"{srv.url}/widget/autopilot.js", headers={"Origin": "https://evil.example"})
    assert "Access-Control-Allow-Origin" not in r.headers


async def test_relay_starts_without_dist(tmp_path: Path, http: aiohttp.ClientSession,
                                         caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "_dist").mkdir()  # placeholder so the helper does not build a fake one
    h = await launch(tmp_path, dist_dir=tmp_path / "missing")
    try:
        assert any("does not exist" in r.getMessage() for r in caplog.records)
        r = await http.get(f"{h.url}/")
        assert r.status == 404 and "python build.py" in await r.text()
        r = await http.post(f"{h.url}/api/apps/demo/conversations", headers={"Origin": h.url})
        assert r.status == 201
    finally:
        await h.stop()

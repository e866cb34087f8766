"""The contract says what the relay enforces (issue 31, item 7).

The relay refuses what the schemas refuse (the schemas' limits themselves, and openapi.json's
``GET /api/protocol/{name}``, are checked without a relay in tests/test_protocol_schemas.py); the relay serves the
protocol documents, and asyncapi.json passes the AsyncAPI Initiative's schema (an npm tarball fetched into the build
cache, hence not a unit test); client timings are stored only when they are finite numbers from 0 to an hour; a
store failure is ``unavailable`` on the socket as over HTTP; in the conformance suite a skipped flow is never a pass
and ``function_timeout`` checks the figure it names."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import tarfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import pytest
import pytest_asyncio
from relay_helpers import joined, launch, register
from support import free_port, stop_process

from widget import protocol as P
from widget.conformance import Options, run_suite
from widget.protocol import names
from widget.relay.http import contract as C

pytestmark = pytest.mark.relay

ROOT = Path(__file__).resolve().parent.parent


@pytest_asyncio.fixture(scope="module")
async def relay(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    handle = await launch(tmp_path_factory.mktemp("edges-contract"), function_call_timeout_s=1.0)
    yield handle
    await handle.stop()


async def test_the_relay_refuses_what_the_schemas_refuse(relay: Any, http: aiohttp.ClientSession) -> None:
    rec, _, _ = await joined(http, relay.url)
    try:
        for event, payload, code in [
            ("activate", "now", P.ErrorCode.BAD_REQUEST),
            ("replay", {"last_seq": None}, P.ErrorCode.BAD_REQUEST),
            ("user_message", {"text": "x" * 16_001, "idempotency_key": "k1"}, P.ErrorCode.MESSAGE_TOO_LONG),
            ("user_message", {"text": "", "idempotency_key": "k2"}, P.ErrorCode.BAD_REQUEST),
        ]:
            ack = await rec.call(event, payload)
            assert ack["ok"] is False and ack["error"]["code"] == code, (event, ack)
        assert (await rec.call("activate", {}))["ok"]
        async with http.get(f"{relay.url}/api/protocol/openapi.json") as r:
            assert r.status == 200 and "/api/protocol/{name}" in (await r.json())["paths"]
    finally:
        await rec.disconnect()


async def test_client_timings_out_of_range_are_not_stored(relay: Any, http: aiohttp.ClientSession) -> None:
    """``total_ms: -5``, ``duration_ms: 1e308`` or infinity are stored (and shown, and counted in the stats) as null."""
    rec, data, _ = await joined(http, relay.url)
    cid = data["conversation"]["id"]
    cases = [((-5, 1e308), (None, None)), ((float("inf"), 3.5), (None, 3.5)), ((2.5, 3.5), (2.5, 3.5))]
    try:
        await register(rec, "get_selection")
        for i, ((total, handler), expected) in enumerate(cases):
            mark = len(rec.events)
            assert (await rec.call("user_message", {"text": "get_selection", "idempotency_key": f"m{i}"}))["ok"]
            begin = await rec.wait("function_call.begin", lambda d: d.get("run") is True, start=mark)
            ack = await rec.call("function_response", {"id": begin["id"], "status": "success", "result": "ok",
                                                       "total_ms": total, "duration_ms": handler,
                                                       "idempotency_key": f"r{i}"})
            assert ack == {"ok": True}
            end = await rec.wait("function_call.end", start=mark)
            assert (end["total_ms"], end["duration_ms"]) == expected
            stored = await relay.hub.store.get_call(cid, begin["id"])
            assert (stored["total_ms"], stored["duration_ms"]) == expected
            await rec.wait("user_input", start=mark)
    finally:
        await rec.disconnect()


async def test_a_store_failure_is_unavailable_on_the_socket_too(
        relay: Any, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch) -> None:
    rec, _, _ = await joined(http, relay.url)
    try:
        async def failing(*args: Any, **kwargs: Any) -> Any:
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(relay.hub.store, "get_ack", failing)
        ack = await rec.call("user_message", {"text": "hello", "idempotency_key": "s1"})
        assert ack["ok"] is False and ack["error"]["code"] == P.ErrorCode.UNAVAILABLE, ack
    finally:
        monkeypatch.undo()
        await rec.disconnect()


async def test_function_timeout_checks_the_figure_it_names(relay: Any) -> None:
    """The relay times calls out after 1 s: the flow passes when told 1 s, and fails when told 3 s."""
    [right] = await run_suite([relay.url], "demo", options=Options(call_timeout_s=1.0), only=["function_timeout"])
    assert right.ok, right.detail
    [wrong] = await run_suite([relay.url], "demo", options=Options(call_timeout_s=3.0), only=["function_timeout"])
    assert wrong.outcome == "failed" and "within 3 s" in wrong.detail


def test_a_skipped_flow_is_not_a_pass(tmp_path: Path) -> None:
    """``--only ask_user`` against a plain file server: skipped, exit status 2, never "1/1 flows passed"."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                              cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        base = [sys.executable, "-m", "widget.conformance", "--relay", f"http://127.0.0.1:{port}", "--app", "demo"]
        out = subprocess.run([*base, "--only", "ask_user"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                             check=False)
        assert out.returncode == 2, out.stdout + out.stderr
        assert "SKIP ask_user" in out.stdout and "0/1 flows passed, 1 skipped" in out.stdout
        out = subprocess.run([*base, "--only", "http"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                             check=False)
        assert out.returncode == 1 and "FAIL http" in out.stdout, out.stdout
    finally:
        stop_process(server)


#: The AsyncAPI Initiative's JSON Schema of AsyncAPI documents (npm package), pinned by its tarball's hash.
ASYNCAPI_SPECS = ("@asyncapi/specs", "6.11.1", "01af8744dc33c0c7eb2e908f6a955319ee58b70ecadc9387d1aeb16c0cd28928")


def asyncapi_meta_schema() -> dict[str, Any]:
    """The AsyncAPI 3.0.0 document schema, from the pinned npm tarball (fetched once into the build cache)."""
    name, version, sha = ASYNCAPI_SPECS
    cache = Path(os.environ.get("AUTOPILOT_BUILD_CACHE", ROOT / ".build-cache")) / "test-downloads"
    cache.mkdir(parents=True, exist_ok=True)
    tgz = cache / f"asyncapi-specs-{version}.tgz"
    if not tgz.exists():
        subprocess.run(
            ["npm", "pack", f"{name}@{version}", "--pack-destination", str(cache)],
            check=True,
            capture_output=True,
            timeout=300,
        )
    assert hashlib.sha256(tgz.read_bytes()).hexdigest() == sha, f"{tgz} is not the pinned {name}@{version}"
    with tarfile.open(tgz) as tar:
        member = tar.extractfile("package/schemas/3.0.0-without-$id.json")
        assert member is not None
        return json.load(member)


def test_asyncapi_document_passes_its_validator() -> None:
    validator = jsonschema.Draft7Validator(asyncapi_meta_schema())
    doc = C.asyncapi()
    assert [e.message for e in validator.iter_errors(doc)] == []
    assert doc["asyncapi"] == "3.0.0"
    assert set(doc["operations"]) == {e.value.replace(".", "_") for e in names.Event}
    assert doc["operations"]["join"]["action"] == "receive" and "reply" in doc["operations"]["join"]
    assert doc["operations"]["completion_ended"]["action"] == "send"
    # The validator is not vacuous: a document without its required parts fails.
    broken = copy.deepcopy(doc)
    del broken["info"]
    broken["operations"]["join"]["action"] = "publish"
    assert len(list(validator.iter_errors(broken))) >= 2


async def test_relay_serves_the_documents(relay: Any) -> None:
    async with aiohttp.ClientSession() as http:
        for name, doc in C.documents().items():
            r = await http.get(f"{relay.url}{C.DOCS_PATH}/{name}")
            assert r.status == 200 and r.headers["Content-Type"].startswith("application/json")
            assert r.headers["Access-Control-Allow-Origin"] == "*"
            assert await r.text() == C.dump(doc)
        r = await http.get(f"{relay.url}{C.DOCS_PATH}/nope.json")
        assert r.status == 404 and (await r.json())["error"]["code"] == "not_found"

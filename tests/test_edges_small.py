"""Errors that say what is wrong, and small ones (issue 31, items 6 and 8), on a real relay.

A wrong app id from another origin gets an answer the page can read (its preflight passes, the 404 names the app);
a refused origin is not told the allowed ones (the operator's log names them); a lone surrogate in a feedback
comment is refused like everywhere else; the demo page is served only with the demo app; the stats endpoint answers
an unknown app as it answers a known one without credentials; the demo model names every callable function;
SQLite's side files are ignored by git."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from relay_helpers import SHOP_ORIGIN, SHOP_SECRET, info, joined, launch, register

from widget import protocol as P
from widget.relay.config import AppConfig

pytestmark = pytest.mark.relay

ROOT = Path(__file__).resolve().parent.parent
PAGE = "https://page.example"
OTHER = "https://other-page.example"  # (a refused origin is logged once a minute per app)


@pytest_asyncio.fixture(scope="module")
async def relay(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    handle = await launch(tmp_path_factory.mktemp("edges-small"))
    yield handle
    await handle.stop()



async def test_a_wrong_app_is_told_in_a_way_the_page_can_read(relay: Any, http: aiohttp.ClientSession) -> None:
    url = f"{relay.url}/api/apps/no-such-app/conversations"
    async with http.options(url, headers={"Origin": PAGE, "Access-Control-Request-Method": "POST",
                                          "Access-Control-Request-Headers": "content-type"}) as r:
        assert r.status == 204 and r.headers["Access-Control-Allow-Origin"] == PAGE
    async with http.post(url, json={}, headers={"Origin": PAGE}) as r:
        body = await r.json()
        assert r.status == 404 and r.headers["Access-Control-Allow-Origin"] == PAGE
        assert body["error"]["code"] == P.ErrorCode.NOT_FOUND and "'no-such-app'" in body["error"]["message"]
    # A real app still refuses a foreign origin's preflight.
    async with http.options(f"{relay.url}/api/apps/shop/conversations",
                            headers={"Origin": PAGE, "Access-Control-Request-Method": "POST"}) as r:
        assert r.status == 403 and "Access-Control-Allow-Origin" not in r.headers


async def test_a_refused_origin_is_not_told_the_allowed_ones(relay: Any, http: aiohttp.ClientSession,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="widget.relay.http.api")
    async with http.post(f"{relay.url}/api/apps/shop/conversations", json={}, headers={"Origin": OTHER}) as r:
        err = (await r.json())["error"]
    assert r.status == 403 and err["code"] == P.ErrorCode.FORBIDDEN_ORIGIN
    assert err["message"] == f"Origin {OTHER} is not allowed for app shop."
    assert SHOP_ORIGIN not in err["message"]
    async with http.get(f"{relay.url}/api/apps/shop/origin", headers={"Origin": OTHER}) as r:
        assert (await r.json())["error"]["message"] == err["message"]
    logged = [rec.getMessage() for rec in caplog.records if rec.name == "widget.relay.http.api"]
    assert any(f"allowed: {SHOP_ORIGIN}" in line for line in logged), logged


async def test_a_lone_surrogate_in_a_feedback_comment_is_refused(relay: Any, http: aiohttp.ClientSession) -> None:
    rec, data, url = await joined(http, relay.url)
    try:
        assert (await rec.call("user_message", {"text": "hello", "idempotency_key": "m1"}))["ok"]
        ended = await rec.wait("completion.ended")
        answer = ended["message"]["id"]
        await rec.wait("user_input")
        body = '{"message_id": "%s", "rating": "up", "comment": "fine \\ud800 thanks"}' % answer
        async with http.post(f"{url}/feedback", data=body, headers={"Content-Type": "application/json",
                                                                     "Origin": relay.url}) as r:
            out = await r.json()
        assert (
            r.status == 400
            and out["error"]["code"] == P.ErrorCode.BAD_REQUEST
            and "surrogate" in out["error"]["message"]
        )
        assert "feedback" not in await info(http, url)  # nothing stored
    finally:
        await rec.disconnect()


async def test_stats_answer_an_unknown_app_as_a_known_one_without_credentials(
        relay: Any, http: aiohttp.ClientSession) -> None:
    answers = []
    for app, secret in (("no-such-app", SHOP_SECRET), ("shop", None), ("shop", "wrong"), ("demo", "anything")):
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        async with http.get(f"{relay.url}/api/apps/{app}/stats", headers=headers) as r:
            answers.append((r.status, await r.json()))
    assert all(a == answers[0] for a in answers) and answers[0][0] == 401, answers
    async with http.get(f"{relay.url}/api/apps/shop/stats", headers={"Authorization": f"Bearer {SHOP_SECRET}"}) as r:
        assert r.status == 200


async def test_the_demo_model_names_every_function(relay: Any, http: aiohttp.ClientSession) -> None:
    rec, _, _ = await joined(http, relay.url)
    names = [f"fn_{i:02d}" for i in range(20)]
    try:
        await register(rec, *names)
        assert (await rec.call("user_message", {"text": "what can you call?", "idempotency_key": "q"}))["ok"]
        text = (await rec.wait("completion.ended"))["message"]["content"]
        assert all(f"`{n}`" in text for n in names), text
    finally:
        await rec.disconnect()


async def test_the_demo_page_only_with_the_demo_app(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    other = await launch(tmp_path, apps={"shop": AppConfig(allowed_origins=[SHOP_ORIGIN], secret=SHOP_SECRET)})
    try:
        async with http.get(f"{other.url}/") as r:
            assert r.status == 404 and "needs the app 'demo'" in await r.text()
        async with http.get(f"{other.url}/api/conversations/c_x") as r:
            assert r.status == 404  # the API still answers
    finally:
        await other.stop()


async def test_the_demo_page_with_the_demo_app(relay: Any, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{relay.url}/") as r:
        assert r.status == 200 and "<title>demo</title>" in await r.text()


def test_sqlite_side_files_are_ignored() -> None:
    paths = ["autopilot-relay.sqlite3", "autopilot-relay.sqlite3-wal", "autopilot-relay.sqlite3-shm"]
    out = subprocess.run(["git", "check-ignore", *paths], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.stdout.split() == paths

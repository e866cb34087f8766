"""Ratings of answers and the site owner's figures, over a real relay (SQLite and PostgreSQL).

A scripted set of conversations (answers, a page function that succeeds, one that times out, a model error, a
conversation of another app) is rated through ``POST .../feedback`` and then counted by ``GET /api/apps/{id}/stats``
and ``autopilot-relay stats``: the numbers match the script, the output holds no argument, context, message text or
conversation id, and the endpoint refuses a request without the app's secret.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from relay_helpers import FUNC, STORE_KINDS, Recorder, ScriptedModel, declare, info, launch

from widget.relay.config import AppConfig, ModelConfig
from widget.relay.models.base import ModelError, TextDelta, ToolCall, Usage

pytestmark = pytest.mark.relay

SITE_SECRET = "site-secret-0123456789abcdef"
OTHER_SECRET = "other-secret-0123456789abcdef"
ARG_SECRET = "ARG-SECRET-4711"
CTX_SECRET = "CTX-SECRET-0815"
USER_TEXT = "USER-TEXT-1234"


@pytest_asyncio.fixture(scope="module")
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest_asyncio.fixture(scope="module", params=STORE_KINDS)
async def scripted(
    request: Any, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Any, ScriptedModel, Path]]:
    model = ScriptedModel()
    tmp = tmp_path_factory.mktemp("insight")
    h = await launch(
        tmp,
        adapters={"script": model},
        store=request.param,
        apps={
            "site": AppConfig(model="script", secret=SITE_SECRET),
            "other": AppConfig(model="script", secret=OTHER_SECRET),
            "open": AppConfig(model="script"),
        },
        models={"demo": ModelConfig(chunk_delay_ms=0), "script": ModelConfig(chunk_delay_ms=0)},
    )
    yield h, model, tmp
    await h.stop()


async def new_conversation(http: aiohttp.ClientSession, base: str, app: str, secret: str) -> tuple[Recorder, str, str]:
    r = await http.post(f"{base}/api/apps/{app}/conversations", headers={"Authorization": f"Bearer {secret}"})
    assert r.status == 201, await r.text()
    url = (await r.json())["url"]
    data = await info(http, url)
    rec = await Recorder(data["relay_url"], data["relay_path"]).connect()
    assert (await rec.join(data["token"], 0))["ok"]
    await rec.wait("state")
    return rec, url, data["conversation"]["id"]


async def turn(rec: Recorder, text: str, key: str) -> None:
    start = len(rec.events)
    ack = await rec.call("user_message", {"text": text, "idempotency_key": key})
    assert ack["ok"], ack
    await rec.wait("completion.finished", start=start, timeout=15)


async def rate(http: aiohttp.ClientSession, url: str, body: Any, origin: str | None = None) -> tuple[int, Any]:
    headers = {"Origin": origin} if origin else {}
    r = await http.post(f"{url}/feedback", json=body, headers=headers)
    return r.status, await r.json()


async def stats(http: aiohttp.ClientSession, base: str, app: str, secret: str | None, **query: Any) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    r = await http.get(f"{base}/api/apps/{app}/stats", params={k: str(v) for k, v in query.items()}, headers=headers)
    return r.status, await r.json()


async def cli(env: dict[str, str], cwd: Path, *args: str) -> tuple[int, str, str]:
    """``autopilot-relay stats ARGS`` as its own process: exit code, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "widget.relay",
        "stats",
        *args,
        env=env,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, out.decode(), err.decode()


def answers(body: dict[str, Any]) -> list[str]:
    return [m["id"] for m in body["messages"] if m["role"] == "assistant"]


def roles(*bodies: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for b in bodies:
        for m in b["messages"]:
            out[m["role"]] = out.get(m["role"], 0) + 1
    return dict(sorted(out.items()))


async def test_feedback_and_stats_match_a_scripted_set(
    scripted: tuple[Any, ScriptedModel, Path], http: aiohttp.ClientSession
) -> None:
    relay, model, tmp = scripted
    base = relay.url
    t0 = time.time()
    # Conversation A: a plain answer, then a page function that succeeds (its arguments and the context are secret).
    a, url_a, cid_a = await new_conversation(http, base, "site", SITE_SECRET)
    await declare(a, {"get_selection": {k: v for k, v in FUNC.items() if k != "name"}})
    ack = await a.call(
        "state_patch",
        {"patch": [{"op": "add", "path": "/autopilot/context/account", "value": CTX_SECRET}], "idempotency_key": "ctx"},
    )
    assert ack == {"ok": True}
    a.auto_answer = lambda call: "the selection"
    model.script([TextDelta("hello"), Usage(input_tokens=100, output_tokens=5)])
    await turn(a, USER_TEXT, "m1")
    model.script([ToolCall("get_selection", {"passcode": ARG_SECRET}), Usage(120, 10, cached_input_tokens=64)],
                 [TextDelta("done"), Usage(150, 3)])
    await turn(a, "second", "m2")
    mid = time.time()
    # Conversation B: a page function nobody answers (times out), then the model fails.
    b, url_b, cid_b = await new_conversation(http, base, "site", SITE_SECRET)
    await declare(b, {"slow_fn": {k: v for k, v in FUNC.items() if k != "name"}})
    model.script([ToolCall("slow_fn", {"passcode": ARG_SECRET})],
                 [ModelError("model_rate_limited", "The model is busy.")])
    await turn(b, "third", "m3")
    # Conversation C: another app, never counted for "site".
    c, url_c, _ = await new_conversation(http, base, "other", OTHER_SECRET)
    model.script([TextDelta("elsewhere"), Usage(999, 999)])
    await turn(c, "fourth", "m4")

    body_a, body_b = await info(http, url_a), await info(http, url_b)
    ans_a, ans_b = answers(body_a), answers(body_b)
    assert len(ans_a) == 3 and len(ans_b) == 1 and "feedback" not in body_a

    # --- feedback: stored with its turn, idempotent, changeable, an event for the page, restored by a GET
    status, out = await rate(http, url_a, {"message_id": ans_a[0], "rating": "up", "comment": "  great answer "})
    assert status == 200 and out["feedback"]["rating"] == "up" and out["feedback"]["comment"] == "great answer"
    first = out["feedback"]
    started = [d for e, d in a.events if e == "completion.started" and d["message_id"] == ans_a[0]]
    assert first["turn_id"] == started[0]["turn_id"]
    ev = await a.wait("feedback")
    assert ev == first
    status, again = await rate(http, url_a, {"message_id": ans_a[0], "rating": "up", "comment": "great answer"})
    assert status == 200 and again["feedback"] == first  # the same rating again: nothing changes
    status, out = await rate(http, url_a, {"message_id": ans_a[2], "rating": "down"})
    assert status == 200 and out["feedback"]["comment"] is None
    status, changed = await rate(http, url_a, {"message_id": ans_a[2], "rating": "up", "comment": "better now"})
    assert status == 200 and changed["feedback"]["rating"] == "up"
    await a.wait("feedback", pred=lambda d: d["comment"] == "better now")
    assert [d["message_id"] for e, d in a.events if e == "feedback"] == [ans_a[0], ans_a[2], ans_a[2]]
    status, out = await rate(http, url_b, {"message_id": ans_b[0], "rating": "down", "comment": "wrong"})
    assert status == 200
    status, out = await rate(http, url_a, {"message_id": ans_a[1], "rating": "down"})
    status, out = await rate(http, url_a, {"message_id": ans_a[1], "rating": None})  # taken back
    assert status == 200 and out["feedback"]["rating"] is None
    restored = (await info(http, url_a))["feedback"]
    assert [(f["message_id"], f["rating"], f["comment"]) for f in restored] == [
        (ans_a[0], "up", "great answer"),
        (ans_a[2], "up", "better now"),
    ]
    # refused: not an answer, another conversation's answer, bad rating, a long comment, a foreign origin
    user_msg = next(m["id"] for m in body_a["messages"] if m["role"] == "user")
    assert (await rate(http, url_a, {"message_id": user_msg, "rating": "up"}))[0] == 404
    assert (await rate(http, url_a, {"message_id": ans_b[0], "rating": "up"}))[0] == 404
    assert (await rate(http, url_a, {"message_id": ans_a[0], "rating": "meh"}))[0] == 400
    assert (await rate(http, url_a, {"message_id": ans_a[0]}))[0] == 400
    status, out = await rate(http, url_a, {"message_id": ans_a[0], "rating": "up", "comment": "x" * 2001})
    assert status == 400 and "2000" in out["error"]["message"]
    assert (await rate(http, url_a, {"message_id": ans_a[0], "rating": "down"}, origin="https://evil.example"))[
        0
    ] == 403
    r = await http.post(f"{url_a}/feedback", data="message_id=x", headers={"Content-Type": "text/plain"})
    assert r.status == 415

    # --- the stats: refused without the app's secret
    assert (await stats(http, base, "site", None))[0] == 401
    assert (await stats(http, base, "site", OTHER_SECRET))[0] == 401
    status, out = await stats(http, base, "open", "anything")
    assert status == 401 and "without a secret in the relay config has none" in out["error"]["message"]
    # an unknown app is answered as a known one without credentials: nobody learns which app ids exist
    assert await stats(http, base, "nope", SITE_SECRET) == await stats(http, base, "site", None)
    assert (await stats(http, base, "site", SITE_SECRET, since="yesterday"))[0] == 400
    until = time.time() + 1
    status, out = await stats(http, base, "site", SITE_SECRET, since=t0 - 1, until=until)
    assert status == 200, out
    assert out["app_id"] == "site" and out["period"] == {"since": t0 - 1, "until": until}
    assert out["conversations"] == 2
    assert out["messages"] == roles(body_a, body_b)
    assert out["messages"]["user"] == 3 and out["messages"]["error"] == 1
    assert out["model_errors"] == {"model_rate_limited": 1}
    ans = out["answers"]
    assert (ans["answers"], ans["thumbs_up"], ans["thumbs_down"]) == (4, 2, 1)
    assert [(c["rating"], c["comment"]) for c in ans["comments"]] == [
        ("up", "great answer"),
        ("up", "better now"),
        ("down", "wrong"),
    ]
    fn = out["calls"]["function"]
    assert (fn["calls"], fn["succeeded"], fn["failed"], fn["success_rate"]) == (2, 1, 1, 0.5)
    assert fn["by_name"]["get_selection"]["success_rate"] == 1.0 and fn["by_name"]["slow_fn"]["success_rate"] == 0.0
    # the recorder answers with duration_ms 1.25 and total_ms 1.5; a timed-out call has no times
    assert fn["duration_ms"] == {"p50_ms": 1.25, "p95_ms": 1.25}
    assert fn["total_ms"] == {"p50_ms": 1.5, "p95_ms": 1.5}
    assert out["calls"]["tool"]["calls"] == 0 and out["calls"]["tool"]["success_rate"] is None
    # tokens: A's three rounds as the model reported them (B's rounds reported none, C is another app)
    counts = {"rounds": 3, "input_tokens": 370, "output_tokens": 18, "cached_input_tokens": 64, "reasoning_tokens": 0}
    assert out["tokens"] == {**counts, "by_model": {"script": counts}}
    text = json.dumps(out)
    for secret in (ARG_SECRET, CTX_SECRET, USER_TEXT, "the selection", "hello", cid_a, cid_b, "passcode"):
        assert secret not in text, secret
    # the period: only conversation A was started before ``mid``; ratings came later
    status, early = await stats(http, base, "site", SITE_SECRET, until=mid)
    assert status == 200 and early["conversations"] == 1 and early["period"]["since"] is None
    assert early["messages"]["user"] == 2 and "error" not in early["messages"]
    assert early["calls"]["function"]["calls"] == 1 and early["answers"]["thumbs_up"] == 0
    status, other = await stats(http, base, "other", OTHER_SECRET)
    assert status == 200 and other["conversations"] == 1 and other["answers"]["answers"] == 1

    # --- the CLI reads the same store and prints the same figures
    env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
    cfg = relay.hub.config
    store_args = ["--database-url", cfg.database_url] if cfg.database_url else ["--db", cfg.db_path]
    code, stdout, _ = await cli(env, tmp, *store_args, "--app", "site", "--since", str(t0 - 1), "--until", str(until))
    assert code == 0, stdout
    assert json.loads(stdout) == [out]
    code, _, stderr = await cli(env, tmp, *store_args, "--since", "soon")
    assert code == 2 and "--since" in stderr

    # --- deleting a conversation deletes its ratings
    assert (await http.delete(url_a)).status == 204
    status, after = await stats(http, base, "site", SITE_SECRET, since=t0 - 1, until=until)
    assert after["conversations"] == 1 and after["answers"]["thumbs_up"] == 0
    assert [c["comment"] for c in after["answers"]["comments"]] == ["wrong"]
    for rec in (a, b, c):
        await rec.disconnect()

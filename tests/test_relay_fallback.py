"""An app's fallback model and the turn's usage, over a real relay: the fallback answers only when the app's model
is away (``model_unavailable``, ``model_rate_limited``) before its response carried anything, and the turn log says
which model answered each round, what each round cost and when the fallback took over."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from relay_helpers import SHOP_SECRET, ScriptedModel, joined, launch, register, turn_log_line

from widget.protocol import TurnErrorCode
from widget.relay.config import AppConfig, ModelConfig
from widget.relay.models.base import ModelError, TextDelta, ToolCall, Usage

pytestmark = pytest.mark.relay

DOWN = ModelError(TurnErrorCode.MODEL_UNAVAILABLE, "The model provider is down or overloaded.")
BUSY = ModelError(TurnErrorCode.MODEL_RATE_LIMITED, "The model provider is rate limiting requests.", retry_after=7)
AUTH = ModelError(TurnErrorCode.MODEL_AUTH, "The relay's model API key was refused by the provider.", retryable=False)


@pytest_asyncio.fixture(scope="module")
async def relay(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Any, ScriptedModel, ScriptedModel]]:
    primary, backup = ScriptedModel(), ScriptedModel()
    h = await launch(tmp_path_factory.mktemp("fallback"), adapters={"primary": primary, "backup": backup},
                     apps={"demo": AppConfig(model="primary", fallback_model="backup"),
                           "alone": AppConfig(model="primary", secret=SHOP_SECRET)},
                     models={"demo": ModelConfig(chunk_delay_ms=0), "primary": ModelConfig(chunk_delay_ms=0),
                             "backup": ModelConfig(chunk_delay_ms=0)})
    yield h, primary, backup
    await h.stop()


async def ask(h: Any, text: str, app: str = "demo") -> tuple[list[tuple[str, Any]], str]:
    """One turn of a new conversation: its events and the conversation id."""
    async with aiohttp.ClientSession() as http:
        rec, data, _ = await joined(http, h.url, app)
        await register(rec, "get_selection")
        rec.auto_answer = lambda call: "the selection"
        await rec.call("user_message", {"text": text, "idempotency_key": "m"})
        await rec.wait("completion.finished", timeout=15)
        await rec.disconnect()
        return rec.events, data["conversation"]["id"]


def answer(events: list[tuple[str, Any]]) -> str:
    return str([d for e, d in events if e == "completion.ended"][-1]["message"]["content"])


@pytest.fixture(autouse=True)
def fresh(relay: tuple[Any, ScriptedModel, ScriptedModel], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="widget.relay.turns")
    for model in relay[1:]:
        model.reset()


@pytest.mark.parametrize("failure", [DOWN, BUSY], ids=["unavailable", "rate-limited"])
async def test_the_fallback_answers_when_the_model_is_away(relay: tuple[Any, ScriptedModel, ScriptedModel],
                                                           caplog: pytest.LogCaptureFixture,
                                                           failure: ModelError) -> None:
    h, primary, backup = relay
    primary.script([failure])
    backup.script([ToolCall("get_selection", {}), Usage(input_tokens=50, output_tokens=4)],
                  [TextDelta("From the backup: the selection."), Usage(input_tokens=80, output_tokens=7)])
    events, cid = await ask(h, "what is selected?")
    assert answer(events) == "From the backup: the selection."
    assert not [d for e, d in events if e == "message" and d["message"]["role"] == "error"]
    # the fallback goes on for the turn's later rounds: the app's model was asked once
    assert (len(primary.requests), len(backup.requests)) == (1, 2)
    line = await turn_log_line(caplog, cid)
    assert line["status"] == "done" and line["model"] == "backup"
    assert line["fallback"] == {"step": 0, "primary": "primary", "fallback": "backup", "code": str(failure.code)}
    assert [(u["step"], u["model"], u["input_tokens"], u["output_tokens"]) for u in line["usage"]] == [
        (0, "backup", 50, 4), (1, "backup", 80, 7)]
    assert line["tokens"] == {"input_tokens": 130, "output_tokens": 11}


async def test_no_fallback_after_the_answer_started(relay: tuple[Any, ScriptedModel, ScriptedModel],
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """Text already reached the reader: a second model would answer a half-answered question, so the turn fails."""
    h, primary, backup = relay
    primary.script([TextDelta("The answer is"), DOWN])
    events, cid = await ask(h, "what is selected?")
    errors = [d["message"] for e, d in events if e == "message" and d["message"]["role"] == "error"]
    assert [(m["code"], m["retryable"]) for m in errors] == [("model_unavailable", True)]
    assert backup.requests == []
    line = await turn_log_line(caplog, cid)
    assert line["status"] == "failed" and "fallback" not in line and line["model"] == "primary"


@pytest.mark.parametrize("app, failure", [("demo", AUTH), ("alone", DOWN)], ids=["not-a-fallback-error", "no-fallback"])
async def test_other_errors_and_apps_without_a_fallback_fail_as_before(relay: tuple[Any, ScriptedModel, ScriptedModel],
                                                                       app: str, failure: ModelError) -> None:
    h, primary, backup = relay
    primary.script([failure])
    events, _ = await ask(h, "hello", app)
    errors = [d["message"] for e, d in events if e == "message" and d["message"]["role"] == "error"]
    assert [m["code"] for m in errors] == [str(failure.code)]
    assert backup.requests == []


async def test_a_rate_limit_says_when_to_try_again(relay: tuple[Any, ScriptedModel, ScriptedModel]) -> None:
    """The provider's retry-after reaches the reader's error message (``retry_after``, seconds)."""
    h, primary, _ = relay
    primary.script([BUSY])
    events, _ = await ask(h, "hello", "alone")
    error = [d["message"] for e, d in events if e == "message" and d["message"]["role"] == "error"][-1]
    assert (error["code"], error["retryable"], error["retry_after"]) == ("model_rate_limited", True, 7)

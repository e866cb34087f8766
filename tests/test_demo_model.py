"""The demo model's grammar (docs/demo-model.md) and the stream guard every model runs through."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from widget.protocol import TurnErrorCode
from widget.relay.models.base import Chunk, ModelError, ModelRequest, StreamLimits, TextDelta, ToolCall, guarded
from widget.relay.models.demo import DemoModel, fill
from widget.relay.tools import offer_actions_spec

pytestmark = pytest.mark.unit

WEATHER = {"name": "get_weather", "description": "Weather for a city.", "parameters": {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"}},
    "required": ["city"]}}
SELECTION = {"name": "get_selection", "description": "The selection.",
             "parameters": {"type": "object", "properties": {}}}
ASK = {"name": "ask_user", "description": "", "parameters": {}}


async def answer(text: str, tools: list[dict[str, Any]], attempt: int = 0) -> tuple[str, list[ToolCall]]:
    req = ModelRequest(messages=[{"role": "user", "content": text}], tools=tools, attempt=attempt)
    chunks = [c async for c in DemoModel(chunk_delay_ms=0).stream(req)]
    return "".join(c.text for c in chunks if isinstance(c, TextDelta)), [c for c in chunks if isinstance(c, ToolCall)]


@pytest.mark.parametrize("text, args", [
    ('get_weather {"city": "Oslo", "days": 2}', {"city": "Oslo", "days": 2}),
    ("get_weather city=Oslo days=3 metric=yes", {"city": "Oslo", "days": 3, "metric": True}),
    ('get_weather for city: "New York"', {"city": "New York"}),
])
async def test_a_named_function_is_called_with_the_arguments_the_message_gives(text: str, args: dict[str, Any]) -> None:
    said, calls = await answer(text, [WEATHER, SELECTION])
    assert calls == [ToolCall("get_weather", args)]
    assert said == "Calling `get_weather` on the page."


async def test_a_missing_required_argument_is_named_and_nothing_is_called() -> None:
    said, calls = await answer("what is the get_weather like", [WEATHER])
    assert calls == []
    assert "`city` (string)" in said and "get_weather" in said


async def test_a_value_of_the_wrong_type_is_named() -> None:
    said, calls = await answer("get_weather city=Oslo days=many", [WEATHER])
    assert calls == [] and "`days` (integer)" in said


async def test_a_function_without_required_arguments_is_called_with_none() -> None:
    said, calls = await answer("get_selection and get_weather", [WEATHER, SELECTION])
    assert calls == [ToolCall("get_selection", {})]
    assert said.startswith("Calling `get_selection` on the page.") and "`city`" in said


def test_strict_optional_properties_are_not_missing() -> None:
    strict = {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": ["integer", "null"]}},
              "required": ["q", "n"]}
    assert fill(strict, "q=x", None).ok
    assert fill(strict, "nothing", None).missing == ["`q` (string)"]


async def test_ask_fail_and_attempts() -> None:
    said, calls = await answer("please ask me", [ASK])
    assert said == "Let me ask you first." and calls[0].name == "ask_user"
    with pytest.raises(ModelError):
        await answer("simulate model error", [])
    said, _ = await answer("simulate model error", [], attempt=1)  # a retry succeeds
    assert said.startswith("### Demo answer 2")
    with pytest.raises(ModelError):
        await answer("simulate model error always", [], attempt=3)
    first, _ = await answer("hello", [])
    second, _ = await answer("hello", [], attempt=1)
    assert first.startswith("### Demo answer\n") and first != second
    assert "characters:" not in first


async def test_an_offer_it_cannot_make_is_not_announced() -> None:
    actions = {"open_pricing": {"description": "Pricing", "parameters": {
        "type": "object", "properties": {"plan": {"type": "string", "enum": ["free", "pro"]}}, "required": ["plan"]}}}
    spec = offer_actions_spec(actions)
    said, calls = await answer("offer open_pricing", [spec])
    assert "I offered" not in said and "`plan`" in said
    said, calls = await answer('offer open_pricing {"plan": "gold"}', [spec])
    assert "I offered" not in said and "could not offer `open_pricing`" in said
    said, calls = await answer("offer open_pricing plan=pro", [spec])
    assert said == "You can do that from here: I offered `open_pricing` below."
    assert calls == [ToolCall("offer_actions", {"actions": [{"name": "open_pricing", "arguments": {"plan": "pro"}}]})]


# ------------------------------------------------------------------------------------------------ the guard


class Source:
    """A model stream made of steps: a chunk, or a pause in seconds; records whether it was closed."""

    def __init__(self, *steps: Any, forever: Any = None) -> None:
        self.steps = list(steps)
        self.forever = forever
        self.closed = False

    async def run(self) -> AsyncIterator[Chunk]:
        try:
            for step in self.steps:
                if isinstance(step, (int, float)):
                    await asyncio.sleep(step)
                else:
                    yield step
            while self.forever is not None:
                await asyncio.sleep(self.forever[0])
                yield self.forever[1]
        finally:
            self.closed = True


async def drain(src: Source, limits: StreamLimits) -> list[Chunk]:
    return [c async for c in guarded(src.run(), limits)]


async def test_the_guard_passes_a_normal_stream_and_closes_it() -> None:
    src = Source(TextDelta("a"), ToolCall("f", {}), TextDelta("b"))
    assert await drain(src, StreamLimits()) == [TextDelta("a"), TextDelta("b"), ToolCall("f", {})]
    assert src.closed


async def test_keep_alives_do_not_keep_a_stalled_model_alive() -> None:
    src = Source(TextDelta("hi"), forever=(0.01, TextDelta("")))
    with pytest.raises(ModelError) as exc:
        await drain(src, StreamLimits(stall_s=0.2))
    assert exc.value.code == TurnErrorCode.MODEL_TIMEOUT and src.closed


async def test_a_trickle_ends_at_the_turn_deadline() -> None:
    src = Source(forever=(0.02, TextDelta("x")))
    with pytest.raises(ModelError) as exc:
        await drain(src, StreamLimits(deadline=time.monotonic() + 0.3, stall_s=10))
    assert exc.value.code == TurnErrorCode.MODEL_TIMEOUT and "one turn" in exc.value.message and src.closed


async def test_an_endless_answer_is_cut_at_the_cap() -> None:
    src = Source(forever=(0, TextDelta("0123456789")))
    out: list[Chunk] = []
    with pytest.raises(ModelError) as exc:
        async for c in guarded(src.run(), StreamLimits(max_answer_chars=95)):
            out.append(c)
    assert exc.value.code == TurnErrorCode.ANSWER_TOO_LONG and src.closed
    assert sum(len(c.text) for c in out if isinstance(c, TextDelta)) == 95


async def test_too_many_tool_calls_run_none() -> None:
    src = Source(*[ToolCall("f", {"i": i}) for i in range(300)])
    out: list[Chunk] = []
    with pytest.raises(ModelError) as exc:
        async for c in guarded(src.run(), StreamLimits(max_tool_calls=16)):
            out.append(c)
    assert exc.value.code == TurnErrorCode.TOO_MANY_TOOL_CALLS and out == [] and src.closed


async def test_cancelling_the_consumer_closes_the_stream() -> None:
    src = Source(TextDelta("a"), forever=(0.01, TextDelta("b")))

    async def consume() -> None:
        async for _ in guarded(src.run(), StreamLimits()):
            pass

    task = asyncio.ensure_future(consume())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert src.closed


def test_the_demo_quotes_a_section_only_when_it_covers_the_question() -> None:
    """A search always returns its best sections; the demo quotes one only when it is about the words asked."""
    from widget.relay.models.demo import MIN_COVERAGE, coverage, is_about

    colours = {"title": "Theming the bar › Colours", "text": "To change the bar's colours, set these properties."}
    capitals = {"title": "Deploying the relay › Edge settings", "text": "An AUTOPILOT_<KEY IN CAPITALS> variable."}
    assert coverage("How do I change the bar's colours?", colours) == 1.0
    assert coverage("how to change the colour of the bar", colours) == 1.0  # one word to the demo: colour(s)
    assert coverage("What is the capital of France?", capitals) == 0.5 < MIN_COVERAGE
    assert coverage("What?", capitals) == 1.0  # nothing but fillers: nothing to check
    assert is_about("How do I change the colours?", {"title": "Theming › Colours", "text": "CSS custom properties."})
    assert not is_about("What is the capital of France?", capitals)  # half, but not the title's subject

"""Every model provider through the same conversation scenarios (issue 34, "Checked by"): a REAL relay whose model
is the provider's real adapter (the provider's own SDK) pointed at a scripted fake of the provider that speaks its
documented streaming format (tests/provider_fakes.py; each registered provider in turn).

Scenarios: a plain answer; a function call and its result fed back; the tokens each round reported, in the turn
log; a sensitive call that waits for the reader (who denies it); two parallel calls; an action offered with the
answer; a cited documentation section; each provider failure reaching the client as its error code with
``retryable`` and, for a rate limit, the provider's ``retry-after`` as ``retry_after``; Stop mid-stream (the
provider sees its connection closed); a stalled stream and the turn's deadline (``model_timeout``, and the
connection closed); the answer-length and tool-call bounds. Anthropic's prompt caching: where the breakpoints go
across the rounds and turns of a conversation (each round finds what the previous one cached), none with
``prompt_cache = false``, and the cache reads and writes it reports, in the Usage chunk and the turn log.

A provider registers its wire format in tests/provider_fakes.py (see its docstring); every scenario here then runs
for it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from docs_double import SITE, MemoryDocs
from provider_fakes import AnthropicEncoder, Call, FakeProviders, Pause, Reply, endless
from relay_helpers import Recorder, declare, info, joined, launch, turn_log_line
from test_model_units import REGISTRY

from widget import protocol as P
from widget.relay.config import AppConfig, DocsConfig, ModelConfig
from widget.relay.models.adapters import make_adapter
from widget.relay.models.base import ModelError, ModelRequest, Usage

pytestmark = pytest.mark.relay

PROVIDERS = sorted(REGISTRY)
SECRET_APP = "shop-secret-0123456789abcdef"  # relay_helpers.SHOP_SECRET: create() uses it for every app but demo

SELECTION = {"kind": "function", "description": "Returns the selected text.",
             "parameters": {"type": "object", "properties": {"limit": {"type": "integer"}}}}
DELETE = {"kind": "function", "description": "Delete the reader's account.", "sensitive": True,
          "parameters": {"type": "object", "properties": {}}}
WEATHER = {"kind": "function", "description": "The weather in one city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
OPEN_PRICING = {"kind": "action", "description": "Open the pricing page for one plan.", "confirm": "button",
                "label": "Open pricing",
                "parameters": {"type": "object", "properties": {"plan": {"type": "string", "enum": ["free", "pro"]}},
                               "required": ["plan"], "additionalProperties": False}}


@pytest_asyncio.fixture(scope="module")
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest_asyncio.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Any, FakeProviders]]:
    """The fake providers and one relay with a model per provider, an app ``p-<provider>`` on it and a docs app
    ``d-<provider>`` (sections about theming and plans); ``p-anthropic-nocache``: Anthropic with ``prompt_cache =
    false``."""
    fake = await FakeProviders(REGISTRY).start()
    models = {"demo": ModelConfig(chunk_delay_ms=0)}
    apps = {"demo": AppConfig(model="demo")}
    for name, enc in REGISTRY.items():
        models[name] = enc.model_config(fake.base_url(name))
        apps[f"p-{name}"] = AppConfig(model=name, secret=SECRET_APP)
        apps[f"d-{name}"] = AppConfig(model=name, secret=SECRET_APP, docs=DocsConfig(not_found_text="Not in the docs."))
    models["anthropic-nocache"] = dataclasses.replace(models["anthropic"], prompt_cache=False)
    apps["p-anthropic-nocache"] = AppConfig(model="anthropic-nocache", secret=SECRET_APP)
    h = await launch(tmp_path_factory.mktemp("scenarios"), apps=apps, models=models)
    h.hub.docs = MemoryDocs({f"d-{name}": list(SITE) for name in REGISTRY})
    try:
        yield h, fake
    finally:
        await h.stop()
        await fake.stop()


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest, world: tuple[Any, FakeProviders]) -> Iterator[str]:
    """Each registered provider in turn (the fake's queues emptied); after the test, no request it made may be one
    the real provider would refuse."""
    name: str = request.param
    reason = REGISTRY[name].skip.get(request.node.originalname.removeprefix("test_"))
    if reason:
        pytest.skip(reason)
    world[1].reset()
    yield name
    # no request of the scenario was one the real provider would refuse (tests/provider_fakes.py Encoder.check)
    assert world[1].refused[name] == [], world[1].refused[name]


def relay(world: tuple[Any, FakeProviders]) -> Any:
    return world[0]


async def turn(rec: Recorder, text: str, key: str = "m1") -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """Send a user message; its turn's ``completion.finished`` and events once the reader may write again."""
    mark = len(rec.events)
    ack = await rec.call("user_message", {"text": text, "idempotency_key": key})
    assert ack["ok"], ack
    await rec.wait("user_input", start=mark)
    events = rec.events[mark:]
    (fin,) = [d for e, d in events if e == "completion.finished"]
    return fin, events


def named(events: list[tuple[str, Any]], name: str) -> list[Any]:
    return [d for e, d in events if e == name]


def streamed(events: list[tuple[str, Any]]) -> str:
    return "".join(d["delta"] for d in named(events, "completion_stream"))


# ---------------------------------------------------------------------------------------------- answers and calls


async def test_plain_answer(world: tuple[Any, FakeProviders], provider: str, http: aiohttp.ClientSession) -> None:
    h, fake = world
    enc = REGISTRY[provider]
    fake.script(provider, Reply(text=["Hello", ", reader", ". Nice to ", "see you."]))
    rec, _, url = await joined(http, h.url, app=f"p-{provider}")
    fin, events = await turn(rec, "hi there")
    assert fin["status"] == "done"
    (ended,) = named(events, "completion.ended")
    assert ended["message"]["content"] == "Hello, reader. Nice to see you." == streamed(events)
    (sent,) = fake.requests[provider]
    assert enc.user_texts(sent.body) == ["hi there"] and enc.tool_results(sent.body) == []
    body = await info(http, url)
    assert [(m["role"], m["content"]) for m in body["messages"]] == [("user", "hi there"),
                                                                     ("assistant", "Hello, reader. Nice to see you.")]
    await rec.disconnect()


async def test_function_call_and_result(world: tuple[Any, FakeProviders], provider: str,
                                        http: aiohttp.ClientSession) -> None:
    h, fake = world
    enc = REGISTRY[provider]
    fake.script(provider, Reply(text=["Let me look. "], calls=[Call("get_selection", {"limit": 3}, id="call_sel1")]),
                Reply(text=["The page says: ", "selected 3"]))
    rec, _, _ = await joined(http, h.url, app=f"p-{provider}")
    await declare(rec, {"get_selection": SELECTION})
    rec.auto_answer = lambda call: f"selected {call['arguments']['limit']}"
    fin, events = await turn(rec, "what is selected?")
    assert fin["status"] == "done"
    (begin,) = named(events, "function_call.begin")
    assert begin["name"] == "get_selection" and begin["arguments"] == {"limit": 3}
    first, final = named(events, "completion.ended")
    assert first["message"]["content"] == "Let me look. "
    assert [c["name"] for c in first["message"]["function_calls"]] == ["get_selection"]
    assert final["message"]["content"] == "The page says: selected 3"
    one, two = fake.requests[provider]
    assert "get_selection" in enc.tool_names(one.body) and enc.tool_results(one.body) == []
    ((call_id, name, args),) = enc.tool_calls(two.body)
    assert (name, args) == ("get_selection", {"limit": 3})
    assert enc.tool_results(two.body) == [(call_id, "selected 3")]  # the result answers the call it belongs to
    await rec.disconnect()


async def test_usage_of_each_round_in_the_turn_log(world: tuple[Any, FakeProviders], provider: str,
                                                  http: aiohttp.ClientSession,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """The tokens the provider reports for each round (its own usage fields) add up in the turn's log line."""
    h, fake = world
    fake.script(provider, Reply(calls=[Call("get_selection", {"limit": 1}, id="call_u1")], usage=(120, 9)),
                Reply(text=["Done."], usage=(150, 4)))
    caplog.set_level(logging.INFO, logger="widget.relay.turns")
    rec, _, url = await joined(http, h.url, app=f"p-{provider}")
    await declare(rec, {"get_selection": SELECTION})
    rec.auto_answer = lambda call: "one"
    fin, _ = await turn(rec, "what is selected?")
    assert fin["status"] == "done"
    line = await turn_log_line(caplog, url.rsplit("/", 1)[-1])
    assert line["model"] == provider
    assert (line["tokens"]["input_tokens"], line["tokens"]["output_tokens"]) == (270, 13), line
    assert [(u["input_tokens"], u["output_tokens"]) for u in line["usage"]] == [(120, 9), (150, 4)]
    await rec.disconnect()


async def test_sensitive_call_waits_for_the_reader(world: tuple[Any, FakeProviders], provider: str,
                                                   http: aiohttp.ClientSession) -> None:
    """A sensitive page function: the relay sends the call to the page and waits (the reader is asked there); the
    model is asked again only with the reader's answer, here the denial."""
    h, fake = world
    enc = REGISTRY[provider]
    fake.script(provider, Reply(calls=[Call("delete_account", {})]), Reply(text=["Alright, nothing was deleted."]))
    rec, _, _ = await joined(http, h.url, app=f"p-{provider}")
    await declare(rec, {"delete_account": DELETE})
    mark = len(rec.events)
    assert (await rec.call("user_message", {"text": "delete my account", "idempotency_key": "m1"}))["ok"]
    begin = await rec.wait("function_call.begin", start=mark)
    assert begin["name"] == "delete_account" and begin["run"] is True
    await asyncio.sleep(0.4)  # the reader thinks: the turn waits, the provider is not asked again
    assert len(fake.requests[provider]) == 1 and "completion.finished" not in rec.names()[mark:]
    ack = await rec.call("function_response", {"id": begin["id"], "status": "error", "error": P.MSG_SENSITIVE_DENIED,
                                               "idempotency_key": "fr1"})
    assert ack["ok"], ack
    fin = await rec.wait("completion.finished", start=mark)
    assert fin["status"] == "done"
    final = named(rec.events[mark:], "completion.ended")[-1]
    assert final["message"]["content"] == "Alright, nothing was deleted."
    ((call_id, text),) = enc.tool_results(fake.requests[provider][1].body)
    assert P.MSG_SENSITIVE_DENIED in text and call_id == enc.tool_calls(fake.requests[provider][1].body)[0][0]
    await rec.disconnect()


async def test_two_parallel_calls(world: tuple[Any, FakeProviders], provider: str,
                                  http: aiohttp.ClientSession) -> None:
    h, fake = world
    enc = REGISTRY[provider]
    fake.script(provider, Reply(calls=[Call("get_weather", {"city": "Oslo"}, id="call_w1"),
                                       Call("get_weather", {"city": "Lima"}, id="call_w2")]),
                Reply(text=["Oslo is cold, Lima is warm."]))
    rec, _, _ = await joined(http, h.url, app=f"p-{provider}")
    await declare(rec, {"get_weather": WEATHER})
    rec.auto_answer = lambda call: {"Oslo": "-3 C", "Lima": "24 C"}[call["arguments"]["city"]]
    fin, events = await turn(rec, "weather in Oslo and Lima?")
    assert fin["status"] == "done"
    assert sorted(b["arguments"]["city"] for b in named(events, "function_call.begin")) == ["Lima", "Oslo"]
    assert named(events, "completion.ended")[-1]["message"]["content"] == "Oslo is cold, Lima is warm."
    one, two = fake.requests[provider]
    calls = enc.tool_calls(two.body)
    assert [(n, a) for _, n, a in calls] == [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Lima"})]
    results = dict(enc.tool_results(two.body))
    assert results == {calls[0][0]: "-3 C", calls[1][0]: "24 C"}
    assert len(fake.requests[provider]) == 2  # both results went back in one request
    await rec.disconnect()


async def test_action_offered(world: tuple[Any, FakeProviders], provider: str, http: aiohttp.ClientSession) -> None:
    """``offer_actions`` beside the answer: the message shows the action, the turn ends without a second request."""
    h, fake = world
    enc = REGISTRY[provider]
    offer = {"actions": [{"name": "open_pricing", "arguments": {"plan": "pro"}}]}
    fake.script(provider, Reply(text=["Pro it is. "], calls=[Call(P.RelayTool.OFFER_ACTIONS.value, offer)]))
    rec, _, url = await joined(http, h.url, app=f"p-{provider}")
    await declare(rec, {"open_pricing": OPEN_PRICING})
    fin, events = await turn(rec, "pricing for pro?")
    assert fin["status"] == "done" and len(fake.requests[provider]) == 1
    msg = named(events, "completion.ended")[-1]["message"]
    assert msg["content"] == "Pro it is. "
    assert [(a["name"], a["arguments"]) for a in msg["actions"]] == [("open_pricing", {"plan": "pro"})]
    assert P.RelayTool.OFFER_ACTIONS in enc.tool_names(fake.requests[provider][0].body)
    assert "actions" not in (await info(http, url))["messages"][1]
    # the next turn's history: the offer as the model's call with the relay's note as its result, in a form the
    # provider takes (the fake refuses what the provider would)
    fake.script(provider, Reply(text=["You are welcome."]))
    fin, _ = await turn(rec, "thanks", key="m2")
    assert fin["status"] == "done"
    sent = fake.requests[provider][-1].body
    ((call_id, name, args),) = enc.tool_calls(sent)
    assert (name, args) == (P.RelayTool.OFFER_ACTIONS, offer)
    assert [i for i, _ in enc.tool_results(sent)] == [call_id] and enc.user_texts(sent)[-1] == "thanks"
    await rec.disconnect()


async def test_citation(world: tuple[Any, FakeProviders], provider: str, http: aiohttp.ClientSession) -> None:
    """An app with docs: the relay finds the sections for the question, the model cites one, the answer's
    ``sources`` name it."""
    h, fake = world
    answer = "The bar's colours come from CSS custom properties on the host element [s1]."
    fake.script(provider, Reply(text=pieces_of(answer)))
    rec, _, url = await joined(http, h.url, app=f"d-{provider}")
    fin, events = await turn(rec, "How do I change the colours?")
    assert fin["status"] == "done" and "messages.withdrawn" not in [e for e, _ in events]
    msg = named(events, "completion.ended")[-1]["message"]
    assert msg["content"] == answer
    assert [(s["id"], s["title"]) for s in msg["sources"]] == [("s1", "Theming › Colours")]
    assert msg["sources"][0]["url"].startswith("/docs/theming.html#colours")
    sent = json.dumps(fake.requests[provider][0].body)
    assert "--ap-accent" in sent  # the section the model cites was in its request
    assert (await info(http, url))["messages"][-1]["sources"] == msg["sources"]
    await rec.disconnect()


def pieces_of(text: str, words: int = 3) -> list[str]:
    """``text`` as streamed pieces of a few words each."""
    w = text.split(" ")
    return [" ".join(w[i:i + words]) + (" " if i + words < len(w) else "") for i in range(0, len(w), words)]


# ---------------------------------------------------------------------------------------------- failures

FAILURES = [
    ("rate_limit", P.TurnErrorCode.MODEL_RATE_LIMITED, True),
    ("auth", P.TurnErrorCode.MODEL_AUTH, False),
    ("context_overflow", P.TurnErrorCode.CONTEXT_OVERFLOW, True),
    ("provider_down", P.TurnErrorCode.MODEL_UNAVAILABLE, True),
    ("drop", P.TurnErrorCode.MODEL_UNAVAILABLE, True),
    ("garbage", P.TurnErrorCode.MODEL_BAD_RESPONSE, True),
]


@pytest.mark.parametrize("kind, code, retryable", FAILURES, ids=[f[0] for f in FAILURES])
async def test_each_failure_reaches_the_client(world: tuple[Any, FakeProviders], provider: str,
                                               http: aiohttp.ClientSession, kind: Any, code: str,
                                               retryable: bool) -> None:
    """Each provider failure: an error message with its code and ``retryable`` (never the provider's wording), the
    turn failed, and ``retry`` answering once the provider is back."""
    h, fake = world
    fake.script(provider, Reply(text=["Partial "], fail=kind, retry_after=7), Reply(text=["Back again."]))
    rec, _, url = await joined(http, h.url, app=f"p-{provider}")
    fin, events = await turn(rec, "hello")
    assert fin["status"] == "failed"
    (err,) = [d["message"] for d in named(events, "message") if d["message"]["role"] == "error"]
    assert err["code"] == code and err["retryable"] is retryable, err
    for leak in ("8192", "208310", "sk-test", "x-api-key", "Overloaded", "not json"):
        assert leak not in err["content"]
    # the provider's retry-after reaches the reader's client (docs/protocol.md §5)
    assert err.get("retry_after") == (7 if kind == "rate_limit" else None), err
    body = await info(http, url)
    assert body["conversation"]["status"] == "failed" and body["messages"][-1]["code"] == code
    mark = len(rec.events)
    assert (await rec.call("retry", {"idempotency_key": "t"}))["ok"]
    fin = await rec.wait("completion.finished", start=mark)
    assert fin["status"] == "done"
    assert (await info(http, url))["messages"][-1]["content"] == "Back again."
    await rec.disconnect()


async def test_a_new_message_after_a_failed_turn(world: tuple[Any, FakeProviders], provider: str,
                                                 http: aiohttp.ClientSession) -> None:
    """A turn fails, the reader writes again: the history has two reader messages in a row (the failed turn left no
    answer), in a form the provider takes."""
    h, fake = world
    enc = REGISTRY[provider]
    fake.script(provider, Reply(fail="provider_down"), Reply(text=["Both: hello and again."]))
    rec, _, _ = await joined(http, h.url, app=f"p-{provider}")
    fin, _ = await turn(rec, "hello")
    assert fin["status"] == "failed"
    fin, events = await turn(rec, "again", key="m2")
    assert fin["status"] == "done" and streamed(events) == "Both: hello and again."
    assert " ".join(enc.user_texts(fake.requests[provider][-1].body)).split() == ["hello", "again"]
    await rec.disconnect()


async def test_a_rate_limit_says_how_long_to_wait(world: tuple[Any, FakeProviders], provider: str) -> None:
    """The provider's ``retry-after`` header becomes the adapter's ``ModelError.retry_after`` (the adapter as the
    relay makes it from the model's config, through the provider's SDK)."""
    _, fake = world
    fake.script(provider, Reply(fail="rate_limit", retry_after=7))
    adapter = make_adapter(REGISTRY[provider].model_config(fake.base_url(provider)))
    try:
        with pytest.raises(ModelError) as exc:
            [c async for c in adapter.stream(ModelRequest(messages=[{"role": "user", "content": "hi"}]))]
    finally:
        await adapter.aclose()
    assert exc.value.code == P.TurnErrorCode.MODEL_RATE_LIMITED and exc.value.retry_after == 7


async def test_stop_mid_stream_closes_the_provider_connection(world: tuple[Any, FakeProviders], provider: str,
                                                              http: aiohttp.ClientSession) -> None:
    h, fake = world
    before = fake.ended_early[provider]
    fake.script(provider, Reply(text=endless()))
    rec, _, url = await joined(http, h.url, app=f"p-{provider}")
    mark = len(rec.events)
    assert (await rec.call("user_message", {"text": "go on forever", "idempotency_key": "m1"}))["ok"]
    await rec.wait("completion_stream", start=mark)
    assert (await rec.call("cancel", {"idempotency_key": "c1"})) == {"ok": True, "cancelled": True}
    fin = await rec.wait("completion.finished", start=mark)
    assert fin["status"] == "cancelled"
    await fake.wait_closed(provider, before + 1)  # the provider saw its connection closed, nothing is left open
    assert (await info(http, url))["conversation"]["status"] == "idle"
    await rec.disconnect()


async def test_stalled_stream_times_out(world: tuple[Any, FakeProviders], provider: str,
                                        http: aiohttp.ClientSession) -> None:
    """The model sends a piece, then nothing: ``model_timeout`` after the stall bound, the connection closed."""
    h, fake = world
    before = fake.ended_early[provider]
    fake.script(provider, Reply(text=["Thinking about it", Pause(30)]))
    rec, _, _ = await joined(http, h.url, app=f"p-{provider}")
    with bounds(h, model_stall_timeout_s=0.6):
        fin, events = await turn(rec, "think hard")
    assert fin["status"] == "failed" and streamed(events) == "Thinking about it"
    (err,) = [d["message"] for d in named(events, "message") if d["message"]["role"] == "error"]
    assert err["code"] == P.TurnErrorCode.MODEL_TIMEOUT and err["retryable"] is True
    assert "0.6 s" in err["content"]
    await fake.wait_closed(provider, before + 1)
    await rec.disconnect()


async def test_turn_deadline(world: tuple[Any, FakeProviders], provider: str, http: aiohttp.ClientSession) -> None:
    """A stream that goes on past the turn's deadline: ``model_timeout``, the answer kept up to there, the provider's
    connection closed."""
    h, fake = world
    before = fake.ended_early[provider]
    fake.script(provider, Reply(text=endless()))
    rec, _, _ = await joined(http, h.url, app=f"p-{provider}")
    with bounds(h, turn_timeout_s=0.8):
        fin, events = await turn(rec, "go on forever")
    assert fin["status"] == "failed" and streamed(events).startswith("tok tok ")
    (err,) = [d["message"] for d in named(events, "message") if d["message"]["role"] == "error"]
    assert err["code"] == P.TurnErrorCode.MODEL_TIMEOUT and "longer than the relay allows" in err["content"]
    await fake.wait_closed(provider, before + 1)
    await rec.disconnect()


async def test_answer_length_bound(world: tuple[Any, FakeProviders], provider: str,
                                   http: aiohttp.ClientSession) -> None:
    """An answer past ``max_answer_chars``: ``answer_too_long``, the text kept up to the bound."""
    h, fake = world
    fake.script(provider, Reply(text=["0123456789"] * 5))
    rec, _, url = await joined(http, h.url, app=f"p-{provider}")
    with bounds(h, max_answer_chars=25):
        fin, events = await turn(rec, "count")
    assert fin["status"] == "failed" and streamed(events) == "0123456789" * 2 + "01234"
    (err,) = [d["message"] for d in named(events, "message") if d["message"]["role"] == "error"]
    assert err["code"] == P.TurnErrorCode.ANSWER_TOO_LONG
    assert [m["content"] for m in (await info(http, url))["messages"] if m["role"] == "assistant"] == [
        "0123456789" * 2 + "01234"]
    await rec.disconnect()


async def test_tool_call_bound(world: tuple[Any, FakeProviders], provider: str, http: aiohttp.ClientSession) -> None:
    """A response with more calls than ``max_tool_calls_per_response``: ``too_many_tool_calls``, none of them run."""
    h, fake = world
    fake.script(provider, Reply(calls=[Call("get_weather", {"city": c}, id=f"call_{c}") for c in ("Oslo", "Lima")]))
    rec, _, _ = await joined(http, h.url, app=f"p-{provider}")
    await declare(rec, {"get_weather": WEATHER})
    with bounds(h, max_tool_calls_per_response=1):
        fin, events = await turn(rec, "weather in Oslo and Lima?")
    assert fin["status"] == "failed" and "function_call.begin" not in [e for e, _ in events]
    (err,) = [d["message"] for d in named(events, "message") if d["message"]["role"] == "error"]
    assert err["code"] == P.TurnErrorCode.TOO_MANY_TOOL_CALLS
    await rec.disconnect()


@contextlib.contextmanager
def bounds(h: Any, **settings: Any) -> Iterator[None]:
    """The relay's turn bounds changed for one test (a turn reads them from the config when it starts)."""
    old = {k: getattr(h.config, k) for k in settings}
    for k, v in settings.items():
        setattr(h.config, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(h.config, k, v)


async def test_the_fakes_refuse_what_the_providers_refuse(world: tuple[Any, FakeProviders],
                                                         http: aiohttp.ClientSession) -> None:
    """The checks that keep the scenarios honest: a request the real provider would refuse gets a 400 and is kept."""
    _, fake = world
    fake.reset()
    bad = {
        "openai-chat": {"model": "m", "stream": True, "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                                   "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "user", "content": "no result in between"}]},
        "anthropic": {"model": "m", "stream": True, "max_tokens": 10, "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "text", "text": ""}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c.1", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "text", "text": "x"},
                                         {"type": "tool_result", "tool_use_id": "c2"}]}]},
    }
    expected = {"openai-chat": ["tool calls ['c1'] were not answered"],
                "anthropic": ["first message must use the user role", "(the system prompt goes in",
                              "text content blocks must be non-empty", "a tool_use needs an id",
                              "need their tool_result blocks here", "tool_result blocks must come first"]}
    for name, body in bad.items():
        r = await http.post(fake.url + f"/{name}" + REGISTRY[name].path, json=body)
        assert r.status == 400
        (problems,) = fake.refused[name]
        for needle in expected[name]:
            assert any(needle in p for p in problems), (needle, problems)
    fake.reset()


# ---------------------------------------------------------------------------------------------- Anthropic prompt cache


def cache_marks(body: dict[str, Any]) -> list[str]:
    """Where a request's ``cache_control`` breakpoints are: ``tools[i]``, ``system[i]``, ``messages[i][j]``."""
    out = [f"tools[{i}]" for i, t in enumerate(body.get("tools") or []) if "cache_control" in t]
    system = body.get("system")
    out += [f"system[{i}]" for i, b in enumerate(system if isinstance(system, list) else []) if "cache_control" in b]
    for i, m in enumerate(body["messages"]):
        content = m["content"] if isinstance(m["content"], list) else []
        out += [f"messages[{i}][{j}]" for j, b in enumerate(content) if "cache_control" in b]
    return out


async def test_anthropic_cache_breakpoints_across_rounds_and_turns(world: tuple[Any, FakeProviders],
                                                                   http: aiohttp.ClientSession) -> None:
    """Each request marks the last tool, the system prompt, the message the previous request ended with and the last
    message (4 at most, ``ephemeral``); every round and turn finds the entry the one before it wrote (its last
    breakpoint's prefix is one of the new request's), and the tools' and system's prefixes stay the same."""
    h, fake = world
    fake.reset()
    enc = REGISTRY["anthropic"]
    assert isinstance(enc, AnthropicEncoder)
    fake.script("anthropic", Reply(calls=[Call("get_selection", {"limit": 1}, id="toolu_c1")]),
                Reply(text=["It says one."]), Reply(text=["Still one."]))
    rec, _, _ = await joined(http, h.url, app="p-anthropic")
    await declare(rec, {"get_selection": SELECTION})
    rec.auto_answer = lambda call: "one"
    assert (await turn(rec, "what is selected?"))[0]["status"] == "done"
    assert (await turn(rec, "and now?", key="m2"))[0]["status"] == "done"
    bodies = [r.body for r in fake.requests["anthropic"]]
    assert len(bodies) == 3 and fake.refused["anthropic"] == []
    last_tool = f"tools[{len(bodies[0]['tools']) - 1}]"
    # round 1: the reader's question; round 2: + the call and its result; turn 2: + the answer and the new question
    assert cache_marks(bodies[0]) == [last_tool, "system[0]", "messages[0][0]"]
    assert cache_marks(bodies[1]) == [last_tool, "system[0]", "messages[0][0]", "messages[2][0]"]
    assert cache_marks(bodies[2]) == [last_tool, "system[0]", "messages[2][0]", "messages[4][0]"]
    marks = [b["cache_control"] for body in bodies for b in [*body["tools"], *body["system"]]
             + [x for m in body["messages"] for x in m["content"]] if "cache_control" in b]
    assert marks and all(m == {"type": "ephemeral"} for m in marks)
    prefixes = [enc.cache_prefixes(b) for b in bodies]
    for before, after in zip(prefixes, prefixes[1:], strict=False):
        assert before[-1] in after  # the conversation so far: read from the cache
        assert before[0] == after[0]  # the tools
    assert prefixes[0][1] == prefixes[1][1]  # tools and system within a turn
    await rec.disconnect()


async def test_anthropic_cache_off_sends_no_breakpoint(world: tuple[Any, FakeProviders],
                                                      http: aiohttp.ClientSession) -> None:
    """``prompt_cache = false``: no ``cache_control`` anywhere, the system prompt a plain string."""
    h, fake = world
    fake.reset()
    fake.script("anthropic", Reply(calls=[Call("get_selection", {"limit": 1}, id="toolu_c2")]), Reply(text=["One."]))
    rec, _, _ = await joined(http, h.url, app="p-anthropic-nocache")
    await declare(rec, {"get_selection": SELECTION})
    rec.auto_answer = lambda call: "one"
    assert (await turn(rec, "what is selected?"))[0]["status"] == "done"
    bodies = [r.body for r in fake.requests["anthropic"]]
    assert len(bodies) == 2 and fake.refused["anthropic"] == []
    for body in bodies:
        assert "cache_control" not in json.dumps(body) and isinstance(body["system"], str) and body["tools"]
    await rec.disconnect()


async def test_anthropic_cache_reads_and_writes_in_usage(world: tuple[Any, FakeProviders],
                                                         http: aiohttp.ClientSession,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """The cache tokens Anthropic reports: in the Usage chunk (input = uncached + read + written, the read part
    ``cached_input_tokens``, the written ``cache_write_tokens``) and per round and summed in the turn log."""
    h, fake = world
    fake.reset()
    fake.script("anthropic", Reply(text=["Hi."], usage=(12, 3), cache=(900, 60)))
    adapter = make_adapter(REGISTRY["anthropic"].model_config(fake.base_url("anthropic")))
    try:
        out = [c async for c in adapter.stream(ModelRequest(messages=[{"role": "user", "content": "hi"}]))]
    finally:
        await adapter.aclose()
    assert [c for c in out if isinstance(c, Usage)] == [
        Usage(input_tokens=972, output_tokens=3, cached_input_tokens=900, cache_write_tokens=60)]

    fake.script("anthropic", Reply(calls=[Call("get_selection", {"limit": 1}, id="toolu_c3")], usage=(120, 9),
                                   cache=(0, 2000)),
                Reply(text=["Done."], usage=(15, 4), cache=(2000, 140)))
    caplog.set_level(logging.INFO, logger="widget.relay.turns")
    rec, _, url = await joined(http, h.url, app="p-anthropic")
    await declare(rec, {"get_selection": SELECTION})
    rec.auto_answer = lambda call: "one"
    assert (await turn(rec, "what is selected?"))[0]["status"] == "done"
    line = await turn_log_line(caplog, url.rsplit("/", 1)[-1])
    assert [(u["input_tokens"], u["cached_input_tokens"], u["cache_write_tokens"]) for u in line["usage"]] == [
        (2120, 0, 2000), (2155, 2000, 140)]
    assert line["tokens"] == {"input_tokens": 4275, "output_tokens": 13, "cached_input_tokens": 2000,
                              "cache_write_tokens": 2140}
    assert fake.refused["anthropic"] == []
    await rec.disconnect()


async def test_the_anthropic_fake_refuses_bad_cache_breakpoints(world: tuple[Any, FakeProviders],
                                                                http: aiohttp.ClientSession) -> None:
    """More than 4 breakpoints, or one not ``ephemeral``, is refused as Anthropic refuses it."""
    _, fake = world
    fake.reset()
    mark = {"type": "ephemeral"}
    body = {"model": "m", "stream": True, "max_tokens": 10,
            "tools": [{"name": f"t{i}", "input_schema": {"type": "object"}, "cache_control": mark} for i in range(3)],
            "system": [{"type": "text", "text": "s", "cache_control": {"type": "persistent"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": mark}]}]}
    r = await http.post(fake.url + "/anthropic" + REGISTRY["anthropic"].path, json=body)
    assert r.status == 400
    (problems,) = fake.refused["anthropic"]
    assert any("A maximum of 4 blocks with cache_control may be provided. Found 5." in p for p in problems)
    assert any("is not {'type': 'ephemeral'}" in p for p in problems)
    fake.reset()

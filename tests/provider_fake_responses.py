"""A fake OpenAI Responses API: a script of a model's reply encoded as the SSE events the provider documents for
``POST /v1/responses`` with ``stream: true`` (``response.created`` ... ``response.completed``), and an aiohttp
server that plays them (or fails as the provider does: an HTTP error with its headers, an ``error`` event, a
failed or incomplete response, a dropped connection, an endless stream for Stop).

The event shapes follow the SDK's types (openai/types/responses/: ResponseTextDeltaEvent,
ResponseFunctionCallArgumentsDeltaEvent, ResponseOutputItemAddedEvent, ResponseCompletedEvent ...).

The same events drive the shared scenarios (tests/test_model_scenarios.py): :class:`ResponsesEncoder` is registered
with tests/provider_fakes.py twice, as ``openai-responses`` (a model without reasoning) and as
``openai-responses-reasoning`` (``reasoning_effort`` set: every reply starts with an encrypted reasoning item and a
reasoning summary, which the adapter must keep out of the answer and put back before its calls)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from aiohttp import web
from provider_fakes import Encoder, FailKind, Pause, Reply, arguments_text, pieces, register

from widget.relay.config import ModelConfig

_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@dataclass
class Text:
    """An assistant message streamed in ``pieces``."""

    pieces: list[str]
    item_id: str = "msg_1"


@dataclass
class FnCall:
    """A function call whose arguments stream in ``pieces``."""

    call_id: str
    name: str
    pieces: list[str]
    item_id: str = ""


@dataclass
class Parallel:
    """Function calls in one response with their argument pieces interleaved (as a model streams them)."""

    calls: list[FnCall]


@dataclass
class Reasoning:
    """A reasoning item: its encrypted content (when asked for) and summary text streamed as its own events."""

    item_id: str
    encrypted: str | None
    summary: list[str] = field(default_factory=list)


Step = Text | FnCall | Parallel | Reasoning

USAGE = {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 4},
         "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 3}, "total_tokens": 19}


class ResponseEvents:
    """One response's events, numbered by ``sequence_number`` as the provider numbers them."""

    def __init__(self, response_id: str = "resp_1", model: str = "test-model") -> None:
        self.seq = 0
        self.output: list[dict[str, Any]] = []
        self.response = {"id": response_id, "object": "response", "created_at": 0, "model": model,
                         "status": "in_progress", "output": self.output, "error": None, "incomplete_details": None,
                         "usage": None, "tools": [], "parallel_tool_calls": True, "tool_choice": "auto"}

    def event(self, kind: str, **data: Any) -> bytes:
        body = {"type": kind, "sequence_number": self.seq, **data}
        self.seq += 1
        return f"event: {kind}\ndata: {json.dumps(body)}\n\n".encode()

    def start(self) -> list[bytes]:
        return [self.event("response.created", response={**self.response, "output": []}),
                self.event("response.in_progress", response={**self.response, "output": []})]

    def steps(self, steps: list[Step]) -> list[bytes]:
        out: list[bytes] = []
        for step in steps:
            if isinstance(step, Text):
                out += self.text(step)
            elif isinstance(step, Reasoning):
                out += self.reasoning(step)
            elif isinstance(step, FnCall):
                out += self.calls([step])
            else:
                out += self.calls(step.calls)
        return out

    def text(self, step: Text) -> list[bytes]:
        index = len(self.output)
        item: dict[str, Any] = {"id": step.item_id, "type": "message", "role": "assistant", "status": "in_progress",
                                "content": []}
        self.output.append(item)
        ids = {"item_id": step.item_id, "output_index": index, "content_index": 0}
        out = [self.event("response.output_item.added", output_index=index, item={**item}),
               self.event("response.content_part.added", **ids,
                          part={"type": "output_text", "text": "", "annotations": []})]
        out += [self.event("response.output_text.delta", **ids, delta=p, logprobs=[]) for p in step.pieces]
        text = "".join(step.pieces)
        part = {"type": "output_text", "text": text, "annotations": []}
        item.update(status="completed", content=[part])
        out += [self.event("response.output_text.done", **ids, text=text, logprobs=[]),
                self.event("response.content_part.done", **ids, part=part),
                self.event("response.output_item.done", output_index=index, item=item)]
        return out

    def reasoning(self, step: Reasoning) -> list[bytes]:
        index = len(self.output)
        item: dict[str, Any] = {"id": step.item_id, "type": "reasoning", "summary": []}
        self.output.append(item)
        out = [self.event("response.output_item.added", output_index=index, item={**item})]
        ids = {"item_id": step.item_id, "output_index": index, "summary_index": 0}
        if step.summary:
            out.append(self.event("response.reasoning_summary_part.added", **ids,
                                  part={"type": "summary_text", "text": ""}))
            out += [self.event("response.reasoning_summary_text.delta", **ids, delta=p) for p in step.summary]
            text = "".join(step.summary)
            out += [self.event("response.reasoning_summary_text.done", **ids, text=text),
                    self.event("response.reasoning_summary_part.done", **ids,
                               part={"type": "summary_text", "text": text})]
            item["summary"] = [{"type": "summary_text", "text": text}]
        if step.encrypted is not None:
            item["encrypted_content"] = step.encrypted
        out.append(self.event("response.output_item.done", output_index=index, item=item))
        return out

    def calls(self, calls: list[FnCall]) -> list[bytes]:
        out: list[bytes] = []
        items = []
        for call in calls:
            index = len(self.output)
            item = {"id": call.item_id or f"fc_{call.call_id}", "type": "function_call", "status": "in_progress",
                    "call_id": call.call_id, "name": call.name, "arguments": ""}
            self.output.append(item)
            items.append((index, item, call))
            out.append(self.event("response.output_item.added", output_index=index, item={**item}))
        # the pieces interleaved: the first piece of each call, then the second of each ...
        for k in range(max(len(c.pieces) for c in calls)):
            for index, item, call in items:
                if k < len(call.pieces):
                    out.append(self.event("response.function_call_arguments.delta", item_id=item["id"],
                                          output_index=index, delta=call.pieces[k]))
        for index, item, call in items:
            item.update(arguments="".join(call.pieces), status="completed")
            out += [self.event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                               arguments=item["arguments"]),
                    self.event("response.output_item.done", output_index=index, item=item)]
        return out

    def completed(self, usage: dict[str, Any] | None = USAGE) -> bytes:
        return self.event("response.completed", response={**self.response, "status": "completed", "usage": usage})

    def incomplete(self, reason: str, usage: dict[str, Any] | None = USAGE) -> bytes:
        return self.event("response.incomplete", response={**self.response, "status": "incomplete", "usage": usage,
                                                           "incomplete_details": {"reason": reason}})

    def failed(self, code: str, message: str) -> bytes:
        return self.event("response.failed", response={**self.response, "status": "failed",
                                                       "error": {"code": code, "message": message}})

    def error(self, code: str, message: str) -> bytes:
        return self.event("error", code=code, message=message, param=None)


def encode(steps: list[Step], usage: dict[str, Any] | None = USAGE) -> list[bytes]:
    """A whole successful response: created, in_progress, the steps' events, completed with ``usage``."""
    enc = ResponseEvents()
    return [*enc.start(), *enc.steps(steps), enc.completed(usage)]


@dataclass
class Failure:
    """An HTTP error answer: status, the provider's error object, and headers (``retry-after``...)."""

    status: int
    error: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


class FakeResponses:
    """Speaks the Responses API's streaming. Queued replies (``replies``: each a list of SSE event bytes, a
    :class:`Failure`, ``"drop"`` to close the connection, ``"endless"`` to stream text until the client goes) are
    played first; with none queued: a call of the first tool (arguments in pieces) when tools are offered and
    the last input item is the user's, else a text answer quoting the last function call output."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.replies: list[Any] = []
        #: responses still being written (an endless one until the client closes its connection)
        self.open = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        reply = self.replies.pop(0) if self.replies else None
        if reply == "drop":
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        if isinstance(reply, Failure):
            return web.json_response({"error": reply.error}, status=reply.status, headers=reply.headers)
        assert body["stream"] is True
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if reply == "endless":
            enc = ResponseEvents()
            self.open += 1
            try:
                for chunk in [*enc.start(), enc.event("response.output_item.added", output_index=0, item={
                        "id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress",
                        "content": []})]:
                    await resp.write(chunk)
                while True:
                    await resp.write(enc.event("response.output_text.delta", item_id="msg_1", output_index=0,
                                               content_index=0, delta="tok ", logprobs=[]))
                    await asyncio.sleep(0.02)
            except (ConnectionError, RuntimeError, asyncio.CancelledError):
                return resp
            finally:
                self.open -= 1
        for chunk in reply if reply is not None else self.default(body):
            await resp.write(chunk)
        return resp

    def default(self, body: dict[str, Any]) -> list[bytes]:
        last = body["input"][-1]
        if body.get("tools") and last.get("role") == "user":
            return encode([FnCall("call_provider_1", body["tools"][0]["name"], ['{"li', 'mit": ', "3}"])])
        result = last["output"] if last.get("type") == "function_call_output" else "nothing"
        return encode([Text(["The page ", "says: ", result])])


async def serve(fake: FakeResponses) -> AsyncIterator[str]:
    """Run ``fake`` on a loopback port; yields its base URL (``http://127.0.0.1:PORT/v1``)."""
    app = web.Application()
    app.router.add_post("/v1/responses", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


# ---------------------------------------------------------------------------------------------- the shared scenarios


class ResponsesEncoder(Encoder):
    """OpenAI's Responses API for tests/provider_fakes.py: a reply's text as a message item's ``output_text``
    deltas, its calls as ``function_call`` items whose argument pieces interleave, ``response.completed`` with the
    usage; failures as OpenAI's error bodies (``context_length_exceeded`` in the Responses API's wording)."""

    name = "openai-responses"
    path = "/v1/responses"
    base_suffix = "/v1"
    adapter = "openai-responses"
    #: ``reasoning_effort`` of the relay's model (None: a model without reasoning).
    effort: ClassVar[str | None] = None

    def model_config(self, base_url: str) -> ModelConfig:
        cfg = super().model_config(base_url)
        cfg.reasoning_effort = self.effort
        return cfg

    def frames(self, reply: Reply, body: dict[str, Any]) -> Iterator[bytes | Pause]:
        enc = ResponseEvents(model="fake-model")
        yield from enc.start()
        if self.effort is not None:
            assert body.get("include") == ["reasoning.encrypted_content"] and body.get("store") is False
            # Within the turn (after the reader's last message) each call goes back after the reasoning before it.
            users = [k for k, i in enumerate(body["input"]) if i.get("role") == "user"]
            turn_items = body["input"][users[-1] + 1:] if users else body["input"]
            for k, item in enumerate(turn_items):
                if item.get("type") == "function_call":
                    assert any(i.get("type") == "reasoning" and str(i.get("encrypted_content")).startswith("ENC-")
                               for i in turn_items[:k]), f"call {item['call_id']} went back without its reasoning"
            turn = sum(1 for i in body["input"] if i.get("type") == "function_call_output")
            yield from enc.reasoning(Reasoning(f"rs_{turn}", f"ENC-{turn}", summary=["The reader wants ", "this."]))
        index = -1
        text = ""
        for piece in reply.text:
            if isinstance(piece, Pause):
                yield piece
                continue
            if index < 0:
                index = len(enc.output)
                enc.output.append({"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress",
                                   "content": []})
                yield enc.event("response.output_item.added", output_index=index, item={**enc.output[index]})
                yield enc.event("response.content_part.added", item_id="msg_1", output_index=index, content_index=0,
                                part={"type": "output_text", "text": "", "annotations": []})
            text += piece
            yield enc.event("response.output_text.delta", item_id="msg_1", output_index=index, content_index=0,
                            delta=piece, logprobs=[])
        if index >= 0:
            part = {"type": "output_text", "text": text, "annotations": []}
            enc.output[index].update(status="completed", content=[part])
            ids = {"item_id": "msg_1", "output_index": index, "content_index": 0}
            yield enc.event("response.output_text.done", **ids, text=text, logprobs=[])
            yield enc.event("response.content_part.done", **ids, part=part)
            yield enc.event("response.output_item.done", output_index=index, item=enc.output[index])
        if reply.calls:
            yield from enc.calls([FnCall(c.id or f"call_{i}", c.name, pieces(arguments_text(c)))
                                  for i, c in enumerate(reply.calls)])
        usage = None
        if reply.usage is not None:
            usage = {"input_tokens": reply.usage[0], "input_tokens_details": {"cached_tokens": 0},
                     "output_tokens": reply.usage[1], "output_tokens_details": {"reasoning_tokens": 0},
                     "total_tokens": sum(reply.usage)}
        yield enc.completed(usage)

    def error(self, kind: FailKind, reply: Reply) -> tuple[int, dict[str, str], dict[str, Any]]:
        def err(message: str, type_: str, code: str | None) -> dict[str, Any]:
            return {"error": {"message": message, "type": type_, "param": None, "code": code}}

        if kind == "rate_limit":
            return 429, {"retry-after": str(reply.retry_after)}, err(
                "Rate limit reached for fake-model on requests per min (RPM): Limit 3, Used 3, Requested 1.",
                "requests", "rate_limit_exceeded")
        if kind == "auth":
            return 401, {}, err("Incorrect API key provided: sk-test.", "invalid_request_error", "invalid_api_key")
        if kind == "context_overflow":
            return 400, {}, err("Your input exceeds the context window of this model. Please adjust your input and "
                                "try again.", "invalid_request_error", "context_length_exceeded")
        return 503, {}, err("The server is overloaded or not ready yet.", "server_error", None)

    def garbage(self) -> bytes:
        return b"event: response.output_text.delta\ndata: {not json\n\n"

    def check(self, body: dict[str, Any]) -> list[str]:
        """The Responses API's rules: ``input`` a list of messages (user / assistant / system / developer) and items;
        a ``function_call`` with ``call_id``, ``name`` and string ``arguments``, answered by one
        ``function_call_output`` of its ``call_id`` later in the input ("No tool output found for function call"),
        no output for any other id ("No tool call found for function call output"); an item's ``id``, when given,
        of its kind's prefix (``fc``, ``rs``, ``msg``); a reasoning item with ``store: false`` only with its
        ``encrypted_content``; function tools ``{type, name, parameters, strict}`` with names
        ``^[a-zA-Z0-9_-]{1,64}$``."""
        problems = []
        for t in body.get("tools") or []:
            if t.get("type") != "function" or not _TOOL_NAME.match(str(t.get("name"))) or "parameters" not in t:
                problems.append(f"tool {t.get('name')!r}: a function tool needs type, a name like "
                                f"{_TOOL_NAME.pattern} and parameters")
            if not isinstance(t.get("strict"), bool):
                problems.append(f"tool {t.get('name')!r}: strict must be said (the API takes a missing one as true)")
        items = body.get("input")
        if not isinstance(items, list) or not items:
            return [*problems, "input: a non-empty list of items"]
        calls: dict[str, int] = {}
        answered: set[str] = set()
        prefixes = {"function_call": "fc", "reasoning": "rs", "message": "msg"}
        for k, item in enumerate(items):
            kind = item.get("type", "message")
            if kind in prefixes and "id" in item and not str(item["id"]).startswith(prefixes[kind]):
                problems.append(f"input[{k}].id: {item['id']!r}, expected an ID that begins with "
                                f"{prefixes[kind]!r}")
            if kind == "message":
                if item.get("role") not in ("user", "assistant", "system", "developer"):
                    problems.append(f"input[{k}]: role {item.get('role')!r}")
            elif kind == "function_call":
                if not item.get("call_id") or not item.get("name") or not isinstance(item.get("arguments"), str):
                    problems.append(f"input[{k}]: a function_call needs call_id, name and string arguments")
                calls[str(item.get("call_id"))] = k
            elif kind == "function_call_output":
                call_id = str(item.get("call_id"))
                if call_id not in calls or call_id in answered:
                    problems.append(f"input[{k}]: No tool call found for function call output with call_id {call_id}")
                answered.add(call_id)
                if not isinstance(item.get("output"), str):
                    problems.append(f"input[{k}].output: a string")
            elif kind == "reasoning":
                if body.get("store") is False and not item.get("encrypted_content"):
                    problems.append(f"input[{k}]: Item with id {item.get('id')!r} not found. Items are not persisted "
                                    "when `store` is set to false.")
            else:
                problems.append(f"input[{k}].type: {kind!r}")
        problems += [f"No tool output found for function call {c}." for c in calls if c not in answered]
        return problems

    def tool_names(self, body: dict[str, Any]) -> list[str]:
        return [t["name"] for t in body.get("tools") or []]

    def tool_calls(self, body: dict[str, Any]) -> list[tuple[str, str, Any]]:
        return [(i["call_id"], i["name"], json.loads(i["arguments"] or "{}"))
                for i in body["input"] if i.get("type") == "function_call"]

    def tool_results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        return [(i["call_id"], i["output"]) for i in body["input"] if i.get("type") == "function_call_output"]

    def user_texts(self, body: dict[str, Any]) -> list[str]:
        return [i["content"] for i in body["input"] if i.get("role") == "user"]


class ResponsesReasoningEncoder(ResponsesEncoder):
    """The Responses API with a reasoning model: a reasoning item (encrypted, with a summary) before each reply."""

    name = "openai-responses-reasoning"
    effort = "low"


register(ResponsesEncoder())
register(ResponsesReasoningEncoder())

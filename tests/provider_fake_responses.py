"""A fake OpenAI Responses API: a script of a model's reply encoded as the SSE events the provider documents for
``POST /v1/responses`` with ``stream: true`` (``response.created`` ... ``response.completed``), and an aiohttp
server that plays them (or fails as the provider does: an HTTP error with its headers, an ``error`` event, a
failed or incomplete response, a dropped connection, an endless stream for Stop).

The event shapes follow the SDK's types (openai/types/responses/: ResponseTextDeltaEvent,
ResponseFunctionCallArgumentsDeltaEvent, ResponseOutputItemAddedEvent, ResponseCompletedEvent ...)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Text:
    """An assistant message streamed in ``pieces``."""

    pieces: list[str]
    item_id: str = "msg_1"


@dataclass
class Call:
    """A function call whose arguments stream in ``pieces``."""

    call_id: str
    name: str
    pieces: list[str]
    item_id: str = ""


@dataclass
class Parallel:
    """Function calls in one response with their argument pieces interleaved (as a model streams them)."""

    calls: list[Call]


@dataclass
class Reasoning:
    """A reasoning item: its encrypted content (when asked for) and summary text streamed as its own events."""

    item_id: str
    encrypted: str | None
    summary: list[str] = field(default_factory=list)


Step = Text | Call | Parallel | Reasoning

USAGE = {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 4},
         "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 3}, "total_tokens": 19}


class Encoder:
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
            elif isinstance(step, Call):
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

    def calls(self, calls: list[Call]) -> list[bytes]:
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
    enc = Encoder()
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
            enc = Encoder()
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
            return encode([Call("call_provider_1", body["tools"][0]["name"], ['{"li', 'mit": ', "3}"])])
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

"""A scripted model adapter for tests, without a relay: the relay tests run it inside a relay, the unit tests alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from widget.relay.models.base import ModelAdapter, ModelRequest, TextDelta


class ScriptedModel(ModelAdapter):
    """A test model playing one scripted round per request: its chunks (TextDelta / ToolCall) in
    order; an exception in the list is raised at that point (after the chunks before it). Records
    every request. With no script left it answers "(unscripted)"."""

    name = "scripted"

    def __init__(self) -> None:
        self.rounds: list[list[Any]] = []
        self.requests: list[ModelRequest] = []

    def script(self, *rounds: list[Any]) -> None:
        self.rounds.extend(list(r) for r in rounds)

    def reset(self) -> None:
        self.rounds.clear()
        self.requests.clear()

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:  # type: ignore[override]
        self.requests.append(request)
        chunks = self.rounds.pop(0) if self.rounds else [TextDelta("(unscripted)")]
        for c in chunks:
            if isinstance(c, BaseException):
                raise c
            await asyncio.sleep(0)
            yield c

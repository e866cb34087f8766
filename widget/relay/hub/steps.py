"""The model side of a turn's rounds: which model answers (the app's, or its fallback) and what each round cost.

A turn streams one model response per round through :class:`ModelSteps`. When the app's model fails with
``model_unavailable`` or ``model_rate_limited`` before its response carried anything, the turn goes on with the
app's ``fallback_model`` (once per turn, from that round on); a failure after text or a call reached the reader is
the turn's error as before, since a second model would answer a question half answered. The token counts the
adapters report (:class:`~widget.relay.models.base.Usage`) are kept per round for the turn log, the store
(``stats``) and the tracing spans; they are counts, never text.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypedDict

from ...protocol import TurnErrorCode
from ..models.base import ModelAdapter, ModelError, ModelRequest, StreamLimits, TextDelta, ToolCall, Usage, guarded
from ..storage.base import UsageRow

log = logging.getLogger("widget.relay")

#: The errors a fallback model answers instead: the provider is away or refusing for a while, not the request.
FALLBACK_CODES = frozenset({TurnErrorCode.MODEL_UNAVAILABLE, TurnErrorCode.MODEL_RATE_LIMITED})


class FallbackNote(TypedDict):
    """The turn log's ``fallback``: the app's model failed and which model went on, from which round."""

    step: int
    #: ``[models.<name>]`` entries: the app's model and its fallback.
    primary: str
    fallback: str
    #: The primary's error code.
    code: str


#: Build a round's request for a model (the tool schemas depend on the model that will read them).
BuildRequest = Callable[[ModelAdapter], Awaitable[ModelRequest]]


@dataclass
class ModelSteps:
    """One turn's model rounds: streams each through the guard, switches to the fallback model when allowed, and
    keeps every round's usage."""

    #: ``[models.<name>]`` of the model answering now, and the adapters by name.
    name: str
    models: dict[str, ModelAdapter]
    #: The app's fallback model (None: none, or already in use).
    fallback: str | None = None
    #: Told each round's usage when its response has ended (the tracing spans).
    on_usage: Callable[[UsageRow], None] = lambda _row: None
    usage: list[UsageRow] = field(default_factory=list)
    fallback_used: FallbackNote | None = None
    _step: int = 0

    @property
    def model(self) -> ModelAdapter:
        """The adapter answering now."""
        return self.models[self.name]

    async def stream(self, build: BuildRequest, limits: StreamLimits) -> AsyncIterator[TextDelta | ToolCall]:
        """One round: its text deltas and tool calls, in order; its usage is recorded, not yielded. A
        :class:`ModelError` of the model answering now goes to the caller unless the fallback takes the round."""
        step = self._step
        self._step += 1
        while True:
            request = await build(self.model)
            carried = False
            try:
                async for chunk in guarded(self.model.stream(request), limits):
                    if isinstance(chunk, Usage):
                        self._record(step, chunk)
                        continue
                    carried = carried or isinstance(chunk, ToolCall) or bool(chunk.text)
                    yield chunk
                # told when the response is over: the round has started by then (the guard yields a response's
                # tool calls at its end, after any usage), so the round's span is there to carry it
                for row in self.usage:
                    if row["step"] == step:
                        self.on_usage(row)
                return
            except ModelError as exc:
                if carried or self.fallback is None or exc.code not in FALLBACK_CODES:
                    raise
                log.warning("model %s failed with %s; the turn goes on with %s", self.name, exc.code, self.fallback)
                self.fallback_used = FallbackNote(step=step, primary=self.name, fallback=self.fallback,
                                                  code=str(exc.code))
                self.name, self.fallback = self.fallback, None

    def _record(self, step: int, u: Usage) -> None:
        row = UsageRow(step=step, model=self.name, input_tokens=u.input_tokens, output_tokens=u.output_tokens,
                       cached_input_tokens=u.cached_input_tokens, reasoning_tokens=u.reasoning_tokens,
                       cache_write_tokens=u.cache_write_tokens)
        # an adapter that reports twice in one response: the later counts replace the earlier
        self.usage = [r for r in self.usage if not (r["step"] == step and r["model"] == self.name)] + [row]

    def totals(self) -> dict[str, int]:
        """The turn's tokens summed over its rounds (keys only for the counts some provider reported)."""
        out: dict[str, int] = {}
        for row in self.usage:
            counts = {"input_tokens": row["input_tokens"], "output_tokens": row["output_tokens"],
                      "cached_input_tokens": row["cached_input_tokens"], "reasoning_tokens": row["reasoning_tokens"],
                      "cache_write_tokens": row["cache_write_tokens"]}
            for key, value in counts.items():
                if value is not None:
                    out[key] = out.get(key, 0) + value
        return out

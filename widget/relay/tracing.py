"""Optional OpenTelemetry traces of turns, model rounds and calls (off by default).

With ``tracing = "otlp"`` (or ``"console"``) in the relay config and the ``otel`` extra installed
(``pip install 'autopilot-widget[otel]'``), the relay exports one trace per turn: an ``autopilot.turn`` span
from the turn's first ``completion.started`` to its ``completion.finished``, with an ``autopilot.model_round``
child per model round and an ``autopilot.call`` child per function or tool call. The spans are made from the
sequenced events the hub stores (one hook where every event passes), so they follow exactly what readers see.
Attributes: turn id, status, error code, call name, kind, status and times; never arguments, results, message
text, page context or the conversation id (the reader's capability). The OTLP exporter reads the standard
``OTEL_EXPORTER_OTLP_*`` environment (endpoint, headers) unless ``otlp_endpoint`` is set.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import protocol as P
from ..errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

    from .config import RelayConfig
    from .storage.base import UsageRow

log = logging.getLogger("widget.relay")

#: ``tracing`` values: no traces, OTLP over HTTP, or spans printed to stdout (to try it out).
TRACING_MODES = ("off", "otlp", "console")
#: Open turns traced at once per process; past it a new turn is not traced (a bound on memory).
MAX_OPEN_TURNS = 10_000


@dataclass
class _Turn:
    """The open spans of one conversation's running turn."""

    turn_id: str | None
    span: Span
    round: Span | None = None
    calls: dict[str, Span] = field(default_factory=dict)
    #: the turn's tokens so far, by attribute name
    tokens: dict[str, int] = field(default_factory=dict)


class Tracing:
    """Turns the hub's stored events into spans (see the module doc); one per relay process."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer: Tracer = provider.get_tracer("widget.relay")
        self._turns: dict[str, _Turn] = {}

    @classmethod
    def with_exporter(cls, exporter: SpanExporter, *, batch: bool = True) -> Tracing:
        """Tracing into ``exporter`` (``batch=False``: each span exported as it ends, as a test wants)."""
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        provider = TracerProvider(resource=Resource.create({"service.name": "autopilot-relay"}))
        provider.add_span_processor(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
        return cls(provider)

    def saw(self, cid: str, name: str, payload: dict[str, Any]) -> None:
        """One stored event of conversation ``cid``; never raises (a tracing bug must not break a turn)."""
        try:
            self._saw(cid, name, payload)
        except Exception:
            log.exception("tracing: event %s not traced", name)

    def _saw(self, cid: str, name: str, payload: dict[str, Any]) -> None:
        from opentelemetry import trace

        turn = self._turns.get(cid)
        message = (payload.get("message") or {}) if name == P.Event.MESSAGE else {}
        if message.get("role") == P.Role.USER:  # the reader's message starts a turn (its id comes later)
            turn = self._open(cid, None)
        elif name in (P.Event.COMPLETION_STARTED, P.Event.MESSAGES_WITHDRAWN):  # retry/regenerate start with the latter
            turn_id = str(payload.get("turn_id"))
            if turn is None or (turn.turn_id is not None and turn.turn_id != turn_id):
                turn = self._open(cid, turn_id)
            elif turn.turn_id is None:
                turn.turn_id = turn_id
                turn.span.set_attribute("autopilot.turn_id", turn_id)
            if turn is not None and name == P.Event.COMPLETION_STARTED:
                if turn.round is not None:
                    turn.round.end()
                turn.round = self.tracer.start_span(
                    "autopilot.model_round", context=trace.set_span_in_context(turn.span)
                )
            return
        if turn is None:
            return
        if name == P.Event.COMPLETION_ENDED:
            if turn.round is not None:
                calls = (payload.get("message") or {}).get("function_calls") or []
                turn.round.set_attribute("autopilot.calls_requested", len(calls))
                turn.round.end()
                turn.round = None
        elif name == P.Event.FUNCTION_CALL_BEGIN:
            call_id = str(payload.get("id"))
            turn.calls[call_id] = self.tracer.start_span(
                "autopilot.call",
                context=trace.set_span_in_context(turn.span),
                attributes={
                    "autopilot.call.name": str(payload.get("name")),
                    "autopilot.call.kind": str(payload.get("kind") or P.Kind.FUNCTION),
                },
            )
        elif name == P.Event.FUNCTION_CALL_END:
            self._end_call(turn, payload)
        elif name == P.Event.MESSAGE:
            if message.get("role") == P.Role.ERROR:
                turn.span.set_attribute("autopilot.error_code", str(message.get("code")))
        elif name == P.Event.COMPLETION_FINISHED:
            if turn.turn_id is None:  # a turn that failed before its first round had no id yet
                turn.span.set_attribute("autopilot.turn_id", str(payload.get("turn_id")))
            self._end_turn(cid, str(payload.get("status")))

    def usage(self, cid: str, row: UsageRow) -> None:
        """A model round's token counts (never text): on the round's span and summed on the turn's, as the
        OpenTelemetry GenAI conventions name them (``gen_ai.usage.input_tokens``...); never raises."""
        try:
            turn = self._turns.get(cid)
            if turn is None:
                return
            counts = {"gen_ai.usage.input_tokens": row["input_tokens"],
                      "gen_ai.usage.output_tokens": row["output_tokens"],
                      "autopilot.usage.cached_input_tokens": row["cached_input_tokens"],
                      "autopilot.usage.reasoning_tokens": row["reasoning_tokens"]}
            if turn.round is not None:
                turn.round.set_attribute("autopilot.model", row["model"])
            for key, value in counts.items():
                if value is None:
                    continue
                if turn.round is not None:
                    turn.round.set_attribute(key, value)
                turn.tokens[key] = turn.tokens.get(key, 0) + value
                turn.span.set_attribute(key, turn.tokens[key])
        except Exception:
            log.exception("tracing: usage not traced")

    def _open(self, cid: str, turn_id: str | None) -> _Turn | None:
        """A new turn span for ``cid`` (ending one still open); None past ``MAX_OPEN_TURNS``."""
        if cid in self._turns:
            self._end_turn(cid, "superseded")
        if len(self._turns) >= MAX_OPEN_TURNS:
            return None
        span = self.tracer.start_span("autopilot.turn", attributes={"autopilot.turn_id": turn_id} if turn_id else None)
        turn = self._turns[cid] = _Turn(turn_id, span)
        return turn

    def _end_call(self, turn: _Turn, payload: dict[str, Any]) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        call_id = str(payload.get("id"))
        span = turn.calls.pop(call_id, None)
        if span is None:  # a relay tool runs without a begin event: its span covers its measured time
            total = payload.get("total_ms")
            start = time.time_ns() - int(float(total) * 1e6) if isinstance(total, (int, float)) else None
            span = self.tracer.start_span(
                "autopilot.call",
                context=trace.set_span_in_context(turn.span),
                start_time=start,
                attributes={"autopilot.call.name": str(payload.get("name")), "autopilot.call.kind": "relay"},
            )
        status = str(payload.get("status"))
        span.set_attribute("autopilot.call.status", status)
        for key in ("duration_ms", "total_ms"):
            value = payload.get(key)
            if isinstance(value, (int, float)):
                span.set_attribute(f"autopilot.call.{key}", float(value))
        if status != P.CallStatus.SUCCESS:
            span.set_status(Status(StatusCode.ERROR))
        span.end()

    def _end_turn(self, cid: str, status: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        turn = self._turns.pop(cid)
        for span in turn.calls.values():
            span.set_attribute("autopilot.call.status", "unfinished")
            span.end()
        if turn.round is not None:
            turn.round.end()
        turn.span.set_attribute("autopilot.turn.status", status)
        if status != P.TurnStatus.DONE and status != P.TurnStatus.CANCELLED:
            turn.span.set_status(Status(StatusCode.ERROR))
        turn.span.end()

    def shutdown(self) -> None:
        """Export what is buffered and stop."""
        self.provider.shutdown()


def make_tracing(config: RelayConfig) -> Tracing | None:
    """The relay's tracing as configured (None when off); a missing SDK is a ``ConfigError`` saying what to install."""
    mode = config.tracing
    if mode == "off":
        return None
    if mode not in TRACING_MODES:
        raise ConfigError(f"tracing must be one of {', '.join(TRACING_MODES)}, got {mode!r}")
    try:
        if mode == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            return Tracing.with_exporter(ConsoleSpanExporter())
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise ConfigError(f"tracing = {mode!r} needs OpenTelemetry: pip install 'autopilot-widget[otel]'") from None
    exporter = OTLPSpanExporter(endpoint=config.otlp_endpoint) if config.otlp_endpoint else OTLPSpanExporter()
    return Tracing.with_exporter(exporter)

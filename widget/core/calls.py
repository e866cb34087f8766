"""Calls in the sans-I/O client session: running each at most once, the history, withholding a response for
context resolutions and the state-sync gate, the outbox and its resend (a part of ``ClientSession``)."""

from __future__ import annotations

import collections
import itertools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import protocol as P
from ..protocol import CallStatus, ClientEvent
from ..protocol.messages import FunctionCallRecord, FunctionResponsePayload
from .effects import Effect, FlushResult, Notify, Options, RunCall, Send

if TYPE_CHECKING:
    from .state import StateSync

log = logging.getLogger("widget")

#: Error codes of a ``function_response`` ack after which the response is sent again later (the relay could not
#: take it now); any other refusal is final.
TRANSIENT_RESPONSE_ERRORS = frozenset(
    {P.ErrorCode.INTERNAL, P.ErrorCode.UNAVAILABLE, P.ErrorCode.RATE_LIMITED, P.ErrorCode.BUSY}
)
#: Seconds between resends of a response refused as transient; the last value repeats.
RESEND_DELAYS_S: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 5.0)
#: A response still refused as transient this long after its call was received is dropped (the relay timed the
#: call out long before).
RESEND_WINDOW_S = 4 * P.FUNCTION_CALL_TIMEOUT_S

@dataclass
class CallEntry:
    """One call run here, from its start to the relay taking its response."""

    request: dict[str, Any]
    record: FunctionCallRecord
    started: float = 0.0
    payload: FunctionResponsePayload | None = None
    #: Withheld: until when context resolutions / the state sync are waited on (None: not waiting on them yet).
    resolutions_until: float | None = None
    waited_resolutions: bool = False
    state_until: float | None = None
    withheld: bool = False
    attempts: int = 0
    resend_at: float | None = None
    #: totalMs of the latest send (unrounded; the payload carries it rounded).
    total_ms: float = 0.0
    #: The relay ended the call while it ran here (a Stop): its refusal of the late response is expected.
    ended_by_relay: bool = False


class CallsPart:
    """The calls of ``ClientSession`` (see ``widget.core.session``)."""

    options: Options
    state: StateSync
    history: collections.deque[FunctionCallRecord]
    history_limit: int
    joined: bool
    _started: set[str]
    _running: set[str]
    _calls: dict[str, CallEntry]
    _resolutions: dict[int, str]
    _resolution_ids: itertools.count[int]

    if TYPE_CHECKING:  # provided by the session

        def can_send(self) -> bool: ...

        def flush(self, now: float) -> FlushResult: ...

    def set_history_limit(self, limit: int) -> None:
        """Keep the last ``limit`` call records (the older ones go)."""
        if limit != self.history.maxlen:
            self.history = collections.deque(self.history, maxlen=limit)
        self.history_limit = limit

    # ------------------------------------------------------------------ calls
    def _run(self, call: Any) -> list[Effect]:
        call_id = call.get("id") if isinstance(call, dict) else None
        if not isinstance(call_id, str) or call_id in self._started:
            return []  # each call runs at most once here, however often it is handed over
        self._started.add(call_id)
        self._running.add(call_id)
        name = call.get("name") if isinstance(call.get("name"), str) else ""
        args = call.get("arguments")
        return [RunCall({"id": call_id, "name": name, "arguments": {} if args is None else args})]

    def call_received(
        self, call_id: str, name: str, arguments: Any, wall_ms: float
    ) -> tuple[dict[str, Any], list[Effect]]:
        """The driver starts a call: its history record and request, and the ``functionCall`` notification."""
        record: FunctionCallRecord = {
            "id": call_id,
            "name": name,
            "status": P.CallProgress.RUNNING,
            "startedAt": wall_ms,
            "settledAt": None,
            "respondedAt": None,
            "handlerMs": None,
            "totalMs": None,
        }
        self.history.appendleft(record)
        request = {"id": call_id, "name": name, "arguments": arguments, "timestamp": wall_ms}
        self._calls[call_id] = CallEntry(request=request, record=record)
        return request, [Notify(ClientEvent.FUNCTION_CALL, {"request": request})]

    def call_ready(self, call_id: str, now: float, wall_ms: float) -> None:
        """The call's checks are done and its handler (or confirmation) starts: the clocks start here, so loading
        the schema validator on a first call is not counted as the handler's time."""
        call = self._calls[call_id]
        call.started = now
        call.record["startedAt"] = wall_ms

    def call_settled(self, call_id: str, status: str, result: Any, error: str | None, now: float) -> list[Effect]:
        """The handler settled: notify at once; the response is withheld by resolutions and the state-sync gate."""
        self._running.discard(call_id)
        call = self._calls[call_id]
        duration_ms = (now - call.started) * 1000
        call.record["status"] = status
        call.record["settledAt"] = call.record["startedAt"] + duration_ms
        call.record["handlerMs"] = duration_ms
        payload: FunctionResponsePayload = {
            "id": call_id,
            "status": CallStatus(status),
            "idempotency_key": f"fr-{call_id}",
            "duration_ms": round(duration_ms, 3),
        }
        if status == P.CallStatus.SUCCESS:
            payload["result"] = result
            note = Notify(ClientEvent.FUNCTION_SUCCESS,
                          {"request": call.request, "result": result, "durationMs": duration_ms})
        else:
            payload["error"] = error
            note = Notify(ClientEvent.FUNCTION_ERROR,
                          {"request": call.request, "error": error, "durationMs": duration_ms})
        call.payload = payload
        call.withheld = True
        if self._resolutions:
            call.waited_resolutions = True
            call.resolutions_until = now + self.options.context_resolution_timeout_ms / 1000
        return [note, *self._pump(now)]

    def _pump(self, now: float) -> list[Effect]:
        """Release every withheld response whose conditions are met (or whose fallback has passed)."""
        effects: list[Effect] = []
        for call in list(self._calls.values()):
            if not call.withheld:
                continue
            if call.resolutions_until is not None:
                if self._resolutions and now < call.resolutions_until:
                    continue
                if self._resolutions:
                    log.warning("context resolution timed out; sending the response of %s anyway", call.request["id"])
                call.resolutions_until = None
            # Resolutions are honoured with the gate off too: what they wrote is committed before the response.
            gate = self.options.sync_state_before_function_response or call.waited_resolutions
            if gate and self.state.is_dirty() and self.can_send():
                if call.state_until is None:
                    call.state_until = now + self.options.sync_state_before_function_response_timeout_ms / 1000
                    effects += self.flush(now).effects
                if self.state.is_dirty():  # the flush may have had nothing it could send
                    if now < call.state_until:
                        continue
                    log.warning("state sync gate timed out; sending the response of %s anyway", call.request["id"])
            call.withheld = False
            effects += self._send_response(call, now)
        return effects

    def _send_response(self, call: CallEntry, now: float) -> list[Effect]:
        call.resend_at = None
        if not self.joined or call.payload is None:
            return []  # a socket that has not joined would be refused: the next join resends it
        call.total_ms = (now - call.started) * 1000
        call.payload["total_ms"] = round(call.total_ms, 3)
        call.attempts += 1
        return [Send(P.Event.FUNCTION_RESPONSE, dict(call.payload), f"fr:{call.attempts}:{call.payload['id']}")]

    def _resend_all(self, now: float) -> list[Effect]:
        return [e for c in list(self._calls.values()) if c.payload is not None and not c.withheld
                for e in self._send_response(c, now)]

    def _response_acked(self, tag: str, ack: Any, now: float) -> list[Effect]:
        _, attempt, call_id = tag.split(":", 2)
        call = self._calls.get(call_id)
        if call is None or call.payload is None or str(call.attempts) != attempt:
            return []  # a stale attempt: a later one decides
        refused = P.refusal_of(ack)
        code = None if refused is None else refused.code
        if code == P.ErrorCode.NOT_JOINED:
            return []  # kept: the rejoin resends it
        if code in TRANSIENT_RESPONSE_ERRORS:
            if now - call.started > RESEND_WINDOW_S:
                del self._calls[call_id]
                log.error("function response %s dropped: the relay kept answering %s", call_id, code)
                return []
            delay = RESEND_DELAYS_S[min(call.attempts, len(RESEND_DELAYS_S)) - 1]
            call.resend_at = now + delay
            log.warning("function response %s refused (%s); resending in %g s", call_id, code, delay)
            return []
        # Taken, or refused for good (the relay no longer waits for it): either way it leaves the outbox.
        del self._calls[call_id]
        if code is not None:
            expected = code == P.ErrorCode.CALL_NOT_PENDING and call.ended_by_relay
            (log.info if expected else log.warning)("relay refused function response %s: %s", call_id, ack.get("error"))
        total_ms = call.total_ms
        # Both stamps count from the same start, so the wall time of the send that landed is exact.
        call.record["respondedAt"] = call.record["startedAt"] + total_ms
        call.record["totalMs"] = total_ms
        return [Notify(ClientEvent.FUNCTION_RESPONSE_SENT, {"request": call.request, "totalMs": total_ms, "ack": ack})]

    def _response_unacknowledged(self, tag: str, now: float) -> list[Effect]:
        """No acknowledgement came for a response (the socket dropped, or the relay did not answer in time): it stays
        in the outbox for the next join and, while this socket stays joined, goes again after the resend delay (the
        relay takes a response once per idempotency key, so a second copy is harmless)."""
        _, attempt, call_id = tag.split(":", 2)
        call = self._calls.get(call_id)
        if call is None or call.payload is None or str(call.attempts) != attempt or not self.joined:
            return []
        if now - call.started <= RESEND_WINDOW_S:
            call.resend_at = now + RESEND_DELAYS_S[min(call.attempts, len(RESEND_DELAYS_S)) - 1]
        return []

    def local_call_settled(
        self, call_id: str, status: str, result: Any, error: str | None, now: float
    ) -> list[Effect]:
        """A call the page itself made (an in-browser agent, not the relay) settled: its record and events as for
        any call, answered at once to its caller, never sent to the relay."""
        self._running.discard(call_id)
        call = self._calls.pop(call_id)
        duration_ms = (now - call.started) * 1000
        record = call.record
        record["status"] = status
        record["settledAt"] = record["respondedAt"] = record["startedAt"] + duration_ms
        record["handlerMs"] = record["totalMs"] = duration_ms
        if status == P.CallStatus.SUCCESS:
            return [Notify(ClientEvent.FUNCTION_SUCCESS,
                           {"request": call.request, "result": result, "durationMs": duration_ms})]
        return [Notify(ClientEvent.FUNCTION_ERROR,
                       {"request": call.request, "error": error, "durationMs": duration_ms})]

    def call_running(self, call_id: str) -> bool:
        """Whether the call's handler (or its confirmation) is still running here."""
        return call_id in self._running

    def call_forgotten(self, call_id: str) -> None:
        """The driver gave up on a call before it settled (cancelled by a disconnect)."""
        self._running.discard(call_id)
        call = self._calls.get(call_id)
        if call is not None and call.payload is None:
            del self._calls[call_id]

    @property
    def outbox(self) -> list[str]:
        """Ids of calls whose response the relay has not taken yet."""
        return [k for k, c in self._calls.items() if c.payload is not None]

    # ------------------------------------------------------------------ context resolutions
    def begin_resolution(self, label: str) -> tuple[int, list[Effect]]:
        """Hold function responses until ``end_resolution`` (idempotent) of the returned id."""
        rid = next(self._resolution_ids)
        self._resolutions[rid] = label
        return rid, [Notify(ClientEvent.CONTEXT_RESOLUTION_CHANGED, {"pending": len(self._resolutions)})]

    def end_resolution(self, rid: int, now: float) -> list[Effect]:
        """Release one resolution; harmless when already released."""
        if self._resolutions.pop(rid, None) is None:
            return []
        return [Notify(ClientEvent.CONTEXT_RESOLUTION_CHANGED, {"pending": len(self._resolutions)}), *self._pump(now)]

    @property
    def pending_resolutions(self) -> int:
        """How many resolutions are outstanding."""
        return len(self._resolutions)

"""The client's protocol logic without I/O: inputs in, effects out, time passed in.

``ClientSession`` decides everything the relay protocol asks of a client - the join and rejoin, the active role,
sequence numbers and replay, running each call at most once, the outbox of function responses and their resend,
the void of a confirmation once the relay ended its call, the state-sync gate and context resolutions, the call
history, offered actions and ask-user prompts. It never awaits, sleeps or reads a clock: each input method takes
``now`` (seconds, monotonic) and returns the effects the driver must perform, in order:

- ``Send(event, payload, tag)``: emit to the relay and report the acknowledgement with ``acked(tag, ack, now)``
  (or ``send_failed(tag, now)`` when the socket could not deliver it);
- ``Notify(event, payload)``: tell page listeners (``client.on``);
- ``RunCall(call)``: run a page function call, then report ``call_ready`` and ``call_settled``;
- ``EndCall(call_id)``: the relay ended a call that is still running here (a pending confirmation is void);
- ``Rejoin()``: the socket is back after a drop: read the conversation again and join.

After every input the driver calls ``tick(now)`` no later than ``next_deadline()`` (debounces, gate fallbacks,
resends). ``widget.client.AutopilotClient`` is the asyncio driver.
"""

from __future__ import annotations

import collections
import itertools
import logging
from dataclasses import dataclass, field
from typing import Any

from .. import protocol as P
from ..errors import StateLimitError
from ..protocol import ClientEvent, ConnectionState
from ..protocol.messages import FunctionCallRecord, JoinPayload
from .calls import RESEND_DELAYS_S, RESEND_WINDOW_S, TRANSIENT_RESPONSE_ERRORS, CallEntry, CallsPart
from .effects import (
    Effect,
    EndCall,
    FlushResult,
    Notify,
    Options,
    Rejoin,
    RunCall,
    Send,
)
from .offers import OfferBook
from .sequence import DUPLICATE, GAP, SeqTracker
from .state import Outgoing, StateSync
from .streaming import StreamingSession

log = logging.getLogger("widget")

__all__ = [
    "ClientSession", "Effect", "EndCall", "FlushResult", "Notify", "Options", "Rejoin", "RunCall", "Send",
    "IDLE", "CONNECTING", "CONNECTED", "RECONNECTING", "DISCONNECTED", "ERROR",
    "TRANSIENT_RESPONSE_ERRORS", "RESEND_DELAYS_S", "RESEND_WINDOW_S",
    "RETRYABLE_REJOIN_ERRORS", "REJOIN_DELAYS_S", "TOKEN_REUSE_S",
]

# Connection states reported by ``connectionStateChanged`` (plain strings, as they travel to page code).
IDLE = ConnectionState.IDLE.value
CONNECTING = ConnectionState.CONNECTING.value
CONNECTED = ConnectionState.CONNECTED.value
RECONNECTING = ConnectionState.RECONNECTING.value
DISCONNECTED = ConnectionState.DISCONNECTED.value
ERROR = ConnectionState.ERROR.value

#: A rejoin refused with one of these codes (many tabs rejoining a restarted relay at once, a relay still starting)
#: is tried again after the next delay; the last value repeats. Any other refusal ends in the ``error`` state.
RETRYABLE_REJOIN_ERRORS = frozenset(
    {P.ErrorCode.RATE_LIMITED, P.ErrorCode.INTERNAL, P.ErrorCode.BUSY, P.ErrorCode.UNAVAILABLE, "connection_failed"}
)
REJOIN_DELAYS_S: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 15.0)
#: A replay the relay refused (rate limited, a passing error) is asked for again after this long (or the relay's
#: ``retry_after``, within reason): its events may have come, but the calls to run are in its ack.
REPLAY_RETRY_S = 2.0
#: A join token this young is used again for a rejoin without reading the conversation first: after a relay
#: restart the stored results then go out before anything else reaches the relay (half the token's lifetime, so
#: a clock or a slow join cannot make it expire on the way).
TOKEN_REUSE_S = P.JOIN_TOKEN_TTL_S / 2


@dataclass
class ClientSession(CallsPart):
    """The sans-I/O client; see the module docstring."""

    instance: str = "0"
    options: Options = field(default_factory=Options)
    history_limit: int = P.FUNCTION_CALL_HISTORY_LIMIT

    def __post_init__(self) -> None:
        self.state = StateSync(key_prefix=f"p{self.instance}-")
        self.seq = SeqTracker()
        self.stream = StreamingSession(on_ignored=lambda why: log.warning("stream: %s", why))
        self.connection_state = IDLE
        self.last_error: dict[str, Any] | None = None
        self.active = False
        #: The socket is up and the relay accepted our join (writes before that would be ``not_joined``).
        self.joined = False
        self.transport_up = False
        #: A join succeeded on this conversation: a socket that comes back by itself rejoins.
        self.rejoin_wanted = False
        self.closing = False
        self._rejoin_at: float | None = None
        self._token: str | None = None
        #: The conversation this client is on (from its GET), to ignore a role change named for another one.
        self.conversation_id: str | None = None
        self._token_at = 0.0
        self._rejoin_attempts = 0
        self.pending_ask_user: list[dict[str, Any]] = []
        self.history: collections.deque[FunctionCallRecord] = collections.deque(maxlen=self.history_limit)
        self._started: set[str] = set()
        #: Calls handed to the driver whose handler has not settled (a confirmation may be waiting on them).
        self._running: set[str] = set()
        self._calls: dict[str, CallEntry] = {}
        self._replay_pending = False
        #: When a refused replay is asked for again (None: none waiting).
        self._replay_at: float | None = None
        self._resolutions: dict[int, str] = {}
        self._resolution_ids = itertools.count(1)
        self._keys = itertools.count(1)
        #: Actions the model offered on its answers, by message id.
        self.offers = OfferBook()

    # ------------------------------------------------------------------ options and keys
    def next_key(self, kind: str) -> str:
        """A fresh idempotency key for a write of ``kind`` (one letter)."""
        return f"{kind}{self.instance}-{next(self._keys)}"

    # ------------------------------------------------------------------ connection
    def set_connection_state(self, state: str, error: dict[str, Any] | None = None) -> list[Effect]:
        """Record the connection state; the ``connectionStateChanged`` notification."""
        self.connection_state = state
        if error is not None:
            self.last_error = error
        elif state == CONNECTED:
            self.last_error = None
        return [Notify(ClientEvent.CONNECTION_STATE_CHANGED, {"state": state, "error": error})]

    def connecting(self) -> list[Effect]:
        """``connect()`` starts: it joins the socket it opens itself, so that socket's arrival is no rejoin."""
        self.closing = False
        self.rejoin_wanted = False
        return self.set_connection_state(CONNECTING)

    def failed(self, error: dict[str, Any]) -> list[Effect]:
        """Connecting or rejoining failed for good."""
        return [*self.set_connection_state(ERROR, error), Notify(ClientEvent.ERROR, error)]

    def transport_connected(self, now: float) -> list[Effect]:
        """The socket is up (first connect or reconnect)."""
        self.transport_up = True
        self.joined = False
        if self.rejoin_wanted and not self.closing:
            return [Rejoin()]
        return []

    def transport_disconnected(self, now: float) -> list[Effect]:
        """The socket dropped; local state stays, the relay's copy is forgotten until the next snapshot."""
        self.transport_up = False
        self.joined = False
        self.state.disconnected()
        self.active = False
        self._replay_pending = False
        self._replay_at = None  # the rejoin's ack lists the calls to run
        self._rejoin_at = None  # the socket's return triggers the next rejoin
        if self.closing:
            return []
        return self.set_connection_state(RECONNECTING)

    def closed(self) -> list[Effect]:
        """``disconnect()``: close for good (history and local state are kept)."""
        self.closing = True
        self.transport_up = False
        self.joined = False
        self.active = False
        self.state.disconnected()
        for call in self._calls.values():
            call.resend_at = None
        return self.set_connection_state(DISCONNECTED)

    def rejoin_failed(self, error: dict[str, Any], now: float) -> list[Effect]:
        """A rejoin (after the socket came back) failed: try again later when the relay may accept it then,
        otherwise the connection is in error."""
        if error.get("code") in RETRYABLE_REJOIN_ERRORS and not self.closing and self.transport_up:
            delay = REJOIN_DELAYS_S[min(self._rejoin_attempts, len(REJOIN_DELAYS_S) - 1)]
            asked = error.get("retry_after")
            if isinstance(asked, (int, float)) and not isinstance(asked, bool):
                delay = max(delay, min(float(asked), 60.0))  # the relay's own wait, within reason
            self._rejoin_attempts += 1
            self._rejoin_at = now + delay
            log.warning("rejoin refused (%s); trying again in %g s", error.get("code"), delay)
            return self.set_connection_state(RECONNECTING, error)
        return self.failed(error)

    def load(self, info: dict[str, Any]) -> list[Effect]:
        """A conversation GET: messages, sequence and pending prompts."""
        conversation = info["conversation"]
        cid = conversation.get("id") if isinstance(conversation, dict) else None
        self.conversation_id = cid if isinstance(cid, str) else None
        self.stream.load(info.get("messages") or [])
        self.seq.reset(int(conversation.get("seq") or 0))
        return [
            *self.set_pending_ask_user(info.get("pending_ask_user") or []),
            Notify(ClientEvent.CONVERSATION_LOADED, {"conversation": conversation, "messages": self.stream.messages,
                                                     "feedback": info.get("feedback") or []}),
        ]

    def token_received(self, token: str, now: float) -> None:
        """The conversation GET gave a join token at ``now``."""
        self._token, self._token_at = token, now

    def reusable_token(self, now: float) -> str | None:
        """The last join token while it is young enough to rejoin with it directly, else None."""
        if self._token is None or now - self._token_at >= TOKEN_REUSE_S:
            return None
        return self._token

    def join_payload(self, token: str) -> JoinPayload:
        """The ``join`` to emit with the conversation's token."""
        return {"token": token, "version": P.PROTOCOL_VERSION, "last_seq": self.seq.last_seq}

    def joined_relay(self, ack: dict[str, Any], snapshot: dict[str, Any], now: float) -> FlushResult:
        """The relay accepted the join and sent its state. Stored results go out first (after a relay restart they
        are what keeps a call from running twice), then the initial state sync; wait on its tag, then call
        ``initial_sync_done``."""
        self.active = bool(ack.get("active", True))
        self.state.snapshot(snapshot.get("functions"), snapshot.get("context"))
        self.rejoin_wanted = True
        self.joined = True
        self._rejoin_at = None
        self._replay_at = None  # this ack lists the calls to run
        self._rejoin_attempts = 0
        # The role is known before the state change is announced, so views never see "connected, read-only".
        effects: list[Effect] = [
            *self.set_connection_state(CONNECTED),
            Notify(ClientEvent.JOINED, {"conversation_id": ack.get("conversation_id"), "active": self.active}),
        ]
        if not self.active:
            return FlushResult(effects, None, True)
        effects += self._resend_all(now)
        flush = self.flush(now)
        return FlushResult(effects + flush.effects, flush.tag, flush.complete)

    def state_received(self, snapshot: Any, now: float) -> list[Effect]:
        """A ``state`` outside the join (the relay sends it after ``activate``): what the relay holds now becomes
        the diff base and every local part is due, so this client puts back what another tab changed meanwhile."""
        if not self.joined or not isinstance(snapshot, dict):
            return []
        self.state.snapshot(snapshot.get("functions"), snapshot.get("context"))
        return []

    def initial_sync_done(self, ack: dict[str, Any], conversation: Any, now: float) -> list[Effect]:
        """After the join's state sync: the calls handed to this client run, and the client is ready."""
        effects = self._pending_calls(ack) if self.active else []
        return [*effects, Notify(ClientEvent.READY, {"conversation": conversation})]

    def activated(self, ack: dict[str, Any], now: float) -> list[Effect]:
        """``activate`` succeeded ("Use here"): resend stored results, run handed-over calls. The state goes out once
        the relay's ``state`` that follows the ack arrives (``state_received``): diffing now would diff against what
        the relay held at the join, which another tab may have changed since."""
        self.active = True
        return [Notify(ClientEvent.ROLE_CHANGED, {"active": True}), *self._resend_all(now), *self._pending_calls(ack)]

    def new_conversation(self) -> None:
        """Forget the conversation's calls before joining a new one (history stays)."""
        self.rejoin_wanted = False
        self._token = None
        self._started.clear()
        self._calls = {k: c for k, c in self._calls.items() if c.payload is None}
        self.state.disconnected()

    def _pending_calls(self, ack: dict[str, Any]) -> list[Effect]:
        calls = ack.get("pending_calls")
        return [e for call in (calls if isinstance(calls, list) else []) for e in self._run(call)]

    # ------------------------------------------------------------------ incoming relay events
    def received(self, event: str, data: Any, now: float) -> list[Effect]:
        """A relay event other than the join's ``state``."""
        if event == P.Event.CLIENT_ROLE:
            named = data.get("conversation_id") if isinstance(data, dict) else None
            if isinstance(named, str) and self.conversation_id is not None and named != self.conversation_id:
                log.warning(
                    "client.role for conversation %s ignored (this client is on %s)", named, self.conversation_id
                )
                return []
            self.active = bool(isinstance(data, dict) and data.get("active"))
            return [Notify(ClientEvent.ROLE_CHANGED, {"active": self.active})]
        if event in P.SEQUENCED_EVENTS:
            return self._sequenced(event, data, now)
        if event == P.Event.REPLAY_DONE:
            # The join's replay ended at ``last_seq``: an event of it this client did not take (dropped as a gap)
            # is asked for again now, not only when a later event happens to arrive.
            last = data.get("last_seq") if isinstance(data, dict) else None
            if isinstance(last, int) and not isinstance(last, bool) and last > self.seq.last_seq:
                return self._ask_replay()
        if event == P.Event.FEEDBACK and isinstance(data, dict):  # a rating of an answer changed (any tab)
            return [Notify(ClientEvent.FEEDBACK, data)]
        return []

    def _ask_replay(self) -> list[Effect]:
        if self._replay_pending or not self.transport_up:
            return []
        self._replay_pending = True
        return [Send(P.Event.REPLAY, {"last_seq": self.seq.last_seq}, "replay")]

    def _sequenced(self, event: str, data: Any, now: float) -> list[Effect]:
        if not isinstance(data, dict):
            log.warning("relay event %r ignored: payload is not an object", event)
            return []
        verdict = self.seq.classify(data.get("seq"))
        if verdict == DUPLICATE:
            return []
        if verdict == GAP:
            return self._ask_replay()
        effects: list[Effect] = []
        if event == P.Event.MESSAGE:
            message = data.get("message")
            if isinstance(message, dict):
                self.stream.add_message(message)
                self.offers.outcome_recorded(message)
        elif event == P.Event.MESSAGES_WITHDRAWN:
            ids = data.get("message_ids")
            self.stream.withdraw(ids if isinstance(ids, list) else [])
        elif event == P.Event.ASK_USER_REQUEST:
            prompts = data.get("prompts")
            effects += self.set_pending_ask_user(prompts if isinstance(prompts, list) else [])
        elif event != P.Event.USER_INPUT:
            self.stream.handle(event, data)
            if event == P.Event.COMPLETION_ENDED:
                offered = self.offers.record(data.get("message"))
                if offered is not None:
                    effects.append(Notify(ClientEvent.ACTIONS_OFFERED, {"message_id": offered}))
        if event == P.Event.FUNCTION_CALL_BEGIN and data.get("run") is True and self.active:
            effects += self._run(data)
        elif event == P.Event.FUNCTION_CALL_END:
            call_id = data.get("id")
            if isinstance(call_id, str) and call_id in self._running:
                effects.append(EndCall(call_id))
                if call_id in self._calls:
                    self._calls[call_id].ended_by_relay = True
        effects += [Notify(event, data), Notify(ClientEvent.MESSAGES_CHANGED, None)]
        return effects

    # ------------------------------------------------------------------ acknowledgements and time
    def acked(self, tag: str, ack: Any, now: float) -> list[Effect]:
        """The relay acknowledged the ``Send`` with ``tag``."""
        if tag == "replay":
            self._replay_pending = False
            refused = P.refusal_of(ack)
            if refused is not None:
                # Refused for now: asked again later, since the copies that came say no call's run (a relay that no
                # longer knows the join is the rejoin's business).
                if refused.code != P.ErrorCode.NOT_JOINED:
                    self._replay_at = now + min(max(REPLAY_RETRY_S, refused.retry_after or 0.0), 60.0)
                return []
            # A call whose live copy was lost in the gap: the replay's copies never say run, its ack lists the calls
            # dispatched to this socket (docs/protocol.md, replay); run-once skips those already run.
            return self._pending_calls(ack) if self.active and isinstance(ack, dict) else []
        if tag.startswith("fr:"):
            return self._response_acked(tag, ack, now)
        if tag.startswith("patch:"):
            refused = P.refusal_of(ack, "State patch refused.")
            effects: list[Effect] = []
            if refused is not None:
                effects.append(Notify(ClientEvent.STATE_ERROR, {"code": refused.code, "message": refused.message}))
            self.state.ack(tag[len("patch:"):], refused is None)
            return effects + self._pump(now)
        return []

    def send_failed(self, tag: str, now: float) -> list[Effect]:
        """The socket could not deliver the ``Send`` with ``tag`` (no acknowledgement)."""
        if tag == "replay":
            self._replay_pending = False
            # Asked again (the events may have come, but the calls to run are in the ack); the transport's ack
            # timeout spaces the attempts, a dropped socket's rejoin replaces them.
            return self._ask_replay() if self.joined else []
        if tag.startswith("fr:"):
            return self._response_unacknowledged(tag, now)
        # A patch stays in flight until the next snapshot.
        return self._pump(now) if tag.startswith("patch:") else []

    def next_deadline(self) -> float | None:
        """When ``tick`` has work next, or None."""
        times = [t for t in (self._rejoin_at, self._replay_at) if t is not None]
        if self.can_send():
            t = self.state.next_deadline()
            if t is not None:
                times.append(t)
        for call in self._calls.values():
            for t in (call.resolutions_until if call.withheld else None,
                      call.state_until if call.withheld else None, call.resend_at):
                if t is not None:
                    times.append(t)
        return min(times) if times else None

    def tick(self, now: float) -> list[Effect]:
        """Debounced state sync, gate fallbacks and resends that are due at ``now``."""
        effects: list[Effect] = []
        if self._rejoin_at is not None and now >= self._rejoin_at:
            self._rejoin_at = None
            effects.append(Rejoin())
        if self._replay_at is not None and now >= self._replay_at and self.joined:
            self._replay_at = None
            effects += self._ask_replay()
        if self.can_send():
            effects += self._emit_patch(lambda: self.state.poll(now))[0]
        for call in list(self._calls.values()):
            if call.resend_at is not None and now >= call.resend_at:
                effects += self._send_response(call, now)
        return effects + self._pump(now)

    # ------------------------------------------------------------------ state sync
    def can_send(self) -> bool:
        """Whether state patches may go out now (joined, snapshot received, the active client)."""
        return self.state.base is not None and self.joined and self.transport_up and self.active

    def flush(self, now: float) -> FlushResult:
        """Send every pending part now (a forced sync)."""
        if not self.can_send():
            return FlushResult([], None, False)
        effects, tag, complete = self._emit_patch(self.state.flush)
        return FlushResult(effects, tag, complete)

    def flush_before_message(self, now: float) -> FlushResult | None:
        """The flush a user message waits for (up to the gate's timeout), or None: the model answers from the
        state the page had when the reader sent it, so a function registered or context set just before must
        not lose the race against its debounce."""
        if not (self.state.is_dirty() and self.can_send()):
            return None
        return self.flush(now)

    def _emit_patch(self, build: Any) -> tuple[list[Effect], str | None, bool]:
        try:
            outgoing: Outgoing | None = build()
        except StateLimitError as exc:
            return [_state_error(exc)], None, False
        if outgoing is None:
            return [], None, True
        effects: list[Effect] = [_state_error(outgoing.skipped)] if outgoing.skipped is not None else []
        tag = f"patch:{outgoing.key}"
        effects.append(Send(P.Event.STATE_PATCH, {"patch": outgoing.patch, "idempotency_key": outgoing.key}, tag))
        return effects, tag, outgoing.skipped is None

    def patches_in_flight(self) -> list[str]:
        """Tags of the state patches the relay has not acknowledged."""
        return [f"patch:{k}" for k in self.state.in_flight]

    # ------------------------------------------------------------------ ask user
    def set_pending_ask_user(self, prompts: list[Any]) -> list[Effect]:
        """The prompts the model waits on now (empty: none)."""
        had = bool(self.pending_ask_user)
        self.pending_ask_user = [p for p in prompts if isinstance(p, dict)]
        if self.pending_ask_user:
            return [Notify(ClientEvent.ASK_USER_REQUIRED, {"prompts": [dict(p) for p in self.pending_ask_user]})]
        return [Notify(ClientEvent.ASK_USER_CLEARED, None)] if had else []

def _state_error(exc: StateLimitError) -> Notify:
    return Notify(ClientEvent.STATE_ERROR, {"code": exc.code, "message": str(exc)})

"""Every name of protocol v1: Socket.IO events, statuses, kinds, roles, error codes, tool names.

Each ``StrEnum`` member *is* its wire string (``Event.JOIN == "join"``), so members can be compared with,
and used as, the strings a peer sends. Pure data: imports nothing but the standard library, runs under
CPython 3.11+ and Pyodide.
"""

from __future__ import annotations

import re
from enum import StrEnum as _StrEnum
from typing import Final

#: Version carried by ``join``; a relay refuses any other with ``version_mismatch``.
PROTOCOL_VERSION: Final = 1


class StrEnum(_StrEnum):
    """A wire name: a ``StrEnum`` whose ``repr`` is its string's too, so a member reads as the wire string it is in
    every message, log line and serializer (``f"{name!r}"`` says ``'join'``, not ``<Event.JOIN: 'join'>``)."""

    def __repr__(self) -> str:
        return repr(self.value)


class Event(StrEnum):
    """Socket.IO event names, both directions (see ``CLIENT_EVENTS``/``RELAY_EVENTS``)."""

    # client -> relay
    JOIN = "join"
    STATE_PATCH = "state_patch"
    USER_MESSAGE = "user_message"
    FUNCTION_RESPONSE = "function_response"
    CANCEL = "cancel"
    REPLAY = "replay"
    ACTIVATE = "activate"
    #: Go on with the conversation's failed turn from its last completed round.
    RETRY = "retry"
    #: Replace the last assistant answer with a new one.
    REGENERATE = "regenerate"
    #: The reader pressed an offered action; its outcome is recorded for the model.
    ACTION_OUTCOME = "action_outcome"
    # relay -> client, not sequenced
    STATE = "state"
    CLIENT_ROLE = "client.role"
    #: A join's replay is over (``{"last_seq"}``: the last seq it sent); live events follow.
    REPLAY_DONE = "replay.done"
    #: The reader's rating of an answer was stored or changed (``POST .../feedback``).
    FEEDBACK = "feedback"
    # relay -> client, sequenced (carry ``seq``; replayed on join)
    COMPLETION_STARTED = "completion.started"
    COMPLETION_STREAM = "completion_stream"
    FUNCTION_CALL_BEGIN = "function_call.begin"
    FUNCTION_CALL_END = "function_call.end"
    FUNCTION_CALL_ITERATION = "function_call_iteration"
    COMPLETION_ENDED = "completion.ended"
    COMPLETION_FINISHED = "completion.finished"
    USER_INPUT = "user_input"
    ASK_USER_REQUEST = "ask_user.request"
    MESSAGE = "message"
    #: Stored messages taken out of the conversation by ``retry``/``regenerate``.
    MESSAGES_WITHDRAWN = "messages.withdrawn"


#: Events a client sends (each answered by an ack).
CLIENT_EVENTS: Final = frozenset(
    {
        Event.JOIN,
        Event.STATE_PATCH,
        Event.USER_MESSAGE,
        Event.FUNCTION_RESPONSE,
        Event.CANCEL,
        Event.REPLAY,
        Event.ACTIVATE,
        Event.RETRY,
        Event.REGENERATE,
        Event.ACTION_OUTCOME,
    }
)

#: Events that carry a per-conversation ``seq`` and are replayed on join.
SEQUENCED_EVENTS: Final = frozenset(
    {
        Event.COMPLETION_STARTED,
        Event.COMPLETION_STREAM,
        Event.FUNCTION_CALL_BEGIN,
        Event.FUNCTION_CALL_END,
        Event.FUNCTION_CALL_ITERATION,
        Event.COMPLETION_ENDED,
        Event.COMPLETION_FINISHED,
        Event.USER_INPUT,
        Event.ASK_USER_REQUEST,
        Event.MESSAGE,
        Event.MESSAGES_WITHDRAWN,
    }
)

#: Events the relay sends.
RELAY_EVENTS: Final = SEQUENCED_EVENTS | {Event.STATE, Event.CLIENT_ROLE, Event.REPLAY_DONE, Event.FEEDBACK}

#: Client writes that carry an ``idempotency_key`` (required on the socket).
IDEMPOTENT_EVENTS: Final = frozenset(
    {
        Event.STATE_PATCH,
        Event.USER_MESSAGE,
        Event.FUNCTION_RESPONSE,
        Event.CANCEL,
        Event.RETRY,
        Event.REGENERATE,
        Event.ACTION_OUTCOME,
    }
)


class ClientEvent(StrEnum):
    """Events the client object emits to page code (``client.on(name, listener)``).

    Besides these, every sequenced relay event (``Event`` in ``SEQUENCED_EVENTS``) is re-emitted under its
    wire name, and ``"*"`` (``ANY``) receives every event as ``{"event", "payload"}``.
    """

    FUNCTION_CALL = "functionCall"
    FUNCTION_SUCCESS = "functionSuccess"
    FUNCTION_ERROR = "functionError"
    FUNCTION_RESPONSE_SENT = "functionResponseSent"
    FUNCTION_CONFIRMATION_REQUIRED = "functionConfirmationRequired"
    FUNCTION_CONFIRMATION_RESOLVED = "functionConfirmationResolved"
    CONTEXT_RESOLUTION_CHANGED = "contextResolutionChanged"
    STATE_ERROR = "stateError"
    ASK_USER_REQUIRED = "askUserRequired"
    ASK_USER_CLEARED = "askUserCleared"
    CONNECTION_STATE_CHANGED = "connectionStateChanged"
    CONVERSATION_LOADED = "conversationLoaded"
    JOINED = "joined"
    READY = "ready"
    ROLE_CHANGED = "roleChanged"
    MESSAGES_CHANGED = "messagesChanged"
    ACTIONS_OFFERED = "actionsOffered"
    ACTION_STARTED = "actionStarted"
    ACTION_OUTCOME = "actionOutcome"
    #: The reader's rating of an answer was stored or changed (in any tab of the conversation).
    FEEDBACK = "feedback"
    #: The list of this browser's conversations with the app changed (``{"ids"}``, most recently added first).
    CONVERSATIONS_CHANGED = "conversationsChanged"
    #: The starter prompts an empty bar shows changed (the app's, from the relay, or the page's own).
    STARTERS_CHANGED = "startersChanged"
    ERROR = "error"
    PAGE_ERROR = "pageError"
    ANY = "*"


#: Every name ``client.on`` accepts: the client's own events and the sequenced relay events it re-emits.
SUBSCRIBABLE_EVENTS: Final = frozenset(str(e) for e in ClientEvent) | frozenset(str(e) for e in SEQUENCED_EVENTS)


class ConnectionState(StrEnum):
    """``connectionStateChanged``'s ``state``."""

    IDLE = "idle"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    DISCONNECTED = "disconnected"
    ERROR = "error"


class ConfirmationDecision(StrEnum):
    """What a confirmation handler returns for a sensitive call."""

    ALLOW = "allow"
    DENY = "deny"


class ConfirmationReason(StrEnum):
    """``functionConfirmationResolved``'s ``reason``: why the decision was made."""

    ALLOWED = "allowed"
    DENIED = "denied"
    EXPIRED = "expired"
    NO_HANDLER = "no_handler"
    HANDLER_ERROR = "handler_error"


class OfferStatus(StrEnum):
    """``status`` of an offered action (``getOfferedActions``): offered, running, then done or failed."""

    OFFERED = "offered"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class ConversationStatus(StrEnum):
    """``conversation.status``. The ask-user value is upper case on the wire, exactly."""

    IDLE = "idle"
    RUNNING = "running"
    WAITING_FOR_FUNCTION = "waiting_for_function"
    WAITING_FOR_ASK_USER = "WAITING_FOR_ASK_USER"
    FAILED = "failed"


class CallStatus(StrEnum):
    """Outcome of one function call (``function_response``, ``function_call.end``, tool messages)."""

    SUCCESS = "success"
    ERROR = "error"


class CallProgress(StrEnum):
    """``status`` of a call as the client shows it (call history, a streaming message's calls): running, then
    the ``CallStatus`` it settled with."""

    RUNNING = "running"
    SUCCESS = "success"
    ERROR = "error"


class CallState(StrEnum):
    """Where the relay's record of a call stands (stored, never on the wire)."""

    PENDING = "pending"
    ANSWERED = "answered"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"


class TurnStatus(StrEnum):
    """``completion.finished``'s ``status``."""

    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"


class UserInputReason(StrEnum):
    """``user_input``'s ``reason``: what the relay waits for."""

    MESSAGE = "message"
    ASK_USER = "ask_user"


class WithdrawReason(StrEnum):
    """``messages.withdrawn``'s ``reason``."""

    RETRY = "retry"
    REGENERATE = "regenerate"
    #: The app has a docs index and the answer cited nothing: it is replaced by the app's "not in the docs" text.
    UNCITED = "uncited"


class SourceKind(StrEnum):
    """``kind`` of one of an answer's ``sources``: a documentation section or a tool's reply."""

    DOCS = "docs"
    TOOL = "tool"


class FeedbackRating(StrEnum):
    """The reader's rating of one answer."""

    UP = "up"
    DOWN = "down"


class Role(StrEnum):
    """``role`` of a stored message."""

    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    ERROR = "error"
    ACTION = "action"


class Kind(StrEnum):
    """``kind`` of an entry of ``/autopilot/functions``: which schema regime and call path it follows."""

    #: Any JSON Schema; called by the model, run by the active client; 30 s timeout.
    FUNCTION = "function"
    #: Flat schema; called by the model, answered by the page or a relay config function; 10 s timeout.
    TOOL = "tool"
    #: Flat schema; never called by the model, only offered to the reader.
    ACTION = "action"


class ToolMessageKind(StrEnum):
    """``kind`` of a tool message: a ``Kind`` that can be called, or ``relay`` for calls the relay answered."""

    FUNCTION = "function"
    TOOL = "tool"
    RELAY = "relay"


class ToolHandler(StrEnum):
    """``handler`` of a tool entry: what runs it on the page."""

    PAGE = "page"
    RUN = "run"


class ActionConfirm(StrEnum):
    """``confirm`` of an action entry: how the reader triggers it."""

    BUTTON = "button"
    FORM = "form"


class Source(StrEnum):
    """``source`` of an entry of ``/autopilot/functions``."""

    CLIENT = "client"


class AskUserType(StrEnum):
    """``type`` of an ask-user prompt."""

    TEXT = "text"
    BOOL = "bool"
    RADIOLIST = "radiolist"
    CHECKLIST = "checklist"


class RelayTool(StrEnum):
    """Tools the relay itself gives the model (a page or config name may not take them)."""

    OFFER_ACTIONS = "offer_actions"
    ASK_USER = "ask_user"
    #: Follow-up questions shown under the answer as the reader's own words (when the app has suggestions on).
    SUGGEST_FOLLOWUPS = "suggest_followups"
    #: The site's documentation searched by the relay (when the app has a docs index): sections with citable ids.
    SEARCH_DOCS = "search_docs"


#: A function, tool or action name: what every model provider accepts as a tool name (JSON Schema ``pattern``).
TOOL_NAME_PATTERN: Final = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"
#: The same rule for Python; use ``fullmatch`` (``$`` in ``re`` also matches before a final newline).
TOOL_NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")


def is_tool_name(name: object) -> bool:
    """Whether ``name`` is a valid function, tool or action name."""
    return isinstance(name, str) and TOOL_NAME_RE.fullmatch(name) is not None


class ErrorCode(StrEnum):
    """``error.code`` of a refused ack or HTTP request (``{"ok": false, "error": {"code", "message"}}``)."""

    BAD_REQUEST = "bad_request"
    NOT_FOUND = "not_found"
    FORBIDDEN_ORIGIN = "forbidden_origin"
    UNAUTHORIZED = "unauthorized"
    RATE_LIMITED = "rate_limited"
    INVALID_TOKEN = "invalid_token"
    TOKEN_EXPIRED = "token_expired"
    VERSION_MISMATCH = "version_mismatch"
    NOT_JOINED = "not_joined"
    NOT_ACTIVE = "not_active"
    STATE_TOO_LARGE = "state_too_large"
    STATE_TOO_DEEP = "state_too_deep"
    PATCH_FAILED = "patch_failed"
    CALL_NOT_PENDING = "call_not_pending"
    MESSAGE_TOO_LONG = "message_too_long"
    BUSY = "busy"
    INTERNAL = "internal"
    #: ``retry`` without a failed turn, ``regenerate`` without a user message to answer.
    NOTHING_TO_RETRY = "nothing_to_retry"
    #: An HTTP request body over its limit (413).
    BODY_TOO_LARGE = "body_too_large"
    #: The relay cannot serve this now: its store failed or did not answer in time, or it shuts down (HTTP 503
    #: with ``Retry-After``; in a socket ack: reconnect, another relay process may answer).
    UNAVAILABLE = "unavailable"
    #: Too many connections from one address, or in all (HTTP 503, written before the request is read).
    TOO_MANY_CONNECTIONS = "too_many_connections"
    #: An idempotency key already used by another kind of write in the conversation; nothing was done.
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    #: The conversation holds ``max_events_per_conversation`` events; no new turn starts in it.
    CONVERSATION_FULL = "conversation_full"


class TurnErrorCode(StrEnum):
    """``code`` of an ``error`` message: why a turn failed."""

    MODEL_ERROR = "model_error"
    MODEL_RATE_LIMITED = "model_rate_limited"
    #: Not worth retrying until the relay's configuration changes (``retryable: false``).
    MODEL_AUTH = "model_auth"
    CONTEXT_OVERFLOW = "context_overflow"
    MODEL_UNAVAILABLE = "model_unavailable"
    #: The relay process running the turn went away.
    TURN_INTERRUPTED = "turn_interrupted"
    #: The model sent nothing but keep-alives for too long, or the turn passed its deadline.
    MODEL_TIMEOUT = "model_timeout"
    #: The answer passed the relay's length cap; it is kept up to the cap.
    ANSWER_TOO_LONG = "answer_too_long"
    #: One model response asked for more tool calls than the relay allows; none were run.
    TOO_MANY_TOOL_CALLS = "too_many_tool_calls"
    #: The model's reply could not be read (malformed chunk).
    MODEL_BAD_RESPONSE = "model_bad_response"
    INTERNAL = "internal"


# --- Error messages fixed exactly by the client API -------------------------------
MSG_SENSITIVE_DENIED: Final = "User denied execution of sensitive function."
#: ``error`` of a call the relay ended because its turn was cancelled (``function_call.end``, tool message).
MSG_CALL_CANCELLED: Final = "Cancelled."

# --- HTTP API (paths relative to the relay's base URL) ----------------------------
HTTP_CREATE_CONVERSATION: Final = "/api/apps/{app_id}/conversations"
HTTP_CONVERSATION: Final = "/api/conversations/{conversation_id}"
HTTP_ASK_USER: Final = "/api/conversations/{conversation_id}/ask_user"
HTTP_FEEDBACK: Final = "/api/conversations/{conversation_id}/feedback"
HTTP_STATS: Final = "/api/apps/{app_id}/stats"
HTTP_ORIGIN_CHECK: Final = "/api/apps/{app_id}/origin"
#: Titles and times of the conversations whose ids a browser holds (never any other).
HTTP_CONVERSATION_SUMMARIES: Final = "/api/apps/{app_id}/conversations/summaries"
DEFAULT_RELAY_PATH: Final = "/socket.io"

# --- The state document ---------------------------------------------------------
STATE_ROOT: Final = "autopilot"
FUNCTIONS_PATH: Final = "/autopilot/functions"
CONTEXT_PATH: Final = "/autopilot/context"

"""Protocol v1: the wire contract the relay and the client both import (docs/protocol.md).

``names`` holds every event name, status, kind, role, error code and tool name as a ``StrEnum``;
``messages`` every payload, ack and stored record as a ``TypedDict``; ``limits`` the sizes, depths and
times. The flat ``EV_*``/``ERR_*``/``KIND_*``/``STATUS_*`` names below are the same values as plain
strings, for code written before the enums. Pure data: no I/O, safe under Pyodide.
"""

from __future__ import annotations

from typing import Final

from .acks import Refusal, refusal_of
from .limits import (
    CITATION_PATTERN,
    CITATION_RE,
    CONTEXT_DEBOUNCE_MS,
    CONTEXT_RESOLUTION_TIMEOUT_MS,
    ENGINEIO_MAX_BUFFER,
    FUNCTION_CALL_HISTORY_LIMIT,
    FUNCTION_CALL_TIMEOUT_S,
    FUNCTIONS_DEBOUNCE_MS,
    JOIN_TOKEN_TTL_S,
    MAX_ACTIONS,
    MAX_CITATION_ID_DIGITS,
    MAX_CLIENT_MS,
    MAX_FEEDBACK_COMMENT_CHARS,
    MAX_IDEMPOTENCY_KEY_CHARS,
    MAX_ITERATIONS,
    MAX_SEQ,
    MAX_STARTER_CHARS,
    MAX_STARTERS,
    MAX_STATE_BYTES,
    MAX_STATE_DEPTH,
    MAX_SUGGESTION_CHARS,
    MAX_SUGGESTIONS,
    MAX_SUMMARIES_BODY_BYTES,
    MAX_SUMMARY_IDS,
    MAX_TITLE_CHARS,
    MAX_TOOLS_ADVISED,
    MAX_USER_MESSAGE_CHARS,
    SYNC_STATE_BEFORE_FUNCTION_RESPONSE_TIMEOUT_MS,
    TOOL_CALL_TIMEOUT_S,
    TOOL_REPLY_MAX_CHARS,
)
from .messages import error, ok
from .names import (
    CLIENT_EVENTS,
    CONTEXT_PATH,
    DEFAULT_RELAY_PATH,
    FUNCTIONS_PATH,
    HTTP_ASK_USER,
    HTTP_CONVERSATION,
    HTTP_CONVERSATION_SUMMARIES,
    HTTP_CREATE_CONVERSATION,
    HTTP_FEEDBACK,
    HTTP_ORIGIN_CHECK,
    HTTP_STATS,
    IDEMPOTENT_EVENTS,
    MSG_CALL_CANCELLED,
    MSG_SENSITIVE_DENIED,
    PROTOCOL_VERSION,
    RELAY_EVENTS,
    SEQUENCED_EVENTS,
    STATE_ROOT,
    SUBSCRIBABLE_EVENTS,
    TOOL_NAME_PATTERN,
    TOOL_NAME_RE,
    ActionConfirm,
    AskUserType,
    CallProgress,
    CallState,
    CallStatus,
    ClientEvent,
    ConfirmationDecision,
    ConfirmationReason,
    ConnectionState,
    ConversationStatus,
    ErrorCode,
    Event,
    FeedbackRating,
    Kind,
    OfferStatus,
    RelayTool,
    Role,
    Source,
    SourceKind,
    ToolHandler,
    ToolMessageKind,
    TurnErrorCode,
    TurnStatus,
    UserInputReason,
    WithdrawReason,
    is_tool_name,
)

# --- Flat names (plain ``str`` values of the enums above) ----------------------------
EV_JOIN: Final = Event.JOIN.value
EV_STATE_PATCH: Final = Event.STATE_PATCH.value
EV_USER_MESSAGE: Final = Event.USER_MESSAGE.value
EV_FUNCTION_RESPONSE: Final = Event.FUNCTION_RESPONSE.value
EV_CANCEL: Final = Event.CANCEL.value
EV_REPLAY: Final = Event.REPLAY.value
EV_ACTIVATE: Final = Event.ACTIVATE.value
EV_RETRY: Final = Event.RETRY.value
EV_REGENERATE: Final = Event.REGENERATE.value
EV_ACTION_OUTCOME: Final = Event.ACTION_OUTCOME.value
EV_STATE: Final = Event.STATE.value
EV_CLIENT_ROLE: Final = Event.CLIENT_ROLE.value
EV_REPLAY_DONE: Final = Event.REPLAY_DONE.value
EV_COMPLETION_STARTED: Final = Event.COMPLETION_STARTED.value
EV_COMPLETION_STREAM: Final = Event.COMPLETION_STREAM.value
EV_FUNCTION_CALL_BEGIN: Final = Event.FUNCTION_CALL_BEGIN.value
EV_FUNCTION_CALL_END: Final = Event.FUNCTION_CALL_END.value
EV_FUNCTION_CALL_ITERATION: Final = Event.FUNCTION_CALL_ITERATION.value
EV_COMPLETION_ENDED: Final = Event.COMPLETION_ENDED.value
EV_COMPLETION_FINISHED: Final = Event.COMPLETION_FINISHED.value
EV_USER_INPUT: Final = Event.USER_INPUT.value
EV_ASK_USER_REQUEST: Final = Event.ASK_USER_REQUEST.value
EV_MESSAGE: Final = Event.MESSAGE.value
EV_MESSAGES_WITHDRAWN: Final = Event.MESSAGES_WITHDRAWN.value
EV_FEEDBACK: Final = Event.FEEDBACK.value

#: The relay's own tool through which the model offers actions.
OFFER_ACTIONS_TOOL: Final = RelayTool.OFFER_ACTIONS.value
#: The relay's own tool through which the model asks the reader (when the app's Ask User preset is on).
ASK_USER_TOOL: Final = RelayTool.ASK_USER.value
#: The relay's own tool through which the model suggests follow-up questions (when the app has suggestions on).
SUGGEST_FOLLOWUPS_TOOL: Final = RelayTool.SUGGEST_FOLLOWUPS.value
#: The relay's own tool through which the model searches the site's documentation (when the app has a docs index).
SEARCH_DOCS_TOOL: Final = RelayTool.SEARCH_DOCS.value

KIND_FUNCTION: Final = Kind.FUNCTION.value
KIND_TOOL: Final = Kind.TOOL.value
KIND_ACTION: Final = Kind.ACTION.value

STATUS_SUCCESS: Final = CallStatus.SUCCESS.value
STATUS_ERROR: Final = CallStatus.ERROR.value

ERR_BAD_REQUEST: Final = ErrorCode.BAD_REQUEST.value
ERR_NOT_FOUND: Final = ErrorCode.NOT_FOUND.value
ERR_FORBIDDEN_ORIGIN: Final = ErrorCode.FORBIDDEN_ORIGIN.value
ERR_UNAUTHORIZED: Final = ErrorCode.UNAUTHORIZED.value
ERR_RATE_LIMITED: Final = ErrorCode.RATE_LIMITED.value
ERR_INVALID_TOKEN: Final = ErrorCode.INVALID_TOKEN.value
ERR_TOKEN_EXPIRED: Final = ErrorCode.TOKEN_EXPIRED.value
ERR_VERSION_MISMATCH: Final = ErrorCode.VERSION_MISMATCH.value
ERR_NOT_JOINED: Final = ErrorCode.NOT_JOINED.value
ERR_NOT_ACTIVE: Final = ErrorCode.NOT_ACTIVE.value
ERR_STATE_TOO_LARGE: Final = ErrorCode.STATE_TOO_LARGE.value
ERR_STATE_TOO_DEEP: Final = ErrorCode.STATE_TOO_DEEP.value
ERR_PATCH_FAILED: Final = ErrorCode.PATCH_FAILED.value
ERR_CALL_NOT_PENDING: Final = ErrorCode.CALL_NOT_PENDING.value
ERR_MESSAGE_TOO_LONG: Final = ErrorCode.MESSAGE_TOO_LONG.value
ERR_BUSY: Final = ErrorCode.BUSY.value
ERR_INTERNAL: Final = ErrorCode.INTERNAL.value
ERR_NOTHING_TO_RETRY: Final = ErrorCode.NOTHING_TO_RETRY.value
ERR_BODY_TOO_LARGE: Final = ErrorCode.BODY_TOO_LARGE.value
ERR_UNAVAILABLE: Final = ErrorCode.UNAVAILABLE.value
ERR_TOO_MANY_CONNECTIONS: Final = ErrorCode.TOO_MANY_CONNECTIONS.value
ERR_IDEMPOTENCY_KEY_REUSED: Final = ErrorCode.IDEMPOTENCY_KEY_REUSED.value
ERR_CONVERSATION_FULL: Final = ErrorCode.CONVERSATION_FULL.value

#: Every ``ErrorCode`` value.
ERROR_CODES: Final = frozenset(ErrorCode)

__all__ = [
    "Refusal",
    "refusal_of",
    "ASK_USER_TOOL",
    "CITATION_PATTERN",
    "CITATION_RE",
    "CLIENT_EVENTS",
    "CONTEXT_DEBOUNCE_MS",
    "CONTEXT_PATH",
    "CONTEXT_RESOLUTION_TIMEOUT_MS",
    "DEFAULT_RELAY_PATH",
    "ENGINEIO_MAX_BUFFER",
    "ERROR_CODES",
    "ERR_BAD_REQUEST",
    "ERR_BODY_TOO_LARGE",
    "ERR_BUSY",
    "ERR_CALL_NOT_PENDING",
    "ERR_FORBIDDEN_ORIGIN",
    "ERR_INTERNAL",
    "ERR_INVALID_TOKEN",
    "ERR_MESSAGE_TOO_LONG",
    "ERR_NOTHING_TO_RETRY",
    "ERR_NOT_ACTIVE",
    "ERR_NOT_FOUND",
    "ERR_NOT_JOINED",
    "ERR_PATCH_FAILED",
    "ERR_RATE_LIMITED",
    "ERR_STATE_TOO_DEEP",
    "ERR_STATE_TOO_LARGE",
    "ERR_TOKEN_EXPIRED",
    "ERR_TOO_MANY_CONNECTIONS",
    "ERR_UNAUTHORIZED",
    "ERR_UNAVAILABLE",
    "ERR_VERSION_MISMATCH",
    "EV_ACTION_OUTCOME",
    "EV_ACTIVATE",
    "EV_ASK_USER_REQUEST",
    "EV_CANCEL",
    "EV_CLIENT_ROLE",
    "EV_COMPLETION_ENDED",
    "EV_COMPLETION_FINISHED",
    "EV_COMPLETION_STARTED",
    "EV_COMPLETION_STREAM",
    "EV_FEEDBACK",
    "EV_FUNCTION_CALL_BEGIN",
    "EV_FUNCTION_CALL_END",
    "EV_FUNCTION_CALL_ITERATION",
    "EV_FUNCTION_RESPONSE",
    "EV_JOIN",
    "EV_MESSAGE",
    "EV_MESSAGES_WITHDRAWN",
    "EV_REGENERATE",
    "EV_REPLAY",
    "EV_RETRY",
    "EV_STATE",
    "EV_STATE_PATCH",
    "EV_USER_INPUT",
    "EV_USER_MESSAGE",
    "FUNCTIONS_DEBOUNCE_MS",
    "FUNCTIONS_PATH",
    "FUNCTION_CALL_HISTORY_LIMIT",
    "FUNCTION_CALL_TIMEOUT_S",
    "HTTP_ASK_USER",
    "HTTP_CONVERSATION",
    "HTTP_CONVERSATION_SUMMARIES",
    "HTTP_CREATE_CONVERSATION",
    "HTTP_FEEDBACK",
    "HTTP_ORIGIN_CHECK",
    "HTTP_STATS",
    "IDEMPOTENT_EVENTS",
    "JOIN_TOKEN_TTL_S",
    "KIND_ACTION",
    "KIND_FUNCTION",
    "KIND_TOOL",
    "MAX_ACTIONS",
    "MAX_CITATION_ID_DIGITS",
    "MAX_FEEDBACK_COMMENT_CHARS",
    "MAX_IDEMPOTENCY_KEY_CHARS",
    "MAX_CLIENT_MS",
    "MAX_ITERATIONS",
    "MAX_SEQ",
    "MAX_STARTERS",
    "MAX_STARTER_CHARS",
    "MAX_STATE_BYTES",
    "MAX_STATE_DEPTH",
    "MAX_SUMMARIES_BODY_BYTES",
    "MAX_SUMMARY_IDS",
    "MAX_TITLE_CHARS",
    "MAX_SUGGESTIONS",
    "MAX_SUGGESTION_CHARS",
    "MAX_TOOLS_ADVISED",
    "MAX_USER_MESSAGE_CHARS",
    "MSG_CALL_CANCELLED",
    "MSG_SENSITIVE_DENIED",
    "OFFER_ACTIONS_TOOL",
    "PROTOCOL_VERSION",
    "RELAY_EVENTS",
    "SEQUENCED_EVENTS",
    "STATE_ROOT",
    "STATUS_ERROR",
    "STATUS_SUCCESS",
    "SUGGEST_FOLLOWUPS_TOOL",
    "SEARCH_DOCS_TOOL",
    "SUBSCRIBABLE_EVENTS",
    "SYNC_STATE_BEFORE_FUNCTION_RESPONSE_TIMEOUT_MS",
    "TOOL_CALL_TIMEOUT_S",
    "TOOL_NAME_PATTERN",
    "TOOL_NAME_RE",
    "TOOL_REPLY_MAX_CHARS",
    "ActionConfirm",
    "AskUserType",
    "CallProgress",
    "CallState",
    "CallStatus",
    "ClientEvent",
    "ConfirmationDecision",
    "ConfirmationReason",
    "ConnectionState",
    "ConversationStatus",
    "ErrorCode",
    "Event",
    "FeedbackRating",
    "Kind",
    "OfferStatus",
    "RelayTool",
    "Role",
    "Source",
    "SourceKind",
    "ToolHandler",
    "ToolMessageKind",
    "TurnErrorCode",
    "TurnStatus",
    "UserInputReason",
    "WithdrawReason",
    "error",
    "is_tool_name",
    "limits",
    "messages",
    "names",
    "ok",
]

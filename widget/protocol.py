"""Protocol v1 constants shared by the relay and the client (see docs/protocol.md).

Every wire name, limit and error code lives here once; both sides import this
module so they cannot drift apart. Pure data: no I/O, safe under Pyodide.
"""

from __future__ import annotations

from typing import Final

#: Version carried by ``join``; a relay refuses any other with ``version_mismatch``.
PROTOCOL_VERSION: Final = 1

# --- HTTP API (paths relative to the relay's base URL) ---------------------------
HTTP_CREATE_CONVERSATION: Final = "/api/apps/{app_id}/conversations"
HTTP_CONVERSATION: Final = "/api/conversations/{conversation_id}"
HTTP_ASK_USER: Final = "/api/conversations/{conversation_id}/ask_user"
DEFAULT_RELAY_PATH: Final = "/socket.io"

# --- Socket.IO events: client -> relay -----------------------------------------
EV_JOIN: Final = "join"
EV_STATE_PATCH: Final = "state_patch"
EV_USER_MESSAGE: Final = "user_message"
EV_FUNCTION_RESPONSE: Final = "function_response"
EV_CANCEL: Final = "cancel"
EV_REPLAY: Final = "replay"
EV_ACTIVATE: Final = "activate"
#: Re-run the conversation's failed turn from its last completed round (D3).
EV_RETRY: Final = "retry"
#: Replace the last assistant answer with a new one (D3).
EV_REGENERATE: Final = "regenerate"
#: The reader pressed an offered action; its outcome is recorded for the model (D7).
EV_ACTION_OUTCOME: Final = "action_outcome"

# --- Socket.IO events: relay -> client -----------------------------------------
EV_STATE: Final = "state"
EV_CLIENT_ROLE: Final = "client.role"
# Sequenced conversation events (seed 001 names, kept exactly).
EV_COMPLETION_STARTED: Final = "completion.started"
EV_COMPLETION_STREAM: Final = "completion_stream"
EV_FUNCTION_CALL_BEGIN: Final = "function_call.begin"
EV_FUNCTION_CALL_END: Final = "function_call.end"
EV_FUNCTION_CALL_ITERATION: Final = "function_call_iteration"
EV_COMPLETION_ENDED: Final = "completion.ended"
EV_COMPLETION_FINISHED: Final = "completion.finished"
EV_USER_INPUT: Final = "user_input"
EV_ASK_USER_REQUEST: Final = "ask_user.request"
EV_MESSAGE: Final = "message"
#: Stored messages taken out of the conversation by ``retry``/``regenerate``; the turn that follows replaces them.
EV_MESSAGES_WITHDRAWN: Final = "messages.withdrawn"

#: Events that carry a per-conversation ``seq`` and are replayed on join.
SEQUENCED_EVENTS: Final = frozenset(
    {
        EV_COMPLETION_STARTED,
        EV_COMPLETION_STREAM,
        EV_FUNCTION_CALL_BEGIN,
        EV_FUNCTION_CALL_END,
        EV_FUNCTION_CALL_ITERATION,
        EV_COMPLETION_ENDED,
        EV_COMPLETION_FINISHED,
        EV_USER_INPUT,
        EV_ASK_USER_REQUEST,
        EV_MESSAGE,
        EV_MESSAGES_WITHDRAWN,
    }
)

# --- State document (D4) --------------------------------------------------------
STATE_ROOT: Final = "autopilot"
FUNCTIONS_PATH: Final = "/autopilot/functions"
CONTEXT_PATH: Final = "/autopilot/context"
#: 64 KB: bytes of the compact UTF-8 JSON of the whole stored document.
MAX_STATE_BYTES: Final = 65_536
MAX_STATE_DEPTH: Final = 32
ENGINEIO_MAX_BUFFER: Final = 1_000_000

# --- Client defaults (seeds 000/001) ---------------------------------------------
FUNCTIONS_DEBOUNCE_MS: Final = 25
CONTEXT_DEBOUNCE_MS: Final = 100
SYNC_STATE_BEFORE_FUNCTION_RESPONSE_TIMEOUT_MS: Final = 2000
CONTEXT_RESOLUTION_TIMEOUT_MS: Final = 10_000
FUNCTION_CALL_HISTORY_LIMIT: Final = 50

# --- Relay limits (D6) -------------------------------------------------------------
FUNCTION_CALL_TIMEOUT_S: Final = 30.0
TOOL_CALL_TIMEOUT_S: Final = 10.0
TOOL_REPLY_MAX_CHARS: Final = 4000
MAX_USER_MESSAGE_CHARS: Final = 16_000
MAX_ITERATIONS: Final = 8
MAX_ACTIONS: Final = 3
MAX_TOOLS_ADVISED: Final = 12
JOIN_TOKEN_TTL_S: Final = 300
MAX_IDEMPOTENCY_KEY_CHARS: Final = 128

#: The relay's own tool through which the model offers actions (D7).
OFFER_ACTIONS_TOOL: Final = "offer_actions"

# --- Kinds of catalogue entries (D5) ----------------------------------------------
KIND_FUNCTION: Final = "function"
KIND_TOOL: Final = "tool"
KIND_ACTION: Final = "action"

# --- Function response status -------------------------------------------------
STATUS_SUCCESS: Final = "success"
STATUS_ERROR: Final = "error"

# --- Error messages the seeds fix exactly ----------------------------------------
MSG_SENSITIVE_DENIED: Final = "User denied execution of sensitive function."

# --- Error codes (``{"ok": false, "error": {"code", "message"}}``) -----------------
ERR_BAD_REQUEST: Final = "bad_request"
ERR_NOT_FOUND: Final = "not_found"
ERR_FORBIDDEN_ORIGIN: Final = "forbidden_origin"
ERR_UNAUTHORIZED: Final = "unauthorized"
ERR_RATE_LIMITED: Final = "rate_limited"
ERR_INVALID_TOKEN: Final = "invalid_token"
ERR_TOKEN_EXPIRED: Final = "token_expired"
ERR_VERSION_MISMATCH: Final = "version_mismatch"
ERR_NOT_JOINED: Final = "not_joined"
ERR_NOT_ACTIVE: Final = "not_active"
ERR_STATE_TOO_LARGE: Final = "state_too_large"
ERR_STATE_TOO_DEEP: Final = "state_too_deep"
ERR_PATCH_FAILED: Final = "patch_failed"
ERR_CALL_NOT_PENDING: Final = "call_not_pending"
ERR_MESSAGE_TOO_LONG: Final = "message_too_long"
ERR_BUSY: Final = "busy"
ERR_INTERNAL: Final = "internal"
#: ``retry`` without a failed turn, ``regenerate`` without a user message to answer.
ERR_NOTHING_TO_RETRY: Final = "nothing_to_retry"

ERROR_CODES: Final = frozenset(
    {
        ERR_BAD_REQUEST,
        ERR_NOT_FOUND,
        ERR_FORBIDDEN_ORIGIN,
        ERR_UNAUTHORIZED,
        ERR_RATE_LIMITED,
        ERR_INVALID_TOKEN,
        ERR_TOKEN_EXPIRED,
        ERR_VERSION_MISMATCH,
        ERR_NOT_JOINED,
        ERR_NOT_ACTIVE,
        ERR_STATE_TOO_LARGE,
        ERR_STATE_TOO_DEEP,
        ERR_PATCH_FAILED,
        ERR_CALL_NOT_PENDING,
        ERR_MESSAGE_TOO_LONG,
        ERR_BUSY,
        ERR_INTERNAL,
        ERR_NOTHING_TO_RETRY,
    }
)


def ok(**fields: object) -> dict[str, object]:
    """Build a success acknowledgement."""
    return {"ok": True, **fields}


def error(code: str, message: str) -> dict[str, object]:
    """Build a failure acknowledgement / HTTP error body."""
    return {"ok": False, "error": {"code": code, "message": message}}

"""The sizes, depths and times of protocol v1, each defined once (docs/protocol.md, "Limits")."""

from __future__ import annotations

import re
from typing import Final

# --- The state document -----------------------------------------------------------
#: Bytes of the compact UTF-8 JSON (``separators=(",", ":")``, ``ensure_ascii=False``) of the whole stored
#: document ``{"autopilot": {...}}``; checked by the client before sending and by the relay after patching.
MAX_STATE_BYTES: Final = 65_536
#: Nesting depth of the stored document (a scalar is 0, each array/object level adds 1).
MAX_STATE_DEPTH: Final = 32
#: Engine.IO's default buffer, kept: the largest packet either side accepts.
ENGINEIO_MAX_BUFFER: Final = 1_000_000

# --- Client defaults ----------------------------------------------------------------
FUNCTIONS_DEBOUNCE_MS: Final = 25
CONTEXT_DEBOUNCE_MS: Final = 100
SYNC_STATE_BEFORE_FUNCTION_RESPONSE_TIMEOUT_MS: Final = 2000
CONTEXT_RESOLUTION_TIMEOUT_MS: Final = 10_000
FUNCTION_CALL_HISTORY_LIMIT: Final = 50

# --- Relay limits -------------------------------------------------------------------
#: The relay stops waiting for a ``kind: "function"`` call after this long.
FUNCTION_CALL_TIMEOUT_S: Final = 30.0
#: The relay (and the client) stop waiting for a ``kind: "tool"`` call after this long.
TOOL_CALL_TIMEOUT_S: Final = 10.0
#: Characters of a tool's reply the model sees (the stored reply is complete).
TOOL_REPLY_MAX_CHARS: Final = 4000
MAX_USER_MESSAGE_CHARS: Final = 16_000
#: Model rounds per turn; the last one is offered no function to call.
MAX_ITERATIONS: Final = 8
#: Actions the relay attaches to one assistant message.
MAX_ACTIONS: Final = 3
#: More tools than this on a page makes the client warn (models choose worse among many).
MAX_TOOLS_ADVISED: Final = 12
JOIN_TOKEN_TTL_S: Final = 300
MAX_IDEMPOTENCY_KEY_CHARS: Final = 128
#: The largest client timing (``duration_ms``, ``total_ms``) the relay stores, ms (an hour); a timing that is not a
#: number from 0 to this is stored as null.
MAX_CLIENT_MS: Final = 3_600_000
#: Characters of the comment a reader may add to a thumbs up/down.
MAX_FEEDBACK_COMMENT_CHARS: Final = 2000
#: Conversation ids one summaries request may name (also how many a browser keeps per app).
MAX_SUMMARY_IDS: Final = 50
#: Bytes of a summaries request body.
MAX_SUMMARIES_BODY_BYTES: Final = 16_384
#: Characters of a conversation's title (its first message, whitespace collapsed, cut with "…").
MAX_TITLE_CHARS: Final = 80
#: Starter prompts an empty bar shows (the app's in the relay config, or the page's ``set_starters``).
MAX_STARTERS: Final = 4
#: Characters of one starter prompt.
MAX_STARTER_CHARS: Final = 200
#: Follow-up suggestions the relay keeps on one answer (``suggest_followups``).
MAX_SUGGESTIONS: Final = 3
#: Characters of one follow-up suggestion.
MAX_SUGGESTION_CHARS: Final = 150
#: Largest ``seq``/``last_seq`` a peer may send (a signed 64-bit integer).
MAX_SEQ: Final = 2**63 - 1

# --- Citations (docs/protocol.md §5) -------------------------------------------------
#: Digits of a citation id after its kind letter: ``s1`` to ``s9999`` (no leading zero).
MAX_CITATION_ID_DIGITS: Final = 4
#: A citation in an answer's text, as the relay and every client read it: one id in square brackets, ``s`` (a docs
#: section) or ``t`` (a tool reply) then 1 to ``MAX_CITATION_ID_DIGITS`` digits without a leading zero; group 1 is
#: the id. What follows does not matter: ``[s1](url)`` is the citation ``[s1]`` too (the relay counts it; a client
#: shows its marker and drops the model's ``(url)``: the source's own URL is in ``sources``).
CITATION_PATTERN: Final = rf"\[([st][1-9][0-9]{{0,{MAX_CITATION_ID_DIGITS - 1}}})\]"
#: ``CITATION_PATTERN`` compiled.
CITATION_RE: Final = re.compile(CITATION_PATTERN)

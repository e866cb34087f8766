"""The shape of every payload, ack and stored record of protocol v1, as ``TypedDict``s.

These types are the source of the JSON Schemas the relay serves and checks (``widget.relay.http.contract``
generates them), so a field added here is a field documented and validated there. Conventions the schema
generator relies on: ``NotRequired`` marks an optional key; ``X | None`` a key that may be ``null``;
``JSON`` any JSON value. Extra keys are allowed (a newer peer may send more).

Timings have one name each on the wire, in the store, in events and in the stats: ``duration_ms`` is the
handler's time (the client measures it and sends it in ``function_response``) and ``total_ms`` the time until
the response left the client. The client API's ``FunctionCallRecord`` keeps the camelCase names its contract
fixes (``handlerMs``, ``totalMs``; events say ``durationMs``) for the same numbers.
"""

# No ``from __future__ import annotations`` here: under Python 3.11 it hides ``NotRequired`` from TypedDict,
# which then counts every key as required.
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NotRequired, TypedDict

from .limits import MAX_IDEMPOTENCY_KEY_CHARS, MAX_SEQ, MAX_USER_MESSAGE_CHARS
from .names import (
    ActionConfirm,
    AskUserType,
    CallStatus,
    ConversationStatus,
    ErrorCode,
    FeedbackRating,
    Kind,
    Role,
    SourceKind,
    ToolHandler,
    ToolMessageKind,
    TurnErrorCode,
    TurnStatus,
    UserInputReason,
    WithdrawReason,
)

#: Any JSON value (the schema generator maps it to ``{}``).
JSON = Any
#: A JSON object with keys the protocol does not fix (a JSON Schema, the page context, tool arguments).
JSONObject = dict[str, Any]


@dataclass(frozen=True)
class Limits:
    """Bounds a value must also meet, as the relay enforces them (``Annotated[str, Limits(...)]``; the schema
    generator writes them as ``minLength``/``maxLength``/``minimum``/``maximum``)."""

    min_length: int | None = None
    max_length: int | None = None
    minimum: int | None = None
    maximum: int | None = None

    def keywords(self) -> dict[str, int]:
        """The JSON Schema keywords of these bounds."""
        named = {"minLength": self.min_length, "maxLength": self.max_length, "minimum": self.minimum,
                 "maximum": self.maximum}
        return {k: v for k, v in named.items() if v is not None}


#: An idempotency key: 1 to ``MAX_IDEMPOTENCY_KEY_CHARS`` characters.
IdempotencyKey = Annotated[str, Limits(min_length=1, max_length=MAX_IDEMPOTENCY_KEY_CHARS)]
#: A ``seq`` a client names (``last_seq``): 0 to 2**63 - 1.
SeqNumber = Annotated[int, Limits(minimum=0, maximum=MAX_SEQ)]


# --- acks and errors -------------------------------------------------------------------------
class ErrorDetail(TypedDict):
    """``error`` of a refusal: a machine code and a sentence for people (``rate_limited``: and the seconds to
    wait before the same request would be accepted)."""

    code: ErrorCode
    message: str
    retry_after: NotRequired[float]


class ErrorAck(TypedDict):
    """A refused socket write, and the body of every HTTP error."""

    ok: Literal[False]
    error: ErrorDetail


class OkAck(TypedDict):
    """The ack of a write that needs to say nothing more (``state_patch``, ``function_response``)."""

    ok: Literal[True]


class PendingCall(TypedDict):
    """A function call the relay is still waiting on, listed for the active client to run."""

    id: str
    name: str
    arguments: JSONObject
    seq: int | None
    kind: Kind


class JoinAck(TypedDict):
    """``join`` accepted. ``client_id`` is the socket's Socket.IO id (what ``dispatched_to`` names in logs)."""

    ok: Literal[True]
    conversation_id: str
    seq: int
    active: bool
    client_id: str
    pending_calls: list[PendingCall]


class ActivateAck(TypedDict):
    """``activate`` accepted: the sending socket is now the active client."""

    ok: Literal[True]
    active: Literal[True]
    pending_calls: list[PendingCall]


class MessageAck(TypedDict):
    """``user_message`` / ``action_outcome`` accepted: the id of the message stored."""

    ok: Literal[True]
    message_id: str


class TurnAck(TypedDict):
    """``retry`` / ``regenerate`` accepted: the turn that follows."""

    ok: Literal[True]
    turn_id: str


class CancelAck(TypedDict):
    """``cancel`` answered: whether a running turn was stopped."""

    ok: Literal[True]
    cancelled: bool


class ReplayAck(TypedDict):
    """``replay`` done: the conversation's current ``seq``, and the pending calls dispatched to this socket."""

    ok: Literal[True]
    seq: int
    pending_calls: list[PendingCall]


# --- client -> relay payloads ----------------------------------------------------------------
class JoinPayload(TypedDict):
    """``join``: the token from the conversation GET, the protocol version and the last ``seq`` seen."""

    token: str
    version: int
    last_seq: NotRequired[SeqNumber | None]


#: One RFC 6902 operation (``from``: ``move``/``copy`` only; a keyword, hence the functional form).
PatchOp = TypedDict(
    "PatchOp",
    {
        "op": Literal["add", "remove", "replace", "move", "copy", "test"],
        "path": str,
        "value": NotRequired[JSON],
        "from": NotRequired[str],
    },
)
PatchOp.__doc__ = "One RFC 6902 operation (`from`: `move`/`copy` only)."


class StatePatchPayload(TypedDict):
    """``state_patch``: an RFC 6902 patch of the stored document, applied atomically."""

    patch: list[PatchOp]
    idempotency_key: IdempotencyKey


class UserMessagePayload(TypedDict):
    """``user_message``: the reader's text; starts a turn."""

    text: Annotated[str, Limits(min_length=1, max_length=MAX_USER_MESSAGE_CHARS)]
    idempotency_key: IdempotencyKey


class FunctionResponsePayload(TypedDict):
    """``function_response``: the outcome of a call the client ran, with its two timings."""

    id: str
    status: CallStatus
    result: NotRequired[JSON]
    #: A string; anything else (or an empty string) is stored as "The function failed.".
    error: NotRequired[JSON]
    idempotency_key: IdempotencyKey
    #: Numbers; anything else is stored as null.
    duration_ms: NotRequired[JSON]
    total_ms: NotRequired[JSON]


class KeyOnlyPayload(TypedDict):
    """``cancel``, ``retry``, ``regenerate``: nothing but the idempotency key."""

    idempotency_key: IdempotencyKey


class ReplayPayload(TypedDict):
    """``replay``: re-send every sequenced event after ``last_seq``."""

    last_seq: SeqNumber


#: ``activate``: an object (``{}``); no fields are read.
ActivatePayload = JSONObject


class ActionOutcomePayload(TypedDict):
    """``action_outcome``: what happened when the reader ran an offered action."""

    message_id: str
    action_id: str
    name: str
    arguments: NotRequired[JSONObject | None]
    ok: bool
    outcome: NotRequired[str | None]
    idempotency_key: IdempotencyKey


# --- the state document ------------------------------------------------------------------------
class FunctionEntry(TypedDict):
    """One entry of ``/autopilot/functions`` (a function, tool or action the page declares)."""

    name: str
    description: NotRequired[str | None]
    parameters: NotRequired[JSONObject]
    kind: NotRequired[Kind]
    sensitive: NotRequired[bool]
    source: NotRequired[str]
    #: Tools only.
    handler: NotRequired[ToolHandler]
    #: Actions only.
    confirm: NotRequired[ActionConfirm]
    label: NotRequired[str | None]
    title: NotRequired[str | None]


class StatePayload(TypedDict):
    """``state`` (after join): the stored ``/autopilot/functions`` and ``/autopilot/context``."""

    functions: dict[str, FunctionEntry]
    context: JSONObject


class ClientRolePayload(TypedDict):
    """``client.role``: this socket is (no longer) the active client of conversation ``conversation_id``."""

    active: bool
    conversation_id: str


class ReplayDonePayload(TypedDict):
    """``replay.done``: a join's replay is over; ``last_seq`` is the last seq it sent."""

    last_seq: int


# --- stored messages ---------------------------------------------------------------------------
class CallRef(TypedDict):
    """A call as listed on its assistant message's ``function_calls``."""

    id: str
    name: str
    arguments: JSONObject


class OfferedAction(TypedDict):
    """An action offered on an assistant message."""

    id: str
    name: str
    arguments: JSONObject


class UserMessage(TypedDict):
    """The reader's message."""

    id: str
    role: Literal[Role.USER]
    content: str
    created_at: float
    seq: NotRequired[int]


class CitedSource(TypedDict):
    """One source an answer cites: a docs section or a tool reply, numbered as the answer's markers show it.

    The answer's text cites it as ``[id]`` (for example ``[s1]`` or ``[t2]``); ``n`` is the marker the bar shows,
    1-based in the order of first citation. ``title`` is "Page › Section" for a docs section and the tool's title
    for a tool reply; ``url`` (docs only) is the section's URL with its anchor, and a text fragment where the
    relay found the cited passage.
    """

    id: str
    n: int
    kind: SourceKind
    title: str
    url: NotRequired[str]


class AssistantMessage(TypedDict):
    """One model round's answer; ``actions`` only in ``completion.ended`` events, never in a GET."""

    id: str
    role: Literal[Role.ASSISTANT]
    content: str
    function_calls: NotRequired[list[CallRef]]
    actions: NotRequired[list[OfferedAction]]
    #: Follow-up questions the model suggested (``suggest_followups``), stored with the message: shown under
    #: the last answer as the reader's own words until the reader sends the next message.
    suggestions: NotRequired[list[str]]
    #: What the answer cites (``[id]`` in ``content``), in marker order; stored and restored with the message.
    sources: NotRequired[list[CitedSource]]
    created_at: NotRequired[float]
    seq: NotRequired[int]


class CallRecord(TypedDict):
    """The outcome of one call as the relay stores and shows it: the tool message (and ``function_call.end``).

    ``duration_ms`` is the handler's time, ``total_ms`` until the response was sent; both ``null`` when
    nobody measured (a timeout, a cancel, a call the relay refused).
    """

    id: str
    role: Literal[Role.TOOL]
    function_call_id: str
    name: str
    kind: NotRequired[ToolMessageKind]
    status: CallStatus
    result: NotRequired[JSON]
    error: NotRequired[str | None]
    duration_ms: NotRequired[float | None]
    total_ms: NotRequired[float | None]
    #: The id of an earlier identical tool call whose answer this one reuses.
    answered_from: NotRequired[str]
    created_at: NotRequired[float]
    seq: NotRequired[int]


#: The stored tool message is the call record.
ToolMessage = CallRecord


class ErrorMessage(TypedDict):
    """Why a turn failed."""

    id: str
    role: Literal[Role.ERROR]
    content: str
    code: TurnErrorCode
    retryable: bool
    #: ``model_rate_limited``: the seconds the model provider asked to wait, when it said.
    retry_after: NotRequired[float]
    created_at: NotRequired[float]
    seq: NotRequired[int]


class ActionMessage(TypedDict):
    """What the reader did with an offered action (``message_id``: the assistant message it was offered on)."""

    id: str
    role: Literal[Role.ACTION]
    message_id: str
    action_id: str
    name: str
    arguments: JSONObject
    ok: bool
    outcome: str
    created_at: NotRequired[float]
    seq: NotRequired[int]


#: Any stored message, told apart by ``role``.
Message = UserMessage | AssistantMessage | CallRecord | ErrorMessage | ActionMessage


# --- relay -> client sequenced events (each also carries ``seq``) --------------------------------
class Sequenced(TypedDict):
    """The field every sequenced event carries."""

    seq: int


class MessageEvent(Sequenced):
    """``message``: a stored message that is not an assistant completion."""

    message: Message


class CompletionStartedEvent(Sequenced):
    """``completion.started``: an assistant message begins streaming."""

    turn_id: str
    message_id: str


class CompletionStreamEvent(Sequenced):
    """``completion_stream``: a chunk of the assistant's text."""

    message_id: str
    delta: str


class FunctionCallBeginEvent(Sequenced):
    """``function_call.begin``: the model calls a page function; ``run`` is true on the one copy to run."""

    id: str
    name: str
    arguments: JSONObject
    message_id: str
    run: bool
    kind: Kind


class FunctionCallEndEvent(Sequenced):
    """``function_call.end``: a call's outcome (the numbers as in ``CallRecord``)."""

    id: str
    name: str
    status: CallStatus
    result: NotRequired[JSON]
    error: NotRequired[str | None]
    duration_ms: float | None
    total_ms: float | None


class FunctionCallIterationEvent(Sequenced):
    """``function_call_iteration``: results went back to the model; round ``iteration`` starts."""

    turn_id: str
    iteration: int


class CompletionEndedEvent(Sequenced):
    """``completion.ended``: the round's assistant message and the tool messages of its calls, stored together."""

    message: AssistantMessage
    tool_messages: list[CallRecord]


class CompletionFinishedEvent(Sequenced):
    """``completion.finished``: the turn is over."""

    turn_id: str
    status: TurnStatus


class UserInputEvent(Sequenced):
    """``user_input``: the relay waits for the reader."""

    reason: UserInputReason


class AskUserOption(TypedDict):
    """One choice of a ``radiolist``/``checklist`` prompt."""

    value: str
    label: str


class AskUserArguments(TypedDict):
    """What a prompt's type takes: ``options`` (radiolist, checklist), button labels (bool), a text field's looks."""

    options: NotRequired[list[AskUserOption]]
    yes_label: NotRequired[str]
    no_label: NotRequired[str]
    placeholder: NotRequired[str]
    multiline: NotRequired[bool]


class AskUserPrompt(TypedDict):
    """A question the model asks the reader."""

    id: str
    type: AskUserType
    question: str
    arguments: NotRequired[AskUserArguments]


class AskUserRequestEvent(Sequenced):
    """``ask_user.request``: the model asks the reader; the turn is suspended until every prompt is answered."""

    prompts: list[AskUserPrompt]


class MessagesWithdrawnEvent(Sequenced):
    """``messages.withdrawn``: these stored messages are replaced by the turn ``turn_id`` that follows."""

    message_ids: list[str]
    reason: WithdrawReason
    turn_id: str


# --- HTTP bodies ---------------------------------------------------------------------------------
class CreateConversationBody(TypedDict):
    """``POST /api/apps/{app_id}/conversations`` body: reserved, send ``{}``."""


class CreatedConversation(TypedDict):
    """201 answer to a create: the conversation's id and capability URL."""

    ok: Literal[True]
    id: str
    url: str


class ConversationInfo(TypedDict):
    """``conversation`` of a GET: ``seq`` is the last event the returned ``messages`` reflect."""

    id: str
    app_id: str
    status: ConversationStatus
    created_at: float
    seq: int


class ConversationResponse(TypedDict):
    """200 answer to a conversation GET (and to an ask-user POST)."""

    ok: Literal[True]
    protocol_version: int
    conversation: ConversationInfo
    messages: list[Message]
    relay_url: str
    relay_path: str
    token: str
    token_expires_at: float
    pending_ask_user: NotRequired[list[AskUserPrompt]]
    #: The reader's ratings of the answers (only when there is one).
    feedback: NotRequired[list["FeedbackRecord"]]
    #: The app's starter prompts (relay config), shown while the conversation has no messages.
    starters: NotRequired[list[str]]


class AskUserAnswer(TypedDict):
    """One answer: the prompt's id and the reader's value."""

    id: str
    result: JSON


class AskUserBody(TypedDict):
    """``POST /api/conversations/{id}/ask_user`` body (``answers`` may be a single answer object)."""

    answers: list[AskUserAnswer] | AskUserAnswer
    idempotency_key: NotRequired[IdempotencyKey | None]


class FeedbackBody(TypedDict):
    """``POST /api/conversations/{id}/feedback`` body: rate one answer (``rating: null`` takes the rating back)."""

    message_id: str
    rating: FeedbackRating | None
    comment: NotRequired[str | None]


class FeedbackRecord(TypedDict):
    """The stored rating of one answer (one per answer of a conversation; a new rating replaces it)."""

    message_id: str
    #: The turn the answer belongs to (null when the relay no longer knows it).
    turn_id: str | None
    rating: FeedbackRating | None
    comment: str | None
    updated_at: float


class FeedbackResponse(TypedDict):
    """200 answer to a feedback POST: the rating as stored."""

    ok: Literal[True]
    feedback: FeedbackRecord


class SummariesBody(TypedDict):
    """``POST /api/apps/{app_id}/conversations/summaries`` body: the conversation ids this browser holds."""

    ids: list[str]


class ConversationSummary(TypedDict):
    """What a list of past conversations shows of one: its title and times, nothing else of its content."""

    id: str
    #: The reader's first message, whitespace collapsed, at most ``MAX_TITLE_CHARS`` (null: no message yet).
    title: str | None
    created_at: float
    #: When anything last happened in it (a message, a turn, the page's state).
    updated_at: float


class SummariesResponse(TypedDict):
    """200 answer to a summaries POST: the named conversations that exist, most recently active first."""

    ok: Literal[True]
    conversations: list[ConversationSummary]


class StatsTiming(TypedDict):
    """Percentiles of call times in milliseconds (null without a measured call)."""

    p50_ms: float | None
    p95_ms: float | None


class CallStats(TypedDict):
    """Calls of one kind (or one name): how many, how many succeeded, and how long they took."""

    calls: int
    succeeded: int
    failed: int
    #: ``succeeded / calls`` (null without calls).
    success_rate: float | None
    #: Until the page's answer reached the relay.
    total_ms: StatsTiming
    #: The handler's own time as the page measured it.
    duration_ms: StatsTiming


class KindStats(CallStats):
    """Calls of one kind, with the same figures per function or tool name."""

    by_name: dict[str, CallStats]


class FeedbackComment(TypedDict):
    """A reader's comment on an answer (no conversation id: that is the reader's capability)."""

    rating: FeedbackRating
    comment: str
    updated_at: float


class AnswerStats(TypedDict):
    """Assistant answers and the ratings readers gave them."""

    answers: int
    thumbs_up: int
    thumbs_down: int
    comments: list[FeedbackComment]


class StatsPeriod(TypedDict):
    """The period covered, in seconds since the epoch (``since`` null: from the start)."""

    since: float | None
    until: float


class TokenCounts(TypedDict):
    """Tokens the model rounds of a period used, as the providers reported them (a count a provider does not
    report adds nothing)."""

    #: Model rounds that reported usage.
    rounds: int
    input_tokens: int
    output_tokens: int
    #: Part of ``input_tokens``: read from the provider's prompt cache.
    cached_input_tokens: int
    #: Part of ``output_tokens``: reasoning the reader never saw.
    reasoning_tokens: int


class TokenStats(TokenCounts):
    """``stats``' ``tokens``: the period's usage, and the same per ``[models.<name>]`` entry."""

    by_model: dict[str, TokenCounts]


class StatsResponse(TypedDict):
    """``GET /api/apps/{app_id}/stats``: what an app's readers did in a period; never arguments or page context."""

    ok: Literal[True]
    app_id: str
    period: StatsPeriod
    conversations: int
    #: Stored messages by role.
    messages: dict[str, int]
    answers: AnswerStats
    #: ``function`` and ``tool`` calls.
    calls: dict[str, KindStats]
    #: Failed turns by error code.
    model_errors: dict[str, int]
    #: What the model rounds cost, in tokens.
    tokens: TokenStats


class DocsPushResponse(TypedDict):
    """``PUT /api/apps/{app_id}/docs``: what the index run of the pushed archive did."""

    ok: Literal[True]
    app: str
    #: Pages and sections the app's index holds now.
    pages: int
    sections: int
    #: Pages added, changed, removed, unchanged and skipped by this run.
    added: int
    changed: int
    removed: int
    unchanged: int
    skipped: int
    #: How many warnings the run had, and the first of them.
    warnings: int
    warning_lines: list[str]
    seconds: float


class OriginCheckResponse(TypedDict):
    """200 answer to ``GET /api/apps/{app_id}/origin``: the requesting page's origin may use the app."""

    ok: Literal[True]
    app_id: str
    origin: str


class HealthResponse(TypedDict):
    """``GET /healthz``: the process is up."""

    ok: Literal[True]
    protocol_version: int
    instance: str


class ReadyResponse(TypedDict):
    """``GET /readyz``: ``checks`` names each dependency and ``"ok"`` or its error."""

    ok: bool
    instance: NotRequired[str]
    checks: dict[str, str]


# --- the client API's own records ------------------------------------------------------------------
class FunctionCallRecord(TypedDict):
    """``client.get_function_call_history()`` entry; times in ms since the epoch, ``handlerMs`` is ``duration_ms``."""

    id: str
    name: str
    status: str
    startedAt: float
    settledAt: float | None
    respondedAt: float | None
    handlerMs: float | None
    totalMs: float | None


def ok(**fields: object) -> dict[str, object]:
    """Build a success acknowledgement."""
    return {"ok": True, **fields}


def error(code: str, message: str) -> dict[str, object]:
    """Build a failure acknowledgement / HTTP error body."""
    return {"ok": False, "error": {"code": code, "message": message}}

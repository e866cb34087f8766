"""JSON Schemas (2020-12) of protocol v1, generated from the TypedDicts of ``messages``.

``EVENTS`` and ``HTTP`` say which type each Socket.IO event, ack and HTTP body has; ``bundle()`` turns all
of them into one schema document whose ``$defs`` hold every type. The relay serves it, the tests check the
checked-in copy under ``schemas/`` against it, and ``widget.relay.http.contract`` validates traffic with it.
Standard library only (no jsonschema here): importing this module is cheap.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from enum import Enum
from typing import (
    Annotated,
    Any,
    Literal,
    NotRequired,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

from . import messages as M
from .names import PROTOCOL_VERSION, Event

DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID = f"https://autopilot-widget.invalid/protocol/v{PROTOCOL_VERSION}/protocol.schema.json"


@dataclass(frozen=True)
class SocketEvent:
    """One Socket.IO event: its payload type and, for client events, the type of its successful ack."""

    name: Event
    payload: Any
    ack: Any = None
    #: True when a relay sends it, False when a client does.
    from_relay: bool = False
    summary: str = ""


EVENTS: tuple[SocketEvent, ...] = (
    SocketEvent(Event.JOIN, M.JoinPayload, M.JoinAck, summary="Join a conversation with a token from its GET."),
    SocketEvent(Event.STATE_PATCH, M.StatePatchPayload, M.OkAck, summary="Patch the stored state (RFC 6902, atomic)."),
    SocketEvent(
        Event.USER_MESSAGE, M.UserMessagePayload, M.MessageAck, summary="Send the reader's message; starts a turn."
    ),
    SocketEvent(Event.FUNCTION_RESPONSE, M.FunctionResponsePayload, M.OkAck, summary="Answer a function call."),
    SocketEvent(Event.CANCEL, M.KeyOnlyPayload, M.CancelAck, summary="Stop the running turn."),
    SocketEvent(Event.REPLAY, M.ReplayPayload, M.ReplayAck, summary="Re-send the sequenced events after last_seq."),
    SocketEvent(Event.ACTIVATE, M.ActivatePayload, M.ActivateAck, summary="Make this socket the active client."),
    SocketEvent(Event.RETRY, M.KeyOnlyPayload, M.TurnAck, summary="Go on with the failed turn."),
    SocketEvent(Event.REGENERATE, M.KeyOnlyPayload, M.TurnAck, summary="Answer the last user message afresh."),
    SocketEvent(
        Event.ACTION_OUTCOME, M.ActionOutcomePayload, M.MessageAck, summary="Record what an offered action did."
    ),
    SocketEvent(Event.STATE, M.StatePayload, from_relay=True, summary="The stored functions and context, after join."),
    SocketEvent(
        Event.CLIENT_ROLE, M.ClientRolePayload, from_relay=True, summary="This socket lost (or got) the active role."
    ),
    SocketEvent(
        Event.REPLAY_DONE, M.ReplayDonePayload, from_relay=True, summary="A join's replay is over; live events follow."
    ),
    SocketEvent(Event.FEEDBACK, M.FeedbackRecord, from_relay=True, summary="The reader's rating of an answer changed."),
    SocketEvent(
        Event.MESSAGE, M.MessageEvent, from_relay=True, summary="A stored message that is not an assistant completion."
    ),
    SocketEvent(
        Event.COMPLETION_STARTED, M.CompletionStartedEvent, from_relay=True, summary="An assistant message begins."
    ),
    SocketEvent(
        Event.COMPLETION_STREAM, M.CompletionStreamEvent, from_relay=True, summary="A chunk of the assistant's text."
    ),
    SocketEvent(
        Event.FUNCTION_CALL_BEGIN, M.FunctionCallBeginEvent, from_relay=True, summary="The model calls a page function."
    ),
    SocketEvent(Event.FUNCTION_CALL_END, M.FunctionCallEndEvent, from_relay=True, summary="A call's outcome."),
    SocketEvent(
        Event.FUNCTION_CALL_ITERATION,
        M.FunctionCallIterationEvent,
        from_relay=True,
        summary="A new model round starts.",
    ),
    SocketEvent(
        Event.COMPLETION_ENDED, M.CompletionEndedEvent, from_relay=True, summary="The round's message is complete."
    ),
    SocketEvent(Event.COMPLETION_FINISHED, M.CompletionFinishedEvent, from_relay=True, summary="The turn is over."),
    SocketEvent(Event.USER_INPUT, M.UserInputEvent, from_relay=True, summary="The relay waits for the reader."),
    SocketEvent(Event.ASK_USER_REQUEST, M.AskUserRequestEvent, from_relay=True, summary="The model asks the reader."),
    SocketEvent(
        Event.MESSAGES_WITHDRAWN,
        M.MessagesWithdrawnEvent,
        from_relay=True,
        summary="Messages replaced by retry/regenerate.",
    ),
)

EVENT_BY_NAME: dict[str, SocketEvent] = {e.name.value: e for e in EVENTS}


@dataclass(frozen=True)
class HttpOperation:
    """One HTTP endpoint: method, path, request body type, and the type of each status it answers."""

    method: str
    path: str
    operation_id: str
    summary: str
    body: Any = None
    #: status -> type (None: no body).
    responses: tuple[tuple[int, Any], ...] = ()
    #: Query parameters: ``(name, what it is)``.
    query: tuple[tuple[str, str], ...] = ()
    #: A body that is not JSON: its media types (the schema bundle checks JSON bodies only).
    raw_body: tuple[str, ...] = ()


#: Every API route may answer these: malformed (400), unknown (404), body over its limit (413), unavailable (503).
_ERRORS = ((400, M.ErrorAck), (404, M.ErrorAck), (413, M.ErrorAck), (503, M.ErrorAck))
HTTP: tuple[HttpOperation, ...] = (
    HttpOperation(
        "post",
        "/api/apps/{app_id}/conversations",
        "createConversation",
        "Create a conversation.",
        M.CreateConversationBody,
        ((201, M.CreatedConversation), *_ERRORS, (401, M.ErrorAck), (403, M.ErrorAck), (429, M.ErrorAck)),
    ),
    HttpOperation(
        "get",
        "/api/conversations/{conversation_id}",
        "getConversation",
        "A conversation's messages and a fresh join token.",
        None,
        ((200, M.ConversationResponse), (404, M.ErrorAck), (429, M.ErrorAck), (503, M.ErrorAck)),
    ),
    HttpOperation(
        "delete",
        "/api/conversations/{conversation_id}",
        "deleteConversation",
        "Delete a conversation and disconnect its sockets.",
        None,
        ((204, None), (403, M.ErrorAck), (404, M.ErrorAck), (429, M.ErrorAck), (503, M.ErrorAck)),
    ),
    HttpOperation(
        "post",
        "/api/conversations/{conversation_id}/ask_user",
        "answerAskUser",
        "Answer pending ask-user prompts (application/json only; from an allowed Origin when one is sent).",
        M.AskUserBody,
        ((200, M.ConversationResponse), *_ERRORS, (403, M.ErrorAck), (415, M.ErrorAck), (429, M.ErrorAck)),
    ),
    HttpOperation(
        "get",
        "/api/apps/{app_id}/origin",
        "checkOrigin",
        "Whether the requesting page's origin may use the app (readable from any origin: a refused page can say why).",
        None,
        ((200, M.OriginCheckResponse), (400, M.ErrorAck), (403, M.ErrorAck), (404, M.ErrorAck), (429, M.ErrorAck)),
    ),
    HttpOperation(
        "post",
        "/api/conversations/{conversation_id}/feedback",
        "rateAnswer",
        "Rate an answer (thumbs up/down, optional comment); the same body again changes nothing.",
        M.FeedbackBody,
        ((200, M.FeedbackResponse), *_ERRORS, (403, M.ErrorAck), (429, M.ErrorAck)),
    ),
    HttpOperation(
        "post",
        "/api/apps/{app_id}/conversations/summaries",
        "conversationSummaries",
        "Titles and times of the named conversations of the app (application/json; from an allowed Origin when one"
        " is sent); unknown ids are left out.",
        M.SummariesBody,
        ((200, M.SummariesResponse), *_ERRORS, (403, M.ErrorAck), (415, M.ErrorAck), (429, M.ErrorAck)),
    ),
    HttpOperation(
        "get",
        "/api/apps/{app_id}/stats",
        "appStats",
        "An app's conversations, answers, ratings, calls, model errors and tokens in a period (app secret).",
        None,
        ((200, M.StatsResponse), (400, M.ErrorAck), (401, M.ErrorAck), (404, M.ErrorAck), (503, M.ErrorAck)),
        query=(("since", "Start of the period: epoch seconds or ISO 8601 (default: the start)."),
               ("until", "End of the period, excluded: epoch seconds or ISO 8601 (default: now).")),
    ),
    HttpOperation(
        "put",
        "/api/apps/{app_id}/docs",
        "pushDocs",
        "Index a tar archive (plain or gzip) of the app's built site or Markdown sources as its whole documentation, "
        "incrementally and atomically (app secret).",
        None,
        ((200, M.DocsPushResponse), *_ERRORS, (401, M.ErrorAck), (409, M.ErrorAck), (429, M.ErrorAck)),
        query=(("base_url", "What the archive's pages are served under (default /)."),
               ("url_style", "Markdown sources' URL style: directory (default) or html."),
               ("markdown_anyway", "true: index a Docusaurus or VitePress site's Markdown sources with MkDocs' URLs "
                                   "and anchors all the same (default false: refused, push the built site).")),
        raw_body=("application/x-tar", "application/gzip"),
    ),
    HttpOperation(
        "get",
        "/api/protocol/{name}",
        "protocolDocument",
        "One of these machine-readable documents (protocol.schema.json, asyncapi.json, openapi.json); any origin.",
        None,
        ((200, Any), (404, M.ErrorAck)),
    ),
    HttpOperation(
        "get", "/healthz", "health", "Liveness: the process serves requests.", None, ((200, M.HealthResponse),)
    ),
    HttpOperation(
        "get",
        "/readyz",
        "ready",
        "Readiness: the store (and Redis) answer.",
        None,
        ((200, M.ReadyResponse), (503, M.ReadyResponse)),
    ),
)


# --- the generator ----------------------------------------------------------------------------------
class _Gen:
    """Turns Python types into JSON Schema, collecting named types (TypedDicts, enums) in ``defs``."""

    def __init__(self) -> None:
        self.defs: dict[str, dict[str, Any]] = {}

    def ref(self, name: str) -> dict[str, Any]:
        return {"$ref": f"#/$defs/{name}"}

    def of(self, tp: Any) -> dict[str, Any]:
        """The schema of ``tp`` (a named type becomes a ``$ref`` and is added to ``defs`` once)."""
        if tp is Any:
            return {}
        if tp is None or tp is type(None):
            return {"type": "null"}
        if tp is str:
            return {"type": "string"}
        if tp is bool:
            return {"type": "boolean"}
        if tp is int:
            return {"type": "integer"}
        if tp is float:
            return {"type": "number"}
        if isinstance(tp, type) and issubclass(tp, Enum):
            if tp.__name__ not in self.defs:
                self.defs[tp.__name__] = {"type": "string", "enum": [m.value for m in tp], "description": _doc(tp)}
            return self.ref(tp.__name__)
        if is_typeddict(tp):
            name = tp.__name__
            if name not in self.defs:
                self.defs[name] = {}  # placeholder: a recursive reference finds it
                self.defs[name] = self._object(tp)
            return self.ref(name)
        origin, args = get_origin(tp), get_args(tp)
        if origin is Annotated:  # a value with limits (messages.Limits): the base type's schema with them
            out = dict(self.of(args[0]))
            for meta in args[1:]:
                if isinstance(meta, M.Limits):
                    out.update(meta.keywords())
            return out
        if origin is NotRequired:
            return self.of(args[0])
        if origin is Literal:
            values = [a.value if isinstance(a, Enum) else a for a in args]
            return {"const": values[0]} if len(values) == 1 else {"enum": values}
        if origin is Union or origin is types.UnionType:
            return self._union(args)
        if origin is list:
            return {"type": "array", "items": self.of(args[0])} if args else {"type": "array"}
        if origin is dict:
            value = self.of(args[1]) if args else {}
            return {"type": "object", "additionalProperties": value} if value else {"type": "object"}
        raise TypeError(f"no JSON Schema for {tp!r}")

    def _union(self, args: tuple[Any, ...]) -> dict[str, Any]:
        parts = [self.of(a) for a in args]
        simple = [p for p in parts if set(p) == {"type"} and isinstance(p["type"], str)]
        if len(simple) == len(parts):
            return {"type": [p["type"] for p in parts]}
        return {"anyOf": parts}

    def _object(self, td: Any) -> dict[str, Any]:
        hints = get_type_hints(td, include_extras=True)
        required = [k for k in hints if k in td.__required_keys__]
        out: dict[str, Any] = {"type": "object", "properties": {k: self.of(v) for k, v in hints.items()}}
        if _doc(td):
            out["description"] = _doc(td)
        if required:
            out["required"] = required
        return out


def _doc(obj: Any) -> str:
    """The first paragraph of a docstring, on one line."""
    text = (obj.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(text.split()).replace("``", "`")


#: Types a relay passes on as a client wrote them (extra keys included): left open even in what the relay sends.
OPEN_TYPES = frozenset({"FunctionEntry"})


def _close(defs: dict[str, Any], roots: list[dict[str, Any]]) -> None:
    """Forbid keys the protocol does not name (``additionalProperties: false``) in every object type reachable
    from ``roots`` (what the relay sends), except ``OPEN_TYPES``: a relay says exactly what is documented."""
    seen: set[str] = set()
    stack: list[Any] = list(roots)
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref.removeprefix("#/$defs/")
                if name not in seen and name not in OPEN_TYPES:
                    seen.add(name)
                    target = defs[name]
                    if target.get("type") == "object" and "properties" in target:
                        target["additionalProperties"] = False
                    stack.append(target)
            stack.extend(v for k, v in node.items() if k != "$ref")


def bundle() -> dict[str, Any]:
    """One JSON Schema document: ``$defs`` holds every type of every event, ack and HTTP body.

    Named entry points: ``$defs/<Type>``; ``x-events`` maps each Socket.IO event to its payload and ack
    types, ``x-http`` each endpoint to its body and response types (as ``$ref``s into ``$defs``).
    """
    gen = _Gen()
    gen.of(M.ErrorAck)
    events: dict[str, Any] = {}
    for e in EVENTS:
        entry: dict[str, Any] = {
            "direction": "relay_to_client" if e.from_relay else "client_to_relay",
            "payload": gen.of(e.payload),
        }
        if e.ack is not None:
            entry["ack"] = {"oneOf": [gen.of(e.ack), gen.of(M.ErrorAck)]}
        events[e.name.value] = entry
    http: dict[str, Any] = {}
    for op in HTTP:
        entry = {"method": op.method.upper(), "path": op.path}
        if op.body is not None:
            entry["body"] = gen.of(op.body)
        entry["responses"] = {str(s): (gen.of(t) if t is not None else None) for s, t in op.responses}
        http[op.operation_id] = entry
    closed_roots = [e["payload"] for e in events.values() if e["direction"] == "relay_to_client"]
    closed_roots += [e["ack"] for e in events.values() if "ack" in e]
    closed_roots += [r for op in http.values() for r in op["responses"].values() if r is not None]
    _close(gen.defs, closed_roots)
    return {
        "$schema": DIALECT,
        "$id": SCHEMA_ID,
        "title": f"Autopilot relay protocol v{PROTOCOL_VERSION}",
        "description": "Every Socket.IO payload and ack and every HTTP body of the protocol (docs/protocol.md).",
        "x-events": events,
        "x-http": http,
        "$defs": dict(sorted(gen.defs.items())),
    }


def schema_for(ref: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """A standalone schema for one entry of ``bundle()`` (e.g. ``bundle()["x-events"]["join"]["payload"]``)."""
    return {"$schema": DIALECT, "$defs": defs if defs is not None else bundle()["$defs"], **ref}


__all__ = ["DIALECT", "EVENTS", "EVENT_BY_NAME", "HTTP", "HttpOperation", "SocketEvent", "bundle", "schema_for"]

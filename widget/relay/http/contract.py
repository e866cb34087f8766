"""The protocol as machine-readable documents, and checks of traffic against them (server side only).

- ``schema_bundle()``: the JSON Schema (2020-12) of every payload, ack and HTTP body, generated from the
  TypedDicts of ``widget.protocol.messages`` (``widget.protocol.schemas``);
- ``asyncapi()``: an AsyncAPI 3.0 document of the Socket.IO events; ``openapi()``: an OpenAPI 3.1 document
  of the HTTP API; both embed the same schemas;
- ``check_payload``/``check_ack``/``check_event``/``check_http``: the problems (field path and message) of one
  message against its schema, empty when it conforms;
- ``routes()``: the relay serves the three documents under ``/api/protocol/``.

``python -m widget.relay.http.contract DIR`` writes the documents (the copies checked in under ``schemas/``).
"""

from __future__ import annotations

import copy
import json
import sys
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from ...protocol import PROTOCOL_VERSION, ErrorCode, Event
from ...protocol import schemas as S
from ...protocol.check import Checker, Problem

SCHEMA_FILE = "protocol.schema.json"
ASYNCAPI_FILE = "asyncapi.json"
OPENAPI_FILE = "openapi.json"
#: Where the relay serves the documents (``GET``; no authentication: they describe public behaviour).
DOCS_PATH = "/api/protocol"


@lru_cache(maxsize=1)
def schema_bundle() -> dict[str, Any]:
    """The generated JSON Schema bundle (cached; callers must not change it)."""
    return S.bundle()


def _components(doc: Any) -> Any:
    """A copy of ``doc`` with ``#/$defs/`` references pointing at ``#/components/schemas/``."""
    text = json.dumps(doc).replace('"#/$defs/', '"#/components/schemas/')
    return json.loads(text)


def _component_schemas() -> dict[str, Any]:
    defs: dict[str, Any] = _components(schema_bundle()["$defs"])
    return defs


@lru_cache(maxsize=1)
def asyncapi() -> dict[str, Any]:
    """The AsyncAPI 3.0 document of the Socket.IO part (the relay's view: it receives client events)."""
    bundle = schema_bundle()
    messages: dict[str, Any] = {}
    channel_messages: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    for name, entry in bundle["x-events"].items():
        ev = S.EVENT_BY_NAME[name]
        key = name.replace(".", "_")
        messages[key] = {"name": name, "title": name, "summary": ev.summary, "payload": _components(entry["payload"])}
        channel_messages[key] = {"$ref": f"#/components/messages/{key}"}
        op: dict[str, Any] = {
            "action": "send" if ev.from_relay else "receive",
            "channel": {"$ref": "#/channels/conversation"},
            "summary": ev.summary,
            "messages": [{"$ref": f"#/channels/conversation/messages/{key}"}],
        }
        if "ack" in entry:
            ack_key = f"{key}_ack"
            messages[ack_key] = {
                "name": f"{name} ack",
                "title": f"{name} ack",
                "summary": f"The Socket.IO acknowledgement of `{name}`: success or an error.",
                "payload": _components(entry["ack"]),
            }
            channel_messages[ack_key] = {"$ref": f"#/components/messages/{ack_key}"}
            op["reply"] = {
                "channel": {"$ref": "#/channels/conversation"},
                "messages": [{"$ref": f"#/channels/conversation/messages/{ack_key}"}],
            }
        operations[key] = op
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "Autopilot relay, Socket.IO",
            "version": str(PROTOCOL_VERSION),
            "description": (
                "Socket.IO (protocol 5, Engine.IO 4) on the default namespace `/`, at the path the conversation "
                "GET returns as `relay_path`. Every event carries one JSON object; client events are answered "
                'with an acknowledgement (`{"ok": true, ...}` or `{"ok": false, "error": {code, message}}`). '
                "See docs/protocol.md for the rules."
            ),
        },
        "defaultContentType": "application/json",
        "servers": {
            "relay": {
                "host": "relay.example",
                "protocol": "wss",
                "pathname": "/socket.io",
                "description": "Any relay; the path is the conversation GET's `relay_path`.",
            },
        },
        "channels": {
            "conversation": {
                "address": "/",
                "title": "The default namespace",
                "description": "A socket joins one conversation with `join` and then sends and receives its events.",
                "messages": channel_messages,
            },
        },
        "operations": operations,
        "components": {"messages": messages, "schemas": _component_schemas()},
    }


@lru_cache(maxsize=1)
def openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the HTTP part."""
    paths: dict[str, Any] = {}
    for op in S.HTTP:
        entry = schema_bundle()["x-http"][op.operation_id]
        params = [
            {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
            for p in ("app_id", "conversation_id", "name")
            if "{" + p + "}" in op.path
        ]
        params += [{"name": name, "in": "query", "required": False, "description": what, "schema": {"type": "string"}}
                   for name, what in op.query]
        responses: dict[str, Any] = {}
        for status, ref in entry["responses"].items():
            desc = {
                "200": "OK",
                "201": "Created",
                "204": "Deleted",
                "400": "Malformed request",
                "401": "Wrong app secret",
                "403": "Origin not allowed",
                "404": "Not found",
                "409": "Busy (another index run of the app)",
                "413": "Body too large",
                "415": "Not JSON",
                "429": "Rate limited",
                "503": "Unavailable (shutting down, store down) or not ready",
            }[status]
            responses[status] = {"description": desc}
            if ref is not None:
                responses[status]["content"] = {"application/json": {"schema": _components(ref)}}
        operation: dict[str, Any] = {"operationId": op.operation_id, "summary": op.summary, "responses": responses}
        if params:
            operation["parameters"] = params
        if "body" in entry:
            operation["requestBody"] = {
                "required": op.operation_id != "createConversation",
                "content": {"application/json": {"schema": _components(entry["body"])}},
            }
        elif op.raw_body:
            operation["requestBody"] = {
                "required": True,
                "content": {m: {"schema": {"type": "string", "contentMediaType": m}} for m in op.raw_body},
            }
        paths.setdefault(op.path, {})[op.method] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Autopilot relay, HTTP API",
            "version": str(PROTOCOL_VERSION),
            "description": "Conversations, join tokens, ask-user answers and health. See docs/protocol.md.",
        },
        "jsonSchemaDialect": S.DIALECT,
        "servers": [{"url": "https://relay.example"}],
        "paths": paths,
        "components": {"schemas": _component_schemas()},
    }


def documents() -> dict[str, dict[str, Any]]:
    """File name -> document, as served and as checked in."""
    return {SCHEMA_FILE: schema_bundle(), ASYNCAPI_FILE: asyncapi(), OPENAPI_FILE: openapi()}


def dump(doc: dict[str, Any]) -> str:
    """The canonical text of a document (stable, so a checked-in copy can be compared byte for byte)."""
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


# --- checks -----------------------------------------------------------------------------------------
def _ref(kind: str, name: str, part: str) -> dict[str, Any]:
    bundle = schema_bundle()
    if kind == "event":
        ref: dict[str, Any] = bundle["x-events"][name][part]
    elif kind == "http":
        op = bundle["x-http"][name]
        ref = op["body"] if part == "body" else op["responses"][part]
    else:
        ref = {"$ref": f"#/$defs/{name}"}
    return ref


@cache
def _validator(kind: str, name: str, part: str) -> Checker:
    """The checker of one entry of the bundle (cached): a payload, an ack, an HTTP body or a named type."""
    return Checker(_ref(kind, name, part), schema_bundle()["$defs"])


@cache
def jsonschema_validator(kind: str, name: str, part: str) -> Any:
    """The same schema as a jsonschema (2020-12) validator, for tests that compare the two checkers."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator(
        {"$schema": S.DIALECT, "$defs": copy.deepcopy(schema_bundle()["$defs"]), **_ref(kind, name, part)}
    )


def _problems(checker: Checker, value: Any) -> list[Problem]:
    return checker.problems(value)


def check_payload(event: str, payload: Any) -> list[Problem]:
    """Problems of a client → relay (or relay → client) event payload; an unknown event is one problem."""
    if event not in S.EVENT_BY_NAME:
        return [Problem("", f"{event!r} is not an event of protocol v{PROTOCOL_VERSION}")]
    return _problems(_validator("event", event, "payload"), payload)


check_event = check_payload


def check_ack(event: str, ack: Any) -> list[Problem]:
    """Problems of the ack of a client event: the event's success shape when ``ok`` is true, else the error shape."""
    spec = S.EVENT_BY_NAME.get(event)
    if spec is None or spec.ack is None:
        return [Problem("", f"{event!r} has no acknowledgement")]
    if isinstance(ack, dict) and ack.get("ok") is False:
        return _problems(_validator("def", "ErrorAck", ""), ack)
    return _problems(_validator("def", spec.ack.__name__, ""), ack)


def check_http(operation_id: str, status: int, body: Any, *, request: bool = False) -> list[Problem]:
    """Problems of an HTTP request body (``request=True``) or of the response body for ``status``."""
    op = schema_bundle()["x-http"][operation_id]
    if request:
        return _problems(_validator("http", operation_id, "body"), body) if "body" in op else []
    if str(status) not in op["responses"]:
        return [Problem("", f"{op['method']} {op['path']} does not answer {status}")]
    if op["responses"][str(status)] is None:
        return []
    return _problems(_validator("http", operation_id, str(status)), body)


#: The code a refused client payload gets when its first problem is at this (event, field): the code the
#: protocol gives that mistake; every other schema problem is ``bad_request``.
REFUSAL_CODES: dict[tuple[str, str], ErrorCode] = {
    (Event.STATE_PATCH, "/patch"): ErrorCode.PATCH_FAILED,
    (Event.JOIN, "/token"): ErrorCode.INVALID_TOKEN,
    (Event.JOIN, "/version"): ErrorCode.VERSION_MISMATCH,
}


def refusal(event: str, payload: Any) -> tuple[str, str] | None:
    """``(code, message)`` refusing a client payload that breaks its schema, or None when it conforms."""
    problems = check_payload(event, payload)
    if not problems:
        return None
    first = problems[0]
    field = "/" + first.path.split("/")[1] if first.path else ""
    code = REFUSAL_CODES.get((event, field), ErrorCode.BAD_REQUEST)
    if (event, field) == (Event.USER_MESSAGE, "/text") and first.message.endswith(" is too long"):
        code = ErrorCode.MESSAGE_TOO_LONG  # over MAX_USER_MESSAGE_CHARS: the protocol's own code for it
    return code, f"Invalid {event} payload: {first}."


def operation_for(method: str, path: str) -> str | None:
    """The ``operationId`` of an HTTP request's method and path (relative to the relay's base), or None."""
    parts = path.rstrip("/").split("/")
    for op in S.HTTP:
        pattern = op.path.split("/")
        if (
            op.method.upper() == method.upper()
            and len(pattern) == len(parts)
            and all(p.startswith("{") or p == q for p, q in zip(pattern, parts, strict=True))
        ):
            return op.operation_id
    return None


# --- serving ------------------------------------------------------------------------------------------
def routes() -> list[Any]:
    """Starlette routes serving the documents under ``DOCS_PATH`` (add them before the ``/api/`` catch-all)."""
    from starlette.responses import Response
    from starlette.routing import Route

    bodies = {name: dump(doc).encode("utf-8") for name, doc in documents().items()}

    async def serve(request: Any) -> Response:
        """One protocol document (any origin may read it)."""
        body = bodies.get(request.path_params["name"])
        if body is None:
            return Response(
                dump({"ok": False, "error": {"code": "not_found", "message": "No such protocol document."}}),
                status_code=404,
                media_type="application/json",
            )
        return Response(
            body,
            media_type="application/json",
            headers={"Access-Control-Allow-Origin": "*", "Cache-Control": "public, max-age=300"},
        )

    return [Route(DOCS_PATH + "/{name:str}", serve, methods=["GET"])]


def write(directory: Path) -> list[Path]:
    """Write the documents into ``directory``; their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for name, doc in documents().items():
        path = directory / name
        path.write_text(dump(doc), encoding="utf-8")
        out.append(path)
    return out


if __name__ == "__main__":  # pragma: no cover - a developer's command
    for written in write(Path(sys.argv[1] if len(sys.argv) > 1 else "schemas")):
        print(written)

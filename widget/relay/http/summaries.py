"""Past conversations: ``POST /api/apps/{app_id}/conversations/summaries`` (docs/protocol.md §2.8).

A browser keeps the ids of its own conversations with an app; this route gives, for the ids it names and nothing
else, each one's title (the reader's first message, cut to ``MAX_TITLE_CHARS``) and times, most recently active
first. A conversation id is the reader's capability (a GET of it returns every message), so answering for the
ids a caller already holds reveals nothing new, and there is no way to list ids one does not hold: no reader
ever sees another reader's list. Ids that do not exist (deleted, expired by retention, of another app, not an id
at all) are left out, which tells the browser to forget them.

Bounds: at most ``MAX_SUMMARY_IDS`` ids and ``MAX_SUMMARIES_BODY_BYTES`` bytes per request, JSON only (a browser
asks first: a form post from another site cannot reach it), an ``Origin`` must be one of the app's, and requests
count against the per-address read limit (``get_rate_per_minute``). The store reads one row per conversation and
its first message (by the messages' index), never a whole conversation.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ... import protocol as P
from ...errors import ProtocolError
from ...protocol.messages import ConversationSummary
from ..storage.sql import SNAPSHOT, Body, fetch
from .api import Api
from .edge import HttpError, endpoint

if TYPE_CHECKING:
    from ..storage.store import Store

_CONV_ID = re.compile(r"^c_[A-Za-z0-9_-]{16,64}$")
_SPACE = re.compile(r"\s+")


def title_of(message: Any) -> str | None:
    """A conversation's title from its first message: the reader's words, whitespace collapsed, cut with "…"."""
    if not isinstance(message, dict) or message.get("role") != P.Role.USER:
        return None
    content = message.get("content")
    if not isinstance(content, str):
        return None
    text = _SPACE.sub(" ", content).strip()
    if not text:
        return None
    if len(text) > P.MAX_TITLE_CHARS:
        text = text[: P.MAX_TITLE_CHARS - 1].rstrip() + "…"
    return text


async def summaries(store: Store, app_id: str, ids: list[str]) -> list[ConversationSummary]:
    """The summaries of those of ``ids`` that are conversations of ``app_id``, most recently active first."""
    wanted = [cid for cid in dict.fromkeys(ids) if _CONV_ID.match(cid)]
    if not wanted:
        return []
    any_of, array = store.dialect.any_of, store.dialect.array

    def go() -> Body[list[ConversationSummary]]:
        convs = yield fetch(
            f"SELECT id, created_at, updated_at FROM conversations WHERE id {any_of} AND app_id = ?",
            array(wanted),
            app_id,
        )
        if not convs:
            return []
        found = [str(r[0]) for r in convs]
        firsts = yield fetch(
            "SELECT conversation_id, data FROM messages WHERE pos IN"
            f" (SELECT MIN(pos) FROM messages WHERE conversation_id {any_of} GROUP BY conversation_id)",
            array(found),
        )
        titles = {str(r[0]): title_of(json.loads(r[1])) for r in firsts}
        out: list[ConversationSummary] = [
            {"id": str(r[0]), "title": titles.get(str(r[0])), "created_at": float(r[1]), "updated_at": float(r[2])}
            for r in convs
        ]
        out.sort(key=lambda s: (s["updated_at"], s["created_at"], s["id"]), reverse=True)
        return out

    return await store.perform(go, SNAPSHOT)


def parse_ids(body: Any) -> list[str]:
    """The ids of a summaries body, or a ``bad_request`` saying what is wrong."""
    if not isinstance(body, dict) or not isinstance(body.get("ids"), list):
        raise ProtocolError(P.ErrorCode.BAD_REQUEST, 'The body must be a JSON object {"ids": [conversation ids]}.')
    ids = body["ids"]
    if len(ids) > P.MAX_SUMMARY_IDS:
        raise ProtocolError(
            P.ErrorCode.BAD_REQUEST, f"ids lists {len(ids)} conversations; at most {P.MAX_SUMMARY_IDS} are accepted."
        )
    if not all(isinstance(i, str) and 0 < len(i) <= 128 for i in ids):
        raise ProtocolError(
            P.ErrorCode.BAD_REQUEST, "Each of ids must be a conversation id (a string of 1-128 characters)."
        )
    return list(ids)


async def read_body(api: Api, request: Request) -> Any:
    """The JSON body, refused past ``MAX_SUMMARIES_BODY_BYTES`` (declared or streamed)."""
    limit = P.MAX_SUMMARIES_BODY_BYTES
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HttpError(P.ErrorCode.BODY_TOO_LARGE, f"The request body is over {limit} bytes.")
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        raise HttpError(
            P.ErrorCode.BAD_REQUEST, "Send the body as JSON with Content-Type: application/json.", status=415
        )
    size, chunks = 0, []
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HttpError(P.ErrorCode.BODY_TOO_LARGE, f"The request body is over {limit} bytes.")
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks) or b"null")
    except (ValueError, RecursionError):
        raise ProtocolError(P.ErrorCode.BAD_REQUEST, "The body is not valid JSON.") from None


async def list_summaries(api: Api, request: Request) -> Response:
    """``POST /api/apps/{app_id}/conversations/summaries`` (see the module doc)."""
    app_id = request.path_params["app_id"]
    app = api.config.apps.get(app_id)
    request.state.cors = api.cors_headers(request, app.allowed_origins if app else [])
    if app is None:
        raise ProtocolError(P.ErrorCode.NOT_FOUND, f"No app {app_id!r} on this relay.")
    api.limit(api.get_limiter, api.client_address(request), "requests")
    origin = request.headers.get("origin")
    if origin is not None and origin not in app.allowed_origins:
        raise api.refuse_origin(origin, app_id, app.allowed_origins)
    ids = parse_ids(await read_body(api, request))
    found = await summaries(api.store, app_id, ids)
    return api.respond(200, {"ok": True, "conversations": found}, {**request.state.cors, "Cache-Control": "no-store"})


def install(api: Api) -> None:
    """The summaries route and its CORS preflight (the app's origins only)."""
    run = endpoint(list_summaries)

    async def post(request: Request) -> Response:
        return await run(api, request)

    async def preflight(request: Request) -> Response:
        app = api.config.apps.get(request.path_params["app_id"])
        return api.preflight(request, app.allowed_origins if app else [], "POST, OPTIONS")

    path = P.HTTP_CONVERSATION_SUMMARIES.replace("{app_id}", "{app_id:str}")
    api.add_routes([Route(path, post, methods=["POST"]), Route(path, preflight, methods=["OPTIONS"])])

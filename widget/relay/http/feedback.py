"""The reader's thumbs up/down on an answer: ``POST /api/conversations/{id}/feedback``.

One rating per answer of a conversation (a conversation is one reader's: its id is the reader's capability),
stored in the ``feedback`` table with the turn the answer belongs to. The same body again changes nothing (no
new event, the same ``updated_at``); another rating or comment replaces the stored one; ``rating: null`` takes it
back. Each change reaches the conversation's sockets as a ``feedback`` event; a conversation GET returns the
stored ratings under ``feedback``. Only an assistant message of the conversation can be rated, so the number of
rows is bounded by the answers; a comment is at most ``MAX_FEEDBACK_COMMENT_CHARS`` characters.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, cast

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ... import protocol as P
from ...errors import ProtocolError
from ...protocol.messages import FeedbackRecord
from ..storage.sql import READ, WRITE, Body, execute, fetch, fetchrow
from .api import Api
from .edge import endpoint

if TYPE_CHECKING:
    from ..storage.store import Store

_COLUMNS = "message_id, turn_id, rating, comment, updated_at"


def _record(row: Any) -> FeedbackRecord:
    return {
        "message_id": row[0],
        "turn_id": row[1],
        "rating": cast(P.FeedbackRating, row[2]),
        "comment": row[3],
        "updated_at": float(row[4]),
    }


async def feedback_of(store: Store, conversation_id: str) -> list[FeedbackRecord]:
    """The stored ratings of a conversation's answers, oldest first."""

    def go() -> Body[list[FeedbackRecord]]:
        rows = yield fetch(
            f"SELECT {_COLUMNS} FROM feedback WHERE conversation_id = ? ORDER BY created_at, message_id",
            conversation_id,
        )
        return [_record(r) for r in rows]

    return await store.perform(go, READ)


async def turn_of(store: Store, conversation_id: str, message_id: str) -> str | None:
    """The turn an assistant message belongs to, from its ``completion.started`` event (None if not kept)."""

    def go() -> Body[str | None]:
        rows = yield fetch(
            "SELECT payload FROM events WHERE conversation_id = ? AND name = ?",
            conversation_id,
            P.Event.COMPLETION_STARTED,
        )
        for (payload,) in rows:
            data = json.loads(payload)
            if data.get("message_id") == message_id:
                return cast(str | None, data.get("turn_id"))
        return None

    return await store.perform(go, READ)


async def put_feedback(
    store: Store,
    conversation_id: str,
    message_id: str,
    turn_id: str | None,
    rating: P.FeedbackRating | None,
    comment: str | None,
    now: float | None = None,
) -> tuple[FeedbackRecord, bool]:
    """Store (or with ``rating`` None remove) the rating of one answer; the record and whether anything changed."""
    at = time.time() if now is None else now

    def go() -> Body[tuple[FeedbackRecord, bool]]:
        row = yield fetchrow(
            f"SELECT {_COLUMNS} FROM feedback WHERE conversation_id = ? AND message_id = ?", conversation_id, message_id
        )
        if rating is None:
            if row is None:
                return {
                    "message_id": message_id,
                    "turn_id": turn_id,
                    "rating": None,
                    "comment": None,
                    "updated_at": at,
                }, False
            yield execute(
                "DELETE FROM feedback WHERE conversation_id = ? AND message_id = ?", conversation_id, message_id
            )
            return {
                "message_id": message_id,
                "turn_id": row[1],
                "rating": None,
                "comment": None,
                "updated_at": at,
            }, True
        if row is not None and row[2] == rating and row[3] == comment:
            return _record(row), False
        if row is None:
            yield execute(
                "INSERT INTO feedback (conversation_id, message_id, turn_id, rating, comment, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                conversation_id,
                message_id,
                turn_id,
                str(rating),
                comment,
                at,
                at,
            )
        else:
            yield execute(
                "UPDATE feedback SET rating = ?, comment = ?, updated_at = ?"
                " WHERE conversation_id = ? AND message_id = ?",
                str(rating),
                comment,
                at,
                conversation_id,
                message_id,
            )
        return {
            "message_id": message_id,
            "turn_id": row[1] if row is not None else turn_id,
            "rating": rating,
            "comment": comment,
            "updated_at": at,
        }, True

    return await store.perform(go, WRITE)


def parse_body(body: Any) -> tuple[str, P.FeedbackRating | None, str | None]:
    """``(message_id, rating, comment)`` of a feedback body, or a ``bad_request`` saying what is wrong."""
    if not isinstance(body, dict):
        raise ProtocolError(P.ErrorCode.BAD_REQUEST, "The body must be a JSON object {message_id, rating, comment}.")
    message_id = body.get("message_id")
    if not isinstance(message_id, str) or not message_id or len(message_id) > 128:
        raise ProtocolError(
            P.ErrorCode.BAD_REQUEST, "message_id must be the id of an answer (a string of 1-128 characters)."
        )
    if "rating" not in body:
        raise ProtocolError(
            P.ErrorCode.BAD_REQUEST, 'rating is required: "up", "down" or null (to take the rating back).'
        )
    raw = body["rating"]
    if raw is not None and raw not in (P.FeedbackRating.UP, P.FeedbackRating.DOWN):
        raise ProtocolError(P.ErrorCode.BAD_REQUEST, 'rating must be "up", "down" or null.')
    comment = body.get("comment")
    if comment is not None and not isinstance(comment, str):
        raise ProtocolError(P.ErrorCode.BAD_REQUEST, "comment must be a string or null.")
    if comment is not None:
        comment = comment.strip() or None
    if comment is not None and len(comment) > P.MAX_FEEDBACK_COMMENT_CHARS:
        raise ProtocolError(P.ErrorCode.BAD_REQUEST, f"comment is over {P.MAX_FEEDBACK_COMMENT_CHARS} characters.")
    if comment is not None:
        try:
            comment.encode("utf-8")
        except UnicodeEncodeError:  # as every other endpoint answers it: nothing of the request is stored
            raise ProtocolError(P.ErrorCode.BAD_REQUEST, "comment contains a lone surrogate (not valid Unicode); "
                                "nothing was stored.") from None
    if raw is None:
        comment = None
    return message_id, (P.FeedbackRating(raw) if raw is not None else None), comment


async def rate_answer(api: Api, request: Request) -> Response:
    """``POST /api/conversations/{id}/feedback``: store the reader's rating of one answer (see the module doc)."""
    api.limit(api.ask_user_limiter, api.client_address(request), "writes")
    conv = await api.conversation(request)
    cid = conv["id"]
    api.check_origin(request, conv)  # a browser's write comes from the app's origins, as JSON (preflighted)
    body = await api.read_json(request, require_json=True)
    message_id, rating, comment = parse_body(body)
    snap = await api.store.snapshot(cid)
    messages = snap[1] if snap is not None else []
    if not any(m.get("id") == message_id and m.get("role") == P.Role.ASSISTANT for m in messages):
        raise ProtocolError(P.ErrorCode.NOT_FOUND, "No such answer in this conversation.")
    turn_id = await turn_of(api.store, cid, message_id)
    record, changed = await put_feedback(api.store, cid, message_id, turn_id, rating, comment)
    if changed:
        await api.hub.sio.emit(P.Event.FEEDBACK, dict(record), room=cid)
    return api.respond(200, {"ok": True, "feedback": record}, {**request.state.cors, "Cache-Control": "no-store"})


def install(api: Api) -> None:
    """The feedback route (its CORS preflight is the conversation's), and the stored ratings in a conversation GET."""

    async def ratings(store: Store, cid: str) -> dict[str, Any]:
        found = await feedback_of(store, cid)
        return {"feedback": found} if found else {}

    api.add_conversation_part(ratings)
    run = endpoint(rate_answer)

    async def post(request: Request) -> Response:
        return await run(api, request)

    path = P.HTTP_FEEDBACK
    api.add_routes([Route(path, post, methods=["POST"]), Route(path, api.conversation_preflight, methods=["OPTIONS"])])

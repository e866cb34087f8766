"""The relay's HTTP API (docs/protocol.md §2): create, get, answer ask-user prompts, delete."""

from __future__ import annotations

import hmac
import json
import re
import secrets
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .. import protocol as P
from ..errors import ProtocolError
from . import storage as S
from .hub import Hub, RateLimiter, empty_state

STATUS = {
    P.ERR_BAD_REQUEST: 400,
    P.ERR_UNAUTHORIZED: 401,
    P.ERR_FORBIDDEN_ORIGIN: 403,
    P.ERR_NOT_FOUND: 404,
    P.ERR_RATE_LIMITED: 429,
    P.ERR_INTERNAL: 500,
}
_CONV_ID = re.compile(r"^c_[A-Za-z0-9_-]{16,64}$")
MAX_BODY = 256 * 1024


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def new_conversation_id() -> str:
    return "c_" + secrets.token_urlsafe(24)  # 192 random bits


class Api:
    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.config = hub.config
        self.store = hub.store
        self.create_limiter = RateLimiter(self.config.create_rate_per_minute)

    # -- helpers -------------------------------------------------------------------------------
    @staticmethod
    def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse(body, status_code=status, headers=headers)

    def _error(self, exc: ProtocolError, headers: dict[str, str] | None = None) -> JSONResponse:
        return self._json(STATUS.get(exc.code, 400), P.error(exc.code, exc.message), headers)

    @staticmethod
    def _cors(request: Request, origins: list[str] | set[str]) -> dict[str, str]:
        origin = request.headers.get("origin")
        if origin and origin in origins:
            return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}
        return {"Vary": "Origin"}

    @staticmethod
    def _preflight(request: Request, origins: list[str] | set[str], methods: str) -> Response:
        origin = request.headers.get("origin")
        if not origin or origin not in origins:
            return Response(status_code=403, headers={"Vary": "Origin"})
        return Response(status_code=204, headers={
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Allow-Methods": methods,
            "Access-Control-Allow-Headers": "Content-Type, Authorization",
            "Access-Control-Max-Age": "600",
            "Vary": "Origin",
        })

    @staticmethod
    async def _body(request: Request) -> Any:
        raw = await request.body()
        if len(raw) > MAX_BODY:
            raise ProtocolError(P.ERR_BAD_REQUEST, f"The body is larger than {MAX_BODY} bytes.")
        if not raw.strip():
            return {}
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ProtocolError(P.ERR_BAD_REQUEST, f"The body is not valid JSON: {exc}") from None
        except RecursionError:
            raise ProtocolError(P.ERR_BAD_REQUEST, "The body is nested too deeply.") from None

    def base_url(self, request: Request) -> str:
        if self.config.public_url:
            return self.config.public_url
        return str(request.base_url).rstrip("/")

    async def _conversation(self, request: Request) -> dict[str, Any]:
        cid = request.path_params["conversation_id"]
        conv = await self.store.get_conversation(cid) if _CONV_ID.match(cid) else None
        if conv is None:
            raise ProtocolError(P.ERR_NOT_FOUND, "No such conversation.")
        return conv

    def _origins_of(self, conv: dict[str, Any] | None) -> list[str]:
        if conv is None:
            return []
        app = self.config.apps.get(conv["app_id"])
        return app.allowed_origins if app else []

    async def conversation_body(self, request: Request, cid: str) -> dict[str, Any]:
        snap = await self.store.snapshot(cid)
        if snap is None:
            raise ProtocolError(P.ERR_NOT_FOUND, "No such conversation.")
        if await self.hub.recover(snap[0]):
            snap = await self.store.snapshot(cid)
            if snap is None:
                raise ProtocolError(P.ERR_NOT_FOUND, "No such conversation.")
        conv, messages = snap
        token, expires_at = self.hub.signer.issue(cid)
        body: dict[str, Any] = {
            "ok": True,
            "protocol_version": P.PROTOCOL_VERSION,
            "conversation": {"id": conv["id"], "app_id": conv["app_id"], "status": conv["status"],
                             "created_at": conv["created_at"], "seq": conv["msg_seq"]},
            "messages": messages,
            # Socket.IO clients take a URL's path as a namespace: the origin here, a path prefix (a relay mounted
            # under one, or a public_url with a path) goes into relay_path.
            "relay_url": _origin(self.base_url(request)),
            "relay_path": urlsplit(self.base_url(request)).path.rstrip("/") + self.config.relay_path,
            "token": token,
            "token_expires_at": expires_at,
        }
        if conv["status"] == S.WAITING_FOR_ASK_USER:
            body["pending_ask_user"] = await self.store.pending_prompts(cid)
        return body

    # -- endpoints -------------------------------------------------------------------------------
    async def create_preflight(self, request: Request) -> Response:
        app = self.config.apps.get(request.path_params["app_id"])
        return self._preflight(request, app.allowed_origins if app else [], "POST, OPTIONS")

    async def create(self, request: Request) -> Response:
        app_id = request.path_params["app_id"]
        app = self.config.apps.get(app_id)
        cors = self._cors(request, app.allowed_origins if app else [])
        try:
            if app is None:
                raise ProtocolError(P.ERR_NOT_FOUND, f"No app {app_id!r} on this relay.")
            auth = request.headers.get("authorization")
            origin = request.headers.get("origin")
            if auth is not None:
                scheme, _, secret = auth.partition(" ")
                if scheme.lower() != "bearer" or not app.secret or not hmac.compare_digest(secret.strip().encode(), app.secret.encode()):
                    raise ProtocolError(P.ERR_UNAUTHORIZED, "The app secret is wrong.")
            elif origin is not None and origin in app.allowed_origins:
                client = request.client.host if request.client else "?"
                if not self.create_limiter.allow(f"{app_id}|{client}"):
                    raise ProtocolError(P.ERR_RATE_LIMITED, "Too many conversations created from this address; wait a minute.")
            else:
                raise ProtocolError(
                    P.ERR_FORBIDDEN_ORIGIN,
                    f"Origin {origin!r} may not create conversations of app {app_id!r}; add it to the app's allowed origins"
                    if origin else "A browser request needs an allowed Origin; a backend needs Authorization: Bearer <app secret>.")
            body = await self._body(request)
            if not isinstance(body, dict):
                raise ProtocolError(P.ERR_BAD_REQUEST, "The body must be a JSON object (or empty).")
            cid = new_conversation_id()
            await self.store.create_conversation(cid, app_id, empty_state())
        except ProtocolError as exc:
            return self._error(exc, cors)
        url = f"{self.base_url(request)}{P.HTTP_CONVERSATION.format(conversation_id=cid)}"
        return self._json(201, {"ok": True, "id": cid, "url": url}, cors)

    async def conversation_preflight(self, request: Request) -> Response:
        cid = request.path_params["conversation_id"]
        conv = await self.store.get_conversation(cid) if _CONV_ID.match(cid) else None
        return self._preflight(request, self._origins_of(conv), "GET, POST, DELETE, OPTIONS")

    async def get(self, request: Request) -> Response:
        cors: dict[str, str] = {"Vary": "Origin"}
        try:
            conv = await self._conversation(request)
            cors = self._cors(request, self._origins_of(conv))
            body = await self.conversation_body(request, conv["id"])
        except ProtocolError as exc:
            return self._error(exc, cors)
        return self._json(200, body, {**cors, "Cache-Control": "no-store"})

    async def delete(self, request: Request) -> Response:
        cors: dict[str, str] = {"Vary": "Origin"}
        try:
            conv = await self._conversation(request)
            cors = self._cors(request, self._origins_of(conv))
            await self.store.delete_conversation(conv["id"])
            await self.hub.disconnect_conversation(conv["id"])
        except ProtocolError as exc:
            return self._error(exc, cors)
        return Response(status_code=204, headers=cors)

    async def ask_user(self, request: Request) -> Response:
        cors: dict[str, str] = {"Vary": "Origin"}
        try:
            conv = await self._conversation(request)
            cid = conv["id"]
            cors = self._cors(request, self._origins_of(conv))
            body = await self._body(request)
            if not isinstance(body, dict):
                raise ProtocolError(P.ERR_BAD_REQUEST, "The body must be a JSON object {answers, idempotency_key}.")
            answers = body.get("answers")
            if isinstance(answers, dict):
                answers = [answers]
            if not isinstance(answers, list) or not answers:
                raise ProtocolError(P.ERR_BAD_REQUEST, "answers must be an {id, result} object or a non-empty list of them.")
            for a in answers:
                if not isinstance(a, dict) or not isinstance(a.get("id"), str) or "result" not in a:
                    raise ProtocolError(P.ERR_BAD_REQUEST, "each answer must be an object with a string id and a result.")
            key = body.get("idempotency_key")
            if key is not None and (not isinstance(key, str) or not key or len(key) > P.MAX_IDEMPOTENCY_KEY_CHARS):
                raise ProtocolError(P.ERR_BAD_REQUEST, f"idempotency_key must be a string of 1-{P.MAX_IDEMPOTENCY_KEY_CHARS} characters.")
            await self.hub.answer_prompts(cid, answers, (key, P.ok()) if key is not None else None)
            out = await self.conversation_body(request, cid)
        except ProtocolError as exc:
            return self._error(exc, cors)
        return self._json(200, out, {**cors, "Cache-Control": "no-store"})

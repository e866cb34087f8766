"""The relay's HTTP API (docs/protocol.md §2): create, get, answer ask-user prompts, delete, check an origin.

Every answer of an ``/api/`` route is JSON, errors in the one shape ``{"ok": false, "error": {"code", "message"}}``:
a refused origin says which origin and which are allowed; a rate limit carries ``Retry-After``; a store that fails or
does not answer is 503 ``unavailable`` (never a plain-text 500). Bodies are read in chunks up to ``max_body_bytes``.
"""

from __future__ import annotations

import functools
import hmac
import json
import logging
import math
import re
import secrets
import sqlite3
import time
from typing import Any, Awaitable, Callable
from urllib.parse import urlsplit

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from ... import protocol as P
from ...errors import ProtocolError
from ...protocol import ConversationStatus
from ..hub import Hub, empty_state
from ..ratelimit import RateLimiter
from .feedback import feedback_of

log = logging.getLogger("widget.relay.http.api")

STATUS = {
    P.ERR_BAD_REQUEST: 400,
    P.ERR_UNAUTHORIZED: 401,
    P.ERR_FORBIDDEN_ORIGIN: 403,
    P.ERR_NOT_FOUND: 404,
    P.ERR_BODY_TOO_LARGE: 413,
    P.ERR_RATE_LIMITED: 429,
    P.ERR_INTERNAL: 500,
    P.ERR_UNAVAILABLE: 503,
}
_CONV_ID = re.compile(r"^c_[A-Za-z0-9_-]{16,64}$")
#: How long a refused origin is not logged again (per origin and app).
ORIGIN_NOTE_INTERVAL_S = 60.0
#: Retry-After of a 503 ``unavailable``, seconds.
UNAVAILABLE_RETRY_S = 5


class HttpError(ProtocolError):
    """A ProtocolError with the response headers it needs (``Retry-After``) or a status of its own."""

    def __init__(self, code: str, message: str, *, headers: dict[str, str] | None = None, status: int | None = None) -> None:
        super().__init__(code, message)
        self.headers = headers or {}
        self.status = status


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def new_conversation_id() -> str:
    return "c_" + secrets.token_urlsafe(24)  # 192 random bits


def is_store_failure(exc: BaseException) -> bool:
    """Whether an exception is the store (or Redis) failing, not a bug: a 503 to retry, not a 500."""
    if isinstance(exc, (sqlite3.Error, OSError, TimeoutError, ConnectionError)):
        return True
    return type(exc).__module__.split(".")[0] in ("asyncpg", "redis")


def origin_refusal(origin: str, app_id: str, allowed: list[str]) -> str:
    """The one sentence for an origin an app does not allow (the log line and the HTTP error say it alike)."""
    text = f"origin {origin} is not allowed for app {app_id}; allowed: {', '.join(allowed) if allowed else 'none'}"
    host = urlsplit(origin).hostname
    swapped = {"localhost": "127.0.0.1", "127.0.0.1": "localhost"}.get(host or "")
    if swapped and origin.replace(host, swapped, 1) in allowed:  # type: ignore[arg-type]
        text += f" ({host} and {swapped} are different origins: open the page as {origin.replace(host, swapped, 1)} or allow {origin})"  # type: ignore[arg-type]
    return text


Handler = Callable[["Api", Request], Awaitable[Response]]


def endpoint(fn: Handler) -> Handler:
    """An API route: ProtocolErrors become their JSON error; a store failure 503 ``unavailable``; anything else a
    JSON 500 ``internal`` (logged). CORS headers set by the route (``request.state.cors``) go on every answer."""

    @functools.wraps(fn)
    async def run(self: "Api", request: Request) -> Response:
        request.state.cors = {"Vary": "Origin"}
        try:
            return await fn(self, request)
        except HttpError as exc:
            return self._json(exc.status or STATUS.get(exc.code, 400), P.error(exc.code, exc.message),
                              {**request.state.cors, **exc.headers})
        except ProtocolError as exc:
            return self._json(STATUS.get(exc.code, 400), P.error(exc.code, exc.message), request.state.cors)
        except ClientDisconnect:
            # The client went away mid-body, or the body limit / body deadline ended the request (its answer,
            # if any, is already out): nothing to say, nothing to log.
            return Response(status_code=400)
        except Exception as exc:  # noqa: BLE001 - every answer of /api is JSON
            if is_store_failure(exc):
                self.store_failure = (time.monotonic(), f"{type(exc).__name__}: {exc}"[:160])
                log.warning("%s %s: the store failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
                return self._json(503, P.error(P.ERR_UNAVAILABLE, "The relay's storage is not answering; retry shortly."),
                                  {**request.state.cors, "Retry-After": str(UNAVAILABLE_RETRY_S)})
            log.exception("%s %s failed", request.method, request.url.path)
            return self._json(500, P.error(P.ERR_INTERNAL, "The relay failed to handle this request."), request.state.cors)

    return run


class Api:
    """The HTTP routes of one relay (see the module doc)."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.config = hub.config
        self.store = hub.store
        self.create_limiter = RateLimiter(self.config.create_rate_per_minute)
        self.get_limiter = RateLimiter(self.config.get_rate_per_minute)
        self.ask_user_limiter = RateLimiter(self.config.ask_user_rate_per_minute)
        self._origin_notes = RateLimiter(1, ORIGIN_NOTE_INTERVAL_S)
        #: when a route last found the store failing, and how (``/readyz`` reports it for a while)
        self.store_failure: tuple[float, str] | None = None

    # -- helpers -------------------------------------------------------------------------------
    @staticmethod
    def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse(body, status_code=status, headers=headers)

    @staticmethod
    def _cors(request: Request, origins: list[str] | set[str]) -> dict[str, str]:
        origin = request.headers.get("origin")
        if origin and origin in origins:
            return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}
        return {"Vary": "Origin"}

    @staticmethod
    def _preflight(request: Request, origins: list[str] | set[str], methods: str) -> Response:
        """A CORS preflight: allowed for ``origins`` only."""
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
    def _client(request: Request) -> str:
        return request.client.host if request.client else "?"

    def _limit(self, limiter: RateLimiter, key: str, what: str) -> None:
        if not limiter.allow(key):
            # (a limiter without retry_after, e.g. a test's stand-in: a whole window)
            after = getattr(limiter, "retry_after", None)
            wait = max(1, math.ceil(after(key) if after is not None else limiter.window_s))
            raise HttpError(P.ERR_RATE_LIMITED, f"Too many {what} from this address; retry in {wait} s.",
                            headers={"Retry-After": str(wait)})

    def _refuse_origin(self, origin: str, app_id: str, allowed: list[str]) -> HttpError:
        """The 403 for an origin ``app_id`` does not allow, logged once per origin and app per interval."""
        text = origin_refusal(origin, app_id, allowed)
        if self._origin_notes.allow(f"{origin}|{app_id}"):
            log.warning("%s", text)
        return HttpError(P.ERR_FORBIDDEN_ORIGIN, text[0].upper() + text[1:] + ".")

    def _draining(self) -> None:
        if self.hub.draining or self.hub.closing:
            raise HttpError(P.ERR_UNAVAILABLE, "The relay is shutting down; retry (another relay process answers).",
                            headers={"Retry-After": "1"})

    async def _body(self, request: Request, *, require_json: bool = False) -> Any:
        """The JSON body, read in chunks and refused past ``max_body_bytes`` (never held whole beyond it)."""
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if require_json and ctype != "application/json":
            raise HttpError(P.ERR_BAD_REQUEST, "Send the body as JSON with Content-Type: application/json.", status=415)
        limit = self.config.max_body_bytes
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HttpError(P.ERR_BODY_TOO_LARGE, f"The request body is over {limit} bytes.")
            chunks.append(chunk)
        raw = b"".join(chunks)
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
            # Readable by every site of this relay: a widget whose stored conversation is gone (retention, a
            # deleted chat) must see the 404 to start a new one; a CORS failure looks like a relay that is down.
            request.state.cors = self._cors(request, {o for a in self.config.apps.values() for o in a.allowed_origins})
            raise ProtocolError(P.ERR_NOT_FOUND, "No such conversation.")
        request.state.cors = self._cors(request, self._origins_of(conv))
        return conv

    def _origins_of(self, conv: dict[str, Any] | None) -> list[str]:
        if conv is None:
            return []
        app = self.config.apps.get(conv["app_id"])
        return app.allowed_origins if app else []

    def _check_origin(self, request: Request, conv: dict[str, Any]) -> None:
        """A browser's write to a conversation must come from an origin of its app (no Origin: not a browser)."""
        origin = request.headers.get("origin")
        allowed = self._origins_of(conv)
        if origin is not None and origin not in allowed:
            raise self._refuse_origin(origin, conv["app_id"], allowed)

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
        if conv["status"] == ConversationStatus.WAITING_FOR_ASK_USER:
            body["pending_ask_user"] = await self.store.pending_prompts(cid)
        ratings = await feedback_of(self.store, cid)
        if ratings:
            body["feedback"] = ratings
        app = self.config.apps.get(conv["app_id"])
        body["starters"] = list(app.starters) if app is not None else []
        return body

    # -- endpoints -------------------------------------------------------------------------------
    async def create_preflight(self, request: Request) -> Response:
        """Only the app's origins pass (a refused page learns why from ``GET /api/apps/{app_id}/origin``)."""
        app_id = request.path_params["app_id"]
        app = self.config.apps.get(app_id)
        origin = request.headers.get("origin")
        if app is not None and origin and origin not in app.allowed_origins:
            self._refuse_origin(origin, app_id, app.allowed_origins)  # logged
        return self._preflight(request, app.allowed_origins if app else [], "POST, OPTIONS")

    @endpoint
    async def create(self, request: Request) -> Response:
        app_id = request.path_params["app_id"]
        app = self.config.apps.get(app_id)
        origin = request.headers.get("origin")
        request.state.cors = self._cors(request, app.allowed_origins if app else [])
        if app is None:
            raise ProtocolError(P.ERR_NOT_FOUND, f"No app {app_id!r} on this relay.")
        self._draining()
        auth = request.headers.get("authorization")
        if auth is not None:
            scheme, _, secret = auth.partition(" ")
            if scheme.lower() != "bearer" or not app.secret or not hmac.compare_digest(secret.strip().encode(), app.secret.encode()):
                raise ProtocolError(P.ERR_UNAUTHORIZED, "The app secret is wrong.")
        elif origin is not None and origin in app.allowed_origins:
            self._limit(self.create_limiter, f"{app_id}|{self._client(request)}", "conversations created")
        elif origin is not None:
            raise self._refuse_origin(origin, app_id, app.allowed_origins)
        else:
            raise ProtocolError(P.ERR_FORBIDDEN_ORIGIN,
                                "A browser request needs an allowed Origin; a backend needs Authorization: Bearer <app secret>.")
        body = await self._body(request)
        if not isinstance(body, dict):
            raise ProtocolError(P.ERR_BAD_REQUEST, "The body must be a JSON object (or empty).")
        cid = new_conversation_id()
        await self.store.create_conversation(cid, app_id, empty_state())
        url = f"{self.base_url(request)}{P.HTTP_CONVERSATION.format(conversation_id=cid)}"
        return self._json(201, {"ok": True, "id": cid, "url": url}, request.state.cors)

    @endpoint
    async def origin_check(self, request: Request) -> Response:
        """Whether the requesting page's origin may use an app: readable by any origin, so a page the relay refuses
        can say why (a module import or a refused preflight tells the page nothing)."""
        app_id = request.path_params["app_id"]
        app = self.config.apps.get(app_id)
        origin = request.headers.get("origin")
        request.state.cors = {"Access-Control-Allow-Origin": origin or "*", "Vary": "Origin"}
        if app is None:
            raise ProtocolError(P.ERR_NOT_FOUND, f"No app {app_id!r} on this relay.")
        self._limit(self.get_limiter, self._client(request), "requests")
        if origin is None:
            raise ProtocolError(P.ERR_BAD_REQUEST, "Send this request from the page (with its Origin).")
        if origin not in app.allowed_origins:
            raise self._refuse_origin(origin, app_id, app.allowed_origins)
        return self._json(200, {"ok": True, "app_id": app_id, "origin": origin},
                          {**request.state.cors, "Cache-Control": "no-store"})

    async def conversation_preflight(self, request: Request) -> Response:
        cid = request.path_params["conversation_id"]
        try:
            conv = await self.store.get_conversation(cid) if _CONV_ID.match(cid) else None
        except Exception as exc:  # noqa: BLE001 - a preflight cannot carry a body anyway
            if not is_store_failure(exc):
                raise
            return Response(status_code=503, headers={"Vary": "Origin", "Retry-After": str(UNAVAILABLE_RETRY_S)})
        return self._preflight(request, self._origins_of(conv), "GET, POST, DELETE, OPTIONS")

    @endpoint
    async def get(self, request: Request) -> Response:
        self._limit(self.get_limiter, self._client(request), "requests")
        conv = await self._conversation(request)
        body = await self.conversation_body(request, conv["id"])
        return self._json(200, body, {**request.state.cors, "Cache-Control": "no-store"})

    @endpoint
    async def delete(self, request: Request) -> Response:
        self._limit(self.ask_user_limiter, self._client(request), "writes")
        conv = await self._conversation(request)
        self._check_origin(request, conv)
        await self.store.delete_conversation(conv["id"])
        await self.hub.disconnect_conversation(conv["id"])
        return Response(status_code=204, headers=request.state.cors)

    @endpoint
    async def ask_user(self, request: Request) -> Response:
        self._limit(self.ask_user_limiter, self._client(request), "answers")
        conv = await self._conversation(request)
        cid = conv["id"]
        # A text/plain or form POST is a "simple" cross-origin request a browser sends without asking: both
        # the JSON type (which makes the browser ask first) and the Origin are required.
        self._check_origin(request, conv)
        body = await self._body(request, require_json=True)
        self._draining()
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
        return self._json(200, out, {**request.state.cors, "Cache-Control": "no-store"})

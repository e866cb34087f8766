"""The relay's HTTP API (docs/protocol.md §2): create, get, answer ask-user prompts, delete, check an origin; and
the public checks and extension points other features' routes use (``add_routes``, ``add_conversation_part``).

Every answer of an ``/api/`` route is JSON, errors in the one shape ``{"ok": false, "error": {"code", "message"}}``:
a refused origin says which origin and which are allowed; a rate limit carries ``Retry-After``; a store that fails or
does not answer is 503 ``unavailable`` (never a plain-text 500). Bodies are read in chunks up to ``max_body_bytes``.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ... import protocol as P
from ...errors import ProtocolError
from ...protocol import ConversationStatus
from ..config import AppConfig
from ..hub import Hub, empty_state
from ..ratelimit import RateLimiter
from ..storage import Store
from .edge import UNAVAILABLE_RETRY_S, HttpError, endpoint, is_store_failure, origin_refusal, respond

log = logging.getLogger("widget.relay.http.api")
#: Whether the requesting page's origin may use an app (readable from any origin; docs/security.md).
ORIGIN_CHECK_PATH = "/api/apps/{app_id}/origin"
#: What a feature adds to a conversation GET's body: ``(store, conversation_id) -> {key: value}`` (empty: nothing).
ConversationPart = Callable[[Store, str], Awaitable[dict[str, Any]]]

_CONV_ID = re.compile(r"^c_[A-Za-z0-9_-]{16,64}$")
#: How long a refused origin is not logged again (per origin and app).
ORIGIN_NOTE_INTERVAL_S = 60.0
def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def new_conversation_id() -> str:
    return "c_" + secrets.token_urlsafe(24)  # 192 random bits



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
        self._extra_routes: list[Route] = []
        self._parts: list[ConversationPart] = []

    # -- extension points ---------------------------------------------------------------------
    def add_routes(self, routes: list[Route]) -> None:
        """A feature's routes, served under ``/api/`` beside the conversation API's own (before the catch-all 404)."""
        self._extra_routes.extend(routes)

    def add_conversation_part(self, part: ConversationPart) -> None:
        """A feature's keys in a conversation GET's body (and in every answer that returns the conversation)."""
        self._parts.append(part)

    def routes(self) -> list[Route]:
        """Every ``/api/`` route: the conversation API's, then the features' in the order they were added."""
        create_path = P.HTTP_CREATE_CONVERSATION.replace("{app_id}", "{app_id:str}")
        conv_path = P.HTTP_CONVERSATION.replace("{conversation_id}", "{conversation_id:str}")
        ask_path = P.HTTP_ASK_USER.replace("{conversation_id}", "{conversation_id:str}")
        origin_path = ORIGIN_CHECK_PATH.replace("{app_id}", "{app_id:str}")
        return [
            Route(create_path, self.create, methods=["POST"]),
            Route(create_path, self.create_preflight, methods=["OPTIONS"]),
            Route(origin_path, self.origin_check, methods=["GET"]),
            Route(conv_path, self.get, methods=["GET"]),
            Route(conv_path, self.delete, methods=["DELETE"]),
            Route(conv_path, self.conversation_preflight, methods=["OPTIONS"]),
            Route(ask_path, self.ask_user, methods=["POST"]),
            Route(ask_path, self.conversation_preflight, methods=["OPTIONS"]),
            *self._extra_routes,
        ]

    # -- helpers -------------------------------------------------------------------------------
    @staticmethod
    def respond(status: int, body: Any, headers: dict[str, str] | None = None) -> JSONResponse:
        """A JSON answer."""
        return respond(status, body, headers)

    @staticmethod
    def cors_headers(request: Request, origins: list[str] | set[str]) -> dict[str, str]:
        """The CORS headers of an answer to a page of ``origins`` (none for any other origin)."""
        origin = request.headers.get("origin")
        if origin and origin in origins:
            return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}
        return {"Vary": "Origin"}

    @staticmethod
    def preflight(request: Request, origins: list[str] | set[str], methods: str) -> Response:
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
    def client_address(request: Request) -> str:
        """The peer's address (the rate limits' key)."""
        return request.client.host if request.client else "?"

    def limit(self, limiter: RateLimiter, key: str, what: str) -> None:
        """Refuse with 429 ``rate_limited`` and ``Retry-After`` when ``key`` is over ``limiter``'s budget."""
        if not limiter.allow(key):
            # (a limiter without retry_after, e.g. a test's stand-in: a whole window)
            after = getattr(limiter, "retry_after", None)
            wait = max(1, math.ceil(after(key) if after is not None else limiter.window_s))
            raise HttpError(P.ErrorCode.RATE_LIMITED, f"Too many {what} from this address; retry in {wait} s.",
                            headers={"Retry-After": str(wait)})

    def refuse_origin(self, origin: str, app_id: str, allowed: list[str]) -> HttpError:
        """The 403 for an origin ``app_id`` does not allow, logged once per origin and app per interval."""
        text = origin_refusal(origin, app_id, allowed)
        if self._origin_notes.allow(f"{origin}|{app_id}"):
            log.warning("%s", origin_refusal(origin, app_id, allowed, for_log=True))
        return HttpError(P.ErrorCode.FORBIDDEN_ORIGIN, text[0].upper() + text[1:] + ".")

    def require_app_secret(self, request: Request, app_id: str, what: str) -> AppConfig:
        """The app whose secret the request carries (``Authorization: Bearer <secret>``); else 401 ``unauthorized``.

        An unknown app, an app without a secret and a wrong secret get one answer (``what`` the request wanted to
        do, "read this app's stats"): without the secret nobody learns which app ids exist."""
        app = self.config.apps.get(app_id)
        scheme, _, secret = (request.headers.get("authorization") or "").partition(" ")
        expected = app.secret if app is not None and app.secret else None
        matches = hmac.compare_digest(secret.strip().encode(), (expected or "\0" * 32).encode())
        if app is None or expected is None or scheme.lower() != "bearer" or not matches:
            raise ProtocolError(
                P.ErrorCode.UNAUTHORIZED,
                f"Send Authorization: Bearer <app secret> to {what} "
                "(an app without a secret in the relay config has none).",
            )
        return app

    def refuse_if_draining(self) -> None:
        """A write while the relay shuts down: 503 ``unavailable``, retry soon (another process answers)."""
        if self.hub.draining or self.hub.closing:
            raise HttpError(
                P.ErrorCode.UNAVAILABLE,
                "The relay is shutting down; retry (another relay process answers).",
                headers={"Retry-After": "1"},
            )

    async def read_json(self, request: Request, *, require_json: bool = False) -> Any:
        """The JSON body, read in chunks and refused past ``max_body_bytes`` (never held whole beyond it)."""
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if require_json and ctype != "application/json":
            raise HttpError(
                P.ErrorCode.BAD_REQUEST, "Send the body as JSON with Content-Type: application/json.", status=415
            )
        limit = self.config.max_body_bytes
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HttpError(P.ErrorCode.BODY_TOO_LARGE, f"The request body is over {limit} bytes.")
            chunks.append(chunk)
        raw = b"".join(chunks)
        if not raw.strip():
            return {}
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ProtocolError(P.ErrorCode.BAD_REQUEST, f"The body is not valid JSON: {exc}") from None
        except RecursionError:
            raise ProtocolError(P.ErrorCode.BAD_REQUEST, "The body is nested too deeply.") from None

    def base_url(self, request: Request) -> str:
        """The relay's public base URL (``public_url``, else the request's)."""
        if self.config.public_url:
            return self.config.public_url
        return str(request.base_url).rstrip("/")

    async def conversation(self, request: Request) -> dict[str, Any]:
        """The path's conversation (404 ``not_found`` otherwise), with the CORS headers of its app's origins set."""
        cid = request.path_params["conversation_id"]
        conv = await self.store.get_conversation(cid) if _CONV_ID.match(cid) else None
        if conv is None:
            # Readable by every site of this relay: a widget whose stored conversation is gone (retention, a
            # deleted chat) must see the 404 to start a new one; a CORS failure looks like a relay that is down.
            request.state.cors = self.cors_headers(request, {o for a in self.config.apps.values()
                                                             for o in a.allowed_origins})
            raise ProtocolError(P.ErrorCode.NOT_FOUND, "No such conversation.")
        request.state.cors = self.cors_headers(request, self.origins_of(conv))
        return conv

    def origins_of(self, conv: dict[str, Any] | None) -> list[str]:
        """The allowed origins of a conversation's app."""
        if conv is None:
            return []
        app = self.config.apps.get(conv["app_id"])
        return app.allowed_origins if app else []

    def check_origin(self, request: Request, conv: dict[str, Any]) -> None:
        """A browser's write to a conversation must come from an origin of its app (no Origin: not a browser)."""
        origin = request.headers.get("origin")
        allowed = self.origins_of(conv)
        if origin is not None and origin not in allowed:
            raise self.refuse_origin(origin, conv["app_id"], allowed)

    async def conversation_body(self, request: Request, cid: str) -> dict[str, Any]:
        """A conversation GET's body: the conversation, its messages, a fresh join token and the features' parts."""
        snap = await self.store.snapshot(cid)
        if snap is None:
            raise ProtocolError(P.ErrorCode.NOT_FOUND, "No such conversation.")
        if await self.hub.recover(snap[0]):
            snap = await self.store.snapshot(cid)
            if snap is None:
                raise ProtocolError(P.ErrorCode.NOT_FOUND, "No such conversation.")
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
        for part in self._parts:
            body.update(await part(self.store, cid))
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
            self.refuse_origin(origin, app_id, app.allowed_origins)  # logged
        if app is None and origin:  # any page may learn that the app does not exist (the POST's 404 says so)
            return self.preflight(request, [origin], "POST, OPTIONS")
        return self.preflight(request, app.allowed_origins if app else [], "POST, OPTIONS")

    @endpoint
    async def create(self, request: Request) -> Response:
        app_id = request.path_params["app_id"]
        app = self.config.apps.get(app_id)
        origin = request.headers.get("origin")
        request.state.cors = self.cors_headers(request, app.allowed_origins if app else [origin] if origin else [])
        if app is None:  # readable by the page (a wrong data-app), which can then say so
            raise ProtocolError(P.ErrorCode.NOT_FOUND, f"No app {app_id!r} on this relay; check the page's data-app.")
        self.refuse_if_draining()
        auth = request.headers.get("authorization")
        if auth is not None:
            scheme, _, secret = auth.partition(" ")
            if (scheme.lower() != "bearer" or not app.secret
                or not hmac.compare_digest(secret.strip().encode(), app.secret.encode())):
                raise ProtocolError(P.ErrorCode.UNAUTHORIZED, "The app secret is wrong.")
        elif origin is not None and origin in app.allowed_origins:
            self.limit(self.create_limiter, f"{app_id}|{self.client_address(request)}", "conversations created")
        elif origin is not None:
            raise self.refuse_origin(origin, app_id, app.allowed_origins)
        else:
            raise ProtocolError(P.ErrorCode.FORBIDDEN_ORIGIN,
                                "A browser request needs an allowed Origin; a backend needs Authorization: Bearer "
                                "<app secret>.")
        body = await self.read_json(request)
        if not isinstance(body, dict):
            raise ProtocolError(P.ErrorCode.BAD_REQUEST, "The body must be a JSON object (or empty).")
        cid = new_conversation_id()
        await self.store.create_conversation(cid, app_id, empty_state())
        url = f"{self.base_url(request)}{P.HTTP_CONVERSATION.format(conversation_id=cid)}"
        return self.respond(201, {"ok": True, "id": cid, "url": url}, request.state.cors)

    @endpoint
    async def origin_check(self, request: Request) -> Response:
        """Whether the requesting page's origin may use an app: readable by any origin, so a page the relay refuses
        can say why (a module import or a refused preflight tells the page nothing)."""
        app_id = request.path_params["app_id"]
        app = self.config.apps.get(app_id)
        origin = request.headers.get("origin")
        request.state.cors = {"Access-Control-Allow-Origin": origin or "*", "Vary": "Origin"}
        if app is None:
            raise ProtocolError(P.ErrorCode.NOT_FOUND, f"No app {app_id!r} on this relay.")
        self.limit(self.get_limiter, self.client_address(request), "requests")
        if origin is None:
            raise ProtocolError(P.ErrorCode.BAD_REQUEST, "Send this request from the page (with its Origin).")
        if origin not in app.allowed_origins:
            raise self.refuse_origin(origin, app_id, app.allowed_origins)
        return self.respond(200, {"ok": True, "app_id": app_id, "origin": origin},
                          {**request.state.cors, "Cache-Control": "no-store"})

    async def conversation_preflight(self, request: Request) -> Response:
        cid = request.path_params["conversation_id"]
        try:
            conv = await self.store.get_conversation(cid) if _CONV_ID.match(cid) else None
        except Exception as exc:  # a preflight cannot carry a body anyway
            if not is_store_failure(exc):
                raise
            return Response(status_code=503, headers={"Vary": "Origin", "Retry-After": str(UNAVAILABLE_RETRY_S)})
        return self.preflight(request, self.origins_of(conv), "GET, POST, DELETE, OPTIONS")

    @endpoint
    async def get(self, request: Request) -> Response:
        self.limit(self.get_limiter, self.client_address(request), "requests")
        conv = await self.conversation(request)
        body = await self.conversation_body(request, conv["id"])
        return self.respond(200, body, {**request.state.cors, "Cache-Control": "no-store"})

    @endpoint
    async def delete(self, request: Request) -> Response:
        self.limit(self.ask_user_limiter, self.client_address(request), "writes")
        conv = await self.conversation(request)
        self.check_origin(request, conv)
        await self.store.delete_conversation(conv["id"])
        await self.hub.disconnect_conversation(conv["id"])
        return Response(status_code=204, headers=request.state.cors)

    @endpoint
    async def ask_user(self, request: Request) -> Response:
        self.limit(self.ask_user_limiter, self.client_address(request), "answers")
        conv = await self.conversation(request)
        cid = conv["id"]
        # A text/plain or form POST is a "simple" cross-origin request a browser sends without asking: both
        # the JSON type (which makes the browser ask first) and the Origin are required.
        self.check_origin(request, conv)
        body = await self.read_json(request, require_json=True)
        self.refuse_if_draining()
        if not isinstance(body, dict):
            raise ProtocolError(P.ErrorCode.BAD_REQUEST, "The body must be a JSON object {answers, idempotency_key}.")
        answers = body.get("answers")
        if isinstance(answers, dict):
            answers = [answers]
        if not isinstance(answers, list) or not answers:
            raise ProtocolError(P.ErrorCode.BAD_REQUEST,
                                "answers must be an {id, result} object or a non-empty list of them.")
        for a in answers:
            if not isinstance(a, dict) or not isinstance(a.get("id"), str) or "result" not in a:
                raise ProtocolError(
                    P.ErrorCode.BAD_REQUEST, "each answer must be an object with a string id and a result."
                )
        key = body.get("idempotency_key")
        if key is not None and (not isinstance(key, str) or not key or len(key) > P.MAX_IDEMPOTENCY_KEY_CHARS):
            raise ProtocolError(P.ErrorCode.BAD_REQUEST,
                                f"idempotency_key must be a string of 1-{P.MAX_IDEMPOTENCY_KEY_CHARS} characters.")
        await self.hub.answer_prompts(cid, answers, (key, P.ok()) if key is not None else None)
        out = await self.conversation_body(request, cid)
        return self.respond(200, out, {**request.state.cors, "Cache-Control": "no-store"})

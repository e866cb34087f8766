"""Errors mapped at the HTTP edge: every ``/api/`` answer is JSON in one shape, whatever went wrong.

``endpoint`` wraps a route: a ``ProtocolError`` becomes its code's status and JSON error, a store that fails or does
not answer a 503 ``unavailable`` with ``Retry-After``, anything else a logged JSON 500 ``internal``.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from ... import protocol as P
from ...errors import ProtocolError

log = logging.getLogger("widget.relay.http.api")


class Routes(Protocol):
    """What ``endpoint`` needs of the object a route belongs to: where it notes a store failure for ``/readyz``."""

    store_failure: tuple[float, str] | None


R = TypeVar("R", bound=Routes)
Handler = Callable[[R, Request], Awaitable[Response]]


def respond(status: int, body: Any, headers: dict[str, str] | None = None) -> JSONResponse:
    """A JSON answer."""
    return JSONResponse(body, status_code=status, headers=headers)


STATUS: dict[str, int] = {
    P.ErrorCode.BAD_REQUEST: 400,
    P.ErrorCode.UNAUTHORIZED: 401,
    P.ErrorCode.FORBIDDEN_ORIGIN: 403,
    P.ErrorCode.NOT_FOUND: 404,
    P.ErrorCode.BODY_TOO_LARGE: 413,
    P.ErrorCode.RATE_LIMITED: 429,
    P.ErrorCode.INTERNAL: 500,
    P.ErrorCode.UNAVAILABLE: 503,
}
#: Retry-After of a 503 ``unavailable``, seconds.
UNAVAILABLE_RETRY_S = 5


class HttpError(ProtocolError):
    """A ProtocolError with the response headers it needs (``Retry-After``) or a status of its own."""

    def __init__(
        self, code: str, message: str, *, headers: dict[str, str] | None = None, status: int | None = None
    ) -> None:
        super().__init__(code, message)
        self.headers = headers or {}
        self.status = status


def is_store_failure(exc: BaseException) -> bool:
    """Whether an exception is the store (or Redis) failing, not a bug: a 503 to retry, not a 500."""
    if isinstance(exc, (sqlite3.Error, OSError, TimeoutError, ConnectionError)):
        return True
    return type(exc).__module__.split(".")[0] in ("asyncpg", "redis")


def origin_refusal(origin: str, app_id: str, allowed: list[str], *, for_log: bool = False) -> str:
    """The one sentence for an origin an app does not allow. The page is told only that (and, on a developer's
    machine, that localhost and 127.0.0.1 differ); the operator's log (``for_log``) names the allowed origins."""
    text = f"origin {origin} is not allowed for app {app_id}"
    if for_log:
        text += f"; allowed: {', '.join(allowed) if allowed else 'none'}"
    host = urlsplit(origin).hostname or ""
    swapped = {"localhost": "127.0.0.1", "127.0.0.1": "localhost"}.get(host)
    if swapped and (twin := origin.replace(host, swapped, 1)) in allowed:
        text += f" ({host} and {swapped} are different origins: open the page as {twin} or allow {origin})"
    return text


def endpoint(fn: Handler[R]) -> Handler[R]:
    """An API route: ProtocolErrors become their JSON error; a store failure 503 ``unavailable``; anything else a
    JSON 500 ``internal`` (logged). CORS headers set by the route (``request.state.cors``) go on every answer."""

    @functools.wraps(fn)
    async def run(self: R, request: Request) -> Response:
        request.state.cors = {"Vary": "Origin"}
        try:
            return await fn(self, request)
        except HttpError as exc:
            return respond(
                exc.status or STATUS.get(exc.code, 400),
                P.error(exc.code, exc.message),
                {**request.state.cors, **exc.headers},
            )
        except ProtocolError as exc:
            return respond(STATUS.get(exc.code, 400), P.error(exc.code, exc.message), request.state.cors)
        except ClientDisconnect:
            # The client went away mid-body, or the body limit / body deadline ended the request (its answer,
            # if any, is already out): nothing to say, nothing to log.
            return Response(status_code=400)
        except Exception as exc:
            if is_store_failure(exc):
                self.store_failure = (time.monotonic(), f"{type(exc).__name__}: {exc}"[:160])
                log.warning(
                    "%s %s: the store failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc
                )
                return respond(
                    503,
                    P.error(P.ErrorCode.UNAVAILABLE, "The relay's storage is not answering; retry shortly."),
                    {**request.state.cors, "Retry-After": str(UNAVAILABLE_RETRY_S)},
                )
            log.exception("%s %s failed", request.method, request.url.path)
            return respond(
                500, P.error(P.ErrorCode.INTERNAL, "The relay failed to handle this request."), request.state.cors
            )

    return run



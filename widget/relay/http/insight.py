"""What an app's readers did in a period, for its site owner: `autopilot-relay stats` and `GET /api/apps/{id}/stats`.

Computed from what the store keeps (conversations, messages, calls, ratings): how many conversations were started,
messages by role, answers with their thumbs up/down and comments, function and tool calls with their success rate
and p50/p95 times (overall and per name), and failed turns by error code. Never a call's arguments or result, a
message's text, the page context or a conversation id (the reader's capability). The endpoint needs the app's
secret (``Authorization: Bearer <secret>``, as a backend's create does) and is rate limited per address.

Period: a conversation counts when it was created in ``[since, until)``; a message when its ``created_at`` is (or,
without one, its conversation's); a call by when the model made it; a rating by when it was last set.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import secrets
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ... import protocol as P
from ...errors import ConfigError, ProtocolError
from ...protocol import CallState
from ...protocol.messages import (
    AnswerStats,
    CallStats,
    FeedbackComment,
    KindStats,
    StatsResponse,
    StatsTiming,
    TokenCounts,
    TokenStats,
)
from ..storage.sql import SNAPSHOT, Body, fetch, fetchval
from .api import Api
from .edge import endpoint

if TYPE_CHECKING:
    from ..storage.store import Store

#: Comments returned at most (the newest), so an answer stays small whatever the period.
MAX_COMMENTS = 200
#: Call kinds reported (relay tools are ``tool`` calls too).
CALL_KINDS = (P.Kind.FUNCTION, P.Kind.TOOL)


def parse_time(text: str, what: str) -> float:
    """Seconds since the epoch from epoch seconds or an ISO 8601 date/time (UTC when no zone is given)."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(
                f"{what} must be seconds since the epoch or an ISO 8601 date/time, not {text!r}"
            ) from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.timestamp()
    if not math.isfinite(value):
        raise ConfigError(f"{what} must be a finite number of seconds")
    return value


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank ``q`` percentile (0-100) of ``values``; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return round(ordered[rank - 1], 3)


def _timing(values: list[float]) -> StatsTiming:
    return {"p50_ms": percentile(values, 50), "p95_ms": percentile(values, 95)}


def _call_stats(rows: list[tuple[bool, float | None, float | None]]) -> CallStats:
    ok = sum(1 for r in rows if r[0])
    return {
        "calls": len(rows),
        "succeeded": ok,
        "failed": len(rows) - ok,
        "success_rate": round(ok / len(rows), 4) if rows else None,
        "total_ms": _timing([r[1] for r in rows if r[1] is not None]),
        "duration_ms": _timing([r[2] for r in rows if r[2] is not None]),
    }


def _kind_stats(rows: Iterable[tuple[str, bool, float | None, float | None]]) -> KindStats:
    by_name: dict[str, list[tuple[bool, float | None, float | None]]] = {}
    every: list[tuple[bool, float | None, float | None]] = []
    for name, ok, total, handler in rows:
        by_name.setdefault(name, []).append((ok, total, handler))
        every.append((ok, total, handler))
    out = cast(KindStats, dict(_call_stats(every)))
    out["by_name"] = {name: _call_stats(r) for name, r in sorted(by_name.items())}
    return out


def _counts() -> TokenCounts:
    return {"rounds": 0, "input_tokens": 0, "output_tokens": 0, "cached_input_tokens": 0, "reasoning_tokens": 0}


def _token_stats(rows: Iterable[tuple[Any, ...]]) -> TokenStats:
    """The ``usage`` rows summed, overall and per model."""
    total, by_model = _counts(), dict[str, TokenCounts]()
    for model, inp, out, cached, reasoning in rows:
        for counts in (total, by_model.setdefault(str(model), _counts())):
            counts["rounds"] += 1
            counts["input_tokens"] += int(inp or 0)
            counts["output_tokens"] += int(out or 0)
            counts["cached_input_tokens"] += int(cached or 0)
            counts["reasoning_tokens"] += int(reasoning or 0)
    return {**total, "by_model": dict(sorted(by_model.items()))}


async def app_stats(store: Store, app_id: str, since: float | None = None, until: float | None = None) -> StatsResponse:
    """An app's figures for ``[since, until)`` (see the module doc); ``until`` defaults to now."""
    end = time.time() if until is None else until
    start = float("-inf") if since is None else since
    lo = -1e300 if since is None else since  # SQL needs a number

    def go() -> Body[tuple[Any, ...]]:
        convs = yield fetchval(
            "SELECT COUNT(*) FROM conversations WHERE app_id = ? AND created_at >= ? AND created_at < ?",
            app_id,
            lo,
            end,
        )
        # a message written in the period belongs to a conversation updated since its start
        messages = yield fetch(
            "SELECT m.data, c.created_at FROM messages m JOIN conversations c ON c.id = m.conversation_id"
            " WHERE c.app_id = ? AND c.updated_at >= ? AND c.created_at < ?",
            app_id,
            lo,
            end,
        )
        calls = yield fetch(
            "SELECT k.kind, k.name, k.status, k.error, k.total_ms, k.duration_ms FROM calls k"
            " JOIN conversations c ON c.id = k.conversation_id"
            " WHERE c.app_id = ? AND k.created_at >= ? AND k.created_at < ?",
            app_id,
            lo,
            end,
        )
        ratings = yield fetch(
            "SELECT f.rating, f.comment, f.updated_at FROM feedback f JOIN conversations c"
            " ON c.id = f.conversation_id WHERE c.app_id = ? AND f.updated_at >= ? AND f.updated_at < ?"
            " ORDER BY f.updated_at",
            app_id,
            lo,
            end,
        )
        usage = yield fetch(
            "SELECT u.model, u.input_tokens, u.output_tokens, u.cached_input_tokens, u.reasoning_tokens FROM usage u"
            " JOIN conversations c ON c.id = u.conversation_id"
            " WHERE c.app_id = ? AND u.created_at >= ? AND u.created_at < ?",
            app_id,
            lo,
            end,
        )
        return convs, messages, calls, ratings, usage

    convs, messages, calls, ratings, usage = await store.perform(go, SNAPSHOT)

    by_role: dict[str, int] = {}
    errors: dict[str, int] = {}
    for data, conv_created in messages:
        m = json.loads(data)
        at = m.get("created_at")
        at = float(at) if isinstance(at, (int, float)) else float(conv_created)
        if not start <= at < end:
            continue
        role = str(m.get("role"))
        by_role[role] = by_role.get(role, 0) + 1
        if role == P.Role.ERROR:
            code = str(m.get("code") or "unknown")
            errors[code] = errors.get(code, 0) + 1

    per_kind: dict[str, list[tuple[str, bool, float | None, float | None]]] = {k: [] for k in CALL_KINDS}
    for kind, name, status, error, total, handler in calls:
        if status == CallState.PENDING:  # not finished yet: neither a success nor a failure
            continue
        ok = status == CallState.ANSWERED and error is None
        per_kind.setdefault(str(kind), []).append(
            (
                str(name),
                ok,
                float(total) if total is not None else None,
                float(handler) if handler is not None else None,
            )
        )

    up = sum(1 for r in ratings if r[0] == P.FeedbackRating.UP)
    comments = [
        FeedbackComment(rating=P.FeedbackRating(r[0]), comment=r[1], updated_at=float(r[2])) for r in ratings if r[1]
    ][-MAX_COMMENTS:]
    answers: AnswerStats = {
        "answers": by_role.get(P.Role.ASSISTANT, 0),
        "thumbs_up": up,
        "thumbs_down": sum(1 for r in ratings if r[0] == P.FeedbackRating.DOWN),
        "comments": comments,
    }
    return {
        "ok": True,
        "app_id": app_id,
        "period": {"since": since, "until": end},
        "conversations": int(convs or 0),
        "messages": dict(sorted(by_role.items())),
        "answers": answers,
        "calls": {kind: _kind_stats(rows) for kind, rows in sorted(per_kind.items())},
        "model_errors": dict(sorted(errors.items())),
        "tokens": _token_stats(usage),
    }


# ------------------------------------------------------------------------------------------------- HTTP
def _period(request: Request) -> tuple[float | None, float | None]:
    try:
        since = request.query_params.get("since")
        until = request.query_params.get("until")
        return (parse_time(since, "since") if since else None, parse_time(until, "until") if until else None)
    except ConfigError as exc:
        raise ProtocolError(P.ErrorCode.BAD_REQUEST, str(exc)) from None


async def stats(api: Api, request: Request) -> Response:
    """``GET /api/apps/{app_id}/stats?since=&until=`` with the app's secret (see the module doc)."""
    api.limit(api.get_limiter, api.client_address(request), "requests")
    app_id = request.path_params["app_id"]
    api.require_app_secret(request, app_id, "read this app's stats")
    since, until = _period(request)
    if since is not None and until is not None and since >= until:
        raise ProtocolError(P.ErrorCode.BAD_REQUEST, "since must be before until.")
    body = await app_stats(api.store, app_id, since, until)
    return api.respond(200, body, {"Cache-Control": "no-store"})


def install(api: Api) -> None:
    """The stats route."""
    run = endpoint(stats)

    async def get(request: Request) -> Response:
        return await run(api, request)

    api.add_routes([Route(P.HTTP_STATS.replace("{app_id}", "{app_id:str}"), get, methods=["GET"])])


# ------------------------------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    """``autopilot-relay stats``'s options (the store options are the relay's)."""
    p = argparse.ArgumentParser(
        prog="autopilot-relay stats",
        description="Print what an app's readers did in a period, as JSON (no arguments, "
        "no page context, no conversation ids).",
    )
    p.add_argument(
        "--app",
        dest="apps",
        action="append",
        default=[],
        metavar="ID",
        help="the app (repeatable; default: every app with conversations in the store)",
    )
    p.add_argument("--since", help="start of the period: epoch seconds or an ISO 8601 date/time (default: the start)")
    p.add_argument("--until", help="end of the period, excluded (default: now)")
    p.add_argument("--days", type=float, help="the last DAYS days (instead of --since)")
    p.add_argument("--config", help="TOML config file (env AUTOPILOT_CONFIG)")
    p.add_argument("--db", dest="db_path", help="SQLite database path (env AUTOPILOT_DB)")
    p.add_argument("--database-url", dest="database_url", help="PostgreSQL URL (env AUTOPILOT_DATABASE_URL)")
    return p


async def app_ids(store: Store) -> list[str]:
    """The apps that have conversations in the store."""

    def go() -> Body[list[str]]:
        rows = yield fetch("SELECT DISTINCT app_id FROM conversations ORDER BY app_id")
        return [r[0] for r in rows]

    return await store.perform(go, SNAPSHOT)


async def _collect(store: Store, apps: list[str], since: float | None, until: float | None) -> list[StatsResponse]:
    await store.open()
    try:
        return [await app_stats(store, a, since, until) for a in (apps or await app_ids(store))]
    finally:
        await store.close()


def main(argv: list[str] | None = None) -> int:
    """Run ``autopilot-relay stats``: one JSON object per app, in a list."""
    args = build_parser().parse_args(argv)
    from ..config import load_config
    from ..storage import make_store

    try:
        # The stats read the store only: no join token is issued or checked, so the shared-secret rule of a
        # PostgreSQL deployment does not apply here.
        config = load_config(
            args.config, db_path=args.db_path, database_url=args.database_url, secret=secrets.token_urlsafe(24)
        )
        until = parse_time(args.until, "--until") if args.until else None
        if args.days is not None and args.since:
            raise ConfigError("give --since or --days, not both")
        if args.days is not None:
            if not (math.isfinite(args.days) and args.days > 0):
                raise ConfigError("--days must be a positive number")
            since: float | None = (until if until is not None else time.time()) - args.days * 86400
        else:
            since = parse_time(args.since, "--since") if args.since else None
    except ConfigError as exc:
        print(f"autopilot relay stats: {exc}", file=sys.stderr)
        return 2
    out = asyncio.run(_collect(make_store(config.database_url, config.db_path), args.apps, since, until))
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0

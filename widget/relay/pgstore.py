"""The PostgreSQL store (asyncpg): the same ``Store`` interface and semantics as ``SQLiteStore``, for
several relay processes sharing one database (docs/deployment.md).

- Schema migrations: ``MIGRATIONS`` is a list of ``(version, sql)``; ``schema_migrations`` records the
  versions applied. ``open()`` applies the missing ones in order, each in its own transaction, under an
  advisory lock so processes starting together do not race.
- Atomicity: every write is one transaction. ``append_event`` takes the next seq with ``UPDATE
  conversations SET seq = seq + 1 ... RETURNING seq`` in the same transaction as the event insert (the
  row lock orders concurrent writers of one conversation across processes), and stores the messages,
  the ack and the offer with it. Conditional transitions (``claim_status``, ``require_status``) and the
  state read-modify-write (``update_state``: ``SELECT ... FOR UPDATE``) are race-free across processes.
- Signals: ``pg_notify`` on one channel; ``finish_call`` notifies inside its transaction, so the
  notification is delivered exactly when the answer is visible. A dedicated listening connection
  reconnects with backoff and, once back, tells the listeners ``{"t": "resync"}`` (what was notified
  meanwhile may be lost; waiters re-read the store).
- Reconnects: the pool reconnects lazily; a statement that fails on a broken connection before the
  commit is retried with backoff (up to ``RETRY_S``); a failure during the commit itself is raised
  (its outcome is unknown).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
import uuid
from typing import Any, Awaitable, Callable, Iterable, TypeVar

from .storage import (
    CALL_ANSWERED,
    CALL_CANCELLED,
    CALL_PENDING,
    IDLE,
    INSTANCE_TTL_S,
    PROMPT_TAKEN,
    UNCOMMITTED_EVENTS,
    _CALL_COLUMNS,
    _CONV_COLUMNS,
    _TABLES,
    _UPDATABLE,
    Ack,
    NotActive,
    StatusConflict,
    Store,
    _clean_text,
    _dumps,
    refused_excerpt,
)

try:  # an optional dependency: pip install autopilot-widget[scale]
    import asyncpg
except ImportError:  # pragma: no cover - depends on the install
    asyncpg = None  # type: ignore[assignment]

log = logging.getLogger("widget.relay")
T = TypeVar("T")

#: How long a statement keeps retrying while the database cannot be reached.
RETRY_S = 10.0
CHANNEL = "autopilot_relay"

MIGRATIONS: list[tuple[int, str]] = [
    (1, """
CREATE TABLE conversations (
    id TEXT PRIMARY KEY,
    app_id TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    seq BIGINT NOT NULL DEFAULT 0,
    msg_seq BIGINT NOT NULL DEFAULT 0,
    turn_id TEXT,
    iteration INTEGER NOT NULL DEFAULT 0,
    runner TEXT,
    active_sid TEXT,
    state TEXT NOT NULL
);
CREATE INDEX conversations_updated ON conversations(updated_at);
CREATE TABLE messages (
    pos BIGSERIAL PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX messages_conv ON messages(conversation_id, pos);
CREATE TABLE events (
    conversation_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    name TEXT NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (conversation_id, seq)
);
CREATE TABLE idempotency (
    conversation_id TEXT NOT NULL,
    key TEXT NOT NULL,
    ack TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (conversation_id, key)
);
CREATE TABLE calls (
    conversation_id TEXT NOT NULL,
    id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    arguments TEXT NOT NULL,
    seq BIGINT NOT NULL DEFAULT 0,
    status TEXT NOT NULL,
    result TEXT,
    error TEXT,
    handler_ms DOUBLE PRECISION,
    total_ms DOUBLE PRECISION,
    created_at DOUBLE PRECISION NOT NULL,
    finished_at DOUBLE PRECISION,
    dispatched_to TEXT,
    n BIGSERIAL,
    PRIMARY KEY (conversation_id, id)
);
CREATE TABLE refused (
    n BIGSERIAL PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    reason TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX refused_conv ON refused(conversation_id);
CREATE TABLE offers (
    conversation_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    actions TEXT NOT NULL,
    note TEXT NOT NULL,
    PRIMARY KEY (conversation_id, message_id)
);
CREATE TABLE prompts (
    conversation_id TEXT NOT NULL,
    id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    prompt TEXT NOT NULL,
    status TEXT NOT NULL,
    answer TEXT,
    pos INTEGER NOT NULL,
    n BIGSERIAL,
    PRIMARY KEY (conversation_id, id)
);
CREATE TABLE members (
    sid TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    instance TEXT NOT NULL,
    joined_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX members_conv ON members(conversation_id);
CREATE INDEX members_instance ON members(instance);
CREATE TABLE instances (
    id TEXT PRIMARY KEY,
    heartbeat_at DOUBLE PRECISION NOT NULL
);
"""),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]
_MIGRATION_LOCK = 0x6175746F  # pg_advisory_xact_lock key while migrating ("auto")


def _conn_errors() -> tuple[type[BaseException], ...]:
    return (OSError, asyncio.TimeoutError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError,
            asyncpg.CannotConnectNowError)


def _backoff(first: float = 0.05, cap: float = 2.0) -> Iterable[float]:
    delay = first
    while True:
        yield delay * (0.5 + random.random())
        delay = min(cap, delay * 2)


class _CommitFailed(Exception):
    pass


class PostgresStore(Store):
    """``PostgresStore("postgresql://user@host:port/db")``; ``open()`` connects and migrates."""

    shared = True

    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 10, channel: str = CHANNEL) -> None:
        if asyncpg is None:
            from ..errors import ConfigError

            raise ConfigError("database_url needs the 'asyncpg' package (pip install autopilot-widget[scale])")
        super().__init__()
        self.dsn = dsn
        self.channel = channel
        self._sizes = (min_size, max_size)
        self._pool: Any = None
        self._listen_task: asyncio.Task[None] | None = None
        self._listen_con: Any = None
        self._closing = False
        self.origin = uuid.uuid4().hex
        #: Whether the listening connection is up (``/readyz``).
        self.listening = False

    # -- plumbing -----------------------------------------------------------------------------
    async def open(self) -> None:
        if self._pool is not None:
            return
        self._closing = False
        deadline = time.monotonic() + RETRY_S
        for delay in _backoff():
            try:
                self._pool = await asyncpg.create_pool(self.dsn, min_size=self._sizes[0], max_size=self._sizes[1],
                                                       command_timeout=30)
                break
            except _conn_errors() as exc:
                if time.monotonic() + delay > deadline:
                    raise
                log.warning("postgres: cannot connect (%s); retrying", exc)
                await asyncio.sleep(delay)
        await self.migrate()
        ready = asyncio.get_running_loop().create_future()
        self._listen_task = asyncio.ensure_future(self._listen_forever(ready))
        await asyncio.wait([ready, self._listen_task], timeout=RETRY_S, return_when=asyncio.FIRST_COMPLETED)

    async def close(self) -> None:
        self._closing = True
        if self._listen_task is not None:
            self._listen_task.cancel()
            await asyncio.gather(self._listen_task, return_exceptions=True)
            self._listen_task = None
        if self._listen_con is not None:
            try:
                await self._listen_con.close(timeout=2)
            except Exception:  # noqa: BLE001
                self._listen_con.terminate()
            self._listen_con = None
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                await asyncio.wait_for(pool.close(), 5)
            except Exception:  # noqa: BLE001
                pool.terminate()

    async def migrate(self) -> int:
        """Apply the migrations this database lacks; the version it is at."""
        async def go(con: Any) -> int:
            await con.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
            await con.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)")
            done = {r[0] for r in await con.fetch("SELECT version FROM schema_migrations")}
            for version, sql in MIGRATIONS:
                if version not in done:
                    await con.execute(sql)
                    await con.execute("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)", version, time.time())
                    log.info("postgres: applied schema migration %d", version)
            return max(done | {v for v, _ in MIGRATIONS})

        return await self._tx(go)

    async def _acquire(self) -> Any:
        if self._pool is None:
            raise RuntimeError("store is not open")
        return await self._pool.acquire()

    async def _release(self, con: Any) -> None:
        if self._pool is not None:
            try:
                await self._pool.release(con)
            except Exception:  # noqa: BLE001 - a broken connection is dropped by the pool
                pass

    async def _tx(self, fn: Callable[[Any], Awaitable[T]], tx: bool = True, isolation: str | None = None,
                  idempotent: bool = True) -> T:
        """``fn(con)`` in one transaction (``tx``; else as is: one statement, a read); retried (with
        backoff, up to ``RETRY_S``) while the failure is a lost connection before the commit (a single
        statement that is not ``idempotent``: only while no connection could be had)."""
        deadline = time.monotonic() + RETRY_S
        errors = _conn_errors()
        for delay in _backoff():
            try:
                con = await self._acquire()
            except errors as exc:
                if time.monotonic() + delay > deadline:
                    raise
                log.warning("postgres: cannot connect (%s); retrying", exc)
                await asyncio.sleep(delay)
                continue
            try:
                if not tx:
                    if idempotent:
                        return await fn(con)
                    try:
                        return await fn(con)
                    except errors as exc:
                        raise _CommitFailed(str(exc)) from exc
                tr = con.transaction(isolation=isolation) if isolation else con.transaction()
                await tr.start()
                try:
                    out = await fn(con)
                except BaseException:
                    try:
                        await tr.rollback()
                    except Exception:  # noqa: BLE001
                        pass
                    raise
                try:
                    await tr.commit()
                except errors as exc:
                    raise _CommitFailed(str(exc)) from exc
                return out
            except _CommitFailed as exc:
                raise ConnectionError(f"postgres: the commit's outcome is unknown: {exc}") from exc.__cause__
            except errors as exc:
                if time.monotonic() + delay > deadline:
                    raise
                log.warning("postgres: statement failed on a lost connection (%s); retrying", exc)
                await asyncio.sleep(delay)
            finally:
                await self._release(con)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _q(self, fn: Callable[[Any], Awaitable[T]]) -> T:
        """A read of one statement (no transaction needed); retried like a write."""
        return await self._tx(fn, tx=False)

    async def ping(self) -> None:
        if self._pool is None:
            raise RuntimeError("store is not open")
        con = await asyncio.wait_for(self._pool.acquire(), 2)
        try:
            await con.fetchval("SELECT 1", timeout=2)
        finally:
            await self._release(con)

    # -- signals ------------------------------------------------------------------------------
    async def _listen_forever(self, ready: "asyncio.Future[None]") -> None:
        delays = iter(_backoff(0.1, 5.0))
        first = True
        while not self._closing:
            try:
                con = await asyncpg.connect(self.dsn, timeout=5)
                self._listen_con = con
                lost = asyncio.get_running_loop().create_future()
                con.add_termination_listener(lambda _c: lost.done() or lost.set_result(None))
                await con.add_listener(self.channel, self._on_notify)
                self.listening = True
                delays = iter(_backoff(0.1, 5.0))
                if not ready.done():
                    ready.set_result(None)
                if not first:
                    log.info("postgres: listening again")
                    self._fire({"t": "resync"})
                first = False
                while not lost.done():  # a dead peer does not always end the connection at once
                    try:
                        await asyncio.wait_for(asyncio.shield(lost), 2.0)
                    except asyncio.TimeoutError:
                        try:
                            await con.fetchval("SELECT 1", timeout=2)
                        except Exception:  # noqa: BLE001
                            break
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001
                if not self._closing:
                    log.warning("postgres: listening connection failed (%s); retrying", exc)
            self.listening = False
            con, self._listen_con = self._listen_con, None
            if con is not None:
                con.terminate()
            if self._closing:
                return
            await asyncio.sleep(next(delays))

    def _on_notify(self, _con: Any, _pid: int, _channel: str, payload: str) -> None:
        try:
            message = json.loads(payload)
        except ValueError:
            return
        if not isinstance(message, dict) or message.pop("o", None) == self.origin:
            return  # ours: already delivered locally
        self._fire(message)

    async def signal(self, message: dict[str, Any]) -> None:
        self._fire(message)
        text = _dumps({**message, "o": self.origin})
        await self._tx(lambda con: con.execute("SELECT pg_notify($1, $2)", self.channel, text))

    # -- conversations --------------------------------------------------------------------------
    _CONV_SQL = f"SELECT {', '.join(_CONV_COLUMNS)} FROM conversations WHERE id = $1"

    @classmethod
    async def _conv(cls, con: Any, conversation_id: str) -> dict[str, Any] | None:
        row = await con.fetchrow(cls._CONV_SQL, conversation_id)
        return dict(zip(_CONV_COLUMNS, row)) if row else None

    async def create_conversation(self, conversation_id: str, app_id: str, state: dict[str, Any]) -> dict[str, Any]:
        now = time.time()

        async def go(con: Any) -> dict[str, Any]:
            await con.execute(
                "INSERT INTO conversations (id, app_id, status, created_at, updated_at, state) VALUES ($1,$2,$3,$4,$5,$6)",
                conversation_id, app_id, IDLE, now, now, _dumps(state))
            conv = await self._conv(con, conversation_id)
            assert conv is not None
            return conv

        return await self._tx(go)

    async def get_conversation(self, conversation_id: str) -> dict[str, Any] | None:
        return await self._q(lambda con: self._conv(con, conversation_id))

    async def update_conversation(self, conversation_id: str, **fields: Any) -> None:
        bad = set(fields) - _UPDATABLE
        if bad:
            raise ValueError(f"cannot update {bad}")
        sets = "".join(f", {k} = ${i + 3}" for i, k in enumerate(fields))
        await self._tx(lambda con: con.execute(f"UPDATE conversations SET updated_at = $1{sets} WHERE id = $2",
                                               time.time(), conversation_id, *fields.values()))

    async def delete_conversation(self, conversation_id: str) -> bool:
        async def go(con: Any) -> bool:
            status = await con.execute("DELETE FROM conversations WHERE id = $1", conversation_id)
            for table in _TABLES:
                await con.execute(f"DELETE FROM {table} WHERE conversation_id = $1", conversation_id)
            return status != "DELETE 0"

        return await self._tx(go)

    async def delete_inactive_before(self, timestamp: float) -> list[str]:
        rows = await self._q(lambda con: con.fetch("SELECT id FROM conversations WHERE updated_at < $1", timestamp))
        ids = [r[0] for r in rows]
        for cid in ids:
            await self.delete_conversation(cid)
        return ids

    async def snapshot(self, conversation_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        async def go(con: Any) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
            conv = await self._conv(con, conversation_id)
            if conv is None:
                return None
            rows = await con.fetch("SELECT data FROM messages WHERE conversation_id = $1 ORDER BY pos", conversation_id)
            return conv, [json.loads(r[0]) for r in rows]

        return await self._tx(go, isolation="repeatable_read")  # one snapshot: msg_seq matches the messages

    async def conversations_brief(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        wanted = list(ids)
        if not wanted:
            return {}
        rows = await self._q(lambda con: con.fetch("SELECT id, seq, status, runner FROM conversations WHERE id = ANY($1::text[])", wanted))
        return {r[0]: {"seq": r[1], "status": r[2], "runner": r[3]} for r in rows}

    # -- events ---------------------------------------------------------------------------------
    async def append_event(
        self,
        conversation_id: str,
        name: str,
        payload: dict[str, Any],
        *,
        messages: Iterable[dict[str, Any]] = (),
        conversation: dict[str, Any] | None = None,
        idempotency: Ack | None = None,
        withdraw: Iterable[str] = (),
        offer: dict[str, Any] | None = None,
        require_status: Iterable[str] | None = None,
    ) -> int:
        msgs = list(messages)
        gone = list(withdraw)
        fields = dict(conversation or {})
        bad = set(fields) - _UPDATABLE
        if bad:
            raise ValueError(f"cannot update {bad}")
        allowed = None if require_status is None else list(require_status)
        committed = name not in UNCOMMITTED_EVENTS
        now = time.time()
        sets = "seq = seq + 1, updated_at = $2" + (", msg_seq = seq + 1" if committed else "")
        sets += "".join(f", {k} = ${i + 3}" for i, k in enumerate(fields))
        sql = f"UPDATE conversations SET {sets} WHERE id = $1 RETURNING seq"

        if not (msgs or gone or fields or idempotency or offer is not None or allowed is not None):
            # The common case (a streamed chunk, a call's end...): one statement, one round trip. The
            # stored payload gets its seq spliced in front (key order aside, the same JSON).
            payload.pop("seq", None)
            body = _dumps(payload)
            rest = "}" if body == "{}" else "," + body[1:]
            seq = await self._tx(lambda con: con.fetchval(
                f"WITH c AS (UPDATE conversations SET {sets} WHERE id = $1 RETURNING seq)"
                " INSERT INTO events (conversation_id, seq, name, payload)"
                " SELECT $1, c.seq, $3, '{\"seq\":' || c.seq || $4 FROM c RETURNING seq",
                conversation_id, now, name, rest), tx=False, idempotent=False)
            if seq is None:
                raise KeyError(conversation_id)
            payload["seq"] = seq
            return seq

        async def go(con: Any) -> int:
            if allowed is not None:
                status = await con.fetchval("SELECT status FROM conversations WHERE id = $1 FOR UPDATE", conversation_id)
                if status is None:
                    raise KeyError(conversation_id)
                if status not in allowed:
                    raise StatusConflict(status)
            seq = await con.fetchval(sql, conversation_id, now, *fields.values())
            if seq is None:
                raise KeyError(conversation_id)
            payload["seq"] = seq
            for m in msgs:
                m["seq"] = seq
            pm = payload.get("message")
            if isinstance(pm, dict) and any(pm.get("id") == m["id"] for m in msgs):
                pm["seq"] = seq
            await con.execute("INSERT INTO events (conversation_id, seq, name, payload) VALUES ($1,$2,$3,$4)",
                              conversation_id, seq, name, _dumps(payload))
            if gone:
                await con.execute("DELETE FROM messages WHERE conversation_id = $1 AND id = ANY($2::text[])", conversation_id, gone)
            if msgs:
                await con.executemany("INSERT INTO messages (conversation_id, id, seq, data) VALUES ($1,$2,$3,$4)",
                                      [(conversation_id, m["id"], seq, _dumps(m)) for m in msgs])
            if idempotency:
                await self._put_ack(con, conversation_id, *idempotency)
            if offer is not None:
                await con.execute(
                    "INSERT INTO offers (conversation_id, message_id, call_id, actions, note) VALUES ($1,$2,$3,$4,$5)"
                    " ON CONFLICT (conversation_id, message_id) DO UPDATE SET call_id = excluded.call_id,"
                    " actions = excluded.actions, note = excluded.note",
                    conversation_id, offer["message_id"], offer["call_id"], _dumps(offer["actions"]), offer["note"])
            return seq

        return await self._tx(go)

    async def events_after(self, conversation_id: str, seq: int) -> list[tuple[int, str, dict[str, Any]]]:
        rows = await self._q(lambda con: con.fetch(
            "SELECT seq, name, payload FROM events WHERE conversation_id = $1 AND seq > $2 ORDER BY seq", conversation_id, seq))
        return [(r[0], r[1], json.loads(r[2])) for r in rows]

    # -- state ----------------------------------------------------------------------------------
    async def get_state(self, conversation_id: str) -> dict[str, Any]:
        text = await self._q(lambda con: con.fetchval("SELECT state FROM conversations WHERE id = $1", conversation_id))
        if text is None:
            raise KeyError(conversation_id)
        return json.loads(text)

    async def save_state(self, conversation_id: str, doc: dict[str, Any], idempotency: Ack | None = None) -> None:
        text = _dumps(doc)
        now = time.time()

        async def go(con: Any) -> None:
            status = await con.execute("UPDATE conversations SET state = $1, updated_at = $2 WHERE id = $3", text, now, conversation_id)
            if status == "UPDATE 0":
                raise KeyError(conversation_id)
            if idempotency:
                await self._put_ack(con, conversation_id, *idempotency)

        await self._tx(go)

    async def update_state(self, conversation_id: str, fn: Callable[[dict[str, Any]], dict[str, Any]],
                           idempotency: Ack, active_sid: str | None = None) -> dict[str, Any] | None:
        key, ack = idempotency
        now = time.time()

        async def go(con: Any) -> dict[str, Any] | None:
            row = await con.fetchrow("SELECT state, active_sid FROM conversations WHERE id = $1 FOR UPDATE", conversation_id)
            if row is None:
                raise KeyError(conversation_id)
            stored = await con.fetchval("SELECT ack FROM idempotency WHERE conversation_id = $1 AND key = $2", conversation_id, key)
            if stored is not None:
                return json.loads(stored)
            if active_sid is not None and row[1] != active_sid:
                raise NotActive(conversation_id)
            new = fn(json.loads(row[0]))
            await con.execute("UPDATE conversations SET state = $1, updated_at = $2 WHERE id = $3", _dumps(new), now, conversation_id)
            await self._put_ack(con, conversation_id, key, ack)
            return None

        return await self._tx(go)

    # -- idempotency --------------------------------------------------------------------------------
    @staticmethod
    async def _put_ack(con: Any, conversation_id: str, key: str, ack: dict[str, Any]) -> None:
        await con.execute(
            "INSERT INTO idempotency (conversation_id, key, ack, created_at) VALUES ($1,$2,$3,$4) ON CONFLICT DO NOTHING",
            conversation_id, key, _dumps(ack), time.time())

    async def get_ack(self, conversation_id: str, key: str) -> dict[str, Any] | None:
        text = await self._q(lambda con: con.fetchval("SELECT ack FROM idempotency WHERE conversation_id = $1 AND key = $2",
                                                      conversation_id, key))
        return json.loads(text) if text is not None else None

    async def put_ack(self, conversation_id: str, key: str, ack: dict[str, Any]) -> None:
        await self._tx(lambda con: self._put_ack(con, conversation_id, key, ack))

    # -- function calls -------------------------------------------------------------------------------
    _CALL_SQL = f"SELECT {', '.join(_CALL_COLUMNS)} FROM calls"

    @staticmethod
    def _call_row(row: Any) -> dict[str, Any]:
        d = dict(zip(_CALL_COLUMNS, row))
        d["arguments"] = json.loads(d["arguments"])
        d["result"] = json.loads(d["result"]) if d["result"] is not None else None
        return d

    async def add_calls(self, conversation_id: str, turn_id: str, calls: list[dict[str, Any]]) -> None:
        now = time.time()
        rows = []
        for c in calls:
            status = c.get("status", CALL_PENDING)
            result = c.get("result")
            rows.append((conversation_id, c["id"], turn_id, c["name"], c.get("kind", "function"), _dumps(c["arguments"]),
                         c.get("seq", 0), status, _dumps(result) if result is not None else None, c.get("error"),
                         c.get("handler_ms"), c.get("total_ms"), now, None if status == CALL_PENDING else now))
        await self._tx(lambda con: con.executemany(
            "INSERT INTO calls (conversation_id, id, turn_id, name, kind, arguments, seq, status, result, error,"
            " handler_ms, total_ms, created_at, finished_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14)", rows))

    async def set_call_seq(self, conversation_id: str, call_id: str, seq: int) -> None:
        await self._tx(lambda con: con.execute("UPDATE calls SET seq = $1 WHERE conversation_id = $2 AND id = $3",
                                               seq, conversation_id, call_id))

    async def get_call(self, conversation_id: str, call_id: str) -> dict[str, Any] | None:
        row = await self._q(lambda con: con.fetchrow(f"{self._CALL_SQL} WHERE conversation_id = $1 AND id = $2", conversation_id, call_id))
        return self._call_row(row) if row else None

    async def pending_calls(self, conversation_id: str) -> list[dict[str, Any]]:
        rows = await self._q(lambda con: con.fetch(f"{self._CALL_SQL} WHERE conversation_id = $1 AND status = $2 ORDER BY seq",
                                                   conversation_id, CALL_PENDING))
        return [self._call_row(r) for r in rows]

    async def turn_calls(self, conversation_id: str, turn_id: str) -> list[dict[str, Any]]:
        rows = await self._q(lambda con: con.fetch(f"{self._CALL_SQL} WHERE conversation_id = $1 AND turn_id = $2 ORDER BY created_at, seq, n",
                                                   conversation_id, turn_id))
        return [self._call_row(r) for r in rows]

    async def finish_call(
        self,
        conversation_id: str,
        call_id: str,
        status: str,
        *,
        result: Any = None,
        error: str | None = None,
        handler_ms: float | None = None,
        total_ms: float | None = None,
        idempotency: Ack | None = None,
    ) -> bool:
        now = time.time()
        note = _dumps({"t": "call", "c": conversation_id, "id": call_id, "o": self.origin})

        async def go(con: Any) -> bool:
            done = await con.execute(
                "UPDATE calls SET status = $1, result = $2, error = $3, handler_ms = $4, total_ms = $5, finished_at = $6"
                " WHERE conversation_id = $7 AND id = $8 AND status = $9",
                status, _dumps(result) if result is not None else None, error, handler_ms, total_ms, now,
                conversation_id, call_id, CALL_PENDING)
            if done == "UPDATE 0":
                return False
            if idempotency:
                await self._put_ack(con, conversation_id, *idempotency)
            await con.execute("SELECT pg_notify($1, $2)", self.channel, note)  # delivered on commit
            return True

        ok = await self._tx(go)
        if ok:
            self._fire({"t": "call", "c": conversation_id, "id": call_id})
        return ok

    async def record_refused(self, conversation_id: str, kind: str, payload: Any, reason: str) -> None:
        await self._tx(lambda con: con.execute(
            "INSERT INTO refused (conversation_id, kind, payload, reason, created_at) VALUES ($1,$2,$3,$4,$5)",
            conversation_id, kind, _dumps(refused_excerpt(payload)), _clean_text(reason, 200), time.time()))

    async def refused(self, conversation_id: str) -> list[dict[str, Any]]:
        rows = await self._q(lambda con: con.fetch(
            "SELECT kind, payload, reason, created_at FROM refused WHERE conversation_id = $1 ORDER BY n", conversation_id))
        return [{"kind": r[0], "payload": json.loads(r[1]), "reason": r[2], "created_at": r[3]} for r in rows]

    # -- offered actions ------------------------------------------------------------------------------
    @staticmethod
    def _offer_row(row: Any) -> dict[str, Any]:
        return {"message_id": row[0], "call_id": row[1], "actions": json.loads(row[2]), "note": row[3]}

    async def get_offers(self, conversation_id: str) -> dict[str, dict[str, Any]]:
        rows = await self._q(lambda con: con.fetch(
            "SELECT message_id, call_id, actions, note FROM offers WHERE conversation_id = $1", conversation_id))
        return {r[0]: self._offer_row(r) for r in rows}

    async def get_offer(self, conversation_id: str, message_id: str) -> dict[str, Any] | None:
        row = await self._q(lambda con: con.fetchrow(
            "SELECT o.message_id, o.call_id, o.actions, o.note FROM offers o WHERE o.conversation_id = $1 AND o.message_id = $2"
            " AND EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = o.conversation_id AND m.id = o.message_id)",
            conversation_id, message_id))
        return self._offer_row(row) if row else None

    async def action_succeeded(self, conversation_id: str, action_id: str) -> bool:
        row = await self._q(lambda con: con.fetchval(
            "SELECT 1 FROM messages WHERE conversation_id = $1 AND (data::jsonb ->> 'role') = 'action'"
            " AND (data::jsonb ->> 'action_id') = $2 AND (data::jsonb -> 'ok') = 'true'::jsonb LIMIT 1",
            conversation_id, action_id))
        return row is not None

    # -- ask-user prompts -----------------------------------------------------------------------------
    async def add_prompts(self, conversation_id: str, turn_id: str, prompts: list[dict[str, Any]]) -> None:
        await self._tx(lambda con: con.executemany(
            "INSERT INTO prompts (conversation_id, id, turn_id, prompt, status, pos) VALUES ($1,$2,$3,$4,$5,$6)",
            [(conversation_id, p["id"], turn_id, _dumps(p), CALL_PENDING, i) for i, p in enumerate(prompts)]))

    async def pending_prompts(self, conversation_id: str) -> list[dict[str, Any]]:
        rows = await self._q(lambda con: con.fetch(
            "SELECT prompt FROM prompts WHERE conversation_id = $1 AND status = $2 ORDER BY n", conversation_id, CALL_PENDING))
        return [json.loads(r[0]) for r in rows]

    async def prompt_statuses(self, conversation_id: str, prompt_ids: Iterable[str]) -> dict[str, str]:
        ids = list(prompt_ids)
        rows = await self._q(lambda con: con.fetch(
            "SELECT id, status FROM prompts WHERE conversation_id = $1 AND id = ANY($2::text[])", conversation_id, ids))
        return {r[0]: r[1] for r in rows}

    async def answer_prompts(self, conversation_id: str, answers: list[tuple[str, Any]], idempotency: Ack | None = None) -> bool:
        class _NotPending(Exception):
            pass

        async def go(con: Any) -> None:
            for pid, answer in answers:
                status = await con.execute(
                    "UPDATE prompts SET status = $1, answer = $2 WHERE conversation_id = $3 AND id = $4 AND status = $5",
                    CALL_ANSWERED, _dumps(answer), conversation_id, pid, CALL_PENDING)
                if status == "UPDATE 0":
                    raise _NotPending
            if idempotency:
                await self._put_ack(con, conversation_id, *idempotency)

        try:
            await self._tx(go)
        except _NotPending:
            return False
        return True

    async def take_answers(self, conversation_id: str) -> list[tuple[dict[str, Any], Any]]:
        async def go(con: Any) -> list[tuple[dict[str, Any], Any]]:
            rows = await con.fetch(
                "UPDATE prompts SET status = $1 WHERE conversation_id = $2 AND status = $3 RETURNING prompt, answer, n",
                PROMPT_TAKEN, conversation_id, CALL_ANSWERED)
            return [(json.loads(p), json.loads(a)) for p, a, _n in sorted(rows, key=lambda r: r[2])]

        return await self._tx(go)

    async def cancel_prompts(self, conversation_id: str) -> int:
        status = await self._tx(lambda con: con.execute(
            "UPDATE prompts SET status = $1 WHERE conversation_id = $2 AND status = $3", CALL_CANCELLED, conversation_id, CALL_PENDING))
        return int(status.split()[-1])

    # -- conditional writes -------------------------------------------------------------------------
    async def claim_status(self, conversation_id: str, expected: Iterable[str], *, runner_was: Any = ...,
                           **fields: Any) -> bool:
        bad = set(fields) - _UPDATABLE
        if bad:
            raise ValueError(f"cannot update {bad}")
        args: list[Any] = [time.time(), conversation_id, list(expected), *fields.values()]
        sets = "".join(f", {k} = ${i + 4}" for i, k in enumerate(fields))
        where = "id = $2 AND status = ANY($3::text[])"
        if runner_was is not ...:
            args.append(runner_was)
            where += f" AND runner IS NOT DISTINCT FROM ${len(args)}"
        status = await self._tx(lambda con: con.execute(f"UPDATE conversations SET updated_at = $1{sets} WHERE {where}", *args))
        return status != "UPDATE 0"

    # -- presence -------------------------------------------------------------------------------------
    async def heartbeat(self, instance: str) -> None:
        await self._tx(lambda con: con.execute(
            "INSERT INTO instances (id, heartbeat_at) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at",
            instance, time.time()))

    async def forget_instance(self, instance: str) -> None:
        async def go(con: Any) -> None:
            await con.execute("UPDATE conversations SET active_sid = NULL WHERE active_sid IN (SELECT sid FROM members WHERE instance = $1)", instance)
            await con.execute("DELETE FROM members WHERE instance = $1", instance)
            await con.execute("DELETE FROM instances WHERE id = $1", instance)

        await self._tx(go)

    async def instance_alive(self, instance: str) -> bool:
        since = time.time() - INSTANCE_TTL_S
        return bool(await self._q(lambda con: con.fetchval(
            "SELECT 1 FROM instances WHERE id = $1 AND heartbeat_at > $2", instance, since)))

    async def add_member(self, conversation_id: str, sid: str, instance: str) -> None:
        await self._tx(lambda con: con.execute(
            "INSERT INTO members (sid, conversation_id, instance, joined_at) VALUES ($1,$2,$3,$4)"
            " ON CONFLICT (sid) DO UPDATE SET conversation_id = excluded.conversation_id, instance = excluded.instance,"
            " joined_at = excluded.joined_at", sid, conversation_id, instance, time.time()))

    async def remove_member(self, sid: str) -> None:
        async def go(con: Any) -> None:
            await con.execute("DELETE FROM members WHERE sid = $1", sid)
            await con.execute("UPDATE conversations SET active_sid = NULL WHERE active_sid = $1", sid)

        await self._tx(go)

    async def set_active(self, conversation_id: str, sid: str) -> str | None:
        async def go(con: Any) -> str | None:
            row = await con.fetchrow("SELECT active_sid FROM conversations WHERE id = $1 FOR UPDATE", conversation_id)
            if row is None:
                raise KeyError(conversation_id)
            await con.execute("UPDATE conversations SET active_sid = $1 WHERE id = $2", sid, conversation_id)
            return row[0]

        return await self._tx(go)

    async def claim_call(self, conversation_id: str, call_id: str, sid: str | None = None) -> str | None:
        since = time.time() - INSTANCE_TTL_S

        async def go(con: Any) -> str | None:
            row = await con.fetchrow("SELECT status, dispatched_to FROM calls WHERE conversation_id = $1 AND id = $2 FOR UPDATE",
                                     conversation_id, call_id)
            if row is None or row[0] != CALL_PENDING:
                return None
            owner = row[1]
            want = sid
            if want is None:
                want = await con.fetchval("SELECT active_sid FROM conversations WHERE id = $1", conversation_id)
            if owner is not None and (owner == want or await con.fetchval(
                    "SELECT 1 FROM members m JOIN instances i ON i.id = m.instance WHERE m.sid = $1 AND i.heartbeat_at > $2",
                    owner, since)):
                return owner
            if want is None:
                return None
            await con.execute("UPDATE calls SET dispatched_to = $1 WHERE conversation_id = $2 AND id = $3", want, conversation_id, call_id)
            return want

        return await self._tx(go)

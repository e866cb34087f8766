"""The PostgreSQL store (asyncpg): the same ``Store`` interface and semantics as ``SQLiteStore``, for
several relay processes sharing one database (docs/deployment.md).

- Shared logic: the operations are ``Store``'s (storage.py), written once for both engines; this module
  runs their statements (the pool, transactions, retries; ``?`` placeholders numbered as ``$n``), names
  its SQL where it differs (``POSTGRES``) and adds what only it has (NOTIFY, a one-statement append).
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
import functools
import itertools
import json
import logging
import random
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from .base import compact_json
from .sql import READ, SNAPSHOT, WRITE, Body, Dialect, Q, drive_async, execute
from .store import Store

try:  # an optional dependency: pip install autopilot-widget[scale]
    import asyncpg
except ImportError:  # pragma: no cover - depends on the install
    asyncpg = None

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
    (3, """
ALTER TABLE idempotency ADD COLUMN kind TEXT;
CREATE INDEX idempotency_created ON idempotency(created_at);
"""),
    # the reader's thumbs up/down on an answer (widget.relay.http.feedback)
    (4, """
CREATE TABLE feedback (
    conversation_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    turn_id TEXT,
    rating TEXT NOT NULL,
    comment TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (conversation_id, message_id)
);
"""),
    # one name per timing: the handler's time is duration_ms on the wire, in events and here
    (5, """
ALTER TABLE calls RENAME COLUMN handler_ms TO duration_ms;
"""),
    # tokens of each model round (widget.relay.hub.steps), for the stats: counts, never text
    (6, """
CREATE TABLE usage (
    conversation_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    model TEXT NOT NULL,
    input_tokens BIGINT,
    output_tokens BIGINT,
    cached_input_tokens BIGINT,
    reasoning_tokens BIGINT,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX usage_conv ON usage(conversation_id);
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


POSTGRES = Dialect(
    lock=" FOR UPDATE",  # other processes write the same rows: the first to lock one makes the others wait
    order="n",
    call_order="created_at, seq, n",
    same="IS NOT DISTINCT FROM",
    any_of="= ANY(?::text[])",
    array=list,
    put_ack="INSERT INTO idempotency (conversation_id, key, ack, created_at, kind) VALUES (?,?,?,?,?) ON CONFLICT DO "
            "NOTHING",
    put_offer="INSERT INTO offers (conversation_id, message_id, call_id, actions, note) VALUES (?,?,?,?,?)"
              " ON CONFLICT (conversation_id, message_id) DO UPDATE SET call_id = excluded.call_id,"
              " actions = excluded.actions, note = excluded.note",
    put_member="INSERT INTO members (sid, conversation_id, instance, joined_at) VALUES (?,?,?,?)"
               " ON CONFLICT (sid) DO UPDATE SET conversation_id = excluded.conversation_id, instance = "
               "excluded.instance,"
               " joined_at = excluded.joined_at",
    action_ok="SELECT 1 FROM messages WHERE conversation_id = ? AND (data::jsonb ->> 'role') = 'action'"
              " AND (data::jsonb ->> 'action_id') = ? AND (data::jsonb -> 'ok') = 'true'::jsonb LIMIT 1",
)


class PostgresStore(Store):
    """``PostgresStore("postgresql://user@host:port/db")``; ``open()`` connects and migrates."""

    shared = True
    dialect = POSTGRES

    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 10, channel: str = CHANNEL) -> None:
        if asyncpg is None:
            from ...errors import ConfigError

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
            await con.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at "
                              "DOUBLE PRECISION NOT NULL)")
            done = {r[0] for r in await con.fetch("SELECT version FROM schema_migrations")}
            for version, sql in MIGRATIONS:
                if version not in done:
                    await con.execute(sql)
                    await con.execute("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)", version,
                                      time.time())
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
    async def _listen_forever(self, ready: asyncio.Future[None]) -> None:
        delays = iter(_backoff(0.1, 5.0))
        first = True
        while not self._closing:
            try:
                con = await asyncpg.connect(self.dsn, timeout=5)
                self._listen_con = con
                lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

                # Bound to this connection's future: an old connection that terminates late must not end the
                # wait of the one that replaced it.
                def on_lost(_con: Any, lost: asyncio.Future[None] = lost) -> None:
                    if not lost.done():
                        lost.set_result(None)

                con.add_termination_listener(on_lost)
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
                    except TimeoutError:
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

    def _notify(self, message: dict[str, Any]) -> Q:
        return execute("SELECT pg_notify(?, ?)", self.channel, compact_json({**message, "o": self.origin}))

    async def signal(self, message: dict[str, Any]) -> None:
        """Deliver ``message`` here at once and to the other processes by ``NOTIFY``."""
        self._fire(message)
        await self._one(self._notify(message))

    def _notify_sql(self, message: dict[str, Any]) -> tuple[Q, ...]:
        return (self._notify(message),)  # NOTIFY in a transaction is delivered on commit

    # -- running the shared logic ---------------------------------------------------------------
    async def perform(self, body: Callable[[], Body[T]], mode: str = WRITE) -> T:
        """A ``READ`` outside a transaction, a ``WRITE`` in one, a ``SNAPSHOT`` in a repeatable-read one;
        each retried by ``_tx`` with a fresh ``body()``."""
        def run(con: Any) -> Awaitable[T]:
            return drive_async(body(), lambda q: _pg_step(con, q))

        if mode == READ:
            return await self._q(run)
        return await self._tx(run, isolation="repeatable_read" if mode == SNAPSHOT else None)

    async def _append_plain(self, conversation_id: str, name: str, payload: dict[str, Any], committed: bool,
                            now: float) -> int | None:
        # The common case (a streamed chunk, a call's end...): one statement, one round trip. The
        # stored payload gets its seq spliced in front (key order aside, the same JSON).
        payload.pop("seq", None)
        body = compact_json(payload)
        rest = "}" if body == "{}" else "," + body[1:]
        sets = "seq = seq + 1, updated_at = $2" + (", msg_seq = seq + 1" if committed else "")
        seq: int | None = await self._tx(lambda con: con.fetchval(
            f"WITH c AS (UPDATE conversations SET {sets} WHERE id = $1 RETURNING seq)"
            " INSERT INTO events (conversation_id, seq, name, payload)"
            " SELECT $1, c.seq, $3, '{\"seq\":' || c.seq || $4 FROM c RETURNING seq",
            conversation_id, now, name, rest), tx=False, idempotent=False)
        if seq is None:
            raise KeyError(conversation_id)
        payload["seq"] = seq
        return seq


_PLACEHOLDER = re.compile(r"'(?:[^']|'')*'|\?")


@functools.lru_cache(maxsize=256)
def _numbered(sql: str) -> str:
    """The shared statements' ``?`` placeholders as PostgreSQL's ``$1, $2, ...`` (quoted literals kept)."""
    n = itertools.count(1)
    return _PLACEHOLDER.sub(lambda m: f"${next(n)}" if m.group() == "?" else m.group(), sql)


async def _pg_step(con: Any, q: Q) -> Any:
    """One statement of a body, on an asyncpg connection."""
    sql = _numbered(q.sql)
    if q.kind == "execute":
        return int((await con.execute(sql, *q.args)).split()[-1])  # the status tag ends with the row count
    if q.kind == "executemany":
        await con.executemany(sql, q.args[0])
        return None
    if q.kind == "fetch":
        return await con.fetch(sql, *q.args)
    if q.kind == "fetchrow":
        return await con.fetchrow(sql, *q.args)
    return await con.fetchval(sql, *q.args)

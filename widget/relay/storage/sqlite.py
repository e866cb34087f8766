"""The SQLite engine of ``widget.relay.storage.store.Store`` (the embedded default, one relay process).

Every statement runs on one dedicated worker thread (so calls are serialized in submission order and never
block the event loop), in WAL mode with ``synchronous=NORMAL``: a committed write survives a relay crash. The
worker runs the jobs queued at one moment as a batch — consecutive writes share one transaction, each in its
own savepoint — and hands the batch's results back to the event loop in one wake-up after the commit, so
under load the thread hop and the commit are paid once per batch rather than once per statement
(bench/relay.py).
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from .base import compact_json
from .sql import READ, WRITE, Body, Dialect, Q, drive
from .store import Store

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    app_id TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    seq INTEGER NOT NULL DEFAULT 0,
    msg_seq INTEGER NOT NULL DEFAULT 0,
    turn_id TEXT,
    iteration INTEGER NOT NULL DEFAULT 0,
    runner TEXT,
    state TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS conversations_updated ON conversations(updated_at);
CREATE TABLE IF NOT EXISTS messages (
    pos INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_conv ON messages(conversation_id, pos);
CREATE TABLE IF NOT EXISTS events (
    conversation_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    name TEXT NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (conversation_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS idempotency (
    conversation_id TEXT NOT NULL,
    key TEXT NOT NULL,
    ack TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (conversation_id, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS calls (
    conversation_id TEXT NOT NULL,
    id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    arguments TEXT NOT NULL,
    seq INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL,
    result TEXT,
    error TEXT,
    handler_ms REAL,
    total_ms REAL,
    created_at REAL NOT NULL,
    finished_at REAL,
    PRIMARY KEY (conversation_id, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS refused (
    conversation_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    reason TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS offers (
    conversation_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    actions TEXT NOT NULL,
    note TEXT NOT NULL,
    PRIMARY KEY (conversation_id, message_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS prompts (
    conversation_id TEXT NOT NULL,
    id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    prompt TEXT NOT NULL,
    status TEXT NOT NULL,
    answer TEXT,
    pos INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, id)
);
"""

#: Schema migrations after ``_SCHEMA`` (version 1), applied in order; ``PRAGMA user_version`` holds the
#: version a database is at.
_MIGRATIONS: list[tuple[int, str]] = [
    (2, """
ALTER TABLE conversations ADD COLUMN active_sid TEXT;
ALTER TABLE calls ADD COLUMN dispatched_to TEXT;
CREATE TABLE IF NOT EXISTS members (
    sid TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    instance TEXT NOT NULL,
    joined_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS members_conv ON members(conversation_id);
CREATE TABLE IF NOT EXISTS instances (
    id TEXT PRIMARY KEY,
    heartbeat_at REAL NOT NULL
);
"""),
    (3, """
ALTER TABLE idempotency ADD COLUMN kind TEXT;
CREATE INDEX IF NOT EXISTS idempotency_created ON idempotency(created_at);
"""),
    # the reader's thumbs up/down on an answer (widget.relay.http.feedback)
    (4, """
CREATE TABLE IF NOT EXISTS feedback (
    conversation_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    turn_id TEXT,
    rating TEXT NOT NULL,
    comment TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (conversation_id, message_id)
) WITHOUT ROWID;
"""),
    # a conversation's refused writes are capped (record_refused's keep): found by conversation
    (5, """
CREATE INDEX IF NOT EXISTS refused_conv ON refused(conversation_id);
"""),
    # one name per timing: the handler's time is duration_ms on the wire, in events and here
    (6, """
ALTER TABLE calls RENAME COLUMN handler_ms TO duration_ms;
"""),
    # tokens of each model round (widget.relay.hub.steps), for the stats: counts, never text
    (7, """
CREATE TABLE IF NOT EXISTS usage (
    conversation_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    model TEXT NOT NULL,
    input_tokens INTEGER,
    output_tokens INTEGER,
    cached_input_tokens INTEGER,
    reasoning_tokens INTEGER,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_conv ON usage(conversation_id);
"""),
]
SCHEMA_VERSION = _MIGRATIONS[-1][0]



_READ, _WRITE, _CALL = "r", "w", "x"
_Job = tuple[str, Callable[..., Any], tuple[Any, ...], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class _Worker:
    """The thread that owns the connection. Jobs run one at a time in submission order. Whatever is
    queued when the thread gets to it (up to ``MAX_BATCH`` jobs) runs as one batch: the writes share a
    transaction (each job in a SAVEPOINT, so a failing write undoes only itself) committed at the end
    of the batch, and the results go back to the event loop in one ``call_soon_threadsafe`` after the
    commit — a write's future resolves only once it is committed. Reads and calls in a batch commit the
    open transaction first."""

    MAX_BATCH = 64

    def __init__(self, db: Callable[[], sqlite3.Connection]) -> None:
        self._db = db
        self._q: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, name="relay-sqlite", daemon=True)
        self._thread.start()

    def submit(self, kind: str, fn: Callable[..., Any], args: tuple[Any, ...] = ()) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._q.put((kind, fn, args, loop, fut))
        return fut

    def stop(self) -> None:
        self._q.put(None)
        self._thread.join()

    def _main(self) -> None:
        stop = False
        while not stop:
            first = self._q.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self.MAX_BATCH:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            self._run_batch(batch)

    def _run_batch(self, batch: list[_Job]) -> None:
        done: list[tuple[str, asyncio.Future[Any], Any, BaseException | None, asyncio.AbstractEventLoop]] = []
        in_tx = False

        def commit() -> None:
            nonlocal in_tx, done
            if not in_tx:
                return
            in_tx = False
            try:
                self._db().execute("COMMIT")
            except BaseException as exc:  # noqa: BLE001 - every write of the transaction failed with it
                try:
                    self._db().execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                done = [(k, f, None, exc, lp) if k == _WRITE and e is None else (k, f, r, e, lp)
                        for k, f, r, e, lp in done]

        for kind, fn, args, loop, fut in batch:
            try:
                if kind == _WRITE:
                    db = self._db()
                    if not in_tx:
                        db.execute("BEGIN IMMEDIATE")
                        in_tx = True
                    db.execute("SAVEPOINT job")
                    try:
                        out = fn(db)
                    except BaseException:
                        db.execute("ROLLBACK TO job")
                        db.execute("RELEASE job")
                        raise
                    db.execute("RELEASE job")
                else:
                    commit()
                    out = fn(self._db()) if kind == _READ else fn(*args)
                done.append((kind, fut, out, None, loop))
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                done.append((kind, fut, None, exc, loop))
        commit()
        loops = {id(lp): lp for *_x, lp in done}
        for lp in loops.values():
            mine = [(f, r, e) for _k, f, r, e, l2 in done if l2 is lp]
            try:
                lp.call_soon_threadsafe(_deliver, mine)
            except RuntimeError:
                pass  # that loop is closed: nobody waits any more


def _deliver(results: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for fut, out, exc in results:
        if fut.done():
            continue  # the caller was cancelled
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(out)


def _sqlite_step(db: sqlite3.Connection, q: Q) -> Any:
    """One statement of a body, on the worker's connection."""
    if q.kind == "executemany":
        db.executemany(q.sql, q.args[0])
        return None
    cur = db.execute(q.sql, q.args)
    if q.kind == "execute":
        return cur.rowcount
    if q.kind == "fetch":
        return cur.fetchall()
    row = cur.fetchone()
    if q.kind == "fetchrow":
        return row
    return row[0] if row else None


SQLITE = Dialect(
    lock="",  # one connection whose writes the worker serializes: nothing to lock
    order="rowid",
    call_order="created_at, seq",
    same="IS",
    any_of="IN (SELECT value FROM json_each(?))",  # one parameter, however many values (no variable limit)
    array=compact_json,
    put_ack="INSERT OR IGNORE INTO idempotency (conversation_id, key, ack, created_at, kind) VALUES (?,?,?,?,?)",
    put_offer="INSERT OR REPLACE INTO offers (conversation_id, message_id, call_id, actions, note) VALUES (?,?,?,?,?)",
    put_member="INSERT OR REPLACE INTO members (sid, conversation_id, instance, joined_at) VALUES (?,?,?,?)",
    action_ok="SELECT 1 FROM messages WHERE conversation_id = ? AND json_extract(data, '$.role') = 'action'"
              " AND json_extract(data, '$.action_id') = ? AND json_extract(data, '$.ok') = 1 LIMIT 1",
)


class SQLiteStore(Store):
    """The embedded default: one file, one relay process (a second process on the same file would not
    see the first one's sockets and turns: use ``PostgresStore`` to run several)."""

    dialect = SQLITE

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = str(path)
        self._worker: _Worker | None = None
        self._db: sqlite3.Connection | None = None

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._worker is None:
            raise RuntimeError("store is not open")
        result: T = await self._worker.submit(_CALL, fn, args)
        return result

    def _open_sync(self) -> None:
        if self.path != ":memory:":
            Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10.0)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(_SCHEMA)
        version = db.execute("PRAGMA user_version").fetchone()[0] or 1
        for v, script in _MIGRATIONS:
            if v > version:
                db.execute("BEGIN IMMEDIATE")
                try:
                    for stmt in script.split(";"):
                        if stmt.strip():
                            db.execute(stmt)
                    db.execute(f"PRAGMA user_version = {v}")
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
        # One process owns the file: whatever an earlier process left joined or alive is gone.
        db.execute("DELETE FROM members")
        db.execute("DELETE FROM instances")
        db.execute("UPDATE conversations SET active_sid = NULL WHERE active_sid IS NOT NULL")
        self._db = db

    async def open(self) -> None:
        """Open the file (created and migrated as needed) on the worker thread."""
        if self._worker is not None:
            return
        self._worker = _Worker(lambda: self.db)
        try:
            await self._run(self._open_sync)
        except Exception:
            self._worker.stop()
            self._worker = None
            raise

    async def close(self) -> None:
        """Close the file and stop the worker thread."""
        if self._worker is None:
            return
        if self._db is not None:
            await self._run(self._db.close)
        worker, self._worker = self._worker, None
        await asyncio.get_running_loop().run_in_executor(None, worker.stop)
        self._db = None

    @property
    def db(self) -> sqlite3.Connection:
        """The connection (the worker thread's to use)."""
        assert self._db is not None
        return self._db

    async def perform(self, body: Callable[[], Body[T]], mode: str = WRITE) -> T:
        """A ``READ`` is a read job; a ``WRITE`` (and a ``SNAPSHOT``: one transaction is a consistent read)
        a write job, in its own savepoint of the batch's transaction and resolved once committed."""
        if self._worker is None:
            raise RuntimeError("store is not open")
        kind = _READ if mode == READ else _WRITE
        result: T = await self._worker.submit(kind, lambda db: drive(body(), lambda q: _sqlite_step(db, q)))
        return result

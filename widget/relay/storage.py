"""Relay storage: a small async ``Store`` interface and its SQLite implementation.

The store is the source of truth: conversations, messages, sequenced events (for replay), the state
document, idempotency keys with their stored acks, function calls and ask-user prompts, and — so that
several relay processes can serve one conversation (docs/deployment.md) — which socket is the active
client, which socket a call was dispatched to, which sockets are joined where and which relay processes
are alive. Every method is async; ``SQLiteStore`` (here, the embedded default, one process) and
``PostgresStore`` (``widget.relay.pgstore``, several processes) implement the same interface and pass
the same tests (tests/test_relay_store.py).

The SQLite store runs every statement on one dedicated worker thread (so calls are serialized in
submission order and never block the event loop), in WAL mode with ``synchronous=NORMAL``: a committed
write survives a relay crash. The worker runs the jobs queued at one moment as a batch — consecutive writes
share one transaction, each in its own savepoint — and hands the batch's results back to the event loop in
one wake-up after the commit, so under load the thread hop and the commit are paid once per batch rather
than once per statement (bench/relay.py).
"""

from __future__ import annotations

import abc
import asyncio
import json
import queue
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

T = TypeVar("T")
Ack = tuple[str, dict[str, Any]]

#: Conversation statuses (docs/protocol.md §2.2).
IDLE = "idle"
RUNNING = "running"
WAITING_FOR_FUNCTION = "waiting_for_function"
WAITING_FOR_ASK_USER = "WAITING_FOR_ASK_USER"
FAILED = "failed"

#: Function-call and prompt statuses.
CALL_PENDING = "pending"
CALL_ANSWERED = "answered"
CALL_TIMED_OUT = "timed_out"
CALL_CANCELLED = "cancelled"
PROMPT_TAKEN = "taken"

#: Events of a model round whose content the stored messages reflect only from the round's
#: ``completion.ended`` on (it stores the assistant message and its tool results together).
UNCOMMITTED_EVENTS = frozenset({"completion.started", "completion_stream", "function_call.begin", "function_call.end"})


#: A relay process whose heartbeat is older than this is dead: its turns are failed when next
#: opened, its sockets no longer hold calls (docs/deployment.md).
INSTANCE_TTL_S = 6.0


class StatusConflict(Exception):
    """A conditional write found the conversation in another status (another process got there first)."""

    def __init__(self, status: str | None) -> None:
        super().__init__(status)
        self.status = status


class NotActive(Exception):
    """A state write from a socket that is not the conversation's active client."""


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


#: What ``record_refused`` keeps of a refused write: at most this many fields, each value at most this many
#: characters (a longer one is kept as the start of its JSON text + " [cut]"). A client may send as many refused
#: writes as it likes; each record stays a few KB whatever the payload (up to the 1 MB Engine.IO buffer) was.
REFUSED_MAX_FIELDS = 16
REFUSED_MAX_VALUE_CHARS = 1000


def _clean_text(text: str, limit: int) -> str:
    """At most ``limit`` characters (then " [cut]"), lone surrogates replaced (they have no UTF-8 form to store)."""
    if len(text) > limit:
        text = text[:limit] + " [cut]"
    return text.encode("utf-8", "replace").decode("utf-8")


def refused_excerpt(payload: Any) -> Any:
    """A bounded, storable excerpt of a refused write's payload: an object keeps its first fields, each short
    scalar as it is and anything longer (or a container) as the start of its JSON text."""
    def value(v: Any) -> Any:
        if v is None or isinstance(v, (bool, float)) or (isinstance(v, int) and abs(v) < 2**63):
            return v
        if isinstance(v, str):
            return _clean_text(v, REFUSED_MAX_VALUE_CHARS)
        try:
            text = json.dumps(v, separators=(",", ":"), ensure_ascii=False)
        except (ValueError, TypeError, RecursionError):
            return "[not storable]"
        if len(text) <= REFUSED_MAX_VALUE_CHARS:
            try:
                text.encode("utf-8")
                return v
            except UnicodeEncodeError:
                pass
        return _clean_text(text, REFUSED_MAX_VALUE_CHARS)

    if isinstance(payload, dict):
        out = {_clean_text(str(k), 64): value(v) for k, v in list(payload.items())[:REFUSED_MAX_FIELDS]}
        if len(payload) > REFUSED_MAX_FIELDS:
            out["[cut]"] = f"{len(payload) - REFUSED_MAX_FIELDS} more fields"
        return out
    return value(payload)


class Store(abc.ABC):
    """What the relay needs from storage. Conversations are dicts with the keys ``id, app_id, status,
    created_at, updated_at, seq, msg_seq, turn_id, iteration, runner, active_sid``; ``msg_seq`` is the
    highest seq whose content the stored messages reflect (events of a message still streaming are not);
    ``runner`` is the relay instance running its turn; ``active_sid`` the active client's socket.

    Signals: ``signal(message)`` reaches the listeners of every relay process sharing the store (this
    one included); ``finish_call`` signals ``{"t": "call", "c", "id"}`` once its write is committed.
    They only wake waiters up early: whoever waits re-reads the store, and polls it as a fallback."""

    #: Several relay processes may share this store (the hub then polls it for what it missed).
    shared: bool = False

    def __init__(self) -> None:
        self._listeners: list[Callable[[dict[str, Any]], None]] = []

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ping(self) -> None:
        """Raise when the store cannot be reached (``/readyz``)."""
        return None

    # signals
    def add_listener(self, fn: Callable[[dict[str, Any]], None]) -> None:
        self._listeners.append(fn)

    def _fire(self, message: dict[str, Any]) -> None:
        for fn in list(self._listeners):
            try:
                fn(message)
            except Exception:  # noqa: BLE001 - a listener never breaks the store
                import logging

                logging.getLogger("widget.relay").exception("store listener failed")

    async def signal(self, message: dict[str, Any]) -> None:
        """Deliver ``message`` to the listeners of every process sharing the store."""
        self._fire(message)

    # conversations
    @abc.abstractmethod
    async def create_conversation(self, conversation_id: str, app_id: str, state: dict[str, Any]) -> dict[str, Any]: ...
    @abc.abstractmethod
    async def get_conversation(self, conversation_id: str) -> dict[str, Any] | None: ...
    @abc.abstractmethod
    async def update_conversation(self, conversation_id: str, **fields: Any) -> None: ...
    @abc.abstractmethod
    async def delete_conversation(self, conversation_id: str) -> bool: ...
    @abc.abstractmethod
    async def delete_inactive_before(self, timestamp: float) -> list[str]: ...
    @abc.abstractmethod
    async def snapshot(self, conversation_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """The conversation and its messages, read together (so ``msg_seq`` matches the messages)."""

    # events
    @abc.abstractmethod
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
        """Atomically (``StatusConflict`` and nothing written when ``require_status`` is given and
        the conversation's status is not in it): take the next ``seq``, store the event (``payload["seq"]`` is set, and so is the
        ``seq`` of ``payload["message"]`` when it is a copy of one of ``messages``), delete the messages
        whose ids are in ``withdraw``, store ``messages`` (each gets the same ``seq``), update
        ``conversation`` fields, store the idempotency ack and the ``offer`` (the actions offered on an
        assistant message: ``{message_id, call_id, actions, note}``). Returns the seq."""

    @abc.abstractmethod
    async def events_after(self, conversation_id: str, seq: int) -> list[tuple[int, str, dict[str, Any]]]: ...

    # state
    @abc.abstractmethod
    async def get_state(self, conversation_id: str) -> dict[str, Any]: ...
    @abc.abstractmethod
    async def save_state(self, conversation_id: str, doc: dict[str, Any], idempotency: Ack | None = None) -> None: ...

    # idempotency
    @abc.abstractmethod
    async def get_ack(self, conversation_id: str, key: str) -> dict[str, Any] | None: ...
    @abc.abstractmethod
    async def put_ack(self, conversation_id: str, key: str, ack: dict[str, Any]) -> None: ...

    # function calls
    @abc.abstractmethod
    async def add_calls(self, conversation_id: str, turn_id: str, calls: list[dict[str, Any]]) -> None:
        """Store calls ``{id, name, kind, arguments}``, pending — or already finished when a call has a
        ``status`` (with ``result``/``error``/``handler_ms``/``total_ms``): a call the relay ran itself."""
    @abc.abstractmethod
    async def set_call_seq(self, conversation_id: str, call_id: str, seq: int) -> None: ...
    @abc.abstractmethod
    async def get_call(self, conversation_id: str, call_id: str) -> dict[str, Any] | None: ...
    @abc.abstractmethod
    async def pending_calls(self, conversation_id: str) -> list[dict[str, Any]]: ...
    @abc.abstractmethod
    async def turn_calls(self, conversation_id: str, turn_id: str) -> list[dict[str, Any]]:
        """Every call of one turn (any status), in the order they were made."""
    @abc.abstractmethod
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
        """Move a *pending* call to ``status``; False (and nothing written) when it was not pending."""

    @abc.abstractmethod
    async def record_refused(self, conversation_id: str, kind: str, payload: Any, reason: str) -> None: ...

    # offered actions (seed 002, D7)
    @abc.abstractmethod
    async def get_offers(self, conversation_id: str) -> dict[str, dict[str, Any]]:
        """Every stored offer, by the id of the assistant message it was made on."""
    @abc.abstractmethod
    async def get_offer(self, conversation_id: str, message_id: str) -> dict[str, Any] | None:
        """The offer made on a message that is still part of the conversation (not withdrawn)."""
    @abc.abstractmethod
    async def action_succeeded(self, conversation_id: str, action_id: str) -> bool:
        """Whether a stored ``action`` message records a successful outcome of that action."""

    # ask-user prompts
    @abc.abstractmethod
    async def add_prompts(self, conversation_id: str, turn_id: str, prompts: list[dict[str, Any]]) -> None: ...
    @abc.abstractmethod
    async def pending_prompts(self, conversation_id: str) -> list[dict[str, Any]]: ...
    @abc.abstractmethod
    async def prompt_statuses(self, conversation_id: str, prompt_ids: Iterable[str]) -> dict[str, str]:
        """The status of each known prompt among ``prompt_ids`` (unknown ids are absent)."""

    @abc.abstractmethod
    async def answer_prompts(self, conversation_id: str, answers: list[tuple[str, Any]], idempotency: Ack | None = None) -> bool:
        """Store every ``(prompt_id, answer)`` and the ack in one transaction, or nothing (and False)
        when any of those prompts is not pending."""
    @abc.abstractmethod
    async def take_answers(self, conversation_id: str) -> list[tuple[dict[str, Any], Any]]:
        """Answered prompts not taken yet, marked taken: the answers a suspended turn resumes with."""

    @abc.abstractmethod
    async def cancel_prompts(self, conversation_id: str) -> int: ...

    # conditional writes (several processes may race for the same transition)
    @abc.abstractmethod
    async def claim_status(self, conversation_id: str, expected: Iterable[str], *, runner_was: Any = ...,
                           **fields: Any) -> bool:
        """Update ``fields`` only while the status is one of ``expected`` (and, when given, the
        ``runner`` is ``runner_was``); whether it did."""

    @abc.abstractmethod
    async def update_state(self, conversation_id: str, fn: Callable[[dict[str, Any]], dict[str, Any]],
                           idempotency: Ack, active_sid: str | None = None) -> dict[str, Any] | None:
        """Atomically: the ack already stored under the idempotency key (nothing written), or
        ``NotActive`` when ``active_sid`` is given and is not the active client, or the state replaced
        by ``fn(state)`` (which may raise: nothing written) with the ack stored; None then."""

    # presence: relay instances, joined sockets, the active client, call dispatch
    @abc.abstractmethod
    async def heartbeat(self, instance: str) -> None:
        """Mark a relay instance alive now."""
    @abc.abstractmethod
    async def forget_instance(self, instance: str) -> None:
        """A relay instance stops: it is dead at once, its sockets are gone."""
    @abc.abstractmethod
    async def instance_alive(self, instance: str) -> bool: ...
    @abc.abstractmethod
    async def add_member(self, conversation_id: str, sid: str, instance: str) -> None:
        """A socket joined a conversation (on ``instance``)."""
    @abc.abstractmethod
    async def remove_member(self, sid: str) -> None:
        """A socket left: forget it, and it is no longer any conversation's active client."""
    @abc.abstractmethod
    async def set_active(self, conversation_id: str, sid: str) -> str | None:
        """Make ``sid`` the active client; the previous one."""
    @abc.abstractmethod
    async def claim_call(self, conversation_id: str, call_id: str, sid: str | None = None) -> str | None:
        """Dispatch a pending call to ``sid`` (None: to the active client) unless it is dispatched to
        another socket that is still joined on a live instance. Returns the socket the call is
        dispatched to afterwards (None: to nobody, or the call is not pending)."""
    @abc.abstractmethod
    async def conversations_brief(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """``{id: {seq, status, runner}}`` of those that exist (the hub's poll)."""


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
]
SCHEMA_VERSION = _MIGRATIONS[-1][0]

_CONV_COLUMNS = ("id", "app_id", "status", "created_at", "updated_at", "seq", "msg_seq", "turn_id", "iteration", "runner",
                 "active_sid")
_UPDATABLE = {"status", "turn_id", "iteration", "runner"}
_CALL_COLUMNS = ("id", "turn_id", "name", "kind", "arguments", "seq", "status", "result", "error",
                 "handler_ms", "total_ms", "created_at", "finished_at", "dispatched_to")
_TABLES = ("messages", "events", "idempotency", "calls", "refused", "prompts", "offers", "members")


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

    def submit(self, kind: str, fn: Callable[..., Any], args: tuple[Any, ...] = ()) -> "asyncio.Future[Any]":
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
        done: list[tuple[str, "asyncio.Future[Any]", Any, BaseException | None, asyncio.AbstractEventLoop]] = []
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
                done = [(k, f, None, exc, lp) if k == _WRITE and e is None else (k, f, r, e, lp) for k, f, r, e, lp in done]

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


def _deliver(results: list[tuple["asyncio.Future[Any]", Any, BaseException | None]]) -> None:
    for fut, out, exc in results:
        if fut.done():
            continue  # the caller was cancelled
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(out)


class SQLiteStore(Store):
    """The embedded default: one file, one relay process (a second process on the same file would not
    see the first one's sockets and turns: use ``PostgresStore`` to run several)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = str(path)
        self._worker: _Worker | None = None
        self._db: sqlite3.Connection | None = None

    # -- plumbing -------------------------------------------------------------------------
    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._worker is None:
            raise RuntimeError("store is not open")
        return await self._worker.submit(_CALL, fn, args)  # type: ignore[no-any-return]

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
        if self._worker is None:
            return
        if self._db is not None:
            await self._run(self._db.close)
        worker, self._worker = self._worker, None
        await asyncio.get_running_loop().run_in_executor(None, worker.stop)
        self._db = None

    @property
    def db(self) -> sqlite3.Connection:
        assert self._db is not None
        return self._db

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(db)`` atomically (its own savepoint in the batch's transaction), resolved once committed."""
        if self._worker is None:
            raise RuntimeError("store is not open")
        return await self._worker.submit(_WRITE, fn)  # type: ignore[no-any-return]

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._worker is None:
            raise RuntimeError("store is not open")
        return await self._worker.submit(_READ, fn)  # type: ignore[no-any-return]

    @staticmethod
    def _put_ack(db: sqlite3.Connection, conversation_id: str, key: str, ack: dict[str, Any]) -> None:
        db.execute(
            "INSERT OR IGNORE INTO idempotency (conversation_id, key, ack, created_at) VALUES (?,?,?,?)",
            (conversation_id, key, _dumps(ack), time.time()),
        )

    # -- conversations ----------------------------------------------------------------------
    @staticmethod
    def _conv(db: sqlite3.Connection, conversation_id: str) -> dict[str, Any] | None:
        row = db.execute(f"SELECT {', '.join(_CONV_COLUMNS)} FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        return dict(zip(_CONV_COLUMNS, row)) if row else None

    async def create_conversation(self, conversation_id: str, app_id: str, state: dict[str, Any]) -> dict[str, Any]:
        now = time.time()

        def go(db: sqlite3.Connection) -> dict[str, Any]:
            db.execute(
                "INSERT INTO conversations (id, app_id, status, created_at, updated_at, state) VALUES (?,?,?,?,?,?)",
                (conversation_id, app_id, IDLE, now, now, _dumps(state)),
            )
            conv = self._conv(db, conversation_id)
            assert conv is not None
            return conv

        return await self._write(go)

    async def get_conversation(self, conversation_id: str) -> dict[str, Any] | None:
        return await self._read(lambda db: self._conv(db, conversation_id))

    async def update_conversation(self, conversation_id: str, **fields: Any) -> None:
        bad = set(fields) - _UPDATABLE
        if bad:
            raise ValueError(f"cannot update {bad}")
        sets = "".join(f", {k} = ?" for k in fields)
        args = (time.time(), *fields.values(), conversation_id)
        await self._write(lambda db: db.execute(f"UPDATE conversations SET updated_at = ?{sets} WHERE id = ?", args))

    async def delete_conversation(self, conversation_id: str) -> bool:
        def go(db: sqlite3.Connection) -> bool:
            cur = db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
            for table in _TABLES:
                db.execute(f"DELETE FROM {table} WHERE conversation_id = ?", (conversation_id,))
            return cur.rowcount > 0

        return await self._write(go)

    async def delete_inactive_before(self, timestamp: float) -> list[str]:
        ids = await self._read(lambda db: [r[0] for r in db.execute("SELECT id FROM conversations WHERE updated_at < ?", (timestamp,))])
        for cid in ids:
            await self.delete_conversation(cid)
        return ids

    async def snapshot(self, conversation_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        def go(db: sqlite3.Connection) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
            conv = self._conv(db, conversation_id)
            if conv is None:
                return None
            rows = db.execute("SELECT data FROM messages WHERE conversation_id = ? ORDER BY pos", (conversation_id,)).fetchall()
            return conv, [json.loads(r[0]) for r in rows]

        return await self._write(go)  # one transaction: a consistent read

    # -- events -------------------------------------------------------------------------------
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
        allowed = None if require_status is None else set(require_status)
        gone = list(withdraw)
        fields = dict(conversation or {})
        bad = set(fields) - _UPDATABLE
        if bad:
            raise ValueError(f"cannot update {bad}")
        committed = name not in UNCOMMITTED_EVENTS
        now = time.time()

        def go(db: sqlite3.Connection) -> int:
            if allowed is not None:
                row = db.execute("SELECT status FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
                if row is None:
                    raise KeyError(conversation_id)
                if row[0] not in allowed:
                    raise StatusConflict(row[0])
            # In an UPDATE every right-hand side sees the old row, so both get old seq + 1.
            sets = "seq = seq + 1, updated_at = ?" + (", msg_seq = seq + 1" if committed else "")
            sets += "".join(f", {k} = ?" for k in fields)
            row = db.execute(
                f"UPDATE conversations SET {sets} WHERE id = ? RETURNING seq", (now, *fields.values(), conversation_id)
            ).fetchone()
            if row is None:
                raise KeyError(conversation_id)
            seq = row[0]
            payload["seq"] = seq
            for m in msgs:  # before the payload is serialized: it may embed these messages
                m["seq"] = seq
            pm = payload.get("message")
            if isinstance(pm, dict) and any(pm.get("id") == m["id"] for m in msgs):
                pm["seq"] = seq  # an emitted copy of a stored message (e.g. with its live ``actions``)
            db.execute("INSERT INTO events (conversation_id, seq, name, payload) VALUES (?,?,?,?)",
                       (conversation_id, seq, name, _dumps(payload)))
            for mid in gone:
                db.execute("DELETE FROM messages WHERE conversation_id = ? AND id = ?", (conversation_id, mid))
            for m in msgs:
                db.execute("INSERT INTO messages (conversation_id, id, seq, data) VALUES (?,?,?,?)",
                           (conversation_id, m["id"], seq, _dumps(m)))
            if idempotency:
                self._put_ack(db, conversation_id, *idempotency)
            if offer is not None:
                db.execute("INSERT OR REPLACE INTO offers (conversation_id, message_id, call_id, actions, note) VALUES (?,?,?,?,?)",
                           (conversation_id, offer["message_id"], offer["call_id"], _dumps(offer["actions"]), offer["note"]))
            return seq

        return await self._write(go)

    async def events_after(self, conversation_id: str, seq: int) -> list[tuple[int, str, dict[str, Any]]]:
        def go(db: sqlite3.Connection) -> list[tuple[int, str, dict[str, Any]]]:
            rows = db.execute("SELECT seq, name, payload FROM events WHERE conversation_id = ? AND seq > ? ORDER BY seq",
                              (conversation_id, seq)).fetchall()
            return [(s, n, json.loads(p)) for s, n, p in rows]

        return await self._read(go)

    # -- state --------------------------------------------------------------------------------
    async def get_state(self, conversation_id: str) -> dict[str, Any]:
        def go(db: sqlite3.Connection) -> dict[str, Any]:
            row = db.execute("SELECT state FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
            if row is None:
                raise KeyError(conversation_id)
            return json.loads(row[0])

        return await self._read(go)

    async def save_state(self, conversation_id: str, doc: dict[str, Any], idempotency: Ack | None = None) -> None:
        text = _dumps(doc)
        now = time.time()

        def go(db: sqlite3.Connection) -> None:
            cur = db.execute("UPDATE conversations SET state = ?, updated_at = ? WHERE id = ?", (text, now, conversation_id))
            if cur.rowcount == 0:
                raise KeyError(conversation_id)
            if idempotency:
                self._put_ack(db, conversation_id, *idempotency)

        await self._write(go)

    # -- idempotency ------------------------------------------------------------------------------
    async def get_ack(self, conversation_id: str, key: str) -> dict[str, Any] | None:
        def go(db: sqlite3.Connection) -> dict[str, Any] | None:
            row = db.execute("SELECT ack FROM idempotency WHERE conversation_id = ? AND key = ?", (conversation_id, key)).fetchone()
            return json.loads(row[0]) if row else None

        return await self._read(go)

    async def put_ack(self, conversation_id: str, key: str, ack: dict[str, Any]) -> None:
        await self._write(lambda db: self._put_ack(db, conversation_id, key, ack))

    # -- function calls -----------------------------------------------------------------------------
    @staticmethod
    def _call_row(row: tuple[Any, ...]) -> dict[str, Any]:
        d = dict(zip(_CALL_COLUMNS, row))
        d["arguments"] = json.loads(d["arguments"])
        d["result"] = json.loads(d["result"]) if d["result"] is not None else None
        return d

    async def add_calls(self, conversation_id: str, turn_id: str, calls: list[dict[str, Any]]) -> None:
        now = time.time()

        def go(db: sqlite3.Connection) -> None:
            for c in calls:
                status = c.get("status", CALL_PENDING)
                result = c.get("result")
                db.execute(
                    "INSERT INTO calls (conversation_id, id, turn_id, name, kind, arguments, seq, status, result, error,"
                    " handler_ms, total_ms, created_at, finished_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (conversation_id, c["id"], turn_id, c["name"], c.get("kind", "function"), _dumps(c["arguments"]),
                     c.get("seq", 0), status, _dumps(result) if result is not None else None, c.get("error"),
                     c.get("handler_ms"), c.get("total_ms"), now, None if status == CALL_PENDING else now),
                )

        await self._write(go)

    async def set_call_seq(self, conversation_id: str, call_id: str, seq: int) -> None:
        await self._write(lambda db: db.execute("UPDATE calls SET seq = ? WHERE conversation_id = ? AND id = ?",
                                                (seq, conversation_id, call_id)))

    async def get_call(self, conversation_id: str, call_id: str) -> dict[str, Any] | None:
        def go(db: sqlite3.Connection) -> dict[str, Any] | None:
            row = db.execute(f"SELECT {', '.join(_CALL_COLUMNS)} FROM calls WHERE conversation_id = ? AND id = ?",
                             (conversation_id, call_id)).fetchone()
            return self._call_row(row) if row else None

        return await self._read(go)

    async def pending_calls(self, conversation_id: str) -> list[dict[str, Any]]:
        def go(db: sqlite3.Connection) -> list[dict[str, Any]]:
            rows = db.execute(
                f"SELECT {', '.join(_CALL_COLUMNS)} FROM calls WHERE conversation_id = ? AND status = ? ORDER BY seq",
                (conversation_id, CALL_PENDING)).fetchall()
            return [self._call_row(r) for r in rows]

        return await self._read(go)

    async def turn_calls(self, conversation_id: str, turn_id: str) -> list[dict[str, Any]]:
        def go(db: sqlite3.Connection) -> list[dict[str, Any]]:
            rows = db.execute(
                f"SELECT {', '.join(_CALL_COLUMNS)} FROM calls WHERE conversation_id = ? AND turn_id = ? ORDER BY created_at, seq",
                (conversation_id, turn_id)).fetchall()
            return [self._call_row(r) for r in rows]

        return await self._read(go)

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

        def go(db: sqlite3.Connection) -> bool:
            cur = db.execute(
                "UPDATE calls SET status = ?, result = ?, error = ?, handler_ms = ?, total_ms = ?, finished_at = ?"
                " WHERE conversation_id = ? AND id = ? AND status = ?",
                (status, _dumps(result) if result is not None else None, error, handler_ms, total_ms, now,
                 conversation_id, call_id, CALL_PENDING))
            if cur.rowcount and idempotency:
                self._put_ack(db, conversation_id, *idempotency)
            return cur.rowcount > 0

        done = await self._write(go)
        if done:
            self._fire({"t": "call", "c": conversation_id, "id": call_id})
        return done

    async def record_refused(self, conversation_id: str, kind: str, payload: Any, reason: str) -> None:
        await self._write(lambda db: db.execute(
            "INSERT INTO refused (conversation_id, kind, payload, reason, created_at) VALUES (?,?,?,?,?)",
            (conversation_id, kind, _dumps(refused_excerpt(payload)), _clean_text(reason, 200), time.time())))

    async def refused(self, conversation_id: str) -> list[dict[str, Any]]:
        def go(db: sqlite3.Connection) -> list[dict[str, Any]]:
            rows = db.execute("SELECT kind, payload, reason, created_at FROM refused WHERE conversation_id = ? ORDER BY rowid",
                              (conversation_id,)).fetchall()
            return [{"kind": k, "payload": json.loads(p), "reason": r, "created_at": t} for k, p, r, t in rows]

        return await self._read(go)

    # -- offered actions ----------------------------------------------------------------------------------
    @staticmethod
    def _offer_row(row: tuple[Any, ...]) -> dict[str, Any]:
        return {"message_id": row[0], "call_id": row[1], "actions": json.loads(row[2]), "note": row[3]}

    async def get_offers(self, conversation_id: str) -> dict[str, dict[str, Any]]:
        def go(db: sqlite3.Connection) -> dict[str, dict[str, Any]]:
            rows = db.execute("SELECT message_id, call_id, actions, note FROM offers WHERE conversation_id = ?",
                              (conversation_id,)).fetchall()
            return {r[0]: self._offer_row(r) for r in rows}

        return await self._read(go)

    async def get_offer(self, conversation_id: str, message_id: str) -> dict[str, Any] | None:
        def go(db: sqlite3.Connection) -> dict[str, Any] | None:
            row = db.execute(
                "SELECT o.message_id, o.call_id, o.actions, o.note FROM offers o WHERE o.conversation_id = ? AND o.message_id = ?"
                " AND EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = o.conversation_id AND m.id = o.message_id)",
                (conversation_id, message_id)).fetchone()
            return self._offer_row(row) if row else None

        return await self._read(go)

    async def action_succeeded(self, conversation_id: str, action_id: str) -> bool:
        def go(db: sqlite3.Connection) -> bool:
            row = db.execute(
                "SELECT 1 FROM messages WHERE conversation_id = ? AND json_extract(data, '$.role') = 'action'"
                " AND json_extract(data, '$.action_id') = ? AND json_extract(data, '$.ok') = 1 LIMIT 1",
                (conversation_id, action_id)).fetchone()
            return row is not None

        return await self._read(go)

    # -- ask-user prompts ------------------------------------------------------------------------------
    async def add_prompts(self, conversation_id: str, turn_id: str, prompts: list[dict[str, Any]]) -> None:
        def go(db: sqlite3.Connection) -> None:
            for i, p in enumerate(prompts):
                db.execute("INSERT INTO prompts (conversation_id, id, turn_id, prompt, status, pos) VALUES (?,?,?,?,?,?)",
                           (conversation_id, p["id"], turn_id, _dumps(p), CALL_PENDING, i))

        await self._write(go)

    async def pending_prompts(self, conversation_id: str) -> list[dict[str, Any]]:
        def go(db: sqlite3.Connection) -> list[dict[str, Any]]:
            rows = db.execute("SELECT prompt FROM prompts WHERE conversation_id = ? AND status = ? ORDER BY rowid",
                              (conversation_id, CALL_PENDING)).fetchall()
            return [json.loads(r[0]) for r in rows]

        return await self._read(go)

    async def prompt_statuses(self, conversation_id: str, prompt_ids: Iterable[str]) -> dict[str, str]:
        ids = list(prompt_ids)

        def go(db: sqlite3.Connection) -> dict[str, str]:
            out = {}
            for pid in ids:
                row = db.execute("SELECT status FROM prompts WHERE conversation_id = ? AND id = ?", (conversation_id, pid)).fetchone()
                if row:
                    out[pid] = row[0]
            return out

        return await self._read(go)

    async def answer_prompts(self, conversation_id: str, answers: list[tuple[str, Any]], idempotency: Ack | None = None) -> bool:
        class _NotPending(Exception):
            pass

        def go(db: sqlite3.Connection) -> None:
            for pid, answer in answers:
                cur = db.execute(
                    "UPDATE prompts SET status = ?, answer = ? WHERE conversation_id = ? AND id = ? AND status = ?",
                    (CALL_ANSWERED, _dumps(answer), conversation_id, pid, CALL_PENDING))
                if cur.rowcount == 0:
                    raise _NotPending  # rolls the whole batch back
            if idempotency:
                self._put_ack(db, conversation_id, *idempotency)

        try:
            await self._write(go)
        except _NotPending:
            return False
        return True

    async def take_answers(self, conversation_id: str) -> list[tuple[dict[str, Any], Any]]:
        def go(db: sqlite3.Connection) -> list[tuple[dict[str, Any], Any]]:
            rows = db.execute("SELECT prompt, answer FROM prompts WHERE conversation_id = ? AND status = ? ORDER BY rowid",
                              (conversation_id, CALL_ANSWERED)).fetchall()
            db.execute("UPDATE prompts SET status = ? WHERE conversation_id = ? AND status = ?",
                       (PROMPT_TAKEN, conversation_id, CALL_ANSWERED))
            return [(json.loads(p), json.loads(a)) for p, a in rows]

        return await self._write(go)

    async def cancel_prompts(self, conversation_id: str) -> int:
        return await self._write(lambda db: db.execute(
            "UPDATE prompts SET status = ? WHERE conversation_id = ? AND status = ?",
            (CALL_CANCELLED, conversation_id, CALL_PENDING)).rowcount)

    # -- conditional writes ----------------------------------------------------------------------
    async def claim_status(self, conversation_id: str, expected: Iterable[str], *, runner_was: Any = ...,
                           **fields: Any) -> bool:
        bad = set(fields) - _UPDATABLE
        if bad:
            raise ValueError(f"cannot update {bad}")
        statuses = list(expected)
        where = f"id = ? AND status IN ({','.join('?' * len(statuses))})"
        args: list[Any] = [time.time(), *fields.values(), conversation_id, *statuses]
        if runner_was is not ...:
            where += " AND runner IS ?"
            args.append(runner_was)
        sets = "".join(f", {k} = ?" for k in fields)
        return await self._write(lambda db: db.execute(
            f"UPDATE conversations SET updated_at = ?{sets} WHERE {where}", args).rowcount > 0)

    async def update_state(self, conversation_id: str, fn: Callable[[dict[str, Any]], dict[str, Any]],
                           idempotency: Ack, active_sid: str | None = None) -> dict[str, Any] | None:
        key, ack = idempotency
        now = time.time()

        def go(db: sqlite3.Connection) -> dict[str, Any] | None:
            row = db.execute("SELECT ack FROM idempotency WHERE conversation_id = ? AND key = ?", (conversation_id, key)).fetchone()
            if row:
                return json.loads(row[0])
            row = db.execute("SELECT state, active_sid FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
            if row is None:
                raise KeyError(conversation_id)
            if active_sid is not None and row[1] != active_sid:
                raise NotActive(conversation_id)
            new = fn(json.loads(row[0]))
            db.execute("UPDATE conversations SET state = ?, updated_at = ? WHERE id = ?", (_dumps(new), now, conversation_id))
            self._put_ack(db, conversation_id, key, ack)
            return None

        return await self._write(go)

    # -- presence --------------------------------------------------------------------------------
    async def heartbeat(self, instance: str) -> None:
        now = time.time()
        await self._write(lambda db: db.execute(
            "INSERT INTO instances (id, heartbeat_at) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at",
            (instance, now)))

    async def forget_instance(self, instance: str) -> None:
        def go(db: sqlite3.Connection) -> None:
            db.execute("UPDATE conversations SET active_sid = NULL WHERE active_sid IN (SELECT sid FROM members WHERE instance = ?)", (instance,))
            db.execute("DELETE FROM members WHERE instance = ?", (instance,))
            db.execute("DELETE FROM instances WHERE id = ?", (instance,))

        await self._write(go)

    async def instance_alive(self, instance: str) -> bool:
        since = time.time() - INSTANCE_TTL_S
        return await self._read(lambda db: db.execute(
            "SELECT 1 FROM instances WHERE id = ? AND heartbeat_at > ?", (instance, since)).fetchone() is not None)

    async def add_member(self, conversation_id: str, sid: str, instance: str) -> None:
        now = time.time()
        await self._write(lambda db: db.execute(
            "INSERT OR REPLACE INTO members (sid, conversation_id, instance, joined_at) VALUES (?,?,?,?)",
            (sid, conversation_id, instance, now)))

    async def remove_member(self, sid: str) -> None:
        def go(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM members WHERE sid = ?", (sid,))
            db.execute("UPDATE conversations SET active_sid = NULL WHERE active_sid = ?", (sid,))

        await self._write(go)

    async def set_active(self, conversation_id: str, sid: str) -> str | None:
        def go(db: sqlite3.Connection) -> str | None:
            row = db.execute("SELECT active_sid FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
            if row is None:
                raise KeyError(conversation_id)
            db.execute("UPDATE conversations SET active_sid = ? WHERE id = ?", (sid, conversation_id))
            return row[0]

        return await self._write(go)

    async def claim_call(self, conversation_id: str, call_id: str, sid: str | None = None) -> str | None:
        since = time.time() - INSTANCE_TTL_S

        def go(db: sqlite3.Connection) -> str | None:
            row = db.execute("SELECT status, dispatched_to FROM calls WHERE conversation_id = ? AND id = ?",
                             (conversation_id, call_id)).fetchone()
            if row is None or row[0] != CALL_PENDING:
                return None
            owner = row[1]
            want = sid
            if want is None:
                active = db.execute("SELECT active_sid FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
                want = active[0] if active else None
            if owner is not None and (owner == want or db.execute(
                    "SELECT 1 FROM members m JOIN instances i ON i.id = m.instance WHERE m.sid = ? AND i.heartbeat_at > ?",
                    (owner, since)).fetchone() is not None):
                return owner
            if want is None:
                return None
            db.execute("UPDATE calls SET dispatched_to = ? WHERE conversation_id = ? AND id = ?", (want, conversation_id, call_id))
            return want

        return await self._write(go)

    async def conversations_brief(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        wanted = list(ids)
        if not wanted:
            return {}

        def go(db: sqlite3.Connection) -> dict[str, dict[str, Any]]:
            rows = db.execute(f"SELECT id, seq, status, runner FROM conversations WHERE id IN ({','.join('?' * len(wanted))})",
                              wanted).fetchall()
            return {r[0]: {"seq": r[1], "status": r[2], "runner": r[3]} for r in rows}

        return await self._read(go)

    async def ping(self) -> None:
        await self._read(lambda db: db.execute("SELECT 1").fetchone())

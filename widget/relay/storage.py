"""Relay storage: the async ``Store`` (the interface, its logic written once over SQL) and its SQLite engine.

The store is the source of truth: conversations, messages, sequenced events (for replay), the state
document, idempotency keys with their stored acks, function calls and ask-user prompts, and — so that
several relay processes can serve one conversation (docs/deployment.md) — which socket is the active
client, which socket a call was dispatched to, which sockets are joined where and which relay processes
are alive. Every method is async; ``SQLiteStore`` (here, the embedded default, one process) and
``PostgresStore`` (``widget.relay.pgstore``, several processes) implement the same interface and pass
the same tests (tests/test_relay_store.py). ``Store`` holds everything they share — validation, record
shaping, sequencing, JSON — as bodies of statements (``widget.relay.sql``); an engine only runs them
(connection, transactions) and names its SQL where it differs (a ``Dialect``).

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
from typing import Any, Callable, ClassVar, Iterable, TypeVar

from .sql import READ, SNAPSHOT, WRITE, Body, Dialect, Q, drive, execute, executemany, fetch, fetchrow, fetchval

T = TypeVar("T")
#: ``(idempotency key, ack)`` or ``(key, ack, kind)``: the ack stored under the key, for writes of one kind
#: (the client → relay event name; a key reused by a write of another kind is ``IdempotencyConflict``).
Ack = tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str]

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


class IdempotencyConflict(Exception):
    """An idempotency key already acknowledges a write of another kind (``kind``: that write's event)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def _ack_of(row: Any, kind: str | None) -> dict[str, Any] | None:
    """The stored ack of an ``(ack, kind)`` row for a write of ``kind`` (None: any), or None for no row."""
    if row is None:
        return None
    if kind is not None and row[1] and row[1] != kind:
        raise IdempotencyConflict(row[1])
    return json.loads(row[0])


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


_CONV_COLUMNS = ("id", "app_id", "status", "created_at", "updated_at", "seq", "msg_seq", "turn_id", "iteration", "runner",
                 "active_sid")
_UPDATABLE = {"status", "turn_id", "iteration", "runner"}
_CALL_COLUMNS = ("id", "turn_id", "name", "kind", "arguments", "seq", "status", "result", "error",
                 "handler_ms", "total_ms", "created_at", "finished_at", "dispatched_to")
_TABLES = ("messages", "events", "idempotency", "calls", "refused", "prompts", "offers", "members", "feedback")

_CONV_SQL = f"SELECT {', '.join(_CONV_COLUMNS)} FROM conversations WHERE id = ?"
_CALL_SQL = f"SELECT {', '.join(_CALL_COLUMNS)} FROM calls"


def _check_updatable(fields: Iterable[str]) -> None:
    """Only these conversation columns are written from outside (the others are the store's own)."""
    bad = set(fields) - _UPDATABLE
    if bad:
        raise ValueError(f"cannot update {bad}")


def _json_or_none(value: Any) -> str | None:
    return _dumps(value) if value is not None else None


def _conv_row(row: Any) -> dict[str, Any] | None:
    return dict(zip(_CONV_COLUMNS, row)) if row else None


def _call_row(row: Any) -> dict[str, Any]:
    d = dict(zip(_CALL_COLUMNS, row))
    d["arguments"] = json.loads(d["arguments"])
    d["result"] = json.loads(d["result"]) if d["result"] is not None else None
    return d


def _offer_row(row: Any) -> dict[str, Any]:
    return {"message_id": row[0], "call_id": row[1], "actions": json.loads(row[2]), "note": row[3]}


class Store(abc.ABC):
    """What the relay needs from storage, written once over an SQL engine. Conversations are dicts with
    the keys ``id, app_id, status, created_at, updated_at, seq, msg_seq, turn_id, iteration, runner,
    active_sid``; ``msg_seq`` is the highest seq whose content the stored messages reflect (events of a
    message still streaming are not); ``runner`` is the relay instance running its turn; ``active_sid``
    the active client's socket.

    Signals: ``signal(message)`` reaches the listeners of every relay process sharing the store (this
    one included); ``finish_call`` signals ``{"t": "call", "c", "id"}`` once its write is committed.
    They only wake waiters up early: whoever waits re-reads the store, and polls it as a fallback.

    An engine gives ``_perform`` (how a body of statements runs: connection, transaction, retries) and a
    ``dialect`` (where its SQL differs); every operation below is a body (``widget.relay.sql``)."""

    #: Several relay processes may share this store (the hub then polls it for what it missed).
    shared: bool = False
    #: The engine's SQL where it differs from the shared statements.
    dialect: ClassVar[Dialect]

    def __init__(self) -> None:
        self._listeners: list[Callable[[dict[str, Any]], None]] = []

    async def open(self) -> None:
        """Connect (and create or migrate the schema)."""
        return None

    async def close(self) -> None:
        """Disconnect."""
        return None

    async def ping(self) -> None:
        """Raise when the store cannot be reached (``/readyz``)."""
        await self._one(fetchval("SELECT 1"), READ)

    # -- the engine's part ----------------------------------------------------------------------
    @abc.abstractmethod
    async def _perform(self, body: Callable[[], Body[T]], mode: str = WRITE) -> T:
        """Run the statements of ``body()`` on one connection, as ``mode`` says (``sql.READ``/``WRITE``/
        ``SNAPSHOT``); an engine that retries calls ``body`` again for a fresh run."""

    def _notify_sql(self, message: dict[str, Any]) -> tuple[Q, ...]:
        """Statements that, in a write, tell the other processes ``message`` once it commits (none: one process)."""
        return ()

    async def _append_plain(self, conversation_id: str, name: str, payload: dict[str, Any], committed: bool,
                            now: float) -> int | None:
        """An engine's quicker way to append an event that writes nothing else (None: it has none)."""
        return None

    async def _one(self, q: Q, mode: str = WRITE) -> Any:
        """The result of one statement."""
        def go() -> Body[Any]:
            return (yield q)

        return await self._perform(go, mode)

    def _put_ack(self, conversation_id: str, key: str, ack: dict[str, Any], kind: str | None = None) -> Q:
        return execute(self.dialect.put_ack, conversation_id, key, _dumps(ack), time.time(), kind)

    # -- signals ------------------------------------------------------------------------------
    def add_listener(self, fn: Callable[[dict[str, Any]], None]) -> None:
        """Call ``fn(message)`` for every signal (of any process sharing the store)."""
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

    # -- conversations ------------------------------------------------------------------------
    async def create_conversation(self, conversation_id: str, app_id: str, state: dict[str, Any]) -> dict[str, Any]:
        """Store a new idle conversation with its state document; the conversation."""
        now = time.time()

        def go() -> Body[dict[str, Any]]:
            yield execute("INSERT INTO conversations (id, app_id, status, created_at, updated_at, state) VALUES (?,?,?,?,?,?)",
                          conversation_id, app_id, IDLE, now, now, _dumps(state))
            conv = _conv_row((yield fetchrow(_CONV_SQL, conversation_id)))
            assert conv is not None
            return conv

        return await self._perform(go)

    async def get_conversation(self, conversation_id: str) -> dict[str, Any] | None:
        """The conversation, or None."""
        return _conv_row(await self._one(fetchrow(_CONV_SQL, conversation_id), READ))

    async def update_conversation(self, conversation_id: str, **fields: Any) -> None:
        """Set ``fields`` (status, turn_id, iteration, runner) and ``updated_at``."""
        _check_updatable(fields)
        sets = "".join(f", {k} = ?" for k in fields)
        await self._one(execute(f"UPDATE conversations SET updated_at = ?{sets} WHERE id = ?",
                                time.time(), *fields.values(), conversation_id))

    async def delete_conversation(self, conversation_id: str) -> bool:
        """Delete the conversation and all it holds; whether it existed."""
        def go() -> Body[bool]:
            deleted = yield execute("DELETE FROM conversations WHERE id = ?", conversation_id)
            for table in _TABLES:
                yield execute(f"DELETE FROM {table} WHERE conversation_id = ?", conversation_id)
            return deleted > 0

        return await self._perform(go)

    async def delete_inactive_before(self, timestamp: float) -> list[str]:
        """Delete the conversations not updated since ``timestamp``; their ids."""
        rows = await self._one(fetch("SELECT id FROM conversations WHERE updated_at < ?", timestamp), READ)
        ids = [r[0] for r in rows]
        for cid in ids:
            await self.delete_conversation(cid)
        return ids

    async def snapshot(self, conversation_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """The conversation and its messages, read together (so ``msg_seq`` matches the messages)."""
        def go() -> Body[tuple[dict[str, Any], list[dict[str, Any]]] | None]:
            conv = _conv_row((yield fetchrow(_CONV_SQL, conversation_id)))
            if conv is None:
                return None
            rows = yield fetch("SELECT data FROM messages WHERE conversation_id = ? ORDER BY pos", conversation_id)
            return conv, [json.loads(r[0]) for r in rows]

        return await self._perform(go, SNAPSHOT)

    async def conversations_brief(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """``{id: {seq, status, runner}}`` of those that exist (the hub's poll)."""
        wanted = list(ids)
        if not wanted:
            return {}
        rows = await self._one(fetch(f"SELECT id, seq, status, runner FROM conversations WHERE id {self.dialect.any_of}",
                                     self.dialect.array(wanted)), READ)
        return {r[0]: {"seq": r[1], "status": r[2], "runner": r[3]} for r in rows}

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
        """Atomically (``StatusConflict`` and nothing written when ``require_status`` is given and
        the conversation's status is not in it): take the next ``seq``, store the event (``payload["seq"]`` is set, and so is the
        ``seq`` of ``payload["message"]`` when it is a copy of one of ``messages``), delete the messages
        whose ids are in ``withdraw``, store ``messages`` (each gets the same ``seq``), update
        ``conversation`` fields, store the idempotency ack and the ``offer`` (the actions offered on an
        assistant message: ``{message_id, call_id, actions, note}``). Returns the seq."""
        msgs = list(messages)
        gone = list(withdraw)
        fields = dict(conversation or {})
        _check_updatable(fields)
        allowed = None if require_status is None else set(require_status)
        committed = name not in UNCOMMITTED_EVENTS
        now = time.time()
        if not (msgs or gone or fields or idempotency or offer is not None or allowed is not None):
            seq = await self._append_plain(conversation_id, name, payload, committed, now)
            if seq is not None:
                return seq
        d = self.dialect

        def go() -> Body[int]:
            if allowed is not None:
                status = yield fetchval(f"SELECT status FROM conversations WHERE id = ?{d.lock}", conversation_id)
                if status is None:
                    raise KeyError(conversation_id)
                if status not in allowed:
                    raise StatusConflict(status)
            # In an UPDATE every right-hand side sees the old row, so both get old seq + 1.
            sets = "seq = seq + 1, updated_at = ?" + (", msg_seq = seq + 1" if committed else "")
            sets += "".join(f", {k} = ?" for k in fields)
            seq = yield fetchval(f"UPDATE conversations SET {sets} WHERE id = ? RETURNING seq",
                                 now, *fields.values(), conversation_id)
            if seq is None:
                raise KeyError(conversation_id)
            payload["seq"] = seq
            for m in msgs:  # before the payload is serialized: it may embed these messages
                m["seq"] = seq
            pm = payload.get("message")
            if isinstance(pm, dict) and any(pm.get("id") == m["id"] for m in msgs):
                pm["seq"] = seq  # an emitted copy of a stored message (e.g. with its live ``actions``)
            yield execute("INSERT INTO events (conversation_id, seq, name, payload) VALUES (?,?,?,?)",
                          conversation_id, seq, name, _dumps(payload))
            if gone:
                yield execute(f"DELETE FROM messages WHERE conversation_id = ? AND id {d.any_of}", conversation_id, d.array(gone))
            if msgs:
                yield executemany("INSERT INTO messages (conversation_id, id, seq, data) VALUES (?,?,?,?)",
                                  [(conversation_id, m["id"], seq, _dumps(m)) for m in msgs])
            if idempotency:
                yield self._put_ack(conversation_id, *idempotency)
            if offer is not None:
                yield execute(d.put_offer, conversation_id, offer["message_id"], offer["call_id"], _dumps(offer["actions"]),
                              offer["note"])
            return seq

        return await self._perform(go)

    async def events_after(self, conversation_id: str, seq: int, limit: int | None = None) -> list[tuple[int, str, dict[str, Any]]]:
        """The stored events after ``seq``, in order: ``(seq, name, payload)``; at most ``limit`` of them."""
        sql = "SELECT seq, name, payload FROM events WHERE conversation_id = ? AND seq > ? ORDER BY seq"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        rows = await self._one(fetch(sql, conversation_id, seq), READ)
        return [(r[0], r[1], json.loads(r[2])) for r in rows]

    # -- state --------------------------------------------------------------------------------
    async def get_state(self, conversation_id: str) -> dict[str, Any]:
        """The state document (``KeyError``: no such conversation)."""
        text = await self._one(fetchval("SELECT state FROM conversations WHERE id = ?", conversation_id), READ)
        if text is None:
            raise KeyError(conversation_id)
        return json.loads(text)

    async def save_state(self, conversation_id: str, doc: dict[str, Any], idempotency: Ack | None = None) -> None:
        """Replace the state document (and store the ack) atomically."""
        text = _dumps(doc)
        now = time.time()

        def go() -> Body[None]:
            if not (yield execute("UPDATE conversations SET state = ?, updated_at = ? WHERE id = ?", text, now, conversation_id)):
                raise KeyError(conversation_id)
            if idempotency:
                yield self._put_ack(conversation_id, *idempotency)

        await self._perform(go)

    async def update_state(self, conversation_id: str, fn: Callable[[dict[str, Any]], dict[str, Any]],
                           idempotency: Ack, active_sid: str | None = None) -> dict[str, Any] | None:
        """Atomically: the ack already stored under the idempotency key (nothing written), or
        ``NotActive`` when ``active_sid`` is given and is not the active client, or the state replaced
        by ``fn(state)`` (which may raise: nothing written) with the ack stored; None then."""
        key, ack = idempotency[0], idempotency[1]
        kind = idempotency[2] if len(idempotency) > 2 else None  # type: ignore[misc]
        now = time.time()

        def go() -> Body[dict[str, Any] | None]:
            # The row first: its lock makes a second process with the same key wait, then see the ack.
            row = yield fetchrow(f"SELECT state, active_sid FROM conversations WHERE id = ?{self.dialect.lock}", conversation_id)
            stored = _ack_of((yield fetchrow("SELECT ack, kind FROM idempotency WHERE conversation_id = ? AND key = ?",
                                             conversation_id, key)), kind)
            if stored is not None:
                return stored
            if row is None:
                raise KeyError(conversation_id)
            if active_sid is not None and row[1] != active_sid:
                raise NotActive(conversation_id)
            new = fn(json.loads(row[0]))
            yield execute("UPDATE conversations SET state = ?, updated_at = ? WHERE id = ?", _dumps(new), now, conversation_id)
            yield self._put_ack(conversation_id, key, ack, kind)
            return None

        return await self._perform(go)

    # -- idempotency --------------------------------------------------------------------------
    async def get_ack(self, conversation_id: str, key: str, kind: str | None = None) -> dict[str, Any] | None:
        """The ack stored under an idempotency key, or None; ``IdempotencyConflict`` when it acknowledges a
        write of another ``kind`` (None: any kind)."""
        row = await self._one(fetchrow("SELECT ack, kind FROM idempotency WHERE conversation_id = ? AND key = ?",
                                       conversation_id, key), READ)
        return _ack_of(row, kind)

    async def put_ack(self, conversation_id: str, key: str, ack: dict[str, Any], kind: str | None = None) -> None:
        """Store an ack under an idempotency key (the first one stored stays)."""
        await self._one(self._put_ack(conversation_id, key, ack, kind))

    async def expire_acks(self, before: float) -> int:
        """Forget the acks stored before ``before`` (a timestamp); how many."""
        return await self._one(execute("DELETE FROM idempotency WHERE created_at < ?", before))

    # -- function calls -----------------------------------------------------------------------
    async def add_calls(self, conversation_id: str, turn_id: str, calls: list[dict[str, Any]]) -> None:
        """Store calls ``{id, name, kind, arguments}``, pending — or already finished when a call has a
        ``status`` (with ``result``/``error``/``handler_ms``/``total_ms``): a call the relay ran itself."""
        now = time.time()
        rows = []
        for c in calls:
            status = c.get("status", CALL_PENDING)
            rows.append((conversation_id, c["id"], turn_id, c["name"], c.get("kind", "function"), _dumps(c["arguments"]),
                         c.get("seq", 0), status, _json_or_none(c.get("result")), c.get("error"),
                         c.get("handler_ms"), c.get("total_ms"), now, None if status == CALL_PENDING else now))
        await self._one(executemany(
            "INSERT INTO calls (conversation_id, id, turn_id, name, kind, arguments, seq, status, result, error,"
            " handler_ms, total_ms, created_at, finished_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows))

    async def set_call_seq(self, conversation_id: str, call_id: str, seq: int) -> None:
        """Record the seq of the event that announced a call."""
        await self._one(execute("UPDATE calls SET seq = ? WHERE conversation_id = ? AND id = ?", seq, conversation_id, call_id))

    async def get_call(self, conversation_id: str, call_id: str) -> dict[str, Any] | None:
        """The call, or None."""
        row = await self._one(fetchrow(f"{_CALL_SQL} WHERE conversation_id = ? AND id = ?", conversation_id, call_id), READ)
        return _call_row(row) if row else None

    async def pending_calls(self, conversation_id: str) -> list[dict[str, Any]]:
        """The pending calls, by seq."""
        rows = await self._one(fetch(f"{_CALL_SQL} WHERE conversation_id = ? AND status = ? ORDER BY seq",
                                     conversation_id, CALL_PENDING), READ)
        return [_call_row(r) for r in rows]

    async def turn_calls(self, conversation_id: str, turn_id: str) -> list[dict[str, Any]]:
        """Every call of one turn (any status), in the order they were made."""
        rows = await self._one(fetch(f"{_CALL_SQL} WHERE conversation_id = ? AND turn_id = ? ORDER BY {self.dialect.call_order}",
                                     conversation_id, turn_id), READ)
        return [_call_row(r) for r in rows]

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
        now = time.time()
        message = {"t": "call", "c": conversation_id, "id": call_id}

        def go() -> Body[bool]:
            changed = yield execute(
                "UPDATE calls SET status = ?, result = ?, error = ?, handler_ms = ?, total_ms = ?, finished_at = ?"
                " WHERE conversation_id = ? AND id = ? AND status = ?",
                status, _json_or_none(result), error, handler_ms, total_ms, now, conversation_id, call_id, CALL_PENDING)
            if not changed:
                return False
            if idempotency:
                yield self._put_ack(conversation_id, *idempotency)
            for q in self._notify_sql(message):
                yield q
            return True

        done = await self._perform(go)
        if done:
            self._fire(message)
        return done

    async def record_refused(self, conversation_id: str, kind: str, payload: Any, reason: str) -> None:
        """Keep a bounded excerpt of a refused write (``refused_excerpt``) and why."""
        await self._one(execute("INSERT INTO refused (conversation_id, kind, payload, reason, created_at) VALUES (?,?,?,?,?)",
                                conversation_id, kind, _dumps(refused_excerpt(payload)), _clean_text(reason, 200), time.time()))

    async def refused(self, conversation_id: str) -> list[dict[str, Any]]:
        """The refused writes recorded, in order."""
        rows = await self._one(fetch("SELECT kind, payload, reason, created_at FROM refused WHERE conversation_id = ?"
                                     f" ORDER BY {self.dialect.order}", conversation_id), READ)
        return [{"kind": r[0], "payload": json.loads(r[1]), "reason": r[2], "created_at": r[3]} for r in rows]

    # -- offered actions (seed 002, D7) ---------------------------------------------------------
    async def get_offers(self, conversation_id: str) -> dict[str, dict[str, Any]]:
        """Every stored offer, by the id of the assistant message it was made on."""
        rows = await self._one(fetch("SELECT message_id, call_id, actions, note FROM offers WHERE conversation_id = ?",
                                     conversation_id), READ)
        return {r[0]: _offer_row(r) for r in rows}

    async def get_offer(self, conversation_id: str, message_id: str) -> dict[str, Any] | None:
        """The offer made on a message that is still part of the conversation (not withdrawn)."""
        row = await self._one(fetchrow(
            "SELECT o.message_id, o.call_id, o.actions, o.note FROM offers o WHERE o.conversation_id = ? AND o.message_id = ?"
            " AND EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = o.conversation_id AND m.id = o.message_id)",
            conversation_id, message_id), READ)
        return _offer_row(row) if row else None

    async def action_succeeded(self, conversation_id: str, action_id: str) -> bool:
        """Whether a stored ``action`` message records a successful outcome of that action."""
        return await self._one(fetchval(self.dialect.action_ok, conversation_id, action_id), READ) is not None

    # -- ask-user prompts ---------------------------------------------------------------------
    async def add_prompts(self, conversation_id: str, turn_id: str, prompts: list[dict[str, Any]]) -> None:
        """Store ask-user prompts, pending, in their order."""
        await self._one(executemany(
            "INSERT INTO prompts (conversation_id, id, turn_id, prompt, status, pos) VALUES (?,?,?,?,?,?)",
            [(conversation_id, p["id"], turn_id, _dumps(p), CALL_PENDING, i) for i, p in enumerate(prompts)]))

    async def pending_prompts(self, conversation_id: str) -> list[dict[str, Any]]:
        """The pending prompts, in the order they were stored."""
        rows = await self._one(fetch("SELECT prompt FROM prompts WHERE conversation_id = ? AND status = ?"
                                     f" ORDER BY {self.dialect.order}", conversation_id, CALL_PENDING), READ)
        return [json.loads(r[0]) for r in rows]

    async def prompt_statuses(self, conversation_id: str, prompt_ids: Iterable[str]) -> dict[str, str]:
        """The status of each known prompt among ``prompt_ids`` (unknown ids are absent)."""
        d = self.dialect
        rows = await self._one(fetch(f"SELECT id, status FROM prompts WHERE conversation_id = ? AND id {d.any_of}",
                                     conversation_id, d.array(list(prompt_ids))), READ)
        return {r[0]: r[1] for r in rows}

    async def answer_prompts(self, conversation_id: str, answers: list[tuple[str, Any]], idempotency: Ack | None = None) -> bool:
        """Store every ``(prompt_id, answer)`` and the ack in one transaction, or nothing (and False)
        when any of those prompts is not pending."""
        class _NotPending(Exception):
            pass

        def go() -> Body[None]:
            for pid, answer in answers:
                if not (yield execute("UPDATE prompts SET status = ?, answer = ?"
                                      " WHERE conversation_id = ? AND id = ? AND status = ?",
                                      CALL_ANSWERED, _dumps(answer), conversation_id, pid, CALL_PENDING)):
                    raise _NotPending  # rolls the whole write back
            if idempotency:
                yield self._put_ack(conversation_id, *idempotency)

        try:
            await self._perform(go)
        except _NotPending:
            return False
        return True

    async def take_answers(self, conversation_id: str) -> list[tuple[dict[str, Any], Any]]:
        """Answered prompts not taken yet, marked taken: the answers a suspended turn resumes with."""
        # One UPDATE ... RETURNING: two processes resuming at once cannot both take an answer.
        rows = await self._one(fetch(
            "UPDATE prompts SET status = ? WHERE conversation_id = ? AND status = ?"
            f" RETURNING prompt, answer, {self.dialect.order}", PROMPT_TAKEN, conversation_id, CALL_ANSWERED))
        return [(json.loads(p), json.loads(a)) for p, a, _n in sorted(rows, key=lambda r: r[2])]

    async def cancel_prompts(self, conversation_id: str) -> int:
        """Cancel the pending prompts; how many."""
        cancelled: int = await self._one(execute("UPDATE prompts SET status = ? WHERE conversation_id = ? AND status = ?",
                                                 CALL_CANCELLED, conversation_id, CALL_PENDING))
        return cancelled

    # -- conditional writes (several processes may race for the same transition) ---------------
    async def claim_status(self, conversation_id: str, expected: Iterable[str], *, runner_was: Any = ...,
                           **fields: Any) -> bool:
        """Update ``fields`` only while the status is one of ``expected`` (and, when given, the
        ``runner`` is ``runner_was``); whether it did."""
        _check_updatable(fields)
        d = self.dialect
        sets = "".join(f", {k} = ?" for k in fields)
        where = f"id = ? AND status {d.any_of}"
        args: list[Any] = [time.time(), *fields.values(), conversation_id, d.array(list(expected))]
        if runner_was is not ...:
            where += f" AND runner {d.same} ?"
            args.append(runner_was)
        changed: int = await self._one(execute(f"UPDATE conversations SET updated_at = ?{sets} WHERE {where}", *args))
        return changed > 0

    # -- presence: relay instances, joined sockets, the active client, call dispatch ------------
    async def heartbeat(self, instance: str) -> None:
        """Mark a relay instance alive now."""
        await self._one(execute("INSERT INTO instances (id, heartbeat_at) VALUES (?, ?)"
                                " ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at", instance, time.time()))

    async def forget_instance(self, instance: str) -> None:
        """A relay instance stops: it is dead at once, its sockets are gone."""
        def go() -> Body[None]:
            yield execute("UPDATE conversations SET active_sid = NULL"
                          " WHERE active_sid IN (SELECT sid FROM members WHERE instance = ?)", instance)
            yield execute("DELETE FROM members WHERE instance = ?", instance)
            yield execute("DELETE FROM instances WHERE id = ?", instance)

        await self._perform(go)

    async def instance_alive(self, instance: str) -> bool:
        """Whether the instance's heartbeat is recent (``INSTANCE_TTL_S``)."""
        since = time.time() - INSTANCE_TTL_S
        return await self._one(fetchval("SELECT 1 FROM instances WHERE id = ? AND heartbeat_at > ?", instance, since),
                               READ) is not None

    async def add_member(self, conversation_id: str, sid: str, instance: str) -> None:
        """A socket joined a conversation (on ``instance``)."""
        await self._one(execute(self.dialect.put_member, sid, conversation_id, instance, time.time()))

    async def remove_member(self, sid: str) -> None:
        """A socket left: forget it, and it is no longer any conversation's active client."""
        def go() -> Body[None]:
            yield execute("DELETE FROM members WHERE sid = ?", sid)
            yield execute("UPDATE conversations SET active_sid = NULL WHERE active_sid = ?", sid)

        await self._perform(go)

    async def release_active(self, conversation_id: str, sid: str) -> None:
        """``sid`` left the conversation for another one: it is no longer its active client."""
        await self._one(execute("UPDATE conversations SET active_sid = NULL WHERE id = ? AND active_sid = ?",
                                conversation_id, sid))

    async def set_active(self, conversation_id: str, sid: str) -> str | None:
        """Make ``sid`` the active client; the previous one."""
        def go() -> Body[str | None]:
            row = yield fetchrow(f"SELECT active_sid FROM conversations WHERE id = ?{self.dialect.lock}", conversation_id)
            if row is None:
                raise KeyError(conversation_id)
            yield execute("UPDATE conversations SET active_sid = ? WHERE id = ?", sid, conversation_id)
            return row[0]

        return await self._perform(go)

    async def claim_call(self, conversation_id: str, call_id: str, sid: str | None = None) -> str | None:
        """Dispatch a pending call to ``sid`` (None: to the active client) unless it is dispatched to
        another socket that is still joined on a live instance. Returns the socket the call is
        dispatched to afterwards (None: to nobody, or the call is not pending). A socket that joined
        another conversation since holds none of this one's calls."""
        since = time.time() - INSTANCE_TTL_S

        def go() -> Body[str | None]:
            row = yield fetchrow(f"SELECT status, dispatched_to FROM calls WHERE conversation_id = ? AND id = ?{self.dialect.lock}",
                                 conversation_id, call_id)
            if row is None or row[0] != CALL_PENDING:
                return None
            owner = row[1]
            want = sid
            if want is None:
                want = yield fetchval("SELECT active_sid FROM conversations WHERE id = ?", conversation_id)
            if owner is not None and (owner == want or (yield fetchval(
                    "SELECT 1 FROM members m JOIN instances i ON i.id = m.instance"
                    " WHERE m.sid = ? AND m.conversation_id = ? AND i.heartbeat_at > ?",
                    owner, conversation_id, since)) is not None):
                return owner
            if want is None:
                return None
            yield execute("UPDATE calls SET dispatched_to = ? WHERE conversation_id = ? AND id = ?", want, conversation_id, call_id)
            return want

        return await self._perform(go)


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
    # the reader's thumbs up/down on an answer (widget.relay.feedback)
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
    array=_dumps,
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

    async def _perform(self, body: Callable[[], Body[T]], mode: str = WRITE) -> T:
        """A ``READ`` is a read job; a ``WRITE`` (and a ``SNAPSHOT``: one transaction is a consistent read)
        a write job, in its own savepoint of the batch's transaction and resolved once committed."""
        if self._worker is None:
            raise RuntimeError("store is not open")
        kind = _READ if mode == READ else _WRITE
        return await self._worker.submit(kind, lambda db: drive(body(), lambda q: _sqlite_step(db, q)))  # type: ignore[no-any-return]

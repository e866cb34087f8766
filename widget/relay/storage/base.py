"""What every store shares below ``Store``: statuses, records, the engine's part and the prompt and
presence operations (``widget.relay.storage.store`` puts them together; import from there)."""

from __future__ import annotations

import abc
import json
import time
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, TypedDict, TypeVar

from ...protocol import CallState, Event
from ...protocol.messages import AskUserPrompt
from .sql import READ, WRITE, Body, Dialect, Q, execute, executemany, fetch, fetchrow, fetchval

T = TypeVar("T")
#: ``(idempotency key, ack)`` or ``(key, ack, kind)``: the ack stored under the key, for writes of one kind
#: (the client → relay event name; a key reused by a write of another kind is ``IdempotencyConflict``).
Ack = tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str]

#: A stored ask-user prompt whose answers a resumed turn has taken (stored only).
PROMPT_TAKEN = "taken"

#: Events of a model round whose content the stored messages reflect only from the round's
#: ``completion.ended`` on (it stores the assistant message and its tool results together).
UNCOMMITTED_EVENTS = frozenset(
    {Event.COMPLETION_STARTED, Event.COMPLETION_STREAM, Event.FUNCTION_CALL_BEGIN, Event.FUNCTION_CALL_END}
)


class UsageRow(TypedDict):
    """What one model round cost (the ``usage`` table, the turn log's ``usage``); ``None``: the provider did not say."""

    #: The turn's round, from 0.
    step: int
    #: The ``[models.<name>]`` entry that answered.
    model: str
    input_tokens: int | None
    output_tokens: int | None
    #: Input tokens read from the provider's prompt cache (part of ``input_tokens``).
    cached_input_tokens: int | None
    #: Input tokens written to the provider's prompt cache (part of ``input_tokens``): in the turn log, not stored.
    cache_write_tokens: int | None
    #: Output tokens spent on reasoning the reader never sees (part of ``output_tokens``).
    reasoning_tokens: int | None


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
    ack: dict[str, Any] = json.loads(row[0])
    return ack


class NotActive(Exception):
    """A state write from a socket that is not the conversation's active client."""


def compact_json(value: Any) -> str:
    """``value`` as the store writes JSON: compact, UTF-8 as is."""
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


_CONV_COLUMNS = ("id", "app_id", "status", "created_at", "updated_at", "seq", "msg_seq", "turn_id", "iteration",
                 "runner",
                 "active_sid")
_UPDATABLE = {"status", "turn_id", "iteration", "runner"}
_CALL_COLUMNS = ("id", "turn_id", "name", "kind", "arguments", "seq", "status", "result", "error",
                 "duration_ms", "total_ms", "created_at", "finished_at", "dispatched_to")
_TABLES = ("messages", "events", "idempotency", "calls", "refused", "prompts", "offers", "members", "feedback", "usage")

_CONV_SQL = f"SELECT {', '.join(_CONV_COLUMNS)} FROM conversations WHERE id = ?"
_CALL_SQL = f"SELECT {', '.join(_CALL_COLUMNS)} FROM calls"


def _check_updatable(fields: Iterable[str]) -> None:
    """Only these conversation columns are written from outside (the others are the store's own)."""
    bad = set(fields) - _UPDATABLE
    if bad:
        raise ValueError(f"cannot update {bad}")


def _json_or_none(value: Any) -> str | None:
    return compact_json(value) if value is not None else None


def _conv_row(row: Any) -> dict[str, Any] | None:
    return dict(zip(_CONV_COLUMNS, row, strict=True)) if row else None


def _call_row(row: Any) -> dict[str, Any]:
    d = dict(zip(_CALL_COLUMNS, row, strict=True))
    d["arguments"] = json.loads(d["arguments"])
    d["result"] = json.loads(d["result"]) if d["result"] is not None else None
    return d


def _offer_row(row: Any) -> dict[str, Any]:
    return {"message_id": row[0], "call_id": row[1], "actions": json.loads(row[2]), "note": row[3]}


class _Engine(abc.ABC):
    """What the relay needs from storage, written once over an SQL engine. Conversations are dicts with
    the keys ``id, app_id, status, created_at, updated_at, seq, msg_seq, turn_id, iteration, runner,
    active_sid``; ``msg_seq`` is the highest seq whose content the stored messages reflect (events of a
    message still streaming are not); ``runner`` is the relay instance running its turn; ``active_sid``
    the active client's socket.

    Signals: ``signal(message)`` reaches the listeners of every relay process sharing the store (this
    one included); ``finish_call`` signals ``{"t": "call", "c", "id"}`` once its write is committed.
    They only wake waiters up early: whoever waits re-reads the store, and polls it as a fallback.

    An engine gives ``perform`` (how a body of statements runs: connection, transaction, retries) and a
    ``dialect`` (where its SQL differs); every operation below is a body (``widget.relay.storage.sql``)."""

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
    async def perform(self, body: Callable[[], Body[T]], mode: str = WRITE) -> T:
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

        return await self.perform(go, mode)

    def _put_ack(self, conversation_id: str, key: str, ack: dict[str, Any], kind: str | None = None) -> Q:
        return execute(self.dialect.put_ack, conversation_id, key, compact_json(ack), time.time(), kind)

    # -- signals ------------------------------------------------------------------------------
    def add_listener(self, fn: Callable[[dict[str, Any]], None]) -> None:
        """Call ``fn(message)`` for every signal (of any process sharing the store)."""
        self._listeners.append(fn)

    def _fire(self, message: dict[str, Any]) -> None:
        for fn in list(self._listeners):
            try:
                fn(message)
            except Exception:
                import logging

                logging.getLogger("widget.relay").exception("store listener failed")

    async def signal(self, message: dict[str, Any]) -> None:
        """Deliver ``message`` to the listeners of every process sharing the store."""
        self._fire(message)


class _Prompts(_Engine):
    """Offered actions and ask-user prompts."""

    # -- offered actions (docs/tools.md, D7) ---------------------------------------------------------
    async def get_offers(self, conversation_id: str) -> dict[str, dict[str, Any]]:
        """Every stored offer, by the id of the assistant message it was made on."""
        rows = await self._one(fetch("SELECT message_id, call_id, actions, note FROM offers WHERE conversation_id = ?",
                                     conversation_id), READ)
        return {r[0]: _offer_row(r) for r in rows}

    async def get_offer(self, conversation_id: str, message_id: str) -> dict[str, Any] | None:
        """The offer made on a message that is still part of the conversation (not withdrawn)."""
        row = await self._one(fetchrow(
            "SELECT o.message_id, o.call_id, o.actions, o.note FROM offers o WHERE o.conversation_id = ? AND "
            "o.message_id = ?"
            " AND EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = o.conversation_id AND m.id = "
            "o.message_id)",
            conversation_id, message_id), READ)
        return _offer_row(row) if row else None

    async def action_succeeded(self, conversation_id: str, action_id: str) -> bool:
        """Whether a stored ``action`` message records a successful outcome of that action."""
        return await self._one(fetchval(self.dialect.action_ok, conversation_id, action_id), READ) is not None

    # -- ask-user prompts ---------------------------------------------------------------------
    async def add_prompts(self, conversation_id: str, turn_id: str, prompts: list[AskUserPrompt]) -> None:
        """Store ask-user prompts, pending, in their order."""
        await self._one(executemany(
            "INSERT INTO prompts (conversation_id, id, turn_id, prompt, status, pos) VALUES (?,?,?,?,?,?)",
            [(conversation_id, p["id"], turn_id, compact_json(p), CallState.PENDING, i)
             for i, p in enumerate(prompts)]))

    async def pending_prompts(self, conversation_id: str) -> list[dict[str, Any]]:
        """The pending prompts, in the order they were stored."""
        rows = await self._one(fetch("SELECT prompt FROM prompts WHERE conversation_id = ? AND status = ?"
                                     f" ORDER BY {self.dialect.order}", conversation_id, CallState.PENDING), READ)
        return [json.loads(r[0]) for r in rows]

    async def prompt_statuses(self, conversation_id: str, prompt_ids: Iterable[str]) -> dict[str, str]:
        """The status of each known prompt among ``prompt_ids`` (unknown ids are absent)."""
        d = self.dialect
        rows = await self._one(fetch(f"SELECT id, status FROM prompts WHERE conversation_id = ? AND id {d.any_of}",
                                     conversation_id, d.array(list(prompt_ids))), READ)
        return {r[0]: r[1] for r in rows}

    async def answer_prompts(self, conversation_id: str,
                             answers: list[tuple[str, Any]], idempotency: Ack | None = None) -> bool:
        """Store every ``(prompt_id, answer)`` and the ack in one transaction, or nothing (and False)
        when any of those prompts is not pending."""
        class _NotPending(Exception):
            pass

        def go() -> Body[None]:
            for pid, answer in answers:
                if not (yield execute("UPDATE prompts SET status = ?, answer = ?"
                                      " WHERE conversation_id = ? AND id = ? AND status = ?",
                                      CallState.ANSWERED, compact_json(answer), conversation_id, pid,
                                      CallState.PENDING)):
                    raise _NotPending  # rolls the whole write back
            if idempotency:
                yield self._put_ack(conversation_id, *idempotency)

        try:
            await self.perform(go)
        except _NotPending:
            return False
        return True

    async def take_answers(self, conversation_id: str) -> list[tuple[dict[str, Any], Any]]:
        """Answered prompts not taken yet, marked taken: the answers a suspended turn resumes with."""
        # One UPDATE ... RETURNING: two processes resuming at once cannot both take an answer.
        rows = await self._one(fetch(
            "UPDATE prompts SET status = ? WHERE conversation_id = ? AND status = ?"
            f" RETURNING prompt, answer, {self.dialect.order}", PROMPT_TAKEN, conversation_id, CallState.ANSWERED))
        return [(json.loads(p), json.loads(a)) for p, a, _n in sorted(rows, key=lambda r: r[2])]

    async def cancel_prompts(self, conversation_id: str) -> int:
        """Cancel the pending prompts; how many."""
        cancelled: int = await self._one(execute("UPDATE prompts SET status = ? WHERE conversation_id = ? AND status "
                                                 "= ?",
                                                 CallState.CANCELLED, conversation_id, CallState.PENDING))
        return cancelled


class _Presence(_Engine):
    """Conditional status writes and presence: relay instances, joined sockets, the active client, call dispatch."""

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
                                " ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at", instance,
                                time.time()))

    async def forget_instance(self, instance: str) -> None:
        """A relay instance stops: it is dead at once, its sockets are gone."""
        def go() -> Body[None]:
            yield execute("UPDATE conversations SET active_sid = NULL"
                          " WHERE active_sid IN (SELECT sid FROM members WHERE instance = ?)", instance)
            yield execute("DELETE FROM members WHERE instance = ?", instance)
            yield execute("DELETE FROM instances WHERE id = ?", instance)

        await self.perform(go)

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
            # The conversation's row first, then its members, as deleting a conversation and forgetting an instance
            # lock them: in the other order PostgreSQL found a deadlock with a DELETE of the conversation just left.
            yield execute("UPDATE conversations SET active_sid = NULL WHERE active_sid = ?", sid)
            yield execute("DELETE FROM members WHERE sid = ?", sid)

        await self.perform(go)

    async def release_active(self, conversation_id: str, sid: str) -> None:
        """``sid`` left the conversation for another one: it is no longer its active client."""
        await self._one(execute("UPDATE conversations SET active_sid = NULL WHERE id = ? AND active_sid = ?",
                                conversation_id, sid))

    async def set_active(self, conversation_id: str, sid: str) -> str | None:
        """Make ``sid`` the active client; the previous one."""
        def go() -> Body[str | None]:
            row = yield fetchrow(f"SELECT active_sid FROM conversations WHERE id = ?{self.dialect.lock}",
                                 conversation_id)
            if row is None:
                raise KeyError(conversation_id)
            yield execute("UPDATE conversations SET active_sid = ? WHERE id = ?", sid, conversation_id)
            previous: str | None = row[0]
            return previous

        return await self.perform(go)

    async def claim_call(self, conversation_id: str, call_id: str, sid: str | None = None) -> str | None:
        """Dispatch a pending call to ``sid`` (None: to the active client) unless it is dispatched to
        another socket that is still joined on a live instance. Returns the socket the call is
        dispatched to afterwards (None: to nobody, or the call is not pending). A socket that joined
        another conversation since holds none of this one's calls."""
        since = time.time() - INSTANCE_TTL_S

        def go() -> Body[str | None]:
            row = yield fetchrow("SELECT status, dispatched_to FROM calls WHERE conversation_id = ? AND id = "
                                 f"?{self.dialect.lock}",
                                 conversation_id, call_id)
            if row is None or row[0] != CallState.PENDING:
                return None
            owner: str | None = row[1]
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
            yield execute("UPDATE calls SET dispatched_to = ? WHERE conversation_id = ? AND id = ?", want,
                          conversation_id, call_id)
            return want

        return await self.perform(go)

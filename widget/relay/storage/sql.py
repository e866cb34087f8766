"""The one seam between the relay stores' shared logic (``storage.Store``) and their engines.

A store operation is written once, as a generator (a *body*) that yields statements (``Q``) and gets each
one's result back; it holds no connection and does no I/O. Each engine runs bodies its own way —
``SQLiteStore`` synchronously on its worker thread (inside the batch's savepoint), ``PostgresStore`` by
awaiting asyncpg inside its retrying transaction — and says where its SQL differs in a ``Dialect``.
Statements use ``?`` placeholders (PostgreSQL's are numbered when it runs them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")

#: How a store runs a body: ``WRITE`` atomically (nothing written when the body raises), ``READ`` as a
#: read (one statement: no transaction needed), ``SNAPSHOT`` as several reads that see one state.
READ, WRITE, SNAPSHOT = "read", "write", "snapshot"


class Q(NamedTuple):
    """One statement and what the body wants back (see the constructors below)."""

    kind: str
    sql: str
    args: tuple[Any, ...]


#: A store operation: yields statements, receives their results, returns its own.
Body = Generator[Q, Any, T]


def execute(sql: str, *args: Any) -> Q:
    """A statement whose result is the number of rows it changed."""
    return Q("execute", sql, args)


def executemany(sql: str, rows: list[tuple[Any, ...]]) -> Q:
    """One statement run for each of ``rows``; no result."""
    return Q("executemany", sql, (rows,))


def fetch(sql: str, *args: Any) -> Q:
    """A query whose result is its rows (indexable)."""
    return Q("fetch", sql, args)


def fetchrow(sql: str, *args: Any) -> Q:
    """A query whose result is its first row, or None."""
    return Q("fetchrow", sql, args)


def fetchval(sql: str, *args: Any) -> Q:
    """A query whose result is the first column of its first row, or None when there is no row."""
    return Q("fetchval", sql, args)


def drive(body: Body[T], step: Callable[[Q], Any]) -> T:
    """Run ``body`` to its end, each statement by ``step`` (a synchronous engine)."""
    try:
        q = next(body)
        while True:
            q = body.send(step(q))
    except StopIteration as stop:
        result: T = stop.value
        return result
    finally:
        body.close()  # a failed statement leaves the body suspended: end it now, not at garbage collection


async def drive_async(body: Body[T], step: Callable[[Q], Awaitable[Any]]) -> T:
    """Run ``body`` to its end, each statement awaited by ``step`` (an asynchronous engine)."""
    try:
        q = next(body)
        while True:
            q = body.send(await step(q))
    except StopIteration as stop:
        result: T = stop.value
        return result
    finally:
        body.close()


@dataclass(frozen=True)
class Dialect:
    """Where an engine's SQL differs from the statements the shared logic writes itself."""

    #: Appended to a SELECT of a row the transaction goes on to write: locks it against other processes.
    lock: str
    #: The column that keeps insertion order in the ``refused`` and ``prompts`` tables.
    order: str
    #: ORDER BY of a turn's calls (created, then seq, then insertion where the engine keeps it).
    call_order: str
    #: Equality that holds for two NULLs.
    same: str
    #: ``<column> <any_of>``: the column's value is one of the strings of one parameter, ``array(values)``.
    any_of: str
    array: Callable[[list[str]], Any]
    #: Store an idempotency ack ``(conversation_id, key, ack, created_at)`` unless the key is stored.
    put_ack: str
    #: Store or replace an offer ``(conversation_id, message_id, call_id, actions, note)``.
    put_offer: str
    #: Store or replace a member ``(sid, conversation_id, instance, joined_at)``.
    put_member: str
    #: Whether a stored ``action`` message ``(conversation_id, action_id)`` says the action succeeded.
    action_ok: str

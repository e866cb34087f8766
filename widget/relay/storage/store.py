"""Relay storage: the async ``Store`` (the interface, its logic written once over SQL); engines in
``widget.relay.storage.sqlite`` and ``widget.relay.storage.postgres``.

The store is the source of truth: conversations, messages, sequenced events (for replay), the state
document, idempotency keys with their stored acks, function calls and ask-user prompts, and — so that
several relay processes can serve one conversation (docs/deployment.md) — which socket is the active
client, which socket a call was dispatched to, which sockets are joined where and which relay processes
are alive. Every method is async; ``SQLiteStore`` (``widget.relay.storage.sqlite``, the embedded default, one
process) and ``PostgresStore`` (``widget.relay.storage.postgres``, several processes) implement the same interface
and pass the same tests (tests/test_relay_store.py). ``Store`` holds everything they share — validation, record
shaping, sequencing, JSON — as bodies of statements (``widget.relay.storage.sql``); an engine only runs them
(connection, transactions) and names its SQL where it differs (a ``Dialect``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from ...protocol.names import CallState, ConversationStatus, Event
from .base import (  # the shared names: import them from here
    _CALL_SQL,
    _CONV_SQL,
    _TABLES,
    INSTANCE_TTL_S,
    PROMPT_TAKEN,
    REFUSED_MAX_FIELDS,
    REFUSED_MAX_VALUE_CHARS,
    UNCOMMITTED_EVENTS,
    Ack,
    IdempotencyConflict,
    NotActive,
    StatusConflict,
    UsageRow,
    _ack_of,
    _call_row,
    _check_updatable,
    _clean_text,
    _conv_row,
    _json_or_none,
    _Presence,
    _Prompts,
    compact_json,
    refused_excerpt,
)
from .sql import READ, SNAPSHOT, Body, execute, executemany, fetch, fetchrow, fetchval

#: The streamed-chunk event, and the storage-only name of a packed run of them (never sent: replay unpacks it).
STREAM_EVENT: str = Event.COMPLETION_STREAM.value
PACKED_STREAM = "completion_stream.packed"

__all__ = ["Ack", "INSTANCE_TTL_S", "IdempotencyConflict", "NotActive", "PROMPT_TAKEN", "REFUSED_MAX_FIELDS",
           "REFUSED_MAX_VALUE_CHARS", "StatusConflict", "Store", "UNCOMMITTED_EVENTS", "compact_json",
           "refused_excerpt"]


class Store(_Presence, _Prompts):
    """What the relay needs from storage (see ``_Engine`` for how an engine runs it): conversations, events,
    state, idempotency and function calls here; prompts and presence in the classes it is made of."""

    # -- conversations ------------------------------------------------------------------------
    async def create_conversation(self, conversation_id: str, app_id: str, state: dict[str, Any]) -> dict[str, Any]:
        """Store a new idle conversation with its state document; the conversation."""
        now = time.time()

        def go() -> Body[dict[str, Any]]:
            yield execute("INSERT INTO conversations (id, app_id, status, created_at, updated_at, state) VALUES "
                          "(?,?,?,?,?,?)",
                          conversation_id, app_id, ConversationStatus.IDLE, now, now, compact_json(state))
            conv = _conv_row((yield fetchrow(_CONV_SQL, conversation_id)))
            assert conv is not None
            return conv

        return await self.perform(go)

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
            deleted: int = yield execute("DELETE FROM conversations WHERE id = ?", conversation_id)
            for table in _TABLES:
                yield execute(f"DELETE FROM {table} WHERE conversation_id = ?", conversation_id)
            return deleted > 0

        return await self.perform(go)

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

        return await self.perform(go, SNAPSHOT)

    async def conversations_brief(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """``{id: {seq, status, runner}}`` of those that exist (the hub's poll)."""
        wanted = list(ids)
        if not wanted:
            return {}
        rows = await self._one(fetch("SELECT id, seq, status, runner FROM conversations WHERE id "
                                     f"{self.dialect.any_of}",
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
        the conversation's status is not in it): take the next ``seq``, store the event (``payload["seq"]`` is set,
        and so is the ``seq`` of ``payload["message"]`` when it is a copy of one of ``messages``), delete the messages
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
            seq: int = yield fetchval(f"UPDATE conversations SET {sets} WHERE id = ? RETURNING seq",
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
                          conversation_id, seq, name, compact_json(payload))
            if gone:
                yield execute(f"DELETE FROM messages WHERE conversation_id = ? AND id {d.any_of}", conversation_id,
                              d.array(gone))
            if msgs:
                yield executemany("INSERT INTO messages (conversation_id, id, seq, data) VALUES (?,?,?,?)",
                                  [(conversation_id, m["id"], seq, compact_json(m)) for m in msgs])
            if idempotency:
                yield self._put_ack(conversation_id, *idempotency)
            if offer is not None:
                yield execute(d.put_offer, conversation_id, offer["message_id"], offer["call_id"],
                              compact_json(offer["actions"]),
                              offer["note"])
            return seq

        return await self.perform(go)

    async def events_after(self, conversation_id: str, seq: int,
                           limit: int | None = None) -> list[tuple[int, str, dict[str, Any]]]:
        """The stored events after ``seq``, in order: ``(seq, name, payload)``; at most ``limit`` stored rows (a
        packed run of streamed chunks is one row and comes back as the events it holds, exactly as they went out)."""
        sql = "SELECT seq, name, payload FROM events WHERE conversation_id = ? AND seq > ? ORDER BY seq"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        rows = await self._one(fetch(sql, conversation_id, seq), READ)
        out: list[tuple[int, str, dict[str, Any]]] = []
        for r in rows:
            if r[1] == PACKED_STREAM:
                out += [(s, STREAM_EVENT, p) for s, p in json.loads(r[2])["events"] if s > seq]
            else:
                out.append((r[0], r[1], json.loads(r[2])))
        return out

    async def pack_stream(self, conversation_id: str) -> int:
        """Pack each run of one message's streamed chunks (consecutive seqs) into one stored row, kept at the run's
        last seq, so a long answer costs the event log one row; replay unpacks it into the very same events.
        Returns how many chunk rows were packed. Run once the answers are complete (a turn's end)."""

        def go() -> Body[int]:
            rows = yield fetch("SELECT seq, payload FROM events WHERE conversation_id = ? AND name = ? ORDER BY seq",
                               conversation_id, STREAM_EVENT)
            runs: list[list[tuple[int, dict[str, Any]]]] = []
            for seq, text in rows:
                payload = json.loads(text)
                prev = runs[-1][-1] if runs else None
                if prev is not None and prev[0] == seq - 1 and prev[1].get("message_id") == payload.get("message_id"):
                    runs[-1].append((seq, payload))
                else:
                    runs.append([(seq, payload)])
            packed = 0
            for run in runs:
                if len(run) < 2:
                    continue
                first, last = run[0][0], run[-1][0]  # a run is consecutive seqs, all chunks
                yield execute("DELETE FROM events WHERE conversation_id = ? AND name = ? AND seq >= ? AND seq <= ?",
                              conversation_id, STREAM_EVENT, first, last)
                yield execute("INSERT INTO events (conversation_id, seq, name, payload) VALUES (?,?,?,?)",
                              conversation_id, last, PACKED_STREAM,
                              compact_json({"message_id": run[0][1].get("message_id"),
                                            "events": [[s, p] for s, p in run]}))
                packed += len(run)
            return packed

        return await self.perform(go)

    # -- state --------------------------------------------------------------------------------
    async def get_state(self, conversation_id: str) -> dict[str, Any]:
        """The state document (``KeyError``: no such conversation)."""
        text = await self._one(fetchval("SELECT state FROM conversations WHERE id = ?", conversation_id), READ)
        if text is None:
            raise KeyError(conversation_id)
        state: dict[str, Any] = json.loads(text)
        return state

    async def save_state(self, conversation_id: str, doc: dict[str, Any], idempotency: Ack | None = None) -> None:
        """Replace the state document (and store the ack) atomically."""
        text = compact_json(doc)
        now = time.time()

        def go() -> Body[None]:
            if (not (yield execute("UPDATE conversations SET state = ?, updated_at = ? WHERE id = ?", text, now,
                                   conversation_id))):
                raise KeyError(conversation_id)
            if idempotency:
                yield self._put_ack(conversation_id, *idempotency)

        await self.perform(go)

    async def update_state(self, conversation_id: str, fn: Callable[[dict[str, Any]], dict[str, Any]],
                           idempotency: Ack, active_sid: str | None = None) -> dict[str, Any] | None:
        """Atomically: the ack already stored under the idempotency key (nothing written), or
        ``NotActive`` when ``active_sid`` is given and is not the active client, or the state replaced
        by ``fn(state)`` (which may raise: nothing written) with the ack stored; None then."""
        key, ack = idempotency[0], idempotency[1]
        kind = idempotency[2] if len(idempotency) > 2 else None
        now = time.time()

        def go() -> Body[dict[str, Any] | None]:
            # The row first: its lock makes a second process with the same key wait, then see the ack.
            row = yield fetchrow(f"SELECT state, active_sid FROM conversations WHERE id = ?{self.dialect.lock}",
                                 conversation_id)
            stored = _ack_of((yield fetchrow("SELECT ack, kind FROM idempotency WHERE conversation_id = ? AND key = ?",
                                             conversation_id, key)), kind)
            if stored is not None:
                return stored
            if row is None:
                raise KeyError(conversation_id)
            if active_sid is not None and row[1] != active_sid:
                raise NotActive(conversation_id)
            new = fn(json.loads(row[0]))
            yield execute("UPDATE conversations SET state = ?, updated_at = ? WHERE id = ?", compact_json(new), now,
                          conversation_id)
            yield self._put_ack(conversation_id, key, ack, kind)
            return None

        return await self.perform(go)

    # -- idempotency --------------------------------------------------------------------------
    async def get_ack(self, conversation_id: str, key: str, kind: str | None = None) -> dict[str, Any] | None:
        """The ack stored under an idempotency key, or None; ``IdempotencyConflict`` when it acknowledges a
        write of another ``kind`` (None: any kind)."""
        row = await self._one(fetchrow("SELECT ack, kind FROM idempotency WHERE conversation_id = ? AND key = ?",
                                       conversation_id, key), READ)
        return _ack_of(row, kind)

    async def put_ack(self, conversation_id: str, key: str, ack: dict[str, Any], kind: str | None = None,
                      keep: int = 0) -> None:
        """Store an ack under an idempotency key (the first one stored stays). ``keep`` > 0: of the conversation's
        acks of this ``kind``, only the newest ``keep`` are kept (a client can send any number of fresh keys)."""

        def go() -> Body[None]:
            yield self._put_ack(conversation_id, key, ack, kind)
            if keep > 0 and kind is not None:
                yield execute("DELETE FROM idempotency WHERE conversation_id = ? AND kind = ? AND key NOT IN"
                              " (SELECT key FROM idempotency WHERE conversation_id = ? AND kind = ?"
                              " ORDER BY created_at DESC LIMIT ?)", conversation_id, kind, conversation_id, kind, keep)

        await self.perform(go)

    async def expire_acks(self, before: float) -> int:
        """Forget the acks stored before ``before`` (a timestamp); how many."""
        expired: int = await self._one(execute("DELETE FROM idempotency WHERE created_at < ?", before))
        return expired

    # -- model usage --------------------------------------------------------------------------
    async def add_usage(self, conversation_id: str, turn_id: str, rows: list[UsageRow]) -> None:
        """Store what a turn's model rounds cost (token counts per round; ``stats`` sums them)."""
        now = time.time()
        await self._one(executemany(
            "INSERT INTO usage (conversation_id, turn_id, step, model, input_tokens, output_tokens,"
            " cached_input_tokens, reasoning_tokens, created_at) VALUES (?,?,?,?,?,?,?,?,?)",
            [(conversation_id, turn_id, r["step"], r["model"], r["input_tokens"], r["output_tokens"],
              r["cached_input_tokens"], r["reasoning_tokens"], now) for r in rows]))

    # -- function calls -----------------------------------------------------------------------
    async def add_calls(self, conversation_id: str, turn_id: str, calls: list[dict[str, Any]]) -> None:
        """Store calls ``{id, name, kind, arguments}``, pending — or already finished when a call has a
        ``status`` (with ``result``/``error``/``duration_ms``/``total_ms``): a call the relay ran itself."""
        now = time.time()
        rows = []
        for c in calls:
            status = c.get("status", CallState.PENDING)
            rows.append((conversation_id, c["id"], turn_id, c["name"], c.get("kind", "function"),
                         compact_json(c["arguments"]),
                         c.get("seq", 0), status, _json_or_none(c.get("result")), c.get("error"),
                         c.get("duration_ms"), c.get("total_ms"), now, None if status == CallState.PENDING else now))
        await self._one(executemany(
            "INSERT INTO calls (conversation_id, id, turn_id, name, kind, arguments, seq, status, result, error,"
            " duration_ms, total_ms, created_at, finished_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows))

    async def set_call_seq(self, conversation_id: str, call_id: str, seq: int) -> None:
        """Record the seq of the event that announced a call."""
        await self._one(execute("UPDATE calls SET seq = ? WHERE conversation_id = ? AND id = ?", seq, conversation_id,
                                call_id))

    async def get_call(self, conversation_id: str, call_id: str) -> dict[str, Any] | None:
        """The call, or None."""
        row = await self._one(fetchrow(f"{_CALL_SQL} WHERE conversation_id = ? AND id = ?", conversation_id, call_id),
                              READ)
        return _call_row(row) if row else None

    async def pending_calls(self, conversation_id: str) -> list[dict[str, Any]]:
        """The pending calls, by seq."""
        rows = await self._one(fetch(f"{_CALL_SQL} WHERE conversation_id = ? AND status = ? ORDER BY seq",
                                     conversation_id, CallState.PENDING), READ)
        return [_call_row(r) for r in rows]

    async def turn_calls(self, conversation_id: str, turn_id: str) -> list[dict[str, Any]]:
        """Every call of one turn (any status), in the order they were made."""
        rows = await self._one(fetch(f"{_CALL_SQL} WHERE conversation_id = ? AND turn_id = ? ORDER BY "
                                     f"{self.dialect.call_order}",
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
        duration_ms: float | None = None,
        total_ms: float | None = None,
        idempotency: Ack | None = None,
    ) -> bool:
        """Move a *pending* call to ``status``; False (and nothing written) when it was not pending."""
        now = time.time()
        message = {"t": "call", "c": conversation_id, "id": call_id}

        def go() -> Body[bool]:
            changed = yield execute(
                "UPDATE calls SET status = ?, result = ?, error = ?, duration_ms = ?, total_ms = ?, finished_at = ?"
                " WHERE conversation_id = ? AND id = ? AND status = ?",
                status, _json_or_none(result), error, duration_ms, total_ms, now,
                conversation_id, call_id, CallState.PENDING)
            if not changed:
                return False
            if idempotency:
                yield self._put_ack(conversation_id, *idempotency)
            for q in self._notify_sql(message):
                _ = yield q  # each statement's result comes back in (``yield from`` would send it to the list)
            return True

        done = await self.perform(go)
        if done:
            self._fire(message)
        return done

    async def record_refused(self, conversation_id: str, kind: str, payload: Any, reason: str, keep: int = 0) -> None:
        """Keep a bounded excerpt of a refused write (``refused_excerpt``) and why; ``keep`` > 0: only the
        conversation's newest ``keep`` such records stay."""
        order = self.dialect.order

        def go() -> Body[None]:
            yield execute("INSERT INTO refused (conversation_id, kind, payload, reason, created_at) VALUES (?,?,?,?,?)",
                          conversation_id, kind,
                          compact_json(refused_excerpt(payload)), _clean_text(reason, 200), time.time())
            if keep > 0:
                yield execute(f"DELETE FROM refused WHERE conversation_id = ? AND {order} NOT IN (SELECT {order} FROM"
                              f" refused WHERE conversation_id = ? ORDER BY {order} DESC LIMIT ?)",
                              conversation_id, conversation_id, keep)

        await self.perform(go)

    async def refused(self, conversation_id: str) -> list[dict[str, Any]]:
        """The refused writes recorded, in order."""
        rows = await self._one(fetch("SELECT kind, payload, reason, created_at FROM refused WHERE conversation_id = ?"
                                     f" ORDER BY {self.dialect.order}", conversation_id), READ)
        return [{"kind": r[0], "payload": json.loads(r[1]), "reason": r[2], "created_at": r[3]} for r in rows]

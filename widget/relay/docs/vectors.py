"""Where hybrid docs search keeps its section vectors: the relay's SQLite file or its PostgreSQL database, beside
the BM25 engine's tables (``hybrid_vectors``, ``hybrid_apps``), searched exactly with numpy.

One row per embedded section of an app: the section's fields (key, URL, page title, headings, text, so a hit
found only by its vector is returned without asking the BM25 engine), the page's URL and content hash, a hash
of the text the vectors were made from, the model's id, and the windows' vectors (``float32``, ``windows`` x
``DIMS``, as bytes: a BLOB in SQLite, a ``bytea`` in PostgreSQL). Exact search (every window of the app against
the question) is what documentation sizes need: 10,000 windows are 15 MB and one matrix-vector product of a
millisecond or two; no vector extension is needed on either engine (sqlite-vec's and pgvector's indexes pay off
from about a million vectors). The app's matrix is loaded once into the process and reloaded when the app's
``version`` changes; at most ``max_windows`` windows are loaded (the rest of a larger app is searched by BM25
alone, with a warning).

A run stages its rows under its run id (``run`` set: no search sees them) and ``publish`` makes them live in
one transaction, deleting the rows of the pages it replaced or removed, after the BM25 engine committed; a run
that dies leaves staged rows the next run deletes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

import numpy as np

from .embeddings import DIMS, Vectors
from .pg_pool import LazyPgPool
from .search import DocHit

log = logging.getLogger("widget.relay.docs")
T = TypeVar("T")

#: Windows of one app held in memory for search (4 bytes x ``DIMS`` each: 100,000 windows are 154 MB).
MAX_WINDOWS: Final = 100_000


@dataclass(frozen=True, slots=True)
class VectorRow:
    """One section's vectors as a run stages them."""

    page_url: str
    page_hash: str
    key: str
    url: str
    page_title: str
    headings: list[str]
    body: str
    text_hash: str
    vectors: Vectors


@dataclass(frozen=True, slots=True)
class Matrix:
    """An app's live vectors in memory: every window's vector, and where each section's windows start."""

    version: int
    run: str
    ids: np.ndarray[Any, np.dtype[np.int64]]
    starts: np.ndarray[Any, np.dtype[np.int64]]
    vectors: Vectors
    #: Sections left out by ``max_windows``.
    left_out: int

    def best(self, query: Vectors, n: int) -> list[tuple[int, float]]:
        """The ``n`` sections (row id, cosine of their best window) nearest to a unit query vector."""
        if not len(self.ids):
            return []
        scores = self.vectors @ query
        per_section = np.maximum.reduceat(scores, self.starts)
        n = min(n, len(per_section))
        top = np.argpartition(-per_section, n - 1)[:n]
        top = top[np.argsort(-per_section[top], kind="stable")]
        return [(int(self.ids[i]), float(per_section[i])) for i in top]


def _matrix(version: int, run: str, rows: list[tuple[int, int, bytes]], max_windows: int) -> Matrix:
    ids: list[int] = []
    starts: list[int] = []
    blobs: list[bytes] = []
    total = 0
    for rid, windows, blob in rows:
        if total + windows > max_windows:
            break
        ids.append(rid)
        starts.append(total)
        blobs.append(blob)
        total += windows
    left = len(rows) - len(ids)
    # Every row of one model has the same dimension (DIMS for the local model, the endpoint's own otherwise).
    vectors = (np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(total, -1) if total
               else np.zeros((0, DIMS), dtype=np.float32))
    return Matrix(version, run, np.array(ids, dtype=np.int64), np.array(starts, dtype=np.int64), vectors, left)


class VectorStore(Protocol):
    """One engine's vector tables."""

    async def live_pages(self, app_id: str, model: str) -> dict[str, str]:
        """Every page with live vectors, by URL: its content hash when all its vectors are of ``model`` and of one
        version of the page, else ""."""
        ...

    async def reusable(self, app_id: str, model: str, text_hashes: list[str]) -> dict[str, bytes]:
        """Live vectors of ``model`` made from exactly these texts (by text hash): not embedded again."""
        ...

    async def begin(self, app_id: str) -> None:
        """Delete rows staged by runs that died (the caller holds the app's index lock)."""
        ...

    async def stage(self, app_id: str, run: str, model: str, rows: list[VectorRow]) -> None:
        """Rows of a run, not yet seen by searches."""
        ...

    async def publish(self, app_id: str, run: str, pages: list[str]) -> None:
        """In one transaction: delete the live rows of ``pages`` (replaced or removed), make the run's rows live,
        record the run and a new version for the app."""
        ...

    async def discard(self, app_id: str, run: str) -> None:
        """Delete a run's staged rows."""
        ...

    async def state(self, app_id: str) -> tuple[str, int] | None:
        """The app's last published run and version (None: never published)."""
        ...

    async def load(self, app_id: str, model: str, max_windows: int) -> Matrix | None:
        """The app's live vectors of ``model`` (None: never published)."""
        ...

    async def hits(self, ids: list[tuple[int, float]]) -> list[DocHit]:
        """DocHits for row ids (in the given order, score as given); rows gone since are left out."""
        ...

    async def drop(self, app_id: str) -> None:
        """Delete the app's vectors."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


SQLITE_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS hybrid_vectors (
    id INTEGER PRIMARY KEY,
    app_id TEXT NOT NULL,
    run TEXT,
    model TEXT NOT NULL,
    page_url TEXT NOT NULL,
    page_hash TEXT NOT NULL,
    key TEXT NOT NULL,
    url TEXT NOT NULL,
    page_title TEXT NOT NULL,
    headings TEXT NOT NULL,
    body TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    windows INTEGER NOT NULL,
    vectors BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS hybrid_vectors_page ON hybrid_vectors(app_id, page_url);
CREATE INDEX IF NOT EXISTS hybrid_vectors_text ON hybrid_vectors(app_id, text_hash);
CREATE INDEX IF NOT EXISTS hybrid_vectors_run ON hybrid_vectors(app_id, run);
CREATE TABLE IF NOT EXISTS hybrid_apps (
    app_id TEXT PRIMARY KEY,
    run TEXT NOT NULL,
    version INTEGER NOT NULL
);
"""
_INSERT_COLUMNS: Final = ("app_id", "run", "model", "page_url", "page_hash", "key", "url", "page_title", "headings",
                          "body", "text_hash", "windows", "vectors")


def _record(app_id: str, run: str, model: str, r: VectorRow) -> tuple[Any, ...]:
    return (app_id, run, model, r.page_url, r.page_hash, r.key, r.url, r.page_title,
            json.dumps(r.headings, ensure_ascii=False), r.body, r.text_hash, int(r.vectors.shape[0]),
            np.ascontiguousarray(r.vectors, dtype=np.float32).tobytes())


def _hit(row: Any, score: float) -> DocHit:
    key, url, page_title, headings, body = row
    return DocHit(key=key, page_title=page_title, headings=json.loads(headings), url=url, text=body, score=score)


class SqliteVectors:
    """``VectorStore`` in the relay's SQLite file (a connection of its own, sqlite3 in a worker thread)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            if self._db is None:
                if self.path != ":memory:":
                    Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30.0)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute("BEGIN IMMEDIATE")  # one process at a time creates the tables
                for stmt in SQLITE_SCHEMA.split(";"):
                    if stmt.strip():
                        db.execute(stmt)
                db.execute("COMMIT")
                self._db = db
            return fn(self._db)

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await asyncio.to_thread(self._call, fn)

    @staticmethod
    def _tx(db: sqlite3.Connection, fn: Callable[[], T]) -> T:
        db.execute("BEGIN IMMEDIATE")
        try:
            out = fn()
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return out

    async def live_pages(self, app_id: str, model: str) -> dict[str, str]:
        """Pages with live vectors: their content hash by URL ("" unless one hash and all of ``model``)."""
        rows = await self._run(lambda db: db.execute(
            "SELECT page_url, CASE WHEN count(DISTINCT page_hash) = 1 AND min(model) = ? AND max(model) = ? "
            "THEN min(page_hash) ELSE '' END FROM hybrid_vectors WHERE app_id = ? AND run IS NULL GROUP BY page_url",
            (model, model, app_id)).fetchall())
        return {str(u): str(h) for u, h in rows}

    async def reusable(self, app_id: str, model: str, text_hashes: list[str]) -> dict[str, bytes]:
        """Live vectors by text hash."""
        def go(db: sqlite3.Connection) -> dict[str, bytes]:
            out: dict[str, bytes] = {}
            for i in range(0, len(text_hashes), 500):
                part = text_hashes[i:i + 500]
                for h, blob in db.execute(
                        f"SELECT text_hash, vectors FROM hybrid_vectors WHERE app_id = ? AND run IS NULL AND "
                        f"model = ? AND text_hash IN ({','.join('?' * len(part))})", (app_id, model, *part)):
                    out[str(h)] = bytes(blob)
            return out
        return await self._run(go)

    async def begin(self, app_id: str) -> None:
        """Delete rows of runs that died."""
        await self._run(lambda db: db.execute("DELETE FROM hybrid_vectors WHERE app_id = ? AND run IS NOT NULL",
                                              (app_id,)))

    async def stage(self, app_id: str, run: str, model: str, rows: list[VectorRow]) -> None:
        """Insert a run's rows (not live)."""
        records = [_record(app_id, run, model, r) for r in rows]
        sql = (f"INSERT INTO hybrid_vectors({', '.join(_INSERT_COLUMNS)}) "
               f"VALUES ({', '.join('?' * len(_INSERT_COLUMNS))})")
        await self._run(lambda db: self._tx(db, lambda: db.executemany(sql, records)))

    async def publish(self, app_id: str, run: str, pages: list[str]) -> None:
        """Replace the pages' live rows by the run's, and bump the app's version, in one transaction."""
        def go(db: sqlite3.Connection) -> None:
            def tx() -> None:
                for i in range(0, len(pages), 500):
                    part = pages[i:i + 500]
                    db.execute(f"DELETE FROM hybrid_vectors WHERE app_id = ? AND run IS NULL AND page_url IN "
                               f"({','.join('?' * len(part))})", (app_id, *part))
                db.execute("UPDATE hybrid_vectors SET run = NULL WHERE app_id = ? AND run = ?", (app_id, run))
                db.execute("INSERT INTO hybrid_apps(app_id, run, version) VALUES (?, ?, 1) ON CONFLICT(app_id) "
                           "DO UPDATE SET run = excluded.run, version = hybrid_apps.version + 1", (app_id, run))
            self._tx(db, tx)
        await self._run(go)

    async def discard(self, app_id: str, run: str) -> None:
        """Delete a run's staged rows."""
        await self._run(lambda db: db.execute("DELETE FROM hybrid_vectors WHERE app_id = ? AND run = ?",
                                              (app_id, run)))

    async def state(self, app_id: str) -> tuple[str, int] | None:
        """The app's last run and version."""
        row = await self._run(lambda db: db.execute("SELECT run, version FROM hybrid_apps WHERE app_id = ?",
                                                    (app_id,)).fetchone())
        return (str(row[0]), int(row[1])) if row else None

    async def load(self, app_id: str, model: str, max_windows: int) -> Matrix | None:
        """The app's live vectors."""
        def go(db: sqlite3.Connection) -> Matrix | None:
            db.execute("BEGIN")  # one snapshot: the version and the rows it names
            try:
                st = db.execute("SELECT run, version FROM hybrid_apps WHERE app_id = ?", (app_id,)).fetchone()
                if st is None:
                    return None
                rows = db.execute("SELECT id, windows, vectors FROM hybrid_vectors WHERE app_id = ? AND run IS NULL "
                                  "AND model = ? ORDER BY id", (app_id, model)).fetchall()
            finally:
                db.execute("COMMIT")
            return _matrix(int(st[1]), str(st[0]), rows, max_windows)
        return await self._run(go)

    async def hits(self, ids: list[tuple[int, float]]) -> list[DocHit]:
        """DocHits for row ids."""
        if not ids:
            return []
        def go(db: sqlite3.Connection) -> dict[int, Any]:
            return {int(r[0]): r[1:] for r in db.execute(
                f"SELECT id, key, url, page_title, headings, body FROM hybrid_vectors WHERE id IN "
                f"({','.join('?' * len(ids))})", [i for i, _ in ids])}
        rows = await self._run(go)
        return [_hit(rows[i], s) for i, s in ids if i in rows]

    async def drop(self, app_id: str) -> None:
        """Delete the app's vectors."""
        def go(db: sqlite3.Connection) -> None:
            self._tx(db, lambda: (db.execute("DELETE FROM hybrid_vectors WHERE app_id = ?", (app_id,)),
                                  db.execute("DELETE FROM hybrid_apps WHERE app_id = ?", (app_id,))))
        await self._run(go)

    async def close(self) -> None:
        """Close the connection."""
        def go(_db: sqlite3.Connection) -> None:
            if self._db is not None:
                self._db.close()
                self._db = None
        if self._db is not None:
            await self._run(go)


PG_SCHEMA: Final = [
    """CREATE TABLE IF NOT EXISTS hybrid_vectors (
        id BIGSERIAL PRIMARY KEY,
        app_id TEXT NOT NULL,
        run TEXT,
        model TEXT NOT NULL,
        page_url TEXT NOT NULL,
        page_hash TEXT NOT NULL,
        key TEXT NOT NULL,
        url TEXT NOT NULL,
        page_title TEXT NOT NULL,
        headings TEXT NOT NULL,
        body TEXT NOT NULL,
        text_hash TEXT NOT NULL,
        windows INTEGER NOT NULL,
        vectors BYTEA NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS hybrid_vectors_page ON hybrid_vectors (app_id, page_url)",
    "CREATE INDEX IF NOT EXISTS hybrid_vectors_text ON hybrid_vectors (app_id, text_hash)",
    "CREATE INDEX IF NOT EXISTS hybrid_vectors_run ON hybrid_vectors (app_id, run)",
    "CREATE TABLE IF NOT EXISTS hybrid_apps (app_id TEXT PRIMARY KEY, run TEXT NOT NULL, version BIGINT NOT NULL)",
]
_PG_SCHEMA_LOCK: Final = 0x68796272  # "hybr": one process creates the tables at a time


async def _pg_setup(con: Any) -> None:
    """The vectors' tables."""
    for stmt in PG_SCHEMA:
        await con.execute(stmt)


class PgVectors:
    """``VectorStore`` in PostgreSQL (asyncpg, a small pool of its own): ``bytea`` vectors, exact search in the
    relay's process (no pgvector needed on the server)."""

    def __init__(self, dsn: str, *, max_connections: int = 2) -> None:
        self.dsn = dsn
        self.max_connections = max_connections
        self._pool = LazyPgPool(dsn, max_connections, _PG_SCHEMA_LOCK, _pg_setup)

    async def _get_pool(self) -> Any:
        return await self._pool.get()

    async def live_pages(self, app_id: str, model: str) -> dict[str, str]:
        """Pages with live vectors: their content hash by URL ("" unless one hash and all of ``model``)."""
        pool = await self._get_pool()
        rows = await pool.fetch("SELECT page_url, CASE WHEN count(DISTINCT page_hash) = 1 AND min(model) = $2 AND "
                                "max(model) = $2 THEN min(page_hash) ELSE '' END AS h FROM hybrid_vectors WHERE "
                                "app_id = $1 AND run IS NULL GROUP BY page_url", app_id, model)
        return {str(r["page_url"]): str(r["h"]) for r in rows}

    async def reusable(self, app_id: str, model: str, text_hashes: list[str]) -> dict[str, bytes]:
        """Live vectors by text hash."""
        pool = await self._get_pool()
        rows = await pool.fetch("SELECT text_hash, vectors FROM hybrid_vectors WHERE app_id = $1 AND run IS NULL "
                                "AND model = $2 AND text_hash = ANY($3::text[])", app_id, model, text_hashes)
        return {str(r["text_hash"]): bytes(r["vectors"]) for r in rows}

    async def begin(self, app_id: str) -> None:
        """Delete rows of runs that died."""
        pool = await self._get_pool()
        await pool.execute("DELETE FROM hybrid_vectors WHERE app_id = $1 AND run IS NOT NULL", app_id)

    async def stage(self, app_id: str, run: str, model: str, rows: list[VectorRow]) -> None:
        """Copy a run's rows in (not live)."""
        pool = await self._get_pool()
        async with pool.acquire() as con:
            await con.copy_records_to_table("hybrid_vectors", records=[_record(app_id, run, model, r) for r in rows],
                                            columns=_INSERT_COLUMNS)

    async def publish(self, app_id: str, run: str, pages: list[str]) -> None:
        """Replace the pages' live rows by the run's, and bump the app's version, in one transaction."""
        pool = await self._get_pool()
        async with pool.acquire() as con, con.transaction():
            await con.execute("DELETE FROM hybrid_vectors WHERE app_id = $1 AND run IS NULL AND "
                              "page_url = ANY($2::text[])", app_id, pages)
            await con.execute("UPDATE hybrid_vectors SET run = NULL WHERE app_id = $1 AND run = $2", app_id, run)
            await con.execute("INSERT INTO hybrid_apps(app_id, run, version) VALUES ($1, $2, 1) ON CONFLICT (app_id) "
                              "DO UPDATE SET run = EXCLUDED.run, version = hybrid_apps.version + 1", app_id, run)

    async def discard(self, app_id: str, run: str) -> None:
        """Delete a run's staged rows."""
        pool = await self._get_pool()
        await pool.execute("DELETE FROM hybrid_vectors WHERE app_id = $1 AND run = $2", app_id, run)

    async def state(self, app_id: str) -> tuple[str, int] | None:
        """The app's last run and version."""
        pool = await self._get_pool()
        row = await pool.fetchrow("SELECT run, version FROM hybrid_apps WHERE app_id = $1", app_id)
        return (str(row["run"]), int(row["version"])) if row else None

    async def load(self, app_id: str, model: str, max_windows: int) -> Matrix | None:
        """The app's live vectors (one snapshot: a repeatable-read transaction)."""
        pool = await self._get_pool()
        async with pool.acquire() as con, con.transaction(isolation="repeatable_read", readonly=True):
            st = await con.fetchrow("SELECT run, version FROM hybrid_apps WHERE app_id = $1", app_id)
            if st is None:
                return None
            rows = await con.fetch("SELECT id, windows, vectors FROM hybrid_vectors WHERE app_id = $1 AND run IS NULL "
                                   "AND model = $2 ORDER BY id", app_id, model)
        return _matrix(int(st["version"]), str(st["run"]),
                       [(int(r["id"]), int(r["windows"]), bytes(r["vectors"])) for r in rows], max_windows)

    async def hits(self, ids: list[tuple[int, float]]) -> list[DocHit]:
        """DocHits for row ids."""
        if not ids:
            return []
        pool = await self._get_pool()
        rows = {int(r["id"]): (r["key"], r["url"], r["page_title"], r["headings"], r["body"]) for r in await pool.fetch(
            "SELECT id, key, url, page_title, headings, body FROM hybrid_vectors WHERE id = ANY($1::bigint[])",
            [i for i, _ in ids])}
        return [_hit(rows[i], s) for i, s in ids if i in rows]

    async def drop(self, app_id: str) -> None:
        """Delete the app's vectors."""
        pool = await self._get_pool()
        async with pool.acquire() as con, con.transaction():
            await con.execute("DELETE FROM hybrid_vectors WHERE app_id = $1", app_id)
            await con.execute("DELETE FROM hybrid_apps WHERE app_id = $1", app_id)

    async def close(self) -> None:
        """Close the pool."""
        await self._pool.close()

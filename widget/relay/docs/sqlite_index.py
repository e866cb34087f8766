"""The docs index in SQLite FTS5, in the relay's own database file (tables ``docs_*``), the embedded default.

Search: a section's text is indexed in passages of about ``CHUNK_CHARS`` (``page.chunks``), each with the
section's own heading and the page title and headings above it, in FTS5 with the ``porter unicode61`` tokenizer
(English stemming, any script, diacritics folded), ranked by BM25 with the own heading weighted over the headings
above and both over the text (``WEIGHTS``); a section ranks by its best passage. The question's terms are ORed,
each quoted (``query.py``). Bounded work: BM25 costs a few microseconds per matching passage, so the terms are
planned rarest first from their passage counts (``docs_terms``, counted again after every run that changed
something): a term is searched in all text while the passages matched stay within ``MAX_SCORED_PASSAGES``, else
in the own heading only if that still fits, else left out; no search scores more than ``SCORED_CAP`` passages.

Atomic for readers without one long write transaction (which would hold the file's write lock and stall the
relay's own writes during a large re-index): every page and section row carries the generation it became live in
(``live_from``) and the one it was replaced in (``live_until``); an app's ``generation`` says which rows a search
sees. A run writes generation G+1 in short transactions of ``SQLITE_BATCH_PAGES`` pages, then one tiny
transaction flips the app to G+1, then the replaced rows are deleted. A run that dies leaves rows of a generation
nobody sees; the next run deletes them first. One run per app at a time: a lease in ``docs_apps`` (``IndexBusy``).

Scopes (``query.py``: a site's versions and languages by URL path): each section keeps its page's URL path
(``path``), and a scoped search keeps the passages FTS5 matched whose section's path starts with the scope. The
terms' passage counts are over all of an app's versions, so with many versions a scoped search weighs fewer of a
question's common words. An index written before sections had a path gets the column, filled from the pages'
URLs, when it is opened (same layout version: it keeps serving).

Every call runs sqlite3 in a worker thread (``asyncio.to_thread``), one statement at a time per connection; WAL
lets the relay read while the CLI writes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from .indexer import IndexBusy
from .limits import (
    LOCK_LEASE_S,
    MAX_SCORED_PASSAGES,
    MAX_SEARCH_LIMIT,
    SCHEMA_VERSION,
    SCORED_CAP,
    SQLITE_BATCH_PAGES,
)
from .page import Page, chunks, ranked_fields
from .query import check_scope, fts5_match, terms, url_path
from .search import DocHit

T = TypeVar("T")
log = logging.getLogger("widget.relay.docs")

#: How much of the database file a searching connection maps into memory.
MMAP_BYTES = 256 * 1024 * 1024
#: A passage's id is its section's id shifted left by this many bits, plus its number in the section.
CHUNK_BITS = 12
#: BM25 column weights: the section's own heading, the page title and headings above it, the text.
WEIGHTS = (4.0, 2.0, 1.0)

TOKENIZER = "porter unicode61 remove_diacritics 2"
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS docs_apps (
    app_id TEXT PRIMARY KEY,
    generation INTEGER NOT NULL DEFAULT 0,
    settings TEXT NOT NULL DEFAULT '{{}}',
    updated_at REAL,
    lock_token TEXT,
    lock_until REAL
);
CREATE TABLE IF NOT EXISTS docs_pages (
    id INTEGER PRIMARY KEY,
    app_id TEXT NOT NULL,
    url TEXT NOT NULL,
    hash TEXT NOT NULL,
    title TEXT NOT NULL,
    live_from INTEGER NOT NULL,
    live_until INTEGER
);
CREATE INDEX IF NOT EXISTS docs_pages_app ON docs_pages(app_id, url);
CREATE TABLE IF NOT EXISTS docs_sections (
    id INTEGER PRIMARY KEY,
    page_id INTEGER NOT NULL,
    app_id TEXT NOT NULL,
    key TEXT NOT NULL,
    url TEXT NOT NULL,
    page_title TEXT NOT NULL,
    headings TEXT NOT NULL,
    body TEXT NOT NULL,
    live_from INTEGER NOT NULL,
    live_until INTEGER,
    path TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS docs_sections_page ON docs_sections(page_id);
-- What a search reads of each candidate section, without its text.
CREATE INDEX IF NOT EXISTS docs_sections_live ON docs_sections(id, app_id, live_from, live_until, path);
CREATE TABLE IF NOT EXISTS docs_chunks (
    id INTEGER PRIMARY KEY,
    section_id INTEGER NOT NULL,
    title TEXT NOT NULL,
    context TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS docs_chunks_section ON docs_chunks(section_id);
CREATE VIRTUAL TABLE IF NOT EXISTS docs_fts USING fts5(
    title, context, body, content='docs_chunks', content_rowid='id',
    tokenize='{TOKENIZER}'
);
CREATE TABLE IF NOT EXISTS docs_meta (one INTEGER PRIMARY KEY CHECK (one = 1), version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS docs_terms (
    term TEXT PRIMARY KEY,
    ndoc INTEGER NOT NULL,
    ntitle INTEGER NOT NULL
) WITHOUT ROWID;
"""

_SEARCH = f"""
WITH m AS MATERIALIZED (
    SELECT docs_fts.rowid >> {CHUNK_BITS} AS sid, bm25(docs_fts, {WEIGHTS[0]}, {WEIGHTS[1]}, {WEIGHTS[2]}) AS r
    FROM docs_fts WHERE docs_fts MATCH ?1 LIMIT {SCORED_CAP}
), g AS MATERIALIZED (SELECT generation AS gen FROM docs_apps WHERE app_id = ?2),
best AS (
    SELECT m.sid, min(m.r) AS r
    FROM m CROSS JOIN g JOIN docs_sections AS s INDEXED BY docs_sections_live ON s.id = m.sid
    WHERE s.app_id = ?2 AND s.live_from <= g.gen AND (s.live_until IS NULL OR s.live_until > g.gen)
        AND (?4 = '' OR substr(s.path, 1, ?5) = ?4)
    GROUP BY m.sid ORDER BY r LIMIT ?3
)
SELECT s.key, s.url, s.page_title, s.headings, s.body, best.r FROM best JOIN docs_sections AS s ON s.id = best.sid
ORDER BY best.r
"""
_LIVE_PAGES = """
SELECT count(*) FROM docs_pages p JOIN docs_apps a ON a.app_id = p.app_id
WHERE p.app_id = ? AND p.live_from <= a.generation AND (p.live_until IS NULL OR p.live_until > a.generation)
"""
_LIVE_SECTIONS = _LIVE_PAGES.replace("docs_pages p", "docs_sections p")
_HAS_INDEX = "SELECT EXISTS (" + _LIVE_PAGES.replace("count(*)", "1") + ")"


def connect(path: str | Path) -> sqlite3.Connection:
    """A connection to the relay's database file with the docs tables created (WAL, autocommit)."""
    if str(path) != ":memory:":
        Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30.0)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(f"PRAGMA mmap_size={MMAP_BYTES}")  # reads of the index without a system call per page
    db.execute("PRAGMA cache_size=-32768")
    with _tx(db):  # one process at a time checks the layout and creates the tables
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'docs%'")}
        version = db.execute("SELECT version FROM docs_meta").fetchone() if "docs_meta" in tables else None
        if tables and (version is None or version[0] != SCHEMA_VERSION):
            log.warning("the docs index in %s has an older layout; it is dropped (run autopilot-relay index again)",
                        path)
            for table in ("docs_fts", "docs_chunks", "docs_sections", "docs_pages", "docs_terms", "docs_apps",
                          "docs_meta"):
                db.execute(f"DROP TABLE IF EXISTS {table}")
        elif "docs_sections" in tables:
            _add_paths(db)
        for stmt in SCHEMA.split(";"):
            if stmt.strip():
                db.execute(stmt)
        db.execute("INSERT OR REPLACE INTO docs_meta(one, version) VALUES (1, ?)", (SCHEMA_VERSION,))
    # This connection's own: the index's terms with their passage counts, and a scratch table that turns a
    # question's words into the index's terms with the same tokenizer.
    db.executescript(f"""
        PRAGMA temp_store=MEMORY;
        CREATE VIRTUAL TABLE IF NOT EXISTS temp.docs_vocab USING fts5vocab(main, docs_fts, 'row');
        CREATE VIRTUAL TABLE IF NOT EXISTS temp.docs_vocab_col USING fts5vocab(main, docs_fts, 'col');
        CREATE VIRTUAL TABLE IF NOT EXISTS temp.docs_q USING fts5(x, tokenize='{TOKENIZER}');
        CREATE VIRTUAL TABLE IF NOT EXISTS temp.docs_qv USING fts5vocab(temp, docs_q, 'instance');
    """)
    return db


def _add_paths(db: sqlite3.Connection) -> None:
    """An index written before sections had their page's path gets it (inside ``connect``'s transaction): the
    column, each page's path from its URL, and the search's covering index again with the path."""
    if any(row[1] == "path" for row in db.execute("PRAGMA table_info(docs_sections)")):
        return
    log.info("the docs index gets its sections' URL paths (for searches scoped to a version or language)")
    db.execute("ALTER TABLE docs_sections ADD COLUMN path TEXT NOT NULL DEFAULT ''")
    pages = db.execute("SELECT id, url FROM docs_pages").fetchall()
    db.executemany("UPDATE docs_sections SET path = ? WHERE page_id = ?", [(url_path(u), i) for i, u in pages])
    db.execute("DROP INDEX IF EXISTS docs_sections_live")  # created again below, with the path


def match_expression(db: sqlite3.Connection, words: list[str]) -> str:
    """The FTS5 query for a question's words, rarest first: a word is searched in all text while the passages
    matched so far stay within ``MAX_SCORED_PASSAGES``, else in headings only if that still fits, else not at all
    (see the module's docstring); the rarest word is always searched. The search itself scores at most
    ``SCORED_CAP`` passages whatever the statistics say (a question of only very common words)."""
    db.execute("DELETE FROM temp.docs_q")
    db.executemany("INSERT INTO temp.docs_q(rowid, x) VALUES (?, ?)", list(enumerate(words)))
    stems: dict[int, set[str]] = {}
    for i, term in db.execute("SELECT doc, term FROM temp.docs_qv"):
        stems.setdefault(int(i), set()).add(str(term))
    every = sorted({t for ts in stems.values() for t in ts})
    known: dict[str, tuple[int, int]] = {
        str(t): (int(n), int(h)) for t, n, h in db.execute(
            f"SELECT term, ndoc, ntitle FROM docs_terms WHERE term IN ({','.join('?' * len(every))})", every)
    } if every else {}
    # A word the statistics do not know (new since they were counted) counts as rare.
    counts = sorted((max((known.get(t, (0, 0)) for t in stems.get(i, ())), default=(0, 0)), i)
                    for i in range(len(words)))
    wide: list[str] = []
    narrow: list[str] = []
    total = 0
    for (n, in_titles), i in counts:
        if total + n <= MAX_SCORED_PASSAGES:
            wide.append(words[i])
            total += n
        elif total + in_titles <= MAX_SCORED_PASSAGES or not (wide or narrow):
            narrow.append(words[i])  # the rarest word is always searched, in headings when it is everywhere
            total += in_titles
    expr = fts5_match(wide)
    if narrow:
        expr = (expr + " OR " if expr else "") + "{title} : (" + fts5_match(narrow) + ")"
    return expr


class SqliteDocsIndex:
    """``DocsIndex`` and ``DocsWriter`` on the relay's SQLite file."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            if self._db is None:
                self._db = connect(self.path)
            return fn(self._db)

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await asyncio.to_thread(self._call, fn)

    # -- DocsIndex --------------------------------------------------------------------------
    async def search(self, app_id: str, query: str, *, limit: int = 5, scope: str | None = None) -> list[DocHit]:
        """The best ``limit`` sections of the app for a reader's question (of pages under ``scope``, when given)."""
        prefix = check_scope(scope) or ""
        words = terms(query)
        if not words or limit <= 0:
            return []
        n = min(limit, MAX_SEARCH_LIMIT)
        rows = await self._run(lambda db: db.execute(
            _SEARCH, (match_expression(db, words), app_id, n, prefix, len(prefix))).fetchall())
        return [DocHit(key=k, page_title=t, headings=json.loads(h), url=u, text=b, score=-float(r))
                for k, u, t, h, b, r in rows]

    async def has_index(self, app_id: str) -> bool:
        """Whether the app has any live section."""
        return bool(await self._run(lambda db: db.execute(_HAS_INDEX, (app_id,)).fetchone()[0]))

    async def close(self) -> None:
        """Close the connection (a later call opens it again)."""
        def close(_db: sqlite3.Connection) -> None:
            if self._db is not None:
                self._db.close()
                self._db = None
        if self._db is not None:
            await self._run(close)

    # -- DocsWriter -------------------------------------------------------------------------
    async def index_settings(self, app_id: str) -> dict[str, Any] | None:
        """The settings the app's last run stored."""
        row = await self._run(lambda db: db.execute("SELECT settings, generation FROM docs_apps WHERE app_id = ?",
                                                    (app_id,)).fetchone())
        return json.loads(row[0]) if row and row[1] > 0 else None

    async def drop_index(self, app_id: str) -> int:
        """Remove the app's index in one transaction; how many live sections it had."""
        def drop(db: sqlite3.Connection) -> int:
            with _tx(db):
                count = db.execute(_LIVE_SECTIONS, (app_id,)).fetchone()[0]
                ids = [r[0] for r in db.execute("SELECT id FROM docs_pages WHERE app_id = ?", (app_id,))]
                _delete_pages(db, ids)
                db.execute("DELETE FROM docs_apps WHERE app_id = ?", (app_id,))
            return int(count)
        return await self._run(drop)

    async def begin_index(self, app_id: str) -> SqliteJob:
        """Take the app's lease and clean what an earlier run that died left."""
        token = uuid.uuid4().hex

        def begin(db: sqlite3.Connection) -> int:
            db.execute("PRAGMA mmap_size=0")  # an index run reads little: mapped pages would only swell its RSS
            with _tx(db):
                db.execute("INSERT OR IGNORE INTO docs_apps(app_id) VALUES (?)", (app_id,))
                gen, holder, until = db.execute(
                    "SELECT generation, lock_token, lock_until FROM docs_apps WHERE app_id = ?", (app_id,)).fetchone()
                if holder and until and until > time.time():
                    raise IndexBusy(f"another index run of app {app_id!r} is in progress (its lock expires in "
                                    f"{until - time.time():.0f} s if it died); try again when it ends")
                db.execute("UPDATE docs_apps SET lock_token = ?, lock_until = ? WHERE app_id = ?",
                           (token, time.time() + LOCK_LEASE_S, app_id))
            # Rows of a run that died before its flip, and old rows a finished run did not get to delete.
            while True:
                with _tx(db):
                    ids = [r[0] for r in db.execute(
                        "SELECT id FROM docs_pages WHERE app_id = ? AND (live_from > ? OR live_until <= ?) LIMIT ?",
                        (app_id, gen, gen, SQLITE_BATCH_PAGES))]
                    _delete_pages(db, ids)
                if not ids:
                    break
            with _tx(db):
                db.execute("UPDATE docs_pages SET live_until = NULL WHERE app_id = ? AND live_until > ?", (app_id, gen))
                db.execute("UPDATE docs_sections SET live_until = NULL WHERE app_id = ? AND live_until > ?",
                           (app_id, gen))
            return int(gen)

        gen = await self._run(begin)
        return SqliteJob(self, app_id, token, gen + 1)


class SqliteJob:
    """One index run's writes at generation ``gen`` (see the module's docstring)."""

    def __init__(self, index: SqliteDocsIndex, app_id: str, token: str, gen: int) -> None:
        self.index, self.app_id, self.token, self.gen = index, app_id, token, gen
        #: Whether the run wrote or removed anything (then the terms' passage counts are counted again).
        self.changed = False

    def _hold(self, db: sqlite3.Connection) -> None:
        """Renew the lease inside the current transaction (``IndexBusy`` when another run took it)."""
        cur = db.execute("UPDATE docs_apps SET lock_until = ? WHERE app_id = ? AND lock_token = ?",
                         (time.time() + LOCK_LEASE_S, self.app_id, self.token))
        if cur.rowcount != 1:
            raise IndexBusy(f"the index run of app {self.app_id!r} lost its lock (it paused longer than "
                            f"{LOCK_LEASE_S:.0f} s and another run started); nothing of it was published")

    async def existing(self) -> dict[str, str]:
        """Live pages' hashes by URL."""
        rows = await self.index._run(lambda db: db.execute(
            "SELECT url, hash FROM docs_pages WHERE app_id = ? AND live_until IS NULL", (self.app_id,)).fetchall())
        return dict(rows)

    def _retire(self, db: sqlite3.Connection, urls: list[str]) -> None:
        for url in urls:
            row = db.execute("SELECT id FROM docs_pages WHERE app_id = ? AND url = ? AND live_until IS NULL "
                             "AND live_from < ?", (self.app_id, url, self.gen)).fetchone()
            if row:
                db.execute("UPDATE docs_pages SET live_until = ? WHERE id = ?", (self.gen, row[0]))
                db.execute("UPDATE docs_sections SET live_until = ? WHERE page_id = ?", (self.gen, row[0]))

    async def write(self, pages: list[tuple[str, Page]]) -> None:
        """New versions of pages at the run's generation, the old ones marked replaced by it."""
        self.changed = True
        def write(db: sqlite3.Connection) -> None:
            with _tx(db):
                self._hold(db)
                self._retire(db, [p.url for _, p in pages])
                for digest, page in pages:
                    page_id = db.execute(
                        "INSERT INTO docs_pages(app_id, url, hash, title, live_from) VALUES (?, ?, ?, ?, ?)",
                        (self.app_id, page.url, digest, page.title, self.gen)).lastrowid
                    path = url_path(page.url)
                    for s in page.sections:
                        title, context = ranked_fields(page, s)
                        sid = db.execute(
                            "INSERT INTO docs_sections(page_id, app_id, key, url, page_title, headings, body, "
                            "live_from, path) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (page_id, self.app_id, s.key, s.url, page.title, json.dumps(s.headings,
                             ensure_ascii=False), s.text, self.gen, path)).lastrowid or 0
                        for i, part in enumerate(chunks(s.text)[: 1 << CHUNK_BITS]):
                            cid = (sid << CHUNK_BITS) | i  # the section is in the passage's id: no join to find it
                            db.execute("INSERT INTO docs_chunks(id, section_id, title, context, body) "
                                       "VALUES (?, ?, ?, ?, ?)", (cid, sid, title, context, part))
                            db.execute("INSERT INTO docs_fts(rowid, title, context, body) VALUES (?, ?, ?, ?)",
                                       (cid, title, context, part))

        await self.index._run(write)

    async def remove(self, urls: list[str]) -> None:
        """Mark pages replaced by nothing at the run's generation."""
        self.changed = True
        for i in range(0, len(urls), SQLITE_BATCH_PAGES):
            chunk = urls[i:i + SQLITE_BATCH_PAGES]

            def remove(db: sqlite3.Connection, chunk: list[str] = chunk) -> None:
                with _tx(db):
                    self._hold(db)
                    self._retire(db, chunk)
            await self.index._run(remove)

    async def commit(self, settings: dict[str, Any]) -> tuple[int, int]:
        """Flip the app to the run's generation, delete the replaced rows, release the lease."""
        def flip(db: sqlite3.Connection) -> tuple[int, int]:
            with _tx(db):
                self._hold(db)
                db.execute("UPDATE docs_apps SET generation = ?, settings = ?, updated_at = ? WHERE app_id = ?",
                           (self.gen, json.dumps(settings, ensure_ascii=False), time.time(), self.app_id))
                return (db.execute(_LIVE_PAGES, (self.app_id,)).fetchone()[0],
                        db.execute(_LIVE_SECTIONS, (self.app_id,)).fetchone()[0])

        counts = await self.index._run(flip)
        await self._clean("live_until <= ?")
        if self.changed:
            await self.index._run(_count_terms)
        await self._release()
        return counts

    async def abort(self) -> None:
        """Delete what the run wrote, un-retire what it retired, release the lease (best effort)."""
        try:
            await self._clean("live_from >= ?")

            def restore(db: sqlite3.Connection) -> None:
                with _tx(db):
                    for table in ("docs_pages", "docs_sections"):
                        db.execute(f"UPDATE {table} SET live_until = NULL WHERE app_id = ? AND live_until >= ?",
                                   (self.app_id, self.gen))
            await self.index._run(restore)
            await self._release()
        except (sqlite3.Error, IndexBusy):
            pass  # the next run cleans up; the lease expires

    async def _clean(self, condition: str) -> None:
        while True:
            def clean(db: sqlite3.Connection) -> int:
                with _tx(db):
                    self._hold(db)
                    ids = [r[0] for r in db.execute(
                        f"SELECT id FROM docs_pages WHERE app_id = ? AND {condition} LIMIT ?",
                        (self.app_id, self.gen, SQLITE_BATCH_PAGES))]
                    _delete_pages(db, ids)
                return len(ids)
            if not await self.index._run(clean):
                return

    async def _release(self) -> None:
        def release(db: sqlite3.Connection) -> None:
            db.execute("UPDATE docs_apps SET lock_token = NULL, lock_until = NULL WHERE app_id = ? AND lock_token = ?",
                       (self.app_id, self.token))
            db.execute(f"PRAGMA mmap_size={MMAP_BYTES}")  # searches on this connection read mapped again
        await self.index._run(release)


def _count_terms(db: sqlite3.Connection) -> None:
    """Count again how many passages (of all apps) have each term: one read of the whole full-text index, after
    a run that changed something."""
    with _tx(db):
        db.execute("DELETE FROM docs_terms")
        db.execute("INSERT INTO docs_terms(term, ndoc, ntitle) SELECT r.term, r.doc, coalesce(c.doc, 0) "
                   "FROM temp.docs_vocab AS r LEFT JOIN temp.docs_vocab_col AS c "
                   "ON c.term = r.term AND c.col = 'title'")


def _delete_pages(db: sqlite3.Connection, ids: list[int]) -> None:
    """Delete pages, their sections and their full-text entries (inside the caller's transaction)."""
    if not ids:
        return
    marks = ",".join("?" * len(ids))
    sections = f"SELECT id FROM docs_sections WHERE page_id IN ({marks})"
    db.execute("INSERT INTO docs_fts(docs_fts, rowid, title, context, body) SELECT 'delete', id, title, context, "
               f"body FROM docs_chunks WHERE section_id IN ({sections})", ids)
    db.execute(f"DELETE FROM docs_chunks WHERE section_id IN ({sections})", ids)
    db.execute(f"DELETE FROM docs_sections WHERE page_id IN ({marks})", ids)
    db.execute(f"DELETE FROM docs_pages WHERE id IN ({marks})", ids)


@contextmanager
def _tx(db: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on any exception)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")

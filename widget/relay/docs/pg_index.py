"""The docs index in PostgreSQL full-text search (tables ``docs_*`` in the relay's database), when ``database_url``
is set: every relay process of a scaled deployment searches one shared index.

Search: a stored ``tsvector`` per passage of a section (``page.chunks``; the ``english`` configuration: stemming
and stop words) with a GIN index, the section's own heading weighted ``A``, the page title and headings above it
``B``, its text ``D``. The question's terms (``query.terms``: letters and digits only) are normalized by
``to_tsvector`` as the documents were, and each lexeme becomes a one-lexeme ``tsquery`` cast from its quoted text,
so nothing in a question is an operator. A passage scores the sum over the lexemes it has of ``idf × ts_rank``
(``ts_rank`` alone has no inverse document frequency: a common word would count as much as a rare one; the
lexemes' passage counts are kept per app in ``docs_terms``, refreshed with ``ts_stat`` by each run that changed
something), and a section ranks by its best passage — BM25's ingredients on PostgreSQL's own full-text search.
Bounded work, as on SQLite: lexemes are taken rarest first while the passages they match stay within
``MAX_SCORED_PASSAGES`` (the rarest always, but at most that many of its passages), the rest left out; the
planner's statistics are refreshed (``ANALYZE``) by each run that changed something.

Scopes (``query.py``: a site's versions and languages by URL path): each passage keeps its page's URL path
(``path``), and a scoped search takes each lexeme's passages under the scope only (inside the bound). An index
written before passages had a path gets the column, filled from the pages' URLs, when it is opened (same layout
version: it keeps serving).

An index run is one transaction (PostgreSQL's MVCC keeps readers on the old rows until it commits, and other
writers are not blocked), under a transaction-scoped advisory lock per app (``IndexBusy`` for a second run).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from .indexer import IndexBusy
from .limits import MAX_SCORED_PASSAGES, MAX_SEARCH_LIMIT, SCHEMA_VERSION
from .page import Page, chunks, ranked_fields
from .pg_pool import LazyPgPool
from .query import check_scope, terms, url_path
from .search import DocHit

log = logging.getLogger("widget.relay.docs")

#: ``ts_rank`` weights for the classes {D, C, B, A}: text, (unused), page title and headings above, own heading.
WEIGHTS = (0.5, 0.5, 0.75, 1.0)
#: ``ts_rank`` normalization: 1 divides by 1 + log(length), so a long passage does not win by length alone.
NORMALIZATION = 1

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS docs_apps (
        app_id TEXT PRIMARY KEY,
        settings TEXT NOT NULL DEFAULT '{}',
        updated_at DOUBLE PRECISION,
        chunks BIGINT NOT NULL DEFAULT 0
    )""",
    # How many of an app's passages have each lexeme (ts_stat, refreshed by every run that changed something):
    # the inverse document frequency that ts_rank lacks.
    """CREATE TABLE IF NOT EXISTS docs_terms (
        app_id TEXT NOT NULL,
        lexeme TEXT NOT NULL,
        ndoc BIGINT NOT NULL,
        PRIMARY KEY (app_id, lexeme)
    )""",
    """CREATE TABLE IF NOT EXISTS docs_pages (
        app_id TEXT NOT NULL,
        url TEXT NOT NULL,
        hash TEXT NOT NULL,
        title TEXT NOT NULL,
        PRIMARY KEY (app_id, url)
    )""",
    # One row per passage of a section (``page.chunks``), the section's fields repeated: a section is its rows
    # with one key, its text their bodies in ``ord`` order.
    """CREATE TABLE IF NOT EXISTS docs_chunks (
        id BIGSERIAL PRIMARY KEY,
        app_id TEXT NOT NULL,
        page_url TEXT NOT NULL,
        key TEXT NOT NULL,
        ord INTEGER NOT NULL,
        url TEXT NOT NULL,
        page_title TEXT NOT NULL,
        headings TEXT NOT NULL,
        title TEXT NOT NULL,
        context TEXT NOT NULL,
        body TEXT NOT NULL,
        path TEXT NOT NULL DEFAULT '',
        tsv tsvector GENERATED ALWAYS AS (
            setweight(to_tsvector('english', title), 'A') || setweight(to_tsvector('english', context), 'B')
            || setweight(to_tsvector('english', body), 'D')
        ) STORED
    )""",
    "CREATE TABLE IF NOT EXISTS docs_meta (one INTEGER PRIMARY KEY CHECK (one = 1), version INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS docs_chunks_tsv ON docs_chunks USING GIN (tsv)",
    "CREATE INDEX IF NOT EXISTS docs_chunks_page ON docs_chunks (app_id, page_url)",
    "CREATE INDEX IF NOT EXISTS docs_chunks_key ON docs_chunks (app_id, key)",
]
_SCHEMA_LOCK = 0x646F6373  # "docs": one process creates the tables at a time

_ARRAY = "{" + ",".join(map(str, WEIGHTS)) + "}"
_RANK = f"ts_rank('{_ARRAY}'::float4[], c.tsv, k.tq, {NORMALIZATION})"
_SEARCH = f"""
WITH app AS (SELECT greatest(chunks, 1) AS n FROM docs_apps WHERE app_id = $1),
lex AS (
    SELECT t.lexeme, quote_literal(t.lexeme)::tsquery AS tq, t.ndoc,
           ln(1 + ((SELECT n FROM app) - t.ndoc + 0.5) / (t.ndoc + 0.5)) AS idf
    FROM (SELECT DISTINCT unnest(tsvector_to_array(to_tsvector('english', $2))) AS l) AS q
    JOIN docs_terms AS t ON t.app_id = $1 AND t.lexeme = q.l
),
ranked AS (
    SELECT *, sum(ndoc) OVER (ORDER BY ndoc, lexeme) AS running, row_number() OVER (ORDER BY ndoc, lexeme) AS nth
    FROM lex
),
kept AS (SELECT * FROM ranked WHERE running <= {MAX_SCORED_PASSAGES} OR nth = 1),
scored AS (
    SELECT c.key, sum(k.idf * {_RANK}) AS r
    FROM kept AS k CROSS JOIN LATERAL (
        SELECT id, key, tsv FROM docs_chunks
        WHERE app_id = $1 AND tsv @@ k.tq AND ($4 = '' OR left(path, char_length($4)) = $4)
        LIMIT {MAX_SCORED_PASSAGES}
    ) AS c
    GROUP BY c.id, c.key
),
best AS (SELECT key, max(r) AS r FROM scored GROUP BY key ORDER BY r DESC LIMIT $3)
SELECT best.key, best.r, c.url, c.page_title, c.headings, string_agg(c.body, E'\\n' ORDER BY c.ord) AS body
FROM best JOIN docs_chunks AS c ON c.app_id = $1 AND c.key = best.key
GROUP BY best.key, best.r, c.url, c.page_title, c.headings
ORDER BY best.r DESC
"""
_COLUMNS = ("app_id", "page_url", "key", "ord", "url", "page_title", "headings", "title", "context", "body",
            "path")


async def _add_paths(con: Any) -> None:
    """An index written before passages had their page's path gets it (inside the schema transaction)."""
    if await con.fetchval("SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = "
                          "current_schema() AND table_name = 'docs_chunks' AND column_name = 'path')"):
        return
    log.info("the docs index gets its passages' URL paths (for searches scoped to a version or language)")
    await con.execute("ALTER TABLE docs_chunks ADD COLUMN path TEXT NOT NULL DEFAULT ''")
    pages = await con.fetch("SELECT DISTINCT app_id, page_url FROM docs_chunks")
    await con.executemany("UPDATE docs_chunks SET path = $3 WHERE app_id = $1 AND page_url = $2",
                          [(r["app_id"], r["page_url"], url_path(r["page_url"])) for r in pages])


async def _setup(con: Any) -> None:
    """The docs tables, made or migrated (an index of an older layout is dropped: index again)."""
    tables = {r[0] for r in await con.fetch(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
        "AND tablename LIKE 'docs%'")}
    version = (await con.fetchval("SELECT version FROM docs_meta")
               if "docs_meta" in tables else None)
    if tables and version != SCHEMA_VERSION:
        log.warning("the docs index has an older layout; it is dropped (run autopilot-relay "
                    "index again)")
        for table in ("docs_chunks", "docs_sections", "docs_pages", "docs_terms", "docs_apps",
                      "docs_meta"):
            await con.execute(f"DROP TABLE IF EXISTS {table}")
    elif "docs_chunks" in tables:
        await _add_paths(con)
    for stmt in SCHEMA:
        await con.execute(stmt)
    await con.execute("INSERT INTO docs_meta(one, version) VALUES (1, $1) ON CONFLICT (one) "
                      "DO UPDATE SET version = EXCLUDED.version", SCHEMA_VERSION)


class PgDocsIndex:
    """``DocsIndex`` and ``DocsWriter`` on PostgreSQL (asyncpg; a small pool of its own, opened on first use)."""

    def __init__(self, dsn: str, *, max_connections: int = 4) -> None:
        self.dsn = dsn
        self.max_connections = max_connections
        self._pool = LazyPgPool(dsn, max_connections, _SCHEMA_LOCK, _setup)

    async def _get_pool(self) -> Any:
        return await self._pool.get()

    # -- DocsIndex --------------------------------------------------------------------------
    async def search(self, app_id: str, query: str, *, limit: int = 5, scope: str | None = None) -> list[DocHit]:
        """The best ``limit`` sections of the app for a reader's question (of pages under ``scope``, when given)."""
        prefix = check_scope(scope) or ""
        text = " ".join(terms(query))
        if not text or limit <= 0:
            return []
        pool = await self._get_pool()
        rows = await pool.fetch(_SEARCH, app_id, text, min(limit, MAX_SEARCH_LIMIT), prefix)
        return [DocHit(key=r["key"], page_title=r["page_title"], headings=json.loads(r["headings"]), url=r["url"],
                       text=r["body"], score=float(r["r"])) for r in rows]

    async def has_index(self, app_id: str) -> bool:
        """Whether the app has any section."""
        pool = await self._get_pool()
        return bool(await pool.fetchval("SELECT EXISTS (SELECT 1 FROM docs_chunks WHERE app_id = $1)", app_id))

    async def close(self) -> None:
        """Close the pool."""
        await self._pool.close()

    # -- DocsWriter -------------------------------------------------------------------------
    async def index_settings(self, app_id: str) -> dict[str, Any] | None:
        """The settings the app's last run stored."""
        pool = await self._get_pool()
        raw = await pool.fetchval("SELECT settings FROM docs_apps WHERE app_id = $1", app_id)
        return json.loads(raw) if raw is not None else None

    async def drop_index(self, app_id: str) -> int:
        """Remove the app's index in one transaction; how many sections it had."""
        pool = await self._get_pool()
        async with pool.acquire() as con, con.transaction():
            n = await con.fetchval("SELECT count(DISTINCT key) FROM docs_chunks WHERE app_id = $1", app_id)
            for table in ("docs_chunks", "docs_pages", "docs_terms", "docs_apps"):
                await con.execute(f"DELETE FROM {table} WHERE app_id = $1", app_id)
        return int(n)

    async def begin_index(self, app_id: str) -> PgJob:
        """Open the run's transaction and take the app's advisory lock (``IndexBusy`` when another run has it)."""
        pool = await self._get_pool()
        con = await pool.acquire()
        tr = con.transaction()
        try:
            await tr.start()
            if not await con.fetchval("SELECT pg_try_advisory_xact_lock(hashtext('autopilot-docs:' || $1))", app_id):
                raise IndexBusy(f"another index run of app {app_id!r} is in progress; try again when it ends")
        except BaseException:
            await tr.rollback()
            await pool.release(con)
            raise
        return PgJob(pool, con, tr, app_id)


class PgJob:
    """One index run: every write inside one transaction, published by its commit."""

    def __init__(self, pool: Any, con: Any, tr: Any, app_id: str) -> None:
        self.pool, self.con, self.tr, self.app_id = pool, con, tr, app_id
        self._done = False
        #: Whether the run wrote or removed anything (then the term statistics are refreshed at commit).
        self.changed = False

    async def existing(self) -> dict[str, str]:
        """Pages' hashes by URL."""
        rows = await self.con.fetch("SELECT url, hash FROM docs_pages WHERE app_id = $1", self.app_id)
        return {r["url"]: r["hash"] for r in rows}

    async def write(self, pages: list[tuple[str, Page]]) -> None:
        """Replace or add pages and their sections."""
        self.changed = True
        urls = [p.url for _, p in pages]
        await self.con.execute("DELETE FROM docs_chunks WHERE app_id = $1 AND page_url = ANY($2::text[])",
                               self.app_id, urls)
        await self.con.executemany(
            "INSERT INTO docs_pages(app_id, url, hash, title) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (app_id, url) DO UPDATE SET hash = EXCLUDED.hash, title = EXCLUDED.title",
            [(self.app_id, p.url, digest, p.title) for digest, p in pages])
        records: list[tuple[object, ...]] = []
        for _, page in pages:
            path = url_path(page.url)
            for s in page.sections:
                title, context = ranked_fields(page, s)
                headings = json.dumps(s.headings, ensure_ascii=False)
                records.extend((self.app_id, page.url, s.key, i, s.url, page.title, headings, title, context, part,
                                path) for i, part in enumerate(chunks(s.text)))
        if records:
            await self.con.copy_records_to_table("docs_chunks", records=records, columns=_COLUMNS)

    async def remove(self, urls: list[str]) -> None:
        """Remove pages and their sections."""
        self.changed = True
        for table, column in (("docs_chunks", "page_url"), ("docs_pages", "url")):
            await self.con.execute(f"DELETE FROM {table} WHERE app_id = $1 AND {column} = ANY($2::text[])",
                                   self.app_id, urls)

    async def commit(self, settings: dict[str, Any]) -> tuple[int, int]:
        """Store the settings and commit: readers see the new index from here on."""
        try:
            await self.con.execute(
                "INSERT INTO docs_apps(app_id, settings, updated_at) VALUES ($1, $2, $3) ON CONFLICT (app_id) "
                "DO UPDATE SET settings = EXCLUDED.settings, updated_at = EXCLUDED.updated_at",
                self.app_id, json.dumps(settings, ensure_ascii=False), time.time())
            if self.changed:
                await self.con.execute("DELETE FROM docs_terms WHERE app_id = $1", self.app_id)
                await self.con.execute(
                    "INSERT INTO docs_terms(app_id, lexeme, ndoc) SELECT $1, word, ndoc FROM "
                    "ts_stat(format('SELECT tsv FROM docs_chunks WHERE app_id = %L', $1::text))", self.app_id)
                await self.con.execute("UPDATE docs_apps SET chunks = (SELECT count(*) FROM docs_chunks WHERE "
                                       "app_id = $1) WHERE app_id = $1", self.app_id)
                # Fresh planner statistics: without them PostgreSQL guesses an app's rows are few and ANDs a scan
                # of all of them into every term's index lookup.
                await self.con.execute("ANALYZE docs_chunks")
                await self.con.execute("ANALYZE docs_terms")
            pages = await self.con.fetchval("SELECT count(*) FROM docs_pages WHERE app_id = $1", self.app_id)
            sections = await self.con.fetchval("SELECT count(DISTINCT key) FROM docs_chunks WHERE app_id = $1",
                                               self.app_id)
            await self.tr.commit()
        finally:
            self._done = True
            if not self.con.is_closed() and self.con.is_in_transaction():
                await self.tr.rollback()
            await self.pool.release(self.con)
        return int(pages), int(sections)

    async def abort(self) -> None:
        """Roll the run back (nothing to do once ``commit`` ran: it released the connection either way)."""
        if self._done:
            return
        self._done = True
        try:
            if not self.con.is_closed() and self.con.is_in_transaction():
                await self.tr.rollback()
        except Exception:  # noqa: BLE001 - a lost connection rolled the transaction back already
            pass
        finally:
            await self.pool.release(self.con)

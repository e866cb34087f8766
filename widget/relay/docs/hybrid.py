"""Hybrid docs search: BM25 and an embedding model, fused by reciprocal rank fusion (issue 33 item 7).

``HybridDocsIndex`` wraps a BM25 engine (``SqliteDocsIndex`` or ``PgDocsIndex``) and keeps the same contracts
(``DocsIndex`` for the turn loop, ``DocsWriter`` for index runs), so nothing that searches or indexes changes.
A search asks BM25 for its best ``CANDIDATES`` sections and the vectors for theirs (a section scores by its best
~80-word window, ``embeddings.windows``), and ranks the union by ``sum(weight / (RRF_K + rank))`` over the two
lists (rank from 1; ``BM25_WEIGHT`` and ``VECTOR_WEIGHT``): a section both find beats one only one of them finds at
a similar rank, and neither side's score scale matters. A hit's ``score`` is that fused score (0.017-0.23;
comparable within hybrid search only). The constants were chosen on two probe sets, this project's docs and an
outside corpus (the FastAPI docs, ``bench/docs_outside.py``), and kept where both improved over the textbook
``k = 60`` with equal weights (docs/decisions.md).

An index run goes through the engine's job as before; for each batch of pages the run writes, the wrapper embeds the
changed pages' sections (a section whose text is unchanged keeps its vectors) and stages them; after the engine
commits, the vectors are published in one transaction. The engine's stored settings carry the vector run's id
(``vectors_run``): when they differ from the vector store's (the BM25 index was rebuilt without the model, or
publishing failed), searches of that app are BM25 alone until the next run with the model, which re-embeds what
is missing (a page whose vectors are missing or stale is reported as changed and extracted again).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from .embeddings import WINDOW_WORDS, EmbeddingsUnavailable, TextEmbedder, section_context, windows
from .indexer import DocsWriter, IndexJob, IndexRunError
from .limits import MAX_QUERY_CHARS, MAX_SEARCH_LIMIT
from .page import Page
from .query import check_scope, url_path
from .search import DocHit, DocsIndex
from .vectors import MAX_WINDOWS, Matrix, VectorRow, VectorStore

log = logging.getLogger("widget.relay.docs")

#: Sections each side contributes to the fusion.
CANDIDATES: Final = MAX_SEARCH_LIMIT
#: ``embeddings_model = "endpoint:NAME"``: vectors from the OpenAI-compatible endpoint of ``[models.NAME]``.
ENDPOINT_PREFIX: Final = "endpoint:"
#: Reciprocal rank fusion's constant. The textbook 60 suits fusing lists a thousand deep; a reader sees five
#: sections, and a smaller constant lets the first ranks of each list count for more than a long tail.
RRF_K: Final = 10
#: Each list's weight in the fusion: the vectors' ranks count half again as much as BM25's (on both probe sets
#: the vectors alone rank the right section first more often; BM25 still decides exact names and numbers).
BM25_WEIGHT: Final = 1.0
VECTOR_WEIGHT: Final = 1.5
#: Nearest sections looked at for a scoped search (a site with many versions has each section many times).
SCOPED_CANDIDATES: Final = 20 * CANDIDATES
#: How long a search trusts what it last read of an app's vector version and engine settings.
STATE_TTL_S: Final = 2.0


def fuse(lists: list[list[DocHit]], limit: int, k: int = RRF_K, weights: list[float] | None = None) -> list[DocHit]:
    """Weighted reciprocal rank fusion of ranked lists (best first), by section key: ``sum(weight / (k + rank))``
    (weights 1 unless given, one per list); the first list's hit is kept for a section several lists have;
    ``score`` is the fused score; ties keep the first list's order."""
    if weights is not None and len(weights) != len(lists):
        raise ValueError(f"fuse: {len(weights)} weights for {len(lists)} lists")
    scores: dict[str, float] = {}
    first: dict[str, DocHit] = {}
    for i, hits in enumerate(lists):
        weight = 1.0 if weights is None else weights[i]
        for rank, hit in enumerate(hits, 1):
            scores[hit["key"]] = scores.get(hit["key"], 0.0) + weight / (k + rank)
            first.setdefault(hit["key"], hit)
    order = sorted(first, key=lambda key: -scores[key])  # sorted is stable: insertion order breaks ties
    return [DocHit(**{**first[key], "score": round(scores[key], 6)}) for key in order[:limit]]


def in_scope(url: str, scope: str | None) -> bool:
    """Whether a section's URL is inside a search scope (a URL path prefix ending in ``/``, as ``check_scope``
    gives it; None: everything), as the engines filter."""
    return scope is None or url_path(url).startswith(scope)


@dataclass
class _AppState:
    checked: float = 0.0
    matrix: Matrix | None = None
    usable: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class HybridDocsIndex:
    """A BM25 engine and a vector store searched together (``DocsIndex`` and ``DocsWriter``)."""

    def __init__(self, engine: Any, store: VectorStore, embedder: TextEmbedder, *,
                 max_windows: int = MAX_WINDOWS) -> None:
        self.engine = engine
        self.store = store
        self.embedder = embedder
        self.max_windows = max_windows
        self._apps: dict[str, _AppState] = {}
        self._warned: set[tuple[str, str]] = set()

    def __getattr__(self, name: str) -> Any:
        # What else callers use of the engine (its DSN, its path) is the engine's.
        return getattr(self.engine, name)

    def _warn_once(self, app_id: str, what: str, line: str) -> None:
        if (app_id, what) not in self._warned:
            self._warned.add((app_id, what))
            log.warning(line)

    # -- DocsIndex --------------------------------------------------------------------------
    async def search(self, app_id: str, query: str, *, limit: int = 5, scope: str | None = None) -> list[DocHit]:
        """The best ``limit`` sections (of pages under ``scope``, when given): BM25's and the vectors' candidates
        fused by reciprocal rank."""
        if limit <= 0:
            return []
        limit = min(limit, MAX_SEARCH_LIMIT)
        prefix = check_scope(scope)  # ValueError for a bad scope, as the engines
        bm25: list[DocHit] = await self.engine.search(app_id, query, limit=CANDIDATES, scope=scope)
        text = " ".join(query[:MAX_QUERY_CHARS].split())
        matrix = await self._matrix(app_id)
        if matrix is None or not text:
            return bm25[:limit]
        try:
            qv = await asyncio.to_thread(self.embedder.embed, [text])
        except EmbeddingsUnavailable as exc:  # an embeddings endpoint that failed: this search is BM25 alone
            log.warning("docs app %r: %s; this search is BM25 alone", app_id, exc)
            return bm25[:limit]
        # A scope leaves out the other versions' sections: look further down the list for enough of its own.
        near = matrix.best(qv[0], CANDIDATES if prefix is None else SCOPED_CANDIDATES)
        vec = [h for h in await self.store.hits(near) if in_scope(h["url"], prefix)][:CANDIDATES]
        fused = fuse([bm25, vec], limit, weights=[BM25_WEIGHT, VECTOR_WEIGHT])
        cosine = {h["key"]: h["score"] for h in vec}
        for hit in fused:
            if hit["key"] in cosine:
                hit["similarity"] = round(cosine[hit["key"]], 4)
        return fused

    async def vector_search(self, app_id: str, query: str, *, limit: int = 5) -> list[DocHit]:
        """The vectors' side alone (score: the cosine of the best window); for measuring, not the turn loop."""
        matrix = await self._matrix(app_id)
        if matrix is None:
            return []
        qv = await asyncio.to_thread(self.embedder.embed, [" ".join(query[:MAX_QUERY_CHARS].split())])
        return await self.store.hits(matrix.best(qv[0], min(limit, MAX_SEARCH_LIMIT)))

    async def _matrix(self, app_id: str) -> Matrix | None:
        """The app's vectors, when they match the engine's index (re-read at most every ``STATE_TTL_S``)."""
        st = self._apps.setdefault(app_id, _AppState())
        if time.monotonic() - st.checked < STATE_TTL_S:
            return st.matrix if st.usable else None
        async with st.lock:
            if time.monotonic() - st.checked < STATE_TTL_S:
                return st.matrix if st.usable else None
            state = await self.store.state(app_id)
            settings = await self.engine.index_settings(app_id) or {}
            st.usable = False
            if state is None:
                st.matrix = None
            elif settings.get("vectors_run") != state[0]:
                self._warn_once(app_id, state[0], f"docs app {app_id!r}: its BM25 index was rebuilt without the "
                                "embedding model (or its vectors were not published); its searches are BM25 alone "
                                f"until autopilot-relay index --app {app_id} runs with embeddings_model set")
            else:
                if st.matrix is None or st.matrix.version != state[1]:
                    st.matrix = await self.store.load(app_id, self.embedder.model_id, self.max_windows)
                if st.matrix is not None and st.matrix.left_out:
                    self._warn_once(app_id, f"left{st.matrix.version}", f"docs app {app_id!r}: "
                                    f"{st.matrix.left_out} sections are past the {self.max_windows} windows held "
                                    "in memory (embeddings_max_windows); they are found by BM25 alone")
                st.usable = st.matrix is not None
            st.checked = time.monotonic()
            return st.matrix if st.usable else None

    async def has_index(self, app_id: str) -> bool:
        """Whether the app has any indexed section (the engine's answer)."""
        return bool(await self.engine.has_index(app_id))

    async def close(self) -> None:
        """Close the engine and the vector store."""
        try:
            await self.engine.close()
        finally:
            await self.store.close()

    # -- DocsWriter -------------------------------------------------------------------------
    async def index_settings(self, app_id: str) -> dict[str, Any] | None:
        """The engine's stored settings of the app."""
        out: dict[str, Any] | None = await self.engine.index_settings(app_id)
        return out

    async def drop_index(self, app_id: str) -> int:
        """Drop the app's BM25 index and its vectors."""
        n = int(await self.engine.drop_index(app_id))
        await self.store.drop(app_id)
        self._apps.pop(app_id, None)
        return n

    async def begin_index(self, app_id: str) -> HybridJob:
        """The engine's run (its lock), with the vectors of the pages it writes staged beside it."""
        job = await cast_writer(self.engine).begin_index(app_id)
        try:
            await self.store.begin(app_id)
        except BaseException:
            await asyncio.shield(job.abort())
            raise
        return HybridJob(self, app_id, job, uuid.uuid4().hex)

    def embed_pages(self, pages: list[tuple[str, Page]], reuse: dict[str, bytes]) -> list[VectorRow]:
        """Vectors of the pages' sections (``reuse``: vectors by text hash not to embed again); blocking."""
        todo: list[tuple[str, Page, Any, str, list[str]]] = []
        for digest, page in pages:
            for s in page.sections:
                ctx = section_context(page.title, s.headings)
                th = text_hash(self.embedder.model_id, ctx, s.text)
                todo.append((digest, page, s, th, [] if th in reuse else windows(ctx, s.text)))
        texts = [w for *_, wins in todo for w in wins]
        vecs = self.embedder.embed(texts)
        rows: list[VectorRow] = []
        at = 0
        for digest, page, s, th, wins in todo:
            if th in reuse:
                v = np.frombuffer(reuse[th], dtype=np.float32).reshape(-1, vecs.shape[1])
            else:
                v = vecs[at:at + len(wins)]
                at += len(wins)
            if len(v):
                rows.append(VectorRow(page.url, digest, s.key, s.url, page.title, list(s.headings), s.text, th, v))
        return rows


def text_hash(model_id: str, context: str, text: str) -> str:
    """What a section's vectors were made from (the model, the window size, its headings line, its text): vectors
    made with another window size are made again on the next run."""
    h = hashlib.sha256()
    for part in (model_id, f"w{WINDOW_WORDS}", context, text):
        h.update(part.encode("utf-8") + b"\0")
    return h.hexdigest()


def cast_writer(engine: Any) -> DocsWriter:
    """The engine as an index writer."""
    writer: DocsWriter = engine
    return writer


class HybridJob:
    """One index run: the engine's job, and the run's vectors staged until the engine commits."""

    def __init__(self, index: HybridDocsIndex, app_id: str, job: IndexJob, run: str) -> None:
        self.index, self.app_id, self.job, self.run = index, app_id, job, run
        #: Pages the run wrote or removed: their live vectors are replaced at publish.
        self.pages: set[str] = set()
        #: Sections whose vectors this run staged, and how many of them kept vectors of an unchanged text.
        self.embedded_sections = 0
        self.reused_sections = 0

    async def existing(self) -> dict[str, str]:
        """The engine's page hashes, blanked for pages without current vectors (so they are extracted again)."""
        known = await self.job.existing()
        vec = await self.index.store.live_pages(self.app_id, self.index.embedder.model_id)
        # Vectors of pages the BM25 index no longer has (it was rebuilt without the model) go at publish.
        self.pages.update(set(vec) - set(known))
        return {url: (digest if digest and vec.get(url) == digest else "") for url, digest in known.items()}

    async def write(self, pages: list[tuple[str, Page]]) -> None:
        """The engine writes the pages; their sections' vectors are made and staged."""
        await self.job.write(pages)
        model = self.index.embedder.model_id
        hashes = [text_hash(model, section_context(p.title, s.headings), s.text) for _, p in pages for s in p.sections]
        reuse = await self.index.store.reusable(self.app_id, model, hashes)
        try:
            rows = await asyncio.to_thread(self.index.embed_pages, pages, reuse)
        except EmbeddingsUnavailable as exc:
            raise IndexRunError(f"{exc}; nothing of this run was published") from None
        self.reused_sections += sum(1 for h in hashes if h in reuse)
        self.embedded_sections += len(rows)
        await self.index.store.stage(self.app_id, self.run, model, rows)
        self.pages.update(p.url for _, p in pages)

    async def remove(self, urls: list[str]) -> None:
        """The engine removes the pages; their vectors go at publish."""
        await self.job.remove(urls)
        self.pages.update(urls)

    async def commit(self, settings: dict[str, Any]) -> tuple[int, int]:
        """The engine commits (its settings name this run's vectors), then the vectors are published."""
        counts = await self.job.commit({**settings, "vectors_run": self.run,
                                        "vectors_model": self.index.embedder.model_id})
        await self.index.store.publish(self.app_id, self.run, sorted(self.pages))
        self.index._apps.pop(self.app_id, None)
        log.info("docs app %r: vectors of %d sections published (%d kept from unchanged text)", self.app_id,
                 self.embedded_sections, self.reused_sections)
        return counts

    async def abort(self) -> None:
        """The engine's abort, and the run's staged vectors deleted (best effort: the next run deletes them)."""
        try:
            await self.job.abort()
        finally:
            try:
                await self.index.store.discard(self.app_id, self.run)
            except Exception:  # noqa: BLE001 - the store may be what failed; the next run's begin cleans up
                log.debug("could not discard the staged vectors of run %s", self.run)


def open_hybrid(engine: Any, database_url: str | None, db_path: str, model: str,
                max_windows: int | None = None, models: dict[str, Any] | None = None, *,
                threads: int | None = None) -> DocsIndex:
    """``engine`` wrapped in hybrid search with the vectors in the engine's own database: from the model folder
    ``model`` (``threads`` windows at once; ``embeddings.DEFAULT_THREADS`` unless given), or from an
    OpenAI-compatible endpoint for ``endpoint:NAME`` (``models[NAME]``: base_url, model, api_key); the engine
    alone, with a warning saying why, when the model cannot be loaded."""
    from .embeddings import DEFAULT_THREADS, Embedder, EndpointEmbedder
    from .vectors import PgVectors, SqliteVectors

    embedder: TextEmbedder
    try:
        if model.startswith(ENDPOINT_PREFIX):
            name = model[len(ENDPOINT_PREFIX):]
            spec = (models or {}).get(name)
            if spec is None:
                raise EmbeddingsUnavailable(f"embeddings_model {model!r} names no [models.{name}] entry; docs search "
                                            "is BM25 alone")
            embedder = EndpointEmbedder(spec.base_url, spec.model, spec.api_key, timeout_s=spec.request_timeout_s)
        else:
            embedder = Embedder(model, threads=threads or DEFAULT_THREADS)
    except EmbeddingsUnavailable as exc:
        log.warning("%s", exc)
        plain: DocsIndex = engine
        return plain
    store: VectorStore = PgVectors(database_url) if database_url else SqliteVectors(db_path)
    return HybridDocsIndex(engine, store, embedder, max_windows=max_windows or MAX_WINDOWS)

"""The site's documentation on the relay: an index of its sections per app, searched by the model's ``search_docs``.

This package owns everything about the docs (extracting sections from built HTML and Markdown, the incremental
index in SQLite FTS5 or PostgreSQL full-text search, the ``search_docs`` reply, the ``index``/``search`` commands).
The turn loop uses only what this module exports: ``DocHit``, ``DocsIndex`` and ``open_docs_index``.
"""

from __future__ import annotations

from .search import DocHit, DocsIndex


def open_docs_index(database_url: str | None, db_path: str) -> DocsIndex:
    """The relay's docs index: PostgreSQL full-text search when ``database_url`` is set, else SQLite FTS5 in the
    relay's database file ``db_path``. Connects on first use; ``close()`` when done."""
    if database_url:
        from .pg_index import PgDocsIndex

        return PgDocsIndex(database_url)
    from .sqlite_index import SqliteDocsIndex

    return SqliteDocsIndex(db_path)


__all__ = ["DocHit", "DocsIndex", "open_docs_index"]

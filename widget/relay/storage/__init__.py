"""The relay's storage room: the ``Store`` interface and its two engines, and the one rule that picks an engine.

``store.py`` is the interface with its shared logic, ``base.py`` what every store shares below it, ``sql.py`` the
seam to an engine, ``sqlite.py`` the embedded default and ``postgres.py`` the engine for several relay processes.
"""

from __future__ import annotations

from .sqlite import SQLiteStore
from .store import Store


def make_store(database_url: str | None, db_path: str) -> Store:
    """PostgreSQL when ``database_url`` is set, else the embedded SQLite file at ``db_path``."""
    if database_url:
        from .postgres import PostgresStore  # asyncpg is an optional extra: imported only when configured

        return PostgresStore(database_url)
    return SQLiteStore(db_path)


__all__ = ["SQLiteStore", "Store", "make_store"]

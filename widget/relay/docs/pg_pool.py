"""A PostgreSQL pool a docs part opens on first use, its tables made or migrated once under an advisory lock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

#: Make or migrate a part's tables on a connection inside a transaction (the advisory lock is held).
Setup = Callable[[Any], Awaitable[None]]


class LazyPgPool:
    """An asyncpg pool of at most ``max_connections``, opened by the first ``get``; its ``setup`` runs once, under
    ``pg_advisory_xact_lock(lock_key)``, so relay processes starting together do not race on the tables."""

    def __init__(self, dsn: str, max_connections: int, lock_key: int, setup: Setup) -> None:
        self.dsn = dsn
        self.max_connections = max_connections
        self._lock_key = lock_key
        self._setup = setup
        self._pool: Any = None
        self._opening = asyncio.Lock()

    async def get(self) -> Any:
        """The pool (opened, and the tables set up, on the first call)."""
        if self._pool is None:
            async with self._opening:
                if self._pool is None:
                    import asyncpg  # the scale extra: only a relay with database_url needs it

                    pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=self.max_connections)
                    async with pool.acquire() as con, con.transaction():
                        await con.execute("SELECT pg_advisory_xact_lock($1)", self._lock_key)
                        await self._setup(con)
                    self._pool = pool
        return self._pool

    async def close(self) -> None:
        """Close the pool, if it was opened."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

"""The relay's SQLite files without a relay: a batch of writes committed, an old database migrated, a re-index that
leaves the rows of unchanged pages alone (the suites on both engines: test_relay_store.py, test_docs_index.py)."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from widget.relay.docs import open_docs_index
from widget.relay.docs.indexer import run_index
from widget.relay.storage import SQLiteStore
from widget.relay.storage import sqlite as sqlite_engine

pytestmark = pytest.mark.unit


# The docs index's pages from memory (tests/test_docs_index.py uses them too).
@dataclass
class MemPage:
    """A page from memory (as a crawler or a push would bring it); ``gate`` makes its read wait or fail."""

    url: str
    data: bytes
    kind: str = "html"
    gate: Any = None

    def read(self) -> bytes:
        if self.gate is not None:
            return bytes(self.gate(self))
        return self.data


def html(title: str, *sections: tuple[str, str]) -> bytes:
    body = "".join(f'<h2 id="{a}">{a.replace("-", " ").title()}</h2><p>{text}</p>' for a, text in sections)
    return (f"<html><head><title>{title} - Site</title></head><body><nav>Navigation Zebra</nav><main>"
            f'<h1 id="top">{title}</h1><p>{title} introduction.</p>{body}</main></body></html>').encode()


SITE = [
    MemPage("/theming/", html("Theming", ("colours", "Set the accent colour with a custom property."),
                              ("dark-mode", "The bar follows the page's dark scheme."))),
    MemPage("/deploy/", html("Deployment", ("proxy", "Put nginx in front as a reverse proxy with websockets."),
                             ("postgres", "Several relay processes share one PostgreSQL database."))),
    MemPage("/api/", html("API", ("ask", "client.ask sends a question and streams the answer."))),
]


async def test_sqlite_batch_is_committed(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite3")
    await store.open()
    try:
        await store.create_conversation("c", "demo", {"autopilot": {}})
        await asyncio.gather(*(store.append_event("c", "message", {}) for _ in range(30)))
    finally:
        await store.close()
    db = sqlite3.connect(tmp_path / "s.sqlite3")
    assert db.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 30
    assert db.execute("PRAGMA user_version").fetchone()[0] == sqlite_engine.SCHEMA_VERSION
    db.close()


async def test_sqlite_migrates_an_old_database(tmp_path: Path) -> None:
    """A file written by the relay before the scale-out columns gets them (PRAGMA user_version)."""
    db = sqlite3.connect(tmp_path / "old.sqlite3")
    db.executescript(sqlite_engine._SCHEMA)
    db.execute("INSERT INTO conversations (id, app_id, status, created_at, updated_at, state) VALUES "
               "('c','demo','idle',0,0,'{}')")
    # a call answered before the handler's time had one name (it was handler_ms in the store)
    db.execute("INSERT INTO calls (conversation_id, id, turn_id, name, kind, arguments, status, handler_ms, total_ms,"
               " created_at) VALUES ('c','k','t','f','function','{}','answered',2.5,3.0,0)")
    db.commit()
    db.close()
    store = SQLiteStore(tmp_path / "old.sqlite3")
    await store.open()
    try:
        assert (await store.get_conversation("c"))["active_sid"] is None  # type: ignore[index]
        await store.add_member("c", "s", "i")
        call = await store.get_call("c", "k")
        assert call is not None and (call["duration_ms"], call["total_ms"]) == (2.5, 3.0)
    finally:
        await store.close()


async def test_unchanged_pages_are_not_touched(tmp_path: Path) -> None:
    idx: Any = open_docs_index(None, str(tmp_path / "r.sqlite3"))
    await run_index(idx, "site", SITE)
    db = sqlite3.connect(tmp_path / "r.sqlite3")
    before = db.execute("SELECT url, id FROM docs_pages ORDER BY url").fetchall()
    await run_index(idx, "site", [SITE[0], MemPage("/deploy/", html("Deployment", ("x", "new"))), SITE[2]])
    after = dict(db.execute("SELECT url, id FROM docs_pages ORDER BY url").fetchall())
    assert after["/theming/"] == dict(before)["/theming/"] and after["/api/"] == dict(before)["/api/"]
    assert after["/deploy/"] != dict(before)["/deploy/"]
    assert db.execute("SELECT count(*) FROM docs_pages").fetchone()[0] == 3  # the replaced row was deleted
    db.close()
    await idx.close()

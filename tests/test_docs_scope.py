"""Versions and languages of a docs site (issue 33 item 5): a site that serves ``/en/3.12/...`` beside
``/en/3.11/...`` and ``/fr/3.12/...`` keeps them apart. A reader's search is scoped to the version and language of
the page they are on (its URL in the page context), or to the version the question names, on both engines, from
real built pages on disk; a page without a scope searches everything; an index written before sections had a path
still opens and searches scoped; the ``search`` command's ``--scope``; and relay turns with the demo model citing
the section of the reader's version. The pure parts (scopes from URLs and questions, the fallback note) are unit
tests in test_docs_units.py, the ``[apps.<id>.docs]`` scope settings in test_relay_config.py.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
import pytest_asyncio
from relay_helpers import SHOP_SECRET, STORE_KINDS, Recorder, database_for, joined, launch
from test_docs_units import V11

from widget.relay.config import AppConfig, DocsConfig, ModelConfig
from widget.relay.docs import open_docs_index
from widget.relay.docs.indexer import run_index
from widget.relay.docs.query import scope_plan
from widget.relay.docs.tool import EVERY_SCOPE, SCOPE_FALLBACK_NOTE, scoped_search
from widget.relay.docs.walk import Source, collect

pytestmark = pytest.mark.relay

REPO = Path(__file__).resolve().parent.parent


def page(title: str, *sections: tuple[str, str, str]) -> str:
    body = "".join(f'<h2 id="{a}">{h}</h2><p>{text}</p>' for a, h, text in sections)
    return (f"<!doctype html><html><head><title>{title}</title></head><body><nav>Versions 3.11 3.12</nav><main>"
            f'<h1 id="top">{title}</h1>{body}</main></body></html>')


#: A built site: two English versions, a French one, a what's-new page only 3.12 has, and a root page.
#: Unscoped, the 3.12 section outranks the 3.11 one for the cancel question (it says "task group" more often).
FILES = {
    "index.html": page("Welcome", ("versions", "Versions", "Pick a version of the manual: 3.11 or 3.12.")),
    "en/3.12/library/taskgroup/index.html": page("Task groups", (
        "cancel", "Cancel a task group",
        "To cancel a task group in 3.12, cancel the task that runs the task group: the task group cancels every "
        "task group member and the task group waits for them.")),
    "en/3.11/library/taskgroup/index.html": page("Task groups", (
        "cancel", "Cancel a task group",
        "In 3.11 a group stops with the coroutine that runs it; pending members stop first, then the context "
        "manager exits.")),
    "fr/3.12/library/taskgroup/index.html": page("Groupes de tâches", (
        "annuler", "Annuler un groupe de tâches",
        "Pour annuler un groupe de tâches en 3.12, annulez la tâche qui exécute le groupe.")),
    "en/3.12/whatsnew/index.html": page("What's new in 3.12", (
        "eager", "Eager factory",
        "The eager factory runs a coroutine's first steps at once, before the event loop schedules it.")),
}
V12 = "/en/3.12/library/taskgroup/#cancel"
FR = "/fr/3.12/library/taskgroup/#annuler"
CANCEL = "How do I cancel a task group?"


def build_site(root: Path) -> Path:
    site = root / "site"
    for rel, text in FILES.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text, encoding="utf-8")
    return site


async def index_site(writer: Any, app: str, root: Path) -> None:
    files, warnings = collect([Source(build_site(root), "/")], max_pages=100)
    assert not warnings
    summary = await run_index(writer, app, files)
    assert summary["pages"] == len(FILES) and summary["skipped"] == 0


@pytest_asyncio.fixture(params=STORE_KINDS)
async def engine(request: Any, tmp_path: Path) -> AsyncIterator[Any]:
    """A docs index (SQLite or PostgreSQL) holding the two-version, two-language site as app ``py``."""
    url = database_for(tmp_path) if request.param == "postgres" else None
    idx: Any = open_docs_index(url, str(tmp_path / "relay.sqlite3"))
    await index_site(idx, "py", tmp_path)
    idx.kind, idx.url = request.param, url
    yield idx
    await idx.close()


async def urls(idx: Any, query: str, scope: str | None = None) -> list[str]:
    return [h["url"] for h in await idx.search("py", query, limit=10, scope=scope)]


async def from_page(idx: Any, page_url: str | None, query: str, **kw: Any) -> tuple[list[str], str | None]:
    """What the relay's ``search_docs`` finds for ``query`` asked on ``page_url``: (section URLs, note)."""
    plan = scope_plan(page_url, [query], **kw)
    hits, note = await scoped_search(idx, "py", query, plan, limit=10)
    return [h["url"] for h in hits], note


# -- both engines -------------------------------------------------------------------------------------------

async def test_a_scoped_search_keeps_versions_and_languages_apart(engine: Any) -> None:
    everything = await urls(engine, CANCEL)
    assert everything[:2] == [V12, V11]  # unscoped: both versions, 3.12 first
    assert await urls(engine, CANCEL, "/en/3.11/") == [V11]
    assert await urls(engine, CANCEL, "/en/3.11") == [V11]  # a folder, with or without its last "/"
    assert await urls(engine, CANCEL, "/en/3.1") == []  # a folder: /en/3.11/ is not under /en/3.1/
    assert await urls(engine, CANCEL, "/en/3.12/") == [V12]
    assert set(await urls(engine, CANCEL, "/en/")) == {V11, V12}
    assert await urls(engine, "annuler un groupe de tâches", "/fr/") == [FR]
    assert await urls(engine, "annuler les tâches", "/en/") == []
    assert await urls(engine, CANCEL, "/") == everything and await urls(engine, CANCEL, "") == everything
    with pytest.raises(ValueError, match="must be a URL path"):
        await engine.search("py", CANCEL, scope="en/3.11/")


async def test_search_from_a_page_and_a_question_naming_another_version(engine: Any) -> None:
    on_311 = "https://docs.example.com/en/3.11/library/taskgroup/"
    assert await from_page(engine, on_311, CANCEL) == ([V11], None)
    assert await from_page(engine, "/en/3.12/library/taskgroup/", CANCEL) == ([V12], None)
    # the question names the other version: that version's section, from the 3.11 page
    for question in ("How do I cancel a task group in 3.12?", "version 3.12: cancel a task group"):
        found, note = await from_page(engine, on_311, question)
        assert found[0] == V12 and all(u.startswith("/en/3.12/") for u in found) and note is None, question
    # both versions named: the language's documentation, no French
    found, note = await from_page(engine, on_311, "cancel a task group: 3.11 versus 3.12")
    assert {V11, V12} <= set(found) and all(u.startswith("/en/") for u in found) and note is None
    # the French page searches the French documentation
    assert await from_page(engine, "/fr/3.12/library/taskgroup/", "annuler un groupe") == ([FR], None)
    # a page without a scope (the site's root, a page context without a URL) searches everything
    assert (await from_page(engine, "https://docs.example.com/", CANCEL))[0][:2] == [V12, V11]
    assert (await from_page(engine, None, CANCEL))[0][:2] == [V12, V11]
    # nothing in the page's version: the whole documentation, and the note says where the sections are from
    found, note = await from_page(engine, on_311, "eager factory")
    assert found == ["/en/3.12/whatsnew/#eager"]
    assert note == SCOPE_FALLBACK_NOTE.format(first="/en/3.11/", found=EVERY_SCOPE)
    # a named version the site does not have: the page's own version, said so
    found, note = await from_page(engine, on_311, "cancel a task group in 3.9")
    assert found == [V11] and note == SCOPE_FALLBACK_NOTE.format(first="/en/3.9/", found="/en/3.11/")
    assert await from_page(engine, on_311, "zzqx wibble") == ([], None)


async def test_an_index_written_before_scopes_opens_and_searches_scoped(engine: Any, tmp_path: Path) -> None:
    """The layout of the index before sections had their page's path (same layout version): opened again, it gets
    the paths from its pages' URLs and keeps serving, scoped."""
    await engine.close()
    if engine.kind == "sqlite":
        db = sqlite3.connect(tmp_path / "relay.sqlite3")
        db.executescript("DROP INDEX docs_sections_live; ALTER TABLE docs_sections DROP COLUMN path; "
                         "CREATE INDEX docs_sections_live ON docs_sections(id, app_id, live_from, live_until);")
        db.close()
    else:
        con = await asyncpg.connect(engine.url)
        await con.execute("ALTER TABLE docs_chunks DROP COLUMN path")
        await con.close()
    again: Any = open_docs_index(engine.url, str(tmp_path / "relay.sqlite3"))
    try:
        assert await urls(again, CANCEL, "/en/3.11/") == [V11]
        assert (await urls(again, CANCEL))[:2] == [V12, V11]
        await index_site(again, "py", tmp_path)  # and a run over it changes nothing
        assert await urls(again, CANCEL, "/en/3.12/") == [V12]
    finally:
        await again.close()


# -- the command and the settings -------------------------------------------------------------------------

def relay_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("AUTOPILOT_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "widget.relay", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=120)


def test_the_search_command_takes_a_scope(tmp_path: Path) -> None:
    db = str(tmp_path / "r.sqlite3")
    out = relay_cli("index", "--app", "py", str(build_site(tmp_path)), "--db", db, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    out = relay_cli("search", "--app", "py", "--db", db, "--scope", "/en/3.11/", CANCEL, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert [s["url"] for s in json.loads(out.stdout)["sections"]] == [V11]
    out = relay_cli("search", "--app", "py", "--db", db, "--hits", CANCEL, cwd=tmp_path)
    assert [h["url"] for h in json.loads(out.stdout)][:2] == [V12, V11]
    bad = relay_cli("search", "--app", "py", "--db", db, "--scope", "en/3.11", CANCEL, cwd=tmp_path)
    assert bad.returncode == 1 and "scope must be a URL path that starts with '/'" in bad.stderr


# -- relay turns with the demo model ----------------------------------------------------------------------

@pytest_asyncio.fixture
async def relay(tmp_path: Path) -> AsyncIterator[Any]:
    """A relay whose own docs index (SQLite, in its database file) holds the site for the ``demo`` app (one-shot
    turns: the relay searches the question), ``steps`` (agentic: the model calls ``search_docs``) and ``flat``, an
    app with ``scopes = false``; all answer with the demo model."""
    apps = {"demo": AppConfig(model="demo"),
            "steps": AppConfig(model="demo", secret=SHOP_SECRET, loop="agentic"),
            "flat": AppConfig(model="demo", secret=SHOP_SECRET, docs=DocsConfig(scopes=False))}
    h = await launch(tmp_path, apps=apps, models={"demo": ModelConfig(chunk_delay_ms=0)})
    try:
        for app in apps:
            await index_site(h.hub.docs, app, tmp_path)
        yield h
    finally:
        await h.stop()


async def on_page(rec: Recorder, url: str) -> None:
    """Set the page context as the MkDocs plugin and the Sphinx extension do: ``{page: {title, url}}``."""
    patch = [{"op": "add", "path": "/autopilot/context/page", "value": {"title": "Task groups", "url": url}}]
    ack = await rec.call("state_patch", {"patch": patch, "idempotency_key": "ctx"})
    assert ack == {"ok": True}, ack


async def answer(rec: Recorder, text: str, key: str) -> dict[str, Any]:
    """The last assistant message of a turn."""
    return (await turn(rec, text, key))[-1]["message"]


async def turn(rec: Recorder, text: str, key: str) -> list[dict[str, Any]]:
    """The ``completion.ended`` events of a turn."""
    mark = len(rec.events)
    ack = await rec.call("user_message", {"text": text, "idempotency_key": key})
    assert ack["ok"], ack
    await rec.wait("user_input", pred=lambda d: d["reason"] == "message", start=mark)
    return [d for e, d in rec.events[mark:] if e == "completion.ended"]


async def test_a_reader_on_a_311_page_gets_the_311_section(relay: Any) -> None:
    async with aiohttp.ClientSession() as http:
        rec, _, _ = await joined(http, relay.url, app="demo")
        await on_page(rec, "https://docs.example.com/en/3.11/library/taskgroup/")
        msg = await answer(rec, CANCEL, "m1")
        assert "In 3.11 a group stops with the coroutine that runs it" in msg["content"], msg["content"]
        (src,) = msg["sources"]
        assert src["url"].startswith(V11 + ":~:text=")
        # the question names the other version: its section
        msg = await answer(rec, "How do I cancel a task group in 3.12?", "m2")
        assert [s["url"].split(":~:")[0] for s in msg["sources"]] == [V12]
        await rec.disconnect()
        # a page without a scope: the best section of any version (3.12's)
        rec, _, _ = await joined(http, relay.url, app="demo")
        await on_page(rec, "https://docs.example.com/")
        msg = await answer(rec, CANCEL, "m1")
        assert [s["url"].split(":~:")[0] for s in msg["sources"]] == [V12]
        await rec.disconnect()
        # an app with scopes = false searches everything from a 3.11 page too
        rec, _, _ = await joined(http, relay.url, app="flat")
        await on_page(rec, "https://docs.example.com/en/3.11/library/taskgroup/")
        msg = await answer(rec, CANCEL, "m1")
        assert [s["url"].split(":~:")[0] for s in msg["sources"]] == [V12]
        await rec.disconnect()


async def test_search_steps_on_a_311_page_and_the_note_when_the_search_widened(relay: Any) -> None:
    async with aiohttp.ClientSession() as http:
        rec, _, _ = await joined(http, relay.url, app="steps")
        await on_page(rec, "/en/3.11/library/taskgroup/")
        search, final = await turn(rec, CANCEL, "m1")
        assert [c["name"] for c in search["message"]["function_calls"]] == ["search_docs"]
        (reply,) = [m["result"] for m in search["tool_messages"]]
        assert [s["url"] for s in reply["sections"]] == [V11] and "note" not in reply
        assert [s["url"].split(":~:")[0] for s in final["message"]["sources"]] == [V11]
        # only 3.12 has it: the whole documentation is searched, and the reply tells the model so
        search, final = await turn(rec, "What is the eager factory?", "m2")
        (reply,) = [m["result"] for m in search["tool_messages"]]
        assert [s["url"] for s in reply["sections"]] == ["/en/3.12/whatsnew/#eager"]
        assert reply["note"] == SCOPE_FALLBACK_NOTE.format(first="/en/3.11/", found=EVERY_SCOPE)
        assert [s["url"].split(":~:")[0] for s in final["message"]["sources"]] == ["/en/3.12/whatsnew/#eager"]
        await rec.disconnect()

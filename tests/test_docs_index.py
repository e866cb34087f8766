"""The docs index on both engines (SQLite FTS5 in the relay's file, PostgreSQL full-text search): one search
contract, incremental and atomic re-indexing, bad input, and the ``index``/``search`` commands."""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from relay_helpers import STORE_KINDS, database_for
from test_sqlite_files import SITE, MemPage, html

from widget.protocol import TOOL_REPLY_MAX_CHARS
from widget.relay.docs import open_docs_index
from widget.relay.docs.indexer import IndexBusy, IndexOptions, run_index
from widget.relay.docs.walk import Source, collect

pytestmark = pytest.mark.relay

REPO = Path(__file__).resolve().parent.parent


@pytest_asyncio.fixture(params=STORE_KINDS)
async def index(request: Any, tmp_path: Path) -> AsyncIterator[Any]:
    idx: Any = open_docs_index(database_for(tmp_path) if request.param == "postgres" else None,
                               str(tmp_path / "relay.sqlite3"))
    yield idx
    await idx.close()


async def urls(idx: Any, app: str, query: str, limit: int = 5) -> list[str]:
    return [h["url"] for h in await idx.search(app, query, limit=limit)]


async def test_search_contract(index: Any) -> None:
    assert not await index.has_index("site")
    assert await index.search("site", "colours") == []
    summary = await run_index(index, "site", SITE)
    assert summary | {"seconds": 0} == {"app": "site", "pages": 3, "sections": 8, "added": 3, "changed": 0,
                                         "removed": 0, "unchanged": 0, "skipped": 0, "warnings": 0, "seconds": 0}
    assert await index.has_index("site")
    hits = await index.search("site", "How do I change the accent colour?")
    assert hits[0]["url"] == "/theming/#colours"
    assert hits[0]["key"] == "/theming/#colours" and hits[0]["page_title"] == "Theming"
    assert hits[0]["headings"] == ["Theming", "Colours"]
    assert hits[0]["text"] == "Set the accent colour with a custom property."
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0
    assert (await urls(index, "site", "reverse proxy nginx"))[0] == "/deploy/#proxy"
    assert (await urls(index, "site", "streaming answers"))[0] == "/api/#ask"  # stemmed: streams ~ streaming
    assert len(await index.search("site", "the", limit=2)) <= 2
    assert await index.search("site", "navigation zebra") == []  # the nav is not indexed


async def test_another_apps_index_is_never_searched(index: Any) -> None:
    await run_index(index, "a", SITE[:1])
    await run_index(index, "b", SITE[1:])
    assert await urls(index, "b", "accent colour") == []
    assert (await urls(index, "a", "accent colour"))[0] == "/theming/#colours"
    assert not await index.has_index("c")


@pytest.mark.parametrize("question", [
    '"accent colour', "accent* colour*", "NEAR(accent colour)", "-accent colour", "title:accent colour",
    "((accent) OR colour", "accent AND NOT colour", "accent ^ colour {x} [y]", "accent' colour;--", "accent: colour",
])
async def test_search_syntax_in_a_question_changes_nothing(index: Any, question: str) -> None:
    await run_index(index, "site", SITE)
    plain = await index.search("site", "accent colour")
    assert plain and await index.search("site", question) == plain


async def test_a_huge_question_is_cut_not_refused(index: Any) -> None:
    await run_index(index, "site", SITE)
    assert (await urls(index, "site", "reverse proxy " + "x" * 10_000))[0] == "/deploy/#proxy"
    assert (await urls(index, "site", "nginx " * 2_000))[0] == "/deploy/#proxy"
    assert await index.search("site", "!!! ??? ...") == []


async def test_reindex_is_incremental(index: Any, tmp_path: Path) -> None:
    await run_index(index, "site", SITE)
    again = await run_index(index, "site", SITE)
    assert (again["added"], again["changed"], again["removed"], again["unchanged"]) == (0, 0, 0, 3)
    changed = [MemPage("/theming/", html("Theming", ("colours", "Pick a palette of hues."))), SITE[1]]
    summary = await run_index(index, "site", changed)
    assert (summary["added"], summary["changed"], summary["removed"], summary["unchanged"]) == (0, 1, 1, 1)
    assert (summary["pages"], summary["sections"]) == (2, 5)
    assert await urls(index, "site", "accent") == []  # the old text is gone
    assert await urls(index, "site", "client ask") == []  # the removed page is gone
    assert (await urls(index, "site", "palette hues"))[0] == "/theming/#colours"


async def test_a_search_during_a_reindex_sees_the_old_index(index: Any) -> None:
    await run_index(index, "site", SITE)
    reached, release = threading.Event(), threading.Event()

    def wait(page: MemPage) -> bytes:
        reached.set()
        release.wait(30)
        return page.data

    new = [MemPage("/theming/", html("Theming", ("colours", "Pick a palette of hues."))),
           MemPage("/new/", html("Brand new", ("fresh", "Entirely fresh words."))),
           MemPage("/api/", SITE[2].data, gate=wait)]
    run = asyncio.create_task(run_index(index, "site", new, options=IndexOptions(batch_pages=1)))
    await asyncio.to_thread(reached.wait, 30)  # two pages written, not yet published
    assert (await urls(index, "site", "accent colour"))[0] == "/theming/#colours"
    assert await urls(index, "site", "palette hues fresh") == []
    assert (await urls(index, "site", "reverse proxy"))[0] == "/deploy/#proxy"
    release.set()
    summary = await run
    assert (summary["added"], summary["changed"], summary["removed"]) == (1, 1, 1)
    assert await urls(index, "site", "accent") == []
    assert await urls(index, "site", "reverse proxy") == []
    assert (await urls(index, "site", "entirely fresh"))[0] == "/new/#fresh"


async def test_a_failed_reindex_leaves_the_previous_index_serving(index: Any) -> None:
    await run_index(index, "site", SITE)

    def boom(page: MemPage) -> bytes:
        raise RuntimeError("disk on fire")

    broken = [MemPage("/theming/", html("Theming", ("colours", "Pick a palette of hues."))),
              MemPage("/new/", html("Brand new", ("fresh", "Entirely fresh words."))),
              MemPage("/api/", b"", gate=boom)]
    with pytest.raises(RuntimeError, match="disk on fire"):
        await run_index(index, "site", broken, options=IndexOptions(batch_pages=1))
    assert (await urls(index, "site", "accent colour"))[0] == "/theming/#colours"
    assert await urls(index, "site", "palette hues fresh") == []
    assert (await urls(index, "site", "client ask"))[0] == "/api/#ask"
    # The next run starts clean: nothing of the failed one is left over.
    summary = await run_index(index, "site", SITE)
    assert (summary["pages"], summary["sections"], summary["unchanged"]) == (3, 8, 3)
    assert await urls(index, "site", "palette hues fresh") == []


async def test_one_run_per_app_at_a_time(index: Any) -> None:
    gate, release = threading.Event(), threading.Event()

    def wait(page: MemPage) -> bytes:
        gate.set()
        release.wait(30)
        return page.data

    first = asyncio.create_task(run_index(index, "site", [MemPage("/a/", SITE[0].data, gate=wait)]))
    await asyncio.to_thread(gate.wait, 30)
    with pytest.raises(IndexBusy, match="another index run"):
        await run_index(index, "site", SITE)
    assert (await run_index(index, "other", SITE))["pages"] == 3  # another app is not blocked
    release.set()
    assert (await first)["pages"] == 1
    assert (await run_index(index, "site", SITE))["pages"] == 3


async def test_problem_pages_are_skipped_and_keep_their_previous_version(index: Any) -> None:
    await run_index(index, "site", SITE)
    lines: list[str] = []
    bad = [MemPage("/theming/", SITE[0].data + b"<!--" + b"x" * 5000 + b"-->"),  # over the page limit
           MemPage("/deploy/", b"<html><body><nav>only navigation</nav></body></html>"),  # no main content
           MemPage("/api/", SITE[2].data), MemPage("/api/", SITE[2].data),  # the same URL twice
           MemPage("/empty/", b"")]
    summary = await run_index(index, "site", bad, options=IndexOptions(max_page_bytes=len(SITE[0].data) + 100),
                              warn=lines.append)
    assert (summary["skipped"], summary["removed"], summary["pages"]) == (3, 0, 3)
    assert any("/theming/" in line and "over the page limit" in line and "previous version stays" in line
               for line in lines)
    assert any("/deploy/" in line and "no text" in line for line in lines)
    assert any("already has the URL /api/" in line for line in lines)
    assert (await urls(index, "site", "reverse proxy"))[0] == "/deploy/#proxy"


async def test_a_template_fragment_is_skipped_and_leaves_and_untitled_markdown_is_named(index: Any,
                                                                                       tmp_path: Path) -> None:
    """HTTPX's docs folder as MkDocs reads it: a theme override beside the Markdown, pages without a # heading."""
    docs = tmp_path / "docs"
    for rel, text in {
        "index.md": "Words on the home page about transports.\n",
        "advanced/clients.md": "!!! hint\n    Pool connections.\n\n## Why use a Client?\n\nConnection pooling.\n",
        "advanced/index.md": "An overview of keepalive tuning.\n",
        "advanced/proxies.md": "---\ntitle: 'Proxies, and why'\n---\nRoute through a socks proxy.\n",
        "overrides/partials/nav.html": "{% set class = 'md-nav' %}\n<nav class=\"{{ class }}\"><label>Navigation "
                                       "labyrinth</label></nav>\n<p>{{ config.site_name }} labyrinth</p>\n",
    }.items():
        (docs / rel).parent.mkdir(parents=True, exist_ok=True)
        (docs / rel).write_text(text)
    files, _ = collect([Source(docs, "/")], max_pages=100)
    # The override as an earlier version indexed it: a page, found by its words.
    await run_index(index, "httpx", [MemPage("/overrides/partials/nav.html",
                                             b"<html><body><main><p>Labyrinth</p></main></body></html>")])
    assert await urls(index, "httpx", "labyrinth") == ["/overrides/partials/nav.html"]
    lines: list[str] = []
    summary = await run_index(index, "httpx", files, warn=lines.append)
    assert (summary["pages"], summary["skipped"], summary["warnings"], summary["removed"]) == (4, 1, 1, 1)
    assert lines == [f"{docs / 'overrides/partials/nav.html'}: a template fragment ({{% … %}} or {{{{ … }}}} "
                     "outside code, and no <html>, <head> or <body>), not a page (overrides/ is where MkDocs' theme "
                     "overrides live: --exclude overrides leaves the folder out); skipped"]
    assert await urls(index, "httpx", "labyrinth") == []
    titles = {h["url"]: h["page_title"] for q in ("pooling", "keepalive", "socks proxy", "transports")
              for h in await index.search("httpx", q)}
    assert titles == {"/advanced/clients/": "Clients", "/advanced/clients/#why-use-a-client": "Clients",
                      "/advanced/": "Advanced", "/advanced/proxies/": "Proxies, and why", "/": "Home"}


# -- the commands ---------------------------------------------------------------------------------------------

def relay_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("AUTOPILOT_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "widget.relay", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.fixture(scope="module")
def docs_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repo's docs/*.md indexed once as the demo serves them (``/docs/<name>.html#anchor``)."""
    tmp = tmp_path_factory.mktemp("docs-cli")
    docs = tmp / "docs"  # a copy: the repo's docs may change while the tests run
    docs.mkdir()
    for page in (REPO / "docs").glob("*.md"):
        shutil.copy(page, docs / page.name)
    out = relay_cli("index", "--app", "demo", f"{docs}=/docs/", "--url-style", "html",
                    "--db", str(tmp / "relay.sqlite3"), cwd=tmp)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["pages"] >= 10 and summary["sections"] >= 100 and summary["added"] == summary["pages"]
    return tmp / "relay.sqlite3"


def test_search_command_prints_what_the_model_gets(docs_db: Path) -> None:
    out = relay_cli("search", "--app", "demo", "--db", str(docs_db), "how do I change the bar's colours?",
                    cwd=docs_db.parent)
    assert out.returncode == 0, out.stderr
    reply = json.loads(out.stdout)
    assert [s["id"] for s in reply["sections"]] == [f"s{i}" for i in range(1, len(reply["sections"]) + 1)]
    assert reply["sections"][0]["url"] == "/docs/theming.html#colours"
    assert reply["sections"][0]["title"] == "Theming the bar › Colours"
    assert len(json.dumps(reply, ensure_ascii=False, separators=(",", ":"))) <= TOOL_REPLY_MAX_CHARS
    missing = relay_cli("search", "--app", "nope", "--db", str(docs_db), "colours", cwd=docs_db.parent)
    assert missing.returncode == 1 and "has no index" in missing.stderr


def test_index_command_reruns_from_stored_settings_and_drops(docs_db: Path) -> None:
    out = relay_cli("index", "--app", "demo", "--db", str(docs_db), cwd=docs_db.parent)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["unchanged"] == json.loads(out.stdout)["pages"]
    assert out.stderr == ""  # no progress bar off a terminal
    out = relay_cli("index", "--app", "fresh", "--db", str(docs_db), cwd=docs_db.parent)
    assert out.returncode == 2 and "has no index yet" in out.stderr


def test_index_command_bounds(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_bytes(html("Home", ("welcome", "Welcome words.")))
    big = site / "big.html"
    with big.open("wb") as fh:  # a 20 MB page
        fh.write(b"<html><body><main><p>" + b"word " * 4_000_000 + b"</p></main></body></html>")
    db = str(tmp_path / "r.sqlite3")
    out = relay_cli("index", "--app", "s", str(site), "--db", db, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "big.html: 20.0 MB is over the page limit of 10.5 MB (--max-page-bytes); skipped" in out.stderr
    assert json.loads(out.stdout)["pages"] == 1
    # A folder with 100,000 files (hard links of one, in memory where the machine has a tmpfs: seconds, not a minute).
    many = Path(tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else tmp_path))
    try:
        (many / "p0.html").touch()
        for i in range(1, 100_000):
            os.link(many / "p0.html", many / f"p{i}.html")
        out = relay_cli("index", "--app", "s", str(many), "--db", db, cwd=tmp_path)
    finally:
        shutil.rmtree(many)
    assert out.returncode == 1
    assert "more than 20000 pages" in out.stderr and "--max-pages" in out.stderr
    search = relay_cli("search", "--app", "s", "--db", db, "welcome", cwd=tmp_path)
    assert json.loads(search.stdout)["sections"][0]["url"] == "/#welcome"  # the index before is intact
    bad = relay_cli("index", "--app", "s", str(site), "--selector", "div[", "--db", db, cwd=tmp_path)
    assert bad.returncode == 2 and "not a CSS selector" in bad.stderr


async def test_no_question_raises(index: Any) -> None:
    """Questions built from search-syntax characters, scripts, marks and controls: every one is answered."""
    await run_index(index, "site", SITE + [MemPage("/intl/", html("Intl", ("words", "Straße İstanbul 中文 ٣ naïve")))])
    pieces = ['"', "'", "*", "-", ":", "(", ")", "^", "{", "}", "NEAR", "OR", "AND", "NOT", " ", "é", "ǅ", "中文", "ع",
              "\u0301", "🙂", "\x00", "\\", "%", "_", "accent", "1", "٣", "ß", "İ", "\u200b", "ﬁ", "+", "~", "@"]
    rng = random.Random(29)
    for _ in range(200):
        question = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        hits = await index.search("site", question)
        assert all(h["url"].startswith("/") for h in hits)
    assert (await urls(index, "site", "中文"))[0] == "/intl/#words"
    assert (await urls(index, "site", "Straße"))[0] == "/intl/#words"


async def test_an_index_in_an_older_layout_is_dropped_and_built_again(index: Any) -> None:
    old = "CREATE TABLE docs_apps (app_id TEXT PRIMARY KEY, generation INTEGER)"
    if hasattr(index, "dsn"):
        import asyncpg

        con = await asyncpg.connect(index.dsn)
        await con.execute(old)
        await con.execute("INSERT INTO docs_apps VALUES ('site', 3)")
        await con.close()
    else:
        db = sqlite3.connect(index.path)
        db.execute(old)
        db.execute("INSERT INTO docs_apps VALUES ('site', 3)")
        db.commit()
        db.close()
    assert not await index.has_index("site")  # dropped: the layout changed
    await run_index(index, "site", SITE)
    assert (await urls(index, "site", "accent colour"))[0] == "/theming/#colours"

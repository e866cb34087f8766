"""The MkDocs plugin (``plugins: - autopilot``) and the Sphinx extension (``widget.integrations.sphinx``) on real
builds: a MkDocs-Material site and Sphinx sites (Alabaster, Furo) built in temporary folders. Every built page
carries the loader's tag with the configured ``data-*`` options and its own context (title, URL); the build wrote
the index into the SQLite file the relay reads, with the site's URLs; ``mkdocs serve`` does not index unless asked;
bad settings fail the build with a message that names them. With an embedding model (``embeddings_model``, or the
relay's ``AUTOPILOT_EMBEDDINGS_MODEL``) the build's index has the sections' vectors and a relay with the model
searches it hybrid; a rebuild embeds only what changed; a model that cannot be used is a warning (the index BM25
alone), and a strict build's failure that leaves the previous index. The model folder is the one the hybrid tests
use (``~/.cache/autopilot-widget/embeddings`` or ``AUTOPILOT_TEST_EMBEDDINGS_MODEL``, made by ``fetch``)."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import lxml.html
import pytest

from widget.integrations.common import (
    ENDPOINT_PREFIX,
    IntegrationError,
    SiteIndexed,
    index_site,
    resolve_embeddings_model,
)
from widget.relay.docs import open_docs_index

pytestmark = pytest.mark.relay

PAGES_MD = {
    "index.md": "# Welcome\n\nThe copilot answers questions.\n\n## Install it\n\nRun pip install acme.\n",
    "guide/theming.md": "# Theming\n\nThe bar has a theme.\n\n## Colours\n\nSet the accent custom property.\n",
    "guide/deploy.md": "# Deployment & proxies\n\nRun it behind a proxy.\n\n## Reverse proxy\n\n"
                       "Nginx forwards websockets.\n",
}
MKDOCS_YML = """site_name: Acme Docs
site_url: https://docs.example.com/acme/
theme:
  name: material
plugins:
  - search
  - autopilot:
      relay: http://127.0.0.1:8765/
      app: acme-docs
      index: relay/autopilot-relay.sqlite3
      options: {theme: dark, position: bottom-left, open: false, labels: {placeholder: "Ask the docs"}}
"""
RST = {
    "index.rst": "Welcome\n=======\n\nThe copilot answers questions.\n\n.. toctree::\n\n   theming\n\n"
                 "Install it\n----------\n\nRun pip install acme.\n",
    "theming.rst": "Theming\n=======\n\nThe bar has a theme.\n\nColours\n-------\n\nSet the accent custom property.\n",
}
SPHINX_CONF = """project = 'Acme'
html_theme = '{theme}'
extensions = ['widget.integrations.sphinx']
html_baseurl = 'https://docs.example.com/acme/'
autopilot_relay = 'http://127.0.0.1:8765'
autopilot_app = 'acme-docs'
autopilot_index = 'relay/autopilot-relay.sqlite3'
autopilot_options = {{'theme': 'dark', 'position': 'bottom-left'}}
"""


def run(cmd: list[str], root: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # cwd: the build's own folder, as a docs project runs it (a checkout's stale *.egg-info would shadow the
    # installed entry points)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=root,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(root), **(env or {})})


def build_mkdocs(root: Path, yml: str = MKDOCS_YML, *flags: str,
                 pages: dict[str, str] = PAGES_MD) -> subprocess.CompletedProcess[str]:
    for rel, text in pages.items():
        (root / "docs" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "docs" / rel).write_text(text)
    (root / "mkdocs.yml").write_text(yml)
    return run([sys.executable, "-m", "mkdocs", "build", "-f", str(root / "mkdocs.yml"), "-d", str(root / "site"),
                *flags], root)


def build_sphinx(root: Path, theme: str, conf: str = SPHINX_CONF, env: dict[str, str] | None = None,
                 flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    (root / "src").mkdir(parents=True, exist_ok=True)
    for rel, text in RST.items():
        (root / "src" / rel).write_text(text)
    (root / "src" / "conf.py").write_text(conf.format(theme=theme))
    return run([sys.executable, "-m", "sphinx", "-b", "html", str(root / "src"), str(root / "site"), *flags], root,
               env)


def loader_tags(page: Path) -> list[dict[str, str]]:
    doc = lxml.html.fromstring(page.read_bytes())
    return [dict(s.attrib) for s in doc.xpath("//script[contains(@src, '/widget/autopilot.js')]")]


def page_context(page: Path) -> dict[str, Any]:
    (body,) = re.findall(r"A\.setContext\(\{page:(\{.*?\})\}\)", page.read_text(encoding="utf-8"))
    return dict(json.loads(body))


def mkdocs_page_title(page: Path) -> str:
    doc = lxml.html.fromstring(page.read_bytes())
    return str(doc.xpath("string(//article//h1)"))


def indexed(db: Path, app: str) -> list[tuple[str, str]]:
    index: Any = open_docs_index(None, str(db))

    async def go() -> list[tuple[str, str]]:
        try:
            hits = await index.search(app, "accent custom property colours", limit=5)
            return [(h["url"], h["page_title"]) for h in hits]
        finally:
            await index.close()

    return asyncio.run(go())


@pytest.fixture(scope="module")
def mkdocs_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mkdocs")
    done = build_mkdocs(root)
    assert done.returncode == 0, done.stderr
    assert "autopilot: indexed app acme-docs" in done.stderr
    return root


def test_mkdocs_material_pages_carry_the_tag_and_their_context(mkdocs_site: Path) -> None:
    pages = sorted((mkdocs_site / "site").rglob("*.html"))
    assert len(pages) >= 4  # three pages and 404.html
    for page in pages:
        (tag,) = loader_tags(page)
        assert tag["src"] == "http://127.0.0.1:8765/widget/autopilot.js", page
        assert tag["data-app"] == "acme-docs" and tag["data-theme"] == "dark"
        assert tag["data-position"] == "bottom-left" and tag["data-open"] == "false"
        assert json.loads(tag["data-labels"]) == {"placeholder": "Ask the docs"} and "defer" in tag
    ctx = page_context(mkdocs_site / "site" / "guide" / "theming" / "index.html")
    assert ctx == {"title": "Theming", "url": "https://docs.example.com/acme/guide/theming/"}
    # The title as the reader sees it, as JSON inside the script (< > & escaped).
    deploy = mkdocs_site / "site" / "guide" / "deploy" / "index.html"
    assert page_context(deploy)["title"] == mkdocs_page_title(deploy) == "Deployment & proxies"


def test_mkdocs_build_writes_the_index_the_relay_reads(mkdocs_site: Path) -> None:
    db = mkdocs_site / "relay" / "autopilot-relay.sqlite3"
    hits = indexed(db, "acme-docs")
    assert hits[0] == ("https://docs.example.com/acme/guide/theming/#colours", "Theming")
    assert indexed(db, "other-app") == []
    # The settings are stored as autopilot-relay index stores them: `index --app acme-docs` alone re-indexes.
    done = run([sys.executable, "-m", "widget.relay", "index", "--app", "acme-docs", "--db", str(db)], mkdocs_site)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["pages"] == 3 and summary["unchanged"] == 3 and summary["added"] == summary["changed"] == 0


def test_mkdocs_serve_indexes_only_when_asked(tmp_path: Path) -> None:
    from mkdocs.config import load_config

    from widget.integrations.mkdocs import AutopilotPlugin

    # The site as mkdocs.yml describes it, without the plugin (made here, not looked up by its entry point).
    (tmp_path / "mkdocs.yml").write_text(MKDOCS_YML.split("plugins:", 1)[0])
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(PAGES_MD["index.md"])
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text("<main><h1 id='w'>Welcome</h1><p>Hello.</p></main>")
    db = tmp_path / "relay" / "autopilot-relay.sqlite3"
    for on_serve, command, written in ((False, "serve", False), (True, "serve", True), (False, "build", True)):
        if db.exists():
            db.unlink()
        config = load_config(str(tmp_path / "mkdocs.yml"), site_dir=str(tmp_path / "site"))
        plugin = AutopilotPlugin()
        settings = {"relay": "http://127.0.0.1:8765", "app": "acme-docs", "index_on_serve": on_serve,
                    "index": "relay/autopilot-relay.sqlite3"}
        errors, _ = plugin.load_config(settings, str(tmp_path / "mkdocs.yml"))
        assert errors == []
        plugin.on_startup(command=command, dirty=False)  # type: ignore[arg-type]
        plugin.on_config(config)
        plugin.on_post_build(config=config)
        assert db.exists() is written, (on_serve, command)


@pytest.mark.parametrize("bad, message", [
    ("relay: ftp://x", "autopilot: relay must be the relay's http(s) base URL"),
    ("app: 'my docs'", "autopilot: app must be the app's id on the relay"),
    ("options: {colour: red}", "autopilot: unknown loader option 'colour'"),
    ("options: {open: 'yes'}", "autopilot: loader option 'open' has the wrong kind of value"),
    ("index: true", "index must be the relay's SQLite database file or false, not true"),
])
def test_mkdocs_bad_settings_fail_the_build(tmp_path: Path, bad: str, message: str) -> None:
    key = bad.split(":", 1)[0]
    yml = re.sub(rf"^      {key}:.*$", "      " + bad, MKDOCS_YML, flags=re.M)
    done = build_mkdocs(tmp_path, yml)
    assert done.returncode != 0 and message in done.stderr, done.stderr


@pytest.mark.parametrize("theme", ["alabaster", "furo"])
def test_sphinx_pages_carry_the_tag_and_the_build_writes_the_index(tmp_path: Path, theme: str) -> None:
    done = build_sphinx(tmp_path, theme)
    assert done.returncode == 0, done.stderr
    pages = [p for p in sorted((tmp_path / "site").glob("*.html"))]
    assert {p.name for p in pages} >= {"index.html", "theming.html", "genindex.html", "search.html"}
    for page in pages:
        (tag,) = loader_tags(page)
        assert tag["src"] == "http://127.0.0.1:8765/widget/autopilot.js", page
        assert tag["data-app"] == "acme-docs" and tag["data-theme"] == "dark" and "defer" in tag
    assert page_context(tmp_path / "site" / "theming.html") == {
        "title": "Theming", "url": "https://docs.example.com/acme/theming.html"}
    hits = indexed(tmp_path / "src" / "relay" / "autopilot-relay.sqlite3", "acme-docs")
    assert hits[0] == ("https://docs.example.com/acme/theming.html#colours", "Theming")


def test_sphinx_bad_settings_fail_the_build(tmp_path: Path) -> None:
    done = build_sphinx(tmp_path, "alabaster", SPHINX_CONF.replace("'acme-docs'", "'acme docs'"))
    assert done.returncode != 0 and "autopilot: app must be the app's id on the relay" in done.stderr


def test_sphinx_other_builders_are_left_alone(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    for rel, text in RST.items():
        (tmp_path / "src" / rel).write_text(text)
    (tmp_path / "src" / "conf.py").write_text(SPHINX_CONF.format(theme="alabaster"))
    done = run([sys.executable, "-m", "sphinx", "-b", "text", str(tmp_path / "src"), str(tmp_path / "out")], tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "src" / "relay").exists()


# -- The embedding model: the build's index is hybrid -------------------------------------------------------------

def vector_rows(db: Path, app: str) -> dict[str, list[int]]:
    """The live vector rows of the app by page URL (as bench/docs_hybrid.py ``windows_of`` reads them)."""
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT page_url, id, windows FROM hybrid_vectors WHERE app_id = ? AND run IS NULL "
                           "ORDER BY id", (app,)).fetchall()
    out: dict[str, list[int]] = {}
    for page, row_id, wins in rows:
        assert wins >= 1
        out.setdefault(page, []).append(row_id)
    return out


def hybrid_hits(db: Path, app: str, model: Path, query: str) -> tuple[list[str], list[str]]:
    """The vectors' side alone and the fused search, through the relay's own index opened with the model."""
    from widget.relay.docs.hybrid import HybridDocsIndex

    index: Any = open_docs_index(None, str(db), embeddings_model=str(model))
    assert isinstance(index, HybridDocsIndex)

    async def go() -> tuple[list[str], list[str]]:
        try:
            vec = await index.vector_search(app, query, limit=3)
            fused = await index.search(app, query, limit=3)
            return [h["url"] for h in vec], [h["url"] for h in fused]
        finally:
            await index.close()

    return asyncio.run(go())


def with_model(yml: str, model: str) -> str:
    return yml.replace("      index: relay/", f"      embeddings_model: {model}\n      index: relay/")


def test_mkdocs_build_with_the_model_writes_a_hybrid_index_and_a_rebuild_embeds_what_changed(
        tmp_path: Path, model_dir: Path) -> None:
    yml = with_model(MKDOCS_YML, str(model_dir))
    done = build_mkdocs(tmp_path, yml)
    assert done.returncode == 0, done.stderr
    db = tmp_path / "relay" / "autopilot-relay.sqlite3"
    assert f"autopilot: indexed app acme-docs into {db} with vectors (hybrid search): 3 pages" in done.stderr
    base = "https://docs.example.com/acme/"
    rows = vector_rows(db, "acme-docs")
    assert set(rows) == {base, base + "guide/theming/", base + "guide/deploy/"}
    # The vectors' side finds the page on colours (with words no page has), and the relay's search is hybrid.
    vec, fused = hybrid_hits(db, "acme-docs", model_dir, "which hue and palette does it use")
    assert vec and vec[0].startswith(base + "guide/theming/") and vec[0] in fused
    # A rebuild after one page changed: only that page's sections get new vectors; the others keep theirs.
    pages = {**PAGES_MD, "guide/deploy.md": PAGES_MD["guide/deploy.md"] + "\nApache works too.\n"}
    again = build_mkdocs(tmp_path, yml, pages=pages)
    assert again.returncode == 0, again.stderr
    assert "(0 added, 1 changed, 0 removed)" in again.stderr and "with vectors (hybrid search)" in again.stderr
    after = vector_rows(db, "acme-docs")
    assert after[base] == rows[base] and after[base + "guide/theming/"] == rows[base + "guide/theming/"]
    assert min(after[base + "guide/deploy/"]) > max(max(ids) for ids in rows.values())


def test_sphinx_build_takes_the_model_from_the_relays_environment_variable(tmp_path: Path, model_dir: Path) -> None:
    done = build_sphinx(tmp_path, "alabaster", env={"AUTOPILOT_EMBEDDINGS_MODEL": str(model_dir)})
    assert done.returncode == 0, done.stderr
    db = tmp_path / "src" / "relay" / "autopilot-relay.sqlite3"
    assert "with vectors (hybrid search): 2 pages" in done.stdout + done.stderr
    base = "https://docs.example.com/acme/"
    assert set(vector_rows(db, "acme-docs")) == {base, base + "theming.html"}  # index.html is its folder
    vec, fused = hybrid_hits(db, "acme-docs", model_dir, "which hue and palette does it use")
    assert vec and vec[0].startswith(base + "theming.html") and vec[0] in fused


def test_a_model_that_cannot_be_used_is_a_warning_and_a_strict_builds_failure(tmp_path: Path) -> None:
    nowhere = tmp_path / "nowhere"
    done = build_mkdocs(tmp_path, with_model(MKDOCS_YML, "nowhere"))
    assert done.returncode == 0, done.stderr
    assert (f"WARNING -  autopilot: embeddings_model {nowhere} cannot be used: embeddings_model '{nowhere}' has no "
            f"model.onnx (make the folder with autopilot-relay embeddings fetch {nowhere}). App acme-docs is indexed "
            "with BM25 alone") in done.stderr
    db = tmp_path / "relay" / "autopilot-relay.sqlite3"
    assert indexed(db, "acme-docs")[0][0] == "https://docs.example.com/acme/guide/theming/#colours"
    with sqlite3.connect(db) as con:  # no vectors at all: the run was the BM25 one
        assert con.execute("SELECT name FROM sqlite_master WHERE name LIKE 'hybrid%'").fetchall() == []
    # --strict: the build fails before it writes anything; the previous index still serves.
    pages = {**PAGES_MD, "guide/theming.md": "# Theming\n\nRewritten.\n"}
    strict = build_mkdocs(tmp_path, with_model(MKDOCS_YML, "nowhere"), "--strict", pages=pages)
    assert strict.returncode != 0
    assert "App acme-docs was not indexed (a strict build); its previous index still serves" in strict.stderr
    assert indexed(db, "acme-docs")[0][0] == "https://docs.example.com/acme/guide/theming/#colours"



def test_sphinx_warnings_as_errors_with_a_model_that_cannot_be_used_fails_before_writing(tmp_path: Path) -> None:
    conf = SPHINX_CONF + "autopilot_embeddings_model = 'nowhere'\n"
    done = build_sphinx(tmp_path, "alabaster", conf, flags=("-W",))
    assert done.returncode != 0
    assert (f"embeddings_model {tmp_path / 'src' / 'nowhere'} cannot be used: embeddings_model "
            f"'{tmp_path / 'src' / 'nowhere'}' has no model.onnx") in done.stderr
    assert "App acme-docs was not indexed (a strict build)" in done.stderr
    assert not (tmp_path / "src" / "relay" / "autopilot-relay.sqlite3").exists()


def test_the_model_setting_and_the_environment(tmp_path: Path) -> None:
    env = {"AUTOPILOT_EMBEDDINGS_MODEL": "~/models/minilm"}
    home_model = str(Path("~/models/minilm").expanduser().absolute())
    assert resolve_embeddings_model(None, tmp_path, {}) is None
    assert resolve_embeddings_model(None, tmp_path, {"AUTOPILOT_EMBEDDINGS_MODEL": " "}) is None  # empty: unset
    assert resolve_embeddings_model(None, tmp_path, env) == home_model
    assert resolve_embeddings_model("", tmp_path, env) == home_model
    assert resolve_embeddings_model("relay/emb", tmp_path, env) == str(tmp_path / "relay" / "emb")  # the config's
    assert resolve_embeddings_model("/m", tmp_path, env) == "/m"
    assert resolve_embeddings_model(False, tmp_path, env) is None  # BM25 alone whatever the environment says
    for bad in (True, 3):
        with pytest.raises(IntegrationError, match="embeddings_model must be a model folder"):
            resolve_embeddings_model(bad, tmp_path, {})
    with pytest.raises(IntegrationError, match="names a relay's \\[models\\] endpoint, which a docs build cannot"):
        resolve_embeddings_model("endpoint:emb", tmp_path, {})
    from widget.relay.docs.hybrid import ENDPOINT_PREFIX as RELAYS

    assert ENDPOINT_PREFIX == RELAYS
    # The relay's variable naming an endpoint: the build warns and indexes BM25 alone.
    assert resolve_embeddings_model(None, tmp_path, {"AUTOPILOT_EMBEDDINGS_MODEL": "endpoint:emb"}) == "endpoint:emb"
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text("<main><h1 id='w'>Welcome</h1><p>Hello there.</p></main>")
    warnings: list[str] = []
    done: SiteIndexed = index_site(tmp_path / "site", app="a", db_path=tmp_path / "r.sqlite3", base_url="/",
                                   embeddings_model="endpoint:emb", warn=warnings.append)
    assert done["pages"] == 1 and done["hybrid"] is False
    assert warnings == ["embeddings_model endpoint:emb cannot be used: AUTOPILOT_EMBEDDINGS_MODEL=endpoint:emb names "
                        "a relay's [models] endpoint, which a docs build cannot use; set embeddings_model "
                        "(autopilot_embeddings_model in Sphinx's conf.py) to a model folder (autopilot-relay "
                        "embeddings fetch DIR), or to false. App a is indexed with BM25 alone, so the relay searches "
                        "it with BM25 alone until a build with the model indexes it again"]

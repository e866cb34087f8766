"""The docs index on real VitePress 1.6 and Docusaurus 3.10 builds: pages they built (tests/fixtures/docs_generators,
made by bench/docs_generators.py; no npm here) indexed as a source folder. Sections and their headings, every
anchor an id the built page has, headings without the permalink glyphs, and no navigation, sidebar, outline, edit
link, pagination, breadcrumb, footer or search text in the index (each checked present in the build first).
Their Markdown sources are refused with the fix (index the built site): their URLs and anchors are not MkDocs'."""

from __future__ import annotations

import html
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import lxml.html
import pytest
import pytest_asyncio

from widget.relay.docs import open_docs_index
from widget.relay.docs.indexer import extract, run_index
from widget.relay.docs.page import Page, PageSkipped
from widget.relay.docs.walk import ForeignMarkdown, Source, SourceFile, collect

pytestmark = pytest.mark.relay

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "docs_generators"
sys.path.insert(0, str(REPO / "bench"))
#: The chrome each site was built with (the bench's configs), which must not reach the index.
from docs_generators import CHROME  # noqa: E402

#: What a permalink leaves in a heading when it is not dropped (VitePress and Docusaurus: a zero-width space).
GLYPHS = ("\u200b", "#", "¶", "§", "📄")


@pytest_asyncio.fixture(params=["vitepress", "docusaurus"])
async def indexed(request: Any, tmp_path: Path) -> AsyncIterator[tuple[str, Any, list[tuple[SourceFile, Page]],
                                                                         list[str]]]:
    kind = request.param
    files, walk_warnings = collect([Source(FIXTURES / kind, "/")], max_pages=100)
    assert walk_warnings == [] and len(files) == 5
    index: Any = open_docs_index(None, str(tmp_path / "relay.sqlite3"))
    warnings: list[str] = []
    summary = await run_index(index, "acme", files, warn=warnings.append)
    pages = []
    for f in files:
        try:
            pages.append((f, extract(f.path.read_bytes(), f.url, f.kind, None)))
        except PageSkipped:
            pass
    assert summary["pages"] == len(pages)
    yield kind, index, pages, warnings
    await index.close()


def outline(page: Page) -> list[tuple[str, list[str], str]]:
    return [(s.url, s.headings, s.text) for s in page.sections]


async def test_sections_anchors_and_urls(indexed: tuple[str, Any, list[tuple[SourceFile, Page]], list[str]]) -> None:
    kind, index, pages, warnings = indexed
    by_url = {page.url: page for _, page in pages}
    table = "Property Default\n--accent #3355ff\n--radius 8px"
    if kind == "vitepress":
        assert warnings == []
        assert sorted(by_url) == ["/", "/about.html", "/guide/advanced/api.html", "/guide/deploy.html",
                                  "/guide/theming.html"]
        assert outline(by_url["/guide/theming.html"]) == [
            ("/guide/theming.html#theming", ["Theming"], "The bar has a theme."),
            ("/guide/theming.html#colours", ["Theming", "Colours"],
             "Set the accent custom property.\nGood to know\nThe bar keeps its colours in custom properties."),
            ("/guide/theming.html#dark-mode", ["Theming", "Colours", "Dark mode"],
             "The bar follows the page scheme.\n" + table),
        ]
        api = "/guide/advanced/api.html#"
        assert [(s.url, s.headings[-1]) for s in by_url["/guide/advanced/api.html"].sections] == [
            (api + "client-api", "Client API"),
            (api + "the-register-call-options-limits-cafe-naive",
             "The register() call: options & limits (café, naïve)"),
            (api + "example", "Example"), (api + "events", "Events"), (api + "example-1", "Example"),
            (api + "_404-errors", "404 errors"),
        ]
        # The home layout has no <main> and its feature cards are <article>s: hero, cards and Markdown all kept.
        home = by_url["/"]
        assert home.title == "Acme Hero Name"
        assert outline(home) == [
            ("/", ["Acme Hero Name"], "Hero tagline words\nGet started"),
            ("/", ["Acme Hero Name", "Feature card title"], "Feature card details."),
            ("/#welcome", ["Welcome"], "The copilot answers questions about your product."),
            ("/#install-it", ["Welcome", "Install it"], "Run the installer:\npip install autopilot-widget"),
            ("/#install-it-1", ["Welcome", "Install it"], "A second section with the same title, about the "
                                                         "script tag."),
        ]
        # The page layout has no <main> either: its own content, not the skip link.
        assert outline(by_url["/about.html"]) == [
            ("/about.html#about-acme", ["About Acme"], "Acme makes copilots."),
            ("/about.html#contact", ["About Acme", "Contact"], "Write to the maintainers."),
        ]
        theming = "/guide/theming.html"
        # A code group: both tabs' code, the labels apart.
        assert outline(by_url["/guide/deploy.html"])[1] == (
            "/guide/deploy.html#reverse-proxy", ["Deployment", "Reverse proxy"],
            "Nginx forwards websockets.\nNginx Caddy\nproxy_set_header Upgrade $http_upgrade;\n"
            "reverse_proxy localhost:8000")
    else:
        # A tag list page lists other pages: skipped, and said so.
        assert len(warnings) == 1 and "blog/tags/index.html: a Docusaurus page listing other pages" in warnings[0]
        assert sorted(by_url) == ["/category/quokka-guides/", "/guide/advanced/api/", "/guide/deploy/",
                                  "/guide/theming/"]
        assert outline(by_url["/guide/theming/"]) == [
            ("/guide/theming/", ["Theming"], "The bar has a theme."),  # Docusaurus' h1 has no id
            ("/guide/theming/#colours", ["Theming", "Colours"],
             "Set the accent custom property.\nGood to know\nThe bar keeps its colours in custom properties."),
            ("/guide/theming/#dark-mode", ["Theming", "Colours", "Dark mode"],
             "The bar follows the page scheme.\n" + table),
        ]
        api = "/guide/advanced/api/#"
        assert [(s.url, s.headings[-1]) for s in by_url["/guide/advanced/api/"].sections] == [
            ("/guide/advanced/api/", "Client API"),
            (api + "the-register-call-options--limits-café-naïve",
             "The register() call: options & limits (café, naïve)"),
            (api + "example", "Example"), (api + "events", "Events"), (api + "example-1", "Example"),
            (api + "404-errors", "404 errors"),
        ]
        # A category's generated index: its title and description, not the cards linking to the pages.
        assert outline(by_url["/category/quokka-guides/"]) == [
            ("/category/quokka-guides/", ["Guide overview"], "Every guide of the handbook.")]
        theming = "/guide/theming/"
        # <Tabs>: the tab not shown first is rendered hidden, and is the page's text all the same.
        assert '<div role="tabpanel" class="tabItem_Ymn6" hidden="">' in (
            FIXTURES / kind / "guide" / "deploy" / "index.html").read_text()
        assert outline(by_url["/guide/deploy/"])[1] == (
            "/guide/deploy/#reverse-proxy", ["Deployment", "Reverse proxy"],
            "Nginx forwards websockets.\nNginx\nCaddy\nproxy_set_header Upgrade $http_upgrade;\n"
            "reverse_proxy localhost:8000")
    # A numbered code block: the code without its line numbers (Docusaurus keeps its title); <details> is text.
    api_page = by_url["/guide/advanced/api.html" if kind == "vitepress" else "/guide/advanced/api/"]
    assert api_page.sections[1].text == (
        "Register a function the model may call.\n" + ("" if kind == "vitepress" else "register.js\n")
        + "bar.register('lookup', fn)\nbar.start()\nMore options\nThe timeout option waits for the page.")
    # Every anchor is an id the built page has.
    for f, page in pages:
        doc = lxml.html.fromstring(f.path.read_bytes())
        ids = set(doc.xpath("//@id"))
        for s in page.sections:
            if "#" in s.url:
                assert s.url.split("#", 1)[1] in ids, (f.rel, s.url)
    hits = await index.search("acme", "how do I set the accent colour?")
    assert hits[0]["url"] == theming + "#colours"


async def test_headings_are_clean_and_chrome_is_not_indexed(
        indexed: tuple[str, Any, list[tuple[SourceFile, Page]], list[str]]) -> None:
    kind, index, pages, _ = indexed
    built = "\n".join(html.unescape(f.read_text(encoding="utf-8")) for f in (FIXTURES / kind).rglob("*.html"))
    assert "\u200b" in built and ("header-anchor" if kind == "vitepress" else "hash-link") in built
    for _, page in pages:
        for s in page.sections:
            for heading in s.headings:
                assert heading == heading.strip() and not any(g in heading for g in GLYPHS), (s.url, heading)
    text = "\n".join(" ".join([p.title, *s.headings, s.text]) for _, p in pages for s in p.sections)
    for chrome in CHROME[kind]:
        assert chrome in built, chrome  # the build has it ...
        assert chrome not in text, chrome  # ... the index does not
    assert await index.search("acme", "zebra quokka wombat") == []


# -- their Markdown sources ------------------------------------------------------------------------------------

PAGE = "# Deployment\n\n## 2 relays behind one proxy\n\nSticky sessions.\n"


def markdown_folder(root: Path) -> Path:
    docs = root / "docs"
    (docs / "guide").mkdir(parents=True)
    (docs / "guide" / "deploy.md").write_text(PAGE)
    return docs


@pytest.mark.parametrize("marker", ["docusaurus.config.ts", "website/docusaurus.config.js", "docs/.vitepress",
                                    ".vitepress", "docs/guide/intro.mdx"])
def test_markdown_of_docusaurus_or_vitepress_is_refused_with_the_fix(tmp_path: Path, marker: str) -> None:
    root = tmp_path / "website" if marker.startswith("website/") else tmp_path
    docs = markdown_folder(root)
    where = tmp_path / marker
    if marker.endswith(".vitepress"):
        where.mkdir()
    else:
        where.write_text("export default {}\n")
    with pytest.raises(ForeignMarkdown) as err:
        collect([Source(docs, "/")], max_pages=100)
    message = str(err.value)
    if "docusaurus" in marker:
        assert f"a Docusaurus site ({where})" in message and f"index {where.parent / 'build'} " in message
    elif "vitepress" in marker:
        assert f"a VitePress site ({where})" in message and f"index {where / 'dist'} (its outDir)" in message
    else:
        assert "1 .mdx files" in message and "Index the built site instead" in message
    assert "--markdown-anyway" in message
    # One page given alone is refused too; --markdown-anyway indexes them as MkDocs' all the same.
    if not marker.endswith(".mdx"):
        with pytest.raises(ForeignMarkdown):
            collect([Source(docs / "guide" / "deploy.md", "/")], max_pages=100)
    files, _ = collect([Source(docs, "/")], max_pages=100, markdown_anyway=True)
    assert [f.url for f in files] == ["/guide/deploy/"]


def test_other_folders_are_not_refused(tmp_path: Path) -> None:
    # Markdown with no sign of either generator (MkDocs), and the built site inside a Docusaurus project.
    docs = markdown_folder(tmp_path / "mkdocs")
    assert len(collect([Source(docs, "/")], max_pages=100)[0]) == 1
    project = tmp_path / "site"
    markdown_folder(project)
    (project / "docusaurus.config.js").write_text("module.exports = {}\n")
    (project / "build").mkdir()
    (project / "build" / "index.html").write_text("<!doctype html><title>x</title><main>Hello</main>")
    assert len(collect([Source(project / "build", "/")], max_pages=100)[0]) == 1
    # An .mdx file left out by --exclude does not count.
    (docs / "draft.mdx").write_text("# Draft\n")
    assert len(collect([Source(docs, "/")], max_pages=100, excludes=("*.mdx",))[0]) == 1


def test_the_index_command_says_so_and_changes_nothing(tmp_path: Path) -> None:
    docs = markdown_folder(tmp_path)
    (docs / ".vitepress").mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("AUTOPILOT_CONFIG", None)
    cmd = [sys.executable, "-m", "widget.relay", "index", "--app", "acme", f"{docs}=/", "--db",
           str(tmp_path / "relay.sqlite3")]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert out.returncode == 1 and out.stdout == ""
    assert f"{docs}: Markdown sources of a VitePress site" in out.stderr
    assert f"index {docs / '.vitepress' / 'dist'} (its outDir)" in out.stderr
    out = subprocess.run([*cmd, "--markdown-anyway"], capture_output=True, text=True, env=env, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert '"pages": 1' in out.stdout


async def test_the_demo_docs_site_renders_its_own_pages_so_takes_any_folder(tmp_path: Path) -> None:
    from widget.relay.http.docs_site import DemoDocs

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "deploy.md").write_text(PAGE)
    (docs / ".vitepress").mkdir()
    index: Any = open_docs_index(None, str(tmp_path / "relay.sqlite3"))
    try:
        summary = await DemoDocs(docs, "http://127.0.0.1:1/docs/").index(index)
        assert summary is not None and summary["pages"] == 1
    finally:
        await index.close()

"""The docs index on real VitePress 1.6 and Docusaurus 3.10 builds: pages they built (tests/fixtures/docs_generators,
made by bench/docs_generators.py; no npm here) indexed as a source folder. Sections and their headings, every
anchor an id the built page has, headings without the permalink glyphs, and no navigation, sidebar, outline, edit
link, pagination, breadcrumb, footer or search text in the index (each checked present in the build first)."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import lxml.html
import pytest
import pytest_asyncio

from widget.relay.docs import open_docs_index
from widget.relay.docs.indexer import extract, run_index
from widget.relay.docs.page import Page, PageSkipped
from widget.relay.docs.walk import Source, SourceFile, collect

pytestmark = pytest.mark.relay

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "docs_generators"
#: The chrome each site was built with (bench/docs_generators.py's configs).
CHROME = {
    "vitepress": ["Zebra Handbook", "Quokka Guides", "Edit this page", "Last updated", "Previous page", "Next page",
                  "Released under the Wombat", "Copyright Wombat", "On this page", "Search", "Return to top",
                  "Skip to content", "Appearance", "Menu"],
    "docusaurus": ["Zebra Handbook", "Quokka Guides", "Edit this page", "Last updated", "Previous", "Next",
                   "Copyright Wombat", "On this page", "Skip to main content", "Home page", "Wombat Links"],
}
#: What a permalink leaves in a heading when it is not dropped (VitePress and Docusaurus: a zero-width space).
GLYPHS = ("\u200b", "#", "¶", "§", "📄")


@pytest_asyncio.fixture(params=["vitepress", "docusaurus"])
async def indexed(request: Any, tmp_path: Path) -> AsyncIterator[tuple[str, Any, list[tuple[SourceFile, Page]],
                                                                         list[str]]]:
    kind = request.param
    files, walk_warnings = collect([Source(FIXTURES / kind, "/")], max_pages=100)
    assert walk_warnings == [] and len(files) == 4
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
        assert sorted(by_url) == ["/", "/about.html", "/guide/advanced/api.html", "/guide/theming.html"]
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
    else:
        # A tag list page lists other pages: skipped, and said so.
        assert len(warnings) == 1 and "blog/tags/index.html: a Docusaurus page listing other pages" in warnings[0]
        assert sorted(by_url) == ["/category/quokka-guides/", "/guide/advanced/api/", "/guide/theming/"]
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

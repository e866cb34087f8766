"""The docs index's pure parts: built HTML and Markdown sources → sections with their anchors, the folder walk and
its bounds, a question → search terms, and the ``search_docs`` reply."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import markdown
import pytest

from widget.protocol import TOOL_REPLY_MAX_CHARS
from widget.relay.docs import DocHit
from widget.relay.docs.extract import compile_selector, decode_html, extract_html
from widget.relay.docs.markdown_source import extract_markdown
from widget.relay.docs.page import PageSkipped
from widget.relay.docs.query import fts5_match, terms, websearch_or
from widget.relay.docs.tool import build_reply, search_docs_spec, section_title
from widget.relay.docs.walk import Source, WalkError, collect, page_url

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent


def sections(page: object) -> list[tuple[str, list[str], str]]:
    return [(s.url, s.headings, s.text) for s in page.sections]  # type: ignore[attr-defined]


# -- HTML ---------------------------------------------------------------------------------------------------

SITE = """<!doctype html><html><head><title>Theming - Demo Docs</title></head><body>
<header><a href="/">Demo Docs</a><form role="search"><input placeholder="Search the docs"></form></header>
<nav><a href="/guide/">Sidebar Zebra Link</a></nav>
<main><article>
  <a class="md-content__button" href="https://github.com/x/edit/main/t.md" title="Edit this page">Edit this page</a>
  <h1 id="theming">Theming<a class="headerlink" href="#theming">¶</a></h1>
  <p>Intro <b>bold</b>   text.</p>
  <h2 id="colours">Colours</h2>
  <p>Set the accent.</p>
  <pre><code>x = 1
    indented</code></pre>
  <h3 id="dark-mode">Dark mode</h3><p>Dark text.</p>
  <h2 id="layout">Layout</h2><p>Width.</p>
  <footer><a href="/next/">Next: Zebra Page</a> Last update: 2024</footer>
</article></main>
<footer>Copyright Footer Words</footer></body></html>"""


def test_sections_anchors_and_headings_from_a_built_page() -> None:
    page = extract_html(SITE.encode(), "/guide/theming/")
    assert page.title == "Theming"
    assert sections(page) == [
        ("/guide/theming/#theming", ["Theming"], "Intro bold text."),
        ("/guide/theming/#colours", ["Theming", "Colours"], "Set the accent.\nx = 1\n    indented"),
        ("/guide/theming/#dark-mode", ["Theming", "Colours", "Dark mode"], "Dark text."),
        ("/guide/theming/#layout", ["Theming", "Layout"], "Width."),
    ]
    text = " ".join(s.text + " ".join(s.headings) for s in page.sections)
    for outside in ("Sidebar Zebra", "Search the docs", "Edit this page", "Copyright", "Zebra Page", "¶"):
        assert outside not in text


def test_sphinx_puts_the_anchor_on_the_enclosing_section() -> None:
    html = """<html><body><div class="sphinxsidebar" role="navigation">Nav Words</div>
    <div class="body" role="main"><section id="demo"><h1>Demo<a class="headerlink" href="#demo">¶</a></h1><p>A.</p>
    <section id="colours"><h2>Colours<a class="headerlink" href="#colours">¶</a></h2><p>B.</p></section>
    <section id="id1"><h2>Colours</h2><p>C.</p></section></section></div></body></html>"""
    page = extract_html(html.encode(), "/index.html")
    assert [s.url for s in page.sections] == ["/index.html#demo", "/index.html#colours", "/index.html#id1"]
    assert "Nav Words" not in " ".join(s.text for s in page.sections)


def test_anchor_inside_or_right_before_a_heading() -> None:
    html = """<html><body><main><h1>T</h1><p>i</p><h2><a id="inner"></a>One</h2><p>1</p>
    <a name="before"></a><h2>Two</h2><p>2</p><h2>Three</h2><p>3</p></main></body></html>"""
    page = extract_html(html.encode(), "/p.html")
    assert [s.url for s in page.sections] == ["/p.html", "/p.html#inner", "/p.html#before", "/p.html"]
    assert len({s.key for s in page.sections}) == 4  # keys stay unique without anchors


def test_duplicate_anchors_link_to_the_heading_above() -> None:
    html = """<html><body><main><h1 id="t">T</h1><p>i</p><h2 id="a">A</h2><p>1</p><h3 id="x">X</h3><p>2</p>
    <h2 id="b">B</h2><p>3</p><h3 id="x">X again</h3><p>4</p></main></body></html>"""
    page = extract_html(html.encode(), "/p/")
    assert [s.url for s in page.sections] == ["/p/#t", "/p/#a", "/p/#x", "/p/#b", "/p/#b"]
    keys = [s.key for s in page.sections]
    assert len(set(keys)) == len(keys)


def test_a_page_without_landmarks_is_read_from_its_body_less_navigation() -> None:
    html = """<html><body><header><h1>Site Banner</h1></header><nav>Menu</nav><aside>Related stuff</aside>
    <h1 id="page">Page</h1><p>Body words.</p><footer>Foot</footer></body></html>"""
    page = extract_html(html.encode(), "/x.html")
    assert sections(page) == [("/x.html#page", ["Page"], "Body words.")]


@pytest.mark.parametrize("html, reason", [
    (b"", "empty file"),
    (b"<html><body><nav>only navigation</nav></body></html>", "no text"),
    (b'<html><head><meta name="robots" content="noindex"></head><body><main>x</main></body></html>', "noindex"),
    (b'<html><head><meta http-equiv="refresh" content="0; url=/new/"></head><body></body></html>', "redirect"),
    # Sphinx writes a file meant only to be included (no heading of its own) as a page titled "<no title>"
    (b'<!DOCTYPE html><html><head><title>&lt;no title&gt; \xe2\x80\x94 Python 3.11.2 documentation</title></head>'
     b'<body><div class="body" role="main"><p>Availability: not Emscripten, not WASI.</p></div></body></html>',
     "a Sphinx page without a title"),
])
def test_pages_with_nothing_to_index_are_skipped_with_a_reason(html: bytes, reason: str) -> None:
    with pytest.raises(PageSkipped, match=reason):
        extract_html(html, "/x.html")


def test_encodings_meta_charset_fallback_and_bom() -> None:
    latin = '<html><head><meta charset="iso-8859-1"></head><body><main><p>Café crème</p></main></body></html>'
    assert extract_html(latin.encode("latin-1"), "/a").sections[0].text == "Café crème"
    # No charset and not UTF-8: Windows-1252, never an error.
    undeclared = "<html><body><main><p>naïve “quotes”</p></main></body></html>".encode("cp1252")
    assert extract_html(undeclared, "/b").sections[0].text == "naïve “quotes”"
    utf16 = "<html><body><main><p>ünïcode</p></main></body></html>".encode("utf-16")
    assert extract_html(utf16, "/c").sections[0].text == "ünïcode"
    assert decode_html(b'<meta charset="bogus-charset"><p>\xc3\xa9</p>').endswith("é</p>")


def test_broken_html_still_gives_its_text() -> None:
    html = b"<html><body><main><h2 id=a>Open <b>bold<p>para one<p>para two\x00</div></span><h2 id=b>Next</h2>tail"
    page = extract_html(html, "/b/")
    assert [s.url for s in page.sections] == ["/b/#a", "/b/#b"]
    assert "para one" in page.sections[0].text and "para two" in page.sections[0].text
    xhtml = b'<?xml version="1.0" encoding="utf-8"?><html><body><main><p>x</p></main></body></html>'
    assert extract_html(xhtml, "/x").sections[0].text == "x"


def test_the_apps_selector_wins_and_a_bad_one_is_a_clear_error() -> None:
    html = b'<html><body><main><p>chrome</p><div class="doc"><h1 id="t">T</h1><p>real</p></div></main></body></html>'
    page = extract_html(html, "/s", selector=compile_selector("div.doc"))
    assert sections(page) == [("/s#t", ["T"], "real")]
    with pytest.raises(ValueError, match="not a CSS selector"):
        compile_selector("div[")


# -- Markdown -----------------------------------------------------------------------------------------------

def test_markdown_front_matter_is_skipped_and_names_the_page() -> None:
    md = "---\ntitle: Getting started\ntags: [a]\n---\nIntro words.\n\n## Install it\n\nRun pip.\n"
    page = extract_markdown(md.encode(), "/start/")
    assert page.title == "Getting started"
    assert sections(page) == [("/start/", [], "Intro words."), ("/start/#install-it", ["Install it"], "Run pip.")]
    with pytest.raises(PageSkipped, match="no text"):
        extract_markdown(b"---\ntitle: Only front matter\n---\n", "/fm/")


def test_markdown_anchors_are_the_ones_python_markdown_toc_gives() -> None:
    """Every heading of the repo's own docs gets the id MkDocs' (Python-Markdown's) toc would put on it."""
    for path in sorted((REPO / "docs").glob("*.md")):
        source = path.read_text()
        built = markdown.markdown(source, extensions=["toc", "tables", "fenced_code", "attr_list"])
        ids = set(re.findall(r'<h[1-6] id="([^"]+)"', built))
        page = extract_markdown(source.encode(), f"/docs/{path.stem}.html")
        got = {s.url.split("#", 1)[1] for s in page.sections if "#" in s.url}
        assert got and got <= ids, (path.name, sorted(got - ids))


def test_markdown_repeats_custom_ids_code_and_tables() -> None:
    md = ("# Title\n\nx\n\n## Same\n\na\n\n## Same\n\nb\n\n## Custom {#my-id}\n\nc\n\n"
          "```python\nprint('hi')\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    page = extract_markdown(md.encode(), "/m.html")
    assert [s.url for s in page.sections] == ["/m.html#title", "/m.html#same", "/m.html#same_1", "/m.html#my-id"]
    assert page.sections[3].headings == ["Title", "Custom"]
    assert "print('hi')" in page.sections[3].text and "1 2" in page.sections[3].text


# -- walking folders -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rel, kind, style, url", [
    ("index.html", "html", "directory", "/docs/"),
    ("guide/theming/index.html", "html", "directory", "/docs/guide/theming/"),
    ("x.html", "html", "directory", "/docs/x.html"),
    ("a b/c.html", "html", "directory", "/docs/a%20b/c.html"),
    ("guide/theming.md", "markdown", "directory", "/docs/guide/theming/"),
    ("guide/index.md", "markdown", "directory", "/docs/guide/"),
    ("README.md", "markdown", "directory", "/docs/"),
    ("theming.md", "markdown", "html", "/docs/theming.html"),
])
def test_page_urls(rel: str, kind: str, style: str, url: str) -> None:
    assert page_url(rel, kind, "/docs/", style) == url  # type: ignore[arg-type]


def test_walk_skips_assets_generated_pages_and_excludes(tmp_path: Path) -> None:
    for rel in ("index.html", "guide/index.html", "404.html", "search.html", "_static/x.html", ".git/y.html",
                "node_modules/z.html", "img/a.png", "drafts/d.html", "notes.md",
                # Sphinx's general index, whole and split by letter (html_split_index)
                "genindex.html", "genindex-A.html", "genindex-all.html", "genindex-_.html"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("<p>x</p>")
    files, warnings = collect([Source(tmp_path, "/")], max_pages=100, excludes=("drafts/",))
    assert [f.rel for f in files] == ["index.html", "notes.md", "guide/index.html"]  # a folder's files, then below
    assert [f.url for f in files] == ["/", "/notes/", "/guide/"] and warnings == []


def test_walk_follows_a_symlink_loop_once_and_stays_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "site"
    (root / "a").mkdir(parents=True)
    (root / "a" / "p.html").write_text("x")
    os.symlink(root, root / "a" / "loop")  # a loop back to the root
    os.symlink(root / "a", root / "alias")  # the same folder under another name
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.html").write_text("x")
    os.symlink(outside, root / "out")
    files, warnings = collect([Source(root, "/")], max_pages=100)
    assert [f.rel for f in files] == ["a/p.html"]
    assert any("outside" in w for w in warnings)


def test_walk_stops_past_max_pages_with_a_clear_error(tmp_path: Path) -> None:
    for i in range(30):
        (tmp_path / f"p{i}.html").write_text("x")
    with pytest.raises(WalkError, match=r"more than 20 pages .*--max-pages"):
        collect([Source(tmp_path, "/")], max_pages=20)
    with pytest.raises(WalkError, match="no such file or folder"):
        collect([Source(tmp_path / "missing", "/")], max_pages=20)


# -- questions → terms -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("question", [
    '"unbalanced quote', "colours*", "NEAR(colours theme)", "-dark mode", "title:colours", "((a) OR b",
    "AND OR NOT", "^caret {braces} [x] col:umn", "\\ / ; ' % _", "",
])
def test_no_character_of_a_question_is_search_syntax(question: str) -> None:
    words = terms(question)
    assert all(re.fullmatch(r"[^\W_]+", w) for w in words)
    assert re.fullmatch(r'("[^\W_]+"( OR "[^\W_]+")*)?', fts5_match(words))
    assert websearch_or(words).count('"') == 0 and "-" not in websearch_or(words)


def test_terms_drop_common_words_and_cut_long_questions() -> None:
    assert terms("How do I change the colours of the bar?") == ["change", "colours", "bar"]
    assert terms("the of and") == ["the", "of", "and"]  # nothing else left: kept
    long = terms("word " * 3000 + " ".join(f"t{i}" for i in range(100)))
    assert long == ["word"]  # cut at MAX_QUERY_CHARS, before the other terms
    assert len(terms(" ".join(f"t{i}" for i in range(100)))) == 32
    assert terms("x" * 10_000) == ["x" * 64]


# -- the search_docs reply ---------------------------------------------------------------------------------------

def hit(i: int, text: str, headings: list[str] | None = None) -> DocHit:
    return DocHit(key=f"/p{i}/#s", page_title=f"Page {i}", headings=headings or [f"Page {i}", f"Section {i}"],
                  url=f"/p{i}/#s", text=text, score=1.0 / (i + 1))


def test_reply_fits_the_tool_reply_limit_with_ids_in_order() -> None:
    hits = [hit(i, ("filler words \"quoted\"\n" * 400) + f" needle{i}") for i in range(5)]
    ids = iter(f"s{n}" for n in range(1, 9))
    reply = build_reply(hits, lambda _hit: next(ids), "needle0")
    size = len(json.dumps(reply, ensure_ascii=False, separators=(",", ":")))
    assert size <= TOOL_REPLY_MAX_CHARS
    assert [s["id"] for s in reply["sections"]] == ["s1", "s2", "s3", "s4", "s5"]
    assert reply["sections"][0]["title"] == "Page 0 › Section 0"
    assert "needle0" in reply["sections"][0]["text"]  # the passage with the question's term, not the start
    assert all(len(s["text"]) > 400 for s in reply["sections"])


def test_reply_keeps_short_sections_whole_and_says_when_nothing_matched() -> None:
    reply = build_reply([hit(1, "short"), hit(2, "x" * 9000)], lambda h: h["key"])
    assert reply["sections"][0]["text"] == "short"
    assert len(json.dumps(reply, ensure_ascii=False, separators=(",", ":"))) <= TOOL_REPLY_MAX_CHARS
    assert build_reply([], lambda h: "s1")["sections"] == []
    assert "no section" in build_reply([], lambda h: "s1")["note"]
    assert section_title(hit(3, "t", headings=["Page 3"])) == "Page 3"


def test_spec_has_one_string_parameter() -> None:
    spec = search_docs_spec()
    assert spec["name"] == "search_docs"
    assert spec["parameters"]["required"] == ["query"]
    assert list(spec["parameters"]["properties"]) == ["query"]

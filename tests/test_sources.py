"""An answer's cited sources without a browser: which ``sources`` entries are kept and in which order, which
citation tokens become markers and which are dropped (never inside code), the links' rules (http(s) only, same
host in place, another host in a new tab), and the two copies (Markdown footnotes, a plain list)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from widget.core.markdown import MARK_CLOSE, MARK_OPEN, StreamingRenderer, render_markdown
from widget.protocol import SourceKind
from widget.store.sources import (
    citation_numbers,
    cited_sources,
    link_of,
    markdown_with_footnotes,
    plain_markers,
    source_rows,
    text_with_sources,
)
from widget.ui.sources import streaming_text

pytestmark = pytest.mark.unit

PAGE = "https://shop.example/products?x=1#top"
S1 = {"id": "s1", "n": 1, "kind": "docs", "title": "Theming › Colours", "url": "https://shop.example/docs/#colours"}
T2 = {"id": "t2", "n": 2, "kind": "tool", "title": "Cart contents"}
S3 = {"id": "s3", "n": 3, "kind": "docs", "title": "Plans", "url": "https://docs.example.com/plans/#limits"}


def marker(n: int) -> str:
    return f"{MARK_OPEN}{n}{MARK_CLOSE}"


# --- which sources, in which order --------------------------------------------------------------------------


def test_sources_are_shown_in_n_order_and_malformed_entries_are_left_out() -> None:
    message: dict[str, Any] = {"sources": [
        S3, "not an object", {"id": "s4", "n": "4", "kind": "docs", "title": "n is not a number"},
        {"id": "s5", "n": True, "kind": "docs", "title": "a bool is not a number"},
        {"id": "s6", "n": 0, "kind": "docs", "title": "n starts at 1"},
        {"id": "s7", "n": 7, "kind": "video", "title": "an unknown kind"},
        {"id": "", "n": 8, "kind": "docs", "title": "no id"},
        {"id": "s9", "n": 9, "kind": "docs"},
        T2, S1,
        {"id": "s1", "n": 10, "kind": "docs", "title": "the same id again"},
        {"id": "s11", "n": 2, "kind": "docs", "title": "the same n again"},
    ]}
    assert [s["id"] for s in cited_sources(message)] == ["s1", "t2", "s3"]
    assert citation_numbers(message) == {"s1": 1, "t2": 2, "s3": 3}
    assert cited_sources({}) == [] and cited_sources({"sources": "s1"}) == [] and citation_numbers({}) == {}


def test_rows_link_rules() -> None:
    rows = source_rows({"sources": [S3, T2, S1]}, PAGE)
    assert [(r["n"], r["title"], r["href"], r["new_tab"]) for r in rows] == [
        (1, "Theming › Colours", "https://shop.example/docs/#colours", False),  # the page's host: in place
        (2, "Cart contents", None, False),  # a tool reply: never a link
        (3, "Plans", "https://docs.example.com/plans/#limits", True),  # another host: a new tab
    ]
    # A tool reply with a URL is still not a link.
    assert source_rows({"sources": [{**T2, "url": "https://shop.example/"}]}, PAGE)[0]["href"] is None


@pytest.mark.parametrize("url", [
    "javascript:alert(1)", "JAVASCRIPT:alert(1)", "data:text/html,<b>x</b>", "mailto:a@example.com",
    "//evil.example/x", "ftp://example.com/x", "https://", "https:///path",
    "https://example.com/a b", "https://example.com/\u202egnp.exe", "https://exa\u200bmple.com/",
    "https://example.com/\nx", " https://example.com/", 42, None,
])
def test_only_http_urls_with_a_host_become_links(url: Any) -> None:
    assert link_of(url, PAGE) == (None, False)


@pytest.mark.parametrize(("url", "new_tab"), [
    ("https://shop.example/docs/#a", False),
    ("HTTPS://SHOP.EXAMPLE/docs/#a", False),  # hosts compare without case
    ("https://shop.example:443/docs/", False),  # the scheme's default port is the same place
    ("https://user@shop.example/docs/", False),
    ("https://shop.example/docs/#a:~:text=custom%20properties", False),  # a text fragment stays as it is
    ("https://shop.example:8443/docs/", True),  # another port: another site
    ("https://docs.shop.example/", True),  # a subdomain is another host
    ("http://shop.example/docs/", True),  # the same host on http: its port (80) is not the page's (443)
    ("https://shop.example.evil.example/", True),
])
def test_the_pages_host_opens_in_place_any_other_in_a_new_tab(url: str, new_tab: bool) -> None:
    assert link_of(url, PAGE) == (url, new_tab)


def test_without_a_page_url_every_link_opens_in_a_new_tab() -> None:
    assert link_of("https://shop.example/docs/", None) == ("https://shop.example/docs/", True)
    assert link_of("https://shop.example/docs/", "about:blank") == ("https://shop.example/docs/", True)


# --- markers in the rendered answer -------------------------------------------------------------------------


def test_cited_tokens_become_markers_and_the_rest_is_dropped() -> None:
    cites = {"s1": 1, "t2": 2}
    html = render_markdown("Colours come from CSS [s1]. Two lamps [t2][s1]. Unknown [s9] and [t7]. [x1] stays.",
                           cites)
    assert html == (f"<p>Colours come from CSS{marker(1)}. Two lamps{marker(2)}{marker(1)}. Unknown and. "
                    "[x1] stays.</p>")
    # No citations known (a streaming answer): every token is hidden.
    assert render_markdown("Colours [s1] and [t2].") == "<p>Colours and.</p>"


def test_code_keeps_tokens_literally() -> None:
    cites = {"s1": 1}
    text = "`[s1]` and ``a [s1] b``\n\n```\n[s1]\n```\n\n    [s1] indented\n\nescaped \\[s1] stays"
    html = render_markdown(text, cites)
    assert MARK_OPEN not in html.split("escaped")[0]
    assert html.count("[s1]") == 5, html
    assert html.endswith("<p>escaped [s1] stays</p>")


def test_tokens_in_links_and_next_to_urls() -> None:
    cites = {"s1": 1}
    # "[s1](url)" is the citation [s1], as the relay reads it (widget.protocol CITATION_PATTERN): its marker, the
    # model's URL dropped (the source row links to the source's own URL). A token in a link's text is marked; a bare
    # URL never takes a token.
    assert render_markdown("[s1](https://example.com) [t7](https://x.example)", cites) == f"<p>{marker(1)}</p>"
    assert f"guide{marker(1)} <span" in render_markdown("[the guide [s1]](https://example.com)", cites)
    html = render_markdown("see https://example.com/a[s1] now", cites)
    assert 'href="https://example.com/a"' in html and f"</a>{marker(1)} now" in html


def test_the_model_cannot_write_a_marker_itself() -> None:
    assert MARK_OPEN not in render_markdown(f"fake {MARK_OPEN}1{MARK_CLOSE} marker", {"s1": 1})


def test_streaming_renders_as_a_whole_render_does_and_hides_a_token_being_written() -> None:
    text = "First block [s1].\n\nSecond [t2] block with `[s1]`.\n\n- a [s1]\n- b\n"
    cites = {"s1": 1, "t2": 2}
    r = StreamingRenderer(cites)
    for end in range(1, len(text) + 1):
        r.feed(text[:end])
    assert r.html == render_markdown(text, cites)
    assert streaming_text("Colours are set [") == "Colours are set"
    assert streaming_text("Colours are set [s") == "Colours are set"
    assert streaming_text("Colours are set [s12") == "Colours are set"
    assert streaming_text("Colours are set [s12]") == "Colours are set [s12]"  # complete: render_markdown hides it
    assert streaming_text("a [link") == "a [link"
    assert streaming_text("Colours [s1](https://shop.ex") == "Colours"  # "[s1](url)" is a citation too
    assert streaming_text("Colours [s1](https://shop.example) ok") == "Colours [s1](https://shop.example) ok"
    assert streaming_text("ids [s0") == "ids [s0"  # never a citation (the relay's ids: 1 to 4 digits, no leading 0)
    assert streaming_text("ids [s12345") == "ids [s12345"
    assert streaming_text("plain") == "plain"


# --- copies ---------------------------------------------------------------------------------------------------


def test_copy_as_markdown_has_footnotes() -> None:
    content = ("Colours [s1] and the cart [t2]. Unknown [s9].\n\n`code [s1]`\n\n```\n[s1]\n```\n\n"
               "    [s1] indented code\n\n- item [s3]\n\n    item continued [s1]\n")
    odd = {"id": "s3", "n": 3, "kind": "docs", "title": "A [tricky] title", "url": "https://x.example/a_(b)"}
    got = markdown_with_footnotes(content, cited_sources({"sources": [S1, T2, odd]}))
    assert got == (
        "Colours[^1] and the cart[^2]. Unknown.\n\n`code [s1]`\n\n```\n[s1]\n```\n\n"
        "    [s1] indented code\n\n- item[^3]\n\n    item continued[^1]\n\n"
        "[^1]: [Theming › Colours](https://shop.example/docs/#colours)\n"
        "[^2]: Cart contents\n"
        "[^3]: [A \\[tricky\\] title](<https://x.example/a_(b)>)\n"
    )
    # A source whose URL is not a link is its title.
    bad = {"id": "s1", "n": 1, "kind": "docs", "title": "Bad", "url": "javascript:alert(1)"}
    assert markdown_with_footnotes("x [s1]", [bad]) == "x[^1]\n\n[^1]: Bad\n"  # type: ignore[list-item]
    # An answer without sources or tokens is copied as it is.
    assert markdown_with_footnotes("plain *text*\n", []) == "plain *text*\n"
    assert markdown_with_footnotes("dropped [s1] token", []) == "dropped token"
    # "[s1](url)" is the citation [s1]: its footnote, the model's URL dropped.
    assert markdown_with_footnotes("See [s1](https://model.example) now.", [bad]) == "See[^1] now.\n\n[^1]: Bad\n"  # type: ignore[list-item]


def test_copy_as_text_lists_the_sources() -> None:
    rows = source_rows({"sources": [S1, T2]}, PAGE)
    assert text_with_sources("Colours[1] and the cart[2].\n", rows, "Sources") == (
        "Colours[1] and the cart[2].\n\nSources\n1. Theming › Colours (https://shop.example/docs/#colours)\n"
        "2. Cart contents")
    assert text_with_sources("No sources.", [], "Sources") == "No sources."


def test_plain_text_answers_read_numbers() -> None:
    """A bar without the sink sanitizer shows answers as plain text: markers read [n], other tokens go."""
    assert plain_markers("Colours [s1], cart [t2], unknown [s9]. `[s1]`", {"s1": 1, "t2": 2}) == (
        "Colours[1], cart[2], unknown. `[s1]`")
    assert plain_markers("Streaming [s1] text", None) == "Streaming text"
    assert plain_markers("no tokens", None) == "no tokens"
    assert plain_markers("See [s1](https://model.example).", {"s1": 1}) == "See[1]."


def test_the_sources_parts_are_documented() -> None:
    """Every ``::part`` name the sources use is in docs/theming.md (a site styles them from there)."""
    root = Path(__file__).resolve().parent.parent
    code = (root / "widget" / "ui" / "sources.py").read_text()
    names = {n for m in re.finditer(r'part=f?"([^"]+)"', code) for n in m.group(1).split()}
    names = {n for n in names if "{" not in n} | {f"source-{kind.value}" for kind in SourceKind}
    assert {"cite", "sources", "source", "source-link", "source-title", "source-origin"} <= names
    doc = (root / "docs" / "theming.md").read_text()
    assert sorted(n for n in names if f"`{n}`" not in doc) == []


def test_a_docs_search_is_not_shown_as_a_call() -> None:
    """What a search found is shown as the answer's sources, not as a call pill; a page call beside it still is."""
    from widget.core.conversation import visible_messages
    from widget.protocol import RelayTool

    search = {"id": "c1", "name": RelayTool.SEARCH_DOCS, "arguments": {"query": "colours"}}
    page = {"id": "c2", "name": "get_selection", "arguments": {}}
    shown = visible_messages([
        {"id": "u", "role": "user", "content": "How do I change the colours?"},
        {"id": "m1", "role": "assistant", "content": "", "function_calls": [search]},
        {"id": "m2", "role": "assistant", "content": "", "function_calls": [search, page]},
        {"id": "m3", "role": "assistant", "content": "Set --autopilot-accent [s1].", "sources": [S1]},
    ])
    assert [(m["id"], [c["id"] for c in m.get("function_calls", [])]) for m in shown] == [
        ("u", []), ("m2", ["c2"]), ("m3", [])]  # m1 had nothing else to show


def test_a_root_relative_source_url_is_the_pages_own_site() -> None:
    """A docs index built with the default base URL stores ``/guide/#colours``: it opens on the page's own origin."""
    assert link_of("/docs/theming.html#colours", PAGE) == ("https://shop.example/docs/theming.html#colours", False)
    assert link_of("//evil.example/x", PAGE) == (None, False)  # protocol-relative: another host, never resolved
    assert link_of("/docs/x.html", None) == (None, False)  # no page to resolve against
    assert link_of("/docs/x.html", "about:blank") == (None, False)

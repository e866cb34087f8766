"""render_markdown and StreamingRenderer (widget/core/markdown.py) in CPython: features, safety, corpus, streaming.

``html_violations`` is the structural check the browser test (test_sanitize_browser.py) applies too.
"""

from __future__ import annotations

import json
import random
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from widget.core.markdown import ALLOWED_TAGS, StreamingRenderer, render_markdown, safe_url

pytestmark = pytest.mark.unit

CORPORA = [Path(__file__).resolve().parents[2] / "shared" / "corpora", Path("/work/shared/corpora")]

#: Attributes allowed per tag ("*" = any tag) in our rendered or sanitized HTML.
ALLOWED_ATTRS = {
    "*": {"title"},
    "a": {"href", "rel", "target", "title"},
    "code": {"class"},
    "span": {"class"},
    "ol": {"start"},
    "th": {"align"},
    "td": {"align"},
}
#: Elements that load or run something; never allowed (the tag allowlist already excludes them; named for reports).
FORBIDDEN_TAGS = {"script", "img", "image", "iframe", "frame", "frameset", "object", "embed", "applet", "svg", "math",
                  "video", "audio", "source", "track", "picture", "link", "meta", "base", "form", "input", "button",
                  "style", "template", "noscript", "textarea", "select", "portal", "use"}
HREF_OK = re.compile(r"(?:https?://[^/?#\\\s]|mailto:\S)\S*", re.IGNORECASE)


def corpus_payloads() -> list[dict[str, str]]:
    """The DOMPurify payloads (``../shared/corpora/dompurify-payloads.json``)."""
    for base in CORPORA:
        path = base / "dompurify-payloads.json"
        if path.is_file():
            return json.loads(path.read_text())["payloads"]
    pytest.fail(f"dompurify-payloads.json not found under {[str(c) for c in CORPORA]}")


class _Check(HTMLParser):
    """Collects rule violations while parsing (stdlib html.parser; attribute values arrive unescaped)."""

    def __init__(self, require_url_shown: bool) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.require_url_shown = require_url_shown
        self._links: list[tuple[str, list[str]]] = []  # open <a href> with the text seen inside

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._start(tag, attrs)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._start(tag, attrs, closed=True)

    def _start(self, tag: str, attrs: list[tuple[str, str | None]], closed: bool = False) -> None:
        if tag in FORBIDDEN_TAGS:
            self.problems.append(f"forbidden element <{tag}>")
        elif tag not in ALLOWED_TAGS:
            self.problems.append(f"element <{tag}> outside the allowlist")
        names = {n for n, _ in attrs}
        allowed = ALLOWED_ATTRS["*"] | ALLOWED_ATTRS.get(tag, set())
        for name, value in attrs:
            if name.startswith("on"):
                self.problems.append(f"event attribute {name} on <{tag}>")
            elif name == "style":
                self.problems.append(f"style attribute on <{tag}>")
            elif name not in allowed:
                self.problems.append(f"attribute {name} on <{tag}>")
            if name == "href" and not HREF_OK.fullmatch(value or ""):
                self.problems.append(f"href {value!r}")
            if name in ("src", "srcset", "action", "formaction", "xlink:href", "data", "poster", "background"):
                self.problems.append(f"URL attribute {name} on <{tag}>")
        if tag == "a" and "href" in names:
            d = dict(attrs)
            if d.get("rel") != "noopener noreferrer" or d.get("target") != "_blank":
                self.problems.append(f"link without rel/target: {d}")
            if not closed:
                self._links.append((d["href"] or "", []))

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._links:
            href, text = self._links.pop()
            shown = "".join(text)
            address = href[7:] if href.lower().startswith("mailto:") else href
            if self.require_url_shown and href not in shown and address not in shown:
                self.problems.append(f"link to {href!r} shows only {shown!r}")

    def handle_data(self, data: str) -> None:
        for _href, text in self._links:
            text.append(data)


def html_violations(html: str, *, require_url_shown: bool = True) -> list[str]:
    """Every way ``html`` breaks the output rules (empty list: clean)."""
    checker = _Check(require_url_shown)
    checker.feed(html)
    checker.close()
    return checker.problems


# ---------------------------------------------------------------------------------------------------------------
# Features


def test_basic_markdown():
    html = render_markdown(
        "# Title\n\nSome *em*, **strong** and `code`.\n\n- a\n- b\n\nThen:\n\n1. one\n2. two\n\n> quote"
    )
    assert "<h1>Title</h1>" in html
    assert "<em>em</em>" in html and "<strong>strong</strong>" in html and "<code>code</code>" in html
    assert "<ul>\n<li>a</li>\n<li>b</li>\n</ul>" in html
    assert "<ol>\n<li>one</li>" in html
    assert "<blockquote>" in html
    assert html_violations(html) == []


def test_fenced_code_is_readable_and_escaped():
    html = render_markdown('```python\nif a < b and c > "d":\n    print("<script>")\n```')
    assert html == ('<pre><code class="language-python">if a &lt; b and c &gt; &quot;d&quot;:\n'
                    '    print(&quot;&lt;script&gt;&quot;)\n</code></pre>')


def test_fenced_code_attributes_reduced_to_a_language_class():
    html = render_markdown('``` { #top .py onclick="alert(1)" data-x=1 }\ncode\n```')
    assert html == '<pre><code class="language-py">code\n</code></pre>'


def test_indented_code():
    assert render_markdown("para\n\n    x = 1 < 2\n") == "<p>para</p>\n<pre><code>x = 1 &lt; 2\n</code></pre>"


def test_tables_use_align_not_style():
    html = render_markdown("| a | b |\n|:--|--:|\n| 1 | 2 |")
    assert "<table>" in html and '<th align="left">a</th>' in html and '<td align="right">2</td>' in html
    assert "style" not in html
    assert html_violations(html) == []


def test_empty_and_blank_input():
    assert render_markdown("") == ""
    assert render_markdown(" \n\t\n") == ""


# ---------------------------------------------------------------------------------------------------------------
# Raw HTML, images, links


@pytest.mark.parametrize("text", [
    "<script>alert(1)</script>",
    "<div onclick=alert(1)>x</div>",
    "a <b onmouseover=alert(1)>b</b> c",
    "<img src=x onerror=alert(1)>",
    "<!-- comment --><style>*{}</style>",
    "<iframe src=https://evil.example></iframe>",
])
def test_raw_html_is_text(text):
    html = render_markdown(text)
    assert "<" + text[1:4] not in html
    assert "&lt;" in html
    assert html_violations(html) == []


def test_entities_stay_text():
    html = render_markdown("&lt;script&gt; &#60;b&#62; &copy;")
    assert html == "<p>&lt;script&gt; &#60;b&#62; &copy;</p>"
    assert html_violations(html) == []


@pytest.mark.parametrize("text", [
    "![alt](https://evil.example/pixel.png)",
    "![alt](https://evil.example/pixel.png \"t\")",
    "![](https://evil.example/x.png)",
    "[![badge](https://img.example/b.svg)](https://example.com)",
    "![x](javascript:alert(1))",
    "![x](data:image/png;base64,AAAA)",
    "![ref][r]\n\n[r]: https://evil.example/p.png",
])
def test_images_never_become_img(text):
    html = render_markdown(text)
    assert "<img" not in html and "src=" not in html
    assert html_violations(html) == []


def test_image_becomes_link_with_alt_and_url():
    html = render_markdown("![a chart](https://example.com/chart.png)")
    assert html == ('<p><a href="https://example.com/chart.png" rel="noopener noreferrer" target="_blank" '
                    'title="https://example.com/chart.png">a chart '
                    '<span class="url">(https://example.com/chart.png)</span></a></p>')


def test_link_gets_rel_target_and_shows_url():
    html = render_markdown('[the docs](https://example.com/docs?a=1&b=2 "Docs")')
    assert html == ('<p><a href="https://example.com/docs?a=1&amp;b=2" rel="noopener noreferrer" target="_blank" '
                    'title="https://example.com/docs?a=1&amp;b=2">the docs '
                    '<span class="url">(https://example.com/docs?a=1&amp;b=2)</span></a></p>')


def test_link_whose_text_is_its_url_is_not_repeated():
    html = render_markdown("[https://example.com](https://example.com) <https://example.org/x>")
    assert html.count("https://example.com") == 3  # href, title, text
    assert 'class="url"' not in html


def test_misleading_link_text_shows_the_real_url():
    html = render_markdown("[https://bank.example](https://evil.example/login)")
    assert '<span class="url">(https://evil.example/login)</span>' in html


def test_empty_link_text_shows_url():
    html = render_markdown("[](https://example.com/a)")
    assert ">https://example.com/a</a>" in html


@pytest.mark.parametrize("href", [
    "javascript:alert(1)",
    "JaVaScRiPt:alert(1)",
    "&#106;avascript:alert(1)",      # decoded by the browser: the serializer keeps character references
    "&#x6A;avascript:alert(1)",
    "java&#x09;script:alert(1)",
    "javascript&#58;alert(1)",
    "javascript&colon;alert(1)",
    "data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==",
    "vbscript:msgbox(1)",
    "/relative/path",
    "relative",
    "//evil.example/x",
    "#frag",
    "ftp://example.com/f",
    "file:///etc/passwd",
    "https:evil.example",
    "https:/\\evil.example",
    "https://example.com/\u202eexe.txt",
    "https://exa\u200bmple.com",
    "<https://a b>",
    "&#104;ttps://ok.example/\u0000",
])
def test_disallowed_links_render_as_text(href):
    html = render_markdown(f"[click]({href})")
    assert "<a" not in html, html
    assert "click" in html
    assert html_violations(html) == []


@pytest.mark.parametrize("text", [
    "<javascript://%0aalert(1)>",      # python-markdown 3.11's autolink accepts any scheme with ://
    "<vbscript://x>",
    "<data://text/html,x>",
    "<ftp://example.com>",
])
def test_autolinks_with_other_schemes_render_as_text(text):
    html = render_markdown(text)
    assert "<a" not in html and "href" not in html
    assert html_violations(html) == []


@pytest.mark.parametrize("href", ["http://example.com", "https://example.com/a_(b)?q=1#f", "mailto:someone@example.com",
                                  "HTTPS://EXAMPLE.COM/"])
def test_allowed_links_are_kept(href):
    html = render_markdown(f"[x]({href})")
    assert f'href="{href.replace("&", "&amp;")}"' in html
    assert html_violations(html) == []


def test_character_references_in_allowed_href_are_resolved_once():
    html = render_markdown("[x](https://example.com/?a=1&amp;b=2&amp;lt;)")
    # the browser sees exactly https://example.com/?a=1&b=2&lt; (one level of references decoded, as displayed)
    assert 'href="https://example.com/?a=1&amp;b=2&amp;lt;"' in html
    assert "(https://example.com/?a=1&amp;b=2&amp;lt;)" in html


def test_automail_link():
    html = render_markdown("<me@example.com>")
    assert 'href="mailto:me@example.com"' in html
    assert 'class="url"' not in html  # the address is the text
    assert html_violations(html) == []


def test_bare_urls_become_links():
    html = render_markdown("See https://example.com/a_b_c. Or (https://example.org/x), or `https://in.code`.")
    assert '<a href="https://example.com/a_b_c" ' in html and ">https://example.com/a_b_c</a>." in html
    assert '<a href="https://example.org/x" ' in html and "</a>)," in html
    assert "<code>https://in.code</code>" in html
    assert html_violations(html) == []


def test_no_link_inside_link():
    html = render_markdown("[see https://inner.example](https://outer.example)")
    assert html.count("<a ") == 1
    assert html_violations(html) == []


def test_reference_links_are_text_and_their_urls_visible():
    html = render_markdown("Read [the guide][g].\n\n[g]: https://example.com/guide")
    assert "[the guide][g]" in html
    assert '<a href="https://example.com/guide"' in html
    assert html_violations(html) == []


def test_safe_url():
    assert safe_url("https://example.com/x") == "https://example.com/x"
    assert safe_url("&#104;ttps://example.com/") == "https://example.com/"
    assert safe_url("&#106;avascript:alert(1)") is None
    assert safe_url(" https://example.com") is None


# ---------------------------------------------------------------------------------------------------------------
# The DOMPurify payload corpus


def _corpus_variants(payload: str) -> list[str]:
    """The payload as raw model text and in a few Markdown positions."""
    return [
        payload,
        f"- {payload}",
        f"> {payload}",
        f"[{payload}](https://example.com)",
        f"[x]({payload})",
        f"![{payload}]({payload})",
        f"`{payload}`",
        f"| h |\n|---|\n| {payload} |",
    ]


def test_dompurify_corpus_through_render_markdown():
    payloads = corpus_payloads()
    assert len(payloads) == 223
    failures = []
    for item in payloads:
        for text in _corpus_variants(item["payload"]):
            html = render_markdown(text)
            problems = html_violations(html)
            if problems:
                failures.append((item["title"], text[:80], problems[:3]))
    assert failures == [], f"{len(failures)} renderings broke the rules, first: {failures[:5]}"


def test_dompurify_corpus_streamed_equals_rendered():
    text = "\n\n".join(p["payload"] for p in corpus_payloads())
    r = StreamingRenderer()
    rng = random.Random(3)
    i = 0
    while i < len(text):
        i = min(len(text), i + rng.randint(20, 80))
        r.feed(text[:i])
    assert r.html == render_markdown(text)
    assert html_violations(r.html) == []


# ---------------------------------------------------------------------------------------------------------------
# StreamingRenderer

SAMPLES = [
    "# Title\n\nIntro with a [link](https://example.com).\n\n## Steps\n\n1. one\n2. two\n\n3. three (loose)\n\nDone.",
    "- a\n- b\n\n- c\n\n    indented continuation\n\nafter",
    "```python\ndef f():\n\n    return 1\n```\n\nText\n\n~~~\nraw\n\n~~~\n\nEnd",
    "> quote\n\n> still quote\n\nout",
    "Para\n\n    code\n\n\n    more code\n\nPara 2",
    "```\nunclosed fence\n\nstill code?\n\nyes",
    "| a | b |\n|---|---|\n| 1 | 2 |\n\nText after table\n\n---\n\nSetext\n======\n",
    "Windows\r\nlines\r\n\r\nsecond\r\n",
    "\t\n\ntab first line\n\n\tcode",
    "```js\nx\n````\n\nstill inside\n\n```\n\nafter",
    "````\nouter\n```\ninner\n```\n````\n\nafter",
    "```python extra words\n\ncode?\n\n```\n\nafter",
    "1986. A year\n\nText\n\n* star\n\n+ plus\n\n-dash not a list\n\n-\n\nend",
]


def _stream(text: str, sizes: list[int]) -> StreamingRenderer:
    """Feed ``text`` in chunks of the given sizes (cycled), checking each step against render_markdown."""
    r = StreamingRenderer()
    i = k = 0
    while i < len(text):
        i = min(len(text), i + sizes[k % len(sizes)])
        k += 1
        stable, tail = r.feed(text[:i])
        assert r.html == render_markdown(text[:i]), (text[:i], stable, tail)
        assert stable == r.stable and tail == r.tail
    return r


@pytest.mark.parametrize("text", SAMPLES)
@pytest.mark.parametrize("sizes", [[1], [3, 7, 1], [40]])
def test_streaming_equals_render_at_every_step(text, sizes):
    r = _stream(text, sizes)
    assert r.html == render_markdown(text)


def test_streaming_keeps_finished_blocks():
    r = StreamingRenderer()
    stable, tail = r.feed("# A\n\nfirst para\n\nsecond")
    assert stable == "<h1>A</h1>\n<p>first para</p>\n"
    assert tail == "<p>second</p>"
    assert r.appended == "<h1>A</h1>\n<p>first para</p>"
    stable2, tail2 = r.feed("# A\n\nfirst para\n\nsecond para")
    assert stable2 == stable and r.appended == ""
    assert tail2 == "<p>second para</p>"


def test_streaming_does_not_cut_inside_fences_or_lists():
    r = StreamingRenderer()
    r.feed("```\na\n\nb\n\nc")
    assert r.stable == ""
    r.feed("- a\n\n- b\n\n- c")  # not an extension: starts over
    assert r.stable == ""  # each next line continues the list
    r.feed("- a\n\n- b\n\n- c\n\nd")
    assert r.stable.count("<ul>") == 1 and r.stable.count("<li>") == 3 and r.tail == "<p>d</p>"


def test_streaming_restarts_on_a_different_text():
    r = StreamingRenderer()
    r.feed("one\n\ntwo\n\nthree")
    assert r.stable
    r.feed("other\n\nanswer")
    assert r.html == render_markdown("other\n\nanswer")


def test_streaming_long_answer_rerenders_only_the_tail():
    blocks = [f"## Section {i}\n\nText {i} with [a link](https://example.com/{i}).\n\n- x\n- y" for i in range(200)]
    text = "\n\n".join(blocks)
    r = StreamingRenderer()
    longest_tail = 0
    for end in range(40, len(text) + 40, 40):
        r.feed(text[:end])
        longest_tail = max(longest_tail, min(end, len(text)) - len(r._stable_text))
    assert r.html == render_markdown(text)
    assert longest_tail < 200

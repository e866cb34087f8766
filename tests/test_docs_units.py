"""The documentation features' pure parts: quoted passages and text fragments, greetings and exemptions, citations,
the demo docs' Markdown rendering, the eval's figures, docs-push paths and archive bounds, the site plugins' tags,
versions and languages (a page's scope, the versions a question names, the scopes a search tries, the fallback
note), and the crawler's URL normalisation and sitemap parser."""

from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import pytest
from docs_double import SITE

from widget.errors import ProtocolError
from widget.integrations.common import IntegrationError, check_options, context_script, widget_tags
from widget.relay.docs import DocHit
from widget.relay.docs.crawl import normalize_url, parse_site, parse_sitemap
from widget.relay.docs.eval import Probe, score, url_matches
from widget.relay.docs.extract import NotAPage, extract_html
from widget.relay.docs.markdown_source import extract_markdown, title_from_path
from widget.relay.docs.query import (
    check_scope,
    compile_version_pattern,
    context_page_url,
    named_versions,
    page_scope,
    scope_plan,
    url_path,
)
from widget.relay.docs.tool import EVERY_SCOPE, SCOPE_FALLBACK_NOTE, build_reply
from widget.relay.http import docs_push
from widget.relay.http.docs_site import render
from widget.relay.hub.citations import Citations, exempt_reason, is_greeting, quoted_passage, text_fragment

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent


def test_passage_and_text_fragment() -> None:
    text = SITE[1]["text"]
    answer = "Colours come from CSS custom properties on the host element [s1]."
    # the section's own words and case, from the first shared word to the last
    assert quoted_passage(answer, text) == "colours come from CSS custom properties on the host element"
    assert text_fragment(answer, text) == ("text=colours%20come%20from%20CSS%20custom%20properties"
                                           "%20on%20the%20host%20element")
    long = "As the docs say: Set --ap-accent for buttons and links, and --ap-surface for the panel's background."
    # a long passage is named by its first and last words; '-' and ',' are encoded (they separate a directive's parts)
    assert text_fragment(long, text) == ("text=Set%20%2D%2Dap%2Daccent%20for%20buttons%20and,"
                                         "%2D%2Dap%2Dsurface%20for%20the%20panel%27s%20background")
    assert quoted_passage("colours are custom", text) is None  # fewer than 4 words in a row
    assert text_fragment("Nothing in common with that at all.", text) is None


def test_greetings_and_exemptions() -> None:
    for q in ("hi", "Hello!", "hey there", "Thanks!", "thank you so much", "ok", "Good morning", "merci",
              "Thanks, that helped!", "bye for now", "great."):
        assert is_greeting(q), q
    for q in ("hi, how do I change the colours?", "thanks, and what about the pro plan?", "hello " * 10, "",
              "hi what are the limits", "okay, the pro plan", "thanks! one more thing: the limits of pro",
              "history of the project", "hike"):
        assert not is_greeting(q), q
    assert exempt_reason("hi", "Hello! Ask me about the docs.", offered=False) == "greeting"
    assert exempt_reason("hi", "x" * 301, offered=False) is None
    assert exempt_reason("how?", "You can write to support below.", offered=True) == "offer"
    assert exempt_reason("how?", "It works like this.", offered=False) is None
    assert exempt_reason("how?", "You answered: green.", offered=False, after_prompt=True) == "reader_answer"


def test_citations_drop_unknown_ids_and_number_in_order() -> None:
    cites = Citations()
    s = SITE[1]
    hit = DocHit(key=s["url"], page_title=s["page_title"], headings=s["headings"], url=s["url"], text=s["text"],
                 score=1.0)
    cites.add_reply(build_reply([hit], lambda h: "s1"))
    cites.tool("call_1", "Plan limits")
    assert cites.doc("/docs/theming.html#colours") == "s1" and cites.doc("/docs/x#y") == "s2"
    out = cites.sources("Pro has 5 seats [t1]. Colours: see [s7] and [s1], again [t1].")
    assert [(s["id"], s["n"], s["kind"], s["title"]) for s in out] == [("t1", 1, "tool", "Plan limits"),
                                                                     ("s1", 2, "docs", "Theming › Colours")]
    assert "url" not in out[0] and out[1]["url"] == "/docs/theming.html#colours"


GUIDE = """---
title: ignored when there is a heading
---
# Guide

Start here. See [the other page](other.md#setup-and-more) or [an outside link](https://example.com/x.md).

## Setup and more

Install the package with pip. Then run the relay on port 8765.

<script>alert(1)</script>

## Setup and more

A second heading of the same name gets its own anchor.
"""


def test_heading_ids_are_the_index_anchors_on_every_page_of_the_docs() -> None:
    for page in sorted((ROOT / "docs").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        _, body = render(text)
        ids = re.findall(r'<h[1-6] id="([^"]+)"', body)
        anchors = [s.url.split("#", 1)[1] for s in extract_markdown(text.encode(), "/x.html").sections]
        assert anchors and set(anchors) <= set(ids), page.name


def test_render() -> None:
    title, body = render(GUIDE)
    assert title == "Guide"
    assert re.findall(r'<h[12] id="([^"]+)"', body) == ["guide", "setup-and-more", "setup-and-more_1"]
    assert 'href="other.html#setup-and-more"' in body and 'href="https://example.com/x.md"' in body
    assert "<script>" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def hit(url: str, s: float) -> dict[str, Any]:
    return {"url": url, "score": s}


def test_the_figures() -> None:
    probes = [Probe(1, "a", ["/a/#x"]), Probe(2, "b", ["/b/", "/c/#y"]), Probe(3, "c", ["/z/"]),
              Probe(4, "u", "unanswerable"), Probe(5, "v", "unanswerable")]
    hits = [
        [hit("https://docs.example.com/a/#x", 9.0)],  # rank 1 (a path matches on any host)
        [hit("/q/", 8.0), hit("/r/", 7.0), hit("/c/#y", 6.0)],  # rank 3
        [hit(f"/n{i}/", 5.0) for i in range(12)],  # not among the ten
        [hit("/a/#x", 2.0)],  # under the threshold: declined
        [],  # nothing at all: declined
    ]
    results, figures = score(probes, hits, [0.001] * 5, threshold=4.0)
    assert [r["rank"] for r in results] == [1, 3, None, None, None]
    assert figures == {"hit_at_1": round(1 / 3, 4), "hit_at_5": round(2 / 3, 4),
                       "mrr_at_10": round((1 + 1 / 3) / 3, 4), "unanswerable_declined": 2, "answerable_lost": 0}
    assert results[3]["below_threshold"] is True and results[4]["top_score"] is None
    assert results[2]["found"] == [f"/n{i}/" for i in range(5)]
    _, figures = score(probes, hits, [0.0] * 5, threshold=None)
    assert figures["unanswerable_declined"] is None and figures["answerable_lost"] is None
    assert not url_matches("https://docs.example.com/a/#x", "/a/") and url_matches("/a/", "/a/")


def archive(files: Mapping[str, str | bytes], mode: Literal["w:gz", "w"] = "w:gz") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for name, text in files.items():
            data = text.encode() if isinstance(text, str) else text
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_push_paths() -> None:
    assert docs_push.is_push_path("/api/apps/shop/docs") and docs_push.is_push_path("/copilot/api/apps/x/docs")
    assert not docs_push.is_push_path("/api/apps/shop/stats") and not docs_push.is_push_path("/docs")


def test_archive_bounds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(docs_push, "MAX_PUSH_UNPACKED_BYTES", 1000)
    with pytest.raises(ProtocolError, match="unpacks to more than 1000 bytes"):
        docs_push.read_archive(io.BytesIO(archive({"a.html": "x" * 2000})), "/", "directory")


def test_tags_and_options() -> None:
    options = check_options({"snapshot_cache": False, "python": ["/a.py", "/b.py"]})
    tags = widget_tags("https://r.example", "a", options, {"title": "x", "url": "/p/"})
    assert 'data-snapshot-cache="false"' in tags and 'data-python="/a.py,/b.py"' in tags
    # A title cannot end or change the inline script.
    script = context_script({"title": "</script><!-- & x", "url": "/p/"})
    assert script.count("<") == 2 and "\\u003c/script\\u003e\\u003c!-- \\u0026 x" in script
    with pytest.raises(IntegrationError, match="unknown loader option 'relay'"):
        check_options({"relay": "https://elsewhere"})


# -- versions and languages (the relay's scoped searches: test_docs_scope.py) -------------------------------------

#: The 3.11 section of test_docs_scope.py's two-version site.
V11 = "/en/3.11/library/taskgroup/#cancel"


def test_a_page_scope_is_its_leading_language_and_version() -> None:
    cases = {
        "https://docs.example.com/en/3.12/library/asyncio.html": "/en/3.12/",
        "/3.12/library/": "/3.12/",
        "/en/latest/usage/": "/en/latest/",
        "/pt-br/stable/": "/pt-br/stable/",
        "/zh_CN/v2/guide/": "/zh_CN/v2/",
        "/fr/guide/": "/fr/",
        "/docs/2.x/intro": "/docs/",  # "docs" is no language: nothing (below) unless scope_base says /docs/
        "/v1.29/tasks/": "/v1.29/",
        "https://docs.python.org/3/library/asyncio.html": "/3/",
        "/en/3.12": "/en/",  # the last part is the page's own name, not a folder
    }
    for url, prefix in cases.items():
        scope = page_scope(url)
        assert (scope.prefix if scope else "/docs/") == prefix, url
    # only leading segments count: an unversioned site's /api/v1/ folder, a blog's year, a plain folder are none
    for url in ("/api/v1/users/", "/guide/v2/", "/2024/05/post/", "/guide/theming/", "/", "", "/index.html"):
        assert page_scope(url) is None, url
    assert page_scope("/docs/2.x/intro", base="/docs/") == ("/docs/2.x/", "/docs/", None, "2.x")
    assert page_scope("/en/3.11/x/") == ("/en/3.11/", "/", "en", "3.11")
    custom = compile_version_pattern(r"\d{4}\.\d+")
    assert page_scope("/2024.1/guide/", version_pattern=custom) == ("/2024.1/", "/", None, "2024.1")
    assert page_scope("/3.12/guide/", version_pattern=custom) is None  # the pattern replaces the built-in forms
    assert url_path("https://h.example/en/3.11/x/?q=1#a") == "/en/3.11/x/" and url_path("en/x") == "/en/x"


def test_the_versions_a_question_names() -> None:
    cases = {
        "How do I cancel a task group in 3.11?": ["3.11"],
        "version 3.11 please": ["3.11"],
        "Version 3.11.": ["3.11"],
        "the v2 API": ["v2"],
        "what changed between 3.11 and 3.12": ["3.11", "3.12"],
        "in the latest docs": ["latest"],
        "is it in version stable": ["stable"],
        # amounts, addresses and words are not versions
        "wait 1.5 seconds": [], "a 2.0 GB file": [], "10.5% of requests": [], "ping 10.0.0.1": [],
        "is the API stable?": [], "which version of the API": [], "the main idea": [],
    }
    for question, versions in cases.items():
        assert named_versions(question) == versions, question
    assert named_versions("new in 2024.1 and 2024.2.", compile_version_pattern(r"\d{4}\.\d+")) == ["2024.1",
                                                                                                    "2024.2"]


def test_the_scopes_a_search_tries() -> None:
    page = "https://docs.example.com/en/3.12/library/taskgroup/"
    assert scope_plan(page, ["cancel a task group"]) == ["/en/3.12/", None]
    assert scope_plan(page, ["cancel a task group", "and in 3.11?"]) == ["/en/3.11/", "/en/3.12/", None]
    assert scope_plan(page, ["cancel in 3.12"]) == ["/en/3.12/", None]
    assert scope_plan(page, ["3.11 or 3.12: what changed"]) == ["/en/", None]  # both: the language's docs
    assert scope_plan("/v3.12/guide/", ["and in 3.11"]) == ["/v3.11/", "/v3.12/", None]  # the site's spelling
    assert scope_plan("/about/", ["cancel in 3.11"]) == ["/3.11/", None]
    assert scope_plan("/about/", ["cancel"]) == scope_plan(None, ["cancel"]) == [None]
    assert scope_plan("/docs/en/3.12/x/", ["cancel"], base="/docs/") == ["/docs/en/3.12/", None]


def test_the_page_url_in_a_page_context() -> None:
    assert context_page_url({"page": {"title": "T", "url": "https://d.example/en/3.11/x/"}}) == \
        "https://d.example/en/3.11/x/"
    assert context_page_url({"url": "/en/3.11/x/"}) == "/en/3.11/x/"
    assert context_page_url({"page": "/en/3.11/x/"}) == "/en/3.11/x/"
    for context in ({"page": "pricing"}, {"page": {"url": 3}}, {}, None, "x", {"page": {"url": "javascript:x"}}):
        assert context_page_url(context) is None, context


def test_a_scope_must_be_a_path() -> None:
    assert check_scope(None) is check_scope("") is check_scope("/") is None
    assert check_scope("/en/3.11") == check_scope("/en/3.11/") == "/en/3.11/"
    for bad in ("en/3.11/", "https://d.example/en/", "/" + "x" * 1000):
        with pytest.raises(ValueError, match="must be a URL path that starts with '/'"):
            check_scope(bad)


def test_a_fallback_note_rides_with_its_sections_within_the_reply_bound() -> None:
    hit = {"key": V11, "page_title": "Task groups", "headings": ["Task groups"], "url": V11, "text": "x " * 5000,
           "score": 1.0}
    note = SCOPE_FALLBACK_NOTE.format(first="/en/3.11/", found=EVERY_SCOPE)
    reply = build_reply([hit], lambda _h: "s1", "x", max_chars=2000, note=note)  # type: ignore[list-item]
    assert reply["note"] == note and reply["sections"][0]["id"] == "s1"
    assert len(json.dumps(reply, ensure_ascii=False, separators=(",", ":"))) <= 2000


# -- the crawler's URLs and sitemaps (the crawls over HTTP: test_docs_crawl.py) ------------------------------------

def sitemap(*urls: str, index: bool = False) -> str:
    tag, item = ("sitemapindex", "sitemap") if index else ("urlset", "url")
    entries = "".join(f"<{item}><loc>{u}</loc></{item}>" for u in urls)
    return f'<?xml version="1.0" encoding="UTF-8"?><{tag} xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</{tag}>'


def test_urls_are_normalised_so_a_page_is_fetched_once() -> None:
    base = "http://Docs.Example.com:80/docs/guide/"
    assert normalize_url("../a/./b/?q=1#frag", base) == "http://docs.example.com/docs/a/b/"
    assert normalize_url("HTTPS://x.org:443//p%7euser/caf%c3%a9 x") == "https://x.org/p~user/caf%C3%A9%20x"
    assert normalize_url("https://x.org/café") == normalize_url("https://x.org/caf%C3%A9")
    assert normalize_url("http://[::1]:8080/a") == "http://[::1]:8080/a"
    for bad in ("mailto:a@b.c", "javascript:alert(1)", "ftp://x/", "http://user:pw@x/", "http://x:99999/"):
        assert normalize_url(bad, base) is None, bad
    assert normalize_url("http://") is None
    assert parse_site("https://x.org/docs/").prefix == "/docs/"
    assert parse_site("https://x.org/docs").prefix == "/docs/"
    assert parse_site("https://x.org/docs/index.html").prefix == "/docs/"
    assert parse_site("https://x.org").start == "https://x.org/"
    scope = parse_site("https://x.org/docs/")
    assert scope.contains("https://x.org/docs/a/") and not scope.contains("https://x.org/docsearch/")
    assert not scope.contains("http://x.org/docs/a/") and not scope.contains("https://x.org:8443/docs/")
    for bad, says in [("ftp://x.org/", r"not an http\(s\) URL"), ("https://x.org/?page=2", "query string"),
                      ("https://u:p@x.org/", "credentials"), ("https:///nohost", "not a URL of a host"),
                      ("https://x.org/a b", "spaces")]:
        with pytest.raises(ValueError, match=says):
            parse_site(bad)


BILLION_LAUGHS = ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
                  + "".join(f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">'
                            for i in range(1, 10))
                  + ']><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>&lol9;</loc></url>'
                  "</urlset>")
XXE = ('<?xml version="1.0"?><!DOCTYPE u [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
       '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>&x;</loc></url></urlset>')


def test_parse_sitemap_refuses_entities_and_bombs() -> None:
    for hostile in (BILLION_LAUGHS, XXE):
        with pytest.raises(ValueError, match=r"it declares a DTD or entities \(DTDForbidden\)"):
            parse_sitemap(hostile.encode())
    with pytest.raises(ValueError, match="over 50 MiB unpacked"):
        parse_sitemap(gzip.compress(b" " * (51 * 1024 * 1024)))  # a gzip bomb: 51 MiB of spaces in 50 KB
    with pytest.raises(ValueError, match="not XML"):
        parse_sitemap(b"<urlset><url>")
    with pytest.raises(ValueError, match="<html> is not a sitemap"):
        parse_sitemap(b"<html><body>hi</body></html>")
    assert parse_sitemap(sitemap("https://x/a/", " https://x/b/ ").encode()) == ("urlset", ["https://x/a/",
                                                                                            "https://x/b/"])


# -- what is a page, and its title -----------------------------------------------------------------------------

#: HTTPX's docs/overrides/partials/nav.html (MkDocs Material's nav partial, overridden), shortened.
NAV_OVERRIDE = b"""{% import "partials/nav-item.html" as item with context %}
<!-- Determine class according to configuration -->
{% set class = "md-nav md-nav--primary" %}
<nav class="{{ class }}" aria-label="{{ lang.t('nav.title') }}" data-md-level="0">
  <label class="md-nav__title" for="__drawer">{{ config.site_name }}</label>
  <ul class="md-nav__list">{% for nav_item in nav %}{{ item.render(nav_item, path, 1) }}{% endfor %}</ul>
</nav>
"""


def test_a_template_fragment_is_not_a_page_but_a_page_about_templates_is() -> None:
    with pytest.raises(NotAPage, match=r"a template fragment .*not a page \(overrides/ is where MkDocs' theme "
                                       r"overrides live: --exclude overrides leaves the folder out\)"):
        extract_html(NAV_OVERRIDE, "https://www.python-httpx.org/overrides/partials/nav.html")
    # Elsewhere no hint; a tag only in an attribute (the text is words) is still a template; Liquid too.
    for fragment in (b'<div class="{{ page.cls }}"><p>Words</p></div>', b"<p>Hi {%- if user %}you{% endif %}</p>",
                     b"<pre>{{ x }}</pre>{{ y }}"):
        with pytest.raises(NotAPage) as err:
            extract_html(fragment, "/parts/x.html")
        assert "(" not in str(err.value).split("not a page", 1)[1]
    # A built page documenting Jinja shows the tags in code, and has a body: indexed, tags and all.
    page = extract_html(b"<!DOCTYPE html><html><head><title>Templates</title></head><body><main><h1>Templates</h1>"
                        b"<p>Loop with <code>{% for x in xs %}</code>.</p><pre>{{ user.name }}</pre></main></body>"
                        b"</html>", "/templates/")
    assert page.title == "Templates" and "{% for x in xs %}" in page.sections[0].text
    assert "{{ user.name }}" in page.sections[0].text
    # A page that leaves out <html>/<body> (HTML allows it) is a page when it says <!doctype>, or has no tags.
    assert extract_html(b"<!doctype html><title>T</title><p>Use {{ name }} here.</p>", "/t/").title == "T"
    assert extract_html(b"<p>A fragment of plain words {not a tag}.</p>", "/w/").sections[0].text == (
        "A fragment of plain words {not a tag}.")


@pytest.mark.parametrize("front_matter, title", [
    ("title: Clients", "Clients"),
    ("title: Clients and pools # the nav's name", "Clients and pools"),
    ("title: \"Clients: \\\"pooled\\\" \\u00e9\"", 'Clients: "pooled" é'),
    ("title: 'It''s a client'", "It's a client"),
    ("tags: [http]\ntitle: >-\n  Clients that\n  share connections\nsearch:\n  boost: 2",
     "Clients that share connections"),
    ("title: |\n  Two\n  lines", "Two lines"),
    ("title: [a, b]", "Advanced"),  # not text: the file's name
    ("title:", "Advanced"),
    ("meta:\n  title: Nested", "Advanced"),
])
def test_a_markdown_page_without_a_heading_is_named_by_its_front_matter(front_matter: str, title: str) -> None:
    md = f"---\n{front_matter}\n---\n!!! hint\n    Use a client.\n\n## Why use a Client?\n\nPooling.\n"
    page = extract_markdown(md.encode(), "/advanced/", fallback_title=title_from_path("advanced/index.md"))
    assert page.title == title
    assert [s.headings for s in page.sections] == [[], ["Why use a Client?"]]
    # A # heading names the page before the front matter does (the heading is what the page shows).
    assert extract_markdown(f"---\n{front_matter}\n---\n# Heading\n\nx\n".encode(), "/h/").title == "Heading"


@pytest.mark.parametrize("rel, title", [
    ("advanced/clients.md", "Clients"),  # HTTPX's, which has no # heading
    ("advanced/event-hooks.md", "Event hooks"),
    ("custom_docs_ui_assets.markdown", "Custom docs ui assets"),
    ("iOS-setup.md", "iOS setup"),  # not all lower case: kept as written (MkDocs)
    ("index.md", "Home"), ("README.md", "Home"),  # the site's home page (MkDocs)
    ("how-to/index.md", "How to"), ("guide/v2/README.md", "V2"),  # a folder's page: the folder's name
    ("", ""),
])
def test_a_markdown_page_with_no_title_at_all_is_named_by_its_path(rel: str, title: str) -> None:
    assert title_from_path(rel) == title

"""Hostile Markdown (CPython part): Markdown built from hostile fragments, through the whole render path, checked by
parsing the output — no script, no event attribute, no style, no non-http(s)/mailto URL, no auto-loading
element. The browser part (sanitizer, bar, 0 executions, 0 requests) is in tests/test_bar_corpus.py."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_markdown import corpus_payloads, html_violations

from widget.core.markdown import StreamingRenderer, render_markdown

pytestmark = pytest.mark.fuzz

MARKDOWN_BITS = [
    "# ", "## ", "> ", "- ", "1. ", "```", "```html\n", "`", "**", "_", "~~", "|", "---", "\n", "\n\n", "    ",
    "[", "](", ")", "![", "<", ">", "&", "&#", ";", "\"", "'", "=", " ", "\\", "*",
]
HOSTILE = [
    "javascript:alert(1)", "JaVaScRiPt:alert(1)", "java\tscript:x", "&#106;avascript:x", "&#x6A;avascript:x",
    "data:text/html,<script>alert(1)</script>", "vbscript:x", "//evil.example/x", "http://evil.example/x.png",
    "<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "<svg onload=alert(1)>", "<iframe src=//x>",
    "<a href=javascript:x>", "onmouseover=alert(1)", "style=\"background:url(x)\"", "<style>*{}</style>",
    "<object data=x>", "<embed src=x>", "<link rel=stylesheet href=x>", "<meta http-equiv=refresh>",
    "<base href=//x/>", "<form action=x>", "<math><mi xlink:href=x>", "<video src=x>", "<audio src=x>",
    "\u202e", "\u200b", "mailto:a@b.co", "https://ok.example/path?q=1",
]
PAYLOADS = [p["payload"] for p in corpus_payloads()]
FRAGMENT = st.one_of(st.sampled_from(MARKDOWN_BITS), st.sampled_from(HOSTILE), st.sampled_from(PAYLOADS),
                     st.text(max_size=8))
DOCUMENT = st.lists(FRAGMENT, min_size=1, max_size=30).map("".join)
EXAMPLES = int(os.environ.get("RENDER_FUZZ_EXAMPLES", "300"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENT)
def test_hostile_markdown_renders_safe(text):
    html = render_markdown(text)
    assert html_violations(html, require_url_shown=False) == [], (text, html)


@settings(max_examples=max(50, EXAMPLES // 5), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENT, st.integers(min_value=1, max_value=40))
def test_streamed_hostile_markdown_renders_safe(text, step):
    r = StreamingRenderer()
    for end in range(step, len(text) + step, step):
        stable, tail = r.feed(text[:end])
        assert html_violations(stable + tail, require_url_shown=False) == [], (text[:end], stable + tail)


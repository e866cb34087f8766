"""Property searches of render_markdown and StreamingRenderer (widget/core/markdown.py): any chunking of any mix of
Markdown fragments streams to what a whole render gives, and hostile fragments never render into unsafe HTML."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_markdown import _stream, html_violations

from widget.core.markdown import render_markdown

pytestmark = pytest.mark.fuzz


FRAGMENTS = ["# Head", "para *em* `code`", "- item", "* item", "+ item", "1. one", "2. two", "  indented",
             "    code", "\tcode", "> quote", ">q", "```", "```python", "~~~", "````", "```python extra", "``` {.x}",
             "``` {.x", "```hl_lines=\"1\"", "", "", "", " ", "\t", "| a | b |", "|---|---|", "---", "===", "- - -",
             "***", "see https://x.example/a_b", "[l](https://x.example)", "![i](https://x.example/i.png)",
             "<b>raw</b>", "[id]: https://ref.example", "\r", "x\ry", "lazy", "    - nested", "  1. x", "1986. y",
             "-", "1.", "&amp;", "\x02", "Title", "}", "{", "\\", "[x](javascript:alert(1))"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=25),
       sizes=st.lists(st.integers(min_value=1, max_value=15), min_size=1, max_size=5))
def test_streaming_property(lines, sizes):
    text = "\n".join(lines)
    r = _stream(text, sizes)
    assert r.html == render_markdown(text)


HOSTILE = ["javascript:", "JaVa&#115;cript:", "&#106;", "&#x6A;", "&colon;", "&#58;", "data:", "vbscript:", "//",
           "<script>", "</script>", "<img src=x onerror=alert(1)>", "<svg onload=alert(1)>", "onerror=", "\"", "'",
           "`", "](", "[", "![", ")", "(", "<", ">", "\\", "%0a", "&#x09;", "\u202e", "\n", "\n\n", " ", "x",
           "https://", "mailto:", "alert(1)", "<https://", "<javascript://", "```", "    ", "{", "}", "&", "#"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(HOSTILE), min_size=1, max_size=30))
def test_hostile_fragments_render_clean(parts):
    html = render_markdown("".join(parts))
    assert html_violations(html) == []

"""The documentation features' pure parts: quoted passages and text fragments, greetings and exemptions, citations,
the demo docs' Markdown rendering, the eval's figures, docs-push paths and archive bounds, the site plugins' tags."""

from __future__ import annotations

import io
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
from widget.relay.docs.eval import Probe, score, url_matches
from widget.relay.docs.markdown_source import extract_markdown
from widget.relay.docs.tool import build_reply
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

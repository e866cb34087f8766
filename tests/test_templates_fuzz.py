"""URL templates: adversarial arguments never change the scheme or host and never send a '.'/'..' segment.

A fast subset runs here; ``python bench/fuzz_templates.py`` runs ≥ 10,000 examples.
"""

from __future__ import annotations

import os
import unicodedata
from urllib.parse import unquote, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from widget.core.templates import TemplateError, expand

pytestmark = pytest.mark.fuzz

TEMPLATES = [
    "https://api.example.com/plans/{plan}",
    "https://api.example.com/plans/{plan}/limits?seat={seat}",
    "/api/{plan}/{seat}",
    "/api/x?q={plan}&r={seat}",
    "https://api.example.com/{plan}.json",
]

NASTY = st.sampled_from(
    [".", "..", "%2e", "%2E%2e", "%252e%252e", "\uff0e", "\u2024", "\ufe52", "/", "\\", "//", "@", ":", "?", "#",
     "&", "=", "%", "%00", "\x00", "\n", "\t", " ", "javascript:", "http://evil.example", "evil.example", "%2f",
     "\u202e", "\u200b", "é", "..;/", ".%00.", "~", "+"]
)
VALUES = st.one_of(
    st.text(max_size=40),
    st.lists(NASTY, max_size=6).map("".join),
    st.lists(st.one_of(NASTY, st.text(max_size=3)), max_size=8).map("".join),
    st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.booleans(),
)

EXAMPLES = int(os.environ.get("TEMPLATE_FUZZ_EXAMPLES", "500"))


def _dot(segment: str) -> bool:
    text = segment
    for _ in range(3):
        text = unquote(text)
    return unicodedata.normalize("NFKC", text).strip() in (".", "..")


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(template=st.sampled_from(TEMPLATES), plan=VALUES, seat=VALUES)
def test_scheme_host_and_segments_hold(template, plan, seat):
    try:
        url = expand(template, {"plan": plan, "seat": seat})
    except TemplateError:
        return  # refused before anything is sent: that is the safe outcome
    parts = urlsplit(url)
    base = urlsplit(template.replace("{plan}", "p").replace("{seat}", "s"))
    assert (parts.scheme, parts.netloc) == (base.scheme, base.netloc)
    assert parts.fragment == ""
    assert parts.path.count("/") == base.path.count("/")
    assert parts.query.count("&") == base.query.count("&") and parts.query.count("=") == base.query.count("=")
    assert not any(_dot(seg) for seg in parts.path.split("/")[1:])

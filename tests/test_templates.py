"""URL templates: the RFC 6570 level-1 corpus for the {name} form, negative cases, adversarial arguments."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from widget.core.templates import TemplateError, expand, placeholders
from widget.errors import ConfigError

pytestmark = pytest.mark.unit


def corpora() -> Path:
    here = Path(__file__).resolve().parents[2] / "shared" / "corpora"
    return here if here.exists() else Path("/work/shared/corpora")


def simple_cases():
    """Every corpus case whose template uses only {name} expressions with string values."""
    cases = []
    for fname in ("uritemplate-spec-examples.json", "uritemplate-extended-tests.json"):
        data = json.loads((corpora() / fname).read_text())
        for group, spec in data.items():
            variables = spec["variables"]
            for template, expected in spec["testcases"]:
                names = [t[1:-1] for t in __import__("re").findall(r"\{[^{}]*\}", template)]
                if not names or not all(n.replace("_", "").isalnum() and n.isascii() for n in names):
                    continue
                if not all(isinstance(variables.get(n), str) for n in names):
                    continue
                cases.append(pytest.param(template, variables, expected, id=f"{group}:{template}"))
    return cases


@pytest.mark.parametrize("template,variables,expected", simple_cases())
def test_level1_corpus(template, variables, expected):
    got = expand(template, variables)
    assert got == expected or (isinstance(expected, list) and got in expected)


def test_corpus_has_cases():
    assert len(simple_cases()) >= 5


def negative_templates():
    data = json.loads((corpora() / "uritemplate-negative-tests.json").read_text())
    return [t for t, _ in data["Failure Tests"]["testcases"]]


@pytest.mark.parametrize("template", negative_templates())
def test_negative_corpus_refused(template):
    with pytest.raises(ConfigError):
        placeholders(template)


@pytest.mark.parametrize(
    "template",
    ["https://{host}/x", "{scheme}://example.com/x", "//{host}/x", "https://api.{tld}/x", "/x#{frag}",
     "https://user:{pw}@example.com/", "javascript:{code}", "mailto:{to}"],
)
def test_placeholder_outside_path_and_query_refused(template):
    with pytest.raises(ConfigError):
        placeholders(template)


@pytest.mark.parametrize(
    "value",
    ["..", ".", "%2e%2e", "%2E.", ".%2e", "%252e%252e", "\uff0e\uff0e", "\u2024\u2024", " .. "],
)
def test_dot_segments_fail_before_sending(value):
    with pytest.raises(TemplateError):
        expand("/api/plans/{plan}/limits", {"plan": value})


@pytest.mark.parametrize(
    "value",
    ["../admin", "../../etc/passwd", "@evil.example", "//evil.example/x", "javascript:alert(1)",
     "a?b=c&d=e", "x#frag", "http://evil.example", "\\..\\x", "a" * 5000, "\u0000", "é/../"],
)
def test_adversarial_values_stay_inside_one_segment(value):
    url = expand("https://api.example.com/plans/{plan}?q={plan}", {"plan": value})
    parts = urlsplit(url)
    assert parts.scheme == "https" and parts.netloc == "api.example.com"
    assert parts.path.count("/") == 2 and parts.fragment == ""
    assert "&" not in parts.query and parts.query.startswith("q=")


def test_values_are_typed_and_required():
    assert expand("/a/{n}/{b}", {"n": 3, "b": True}) == "/a/3/true"
    with pytest.raises(TemplateError, match="Missing"):
        expand("/a/{n}", {})
    with pytest.raises(TemplateError, match="string, number or boolean"):
        expand("/a/{n}", {"n": [1]})

"""The repo's documents: the protocol document stands alone, every design decision the code cites is written down in
the repo, every flow of the conformance suite has its summary, and the snippets of README.md and docs/embedding.md
that tests/test_readme_pages.py serves as pages are found."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from widget.conformance import FLOWS
from widget.protocol import names

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PROTOCOL = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
DECISIONS = (ROOT / "docs" / "decisions.md").read_text(encoding="utf-8")


def test_protocol_document_refers_to_nothing_outside_the_repository() -> None:
    assert not re.search(r"\b[Ss]eed[ -]?\d|\bD\d{1,2}\b|[Ii]ssue \d", PROTOCOL)
    for path in re.findall(r"\b((?:docs|widget|schemas|static|tests)/[\w./-]+\w)", PROTOCOL):
        assert (ROOT / path).exists() or (ROOT / path.rstrip("/")).exists(), path


def test_every_flow_section_names_its_packets_with_wire_names() -> None:
    flows = PROTOCOL.split("## 10. Flows, packet by packet", 1)[1].split("## 11.", 1)[0]
    used = set(re.findall(r"(?:C→R|R→C)\s+([a-z_.]+) ", flows))
    known = {e.value for e in names.Event} | {"ack"}
    assert used and used <= known, used - known
    assert {e.value for e in names.Event} - {"state_patch"} <= set(re.findall(r"[a-z_.]+", flows))


def test_every_cited_decision_is_defined() -> None:
    defined = set(re.findall(r"^\*\*(D\d{1,2})\. ", DECISIONS, re.MULTILINE))
    assert defined == {f"D{i}" for i in range(1, len(defined) + 1)}  # numbered from D1 without a gap
    cited = set()
    for path in [*ROOT.glob("widget/**/*.py"), *ROOT.glob("docs/*.md"), *ROOT.glob("static/*.js"), ROOT / "build.py"]:
        if "_dist" not in path.parts:
            cited |= set(re.findall(r"\bD(?:[1-9][0-9]?)\b(?=[).,;: ])", path.read_text(encoding="utf-8",
                                                                                       errors="replace")))
    assert cited <= defined, cited - defined


def test_every_flow_is_documented() -> None:
    assert len(FLOWS) >= 14
    for name, (_fn, summary) in FLOWS.items():
        assert summary, name


FENCE = re.compile(r"^```(html|js)\n(.*?)^```", re.S | re.M)


DOCS = ("README.md", "docs/embedding.md")


@dataclass(frozen=True)
class Snippet:
    """One fenced block of a doc, and where its loader tag goes when it has none."""

    doc: str
    index: int
    lang: str
    text: str
    order: str  # "own" (it has the loader tag) | "before" (above a defer tag) | "after" (below a plain tag)

    @property
    def id(self) -> str:
        return f"{Path(self.doc).stem}-{self.index}-{self.order}"


def snippets() -> Iterator[Snippet]:
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        for i, m in enumerate(FENCE.finditer(text)):
            lang, body = m.group(1), m.group(2)
            if "autopilot.js" in body:
                yield Snippet(doc, i, lang, body, "own")
            elif "AutopilotConfig" in body:
                yield Snippet(doc, i, lang, body, "before")
            else:
                yield Snippet(doc, i, lang, body, "before")
                yield Snippet(doc, i, lang, body, "after")


SNIPPETS = list(snippets())


def test_the_docs_have_the_snippets_this_module_serves():
    """The extraction finds the installs and the JS API examples (a doc reshuffle must not empty this module)."""
    by_doc = {d: [s for s in SNIPPETS if s.doc == d] for d in DOCS}
    assert len(by_doc["README.md"]) >= 4 and len(by_doc["docs/embedding.md"]) >= 5
    assert any('type="py"' in s.text for s in by_doc["README.md"])
    assert any("Autopilot.push" in s.text or ".push((Autopilot)" in s.text for s in by_doc["README.md"])

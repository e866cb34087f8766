"""A page as the index keeps it: its URL, its title and its sections, built the same way from HTML and Markdown.

``SectionBuilder`` gets a page's headings and text in document order and splits them into sections: one per
heading (text before the first heading is the page's introduction), each with the path of headings above it and
the anchor a link to it uses. The anchor is the heading's own (its ``id``, or the id the generator put on an
enclosing element) when the page has it once; a section without one, or whose anchor repeats an earlier one in
the page (a link would land on the first), links to the nearest heading above it that has one, else to the page
itself. A section with no text of its own is not kept (its heading still names the sections below it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .limits import CHUNK_CHARS, MAX_SECTION_CHARS, MAX_SECTIONS_PER_PAGE


class PageSkipped(Exception):
    """A page is not indexed; the message says why (one line, shown as a warning)."""


@dataclass(slots=True)
class Section:
    """One section of a page."""

    #: Unique within the app: the page URL and the section's own anchor (``~N`` added when that repeats).
    key: str
    #: What a reader opens: the page URL with the anchor that lands on (or nearest above) this section.
    url: str
    #: Headings from the page's top heading down to this section's own (empty for an untitled introduction).
    headings: list[str]
    text: str


@dataclass(slots=True)
class Page:
    """One page: its URL (no fragment), title and sections in document order."""

    url: str
    title: str
    sections: list[Section] = field(default_factory=list)
    #: Problems worth a warning line that did not stop the page (sections dropped over the bound).
    notes: list[str] = field(default_factory=list)


_SPACES = re.compile(r"[ \t\r\f\v\u00a0\u200b]+")
_BLANKS = re.compile(r"\n{2,}")


def clean_text(text: str) -> str:
    """Trailing spaces off every line, no blank lines (blocks are one per line), no leading or trailing space."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    return _BLANKS.sub("\n", "\n".join(lines)).strip()


def one_line(text: str) -> str:
    """Whitespace collapsed to single spaces (headings and titles)."""
    return _SPACES.sub(" ", text.replace("\n", " ")).strip()


class SectionBuilder:
    """Collects a page's headings and text in order; ``page()`` returns the sections."""

    def __init__(self, url: str) -> None:
        self.url = url
        #: (level, heading text, anchor usable for links or None) of the open headings.
        self._stack: list[tuple[int, str, str | None]] = []
        self._used: set[str] = set()
        self._keys: set[str] = set()
        self._parts: list[str] = []
        self._sections: list[Section] = []
        self._dropped = 0

    def text(self, piece: str, *, verbatim: bool = False) -> None:
        """Append text to the current section (spaces at a line's start dropped unless ``verbatim``, as in code)."""
        if piece and not verbatim and (not self._parts or self._parts[-1].endswith("\n")):
            piece = piece.lstrip(" ")
        if piece:
            self._parts.append(piece)

    def heading(self, level: int, title: str, anchor: str | None) -> None:
        """A heading of ``level`` (1-6) starts a new section; ``anchor`` is the id the page has for it, if any."""
        self._flush()
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        if anchor is not None and (not anchor or anchor in self._used):
            anchor = None  # a repeated id lands on its first use: link to the heading above instead
        if anchor:
            self._used.add(anchor)
        self._stack.append((level, one_line(title), anchor))

    def _flush(self) -> None:
        text = clean_text("".join(self._parts))
        self._parts = []
        if not text:
            return
        if len(self._sections) >= MAX_SECTIONS_PER_PAGE:
            self._dropped += 1
            return
        if len(text) > MAX_SECTION_CHARS:
            text = text[:MAX_SECTION_CHARS].rstrip() + " …"
        headings = [h for _, h, _ in self._stack if h]
        link = next((a for _, _, a in reversed(self._stack) if a), None)
        own = self._stack[-1][2] if self._stack else None
        url = self.url + ("#" + link if link else "")
        key = self.url + "#" + own if own else url
        if key in self._keys:  # an untitled or anchorless section sharing its link with another
            n = 2
            while f"{key}~{n}" in self._keys:
                n += 1
            key = f"{key}~{n}"
        self._keys.add(key)
        self._sections.append(Section(key=key, url=url, headings=headings, text=text))

    def page(self, title: str) -> Page:
        """The finished page (raises ``PageSkipped`` when no section has any text)."""
        self._flush()
        if not self._sections:
            raise PageSkipped("no text to index")
        page = Page(url=self.url, title=one_line(title), sections=self._sections)
        if self._dropped:
            page.notes.append(f"{self._dropped} sections over the limit of {MAX_SECTIONS_PER_PAGE} per page dropped")
        return page


def ranked_fields(page: Page, section: Section) -> tuple[str, str]:
    """The section's two weighted fields: its own heading (the page title for an introduction), and the page
    title with the headings above it; the body text is weighted least."""
    own = section.headings[-1] if section.headings else page.title
    above = [page.title, *section.headings[:-1]]
    return own, " › ".join(dict.fromkeys(h for h in above if h))


def chunks(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """A section's text in passages of about ``size`` characters, cut between lines (a longer line between words),
    so a long section is ranked by its best passage rather than by all its words at once."""
    out: list[str] = []
    current = ""
    for line in text.split("\n"):
        while len(line) > size:
            cut = line.rfind(" ", size // 2, size)
            cut = cut if cut > 0 else size
            if current:
                out.append(current)
                current = ""
            out.append(line[:cut])
            line = line[cut:].lstrip()
        if current and len(current) + 1 + len(line) > size:
            out.append(current)
            current = line
        else:
            current = f"{current}\n{line}" if current else line
    if current or not out:
        out.append(current)
    return out

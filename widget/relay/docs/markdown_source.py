"""Markdown sources → a page's sections (markdown-it-py), with the anchors the generator gives the headings.

Front matter (``---`` … ``---`` at the top) is skipped; its ``title:`` names the page when there is no ``#``
heading. Anchors are computed as MkDocs and Python-Markdown's ``toc`` extension compute them (its own
``slugify``, and ``_1``, ``_2`` … for repeats, imported from the ``markdown`` package so they cannot drift); a
heading ending in ``{#custom-id}`` (``attr_list``) keeps that id. Code blocks, tables and lists are text;
raw HTML blocks contribute their text without tags.
"""

from __future__ import annotations

import html
import re
from typing import Any

from markdown.extensions.toc import slugify, unique
from markdown_it import MarkdownIt

from .page import Page, PageSkipped, SectionBuilder, one_line

_FRONT_MATTER = re.compile(r"\A(?:\ufeff)?---[ \t]*\r?\n(.*?)(?:\r?\n)(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)
_FM_TITLE = re.compile(r"^title:[ \t]*(.+?)[ \t]*$", re.M)
#: A heading's attribute list that sets its id (``## Colours {#colours}``): the built page's anchor.
ATTR_ID = re.compile(r"\s*\{\s*[^}]*?#([\w.:-]+)[^}]*\}\s*$")
_TAGS = re.compile(r"<[^>]*>")
_MD = MarkdownIt("commonmark", {"html": True}).enable("table")


def split_front_matter(text: str) -> tuple[str, str | None]:
    """The Markdown after its front matter, and the front matter's ``title`` (None when there is none)."""
    m = _FRONT_MATTER.match(text)
    if not m:
        return text.lstrip("\ufeff"), None
    t = _FM_TITLE.search(m.group(1))
    title = t.group(1).strip().strip("'\"") if t else None
    return text[m.end():], title or None


def inline_text(token: Any) -> str:
    """The plain text of an inline markdown-it token (a heading's words, without their markup)."""
    out = []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            out.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            out.append(" ")
        elif child.type == "image":
            out.append(inline_text(child))
    return "".join(out)


def extract_markdown(data: bytes, url: str, *, fallback_title: str = "") -> Page:
    """A Markdown source's sections (``PageSkipped`` when it has no text, e.g. front matter only)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("cp1252", errors="replace")
    body, fm_title = split_front_matter(text.replace("\x00", ""))
    out = SectionBuilder(url)
    ids: set[str] = set()
    title = ""
    tokens = _MD.parse(body)
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.type == "heading_open":
            inline = tokens[i + 1] if i + 1 < len(tokens) else None
            raw = inline_text(inline) if inline is not None else ""
            m = ATTR_ID.search(raw)
            if m:
                raw = raw[: m.start()]
                anchor = m.group(1)
                ids.add(anchor)
            else:
                anchor = unique(slugify(html.unescape(one_line(raw)), "-"), ids)
            level = int(tok.tag[1])
            if level == 1 and not title:
                title = one_line(raw)
            out.heading(level, raw, anchor)
            i += 3  # heading_open, inline, heading_close
            continue
        if tok.type == "inline":
            out.text(inline_text(tok))
        elif tok.type in ("fence", "code_block"):
            out.text("\n")
            out.text(tok.content, verbatim=True)
            out.text("\n")
        elif tok.type == "html_block":
            out.text(html.unescape(_TAGS.sub(" ", tok.content)))
            out.text("\n")
        elif tok.type in ("th_close", "td_close"):
            out.text(" ")
        elif tok.type.endswith("_close") or tok.type == "hr":
            out.text("\n")
        i += 1
    return out.page(title or fm_title or fallback_title or url)


__all__ = ["PageSkipped", "extract_markdown", "split_front_matter"]

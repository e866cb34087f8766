"""Markdown sources → a page's sections (markdown-it-py), with the anchors the generator gives the headings.

Front matter (``---`` … ``---`` at the top) is skipped; its ``title:`` names the page when there is no ``#``
heading, else the file's name does, as MkDocs makes one of it (``title_from_path``). Only ``title`` is read, as a
YAML scalar (plain, quoted or a ``|``/``>`` block; a list, a mapping, an alias or a tag is no title). Anchors are
computed as MkDocs and Python-Markdown's ``toc`` extension compute them (its own ``slugify``, and ``_1``, ``_2`` …
for repeats, imported from the ``markdown`` package so they cannot drift); a heading ending in ``{#custom-id}``
(``attr_list``) keeps that id. Code blocks, tables and lists are text; raw HTML blocks contribute their text
without tags.
"""

from __future__ import annotations

import html
import re
from pathlib import PurePosixPath
from typing import Any

from markdown.extensions.toc import slugify, unique
from markdown_it import MarkdownIt

from .page import Page, PageSkipped, SectionBuilder, one_line

_FRONT_MATTER = re.compile(r"\A(?:\ufeff)?---[ \t]*\r?\n(.*?)(?:\r?\n)(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)
_FM_TITLE = re.compile(r"^title:(?:[ \t]+(.*?))?[ \t]*$", re.M)
_DOUBLE_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_SINGLE_QUOTED = re.compile(r"'((?:[^']|'')*)'")
_YAML_ESCAPE = re.compile(r"\\(u[0-9A-Fa-f]{4}|.)")
_YAML_ESCAPES = {"n": " ", "t": " ", '"': '"', "\\": "\\", "/": "/", " ": " "}
#: The page a folder's URL serves (walk.page_url): its title is the folder's name.
_INDEX_STEMS = ("index", "README")
#: A heading's attribute list that sets its id (``## Colours {#colours}``): the built page's anchor.
ATTR_ID = re.compile(r"\s*\{\s*[^}]*?#([\w.:-]+)[^}]*\}\s*$")
_TAGS = re.compile(r"<[^>]*>")
_MD = MarkdownIt("commonmark", {"html": True}).enable("table")


def split_front_matter(text: str) -> tuple[str, str | None]:
    """The Markdown after its front matter, and the front matter's ``title`` (None when there is none)."""
    m = _FRONT_MATTER.match(text)
    if not m:
        return text.lstrip("\ufeff"), None
    return text[m.end():], front_matter_title(m.group(1))


def front_matter_title(block: str) -> str | None:
    """The top-level ``title:`` of a front matter block as one line (None when missing, empty or not text)."""
    block = block.replace("\r\n", "\n")
    m = _FM_TITLE.search(block)
    if not m:
        return None
    value = (m.group(1) or "").strip()
    if value[:1] in ("|", ">"):  # a block scalar: the more indented lines below it
        lines = []
        for line in block[m.end():].split("\n")[1:]:
            if line.strip() and not line[:1].isspace():
                break
            lines.append(line)
        title = one_line(" ".join(lines))
    elif value.startswith('"'):
        q = _DOUBLE_QUOTED.match(value)
        title = one_line(_YAML_ESCAPE.sub(_unescape, q.group(1))) if q else ""
    elif value.startswith("'"):
        q = _SINGLE_QUOTED.match(value)
        title = one_line(q.group(1).replace("''", "'")) if q else ""
    elif value[:1] in ("[", "{", "&", "*", "!", "#", "~") or value == "null":
        title = ""  # a collection, an anchor, alias or tag, a comment, or null: not a title
    else:
        title = re.split(r"[ \t]#", value, maxsplit=1)[0].strip()  # a plain scalar ends at a comment
    return title or None


def _unescape(m: re.Match[str]) -> str:
    code = m.group(1)
    if len(code) == 5:
        point = int(code[1:], 16)
        return "\ufffd" if 0xD800 <= point <= 0xDFFF else chr(point)  # a lone surrogate cannot be stored
    return _YAML_ESCAPES.get(code, m.group(0))


def title_from_path(rel: str) -> str:
    """The title MkDocs gives a page with neither a ``#`` heading nor a front matter title, from its path in the
    source folder: ``Home`` for the top ``index.md``/``README.md``, else the file's name (a folder's index page:
    the folder's) with ``-`` and ``_`` as spaces, its first letter upper-case when it is all lower case
    (``clients.md``: "Clients", ``event-hooks.md``: "Event hooks", ``iOS_setup.md``: "iOS setup")."""
    path = PurePosixPath(rel)
    if not path.name:
        return ""
    name = path.stem
    if name in _INDEX_STEMS:
        if len(path.parts) == 1:
            return "Home"
        name = path.parent.name
    title = one_line(name.replace("-", " ").replace("_", " "))
    return title.capitalize() if title == title.lower() else title


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
    """A Markdown source's sections (``PageSkipped`` when it has no text, e.g. front matter only); its title is its
    first ``#`` heading, else its front matter's ``title``, else ``fallback_title`` (``title_from_path``), else
    its URL."""
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


__all__ = ["PageSkipped", "extract_markdown", "front_matter_title", "split_front_matter", "title_from_path"]

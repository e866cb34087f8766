"""An answer's cited sources as the bar shows them: which citation ids its text may mark, one row per source, the
rules of their links, and the two copies (Markdown with footnotes, plain text with a list). Pure: no DOM.

The relay sends ``sources`` on an assistant message (``completion.ended`` and the conversation GET): each
``{id, n, kind, title, url?}`` (``CitedSource``, docs/protocol.md §5). The answer's text cites them as ``[id]``.
What the bar does with them, whatever the wire holds:

- an entry that is not an object, has no string ``id``/``title``, no whole ``n`` ≥ 1 or a ``kind`` other than
  ``docs``/``tool`` is left out; so is a second entry with an ``id`` or ``n`` seen before (the first one wins);
  the rest are shown in ``n`` order;
- a ``[id]`` token whose id is not among them is dropped from the text (never shown);
- a docs source links to its ``url`` only when that is an ``http(s)`` URL with a host and no whitespace, control,
  bidi or zero-width character (anything else shows its title as plain text); a URL on the page's own host opens
  in place (its anchor, maybe a ``#:~:text=`` fragment, scrolls the page there); another host opens in a new tab
  with ``rel="noopener noreferrer"``; a tool reply's row is its title, never a link.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict
from urllib.parse import urljoin, urlsplit

from ..core.markdown import CITATION
from ..protocol import SourceKind
from ..protocol.messages import CitedSource

__all__ = [
    "SourceRow",
    "cited_sources",
    "citation_numbers",
    "link_of",
    "markdown_with_footnotes",
    "plain_markers",
    "source_rows",
    "text_with_sources",
]

#: A link the bar follows: http(s) with a host; no whitespace, C0/C1 controls, bidi or zero-width characters.
_HTTP_URL = re.compile(
    r"https?://[^/?#\\\s][^\s\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]*", re.IGNORECASE
)
_DEFAULT_PORTS = {"http": 80, "https": 443}
#: A citation token with the spaces before it (they go with a dropped token; a marker sits right after the word).
_TOKEN = re.compile(r"[ \t]*" + CITATION.pattern)
_FENCE = re.compile(r"[ ]{0,3}(`{3,}|~{3,})")
_LIST_ITEM = re.compile(r"[ ]{0,3}(?:[*+-]|[0-9]{1,9}[.)])(?:[ \t]|$)")
_BACKTICKS = re.compile(r"`+")
_KINDS = frozenset(k.value for k in SourceKind)


class SourceRow(TypedDict):
    """One row under an answer: ``"N. title"``, a link when ``href`` is set."""

    id: str
    n: int
    kind: str
    title: str
    #: The URL the row links to (a checked http(s) URL), None: the title is plain text.
    href: str | None
    #: The link goes to another host than the page's: a new tab, without opener or referrer.
    new_tab: bool


def cited_sources(message: Mapping[str, Any]) -> list[CitedSource]:
    """The message's well-formed ``sources`` in ``n`` order (see the module doc for what is left out)."""
    raw = message.get("sources")
    if not isinstance(raw, list):
        return []
    seen_ids: set[str] = set()
    seen_n: set[int] = set()
    out: list[CitedSource] = []
    for s in raw:
        if not isinstance(s, dict):
            continue
        sid, n, title, kind = s.get("id"), s.get("n"), s.get("title"), s.get("kind")
        if not isinstance(sid, str) or not sid or not isinstance(title, str) or kind not in _KINDS:
            continue
        if not isinstance(n, int) or isinstance(n, bool) or n < 1 or sid in seen_ids or n in seen_n:
            continue
        seen_ids.add(sid)
        seen_n.add(n)
        entry: CitedSource = {"id": sid, "n": n, "kind": SourceKind(kind), "title": title}
        url = s.get("url")
        if isinstance(url, str):
            entry["url"] = url
        out.append(entry)
    out.sort(key=lambda e: e["n"])
    return out



def citation_numbers(message: Mapping[str, Any]) -> dict[str, int]:
    """``{id: n}`` of the message's sources: what its text's ``[id]`` tokens become (every other token is dropped)."""
    return {s["id"]: s["n"] for s in cited_sources(message)}


def link_of(url: Any, page_url: str | None) -> tuple[str | None, bool]:
    """``(href, new_tab)`` for a source's URL: no href unless it is a checked http(s) URL; a new tab unless its host
    (and port) is the page's. A root-relative URL (``/guide/#colours``, a docs index built with the default base URL)
    is the page's own site: it resolves against the page's origin."""
    if isinstance(url, str) and url.startswith("/") and not url.startswith("//") and _origin(page_url) is not None:
        url = urljoin(page_url or "", url)
    if not isinstance(url, str) or not _HTTP_URL.fullmatch(url):
        return None, False
    return url, _origin(url) is None or _origin(url) != _origin(page_url)


def _origin(url: str | None) -> tuple[str, int] | None:
    """``(host, port)`` of an http(s) URL (the scheme's default port when none is given), None when there is none."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.hostname.lower(), port if port is not None else _DEFAULT_PORTS[scheme]


def source_rows(message: Mapping[str, Any], page_url: str | None) -> list[SourceRow]:
    """The rows under an answer, in ``n`` order; ``page_url`` is the page's own URL (which host opens in place)."""
    rows: list[SourceRow] = []
    for s in cited_sources(message):
        href, new_tab = link_of(s.get("url"), page_url) if s["kind"] == SourceKind.DOCS else (None, False)
        rows.append({"id": s["id"], "n": s["n"], "kind": str(s["kind"]), "title": s["title"], "href": href,
                     "new_tab": new_tab})
    return rows


def markdown_with_footnotes(content: str, sources: Sequence[CitedSource]) -> str:
    """The answer's Markdown for "Copy": each cited ``[id]`` becomes ``[^n]`` (unknown ones dropped; code kept as it
    is), then the footnotes ``[^n]: [title](url)`` (a tool reply, or a URL that is not a link: its title)."""
    if not sources and not _TOKEN.search(content):
        return content
    numbers = {s["id"]: s["n"] for s in sources}
    text = _outside_code(content, lambda part: _TOKEN.sub(
        lambda m: f"[^{numbers[m.group(1)]}]" if m.group(1) in numbers else "", part))
    if not sources:
        return text
    notes = []
    for s in sources:
        href, _ = link_of(s.get("url"), None) if s["kind"] == SourceKind.DOCS else (None, False)
        title = _one_line(s["title"])
        if href is not None:
            label = title.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")
            target = f"<{href}>" if any(c in href for c in "()<>") else href
            notes.append(f"[^{s['n']}]: [{label}]({target})")
        else:
            notes.append(f"[^{s['n']}]: {title}")
    return text.rstrip("\n") + "\n\n" + "\n".join(notes) + "\n"


def plain_markers(content: str, numbers: Mapping[str, int] | None) -> str:
    """The answer's text for a bar that shows it as plain text (no sink sanitizer): each cited ``[id]`` reads
    ``[n]``, other tokens dropped, code kept as it is."""
    if not _TOKEN.search(content):
        return content
    known = numbers or {}
    return _outside_code(content, lambda part: _TOKEN.sub(
        lambda m: f"[{known[m.group(1)]}]" if m.group(1) in known else "", part))


def text_with_sources(text: str, rows: Sequence[SourceRow], heading: str) -> str:
    """The answer's plain text for "Copy as text" (its markers already read ``[n]``) with the sources listed under
    ``heading``: ``n. title`` and the URL of a link in parentheses."""
    if not rows:
        return text
    lines = [f"{r['n']}. {_one_line(r['title'])}" + (f" ({r['href']})" if r["href"] else "") for r in rows]
    return text.rstrip("\n") + "\n\n" + heading + "\n" + "\n".join(lines)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _outside_code(content: str, change: Any) -> str:
    """``content`` with ``change`` applied to its text outside fenced and indented code blocks and code spans."""
    out: list[str] = []
    prose: list[str] = []
    fence: str | None = None
    in_list = blank_before = indented_code = False

    def flush() -> None:
        if prose:
            out.append(_outside_spans("".join(prose), change))
            prose.clear()

    for line in content.splitlines(keepends=True):
        body = line.rstrip("\n")
        if fence is not None:
            out.append(line)
            m = _FENCE.match(body)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not body[m.end():].strip():
                fence = None
            continue
        if not body.strip():
            prose.append(line)
            blank_before = True
            continue
        indent = len(body) - len(body.lstrip(" \t"))
        deep = body.startswith("\t") or indent >= 4
        if deep and not in_list and (blank_before or indented_code):
            flush()
            out.append(line)
            indented_code, blank_before = True, False
            continue
        indented_code = False
        m = _FENCE.match(body)
        if m and not (m.group(1)[0] == "`" and "`" in body[m.end():]):
            flush()
            out.append(line)
            fence, blank_before = m.group(1), False
            continue
        if _LIST_ITEM.match(body):
            in_list = True
        elif not deep and blank_before:
            in_list = False
        prose.append(line)
        blank_before = False
    flush()
    return "".join(out)


def _outside_spans(text: str, change: Any) -> str:
    """``text`` with ``change`` applied outside its code spans (a run of backticks up to the next run as long)."""
    out: list[str] = []
    pos = start = 0
    while True:
        m = _BACKTICKS.search(text, pos)
        if m is None:
            break
        close = re.compile(r"(?<!`)" + m.group(0) + r"(?!`)").search(text, m.end())
        if close is None:
            pos = m.end()
            continue
        out.append(change(text[start:m.start()]))
        out.append(text[m.start():close.end()])
        pos = start = close.end()
    out.append(change(text[start:]))
    return "".join(out)

"""An answer's cited sources: its numbered markers in the text and one row per source under it (Pyodide only).

What is shown comes from ``widget.store.sources`` (which ids are cited, in which order, which URL is a link and
where it opens); this part builds the elements:

- **markers**: ``render_markdown`` leaves each cited ``[id]`` as a marked number in the sanitized text; ``mark``
  replaces it with ``<a class="cite" part="cite" href="#row">`` showing the number (its brackets are in the text
  but hidden, so "Copy as text" and a reader without styles get ``[1]``), named "Source 1: Page › Section". A
  press moves the focus to the row (the click is ours: the page's URL and hash are never touched). A marker
  inside one of the answer's own links is plain text (no link in a link).
- **rows**: ``<ol class="sources" part="sources" aria-label="Sources">``, one ``<li part="source">`` per source in
  ``n`` order: "N. Page › Section · from the site" for a docs section (its title a real link: same host opens in
  place, another host in a new tab with ``rel="noopener noreferrer"`` and a hidden "(opens in a new tab)"), the
  tool's title for a tool reply. Every text is set as text, never parsed.

The rows and markers of an answer appear once it is committed with its ``sources`` (live, and after a reload the
same way); while it streams there are none, and its citation tokens are hidden (``streaming_text``).
"""

from __future__ import annotations

import re
from typing import Any

from ..core.markdown import MARK_CLOSE, MARK_OPEN
from ..protocol import MAX_CITATION_ID_DIGITS
from ..store.sources import SourceRow, cited_sources, markdown_with_footnotes, source_rows, text_with_sources
from .dom import Dom, absent, bidi_safe, has
from .views import MessageView

#: ``data-action`` of a marker (the bar's click handler hands it to ``on_cite``).
CITE_ACTION = "cite"
#: What may still become a citation token (``CITATION`` of ``widget.core.markdown``) at the end of a streaming answer,
#: from its last ``[``: ``[``, ``[s``, ``[s12``, or a complete token with the start of a ``(url)`` after it (the
#: whole of it is a citation too); hidden until it is complete.
_PARTIAL = re.compile(rf"\[(?:[st](?:[1-9][0-9]{{0,{MAX_CITATION_ID_DIGITS - 1}}}(?:\]\([^()\s]*)?)?)?")
_MARKED = re.compile(re.escape(MARK_OPEN) + r"([0-9]{1,9})" + re.escape(MARK_CLOSE))


def streaming_text(text: str) -> str:
    """A streaming answer as shown: without a citation token it is still writing (``[``, ``[s``, ``[s1``,
    ``[s1](https://ex``), and the spaces before it."""
    start = text.rfind("[")
    if start < 0 or _PARTIAL.fullmatch(text, start) is None:
        return text
    return text[:start].rstrip(" \t")


class Sources:
    """The markers and source rows of the bar's answers."""

    def __init__(self, dom: Dom, root: Any) -> None:
        self.dom = dom
        self._root = root  # the bar's shadow root (a marker moves the focus to its row)

    def page_url(self) -> str | None:
        """The page's URL: a source on its host opens in place."""
        import js

        try:
            return str(js.location.href)
        except Exception:  # noqa: BLE001 - no location (a test document): every source opens in a new tab
            return None

    def rows_of(self, m: dict[str, Any], streaming: bool) -> list[SourceRow]:
        """The rows of a message (none while it streams)."""
        return [] if streaming or not m.get("sources") else source_rows(m, self.page_url())

    def list_el(self, view: MessageView) -> Any:
        """The answer's (hidden) list of sources, created on first use after the answer's content."""
        if view.sources is None:
            ol = self.dom.el("ol", "sources", part="sources")
            ol.setAttribute("role", "list")  # kept a list where list-style: none drops it (WebKit)
            ol.setAttribute("aria-label", self.dom.labels["sources"])
            ol.id = self.dom.uid("sources")  # its rows' ids start with it: the same row keeps its id when rebuilt
            ol.hidden = True
            view.body.after(ol)
            view.sources = ol
        return view.sources

    def render(self, view: MessageView, rows: list[SourceRow]) -> None:
        """The rows under an answer, rebuilt only when they changed."""
        sig = tuple((r["id"], r["n"], r["kind"], r["title"], r["href"], r["new_tab"]) for r in rows)
        if sig == view.sources_sig:
            return
        view.sources_sig = sig
        view.source_ids = {}
        view.cites = None  # the markers are named after the rows: the body renders them again
        if not rows and view.sources is None:
            return
        ol = self.list_el(view)
        ol.textContent = ""
        lbl = self.dom.labels
        for r in rows:
            li = self.dom.el("li", f"source source-{r['kind']}", part=f"source source-{r['kind']}",
                             id=f"{ol.id}-{r['n']}")
            li.setAttribute("tabindex", "-1")  # a marker moves the focus here
            li.setAttribute("data-n", str(r["n"]))
            li.appendChild(self.dom.el("span", "source-n", text=f"{r['n']}. "))
            if r["href"] is not None:
                a = self.dom.el("a", "source-link", part="source-link", text=r["title"])
                a.setAttribute("href", r["href"])
                if r["new_tab"]:
                    a.setAttribute("target", "_blank")
                    a.setAttribute("rel", "noopener noreferrer")
                    a.appendChild(self.dom.el("span", "sr-only", text=" " + lbl["source_new_tab"]))
                li.appendChild(a)
            else:
                li.appendChild(self.dom.el("span", "source-title", part="source-title", text=r["title"]))
            if r["kind"] == "docs":
                li.appendChild(self.dom.el("span", "source-origin", part="source-origin",
                                           text=" · " + lbl["source_site"]))
            ol.appendChild(li)
            view.source_ids[r["n"]] = (str(li.id), r["title"])
        ol.hidden = not rows

    def mark(self, view: MessageView, root: Any) -> None:
        """Replace the marked numbers in ``root`` (sanitized answer HTML) with marker links to the rows."""
        js = self.dom.js
        walker = js.document.createTreeWalker(root, 4)  # NodeFilter.SHOW_TEXT
        found = []
        node = walker.nextNode()
        while not absent(node):
            if MARK_OPEN in str(node.nodeValue):
                found.append(node)
            node = walker.nextNode()
        for node in found:
            text = str(node.nodeValue)
            in_link = not absent(node.parentElement.closest("a")) if has(node, "parentElement") else False
            frag = js.document.createDocumentFragment()
            pos = 0
            for m in _MARKED.finditer(text):
                if m.start() > pos:
                    frag.append(text[pos:m.start()])
                frag.append(self._marker(view, int(m.group(1)), in_link))
                pos = m.end()
            if pos < len(text):
                frag.append(text[pos:])
            node.replaceWith(frag)

    def _marker(self, view: MessageView, n: int, in_link: bool) -> Any:
        row = view.source_ids.get(n)
        if row is None or in_link:
            return self.dom.el("span", "cite cite-text", part="cite", text=f"[{n}]")
        row_id, title = row
        a = self.dom.el("a", "cite", part="cite")
        a.setAttribute("href", "#" + row_id)
        a.setAttribute("data-action", CITE_ACTION)
        a.setAttribute("aria-label", bidi_safe(self.dom.t("source_marker", n=n, source=title)))
        a.appendChild(self.dom.el("span", "cite-bracket", text="["))
        a.appendChild(self.dom.js.document.createTextNode(str(n)))
        a.appendChild(self.dom.el("span", "cite-bracket", text="]"))
        return a

    def on_cite(self, event: Any, el: Any) -> None:
        """A marker was pressed: the focus goes to its row (the page's URL is not touched)."""
        event.preventDefault()
        href = str(el.getAttribute("href") or "")
        if not href.startswith("#"):
            return
        row = self._root.getElementById(href[1:])
        if not absent(row):
            row.focus()  # scrolls it into view

    # --- copies ----------------------------------------------------------------------------------------
    def markdown_copy(self, message: dict[str, Any]) -> str:
        """"Copy": the answer's Markdown, markers as ``[^n]`` and the sources as footnotes."""
        return markdown_with_footnotes(str(message.get("content") or ""), cited_sources(message))

    def text_copy(self, view: MessageView, message: dict[str, Any]) -> str:
        """"Copy as text": what the reader sees (markers read ``[n]``), then the sources as a plain list."""
        text = str(view.body.innerText).strip()
        return text_with_sources(text, source_rows(message, self.page_url()), self.dom.labels["sources"])

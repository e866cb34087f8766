"""Model output (Markdown) to HTML, safe by construction; the sink sanitizer (static/sanitize.mjs) runs after it.

What ``render_markdown`` guarantees, whatever the model wrote:

- raw HTML is text: the ``html_block`` preprocessor and the ``html`` inline pattern are deregistered, so
  ``<script>`` shows as ``&lt;script&gt;``;
- no ``<img>`` (nor any other auto-loading element): ``![alt](url)`` becomes a link to ``url`` showing ``alt``
  and the URL (or plain text when the URL is not allowed);
- links: only ``http:``, ``https:`` and ``mailto:`` survive (checked on the value the browser will see, after
  character references); anything else (``javascript:``, ``data:``, relative, ``//host``, URLs with spaces,
  control, bidi or zero-width characters) is rendered as its text. A kept link gets ``rel="noopener
  noreferrer"``, ``target="_blank"``, ``title`` = its URL, and shows the full URL as
  ``<span class="url">(URL)</span>`` inside the link when its text is not exactly the URL;
- bare ``http(s)://`` URLs in text become links;
- fenced code blocks (``<pre><code class="language-x">``) and tables (``align`` attribute, never ``style``);
- an allowlist of tags and attributes on the tree, and of the raw snippets python-markdown stashes (entities and
  fenced code only).

Citations (an answer's ``[s1]``/``[t2]`` tokens, docs/protocol.md §5): outside code, a token of that shape whose id
is in ``citations`` (id -> marker number) becomes ``MARK_OPEN + n + MARK_CLOSE`` in the text, which the bar turns
into a marker link after sanitizing (``widget.ui.sources``); any other such token is dropped with the spaces before
it, so an id the answer cites that the turn never produced is never shown, and a streaming answer (its sources not
known yet) shows no raw tokens. Code spans and blocks keep ``[s1]`` literally; ``\\[s1]`` stays text. The two mark
characters are private-use code points, dropped from the model's text first, so only a citation can make them.

Reference-style links (``[text][id]`` with ``[id]: url`` elsewhere) are off: a definition line shows as text,
its URL as a link. This keeps every block's rendering independent of the rest of the answer, which
``StreamingRenderer`` relies on.

Pure and sans-I/O; ``markdown`` is imported on first use. One cached ``Markdown`` instance is reset per call:
not thread-safe (the browser runs one thread; CPython callers serialise their calls).
"""

from __future__ import annotations

import bisect
import html as _html
import re
from collections.abc import Mapping
from typing import Any

from ..protocol import CITATION_PATTERN

__all__ = ["ALLOWED_TAGS", "CITATION", "MARK_CLOSE", "MARK_OPEN", "StreamingRenderer", "render_markdown", "safe_url"]

TAB_LENGTH = 4
ALLOWED_TAGS = frozenset(
    "p br strong em b i code pre blockquote ul ol li h1 h2 h3 h4 h5 h6 a table thead tbody tr th td hr del span".split()
)
#: The only attributes the tree keeps, per tag (``a`` is rebuilt from scratch).
_KEEP_ATTRS: dict[str, dict[str, re.Pattern[str]]] = {
    "ol": {"start": re.compile(r"[0-9]{1,9}")},
    "th": {"align": re.compile(r"left|right|center")},
    "td": {"align": re.compile(r"left|right|center")},
    "span": {"class": re.compile(r"url")},
}
_URL_OK = re.compile(
    # scheme allowlist; a host for http(s); no whitespace, C0/C1 controls, bidi or zero-width characters anywhere
    r"(?:https?://[^/?#\\\s]|mailto:\S)"
    r"[^\s\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]*",
    re.IGNORECASE,
)
_CHAR_REF = re.compile(r"&(?:#[0-9]+|#x[0-9a-f]+|[0-9a-z]+);", re.IGNORECASE)
_ENTITY_ONLY = re.compile(r"&(?:#[0-9]+|#x[0-9a-fA-F]+|[a-zA-Z0-9]+);")
_FENCED_HTML = re.compile(
    r'<pre(?: id="[^"<>]*")?(?: class="[^"<>]*")?><code(?: class="(?P<cls>[^"<>]*)")?(?: [^<>]*)?>'
    r"(?P<body>[^<>]*)</code></pre>"
)
_LANG_CLASS = re.compile(r"language-[\w#.+-]{1,40}")
_BARE_URL = r"(?<![\w@/])(https?://[^\s<>\"'`\x02\x03]+)"
_TRAILING = ".,:;!?'\"*_~"

#: A citation token of the answer's text: ``CITATION_PATTERN`` (``[s1]`` a docs section, ``[t2]`` a tool reply; the
#: relay's pattern), group 1 the id, with the link destination the model may have put right after it: ``[s1](url)``
#: is the citation ``[s1]``, as the relay reads it, and its ``(url)`` goes (the source row links to the source's URL).
CITATION = re.compile(CITATION_PATTERN + r"(?:\([^()\s]*\))?")
#: Around a known citation's marker number in the rendered text (private-use code points; see the module doc).
MARK_OPEN, MARK_CLOSE = "\ue000", "\ue001"
_CITATION_INLINE = r"[ \t]*" + CITATION.pattern

_md: Any = None  # the cached markdown.Markdown instance
#: The citations of the ``render_markdown`` call in progress (read by the citation pattern).
_citations: Mapping[str, int] | None = None
_placeholder_re: re.Pattern[str] | None = None


def safe_url(value: str) -> str | None:
    """The URL a browser would follow for this attribute value when it is http(s)/mailto and unambiguous, else None."""
    url = _decode_refs(value)
    return url if _URL_OK.fullmatch(url) else None


def _decode_refs(text: str) -> str:
    """Decode ``&name;``/``&#n;``/``&#xh;`` as an HTML parser does for our serialized output (others stay)."""
    if "&" not in text:
        return text
    return _CHAR_REF.sub(lambda m: _html.unescape(m.group(0)), text)


def _escape_amp(text: str) -> str:
    """Make python-markdown's serializer emit ``text`` literally (it keeps ``&...;`` sequences as they are)."""
    return text.replace("&", "&amp;")


def render_markdown(text: str, citations: Mapping[str, int] | None = None) -> str:
    """HTML for Markdown ``text`` (model output): raw HTML escaped, no images, only http(s)/mailto links; citation
    tokens marked when their id is in ``citations`` (id -> marker number), dropped otherwise."""
    global _citations
    md = _instance()
    md.reset()
    _citations = citations
    try:
        html: str = md.convert(_canonical(text))
    finally:
        _citations = None
    return html


def _instance() -> Any:
    """Build (once) the Markdown instance with our registry changes."""
    global _md
    if _md is None:
        _md = _build()
    return _md


def _build() -> Any:
    """A ``markdown.Markdown`` with raw HTML, references and images neutralised and our safety passes added."""
    import markdown
    from markdown import util
    from markdown.inlinepatterns import InlineProcessor
    from markdown.postprocessors import Postprocessor
    from markdown.treeprocessors import Treeprocessor

    global _placeholder_re
    _placeholder_re = re.compile(re.escape(util.HTML_PLACEHOLDER).replace("%s", "([0-9]+)"))

    class BareUrlProcessor(InlineProcessor):  # type: ignore[misc]  # python-markdown ships no types
        """``https://…`` in running text becomes a link (never inside another link)."""

        ANCESTOR_EXCLUDES = ("a",)

        def handleMatch(self, m: re.Match[str], data: str) -> tuple[Any, int, int]:  # noqa: N802
            """The link element for the URL, without trailing punctuation or an unbalanced ``)``/``]``."""
            url = m.group(1)
            while url:
                last = url[-1]
                if last in _TRAILING:
                    url = url[:-1]
                elif last == ")" and url.count("(") < url.count(")"):
                    url = url[:-1]
                elif last == "]" and url.count("[") < url.count("]"):
                    url = url[:-1]
                else:
                    break
            el = _etree().Element("a")
            el.set("href", url)
            el.text = util.AtomicString(url)
            return el, m.start(1), m.start(1) + len(url)

    class CitationProcessor(InlineProcessor):  # type: ignore[misc]
        """``[s1]`` outside code: a marked number when the id is cited, else nothing (spaces before it included)."""

        def handleMatch(self, m: re.Match[str], data: str) -> tuple[Any, int, int]:  # noqa: N802
            """The marked number or an empty text, in place of the token and the spaces before it."""
            n = _citations.get(m.group(1)) if _citations else None
            text = f"{MARK_OPEN}{n}{MARK_CLOSE}" if isinstance(n, int) and not isinstance(n, bool) else ""
            return util.AtomicString(text), m.start(0), m.end(0)

    class StashFilter(Postprocessor):  # type: ignore[misc]
        """Only entities and fenced code blocks of the expected shape come back from the raw-HTML stash."""

        def run(self, text: str) -> str:
            """Rewrite the stash in place; the text is unchanged."""
            blocks = self.md.htmlStash.rawHtmlBlocks
            for i, block in enumerate(blocks):
                s = str(block)
                if _ENTITY_ONLY.fullmatch(s):
                    continue
                m = _FENCED_HTML.fullmatch(s)
                if m:
                    cls = m.group("cls") or ""
                    attr = f' class="{cls}"' if _LANG_CLASS.fullmatch(cls) else ""
                    blocks[i] = f"<pre><code{attr}>{m.group('body')}</code></pre>"
                else:
                    blocks[i] = _html.escape(s, quote=False)
            return text

    class SafetyTree(Treeprocessor):  # type: ignore[misc]
        """Tag/attribute allowlist; images to links; links checked, marked and made to show their URL."""

        def run(self, root: Any) -> None:
            """Clean the whole tree (runs last, after the inline and unescape passes)."""
            for parent in list(root.iter()):
                for i, child in enumerate(parent):
                    if child.tag == "img":
                        _replace(parent, i, self._image_link(child))
            self._clean(root, in_link=False)

        def _plain(self, text: str) -> str:
            """What a reader sees for serialized tree text (stashed entities and character references resolved)."""
            stash = self.md.htmlStash.rawHtmlBlocks

            def sub(m: re.Match[str]) -> str:
                i = int(m.group(1))
                return str(stash[i]) if i < len(stash) else m.group(0)

            text = text.replace(util.AMP_SUBSTITUTE, "&")
            if _placeholder_re is not None:
                text = _placeholder_re.sub(sub, text)
            return _decode_refs(text)

        def _clean(self, parent: Any, in_link: bool) -> None:
            """Apply the rules to ``parent``'s children, recursively."""
            i = 0
            while i < len(parent):
                child = parent[i]
                tag = child.tag if isinstance(child.tag, str) else ""
                if tag == "a":
                    url = None if in_link else safe_url(
                        (child.get("href") or "").replace(util.AMP_SUBSTITUTE, "&")
                    )
                    if url is None:
                        _unwrap(parent, i)
                        continue
                    self._finish_link(child, url)
                    self._clean(child, in_link=True)
                    i += 1
                    continue
                if tag not in ALLOWED_TAGS:
                    _unwrap(parent, i)
                    continue
                keep = _KEEP_ATTRS.get(tag, {})
                for name, value in list(child.items()):
                    rule = keep.get(name)
                    if rule is None or value is None or not rule.fullmatch(value):
                        del child.attrib[name]
                self._clean(child, in_link)
                i += 1

        def _image_link(self, img: Any) -> Any:
            """An ``a`` standing for the image: its alt text, linking to its source."""
            a = _etree().Element("a")
            a.set("href", img.get("src") or "")
            a.text = img.get("alt") or ""
            a.tail = img.tail
            return a

        def _finish_link(self, a: Any, url: str) -> None:
            """Rebuild the link's attributes and show its full URL when the text differs."""
            shown = self._plain("".join(a.itertext())).strip()
            a.attrib.clear()
            a.set("href", _escape_amp(url))
            a.set("title", _escape_amp(url))
            a.set("rel", "noopener noreferrer")
            a.set("target", "_blank")
            if not shown:
                for sub in list(a):
                    a.remove(sub)
                a.text = _escape_amp(url)
                return
            if shown == url or (url[:7].lower() == "mailto:" and shown == url[7:]):
                return
            span = _etree().SubElement(a, "span")
            span.set("class", "url")
            span.text = "(" + _escape_amp(url) + ")"
            if len(a) > 1:
                prev = a[-2]
                prev.tail = (prev.tail or "") + " "
            else:
                a.text = (a.text or "") + " "

    from markdown.extensions.fenced_code import FencedCodeExtension
    from markdown.extensions.tables import TableExtension

    # Instances, not names: a name is looked up among the installed packages' entry points, which imports
    # importlib.metadata and the email package (~55 KB more for the browser to download at boot).
    md = markdown.Markdown(
        extensions=[FencedCodeExtension(), TableExtension(use_align_attribute=True)],
        output_format="html",
        tab_length=TAB_LENGTH,
    )
    md.preprocessors.deregister("html_block")
    md.inlinePatterns.deregister("html")
    for name in ("reference", "short_reference", "image_reference", "short_image_ref"):
        md.inlinePatterns.deregister(name)
    md.parser.blockprocessors.deregister("reference")
    md.inlinePatterns.register(BareUrlProcessor(_BARE_URL, md), "bare_url", 115)
    # After code spans (190) and backslash escapes (180), before links (160): a citation in a link's text is marked,
    # a bare URL never swallows one.
    md.inlinePatterns.register(CitationProcessor(_CITATION_INLINE, md), "citation", 170)
    md.treeprocessors.register(SafetyTree(md), "safety", -10)
    md.postprocessors.register(StashFilter(md), "stash_filter", 35)
    return md


def _etree() -> Any:
    """The ElementTree module python-markdown builds its tree with."""
    import xml.etree.ElementTree as etree  # noqa: N813 - the name python-markdown gives it

    return etree


def _add_text(parent: Any, index: int, text: str | None) -> None:
    """Append ``text`` where it lands before child ``index`` of ``parent`` (previous tail or parent text)."""
    if not text:
        return
    if index > 0:
        prev = parent[index - 1]
        prev.tail = (prev.tail or "") + text
    else:
        parent.text = (parent.text or "") + text


def _unwrap(parent: Any, index: int) -> None:
    """Replace child ``index`` by its content (text and children), keeping its tail."""
    child = parent[index]
    parent.remove(child)
    _add_text(parent, index, child.text)
    kids = list(child)
    for k, sub in enumerate(kids):
        parent.insert(index + k, sub)
    _add_text(parent, index + len(kids), child.tail)


def _replace(parent: Any, index: int, new: Any) -> None:
    """Put ``new`` (which carries the tail it wants) in place of child ``index``."""
    parent.remove(parent[index])
    parent.insert(index, new)


# --------------------------------------------------------------------------------------------------------------
# Streaming

_FENCE_START = re.compile(r"(?:`{3,}|~{3,})")
#: A complete line that can never open a fenced block (python-markdown's opening pattern, hl_lines aside).
_FENCE_OPEN = re.compile(r"(?:~{3,}|`{3,})[ ]*(?:\{[^\n]*\}|(?:\.?[\w#.+-]*[ ]*)?)\n")
#: First lines that may continue the block before a blank line (list items, quotes).
_CONTINUES = re.compile(r"(?:[*+-]|[0-9]+\.)(?:[ \t]|$)|>")
#: First characters of an unfinished line that may still turn it into a list item, quote, fence or code.
_UNDECIDED = frozenset(" \t*+->0123456789`~")
_BLANK = re.compile(r"[ \t]*")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")


def _canonical(text: str) -> str:
    """Newlines and the characters python-markdown drops, normalised as it does (prefix-stable)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "\x02" in text or "\x03" in text:
        text = text.replace("\x02", "").replace("\x03", "")
    if MARK_OPEN in text or MARK_CLOSE in text:  # only a citation makes them
        text = text.replace(MARK_OPEN, "").replace(MARK_CLOSE, "")
    return text


class StreamingRenderer:
    """Incremental ``render_markdown`` for a growing answer: only the blocks after the last safe break re-render.

    Usage::

        r = StreamingRenderer()
        for text_so_far in chunks:            # the whole answer so far, each time
            stable, tail = r.feed(text_so_far)
            # stable: HTML of the finished blocks (only grows; r.appended is what this call added to it)
            # tail:   HTML of the blocks still being written (replace the previous tail with it)
        assert r.html == render_markdown(text_so_far)   # == stable + tail

    The text is cut at a blank line (outside fenced code) only where python-markdown renders the two sides
    independently: the next line is unindented and not a list item, quote or fence (decided on its first
    character, or once complete when that character could still start one), the last non-blank line
    before is unindented, and every fence opened before is closed. Everything before the cut is rendered once
    and kept; per call only the text after the last cut is rendered, so a long answer made of blocks costs
    linear time. One block that never ends (a long tight list, a long code fence) is re-rendered on each call.
    A text that does not extend the previous one (a regenerated answer) starts over.
    """

    def __init__(self, citations: Mapping[str, int] | None = None) -> None:
        """An empty renderer; ``citations`` as for ``render_markdown`` (None while an answer streams)."""
        self.citations = citations
        self.reset()

    def reset(self) -> None:
        """Forget everything rendered."""
        self._stable_text = ""
        self._parts: list[str] = []
        self._stable_html = ""
        self.appended = ""
        self.tail = ""

    @property
    def stable(self) -> str:
        """HTML of the finished blocks, ending with a newline when not empty."""
        return self._stable_html

    @property
    def html(self) -> str:
        """The whole rendering so far (equals ``render_markdown`` of the last text fed)."""
        if not self.tail:
            return self._stable_html.rstrip("\n")
        return self._stable_html + self.tail

    def feed(self, text: str) -> tuple[str, str]:
        """Render the whole answer so far; returns ``(stable_html, tail_html)``."""
        text = _canonical(text)
        if not text.startswith(self._stable_text):
            self.reset()
        start = len(self._stable_text)
        cut = _last_cut(text, start)
        self.appended = ""
        if cut > start:
            chunk_html = render_markdown(text[start:cut], self.citations)
            if chunk_html:
                self._parts.append(chunk_html)
                self._stable_html += chunk_html + "\n"
                self.appended = chunk_html
            self._stable_text = text[:cut]
        self.tail = render_markdown(text[len(self._stable_text):], self.citations)
        return self._stable_html, self.tail


def _last_cut(text: str, start: int) -> int:
    """The offset of the last safe block break at or after ``start`` (``start`` when there is none)."""
    region = text[start:]
    if "\n\n" not in region and not _BLANK_LINE.search(region):
        return start
    lines = region.split("\n")  # lines[-1] is the unfinished last line
    complete = len(lines) - 1
    norm = ["" if _BLANK.fullmatch(ln) else ln.expandtabs(TAB_LENGTH) for ln in lines]
    if start == 0 and lines[0]:
        norm[0] = lines[0].expandtabs(TAB_LENGTH)  # python-markdown keeps a whitespace-only first line
    limit, inside = _fences(norm, complete)
    prev_nonblank: str | None = None
    blank_before = False
    offset = cut = 0
    for i in range(min(complete, limit) + 1):
        line = lines[i]
        if not norm[i]:
            blank_before = blank_before or i > 0
        else:
            if (
                blank_before
                and (i < complete or line[0] not in _UNDECIDED)
                and line[0] not in " \t"
                and not _CONTINUES.match(line)
                and (prev_nonblank is None or prev_nonblank[0] not in " \t")
                and not inside[i]
            ):
                cut = offset
            prev_nonblank = line
            blank_before = False
        offset += len(line) + 1
    return start + cut


def _fences(norm: list[str], complete: int) -> tuple[int, bytearray]:
    """The last line a cut may start at (an unclosed fence opens there) and the lines inside closed fences."""
    inside = bytearray(len(norm))
    joined = "\n".join(norm)
    if "```" not in joined and "~~~" not in joined:
        return complete, inside
    from markdown.extensions.fenced_code import FencedBlockPreprocessor, get_attrs_and_remainder

    starts = []
    pos = 0
    for ln in norm:
        starts.append(pos)
        pos += len(ln) + 1
    complete_end = starts[complete] - 1  # the newline that ends the last complete line
    covered = bytearray(len(norm))
    fence_re = FencedBlockPreprocessor.FENCED_BLOCK_RE
    index = 0
    while True:  # mirrors FencedBlockPreprocessor.run, without replacing anything
        m = fence_re.search(joined, index)
        if not m:
            break
        if m.group("attrs"):
            _attrs, remainder = get_attrs_and_remainder(m.group("attrs"))
            if remainder:
                index = m.end("attrs")
                continue
        if m.end() > complete_end:
            break  # closed on the unfinished last line: not final yet
        first, last = bisect.bisect_right(starts, m.start()) - 1, bisect.bisect_right(starts, m.end()) - 1
        for k in range(first, last + 1):
            covered[k] = 1
            if k > first:
                inside[k] = 1
        index = m.end()
    for k in range(complete):
        ln = norm[k]
        if covered[k] or not _FENCE_START.match(ln):
            continue
        if "hl_lines" in ln or _FENCE_OPEN.fullmatch(ln + "\n"):
            return k, inside  # a fence opened here may still close later: no cut after it
    return complete, inside

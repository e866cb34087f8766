"""Built HTML → a page's sections (lxml).

The main content is the first of these that has text: the app's selector (``--selector``, CSS), ``[role=main]``
(Sphinx's ``div.body``, Furo's and Read the Docs' article), an ``article`` inside ``main`` (MkDocs Material,
Docusaurus' docs and blog posts), VitePress' home and page layouts (``.VPHome``, ``.VPPage``: no ``main``, and
the home's feature cards are ``article`` elements), the first ``article``, ``main`` (VitePress' docs, Docusaurus'
category index and Markdown pages). A page with none of them is indexed from its ``body`` less its ``header``,
``nav``, ``footer`` and ``aside`` (a hand-written page), and skipped when nothing is left. Inside the main
content, navigation, search boxes, scripts, forms and buttons, hidden elements, the generators' heading permalinks
("¶", ``#``, VitePress' and Docusaurus' zero-width space) and their "edit this page", "last update", breadcrumbs,
previous/next parts, Docusaurus' cards linking to other pages and VitePress' code language label are dropped
(a ``hidden`` tab panel is kept: Docusaurus renders every tab but the first so, and each is the page's text).
A page marked ``noindex`` or that only redirects is skipped, and so is a Docusaurus page that lists other pages
(blog list, tag and author pages, told by the ``<html>`` classes it gives them), and a Sphinx page titled
``<no title>`` (a file only meant to be included in others, which Sphinx builds as a page too). These landmarks
and parts were checked on real builds: MkDocs Material, Sphinx (Alabaster, Furo, Read the Docs), VitePress 1.6
and Docusaurus 3.10 (``bench/docs_generators.py``, ``tests/test_docs_builds.py``, ``tests/test_docs_generators.py``).
A template fragment is not a page (``NotAPage``): a file with no ``<!doctype>``, ``<html>``, ``<head>`` or
``<body>`` that has template tags (``{% … %}``, ``{{ … }}``: Jinja, Liquid, Nunjucks, Go templates) in its text
or attributes outside ``<pre>`` and ``<code>`` — a theme override such as MkDocs' ``overrides/partials/nav.html``
kept beside the Markdown sources. A built page documenting templates shows its tags inside code, and has a
``<body>``.

A heading's anchor is its own ``id``; else the id of an element inside it (``<a id>``/``<a name>``), or of an
empty ``<a id>`` right before it; else the id of the nearest enclosing element that it opens (Sphinx puts ids on
``<section>``). Text is decoded by its byte-order mark, then the ``<meta charset>``, then UTF-8, then Windows-1252.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import lxml.etree as etree
import lxml.html
from cssselect import SelectorError
from lxml.cssselect import CSSSelector

from .page import Page, PageSkipped, SectionBuilder, one_line

HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}

_BLOCK = frozenset(
    "address article aside blockquote body dd details dialog div dl dt fieldset figcaption figure footer form h1 h2 "
    "h3 h4 h5 h6 header hr li main nav ol p pre section summary table tbody thead tfoot tr ul br caption".split()
)
#: Inline elements that end with a space: table cells, and labels (VitePress' code group tabs, "Nginx Caddy").
_SPACED = frozenset({"td", "th", "label"})


def _has_class(*names: str) -> str:
    return " or ".join(f"contains(concat(' ', normalize-space(@class), ' '), ' {n} ')" for n in names)


#: Never part of a page's text, wherever they are.
_ALWAYS_DROP = etree.XPath(
    "//script | //style | //noscript | //template | //svg | //iframe | //object | //canvas | //button | //form "
    "| //input | //select | //textarea | //search | //nav | //*[@aria-hidden='true'] "
    # hidden, except a tab panel not shown first (Docusaurus' <Tabs>: every tab's content is the page's)
    "| //*[@hidden and not(@role='tabpanel')] "
    "| //*[@role='navigation' or @role='search'] | //a[@rel='edit'] "
    "| //*[" + _has_class(
        # permalinks next to headings: Sphinx, Python-Markdown's toc, VitePress, Docusaurus, anchor.js
        "headerlink", "header-anchor", "hash-link", "anchorjs-link", "anchor-link",
        # MkDocs Material: edit/view buttons, "last update", copy buttons, back to top
        "md-content__button", "md-source-file", "md-clipboard", "md-top", "md-feedback",
        # Sphinx themes: sidebars, top/bottom link bars, Furo's edit/view icons, Read the Docs' footer buttons
        "sphinxsidebar", "related", "edit-this-page", "view-this-page", "content-icon-container", "toc-drawer",
        "back-to-top", "related-pages", "rst-footer-buttons", "wy-breadcrumbs", "breadcrumbs", "toctree-wrapper",
        # Docusaurus and VitePress: breadcrumbs, edit links, previous/next, tables of contents, Docusaurus'
        # cards linking to other pages (a category's index, <DocCardList/>)
        "theme-doc-breadcrumbs", "theme-edit-this-page", "theme-doc-footer", "theme-doc-toc-mobile",
        "pagination-nav", "edit-link", "VPDocFooter", "prev-next", "table-of-contents", "toc",
        "theme-doc-card-container",
    ) + "]"
    # VitePress' code block language label ("bash" above the code)
    "| //div[starts-with(@class, 'language-')]/span[@class='lang']"
)
#: Dropped inside the main content too (an article's footer is its edit link, dates and tags).
_MAIN_DROP = etree.XPath("//footer")
#: Dropped only when a page has no landmark and is read from its body.
_BODY_DROP = etree.XPath("//header | //footer | //aside | //*[@role='banner' or @role='contentinfo']")
_LANDMARKS = [
    etree.XPath("(//*[@role='main'])[1]"),
    etree.XPath("(//main//article)[1]"),
    # VitePress' home and page layouts have no <main> (the home's feature cards are <article>s)
    etree.XPath("(//*[" + _has_class("VPHome", "VPPage") + "])[1]"),
    etree.XPath("(//article)[1]"),
    etree.XPath("(//main)[1]"),
]
#: Docusaurus' pages that list other pages (blog lists, tags, authors): each listed page is indexed itself.
_LIST_PAGE = etree.XPath("/html[" + _has_class(
    "blog-list-page", "blog-tags-list-page", "blog-tags-post-list-page", "blog-authors-list-page",
    "blog-authors-posts-page", "docs-tags-list-page", "docs-tags-doc-list-page") + "]")
_BODY = etree.XPath("(//body)[1]")
_TITLE = etree.XPath("string((//title)[1])")
_NOINDEX = etree.XPath("//meta[translate(@name, 'ROBTS', 'robts')='robots']/@content")
_REFRESH = etree.XPath("//meta[translate(@http-equiv, 'REFSH', 'refsh')='refresh']")

_META_CHARSET = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]{1,40})""", re.I)
_XML_DECL = re.compile(r"^\s*<\?xml[^>]*\?>")
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
_PARSER = lxml.html.HTMLParser(encoding="utf-8", remove_comments=True, remove_pis=True)
#: What a whole document has (a parser adds the elements to a fragment, so they are looked for in the text).
_DOCUMENT = re.compile(r"<(?:!doctype|html|head|body)[\s>/]", re.I)
#: A template's statement (``{% if x %}``, ``{%- endfor %}``) or expression (``{{ config.site_name }}``).
_TEMPLATE_TAG = re.compile(r"\{%[-+]?\s*[A-Za-z_][^{}]{0,1000}?%\}|\{\{[^{}]{1,1000}\}\}")
#: Where template tags are a page's text, not its template: a page documenting Jinja shows them in code.
_LITERAL = frozenset({"pre", "code"})
#: Folders the generators keep theme templates in, for the warning's hint (not a rule: the content decides).
TEMPLATE_FOLDERS = {"overrides": "MkDocs' theme overrides", "_templates": "Sphinx's templates",
                    "_includes": "Jekyll's includes", "_layouts": "Jekyll's layouts", "layouts": "Hugo's layouts",
                    "partials": "theme partials"}

Selector = Callable[[Any], list[Any]]


class NotAPage(PageSkipped):
    """A file that is no page at all (a template fragment): skipped, and a copy an earlier run indexed leaves."""


def compile_selector(css: str) -> Selector:
    """The app's main-content selector, compiled once (``ValueError`` with the reason when it is not valid CSS)."""
    try:
        return CSSSelector(css)
    except (SelectorError, etree.XPathError) as exc:
        raise ValueError(f"--selector {css!r} is not a CSS selector lxml understands: {exc}") from None


def decode_html(data: bytes) -> str:
    """The page's text: by byte-order mark, else ``<meta charset>``, else UTF-8, else Windows-1252 (never fails)."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            return data[len(bom):].decode(name, errors="replace")
    m = _META_CHARSET.search(data[:4096])
    if m:
        try:
            name = codecs.lookup(m.group(1).decode("ascii")).name
        except LookupError:
            name = ""
        if name and not name.startswith("utf-16"):  # a page that says UTF-16 in ASCII bytes is not UTF-16
            if name != "utf-8":
                return data.decode(name, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def parse_html(data: bytes) -> Any:
    """The document tree of a page's bytes (``PageSkipped`` when there is no document at all)."""
    return _parse_text(decode_html(data))


def _parse_text(decoded: str) -> Any:
    text = _XML_DECL.sub("", decoded.replace("\x00", ""))
    if not text.strip():
        raise PageSkipped("empty file")
    try:
        return lxml.html.document_fromstring(text.encode("utf-8"), parser=_PARSER)
    except (etree.ParserError, ValueError) as exc:
        raise PageSkipped(f"not HTML lxml can read ({exc})") from None


def template_fragment(text: str, doc: Any) -> bool:
    """Whether a file is a template's fragment, not a page (see the module's docstring); ``doc`` is its tree."""
    if _DOCUMENT.search(text):
        return False
    walker = etree.iterwalk(doc, events=("start",))
    for _, el in walker:
        if not isinstance(el.tag, str):
            continue
        if el.tag in _LITERAL:
            if el.tail and _TEMPLATE_TAG.search(el.tail):
                return True
            walker.skip_subtree()
            continue
        for part in (el.text, el.tail, *el.attrib.values()):
            if part and _TEMPLATE_TAG.search(part):
                return True
    return False


def _template_hint(url: str) -> str:
    """Where a template fragment probably comes from, from its folders (empty when none is a known one)."""
    for folder in urlsplit(url).path.split("/")[:-1]:
        if folder in TEMPLATE_FOLDERS:
            return (f" ({folder}/ is where {TEMPLATE_FOLDERS[folder]} live: --exclude {folder} leaves the folder "
                    "out)")
    return ""


def _drop(elements: list[Any]) -> None:
    for el in elements:
        if el.getparent() is not None:
            el.drop_tree()  # keeps the element's tail text


def _main(doc: Any, selector: Selector | None) -> Any:
    if selector is not None:
        found = selector(doc)
        if found:
            return found[0]
    for landmark in _LANDMARKS:
        found = landmark(doc)
        if found and any(t.strip() for t in found[0].itertext()):  # an emptied one (cards dropped) is not it
            return found[0]
    body = _BODY(doc)
    if not body:
        raise PageSkipped("no body")
    _drop(_BODY_DROP(body[0]))
    return body[0]


def _ids(el: Any) -> str | None:
    return el.get("id") or (el.get("name") if el.tag == "a" else None) or None


def _anchor(heading: Any, main: Any) -> str | None:
    """The id a link to this heading uses (see the module's docstring), or None."""
    own = heading.get("id")
    if own:
        return str(own)
    for inner in heading.iterdescendants():
        found = _ids(inner)
        if found:
            return found
    before = heading.getprevious()
    if before is not None and before.tag == "a" and not (before.text or "").strip() and _ids(before):
        return _ids(before)
    # An enclosing element this heading opens: its first heading is this one.
    child, parent = heading, heading.getparent()
    while parent is not None and child is not main:
        first = next((e for e in parent.iter(*HEADINGS) if e is not None), None)
        if first is not heading:
            return None
        if parent.get("id"):
            return str(parent.get("id"))
        child, parent = parent, parent.getparent()
    return None


def extract_html(data: bytes, url: str, *, selector: Selector | None = None) -> Page:
    """A built page's sections (``PageSkipped`` with the reason when the page has nothing to index)."""
    text = decode_html(data)
    doc = _parse_text(text)
    if template_fragment(text, doc):
        raise NotAPage("a template fragment ({% … %} or {{ … }} outside code, and no <html>, <head> or <body>), "
                       "not a page" + _template_hint(url))
    robots = " ".join(_NOINDEX(doc)).lower()
    if "noindex" in robots:
        raise PageSkipped("marked noindex")
    if _LIST_PAGE(doc):
        raise PageSkipped("a Docusaurus page listing other pages (blog list, tag or author page)")
    head_title = one_line(str(_TITLE(doc)))
    if head_title.startswith("<no title>"):
        # Sphinx's title for a source with no heading: a file meant to be included in others (its text is there
        # too), which the build also wrote as a page of its own.
        raise PageSkipped("a Sphinx page without a title (<no title>: a fragment other pages include)")
    if _REFRESH(doc) and not one_line(" ".join(_BODY(doc)[0].itertext()) if _BODY(doc) else ""):
        raise PageSkipped("a redirect")
    _drop(_ALWAYS_DROP(doc))
    main = _main(doc, selector)
    _drop(_MAIN_DROP(main))

    out = SectionBuilder(url)
    title = ""
    pre = 0
    walker = etree.iterwalk(main, events=("start", "end"))
    for event, el in walker:
        tag = el.tag if isinstance(el.tag, str) else ""
        if event == "start":
            if tag in HEADINGS:
                text = one_line("".join(el.itertext()))
                if tag == "h1" and not title:
                    title = text
                out.heading(HEADINGS[tag], text, _anchor(el, main))
                walker.skip_subtree()
                continue
            if tag == "pre":
                pre += 1
            if tag in _BLOCK:
                out.text("\n")
            if el.text:
                out.text(el.text, verbatim=True) if pre else out.text(_squash(el.text))
        else:
            if tag == "pre":
                pre -= 1
            if tag in _BLOCK:
                out.text("\n")
            elif tag in _SPACED:
                out.text(" ")
            if el.tail and el is not main:
                out.text(el.tail, verbatim=True) if pre else out.text(_squash(el.tail))
    return out.page(title or head_title or url)


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text)

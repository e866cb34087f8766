"""The demo's small docs site (``--demo-docs DIR``): a folder of Markdown indexed for the ``demo`` app at start and
served as pages at ``/docs/<name>.html``, so an answer's source opens the right section.

- At start the folder's Markdown (``DIR/*.md``, not its subfolders) is indexed for the ``demo`` app as Markdown
  sources under the relay's own ``/docs/`` with ``.html`` URLs (incremental: a restart re-reads only changed pages).
  The URLs are absolute (``public_url``, else ``http://<host>:<port>``): a source's link must say its host, since a
  client links only http(s) URLs (a site's docs usually live on another host than the page with the widget).
- ``GET /docs/<name>.html`` renders ``DIR/<name>.md`` with markdown-it-py; each heading's ``id`` is the anchor
  the index gave its section (the same rule, ``widget.relay.docs.markdown_source``), so ``/docs/theming.html#colours``
  lands on the heading. Links to ``x.md`` become ``x.html``. Raw HTML in a source is shown as text. The page
  loads the widget (``data-app="demo"``), so the reader goes on asking from the docs.
- ``GET /docs/`` lists the pages. Anything else under ``/docs/`` is 404; a name is letters, digits, ``-`` and
  ``_`` only (no paths).
"""

from __future__ import annotations

import asyncio
import html
import logging
import re
from pathlib import Path
from typing import Any, cast

from markdown.extensions.toc import slugify, unique
from markdown_it import MarkdownIt
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from ..docs import DocsIndex
from ..docs.indexer import DocsWriter, run_index
from ..docs.limits import MAX_PAGES
from ..docs.markdown_source import ATTR_ID, inline_text, split_front_matter
from ..docs.page import one_line
from ..docs.walk import Source, collect

log = logging.getLogger("widget.relay.http.docs_site")

#: The app whose docs the site is.
DEMO_APP = "demo"
#: Where the pages are served on the relay.
BASE = "/docs/"
_NAME = re.compile(r"[A-Za-z0-9_-]{1,100}")
_LOCAL_MD = re.compile(r"^(?![a-z][a-z0-9+.-]*:|/)([^#?]*?)\.md((?:#[^?]*)?)$", re.IGNORECASE)

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · Autopilot docs</title>
<style>
body {{ font: 16px/1.55 system-ui, sans-serif; margin: 0; color: #1c2030; background: #fbfbfd; }}
nav {{ padding: .6rem 1.2rem; border-bottom: 1px solid #dde; background: #fff; }}
nav a {{ margin-right: 1rem; }}
main {{ max-width: 52rem; margin: 0 auto; padding: 1rem 1.2rem 6rem; }}
pre {{ background: #f1f2f6; padding: .8rem; overflow-x: auto; }}
code {{ font-size: .92em; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #dde; padding: .3rem .5rem; vertical-align: top; }}
:target {{ background: #fff6cc; }}
</style></head>
<body><nav><a href="/">Demo</a><a href="/docs/">Docs</a></nav>
<main>
{body}
</main>
<script src="/widget/autopilot.js" data-app="demo" defer></script>
</body></html>
"""


def render(markdown_text: str) -> tuple[str, str]:
    """``(title, body HTML)`` of a Markdown page: headings carry the index's anchors, ``x.md`` links point to
    ``x.html``, raw HTML is escaped."""
    body, fm_title = split_front_matter(markdown_text)
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(body)
    ids: set[str] = set()
    title = ""
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and i + 1 < len(tokens):
            inline = tokens[i + 1]
            raw = inline_text(inline)
            m = ATTR_ID.search(raw)
            if m:
                anchor = m.group(1)
                ids.add(anchor)
                raw = raw[: m.start()]
            else:
                anchor = unique(slugify(html.unescape(one_line(raw)), "-"), ids)
            tok.attrSet("id", anchor)
            if tok.tag == "h1" and not title:
                title = one_line(raw)
        if tok.type == "inline":
            for child in tok.children or []:
                href = child.attrGet("href") if child.type == "link_open" else None
                if isinstance(href, str):
                    local = _LOCAL_MD.match(href)
                    if local:
                        child.attrSet("href", f"{local.group(1)}.html{local.group(2)}")
    return title or fm_title or "Documentation", cast(str, md.renderer.render(tokens, md.options, {}))


def site_base(config: Any) -> str:
    """The absolute URL the site's pages are indexed under: the relay's ``public_url`` (or ``http://host:port``,
    ``127.0.0.1`` for a wildcard host) and ``/docs/``."""
    if config.public_url:
        return str(config.public_url).rstrip("/") + BASE
    host = config.host if config.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{config.port}{BASE}"


class DemoDocs:
    """The docs site of one folder (see the module's docstring)."""

    def __init__(self, folder: Path, base_url: str = BASE) -> None:
        self.folder = Path(folder).expanduser().absolute()
        self.base_url = base_url
        self._cache: dict[str, tuple[float, int, str]] = {}

    def pages(self) -> list[Path]:
        """The folder's Markdown pages, by name."""
        return sorted(p for p in self.folder.glob("*.md") if p.is_file() and _NAME.fullmatch(p.stem))

    async def index(self, docs: DocsIndex | None) -> dict[str, Any] | None:
        """Index the folder's pages for the demo app (its whole index); the run's summary, or None when the relay
        has no docs index that can be written."""
        if docs is None or not hasattr(docs, "begin_index"):
            log.warning("--demo-docs: the relay's docs index cannot be written; the demo answers without docs")
            return None
        top = {p.name for p in self.pages()}
        # The relay renders these pages itself with these anchors: a VitePress or Docusaurus folder is fine here.
        files, warnings = collect([Source(self.folder, self.base_url, "html")], max_pages=MAX_PAGES,
                                  markdown_anyway=True)
        files = [f for f in files if f.rel in top]
        for line in warnings:
            log.warning("--demo-docs: %s", line)
        summary = await run_index(cast(DocsWriter, docs), DEMO_APP, files,
                                  settings={"sources": [{"path": str(self.folder), "base_url": self.base_url,
                                                         "url_style": "html"}]},
                                  warn=lambda line: log.warning("--demo-docs: %s", line))
        log.info("--demo-docs: indexed %s for the demo app: %s", self.folder, dict(summary))
        return dict(summary)

    async def page(self, request: Request) -> Response:
        """``GET /docs/<name>.html``: the page, rendered."""
        name = str(request.path_params.get("name", ""))
        path = self.folder / f"{name}.md"
        if not _NAME.fullmatch(name) or not path.is_file():
            return PlainTextResponse("Not found", status_code=404)
        stat = path.stat()
        hit = self._cache.get(name)
        if hit is None or hit[:2] != (stat.st_mtime, stat.st_size):
            text = await asyncio.to_thread(path.read_text, "utf-8", "replace")
            title, body = render(text)
            hit = (stat.st_mtime, stat.st_size, _PAGE.format(title=html.escape(title), body=body))
            self._cache[name] = hit
        return HTMLResponse(hit[2], headers={"Cache-Control": "no-cache"})

    async def listing(self, _request: Request) -> Response:
        """``GET /docs/``: the pages."""
        items = "\n".join(f'<li><a href="{p.stem}.html">{html.escape(p.stem)}</a></li>' for p in self.pages())
        return HTMLResponse(_PAGE.format(title="Documentation", body=f"<h1>Documentation</h1>\n<ul>\n{items}\n</ul>"),
                            headers={"Cache-Control": "no-cache"})

    def routes(self) -> list[Route]:
        """The site's routes (before the demo page's catch-all)."""
        return [Route("/docs/", self.listing, methods=["GET", "HEAD"]),
                Route("/docs/{name}.html", self.page, methods=["GET", "HEAD"])]

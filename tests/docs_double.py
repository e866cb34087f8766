"""A small in-memory docs index for relay tests where the index itself is not what is tested: a real class that
implements ``widget.relay.docs.DocsIndex`` over a fixed list of sections per app (word-overlap ranking)."""

from __future__ import annotations

import re
from typing import Any

from widget.relay.docs import DocHit
from widget.relay.docs.query import url_path

_WORD = re.compile(r"\w+")
#: Words too common to count for a match.
_STOP = frozenset("a an and are can do does for from how i in is it me my of on or the this to what when where which "
                  "who why with you your".split())


def _terms(text: str) -> set[str]:
    return {w for w in (m.group(0).casefold() for m in _WORD.finditer(text)) if w not in _STOP}


class MemoryDocs:
    """Sections per app: ``{app_id: [{"page_title", "headings", "url", "text"}, ...]}``; ``queries`` records every
    search (app, query)."""

    def __init__(self, sections: dict[str, list[dict[str, Any]]]) -> None:
        self.sections = sections
        self.queries: list[tuple[str, str]] = []
        self.fail = False
        self.closed = False

    async def search(self, app_id: str, query: str, *, limit: int = 5, scope: str | None = None) -> list[DocHit]:
        """The sections sharing the most words with the query (title and headings counted twice), best first; of
        pages whose URL path starts with ``scope``, when given."""
        self.queries.append((app_id, query))
        if self.fail:
            raise RuntimeError("the index is down")
        q = _terms(query)
        scored = []
        for i, s in enumerate(self.sections.get(app_id, [])):
            if scope and not url_path(s["url"]).startswith(scope):
                continue
            head = _terms(" ".join([s["page_title"], *s["headings"]]))
            score = 2 * len(q & head) + len(q & _terms(s["text"]))
            if score:
                scored.append((-score, i, s))
        scored.sort(key=lambda x: (x[0], x[1]))
        return [DocHit(key=s["url"], page_title=s["page_title"], headings=list(s["headings"]), url=s["url"],
                       text=s["text"], score=float(-neg)) for neg, _, s in scored[:limit]]

    async def has_index(self, app_id: str) -> bool:
        """Whether the app has sections."""
        return bool(self.sections.get(app_id))

    async def close(self) -> None:
        self.closed = True


def section(page: str, headings: list[str], url: str, text: str) -> dict[str, Any]:
    return {"page_title": page, "headings": headings, "url": url, "text": text}


#: A few sections of a docs site about theming and plans.
SITE = [
    section("Theming", ["Theming"], "/docs/theming.html#theming",
            "The bar follows the page's fonts. Everything else is themable with CSS custom properties."),
    section("Theming", ["Theming", "Colours"], "/docs/theming.html#colours",
            "The bar's colours come from CSS custom properties on the host element. Set --ap-accent for buttons and "
            "links, and --ap-surface for the panel's background."),
    section("Plans", ["Plans", "Limits"], "/docs/plans.html#limits",
            "The free plan has 100 requests per day. The pro plan has 10,000 requests per day and 5 seats."),
]

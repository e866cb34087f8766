"""What a docs search gives the turn loop: ``DocHit`` (one section found) and ``DocsIndex`` (the engines' contract)."""

from __future__ import annotations

from typing import NotRequired, Protocol, TypedDict


class DocHit(TypedDict):
    """One section a search found, best first."""

    #: Stable key of the section within its app: its URL with the anchor (``/guide/theming/#colours``).
    key: str
    #: The page's title ("Theming").
    page_title: str
    #: Headings from the page's top heading down to this section's ("Theming", "Colours").
    headings: list[str]
    #: The URL a reader opens: the page's URL with the section's own anchor (the ``id`` the built page has).
    url: str
    #: The section's text (plain text, no markup).
    text: str
    #: The engine's relevance score, higher is better (comparable within one engine, not across engines).
    score: float
    #: Hybrid search only, on a section the vectors ranked: the cosine between the question and the section's best
    #: window (-1 to 1). Unlike the fused ``score``, which is made of ranks, it says how close the best match is,
    #: so a "not in the docs" threshold can be set on it (``autopilot-relay eval --threshold``).
    similarity: NotRequired[float]


class DocsIndex(Protocol):
    """Search over one relay's docs index; every call names the app, and one app never sees another's sections."""

    async def search(self, app_id: str, query: str, *, limit: int = 5, scope: str | None = None) -> list[DocHit]:
        """The best ``limit`` sections for a reader's question (never parsed as search syntax; cut, not refused).

        ``scope``: a URL path prefix (``/en/3.11/``, a ``/`` is added at its end when missing): only sections of
        pages whose URL path starts with it (a site's version or language, ``query.scope_plan``); None, ``""`` or
        ``"/"``: all. ``ValueError`` for a scope that does not start with ``/`` or is over ``MAX_SCOPE_CHARS``."""
        ...

    async def has_index(self, app_id: str) -> bool:
        """Whether the app has any indexed section (an app without one answers without ``search_docs``)."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...

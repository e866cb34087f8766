"""``PUT /api/apps/{app_id}/docs``: a CI job pushes the app's built docs; the relay re-indexes them at once.

The body is a tar archive (plain or gzip) of a built site or of Markdown sources, as ``tar czf - -C site .``
writes it; ``?base_url=`` is the URL its pages are served under (default ``/``) and ``?url_style=`` the Markdown
sources' URL style (``directory`` or ``html``), as for ``autopilot-relay index``. The archive is the app's whole
documentation: the run is the index's own (incremental: unchanged pages are not touched, pages not in the archive
leave the index; atomic: readers see the old index until the new one is complete; a failed run changes nothing).
Only the app's secret may push (``Authorization: Bearer <app secret>``); an unknown app, an app without a secret
and a wrong secret get one 401, so nobody learns which app ids exist.

Bounds (docs/deployment.md, "Pushing the docs from CI"): the body at most ``MAX_PUSH_BYTES`` (413
``body_too_large``), its files at most ``MAX_PUSH_UNPACKED_BYTES`` unpacked and ``MAX_PAGES`` pages (400
``bad_request``; nothing changed), a page over ``MAX_PAGE_BYTES`` skipped with a warning; one run per app at a
time (409 ``busy``). Only regular files are read, never written to disk; names with ``..`` or absolute ones are
refused; the walk's exclusions (dotfiles, ``_static``, search and 404 pages) apply.
"""

from __future__ import annotations

import asyncio
import posixpath
import tarfile
import tempfile
from dataclasses import dataclass
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ... import protocol as P
from ...errors import ProtocolError
from ..docs.indexer import IndexBusy, IndexOptions, IndexRunError, run_index
from ..docs.limits import MAX_PAGE_BYTES, MAX_PAGES
from ..docs.walk import (
    DEFAULT_EXCLUDES,
    DOCUSAURUS_CONFIGS,
    FOREIGN_SITES,
    FOREIGN_WHY,
    PAGE_KINDS,
    SKIP_DIRS,
    URL_STYLES,
    Kind,
    exclusion,
    normalize_base,
    page_url,
)
from .api import Api
from .edge import HttpError, endpoint

#: The route (beside the app's other secret-holder routes, ``/stats``).
DOCS_PUSH_PATH: Final = "/api/apps/{app_id}/docs"
#: Largest request body (the archive as sent, compressed or not).
MAX_PUSH_BYTES: Final = 64 * 1024 * 1024
#: Largest total of the archive's files once unpacked (a gzip bomb stops here).
MAX_PUSH_UNPACKED_BYTES: Final = 512 * 1024 * 1024
#: Warning lines returned in the answer (the count is in ``warnings``).
MAX_WARNING_LINES: Final = 50


@dataclass(frozen=True, slots=True)
class PushedPage:
    """A page from the pushed archive (``indexer.PageInput``)."""

    rel: str
    kind: Kind
    url: str
    data: bytes

    def read(self) -> bytes:
        """The page's bytes."""
        return self.data


def is_push_path(path: str) -> bool:
    """Whether a request path is the push route (its body limit is ``MAX_PUSH_BYTES``, not ``max_body_bytes``)."""
    parts = path.rstrip("/").split("/")
    return len(parts) >= 5 and parts[-4:-2] == ["api", "apps"] and parts[-1] == "docs"


def read_archive(raw: Any, base_url: str, url_style: Any, *,
                 markdown_anyway: bool = False) -> tuple[list[PushedPage], list[str]]:
    """The pages of a tar archive (``ProtocolError`` for a bad one, and for the Markdown sources of a Docusaurus or
    VitePress site unless ``markdown_anyway``, as ``walk.collect`` refuses a folder of them) and warning lines."""
    excluded = exclusion(DEFAULT_EXCLUDES)
    pages: list[PushedPage] = []
    warnings: list[str] = []
    foreign: dict[str, str] = {}  # kind of site -> the file that shows it
    unpacked = 0
    try:
        with tarfile.open(fileobj=raw, mode="r|*") as tar:
            for member in tar:
                unpacked += max(member.size, 0)
                if unpacked > MAX_PUSH_UNPACKED_BYTES:
                    raise ProtocolError(P.ErrorCode.BAD_REQUEST, f"The archive unpacks to more than "
                                        f"{MAX_PUSH_UNPACKED_BYTES} bytes; nothing was changed.")
                if not member.isfile():
                    continue
                name = posixpath.normpath(member.name.removeprefix("./"))
                if name.startswith(("/", "../")) or name == "..":
                    raise ProtocolError(P.ErrorCode.BAD_REQUEST, f"The archive names a file outside itself: "
                                        f"{member.name!r}; nothing was changed.")
                parts = name.split("/")
                if parts[-1] in DOCUSAURUS_CONFIGS:
                    foreign.setdefault("docusaurus", name)
                elif ".vitepress" in parts[:-1]:
                    foreign.setdefault("vitepress", name)
                elif name.lower().endswith(".mdx"):
                    foreign.setdefault("mdx", name)
                kind = PAGE_KINDS.get(posixpath.splitext(name)[1].lower())
                if (kind is None or any(p.startswith(".") or p in SKIP_DIRS for p in parts)
                        or excluded(name) or any(excluded("/".join(parts[:i]) + "/") for i in range(1, len(parts)))):
                    continue
                if member.size > MAX_PAGE_BYTES:
                    warnings.append(f"{name}: {member.size / 1e6:.1f} MB is over the page limit of "
                                    f"{MAX_PAGE_BYTES / 1e6:.1f} MB; skipped")
                    continue
                if len(pages) >= MAX_PAGES:
                    raise ProtocolError(P.ErrorCode.BAD_REQUEST, f"The archive has more than {MAX_PAGES} pages; "
                                        "nothing was changed.")
                fh = tar.extractfile(member)
                data = fh.read() if fh is not None else b""
                pages.append(PushedPage(name, kind, page_url(name, kind, base_url, url_style), data))
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ProtocolError(P.ErrorCode.BAD_REQUEST, f"The body is not a tar archive (plain or gzip): {exc}") from None
    if foreign and not markdown_anyway and any(p.kind == "markdown" for p in pages):
        site, shown_by = next(iter(foreign.items()))
        raise ProtocolError(
            P.ErrorCode.BAD_REQUEST,
            f"The archive holds the Markdown sources of {FOREIGN_SITES[site]} ({shown_by}): {FOREIGN_WHY[site]}. "
            "Push the built site instead (tar czf - -C build . for Docusaurus, -C .vitepress/dist . for VitePress), "
            "or add markdown_anyway=true to index the sources with MkDocs' URLs and anchors all the same; nothing "
            "was changed.")
    pages.sort(key=lambda p: p.rel)
    return pages, warnings


async def spool_body(request: Request) -> Any:
    """The body in a temporary file (memory up to 8 MB), refused past ``MAX_PUSH_BYTES``."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_PUSH_BYTES:
        raise HttpError(P.ErrorCode.BODY_TOO_LARGE, f"The request body is over {MAX_PUSH_BYTES} bytes.")
    spool = tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024)  # the caller closes it
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_PUSH_BYTES:
            spool.close()
            raise HttpError(P.ErrorCode.BODY_TOO_LARGE, f"The request body is over {MAX_PUSH_BYTES} bytes.")
        spool.write(chunk)
    spool.seek(0)
    return spool


async def push_docs(api: Api, request: Request) -> Response:
    """``PUT /api/apps/{app_id}/docs`` (see the module doc)."""
    api.limit(api.get_limiter, api.client_address(request), "requests")
    app_id = request.path_params["app_id"]
    api.require_app_secret(request, app_id, "push this app's docs")
    docs: Any = api.hub.docs
    if docs is None:
        raise ProtocolError(P.ErrorCode.NOT_FOUND, "This relay has no docs index.")
    try:
        base_url = normalize_base(request.query_params.get("base_url", "/"))
    except ValueError as exc:
        raise ProtocolError(P.ErrorCode.BAD_REQUEST, str(exc)) from None
    url_style = request.query_params.get("url_style", "directory")
    if url_style not in URL_STYLES:
        raise ProtocolError(P.ErrorCode.BAD_REQUEST, f"url_style must be one of {', '.join(URL_STYLES)}.")
    anyway = request.query_params.get("markdown_anyway", "false")
    if anyway not in ("true", "false"):
        raise ProtocolError(P.ErrorCode.BAD_REQUEST, "markdown_anyway must be true or false.")
    spool = await spool_body(request)
    try:
        pages, warnings = await asyncio.to_thread(read_archive, spool, base_url, url_style,
                                                  markdown_anyway=anyway == "true")
    finally:
        spool.close()
    if not pages:
        raise ProtocolError(P.ErrorCode.BAD_REQUEST, "The archive has no pages (.html, .htm, .md, .markdown); nothing "
                            "was changed (autopilot-relay index --drop removes an index).")
    settings: dict[str, Any] = {"sources": [], "pushed": {"base_url": base_url, "url_style": url_style},
                                "selector": None, "excludes": []}
    try:
        summary = await run_index(docs, app_id, pages, options=IndexOptions(), settings=settings,
                                  warn=warnings.append)
    except IndexBusy as exc:
        raise HttpError(P.ErrorCode.BUSY, str(exc), status=409) from None
    except IndexRunError as exc:
        raise ProtocolError(P.ErrorCode.BAD_REQUEST, f"{exc}; nothing was changed.") from None
    body = {"ok": True, **summary, "warnings": len(warnings), "warning_lines": warnings[:MAX_WARNING_LINES]}
    return api.respond(200, body, {"Cache-Control": "no-store"})


def install(api: Api) -> None:
    """The push route."""
    run = endpoint(push_docs)

    async def put(request: Request) -> Response:
        return await run(api, request)

    api.add_routes([Route(DOCS_PUSH_PATH.replace("{app_id}", "{app_id:str}"), put, methods=["PUT"])])


__all__ = ["DOCS_PUSH_PATH", "MAX_PUSH_BYTES", "install", "is_push_path", "read_archive"]

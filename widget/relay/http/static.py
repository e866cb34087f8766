"""Serving the build output (``widget/_dist``, D13) under ``/widget/`` and the demo page at ``/``.

- ``/widget/autopilot.js`` and other top-level files (the loader, ``manifest.json``): ``Cache-Control:
  no-cache`` (revalidated with the ETag each time).
- ``/widget/<build_id>/...``: versioned, ``public, max-age=31536000, immutable``.
- brotli when the client accepts it and build.py wrote a ``<name>.br`` next to the file; else gzip when the
  client accepts it and it saves more than 10 % (computed once per file version and kept in memory, keyed by
  path + mtime + size); ETag / ``If-None-Match`` → 304; no directory traversal.
- ``/`` serves ``<build_id>/demo/index.html`` of the current build (``manifest.json``'s ``build_id``, else the
  newest build folder with a demo); other root paths are looked up in that demo folder.
- Cross-origin embedding (docs/embedding.md): every ``/widget/`` response carries CORS headers for the apps'
  allowed origins (module imports, streaming wasm compiles and ``fetch`` of the bundle need them; no cookies are
  used, so no ``Access-Control-Allow-Credentials``), ``Vary: Origin``, and ``Cross-Origin-Resource-Policy:
  cross-origin`` (the classic loader script is fetched without CORS; pages with COEP need it).
- Stable names for PyScript pages: ``/widget/pyscript/<file>``, ``/widget/pyodide/<file>`` and
  ``/widget/bundle-full.zip`` redirect to the current build's copies (@pyscript/core, Pyodide, the bundle), and
  ``/widget/pyscript.json`` is a PyScript config that works offline (our interpreter, our bundle unpacked into
  site-packages through ``files``, no ``packages``).
- Under a path prefix (``widget.relay.http.mount``), URLs written into pages and configs carry the prefix.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response

from ..ratelimit import RateLimiter

log = logging.getLogger("widget.relay.http.static")

MIME = {
    ".wasm": "application/wasm",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".zip": "application/zip",
    ".whl": "application/zip",
    ".json": "application/json",
    ".map": "application/json",
    ".css": "text/css; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".htm": "text/html; charset=utf-8",
    ".py": "text/plain; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".tar": "application/x-tar",
    ".data": "application/octet-stream",
    ".bin": "application/octet-stream",
    ".snapshot": "application/octet-stream",
}
#: Already compressed: never try.
NO_GZIP = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".gz", ".br", ".woff2", ".zst"}
MIN_GZIP_BYTES = 1024
MIN_SAVING = 0.10
IMMUTABLE = "public, max-age=31536000, immutable"
NO_CACHE = "no-cache"


def _stat_and_brotli(path: Path, brotli: Path | None) -> tuple[os.stat_result, bool]:
    """``path``'s stat and whether its brotli copy exists (blocking: run in a thread)."""
    return path.stat(), brotli is not None and brotli.is_file()


class DistFiles:
    """The build output and the demo page (see the module doc)."""

    def __init__(self, root: Path, allowed_origins: Iterable[str] = (), *, demo_app: bool = True) -> None:
        self.root = Path(root)
        self.allowed_origins = set(allowed_origins)
        #: whether the relay has the app the demo page uses (``demo``); without it the page could not work
        self.demo_app = demo_app
        self._gz: dict[tuple[str, int, int], bytes | None] = {}
        self._gz_locks: dict[tuple[str, int, int], asyncio.Lock] = {}
        #: a refused origin is logged once a minute (per origin)
        self._origin_notes = RateLimiter(1, 60.0)
        if not self.root.is_dir():
            log.warning("build output %s does not exist: static files and the demo page are unavailable "
                        "(run python build.py); the API works", self.root)

    # -- lookup ---------------------------------------------------------------------------
    def _resolve(self, rel: str) -> Path | None:
        if not rel or "\x00" in rel or "\\" in rel:
            return None
        parts = rel.split("/")
        if any(p in ("", ".", "..") or p.startswith(".") for p in parts):
            return None
        root = self.root.resolve()
        path = (root / rel).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            return None
        return path

    def build_id(self) -> str | None:
        manifest = self.root / "manifest.json"
        try:
            data = json.loads(manifest.read_text("utf-8"))
            bid = data.get("build_id") if isinstance(data, dict) else None
            if isinstance(bid, str) and (self.root / bid / "demo" / "index.html").is_file():
                return bid
        except (OSError, ValueError):
            pass
        try:
            builds = [d for d in self.root.iterdir() if d.is_dir() and (d / "demo" / "index.html").is_file()]
        except OSError:
            return None
        if not builds:
            return None
        return max(builds, key=lambda d: d.stat().st_mtime).name

    async def warm(self) -> None:
        """Compress the big compressible files once, in the background, so the first page load
        does not wait for it (pyodide.asm.wasm: ~0.4 s)."""
        bid = self.build_id() if self.root.is_dir() else None
        if not bid:
            return
        for path in sorted((self.root / bid).rglob("*")):
            if (path.is_file() and path.suffix.lower() in (".wasm", ".mjs", ".js", ".json")
                and path.stat().st_size >= 64 * 1024):
                try:
                    await self._gzip(path, path.stat())
                except OSError:
                    pass

    # -- responses ---------------------------------------------------------------------------
    def cors_headers(self, request: Request) -> dict[str, str]:
        """CORS for an allowed origin; ``Vary: Origin`` always (a cached copy must not serve another origin)."""
        origin = request.headers.get("origin")
        headers = {"Vary": "Origin, Accept-Encoding", "Cross-Origin-Resource-Policy": "cross-origin"}
        if origin and origin in self.allowed_origins:
            headers["Access-Control-Allow-Origin"] = origin
        elif origin and self._origin_notes.allow(origin):
            log.warning("origin %s is not allowed by any app on this relay; allowed: %s (a page there cannot load "
                        "the widget's modules: add the origin to its app's allowed origins)",
                        origin, ", ".join(sorted(self.allowed_origins)) or "none")
        return headers

    @staticmethod
    def base_url(request: Request) -> str:
        """Where ``/widget/`` lives for this request: the relay's URL, with the prefix it is mounted under."""
        return str(request.base_url).rstrip("/")

    @staticmethod
    def prefix(request: Request) -> str:
        return str(request.scope.get("app_root_path") or request.scope.get("root_path") or "").rstrip("/")

    def pyscript_config(self, request: Request) -> Response:
        """A PyScript config for the current build that works offline; absolute URLs (PyScript resolves
        ``interpreter`` against the page, not the config)."""
        bid = self.build_id() if self.root.is_dir() else None
        if bid is None:
            return PlainTextResponse("Not built", status_code=404, headers=self.cors_headers(request))
        base = f"{self.base_url(request)}/widget/{bid}"
        body = {"interpreter": f"{base}/pyodide/pyodide.mjs",
                "files": {f"{base}/bundle-full.zip": "/lib/python3.14/site-packages/*"}}
        return JSONResponse(body, headers={**self.cors_headers(request), "Cache-Control": NO_CACHE})

    async def _gzip(self, path: Path, st: os.stat_result) -> bytes | None:
        key = (str(path), st.st_mtime_ns, st.st_size)
        if key in self._gz:
            return self._gz[key]
        lock = self._gz_locks.setdefault(key, asyncio.Lock())
        async with lock:
            if key not in self._gz:
                def compress() -> bytes | None:
                    raw = path.read_bytes()
                    packed = gzip.compress(raw, compresslevel=6, mtime=0)
                    return packed if len(packed) <= len(raw) * (1 - MIN_SAVING) else None

                # drop older versions of this path
                for old in [k for k in self._gz if k[0] == key[0]]:
                    del self._gz[old]
                self._gz[key] = await asyncio.to_thread(compress)
        self._gz_locks.pop(key, None)
        return self._gz[key]

    async def file_response(self, request: Request, path: Path, cache_control: str) -> Response:
        accept = request.headers.get("accept-encoding", "").lower()
        suffix = path.suffix.lower()
        # A brotli copy written by build.py next to the file (``name.br``, same build folder) wins.
        brotli = path.with_name(path.name + ".br") if "br" in accept and suffix not in NO_GZIP else None
        # The file system is read off the event loop (a slow disk must not stall every socket): one thread hop
        # for the stat and the brotli copy's check, one for the body (the gzip copy is cached in memory).
        st, has_brotli = await asyncio.to_thread(_stat_and_brotli, path, brotli)
        media = MIME.get(suffix, "application/octet-stream")
        etag_base = hashlib.sha1(f"{path}:{st.st_mtime_ns}:{st.st_size}".encode()).hexdigest()[:20]
        accepts_gzip = "gzip" in accept
        body: bytes | None = None
        encoding = None
        if has_brotli:
            encoding = "br"
        elif accepts_gzip and suffix not in NO_GZIP and st.st_size >= MIN_GZIP_BYTES:
            body = await self._gzip(path, st)
            if body is not None:
                encoding = "gzip"
        etag = f'"{etag_base}{"-" + encoding[:2] if encoding else ""}"'
        headers = {"ETag": etag, "Cache-Control": cache_control, "X-Content-Type-Options": "nosniff"}
        headers.update(self.cors_headers(request))
        inm = request.headers.get("if-none-match")
        if inm and etag in {t.strip().removeprefix("W/") for t in inm.split(",")}:
            return Response(status_code=304, headers=headers)
        if encoding == "br" and brotli is not None:
            headers["Content-Encoding"] = "br"
            body = await asyncio.to_thread(brotli.read_bytes)
        elif body is not None:  # the gzip copy
            headers["Content-Encoding"] = "gzip"
        else:
            body = await asyncio.to_thread(path.read_bytes)
        if request.method == "HEAD":
            headers["Content-Length"] = str(len(body))
            return Response(status_code=200, headers=headers, media_type=media)
        return Response(body, headers=headers, media_type=media)

    async def widget(self, request: Request) -> Response:
        rel = request.path_params.get("path", "")
        path = self._resolve(rel)
        if path is None and rel == "pyscript.json":
            return self.pyscript_config(request)
        if path is None and (rel.startswith(("pyscript/", "pyodide/")) or rel in ("bundle-full.zip", "bundle.zip")):
            bid = self.build_id() if self.root.is_dir() else None
            if bid is not None and self._resolve(f"{bid}/{rel}") is not None:
                # The versioned copy (immutable); its chunks then load relative to it.
                return RedirectResponse(f"{self.prefix(request)}/widget/{bid}/{rel}", status_code=302,
                                        headers={**self.cors_headers(request), "Cache-Control": NO_CACHE})
        if path is None:
            return PlainTextResponse("Not found", status_code=404, headers=self.cors_headers(request))
        cache = IMMUTABLE if "/" in rel else NO_CACHE
        return await self.file_response(request, path, cache)

    async def demo(self, request: Request) -> Response:
        """The demo page and its files, when the relay has the demo app (else a page that says so)."""
        rel = request.path_params.get("path", "") or "index.html"
        if not self.demo_app:
            return PlainTextResponse(
                "This relay serves the widget and its API, not the demo page: the demo page needs the app 'demo', "
                "which its configuration (--app or --config) does not have. Add [apps.demo] (or --app "
                "demo=ORIGIN) to try the demo here, or embed the widget in your own site (docs/embedding.md).",
                status_code=404)
        bid = self.build_id()
        path = self._resolve(f"{bid}/demo/{rel}") if bid else None
        if path is None:
            if rel == "index.html":
                return PlainTextResponse(
                    "The demo page is not built: run python build.py, then reload.", status_code=404)
            return PlainTextResponse("Not found", status_code=404)
        prefix = self.prefix(request)
        if prefix and path.suffix.lower() in (".html", ".htm"):
            # Mounted under a prefix: the demo's root-absolute URLs (/widget/...) move under it too.
            html = (await asyncio.to_thread(path.read_text, "utf-8"))
            html = html.replace('="/widget/', f'="{prefix}/widget/')
            return Response(html, media_type=MIME[".html"], headers={"Cache-Control": NO_CACHE})
        return await self.file_response(request, path, NO_CACHE)

    async def preflight(self, request: Request) -> Response:
        headers = self.cors_headers(request)
        if "Access-Control-Allow-Origin" in headers:
            headers.update({"Access-Control-Allow-Methods": "GET, HEAD, OPTIONS", "Access-Control-Max-Age": "600",
                            "Access-Control-Allow-Headers": request.headers.get("access-control-request-headers", "")})
            return Response(status_code=204, headers=headers)
        return Response(status_code=403, headers={"Vary": "Origin"})

"""Helpers shared by the tests and the benchmarks: a relay subprocess, Chromium flags, page logging."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DIST = ROOT / "widget" / "_dist"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def stop_process(proc: subprocess.Popen | None, *, interrupt: bool = False, timeout: float = 10.0) -> None:
    """Stop ``proc`` if it still runs: SIGTERM (SIGINT with ``interrupt``: PostgreSQL's and uvicorn's fast
    shutdown), then SIGKILL after ``timeout`` seconds."""
    if proc is None or proc.poll() is not None:
        return
    if interrupt:
        proc.send_signal(signal.SIGINT)
    else:
        proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RelayServer:
    """A relay subprocess on loopback."""

    port: int
    db: Path
    proc: subprocess.Popen[bytes]
    log: Path
    extra: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        stop_process(self.proc)

    def restart(self) -> None:
        """Stop and start again on the same port and database."""
        self.stop()
        fresh = start_relay(self.db.parent, port=self.port, db=self.db, extra=self.extra)
        self.proc, self.log = fresh.proc, fresh.log


def start_relay(workdir: Path, *, port: int | None = None, db: Path | None = None,
                extra: list[str] | None = None, timeout: float = 20.0) -> RelayServer:
    """Start ``python -m widget.relay`` and wait until it answers HTTP."""
    port = port or free_port()
    db = db or workdir / f"relay-{port}.sqlite3"
    log = workdir / f"relay-{port}-{int(time.time() * 1000)}.log"
    cmd = [sys.executable, "-m", "widget.relay", "--host", "127.0.0.1", "--port", str(port), "--db", str(db)]
    cmd += extra or []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"relay exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                if r.status == 200:
                    return RelayServer(port=port, db=db, proc=proc, log=log, extra=extra or [])
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"relay did not answer within {timeout} s:\n{log.read_text()}")


@dataclass
class PageLog:
    """Everything a page did on the network and the console."""

    requests: list[str] = field(default_factory=list)
    websockets: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)

    def foreign_hosts(self, allowed: set[str]) -> list[str]:
        from urllib.parse import urlsplit

        out = []
        for url in self.requests + self.websockets:
            parts = urlsplit(url)
            if parts.scheme in ("data", "blob", "about"):
                continue
            if parts.hostname not in allowed:
                out.append(url)
        return out


async def open_page(browser: Any, url: str, *, context: Any = None, wait_joined: bool = True,
                    timeout_ms: float = 60_000) -> tuple[Any, Any, PageLog]:
    """A fresh context and page at ``url``, logging requests, sockets and console errors."""
    ctx = context or await browser.new_context()
    page = await ctx.new_page()
    log = PageLog()
    page.on("request", lambda r: log.requests.append(r.url))
    page.on("websocket", lambda ws: log.websockets.append(ws.url))
    page.on("console", lambda m: log.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: log.page_errors.append(str(e)))
    await page.goto(url)
    if wait_joined:
        # A first page view prepares on idle and starts on the reader's intent: start it as the page would.
        await page.evaluate("() => { if (window.Autopilot && window.Autopilot.boot) window.Autopilot.boot(); }")
        await wait_mark(page, "autopilot:joined", timeout_ms)
    return ctx, page, log


async def wait_mark(page: Any, name: str, timeout_ms: float = 60_000) -> None:
    """Wait for a performance mark the widget sets (boot milestones)."""
    await page.wait_for_function(
        "name => performance.getEntriesByName(name).length > 0", arg=name, timeout=timeout_ms
    )


async def py_eval(page: Any, code: str) -> Any:
    """Run ``code`` in the page's Pyodide; returns its last expression, passed through JSON."""
    import json

    wrapped = (
        "import json as _j, ast as _a\n"
        "_src = " + repr(code) + "\n"
        "_tree = _a.parse(_src)\n"
        "_last = _tree.body.pop() if _tree.body and isinstance(_tree.body[-1], _a.Expr) else None\n"
        "exec(compile(_tree, '<test>', 'exec'), globals())\n"
        "_j.dumps(eval(compile(_a.Expression(_last.value), '<test>', 'eval'), globals()) if _last else None)\n"
    )
    text = await page.evaluate("code => window.Autopilot.pyodide.runPython(code)", wrapped)
    return json.loads(text)


class PageServer:
    """A real loopback HTTP server for test pages: ``/widget/`` serves the build, other paths the given pages.

    Test pages must come from a real loopback server: a page fulfilled by Playwright has no address, counts as
    public, and Chromium's local-network-access rules then block its requests to the relay on loopback.
    """

    def __init__(self) -> None:
        import http.server
        import threading

        pages: dict[str, tuple[str, str, dict[str, str]]] = {}
        self.pages = pages
        dist = DIST

        class Handler(http.server.SimpleHTTPRequestHandler):
            extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                              ".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm"}

            def __init__(self, *a: Any, **kw: Any) -> None:
                super().__init__(*a, directory=str(dist), **kw)

            def translate_path(self, path: str) -> str:
                path = path.split("?", 1)[0]
                return super().translate_path(path[len("/widget"):] if path.startswith("/widget/") else "/__none__")

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path in pages:
                    text, content_type, headers = pages[path]
                    body = text.encode()
                    self.send_response(200)
                    self.send_header("Content-Type", content_type)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                super().do_GET()

            def log_message(self, *a: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, path: str, text: str, content_type: str = "text/html; charset=utf-8",
            headers: dict[str, str] | None = None) -> str:
        """Serve ``text`` at ``path`` (with extra response ``headers``); returns its URL."""
        self.pages[path] = (text, content_type, headers or {})
        return self.origin + path

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

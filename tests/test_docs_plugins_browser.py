"""The MkDocs plugin and the Sphinx extension end to end, in Chromium: a MkDocs-Material site built with
``plugins: - autopilot`` (and a Sphinx site with the Read the Docs theme and ``extensions =
["widget.integrations.sphinx"]``) into a temporary folder, its index written into a relay's database file, the relay
started on that file, the built site served from its own loopback origin; a reader on one of its pages opens the
bar, asks, and gets an answer whose source is a section of that site, with the page's own context set by the
plugin's script."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from conftest import require_build
from support import RelayServer, free_port, open_page, start_relay
from test_bar import open_bar, py, send
from test_docs_plugins import PAGES_MD, RST, SPHINX_CONF, build_mkdocs, build_sphinx

pytestmark = pytest.mark.browser


class Site:
    """The built site on a loopback origin of its own (a thread of http.server)."""

    def __init__(self, folder: Path, port: int) -> None:
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.url = f"http://127.0.0.1:{port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


#: What each generator's built site is read at: the reader's page, its title, and where the answer's source leads.
GENERATORS = {
    "mkdocs": ("/guide/deploy/", "Deployment & proxies", "/guide/theming/#colours"),
    "sphinx": ("/index.html", "Welcome", "/theming.html#colours"),
}


def build_site(kind: str, root: Path, relay_port: int, site_port: int) -> Path:
    """The site built with the widget on and its index written; the database file."""
    if kind == "sphinx":
        conf = (SPHINX_CONF.replace("https://docs.example.com/acme/", f"http://127.0.0.1:{site_port}/")
                .replace("http://127.0.0.1:8765", f"http://127.0.0.1:{relay_port}"))
        done = build_sphinx(root, "sphinx_rtd_theme", conf)
        assert done.returncode == 0, done.stderr
        return root / "src" / "relay" / "autopilot-relay.sqlite3"
    yml = f"""site_name: Acme Docs
site_url: http://127.0.0.1:{site_port}/
theme:
  name: material
plugins:
  - search
  - autopilot:
      relay: http://127.0.0.1:{relay_port}
      app: acme-docs
      index: relay.sqlite3
"""
    done = build_mkdocs(root, yml)
    assert done.returncode == 0, done.stderr
    return root / "relay.sqlite3"


@pytest.fixture(scope="module", params=sorted(GENERATORS))
def built(request: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Site, RelayServer, str]]:
    require_build()
    kind = request.param
    root = tmp_path_factory.mktemp(f"{kind}-browser")
    relay_port, site_port = free_port(), free_port()
    db = build_site(kind, root, relay_port, site_port)
    assert db.exists()
    relay = start_relay(root, port=relay_port, db=db,
                        extra=["--app", f"acme-docs=http://127.0.0.1:{site_port}", "--demo-chunk-delay-ms", "2"])
    site = Site(root / "site", site_port)
    yield site, relay, kind
    site.stop()
    relay.stop()


@pytest_asyncio.fixture(scope="module")
async def reader(browser: Any, built: tuple[Site, RelayServer, str]) -> AsyncIterator[tuple[Any, Any, Site, str]]:
    site, _, kind = built
    ctx, page, log = await open_page(browser, site.url + GENERATORS[kind][0])
    yield page, log, site, kind
    await ctx.close()


async def test_a_question_on_a_built_page_is_answered_from_that_site(reader: tuple[Any, Any, Site, str]) -> None:
    page, log, site, kind = reader
    path, title, source_path = GENERATORS[kind]
    assert "accent custom property" in PAGES_MD["guide/theming.md"] and "accent custom property" in RST["theming.rst"]
    context = await py(page, "client.get_context()")
    assert context == {"page": {"title": title, "url": f"{site.url}{path}"}}
    await open_bar(page)
    await send(page, "How do I set the accent custom property?")
    answer = await py(page, "[m for m in store.messages if m.get('role') == 'assistant'][-1]")
    (source,) = answer["sources"]
    assert source["url"].startswith(f"{site.url}{source_path}"), source
    assert "Set the accent custom property" in answer["content"]
    assert log.page_errors == []

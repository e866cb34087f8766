"""The docs index on real builds: a MkDocs-Material site (``mkdocs build``) and Sphinx sites (``sphinx-build``, the
default Alabaster theme and Furo), each built once per module. Sections and their headings, every anchor an id
the built page has, and no navigation, search box, "edit this page", permalink or footer text in the index."""

from __future__ import annotations

import html
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import lxml.html
import pytest
import pytest_asyncio

from widget.relay.docs import open_docs_index
from widget.relay.docs.indexer import extract, run_index
from widget.relay.docs.walk import Source, collect

pytestmark = pytest.mark.relay

PAGES_MD = {
    "index.md": "# Welcome\n\nThe copilot answers questions.\n\n## Install it\n\nRun pip install.\n\n"
                "## Install it\n\nA second section with the same title.\n",
    "guide/theming.md": "# Theming\n\nThe bar has a theme.\n\n## Colours\n\nSet the accent custom property.\n\n"
                        "### Dark mode\n\nThe bar follows the page scheme.\n",
    "guide/deploy.md": "# Deployment\n\nRun it behind a proxy.\n\n## Reverse proxy\n\nNginx forwards websockets.\n",
    "faq.md": "---\ntitle: Questions\n---\n# Questions\n\n## Does it work offline?\n\nThe demo model does.\n",
}
MKDOCS_YML = """site_name: Acme Docs
site_url: https://docs.example.com/
repo_url: https://github.com/example/acme
edit_uri: edit/main/docs/
theme:
  name: material
  features: [content.action.edit, content.action.view]
markdown_extensions:
  - toc:
      permalink: true
nav:
  - Zebra Handbook Home: index.md
  - Quokka Guides:
      - Theming: guide/theming.md
      - Deployment: guide/deploy.md
  - faq.md
"""
RST = {
    "index.rst": "Welcome\n=======\n\nThe copilot answers questions.\n\n.. toctree::\n   :caption: Quokka Guides\n\n"
                 "   theming\n   deploy\n\nInstall it\n----------\n\nRun pip install.\n\nInstall it\n----------\n\n"
                 "A second section with the same title.\n",
    "theming.rst": "Theming\n=======\n\nThe bar has a theme.\n\nColours\n-------\n\nSet the accent custom property."
                   "\n\nDark mode\n~~~~~~~~~\n\nThe bar follows the page scheme.\n",
    "deploy.rst": "Deployment\n==========\n\nRun it behind a proxy.\n\nReverse proxy\n-------------\n\n"
                  "Nginx forwards websockets.\n",
}
#: Text of each generator's chrome that must not reach the index.
CHROME = {
    "mkdocs": ["Zebra Handbook", "Quokka", "Initializing search", "Edit this page", "View source", "Made with",
               "Acme Docs", "¶", "Table of contents"],
    "alabaster": ["Quokka", "Navigation", "Related Topics", "Search", "Powered by", "Page source", "¶",
                  "Go"],
    "furo": ["Quokka", "On this page", "Made with", "Back to top", "Copyright", "¶", "Search", "Contents"],
    "sphinx_rtd_theme": ["Quokka", "View page source", "Built with", "Read the Docs", "Previous", "Next",
                         "Search docs"],
}


def build(kind: str, root: Path) -> Path:
    src, out = root / "src", root / "site"
    if kind == "mkdocs":
        for rel, text in PAGES_MD.items():
            (src / "docs" / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / "docs" / rel).write_text(text)
        (src / "mkdocs.yml").write_text(MKDOCS_YML)
        cmd = [sys.executable, "-m", "mkdocs", "build", "-q", "-f", str(src / "mkdocs.yml"), "-d", str(out)]
    else:
        src.mkdir(parents=True)
        for rel, text in RST.items():
            (src / rel).write_text(text)
        (src / "conf.py").write_text(f"project = 'Acme'\nhtml_theme = '{kind}'\n")
        cmd = [sys.executable, "-m", "sphinx", "-q", "-b", "html", str(src), str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1",
                          "PATH": "/usr/bin:/bin", "HOME": str(root)})
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module", params=["mkdocs", "alabaster", "furo", "sphinx_rtd_theme"])
def site(request: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    return request.param, build(request.param, tmp_path_factory.mktemp(request.param))


@pytest_asyncio.fixture
async def indexed(site: tuple[str, Path], tmp_path: Path) -> AsyncIterator[tuple[str, Path, Any, list[Any]]]:
    kind, out = site
    files, warnings = collect([Source(out, "/")], max_pages=100)
    assert warnings == []
    index: Any = open_docs_index(None, str(tmp_path / "relay.sqlite3"))
    skipped: list[str] = []
    summary = await run_index(index, "acme", files, warn=skipped.append)
    assert summary["pages"] >= 3, skipped
    pages = []
    for f in files:
        try:
            pages.append((f, extract(f.path.read_bytes(), f.url, f.kind, None)))
        except Exception:  # noqa: BLE001 - pages the run skipped too (genindex, redirects)
            pass
    yield kind, out, index, pages
    await index.close()


def url_of(kind: str, name: str) -> str:
    if kind == "mkdocs":
        return {"index": "/", "theming": "/guide/theming/", "deploy": "/guide/deploy/"}[name]
    return "/" if name == "index" else f"/{name}.html"  # index.html is served as its folder


async def test_sections_and_anchors_of_a_real_build(indexed: tuple[str, Path, Any, list[Any]]) -> None:
    kind, out, index, pages = indexed
    by_url = {page.url: page for _, page in pages}
    theming = by_url[url_of(kind, "theming")]
    assert theming.title == "Theming"
    assert [(s.headings, s.text) for s in theming.sections] == [
        (["Theming"], "The bar has a theme."),
        (["Theming", "Colours"], "Set the accent custom property."),
        (["Theming", "Colours", "Dark mode"], "The bar follows the page scheme."),
    ]
    welcome = by_url[url_of(kind, "index")]
    repeated = [s for s in welcome.sections if s.headings[-1:] == ["Install it"]]
    assert len(repeated) == 2 and repeated[0].url != repeated[1].url  # the generator made the ids unique
    # Every anchor is an id (or name) the built page has.
    for f, page in pages:
        doc = lxml.html.fromstring(f.path.read_bytes())
        ids = set(doc.xpath("//@id")) | set(doc.xpath("//a/@name"))
        for s in page.sections:
            if "#" in s.url:
                assert s.url.split("#", 1)[1] in ids, (f.rel, s.url)
    hits = await index.search("acme", "how do I set the accent colour?")
    assert hits[0]["url"] == url_of(kind, "theming") + "#colours"
    hits = await index.search("acme", "nginx websockets")
    assert hits[0]["url"] == url_of(kind, "deploy") + "#reverse-proxy"


async def test_navigation_and_chrome_are_not_indexed(indexed: tuple[str, Path, Any, list[Any]]) -> None:
    kind, out, index, pages = indexed
    text = "\n".join(" ".join([p.title, *s.headings, s.text]) for _, p in pages for s in p.sections)
    built = "\n".join(html.unescape(f.path.read_text()) for f, _ in pages)
    for chrome in CHROME[kind]:
        assert chrome in built, chrome  # the build has it ...
        assert chrome not in text, chrome  # ... the index does not
    assert await index.search("acme", "zebra handbook quokka") == []
    urls = {p.url for _, p in pages}
    assert not any(u.endswith(("search.html", "genindex.html", "404.html")) for u in urls)

"""The docs index on real VitePress and Docusaurus builds (issue 29 item 1): builds one small site with each from
the npm registry and prints what the extraction makes of it.

The same Markdown pages go to both generators (nested folders, H2/H3, a heading repeated on one page, headings
with punctuation, inline code and non-ASCII letters, one starting with a digit, a code block, a tip container, a
table, front matter), with the chrome a real site has turned on: a navbar, a sidebar, "Edit this page", "Last
updated", previous/next links, a footer, VitePress' local search box and outline. Each build runs in its own
folder under ``~/.cache/autopilot-widget/generators/`` (``npm install`` of the pinned versions, then the build);
``--skip-build`` measures the last build again. Printed per generator: pages and sections indexed, every section
anchor an id the built page has, headings free of permalink glyphs, page URLs as the site links them, the chrome
words (navigation, sidebar, outline, edit link, pagination, breadcrumbs, footer, search box) found in the index,
and each page's sections. ``--fixtures DIR`` copies the telling pages into ``DIR/{vitepress,docusaurus}/``
(``tests/fixtures/docs_generators``, which ``tests/test_docs_generators.py`` indexes).

    python bench/docs_generators.py [--skip-build] [--only vitepress|docusaurus] [--fixtures DIR]
"""

from __future__ import annotations

import argparse
import html
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import lxml.html  # noqa: E402

from widget.relay.docs.indexer import extract  # noqa: E402
from widget.relay.docs.page import Page, PageSkipped  # noqa: E402
from widget.relay.docs.walk import Source, SourceFile, collect  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from results import save  # noqa: E402

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "autopilot-widget" / "generators"
VERSIONS = {
    "vitepress": {"vitepress": "1.6.4", "vue": "3.5.47"},
    "docusaurus": {"@docusaurus/core": "3.10.2", "@docusaurus/preset-classic": "3.10.2", "@mdx-js/react": "3.1.1",
                   "clsx": "2.1.1", "prism-react-renderer": "2.4.1", "react": "19.3.1", "react-dom": "19.3.1"},
}
#: The pages each build has (relative to its docs folder) and that the fixtures keep.
FIXTURES = {
    # the home layout (hero, feature cards, Markdown below), a page layout, and three docs (one with tabs)
    "vitepress": ["index.html", "about.html", "guide/theming.html", "guide/deploy.html", "guide/advanced/api.html"],
    # three docs (one with tabs), a category's generated index (cards) and a tags list (skipped)
    "docusaurus": ["guide/theming/index.html", "guide/deploy/index.html", "guide/advanced/api/index.html",
                   "category/quokka-guides/index.html", "blog/tags/index.html"],
}
#: Text of the sites' chrome (set in the configs below) that must not reach the index.
CHROME = {
    "vitepress": ["Zebra Handbook", "Quokka Guides", "Edit this page", "Last updated", "Previous page", "Next page",
                  "Released under the Wombat", "Copyright Wombat", "On this page", "Search", "Return to top",
                  "Skip to content", "Appearance", "Menu"],
    "docusaurus": ["Zebra Handbook", "Quokka Guides", "Edit this page", "Last updated", "Previous", "Next",
                   "Copyright Wombat", "On this page", "Skip to main content", "Home page", "Wombat Links"],
}

#: Tabs of code, the generator's own way (Docusaurus renders the panels not shown with ``hidden``).
TABS = {"vitepress": "::: code-group\n\n```nginx [Nginx]\nproxy_set_header Upgrade $http_upgrade;\n```\n\n"
                     "```text [Caddy]\nreverse_proxy localhost:8000\n```\n\n:::\n",
        "docusaurus": "import Tabs from '@theme/Tabs';\nimport TabItem from '@theme/TabItem';\n\n<Tabs>\n"
                      "<TabItem value=\"nginx\" label=\"Nginx\">\n\n```nginx\nproxy_set_header Upgrade $http_upgrade;"
                      "\n```\n\n</TabItem>\n<TabItem value=\"caddy\" label=\"Caddy\">\n\n```text\n"
                      "reverse_proxy localhost:8000\n```\n\n</TabItem>\n</Tabs>\n"}
#: A code block with line numbers (and Docusaurus' title), the generator's own way.
NUMBERED = {"vitepress": "```js:line-numbers\nbar.register('lookup', fn)\nbar.start()\n```\n",
            "docusaurus": "```js title=\"register.js\" showLineNumbers\nbar.register('lookup', fn)\nbar.start()\n```\n"}
DETAILS = "<details>\n<summary>More options</summary>\n\nThe timeout option waits for the page.\n\n</details>\n"
TIP = {"vitepress": "::: tip Good to know\nThe bar keeps its colours in {where}.\n:::\n",
       "docusaurus": ":::tip[Good to know]\n\nThe bar keeps its colours in {where}.\n\n:::\n"}


HOME_HERO = ("---\ntitle: Welcome\nlayout: home\nhero:\n  name: Acme Hero Name\n  tagline: Hero tagline words\n"
             "  actions:\n    - theme: brand\n      text: Get started\n      link: /guide/theming\n"
             "features:\n  - title: Feature card title\n    details: Feature card details.\n")


def pages(kind: str) -> dict[str, str]:
    """The Markdown pages of a site (the containers are the generator's own syntax; VitePress' home page has the
    ``home`` layout's hero and feature cards, front matter Docusaurus ignores; Docusaurus gets a tag)."""
    tip = TIP[kind].format(where="custom properties")
    home_fm = HOME_HERO + ("slug: /\n---\n" if kind == "docusaurus" else "---\n")
    tags = "tags: [styling]\n" if kind == "docusaurus" else ""
    return {
        "index.md": home_fm + "# Welcome\n\nThe copilot answers questions about your product.\n\n"
                    "## Install it\n\nRun the installer:\n\n```bash\npip install autopilot-widget\n```\n\n"
                    "## Install it\n\nA second section with the same title, about the script tag.\n",
        "guide/theming.md": "---\ntitle: Theming\ndescription: Colours and modes of the bar.\n" + tags + "---\n"
                            "# Theming\n\nThe bar has a theme.\n\n## Colours\n\nSet the accent custom property.\n\n"
                            + tip + "\n### Dark mode\n\nThe bar follows the page scheme.\n\n"
                            "| Property | Default |\n| --- | --- |\n| `--accent` | `#3355ff` |\n"
                            "| `--radius` | `8px` |\n",
        "guide/deploy.md": "# Deployment\n\nRun it behind a proxy.\n\n## Reverse proxy\n\nNginx forwards websockets."
                           "\n\n" + TABS[kind] + "\n## 2 relays behind one proxy\n\nSticky sessions keep a "
                           "conversation on one relay.\n",
        "guide/advanced/api.md": "# Client API\n\nThe page talks to the bar.\n\n"
                                 "## The `register()` call: options & limits (café, naïve)\n\n"
                                 "Register a function the model may call.\n\n" + NUMBERED[kind] + "\n" + DETAILS
                                 + "\n### Example\n\nA first example.\n\n"
                                 "## Events\n\nThe bar emits events.\n\n### Example\n\nA second example.\n\n"
                                 "## 404 errors\n\nA missing app answers 404.\n",
        "faq.md": "# Questions\n\n## Does it work offline?\n\nThe demo model does.\n",
        # VitePress' page layout (no sidebar, no <main>); a plain doc to Docusaurus
        "about.md": "---\nlayout: page\n---\n# About Acme\n\nAcme makes copilots.\n\n## Contact\n\n"
                    "Write to the maintainers.\n",
    }


#: Docusaurus only: a blog post (its blog makes list, archive, tag and author pages around it).
BLOG_POST = ("---\ntitle: Release notes\nauthors: [wombat]\ntags: [release]\n---\n\nThe first release is out.\n\n"
             "<!-- truncate -->\n\n## What changed\n\nEverything.\n")
BLOG_AUTHORS = "wombat:\n  name: Wombat Writer\n  title: Maintainer\n"

VITEPRESS_CONFIG = """export default {
  title: 'Acme Docs',
  lastUpdated: true,
  cleanUrls: process.env.ACME_CLEAN_URLS === 'true',
  themeConfig: {
    nav: [{ text: 'Zebra Handbook', link: '/' }],
    sidebar: [
      { text: 'Quokka Guides', items: [
        { text: 'Theming', link: '/guide/theming' },
        { text: 'Deployment', link: '/guide/deploy' },
        { text: 'Client API', link: '/guide/advanced/api' },
        { text: 'Questions', link: '/faq' },
      ] },
    ],
    editLink: { pattern: 'https://github.com/example/acme/edit/main/docs/:path', text: 'Edit this page' },
    footer: { message: 'Released under the Wombat License.', copyright: 'Copyright Wombat' },
    search: { provider: 'local' },
    outline: { level: [2, 3], label: 'On this page' },
  },
}
"""
DOCUSAURUS_CONFIG = """module.exports = {
  title: 'Acme Docs',
  url: 'https://docs.example.com',
  baseUrl: '/',
  trailingSlash: process.env.ACME_TRAILING_SLASH === 'false' ? false : undefined,
  onBrokenLinks: 'throw',
  presets: [['classic', {
    docs: { routeBasePath: '/', sidebarPath: './sidebars.js',
            editUrl: 'https://github.com/example/acme/edit/main/',
            showLastUpdateTime: true },
    blog: { showReadingTime: true },
  }]],
  themeConfig: {
    navbar: { title: 'Zebra Handbook', items: [{ type: 'docSidebar', sidebarId: 'docs', label: 'Docs' },
                                               { to: '/blog', label: 'Blog' }] },
    footer: { links: [{ title: 'Wombat Links', items: [{ label: 'Home page', href: 'https://example.com' }] }],
              copyright: 'Copyright Wombat' },
  },
};
"""
DOCUSAURUS_SIDEBARS = """module.exports = {
  docs: ['index', { type: 'category', label: 'Quokka Guides', link: { type: 'generated-index', title: 'Guide overview',
    description: 'Every guide of the handbook.' },
    items: ['guide/theming', 'guide/deploy', 'guide/advanced/api'] }, 'faq'],
};
"""


def run(cmd: list[str], cwd: Path, extra: dict[str, str] | None = None) -> None:
    """Run a build step; its output only when it fails."""
    print("$", " ".join(f"{k}={v}" for k, v in (extra or {}).items()), " ".join(cmd), f"(in {cwd})", flush=True)
    env = {**os.environ, **(extra or {}), "CI": "1", "NO_UPDATE_NOTIFIER": "1",
           "GIT_AUTHOR_DATE": "2026-01-02T03:04:05Z", "GIT_COMMITTER_DATE": "2026-01-02T03:04:05Z"}
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")


#: The builds measured: (generator, the config's switch as an environment variable, output folder in the work dir).
VARIANTS: dict[str, tuple[str, dict[str, str], str]] = {
    "vitepress": ("vitepress", {}, "docs/.vitepress/dist"),
    "vitepress-clean-urls": ("vitepress", {"ACME_CLEAN_URLS": "true"}, "dist-clean-urls"),
    "docusaurus": ("docusaurus", {}, "build"),
    "docusaurus-no-trailing-slash": ("docusaurus", {"ACME_TRAILING_SLASH": "false"}, "build-no-trailing-slash"),
}


def write_site(kind: str, work: Path) -> None:
    """The generator's project folder: package.json, config, docs (and Docusaurus' blog), committed to git."""
    work.mkdir(parents=True, exist_ok=True)
    docs = work / "docs"
    for old in docs.iterdir() if docs.exists() else []:  # the pages, not VitePress' cache and default output
        if old.name != ".vitepress":
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    for rel, text in pages(kind).items():
        (docs / rel).parent.mkdir(parents=True, exist_ok=True)
        (docs / rel).write_text(text, encoding="utf-8")
    package: dict[str, Any] = {"name": f"acme-{kind}", "private": True, "dependencies": VERSIONS[kind]}
    if kind == "vitepress":  # not Docusaurus: its server bundle fails as ES modules (require.resolveWeak)
        package["type"] = "module"
    (work / "package.json").write_text(json.dumps(package, indent=2) + "\n")
    if kind == "vitepress":
        (docs / ".vitepress").mkdir(exist_ok=True)
        (docs / ".vitepress" / "config.mjs").write_text(VITEPRESS_CONFIG)
    else:
        (work / "docusaurus.config.js").write_text(DOCUSAURUS_CONFIG)
        (work / "sidebars.js").write_text(DOCUSAURUS_SIDEBARS)
        (work / "blog").mkdir(exist_ok=True)
        (work / "blog" / "2026-01-01-release.md").write_text(BLOG_POST)
        (work / "blog" / "authors.yml").write_text(BLOG_AUTHORS)
    if not (work / ".git").exists():  # "Last updated" comes from git
        run(["git", "init", "-q"], work)
    (work / ".gitignore").write_text("node_modules/\nbuild*/\ndist*/\n.docusaurus/\ndocs/.vitepress/dist/\n"
                                     "docs/.vitepress/cache/\n")
    run(["git", "add", "-A", "."], work)
    run(["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid", "commit", "-q",
         "--allow-empty", "-m", "pages"], work)


def build(variant: str) -> Path:
    """Install the pinned generator (once) and build the variant; the folder of built HTML."""
    kind, env, out_dir = VARIANTS[variant]
    work = CACHE / kind
    write_site(kind, work)
    if not (work / "node_modules" / ".package-lock.json").exists() or _installed(work) != VERSIONS[kind]:
        run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], work)
    out = work / out_dir
    if kind == "vitepress":
        run(["npx", "--no-install", "vitepress", "build", "docs", "--outDir", str(out)], work, env)
    else:
        run(["npx", "--no-install", "docusaurus", "build", "--out-dir", str(out)], work, env)
    return out


def _installed(work: Path) -> dict[str, str]:
    lock = json.loads((work / "node_modules" / ".package-lock.json").read_text())
    return {name: lock["packages"].get(f"node_modules/{name}", {}).get("version", "")
            for name in VERSIONS[work.name]}


def site_links(files: list[SourceFile]) -> set[str]:
    """The paths the site's own pages link to (its sidebars and navbars)."""
    links: set[str] = set()
    for f in files:
        doc = lxml.html.fromstring(f.path.read_bytes())
        for href in doc.xpath("//a/@href"):
            parts = urlsplit(href)
            if not parts.scheme and parts.path.startswith("/"):
                links.add(parts.path)
    return links


def measure(variant: str, out: Path) -> tuple[dict[str, Any], list[Page]]:
    """What the extraction makes of a build (printed), and the pages."""
    kind = VARIANTS[variant][0]
    files, warnings = collect([Source(out, "/")], max_pages=1000)
    extracted: list[tuple[SourceFile, Page]] = []
    skipped: list[str] = []
    for f in files:
        try:
            extracted.append((f, extract(f.path.read_bytes(), f.url, f.kind, None)))
        except PageSkipped as exc:
            skipped.append(f"{f.rel}: {exc}")
    links = site_links(files)
    missing: list[str] = []
    glyphs: list[str] = []
    for f, page in extracted:
        doc = lxml.html.fromstring(f.path.read_bytes())
        ids = set(doc.xpath("//@id")) | set(doc.xpath("//a/@name"))
        for s in page.sections:
            if "#" in s.url and s.url.split("#", 1)[1] not in ids:
                missing.append(s.url)
            for h in s.headings:
                if any(g in h for g in ("¶", "#", "\u200b", "\u00a7")) or h != h.strip():
                    glyphs.append(repr(h))
    text = "\n".join(" ".join([p.title, *s.headings, s.text]) for _, p in extracted for s in p.sections)
    built = "\n".join(html.unescape(f.path.read_text(encoding="utf-8")) for f in files)
    result: dict[str, Any] = {
        "build": variant, "versions": VERSIONS[kind], "pages": len(extracted),
        "sections": sum(len(p.sections) for _, p in extracted), "skipped": skipped, "walk_warnings": warnings,
        "anchors_missing": missing, "headings_with_glyphs": glyphs,
        "chrome_found": [c for c in CHROME[kind] if c in text],
        "chrome_not_in_build": [c for c in CHROME[kind] if c not in built],
        # informational: a clean link needs the host to add .html (or a trailing slash); the file's URL does not
        "page_urls_unlike_the_sites_links": sorted(p.url for _, p in extracted if p.url not in links),
    }
    print(f"\n== {variant} {VERSIONS[kind]}: {out}")
    for key, value in result.items():
        print(f"{key}: {value}")
    for _, page in extracted:
        print(f"-- {page.url}  title={page.title!r}")
        for s in page.sections:
            print(f"   {s.url:55} {' > '.join(s.headings)!s:60} | {s.text[:70]!r}")
    return result, [p for _, p in extracted]


def browse(out: Path, found: list[Page]) -> list[str]:
    """Open every section URL in Chromium from a plain static server (no rewriting, as the dumbest host) and
    wait for the client's router to take over; the URLs that show a not-found page or lack their anchor."""
    import functools
    import http.server
    import threading

    from playwright.sync_api import sync_playwright

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(out)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{server.server_address[1]}"
    bad: list[str] = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium")
            tab = browser.new_page()
            for page in found:
                for url in dict.fromkeys(s.url for s in page.sections):
                    tab.goto("about:blank")  # else a second anchor of the same page only scrolls (no response)
                    response = tab.goto(origin + url, wait_until="networkidle")
                    tab.wait_for_timeout(300)  # the router's render after hydration
                    anchor = url.split("#", 1)[1] if "#" in url else None
                    body = tab.inner_text("body")
                    if (response is None or response.status != 200 or "Page Not Found" in body
                            or (anchor and not tab.evaluate("a => !!document.getElementById(a)", anchor))):
                        bad.append(url)
            browser.close()
    finally:
        server.shutdown()
    return bad


def copy_fixtures(kind: str, out: Path, dest: Path) -> None:
    """Copy the telling pages of a build, byte for byte, into ``dest/kind/``."""
    for rel in FIXTURES[kind]:
        target = dest / kind / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / rel, target)
    print(f"fixtures: {', '.join(FIXTURES[kind])} -> {dest / kind}")


def main() -> None:
    """Build (unless ``--skip-build``), measure and print; optionally copy the fixtures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip-build", action="store_true", help="measure the last builds again")
    parser.add_argument("--only", choices=sorted(VARIANTS), action="append", help="one build (repeatable)")
    parser.add_argument("--browser", action="store_true",
                        help="also open every section URL in Chromium (a plain static server)")
    parser.add_argument("--fixtures", type=Path, help="copy the telling pages of the default builds here")
    args = parser.parse_args()
    results = []
    for variant in args.only or list(VARIANTS):
        kind, _, out_dir = VARIANTS[variant]
        out = CACHE / kind / out_dir if args.skip_build else build(variant)
        result, found = measure(variant, out)
        if args.browser:
            result["urls_failing_in_a_browser"] = browse(out, found)
            print("urls_failing_in_a_browser:", result["urls_failing_in_a_browser"])
        results.append(result)
        if args.fixtures and variant == kind:
            copy_fixtures(kind, out, args.fixtures)
    bad = [r["build"] for r in results if r["anchors_missing"] or r["headings_with_glyphs"] or r["chrome_found"]
           or r["chrome_not_in_build"] or r.get("urls_failing_in_a_browser")]
    print("\nresult:", "problems in " + ", ".join(bad) if bad else "clean")
    save("docs_generators", {"builds": results, "problems_in": bad})


if __name__ == "__main__":
    main()

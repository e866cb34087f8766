"""Source folders → the pages to index, each with its URL; bounded.

A source is a folder (or one file) and the base URL its pages are served under. ``.html``/``.htm`` files are
built pages: ``guide/theming/index.html`` is served as ``<base>guide/theming/`` (directory URLs, as MkDocs,
VitePress and Docusaurus link them) and ``x.html`` as ``<base>x.html`` (a template fragment among them, such as
a theme override kept beside Markdown sources, is told by its content when it is read, and skipped:
``extract.NotAPage``). ``.md``/``.markdown`` files are sources: with ``url_style="directory"`` (MkDocs'
default) ``guide/theming.md`` is ``<base>guide/theming/`` and ``index.md``/``README.md`` their folder; with
``"html"`` they are ``<base>guide/theming.html``.

Bounds: folders and files whose names start with ``.``, ``node_modules``, Sphinx's ``_static``/``_sources``
and the generators' own search, index and 404 pages are not pages; ``exclude`` globs (matched against the path
relative to the source) leave out more. A symlinked folder is followed only when it resolves inside the source
folder and was not walked already (so a loop ends); a symlinked file is read wherever it points. More than
``max_pages`` pages is an error before anything is indexed; folders deeper than ``MAX_DEPTH`` are not walked.

Markdown sources are read as MkDocs reads them (URLs above, anchors in ``markdown_source``). Docusaurus and
VitePress make other URLs and anchors from the same files (github-slugger or VitePress' own slugify, ``slug:``
and ``id:`` front matter, numeric prefixes dropped, ``.mdx`` pages), so a source folder with Markdown (or
``.mdx``) files that is evidently theirs is an error naming the fix, index the built site: a
``docusaurus.config.{js,ts,mjs,cjs,mts,cts}`` or a ``.vitepress/`` folder at or above the folder, or ``.mdx``
files in it (``ForeignMarkdown``; ``markdown_anyway`` indexes them as MkDocs' all the same).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal
from urllib.parse import quote

from .limits import MAX_DEPTH

Kind = Literal["html", "markdown"]
UrlStyle = Literal["directory", "html"]
URL_STYLES: tuple[UrlStyle, ...] = ("directory", "html")

#: The page files a source folder holds, by suffix.
PAGE_KINDS: dict[str, Kind] = {".html": "html", ".htm": "html", ".md": "markdown", ".markdown": "markdown"}
#: Folders that never hold documentation pages (assets, sources the generators copy, caches).
SKIP_DIRS = frozenset({"node_modules", "_static", "_sources", "__pycache__"})
#: Pages the generators write that are not documentation (search pages, generated indexes, not-found pages).
#: Pages no reader asks about: error and search pages, Sphinx's general index (split by letter with
#: ``html_split_index``: ``genindex-A.html`` … ``genindex-all.html``, lists of terms that outrank real sections) and
#: module index.
DEFAULT_EXCLUDES: tuple[str, ...] = ("404.html", "search.html", "genindex.html", "genindex-*.html", "py-modindex.html",
                                     "search/index.html", "404/index.html")


class WalkError(Exception):
    """A source cannot be indexed as asked (missing folder, too many pages); the message says what to change."""


class ForeignMarkdown(WalkError):
    """Markdown sources of a Docusaurus or VitePress site: their URLs and anchors would be wrong (see above)."""


#: The config files that make a folder a Docusaurus project.
DOCUSAURUS_CONFIGS = tuple(f"docusaurus.config.{ext}" for ext in ("js", "ts", "mjs", "cjs", "mts", "cts"))


@dataclass(frozen=True, slots=True)
class Source:
    """A folder (or file) of pages and the base URL they are served under (ends with ``/``)."""

    path: Path
    base_url: str = "/"
    url_style: UrlStyle = "directory"


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One page to index."""

    path: Path
    #: The path relative to its source, with ``/`` separators.
    rel: str
    kind: Kind
    url: str


def normalize_base(base_url: str) -> str:
    """A base URL ending with ``/`` (``ValueError`` for an empty one or one with a query or fragment)."""
    base = base_url.strip()
    if not base or "?" in base or "#" in base or any(c.isspace() for c in base):
        raise ValueError(f"base URL {base_url!r} must be a path or an http(s) URL without query or fragment")
    return base if base.endswith("/") else base + "/"


def page_url(rel: str, kind: Kind, base_url: str, url_style: UrlStyle = "directory") -> str:
    """The URL a page file is served under (see the module's docstring)."""
    p = PurePosixPath(rel)
    if kind == "html":
        parts = list(p.parts)
        if p.name in ("index.html", "index.htm"):
            parts = parts[:-1]
            tail = "/" if parts else ""
        else:
            tail = ""
    else:
        stem = p.with_suffix("")
        if stem.name in ("index", "README") and url_style == "directory":
            parts, tail = list(stem.parts[:-1]), "/"
        elif url_style == "directory":
            parts, tail = list(stem.parts), "/"
        else:
            parts, tail = list(stem.with_suffix(".html").parts), ""
        if not parts:
            tail = ""
    path = "/".join(quote(part) for part in parts)
    return base_url + path + (tail if path else "")


def collect(sources: list[Source], *, max_pages: int, excludes: tuple[str, ...] = (),
            markdown_anyway: bool = False) -> tuple[list[SourceFile], list[str]]:
    """Every page of the sources in a stable order, and warning lines (``WalkError`` when a bound is passed,
    ``ForeignMarkdown`` for a Docusaurus or VitePress site's Markdown unless ``markdown_anyway``)."""
    pages: list[SourceFile] = []
    warnings: list[str] = []
    excluded = exclusion(DEFAULT_EXCLUDES + tuple(excludes))

    def too_many() -> WalkError:
        return WalkError(f"more than {max_pages} pages under {', '.join(str(s.path) for s in sources)} "
                         "(--max-pages); index a smaller folder, --exclude some, or raise --max-pages")
    for source in sources:
        root = source.path
        if not root.exists():
            raise WalkError(f"{root}: no such file or folder")
        if root.is_file():
            kind = PAGE_KINDS.get(root.suffix.lower())
            if kind is None:
                raise WalkError(f"{root}: not a page (.html, .htm, .md or .markdown)")
            url = page_url(root.name, kind, source.base_url, source.url_style)
            if kind == "markdown" and not markdown_anyway:
                _refuse_foreign_markdown(root, root.parent, 0)
            pages.append(SourceFile(root, root.name, kind, url))
            continue
        real_root = root.resolve()
        first_page = len(pages)
        mdx = 0
        seen_dirs = {_dir_id(real_root)}
        stack: list[tuple[Path, str, int]] = [(root, "", 0)]
        while stack:
            folder, rel_folder, depth = stack.pop()
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError as exc:
                warnings.append(f"{folder}: cannot list ({exc.strerror or exc}); skipped")
                continue
            files: list[SourceFile] = []
            folders: list[tuple[os.DirEntry[str], str]] = []
            for entry in entries:
                name = entry.name
                if name.startswith("."):
                    continue
                rel = f"{rel_folder}{name}"
                try:
                    is_dir = entry.is_dir()  # follows a symlink
                except OSError:
                    continue
                if is_dir:
                    if name not in SKIP_DIRS and not excluded(rel + "/"):
                        folders.append((entry, rel))
                    continue
                suffix = os.path.splitext(name)[1].lower()
                kind = PAGE_KINDS.get(suffix)
                if kind is None and suffix == ".mdx" and not excluded(rel):
                    mdx += 1  # not read, but it tells whose sources these are
                if kind is None or excluded(rel):
                    continue
                if len(pages) + len(files) >= max_pages:
                    raise too_many()
                files.append(SourceFile(Path(entry.path), rel, kind, page_url(rel, kind, source.base_url,
                                                                               source.url_style)))
            # Real folders first, so a symlink to one of them is the name skipped, not the folder's own.
            keep: dict[str, tuple[os.DirEntry[str], str]] = {}
            for entry, rel in sorted(folders, key=lambda f: f[0].is_symlink()):
                if depth + 1 > MAX_DEPTH:
                    warnings.append(f"{entry.path}: deeper than {MAX_DEPTH} folders; not walked")
                    continue
                target = Path(entry.path).resolve()
                if entry.is_symlink() and not target.is_relative_to(real_root):
                    warnings.append(f"{entry.path}: a symlink to a folder outside {root}; not followed")
                    continue
                ident = _dir_id(target)
                if ident in seen_dirs:
                    continue  # a loop, or a folder walked under another name
                seen_dirs.add(ident)
                keep[rel] = (entry, rel)
            for entry, rel in sorted(keep.values(), key=lambda f: f[1], reverse=True):
                stack.append((Path(entry.path), rel + "/", depth + 1))
            pages.extend(files)
        if not markdown_anyway and (mdx or any(p.kind == "markdown" for p in pages[first_page:])):
            _refuse_foreign_markdown(root, root, mdx)
    return pages, warnings


#: The kinds of site whose Markdown sources are refused, as a message names them.
FOREIGN_SITES: dict[str, str] = {"docusaurus": "a Docusaurus site", "vitepress": "a VitePress site",
                                 "mdx": "an MDX site"}
#: Why a Docusaurus or VitePress site's Markdown (or MDX) is not indexed as sources, by kind of site.
FOREIGN_WHY: dict[str, str] = {
    "docusaurus": "Docusaurus makes its own page URLs (slug: and id: front matter, numeric prefixes dropped, .mdx "
                  "pages) and heading anchors (github-slugger), which this index cannot compute from the Markdown: "
                  "answers would link to pages and anchors that do not exist",
    "vitepress": "VitePress makes its own heading anchors (its slugify) and page URLs (.html, or none with "
                 "cleanUrls), which this index cannot compute from the Markdown: answers would link to anchors that "
                 "do not exist",
    "mdx": "this index does not read MDX (Docusaurus and other React sites), and such a site makes its own page URLs "
           "and anchors",
}


def _refuse_foreign_markdown(source: Path, folder: Path, mdx: int) -> None:
    """``ForeignMarkdown`` when the Markdown at ``source`` is a Docusaurus or VitePress site's (see the module's
    docstring); ``folder`` is where to start looking for their config, upwards; ``mdx``: .mdx files found."""
    anyway = "; or pass --markdown-anyway to index these sources with MkDocs' URLs and anchors all the same"
    for where in (folder.absolute(), *folder.absolute().parents):
        config = next((where / name for name in DOCUSAURUS_CONFIGS if (where / name).is_file()), None)
        if config is not None:
            raise ForeignMarkdown(
                f"{source}: Markdown sources of {FOREIGN_SITES['docusaurus']} ({config}). {FOREIGN_WHY['docusaurus']}. "
                f"Index the built site instead: build it (npm run build in {where}) "
                f"and index {where / 'build'} with the URL it is served under ({where / 'build'}=https://docs."
                "example.com/)" + anyway)
        if (where / ".vitepress").is_dir():
            raise ForeignMarkdown(
                f"{source}: Markdown sources of {FOREIGN_SITES['vitepress']} ({where / '.vitepress'}). "
                f"{FOREIGN_WHY['vitepress']}. "
                f"Index the built site instead: build it (npx vitepress build {where}) and index "
                f"{where / '.vitepress' / 'dist'} (its outDir) with the URL it is served under" + anyway)
    if mdx:
        raise ForeignMarkdown(
            f"{source}: {mdx} .mdx files: {FOREIGN_WHY['mdx']}. Index the built site instead (its build output "
            "folder, with the URL it is served under)" + anyway)


def _dir_id(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def exclusion(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    """A test of a relative path (folders end with ``/``) against the globs: a glob with a ``/`` matches the
    path from the source folder, one without matches a file or folder name anywhere."""
    whole = [fnmatch.translate(p) for p in patterns if "/" in p]
    whole += [fnmatch.translate(p.rstrip("/")) for p in patterns if p.endswith("/")]
    names = [fnmatch.translate(p) for p in patterns if "/" not in p]
    rx_whole = re.compile("|".join(whole)) if whole else None
    rx_name = re.compile("|".join(names)) if names else None

    def excluded(rel: str) -> bool:
        bare = rel.rstrip("/")
        if rx_whole is not None and (rx_whole.match(rel) or rx_whole.match(bare)):
            return True
        return rx_name is not None and bool(rx_name.match(bare.rsplit("/", 1)[-1]))

    return excluded

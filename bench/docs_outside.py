"""Docs search on documentation nobody here wrote (issue 33: "checked on a real documentation corpus").

Three corpora, each with readers' questions written from the sections' text before any search ran against them
(``bench/outside_probes/README.md``). Two are Markdown sources pinned to a commit, indexed under the site's own
base URL (directory URLs, as MkDocs builds them); the third is built HTML as a Debian package installs it, the
kind most site owners index (``extract.py``'s path):

- ``fastapi``: the English FastAPI docs (MIT), ``docs/en/docs`` of https://github.com/fastapi/fastapi at
  ``c3f316b7e814667e8ee81e03a7330d00ee61e45c``, 155 Markdown files; ``bench/outside_probes/fastapi.jsonl``, 100
  answerable questions and 10 the docs do not answer. Used since to choose the hybrid fusion's settings
  (commit a8d42e3), so no longer held out.
- ``httpx``: the HTTPX docs (BSD-3-Clause), ``docs`` of https://github.com/encode/httpx at
  ``ae1b9f66238f75ced3ced5e4485408435de10768``, 23 Markdown files; ``bench/outside_probes/httpx.jsonl``, 48
  answerable and 8 unanswerable. Held out: check a retrieval change on it once, do not choose settings on it.
- ``python311``: the CPython 3.11.2 documentation (PSF License) as Debian 12's package ``python3.11-doc``
  ``3.11.2-6+deb12u9`` installs it, ``/usr/share/doc/python3.11/html``: a real ``sphinx-build`` output (the
  python-docs-theme), 530 HTML files, indexed with ``https://docs.python.org/3.11/`` as its base URL;
  ``bench/outside_probes/python311.jsonl``, 63 answerable and 10 unanswerable. Held out, as httpx.

For each corpus:

1. Indexing, as ``autopilot-relay index`` run as a subprocess (``docs_hybrid.run_index``): pages, sections,
   seconds, sections/s, peak RSS, CPU seconds; BM25 alone, then with the embedding model (windows, windows/s).
   With the section lengths in words (median, p90, max), beside this project's ``docs/*.md``, whose long
   sections make its indexing slower per section.
2. Retrieval: hit@1, hit@5, MRR@10 and page@5 (the expected page among the first five distinct pages) for BM25,
   the vectors alone and hybrid; the top-score threshold that best separates the unanswerable questions
   (``docs_search.best_threshold``: BM25's score and BM25's score per query term, the vectors' cosine, the fused
   score) with how many of each side fall under it; and every miss (no expected section in the first five) with
   the first three URLs found.

    python bench/docs_outside.py [--corpora fastapi,httpx,python311] [--root DIR] [--git-dir NAME=GIT_DIR]
                                 [--corpus DIR] [--model DIR | --no-model]

Getting a corpus: its files go to ``<root>/<name>-<commit>`` (``--root``, default
``~/.cache/autopilot-widget/outside``, outside this repository; ``--corpus DIR`` instead, with one corpus), as
``git archive`` writes them (``<corpus>/docs/en/docs/...`` for fastapi). When that folder is missing,
``--git-dir NAME=GIT_DIR`` (a clone's ``.git`` or a bare repository that has the commit) is where the bench
extracts them from itself; by hand, for fastapi (httpx alike, with its repository, commit and folder)::

    git clone --filter=blob:none --no-checkout https://github.com/fastapi/fastapi /tmp/fastapi
    mkdir -p ~/.cache/autopilot-widget/outside/fastapi-c3f316b7e814667e8ee81e03a7330d00ee61e45c
    git -C /tmp/fastapi archive c3f316b7e814667e8ee81e03a7330d00ee61e45c docs/en/docs \\
        | tar -x -C ~/.cache/autopilot-widget/outside/fastapi-c3f316b7e814667e8ee81e03a7330d00ee61e45c

The Markdown files are checked against a fingerprint of the pinned commit's (a different set of files is an
error: the probes' URLs are that commit's).

Getting the Debian corpus: ``apt-get install python3.11-doc`` on Debian 12 (bookworm) puts it in
``/usr/share/doc/python3.11/html``, where the bench looks (``--corpus DIR`` names another folder). Its HTML files
are checked against a fingerprint of that package version's, so another version is an error naming the installed
one; ``apt-get install python3.11-doc=3.11.2-6+deb12u9`` while the archive has it, else the ``.deb`` of that
version from https://snapshot.debian.org/package/python3.11/3.11.2-6+deb12u9/ unpacked anywhere (also on a
machine that is not Debian)::

    dpkg-deb -x python3.11-doc_3.11.2-6+deb12u9_all.deb /tmp/python311-doc
    python bench/docs_outside.py --corpora python311 --corpus /tmp/python311-doc/usr/share/doc/python3.11/html

The model folder is ``--model``, else ``AUTOPILOT_EMBEDDINGS_MODEL``,
else ``~/.cache/autopilot-widget/embeddings`` (``autopilot-relay embeddings fetch``); without one (or with
``--no-model``) the bench measures BM25 alone. Goal (issue 33): hit@5 >= 0.9. Figures go to
``bench/results/docs_outside-<time>.json`` with the machine's load (bench/results.py).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NamedTuple, TypedDict

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from docs_hybrid import figures, run_index, windows_of  # noqa: E402
from docs_search import best_threshold, hit5_as_written, pooled_of  # noqa: E402
from results import save, stats  # noqa: E402

from widget.relay.docs import open_docs_index  # noqa: E402
from widget.relay.docs.embeddings import FetchError, fetch  # noqa: E402
from widget.relay.docs.eval import DEPTH, Probe, load_probes, url_matches  # noqa: E402
from widget.relay.docs.query import terms  # noqa: E402
from widget.relay.docs.search import DocHit  # noqa: E402

OUTSIDE = ROOT / "bench" / "outside_probes"
APP = "outside"
DEFAULT_ROOT = Path.home() / ".cache" / "autopilot-widget" / "outside"


class Corpus(NamedTuple):
    """A documentation corpus of Markdown sources pinned to a commit, and its probes."""

    repo: str
    commit: str
    folder: str
    base_url: str
    #: sha256 over the sorted Markdown files' ``relative path NUL sha256(content) LF`` (``fingerprint``).
    fingerprint: str
    markdown_files: int
    probes: Path
    held_out: bool


class DebianCorpus(NamedTuple):
    """A folder of built HTML that a Debian package installs, pinned to the package's version, and its probes."""

    package: str
    version: str
    #: where the package installs the pages (``--corpus`` names another folder with the same files)
    folder: Path
    base_url: str
    #: sha256 over the sorted HTML files' ``relative path NUL sha256(content) LF`` (``fingerprint``).
    fingerprint: str
    html_files: int
    probes: Path
    held_out: bool


CORPORA: dict[str, Corpus | DebianCorpus] = {
    "fastapi": Corpus("https://github.com/fastapi/fastapi", "c3f316b7e814667e8ee81e03a7330d00ee61e45c",
                      "docs/en/docs", "https://fastapi.tiangolo.com/",
                      "e85aaec9349c923a020223d912362ebf3ade6a0f7a2842ba773d1dd6b08e1eb9", 155,
                      OUTSIDE / "fastapi.jsonl", held_out=False),
    "httpx": Corpus("https://github.com/encode/httpx", "ae1b9f66238f75ced3ced5e4485408435de10768", "docs",
                    "https://www.python-httpx.org/",
                    "8903542c9fd54a43611800bcdff85b4050d7cc3eadcfea16b1dbd875a064ba52", 23,
                    OUTSIDE / "httpx.jsonl", held_out=True),
    "python311": DebianCorpus("python3.11-doc", "3.11.2-6+deb12u9", Path("/usr/share/doc/python3.11/html"),
                              "https://docs.python.org/3.11/",
                              "07a43c4a3ae67cba9f09167897cfb056c2a84a4ca0de4d634244f3db3a8a6aee", 530,
                              OUTSIDE / "python311.jsonl", held_out=True),
}

Search = Callable[[str], Awaitable[list[DocHit]]]


class Miss(TypedDict):
    """An answerable probe with no expected section among the first five."""

    q: str
    rank: int | None
    top3: list[str]


def fingerprint(docs: Path, pattern: str = "*.md") -> tuple[int, str]:
    """How many files matching ``pattern`` a folder has, and their fingerprint (see ``Corpus.fingerprint``)."""
    h = hashlib.sha256()
    files = sorted(p for p in docs.rglob(pattern) if p.is_file())
    for p in files:
        h.update(p.relative_to(docs).as_posix().encode() + b"\0"
                 + hashlib.sha256(p.read_bytes()).hexdigest().encode() + b"\n")
    return len(files), h.hexdigest()


def extract(c: Corpus, git_dir: Path, dest: Path) -> None:
    """``git archive`` of the corpus's folder at its commit from ``git_dir`` into ``dest`` (SystemExit saying what
    failed)."""
    git = ["git", "--git-dir", str(git_dir)]
    has = subprocess.run([*git, "cat-file", "-e", f"{c.commit}^{{commit}}"], capture_output=True)
    if has.returncode != 0:
        raise SystemExit(f"{git_dir} does not have commit {c.commit}; fetch it there first "
                         f"(git --git-dir {git_dir} fetch {c.repo} {c.commit})")
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.Popen([*git, "archive", c.commit, c.folder], stdout=subprocess.PIPE)
    untar = subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, capture_output=True)
    if archive.wait() != 0 or untar.returncode != 0:
        raise SystemExit(f"extracting {c.folder} at {c.commit} from {git_dir} failed: "
                         f"{untar.stderr.decode()[-500:]}")


def corpus_folder(c: Corpus, dest: Path, git_dir: Path | None) -> Path:
    """The corpus's docs folder under ``dest``, extracted from ``git_dir`` when missing; checked against the pin."""
    docs = dest / c.folder
    if not docs.is_dir():
        if git_dir is None:
            raise SystemExit(f"no corpus at {docs}: give --git-dir NAME=GIT_DIR (a clone of {c.repo} with commit "
                             f"{c.commit}) to extract it, or see this script's docstring for the commands")
        extract(c, git_dir, dest)
        print(f"# extracted {c.folder} at {c.commit[:12]} from {git_dir} into {dest}", flush=True)
    count, digest = fingerprint(docs)
    if digest != c.fingerprint:
        raise SystemExit(f"{docs}: {count} Markdown files whose fingerprint is {digest[:16]}…, not those of "
                         f"{c.repo} at {c.commit} ({c.markdown_files} files, {c.fingerprint[:16]}…); the probes' "
                         "URLs are that commit's: extract it again into an empty folder")
    return docs


def installed_version(package: str) -> str | None:
    """The version of a Debian package dpkg says is installed (None when it is not, or there is no dpkg)."""
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Status}\t${Version}", package], capture_output=True,
                             text=True)
    except OSError:
        return None
    status, _, version = out.stdout.partition("\t")
    return version if out.returncode == 0 and status.endswith(" installed") and version else None


def debian_folder(c: DebianCorpus, docs: Path | None) -> Path:
    """The Debian corpus's folder (``docs``, else where the package installs it), checked against the pin."""
    how = (f"apt-get install {c.package}={c.version} (Debian 12 bookworm; or unpack that version's .deb with "
           "dpkg-deb -x and give --corpus: see this script's docstring)")
    folder = docs or c.folder
    if not folder.is_dir():
        raise SystemExit(f"no corpus at {folder}: {how}")
    count, digest = fingerprint(folder, "*.html")
    if digest != c.fingerprint:
        installed = installed_version(c.package) if docs is None else None
        raise SystemExit(f"{folder}: {count} HTML files whose fingerprint is {digest[:16]}…, not those of "
                         f"{c.package} {c.version} ({c.html_files} files, {c.fingerprint[:16]}…)"
                         f"{f'; {c.package} {installed} is installed' if installed else ''}; the probes' URLs "
                         f"and answers are that version's: {how}")
    return folder


def section_words(db: Path, app: str) -> dict[str, float | int | None]:
    """Words per live section of an app's index (median, p90, …; ``results.stats``)."""
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT body FROM docs_sections WHERE app_id = ? AND live_until IS NULL", (app,))
        return stats(len(body.split()) for (body,) in rows)


async def side(probes: list[Probe], search: Search, base_url: str, pooled: dict[str, set[str]]) -> dict[str, Any]:
    """One search side over the probes: the figures (hit@5 also with the expected URLs as first written, without
    the ``pooled`` ones), the top scores (for the threshold) and the misses."""
    ranked: list[tuple[str, list[str], list[str]]] = []
    ranks: list[int | None] = []
    pages: list[bool] = []
    tops_answerable: list[float] = []
    tops_unanswerable: list[float] = []
    per_term_answerable: list[float] = []
    per_term_unanswerable: list[float] = []
    misses: list[Miss] = []
    for p in probes:
        hits = await search(p.question)
        top = float(hits[0]["score"]) if hits else 0.0
        per_term = top / max(1, len(terms(p.question)))
        if p.expect == "unanswerable":
            tops_unanswerable.append(top)
            per_term_unanswerable.append(per_term)
            continue
        tops_answerable.append(top)
        per_term_answerable.append(per_term)
        urls = [str(h["url"]) for h in hits[:DEPTH]]
        ranked.append((p.question, p.expect, urls[:5]))
        rank = next((i + 1 for i, u in enumerate(urls) if any(url_matches(u, e) for e in p.expect)), None)
        ranks.append(rank)
        first_pages = list(dict.fromkeys(u.split("#", 1)[0] for u in urls))[:5]
        pages.append(any(e.split("#", 1)[0] in first_pages for e in p.expect))
        if rank is None or rank > 5:
            # The URLs as the report prints them: without the corpus's base.
            top3 = ["/" + u.removeprefix(base_url) if u.startswith(base_url) else u for u in urls[:3]]
            misses.append({"q": p.question, "rank": rank, "top3": top3})
    t, caught, lost = best_threshold(tops_answerable, tops_unanswerable)
    tn, caught_n, lost_n = best_threshold(per_term_answerable, per_term_unanswerable)
    return {
        **figures(ranks, pages), "hit@5_as_written": hit5_as_written(ranked, pooled),
        "threshold": {"score": round(t, 4), "unanswerable_below": caught, "answerable_below": lost,
                      "unanswerable": len(tops_unanswerable), "answerable": len(tops_answerable)},
        "threshold_per_term": {"score": round(tn, 4), "unanswerable_below": caught_n, "answerable_below": lost_n},
        "misses": misses,
    }


def report(name: str, r: dict[str, Any]) -> None:
    """Print one side's figures, its thresholds and its misses."""
    th, tn = r["threshold"], r["threshold_per_term"]
    print(f"{name:8} hit@1 {r['hit@1']:.3f}  hit@5 {r['hit@5']:.3f} (as written {r['hit@5_as_written']:.3f})  "
          f"MRR@10 {r['mrr@10']:.3f}  "
          f"page@5 {r['page@5']:.3f}  | threshold {th['score']}: {th['unanswerable_below']}/{th['unanswerable']} "
          f"unanswerable under it, {th['answerable_below']}/{th['answerable']} answerable lost; per term "
          f"{tn['score']}: {tn['unanswerable_below']} / {tn['answerable_below']}", flush=True)
    for m in r["misses"]:
        print(f"  miss@5 ({'rank ' + str(m['rank']) if m['rank'] else 'not in 10'}): {m['q']}\n"
              f"      -> {', '.join(m['top3'])}", flush=True)


def index_line(label: str, r: dict[str, Any]) -> None:
    """Print one index run's figures."""
    s = r["summary"]
    extra = f", {r['windows']} windows, {r['windows_per_s']} windows/s" if "windows" in r else ""
    print(f"index {label}: {s['pages']} pages, {s['sections']} sections in {r['seconds']} s "
          f"({r['sections_per_s']} sections/s{extra}), peak RSS {r['peak_rss_mb']} MB, CPU {r['cpu_s']} s",
          flush=True)


def words_line(label: str, w: dict[str, Any]) -> None:
    """Print a section-length distribution."""
    print(f"section words, {label}: {w['n']} sections, median {w['median']}, p90 {w['p90']}, max {w['max']}",
          flush=True)


def model_folder(model: str | None) -> str | None:
    """The embedding model's folder when it is made already (None, with the reason printed, when not)."""
    if not model:
        return None
    if not (Path(model).expanduser() / "model.onnx").is_file():
        print(f"# no embedding model at {model} (autopilot-relay embeddings fetch makes it); BM25 alone", flush=True)
        return None
    try:
        fetch(Path(model), [], download=False, log=lambda line: print(f"# {line}", file=sys.stderr))
    except (FetchError, OSError) as exc:
        print(f"# no embedding model at {model} ({exc}); BM25 alone", flush=True)
        return None
    return model


async def measure(name: str, c: Corpus | DebianCorpus, docs: Path, model: str | None, tmp: Path) -> dict[str, Any]:
    """Index one corpus (BM25, then with the model) and score its probes on each side."""
    probes = load_probes(c.probes)
    pooled = pooled_of(c.probes)
    out: dict[str, Any]
    if isinstance(c, Corpus):
        pinned = f"{c.repo} {c.folder} at {c.commit[:12]}"
        out = {"repo": c.repo, "commit": c.commit, "folder": c.folder, "base_url": c.base_url,
               "markdown_files": c.markdown_files, "held_out": c.held_out,
               "probes": c.probes.relative_to(ROOT).as_posix()}
    else:
        pinned = f"Debian package {c.package} {c.version}, built HTML in {docs}"
        out = {"package": c.package, "version": c.version, "folder": str(docs), "base_url": c.base_url,
               "html_files": c.html_files, "fingerprint": c.fingerprint, "held_out": c.held_out,
               "probes": c.probes.relative_to(ROOT).as_posix()}
    print(f"## {name}: {pinned}, {len(probes)} probes "
          f"({sum(p.expect == 'unanswerable' for p in probes)} unanswerable)"
          f"{', held out' if c.held_out else ', used to choose settings (not held out)'}", flush=True)
    index_args = ["--app", APP, f"{docs}={c.base_url}"]
    bm25_db = tmp / f"{name}-bm25.sqlite3"
    out["index_bm25"] = run_index(index_args, bm25_db, None)
    index_line("BM25", out["index_bm25"])
    out["section_words"] = section_words(bm25_db, APP)
    words_line(name, out["section_words"])
    bm25: Any = open_docs_index(None, str(bm25_db))
    try:
        out["bm25"] = await side(probes, lambda q: bm25.search(APP, q, limit=DEPTH), c.base_url, pooled)
    finally:
        await bm25.close()
    if model:
        hybrid_db = tmp / f"{name}-hybrid.sqlite3"
        out["index_hybrid"] = r = run_index(index_args, hybrid_db, model)
        r["windows"] = await windows_of(hybrid_db, APP, None)
        r["windows_per_s"] = round(r["windows"] / r["seconds"], 1)
        index_line("hybrid", r)
        idx: Any = open_docs_index(None, str(hybrid_db), embeddings_model=model)
        try:
            out["vectors"] = await side(probes, lambda q: idx.vector_search(APP, q, limit=DEPTH), c.base_url, pooled)
            out["hybrid"] = await side(probes, lambda q: idx.search(APP, q, limit=DEPTH), c.base_url, pooled)
        finally:
            await idx.close()
    for label in ("bm25", "vectors", "hybrid"):
        if label in out:
            report(label, out[label])
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--corpora", default=",".join(CORPORA), help=f"comma-separated subset of {', '.join(CORPORA)}")
    ap.add_argument("--root", type=Path, default=DEFAULT_ROOT,
                    help="where the Markdown corpora are (each in <name>-<commit>, as git archive writes it)")
    ap.add_argument("--corpus", type=Path, help="the one corpus's folder instead (with a single --corpora; for "
                    "python311, the folder of its HTML files)")
    ap.add_argument("--git-dir", action="append", default=[], metavar="NAME=GIT_DIR",
                    help="a git directory with that corpus's commit, to extract it from when its folder is missing")
    ap.add_argument("--model", default=os.environ.get("AUTOPILOT_EMBEDDINGS_MODEL")
                    or str(Path.home() / ".cache" / "autopilot-widget" / "embeddings"))
    ap.add_argument("--no-model", action="store_true", help="BM25 alone")
    args = ap.parse_args()
    names = [n.strip() for n in args.corpora.split(",") if n.strip()]
    if not names or any(n not in CORPORA for n in names):
        ap.error(f"--corpora: a comma-separated subset of {', '.join(CORPORA)}, not {args.corpora!r}")
    if args.corpus and len(names) != 1:
        ap.error("--corpus names the folder of one corpus: give a single --corpora with it")
    git_dirs: dict[str, Path] = {}
    for item in args.git_dir:
        name, sep, path = item.partition("=")
        git_corpora = [n for n, c in CORPORA.items() if isinstance(c, Corpus)]
        if not sep or name not in git_corpora or not path:
            ap.error(f"--git-dir is NAME=GIT_DIR with NAME one of {', '.join(git_corpora)}, not {item!r}")
        git_dirs[name] = Path(path)
    folders: dict[str, Path] = {}
    for n in names:
        c = CORPORA[n]
        if isinstance(c, Corpus):
            folders[n] = corpus_folder(c, (args.corpus or args.root / f"{n}-{c.commit}").expanduser(), git_dirs.get(n))
        else:
            folders[n] = debian_folder(c, args.corpus.expanduser() if args.corpus else None)
    model = None if args.no_model else model_folder(args.model)
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} "
          f"cores; model {model or '-'}", flush=True)
    result: dict[str, Any] = {"model": model, "cores": os.cpu_count(), "corpora": {}}
    with tempfile.TemporaryDirectory(prefix="bench-outside-") as tmp_text:
        tmp = Path(tmp_text)
        # This project's own docs as the demo serves them, for their section lengths alone.
        own = tmp / "own.sqlite3"
        run_index(["--app", "docs", f"{ROOT / 'docs'}=/docs/", "--url-style", "html"], own, None)
        result["own_docs_section_words"] = section_words(own, "docs")
        words_line("this project's docs/*.md", result["own_docs_section_words"])
        for n in names:
            result["corpora"][n] = await measure(n, CORPORA[n], folders[n], model, tmp)
    save("docs_outside", result)


if __name__ == "__main__":
    asyncio.run(main())

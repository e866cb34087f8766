"""Docs search on documentation nobody here wrote (issue 33: "checked on a real documentation corpus").

The corpus is the English FastAPI documentation (MIT): the folder ``docs/en/docs`` of
https://github.com/fastapi/fastapi at commit ``c3f316b7e814667e8ee81e03a7330d00ee61e45c`` (2026-08-19), 155
Markdown files, indexed as Markdown sources served under ``https://fastapi.tiangolo.com/`` (directory URLs, as
MkDocs builds them). The probes, ``bench/outside_probes/fastapi.jsonl``, are 100 readers' questions with the
section URLs that answer them and 10 the docs do not answer, written from the sections' text before any search
ran against them (``bench/outside_probes/README.md``): a check that the search is not tuned to this project's own
``bench/docs_probes.jsonl``.

1. Indexing, as ``autopilot-relay index`` run as a subprocess (``docs_hybrid.run_index``): pages, sections,
   seconds, sections/s, peak RSS, CPU seconds; BM25 alone, then with the embedding model (windows, windows/s).
   With the section lengths in words (median, p90, max) of the corpus and of this project's ``docs/*.md``, whose
   long sections make its indexing slower per section.
2. Retrieval: hit@1, hit@5, MRR@10 and page@5 (the expected page among the first five distinct pages) for BM25,
   the vectors alone and hybrid; the top-score threshold that best separates the unanswerable questions
   (``docs_search.best_threshold``: BM25's score and BM25's score per query term, the vectors' cosine, the fused
   score) with how many of each side fall under it; and every miss (no expected section in the first five) with
   the first three URLs found.

    python bench/docs_outside.py [--corpus DIR | --git-dir GIT_DIR] [--model DIR | --no-model]

Getting the corpus: the files go to ``--corpus`` (default ``~/.cache/autopilot-widget/outside/fastapi-<commit>``,
outside this repository), as ``git archive`` writes them (``<corpus>/docs/en/docs/...``). When that folder is
missing, ``--git-dir`` (a clone's ``.git`` or a bare repository that has the commit) is where the bench extracts
them from itself; by hand::

    git clone --filter=blob:none --no-checkout https://github.com/fastapi/fastapi /tmp/fastapi
    mkdir -p ~/.cache/autopilot-widget/outside/fastapi-c3f316b7e814667e8ee81e03a7330d00ee61e45c
    git -C /tmp/fastapi archive c3f316b7e814667e8ee81e03a7330d00ee61e45c docs/en/docs \\
        | tar -x -C ~/.cache/autopilot-widget/outside/fastapi-c3f316b7e814667e8ee81e03a7330d00ee61e45c

The Markdown files are checked against a fingerprint of that commit's (a different set of files is an error: the
probes' URLs are that commit's). The model folder is ``--model``, else ``AUTOPILOT_EMBEDDINGS_MODEL``, else
``~/.cache/autopilot-widget/embeddings`` (``autopilot-relay embeddings fetch``); without one (or with
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
from typing import Any, TypedDict

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from docs_hybrid import figures, run_index, windows_of  # noqa: E402
from docs_search import best_threshold  # noqa: E402
from results import save, stats  # noqa: E402

from widget.relay.docs import open_docs_index  # noqa: E402
from widget.relay.docs.embeddings import FetchError, fetch  # noqa: E402
from widget.relay.docs.eval import DEPTH, Probe, load_probes, url_matches  # noqa: E402
from widget.relay.docs.query import terms  # noqa: E402
from widget.relay.docs.search import DocHit  # noqa: E402

REPO = "https://github.com/fastapi/fastapi"
COMMIT = "c3f316b7e814667e8ee81e03a7330d00ee61e45c"
FOLDER = "docs/en/docs"
BASE_URL = "https://fastapi.tiangolo.com/"
#: sha256 over the sorted Markdown files' ``relative path NUL sha256(content) LF`` (``fingerprint``) at COMMIT.
FINGERPRINT = "e85aaec9349c923a020223d912362ebf3ade6a0f7a2842ba773d1dd6b08e1eb9"
MARKDOWN_FILES = 155
PROBES = ROOT / "bench" / "outside_probes" / "fastapi.jsonl"
APP = "outside"
DEFAULT_CORPUS = Path.home() / ".cache" / "autopilot-widget" / "outside" / f"fastapi-{COMMIT}"

Search = Callable[[str], Awaitable[list[DocHit]]]


class Miss(TypedDict):
    """An answerable probe with no expected section among the first five."""

    q: str
    rank: int | None
    top3: list[str]


def fingerprint(docs: Path) -> tuple[int, str]:
    """How many Markdown files a folder has, and their fingerprint (see ``FINGERPRINT``)."""
    h = hashlib.sha256()
    files = sorted(p for p in docs.rglob("*.md") if p.is_file())
    for p in files:
        h.update(p.relative_to(docs).as_posix().encode() + b"\0"
                 + hashlib.sha256(p.read_bytes()).hexdigest().encode() + b"\n")
    return len(files), h.hexdigest()


def extract(git_dir: Path, corpus: Path) -> None:
    """``git archive`` of FOLDER at COMMIT from ``git_dir`` into ``corpus`` (SystemExit saying what failed)."""
    git = ["git", "--git-dir", str(git_dir)]
    has = subprocess.run([*git, "cat-file", "-e", f"{COMMIT}^{{commit}}"], capture_output=True)
    if has.returncode != 0:
        raise SystemExit(f"{git_dir} does not have commit {COMMIT}; fetch it there first "
                         f"(git --git-dir {git_dir} fetch {REPO} {COMMIT})")
    corpus.mkdir(parents=True, exist_ok=True)
    archive = subprocess.Popen([*git, "archive", COMMIT, FOLDER], stdout=subprocess.PIPE)
    untar = subprocess.run(["tar", "-x", "-C", str(corpus)], stdin=archive.stdout, capture_output=True)
    if archive.wait() != 0 or untar.returncode != 0:
        raise SystemExit(f"extracting {FOLDER} at {COMMIT} from {git_dir} failed: {untar.stderr.decode()[-500:]}")


def corpus_folder(corpus: Path, git_dir: Path | None) -> Path:
    """The pinned docs folder under ``corpus``, extracted from ``git_dir`` when missing; checked against the pin."""
    docs = corpus / FOLDER
    if not docs.is_dir():
        if git_dir is None:
            raise SystemExit(f"no corpus at {docs}: give --git-dir (a clone of {REPO} with commit {COMMIT}) to "
                             "extract it, or see this script's docstring for the commands")
        extract(git_dir, corpus)
        print(f"# extracted {FOLDER} at {COMMIT[:12]} from {git_dir} into {corpus}", flush=True)
    count, digest = fingerprint(docs)
    if digest != FINGERPRINT:
        raise SystemExit(f"{docs}: {count} Markdown files whose fingerprint is {digest[:16]}…, not those of "
                         f"{REPO} at {COMMIT} ({MARKDOWN_FILES} files, {FINGERPRINT[:16]}…); the probes' URLs "
                         "are that commit's: extract it again into an empty folder")
    return docs


def section_words(db: Path, app: str) -> dict[str, float | int | None]:
    """Words per live section of an app's index (median, p90, …; ``results.stats``)."""
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT body FROM docs_sections WHERE app_id = ? AND live_until IS NULL", (app,))
        return stats(len(body.split()) for (body,) in rows)


def short(url: str) -> str:
    """A section URL without the corpus's base (what the report prints)."""
    return "/" + url.removeprefix(BASE_URL) if url.startswith(BASE_URL) else url


async def side(probes: list[Probe], search: Search) -> dict[str, Any]:
    """One search side over the probes: the figures, the top scores (for the threshold) and the misses."""
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
        rank = next((i + 1 for i, u in enumerate(urls) if any(url_matches(u, e) for e in p.expect)), None)
        ranks.append(rank)
        first_pages = list(dict.fromkeys(u.split("#", 1)[0] for u in urls))[:5]
        pages.append(any(e.split("#", 1)[0] in first_pages for e in p.expect))
        if rank is None or rank > 5:
            misses.append({"q": p.question, "rank": rank, "top3": [short(u) for u in urls[:3]]})
    t, caught, lost = best_threshold(tops_answerable, tops_unanswerable)
    out: dict[str, Any] = {
        **figures(ranks, pages),
        "threshold": {"score": round(t, 4), "unanswerable_below": caught, "answerable_below": lost,
                      "unanswerable": len(tops_unanswerable), "answerable": len(tops_answerable)},
        "misses": misses,
    }
    tn, caught_n, lost_n = best_threshold(per_term_answerable, per_term_unanswerable)
    out["threshold_per_term"] = {"score": round(tn, 4), "unanswerable_below": caught_n, "answerable_below": lost_n}
    return out


def report(name: str, r: dict[str, Any]) -> None:
    """Print one side's figures, its thresholds and its misses."""
    th, tn = r["threshold"], r["threshold_per_term"]
    print(f"{name:8} hit@1 {r['hit@1']:.3f}  hit@5 {r['hit@5']:.3f}  MRR@10 {r['mrr@10']:.3f}  "
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


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS,
                    help=f"where {FOLDER} of {REPO} at {COMMIT[:12]} is (as git archive writes it)")
    ap.add_argument("--git-dir", type=Path, help="a git directory with that commit, to extract the corpus from "
                                                 "when --corpus has no files yet")
    ap.add_argument("--probes", type=Path, default=PROBES)
    ap.add_argument("--model", default=os.environ.get("AUTOPILOT_EMBEDDINGS_MODEL")
                    or str(Path.home() / ".cache" / "autopilot-widget" / "embeddings"))
    ap.add_argument("--no-model", action="store_true", help="BM25 alone")
    args = ap.parse_args()
    docs = corpus_folder(args.corpus.expanduser(), args.git_dir)
    probes = load_probes(args.probes)
    model = None if args.no_model else model_folder(args.model)
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} "
          f"cores; corpus {REPO} {FOLDER} at {COMMIT[:12]}; {len(probes)} probes "
          f"({sum(p.expect == 'unanswerable' for p in probes)} unanswerable); model {model or '-'}", flush=True)
    result: dict[str, Any] = {"corpus": {"repo": REPO, "commit": COMMIT, "folder": FOLDER, "base_url": BASE_URL,
                                         "markdown_files": MARKDOWN_FILES},
                              "probes": str(args.probes.resolve().relative_to(ROOT)
                                            if args.probes.resolve().is_relative_to(ROOT) else args.probes),
                              "model": model, "cores": os.cpu_count()}
    index_args = ["--app", APP, f"{docs}={BASE_URL}"]
    with tempfile.TemporaryDirectory(prefix="bench-outside-") as tmp_text:
        tmp = Path(tmp_text)
        # This project's own docs as the demo serves them, for their section lengths alone.
        own = tmp / "own.sqlite3"
        run_index(["--app", "docs", f"{ROOT / 'docs'}=/docs/", "--url-style", "html"], own, None)
        bm25_db = tmp / "bm25.sqlite3"
        result["index_bm25"] = run_index(index_args, bm25_db, None)
        index_line("BM25", result["index_bm25"])
        result["section_words"] = {"outside": section_words(bm25_db, APP), "own_docs": section_words(own, "docs")}
        for label, w in result["section_words"].items():
            print(f"section words, {'FastAPI docs' if label == 'outside' else 'this project docs/*.md'}: "
                  f"{w['n']} sections, median {w['median']}, p90 {w['p90']}, max {w['max']}", flush=True)
        bm25: Any = open_docs_index(None, str(bm25_db))
        try:
            result["bm25"] = await side(probes, lambda q: bm25.search(APP, q, limit=DEPTH))
        finally:
            await bm25.close()
        if model:
            hybrid_db = tmp / "hybrid.sqlite3"
            result["index_hybrid"] = r = run_index(index_args, hybrid_db, model)
            r["windows"] = await windows_of(hybrid_db, APP, None)
            r["windows_per_s"] = round(r["windows"] / r["seconds"], 1)
            index_line("hybrid", r)
            idx: Any = open_docs_index(None, str(hybrid_db), embeddings_model=model)
            try:
                result["vectors"] = await side(probes, lambda q: idx.vector_search(APP, q, limit=DEPTH))
                result["hybrid"] = await side(probes, lambda q: idx.search(APP, q, limit=DEPTH))
            finally:
                await idx.close()
    for name in ("bm25", "vectors", "hybrid"):
        if name in result:
            report(name, result[name])
    save("docs_outside", result)


if __name__ == "__main__":
    asyncio.run(main())

"""The docs index's quality and speed (issue 29 item 7; numbers in docs/performance.md, "The documentation index").

1. Retrieval on this project's own docs (``docs/*.md`` indexed as Markdown sources with the URLs the demo serves
   them under, ``/docs/<name>.html#anchor``) for the probes in ``bench/docs_probes.jsonl`` (each a question with
   the URLs that answer it, or ``"unanswerable"``): hit@1, hit@5 and MRR@10 over the answerable ones (a hit: the
   section's URL is one of the expected; hit@5 also as first written, without the ``pooled`` URLs added after
   judging a miss: bench/outside_probes/README.md), and the score threshold that best separates the unanswerable
   ones (the top hit's score below it: "not in the docs"), with how many of each side it gets right. On SQLite, and on
   PostgreSQL when it is installed.
2. Speed on a synthetic built site (``--pages`` pages of ``--sections`` sections each, MkDocs-Material-like
   chrome around them, words drawn Zipf-like from the docs' own vocabulary): indexing it with
   ``autopilot-relay index`` as a subprocess (pages/s, peak RSS of that process), then search latency (p50, p95
   over ``--queries`` questions, each timed alone, after a warm-up) on SQLite and PostgreSQL.

    python bench/docs_search.py [--pages 10000] [--sections 10] [--queries 300] [--no-pg] [--skip-speed]

Goals: hit@5 >= 0.9; search p95 <= 20 ms (SQLite) and <= 50 ms (PostgreSQL) at 100,000 sections; indexing
>= 100 pages/s; indexing 10,000 pages < 300 MB RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from widget.relay.docs import open_docs_index  # noqa: E402
from widget.relay.docs.indexer import run_index  # noqa: E402
from widget.relay.docs.walk import Source, collect  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from results import save  # noqa: E402

PROBES = ROOT / "bench" / "docs_probes.jsonl"


def load_probes() -> list[dict[str, Any]]:
    return [json.loads(line) for line in PROBES.read_text().splitlines() if line.strip()]


def pooled_of(path: Path) -> dict[str, set[str]]:
    """Per question, the expected URLs a probe file lists under ``pooled``: sections added after judging a miss
    (each states the answer itself; bench/outside_probes/README.md), left out for the figures as first written."""
    out: dict[str, set[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            obj = json.loads(line)
            out[obj.get("question", obj.get("q"))] = set(obj.get("pooled", []))
    return out


def hit5_as_written(ranked: list[tuple[str, list[str], list[str]]], pooled: dict[str, set[str]]) -> float:
    """hit@5 with each probe's expected URLs as first written (``pooled`` ones left out); ``ranked`` holds
    (question, expected URLs, the first five URLs found, as paths or full URLs)."""
    from widget.relay.docs.eval import url_matches

    hits = sum(any(url_matches(u, e) for u in found for e in expect if e not in pooled.get(q, set()))
               for q, expect, found in ranked)
    return round(hits / max(1, len(ranked)), 3)


async def index_repo_docs(idx: Any) -> dict[str, Any]:
    files, _ = collect([Source(ROOT / "docs", "/docs/", "html")], max_pages=1000)
    return dict(await run_index(idx, "docs", files))


def best_threshold(answerable: list[float], unanswerable: list[float]) -> tuple[float, int, int]:
    """The threshold t (a question whose top score is below t is "unanswerable") that maximizes unanswerable
    ones caught minus answerable ones lost; (t, caught, lost)."""
    best = (0.0, 0, 0)
    best_gain = -1
    for t in sorted(set(answerable + unanswerable)) + [max(answerable + unanswerable, default=0) + 1]:
        caught = sum(s < t for s in unanswerable)
        lost = sum(s < t for s in answerable)
        if caught - lost > best_gain:
            best, best_gain = (t, caught, lost), caught - lost
    return best


async def retrieval(engine: str, idx: Any) -> dict[str, Any]:
    summary = await index_repo_docs(idx)
    probes = load_probes()
    known = set()
    for h in await idx.search("docs", " ".join(f"w{i}" for i in range(1)), limit=1):
        known.add(h["url"])
    h1 = h5 = page5 = 0
    rr = 0.0
    top_ans: list[float] = []
    top_ans_norm: list[float] = []
    top_un: list[float] = []
    top_un_norm: list[float] = []
    misses = []
    answerable = [p for p in probes if p["expect"] != "unanswerable"]
    ranked: list[tuple[str, list[str], list[str]]] = []
    from widget.relay.docs.query import terms

    for p in probes:
        hits = await idx.search("docs", p["q"], limit=10)
        top = hits[0]["score"] if hits else 0.0
        norm = top / max(1, len(terms(p["q"])))
        if p["expect"] == "unanswerable":
            top_un.append(top)
            top_un_norm.append(norm)
            continue
        top_ans.append(top)
        top_ans_norm.append(norm)
        urls = [h["url"] for h in hits]
        ranked.append((p["q"], p["expect"], urls[:5]))
        ranks = [i for i, u in enumerate(urls) if u in p["expect"]]
        if ranks:
            rank = ranks[0]
            h1 += rank == 0
            h5 += rank < 5
            rr += 1 / (rank + 1)
        if not ranks or ranks[0] >= 5:
            misses.append((p["q"], urls[:3]))
        # The page alone (the URL without its anchor) among the first five distinct pages.
        pages = list(dict.fromkeys(u.split("#", 1)[0] for u in urls))[:5]
        page5 += any(e.split("#", 1)[0] in pages for e in p["expect"])
    n = len(answerable)
    t, caught, lost = best_threshold(top_ans, top_un)
    tn, caught_n, lost_n = best_threshold(top_ans_norm, top_un_norm)
    out = {
        "engine": engine, "pages": summary["pages"], "sections": summary["sections"], "answerable": n,
        "unanswerable": len(top_un), "hit@1": round(h1 / n, 3), "hit@5": round(h5 / n, 3), "mrr@10": round(rr / n, 3),
        "page@5": round(page5 / n, 3), "hit@5_as_written": hit5_as_written(ranked, pooled_of(PROBES)),
        "threshold": round(t, 4), "unanswerable_below": caught, "answerable_below": lost,
        "threshold_per_term": round(tn, 4), "unanswerable_below_per_term": caught_n,
        "answerable_below_per_term": lost_n,
    }
    print(json.dumps(out))
    for q, urls in misses:
        print(f"  miss@5: {q!r} -> {urls}")
    return out


# -- the synthetic site ---------------------------------------------------------------------------------------

CHROME_HEAD = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title} - Synthetic Docs</title>
<link rel="stylesheet" href="/assets/main.css"></head><body><header class="md-header"><a href="/">Synthetic Docs</a>
<form class="md-search" role="search"><input placeholder="Search"></form></header><div class="md-container"><main
class="md-main">
<div class="md-sidebar"><nav class="md-nav">{nav}</nav></div><div class="md-content"><article
class="md-content__inner md-typeset">
<a href="https://example.com/edit/{slug}.md" title="Edit this page" class="md-content__button">Edit</a>"""
CHROME_TAIL = """</article></div></main><footer class="md-footer">Made with Material for MkDocs</footer></div>
<script src="/assets/bundle.js"></script></body></html>"""


def vocabulary() -> list[str]:
    words: dict[str, int] = {}
    for path in (ROOT / "docs").glob("*.md"):
        for w in re.findall(r"[a-z]{3,}", path.read_text().lower()):
            words[w] = words.get(w, 0) + 1
    return [w for w, _ in sorted(words.items(), key=lambda kv: -kv[1])]


def zipf(vocab: list[str]) -> list[float]:
    """Cumulative Zipf weights over the vocabulary (rank r drawn in proportion to 1/r), as real text has."""
    return list(itertools.accumulate(1 / (i + 1) for i in range(len(vocab))))


def make_site(folder: Path, pages: int, sections: int, vocab: list[str], rng: random.Random) -> None:
    cum = zipf(vocab)
    nav = "".join(f'<a href="/p{i}/">Nav item {i}</a>' for i in range(40))

    def words(n: int) -> str:
        return " ".join(rng.choices(vocab, cum_weights=cum, k=n))

    for p in range(pages):
        title = words(3).title()
        body = [f'<h1 id="top">{title}</h1><p>{words(40)}</p>']
        for s in range(sections - 1):
            heading = words(3)
            body.append(f'<h2 id="s{s}">{heading}<a class="headerlink" href="#s{s}">¶</a></h2>')
            body.append("".join(f"<p>{words(rng.randint(30, 70))}</p>" for _ in range(2)))
        page = folder / f"p{p // 100}" / f"page{p}" / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(CHROME_HEAD.format(title=title, nav=nav, slug=f"page{p}") + "".join(body) + CHROME_TAIL)


def index_site(folder: Path, store: list[str], label: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "widget.relay", "index", "--app", "synthetic", str(folder), *store]
    t0 = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_before = before.ru_utime + before.ru_stime
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    # The peak RSS of the indexing program itself: its VmHWM (reset by exec), read while it runs. ru_maxrss from
    # wait4 would also count the bench's own pages the child shared between fork and exec.
    peak_kb = 0
    while proc.poll() is None:
        try:
            found = re.search(r"VmHWM:\s+(\d+)", Path(f"/proc/{proc.pid}/status").read_text())
        except OSError:
            found = None
        if found:
            peak_kb = max(peak_kb, int(found.group(1)))
        time.sleep(0.1)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.monotonic() - t0
    out, err = proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
    if not out.strip():
        raise SystemExit(f"index failed: {err}")
    summary = json.loads(out.strip().splitlines()[-1])
    result = {"engine": label, "pages": summary["pages"], "sections": summary["sections"], "seconds": round(wall, 1),
              "pages_per_s": round(summary["pages"] / wall, 1), "peak_rss_mb": round(peak_kb / 1024, 1),
              "cpu_s": round(usage.ru_utime + usage.ru_stime - cpu_before, 1)}
    print(json.dumps(result))
    return result


def make_queries(n: int, vocab: list[str], rng: random.Random) -> list[str]:
    """A third the probe questions, the rest 2-8 words drawn as the site's text was (mostly its commonest words:
    the worst case for an OR query, whose matches are most of the index)."""
    probes = [p["q"] for p in load_probes()]
    cum = zipf(vocab)
    return [rng.choice(probes) if i % 3 == 0 else " ".join(rng.choices(vocab, cum_weights=cum, k=rng.randint(2, 8)))
            for i in range(n)]


def tree_cpu_ms(root_pid: int) -> float:
    """CPU time (user + system) of a process's children, e.g. PostgreSQL's backends, in ms (10 ms ticks)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == root_pid:  # the parent's pid
            total += int(fields[11]) + int(fields[12])
    return total * 1000 / os.sysconf("SC_CLK_TCK")


async def latency(idx: Any, queries: list[str], label: str, server_pid: int | None = None) -> dict[str, Any]:
    """Each query timed alone: wall time, and the process's CPU time over it (what it costs without the other
    processes of a loaded machine: the search is the only thing this process does meanwhile)."""
    for q in queries[:20]:
        await idx.search("synthetic", q)
    times, cpu = [], []
    server0 = tree_cpu_ms(server_pid) if server_pid else 0.0
    for q in queries:
        t0, c0 = time.perf_counter(), time.process_time()
        await idx.search("synthetic", q)
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    times.sort()
    cpu.sort()
    p95 = int(len(times) * 0.95) - 1
    result = {"engine": label, "queries": len(times), "p50_ms": round(statistics.median(times), 2),
              "p95_ms": round(times[p95], 2), "max_ms": round(times[-1], 2),
              "cpu_p50_ms": round(statistics.median(cpu), 2), "cpu_p95_ms": round(cpu[p95], 2)}
    if server_pid:  # the database server's CPU, on average per search (its clock ticks are too coarse for one)
        result["server_cpu_mean_ms"] = round((tree_cpu_ms(server_pid) - server0) / len(queries), 2)
    print(json.dumps(result))
    return result


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=10_000)
    ap.add_argument("--sections", type=int, default=10)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--no-pg", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--keep", type=Path, help="write the site and the indexes here and keep them (default: a "
                                              "temporary folder); an existing site there is reused")
    args = ap.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average {os.getloadavg()[0]:.2f}, "
          f"{os.cpu_count()} cores, SQLite {__import__('sqlite3').sqlite_version}")
    pg = None
    if not args.no_pg:
        try:
            from relay_helpers import pg_server

            pg = pg_server()
        except BaseException as exc:  # noqa: BLE001 - pytest.skip when PostgreSQL is not installed
            print(f"# PostgreSQL not available ({exc}); SQLite only")
    with tempfile.TemporaryDirectory(prefix="docs-bench-") as tmp_text:
        tmp = args.keep or Path(tmp_text)
        tmp.mkdir(parents=True, exist_ok=True)
        print("## retrieval (docs/*.md, bench/docs_probes.jsonl)")
        engines: list[tuple[str, Any]] = [("sqlite", open_docs_index(None, str(tmp / "probes.sqlite3")))]
        if pg is not None:
            engines.append(("postgres", open_docs_index(pg.database("docs_probes_" + str(os.getpid())), "")))
        figures: dict[str, Any] = {"pages": args.pages, "sections": args.sections, "queries": args.queries}
        for label, idx in engines:
            figures[f"retrieval_{label}"] = await retrieval(label, idx)
            await idx.close()
        if args.skip_speed:
            save("docs_search", figures)
            return
        print(f"## speed ({args.pages} pages x {args.sections} sections)")
        rng = random.Random(29)
        vocab = vocabulary()
        site = tmp / "site"
        if not site.exists():
            t0 = time.monotonic()
            make_site(site, args.pages, args.sections, vocab, rng)
            print(f"# site written in {time.monotonic() - t0:.1f} s")
        queries = make_queries(args.queries, vocab, rng)
        for old in tmp.glob("speed.sqlite3*"):  # a kept folder's earlier index would make every page unchanged
            old.unlink()
        stores = [("sqlite", ["--db", str(tmp / "speed.sqlite3")], (None, str(tmp / "speed.sqlite3")))]
        if pg is not None:
            dsn = pg.database("docs_speed_" + str(os.getpid()))
            stores.append(("postgres", ["--database-url", dsn], (dsn, "")))
        for label, flags, (url, path) in stores:
            figures[f"index_{label}"] = index_site(site, flags, label)
            idx: Any = open_docs_index(url, path)
            server = pg.proc.pid if label == "postgres" and pg is not None and pg.proc is not None else None
            figures[f"search_{label}"] = await latency(idx, queries, label, server)
            figures[f"search_{label}_probes"] = await latency(idx, [p["q"] for p in load_probes()],
                                                              f"{label}, the probe questions alone", server)
            await idx.close()
        print(f"# bench's own peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB; "
              f"load average {os.getloadavg()[0]:.2f}")
        save("docs_search", figures)


if __name__ == "__main__":
    asyncio.run(main())

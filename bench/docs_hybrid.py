"""Hybrid docs search measured (issue 33 item 7; numbers in docs/performance.md, "Hybrid docs search").

1. Indexing with the embedding model, as ``autopilot-relay index`` run as a subprocess with ``embeddings_model``
   set: sections/s, windows/s, peak RSS of that process, CPU seconds; on this project's docs (``docs/*.md`` as
   the demo serves them: long sections, about five 80-word windows each) and on a synthetic built site of
   ``--pages`` pages whose sections are 60-140 words (one window each, like most documentation sites).
2. Retrieval on the repo's probes (``bench/docs_probes.jsonl``): hit@1, hit@5, MRR@10 and page@5 for BM25
   alone, the vectors alone and hybrid (reciprocal rank fusion), and each probe that hybrid and BM25 rank
   differently.
3. Query latency, p50 and p95 over the probes (3 rounds after a warm-up, each query timed alone), BM25 and hybrid.

    python bench/docs_hybrid.py [--model DIR] [--pages 300] [--postgres]

The model folder is ``--model``, else ``AUTOPILOT_EMBEDDINGS_MODEL``, else ``~/.cache/autopilot-widget/embeddings``
(made with ``autopilot-relay embeddings fetch`` when missing). Goals: indexing >= 30 sections/s on 2 cores and
<= 600 MB RSS; hit@5 >= 0.9. The machine's load is recorded with the figures (``bench/results``).
"""

from __future__ import annotations

import argparse
import asyncio
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
sys.path.insert(0, str(ROOT / "bench"))

from docs_search import (  # noqa: E402
    PROBES,
    best_threshold,
    hit5_as_written,
    load_probes,
    make_site,
    pooled_of,
    vocabulary,
)
from results import save  # noqa: E402

from widget.relay.docs import open_docs_index  # noqa: E402
from widget.relay.docs.embeddings import fetch  # noqa: E402


def run_index(args: list[str], db: Path, model: str | None, database_url: str | None = None) -> dict[str, Any]:
    """``autopilot-relay index`` as a subprocess; its summary, wall time, peak RSS (VmHWM) and CPU time."""
    store = ["--database-url", database_url] if database_url else ["--db", str(db)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AUTOPILOT_EMBEDDINGS_MODEL", None)
    if model:
        env["AUTOPILOT_EMBEDDINGS_MODEL"] = model
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "widget.relay", "index", *args, *store], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak_kb = 0
    while proc.poll() is None:
        try:
            found = re.search(r"VmHWM:\s+(\d+)", Path(f"/proc/{proc.pid}/status").read_text())
        except OSError:
            found = None
        if found:
            peak_kb = max(peak_kb, int(found.group(1)))
        time.sleep(0.1)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out, err = proc.communicate()
    if proc.returncode != 0 or not out.strip():
        raise SystemExit(f"index failed ({proc.returncode}): {err[-2000:]}")
    summary = json.loads(out.strip().splitlines()[-1])
    return {"summary": summary, "seconds": round(wall, 2), "peak_rss_mb": round(peak_kb / 1024, 1),
            "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
            "sections_per_s": round(summary["sections"] / wall, 1), "stderr": err.strip()[-500:]}


async def windows_of(db: Path, app: str, database_url: str | None) -> int:
    """How many windows the app's vectors have."""
    if database_url:
        import asyncpg

        con = await asyncpg.connect(database_url)
        try:
            return int(await con.fetchval("SELECT coalesce(sum(windows), 0) FROM hybrid_vectors WHERE app_id = $1 "
                                          "AND run IS NULL", app))
        finally:
            await con.close()
    import sqlite3

    with sqlite3.connect(db) as con:
        return int(con.execute("SELECT coalesce(sum(windows), 0) FROM hybrid_vectors WHERE app_id = ? AND run IS "
                               "NULL", (app,)).fetchone()[0])


def figures(ranks: list[int | None], pages: list[bool]) -> dict[str, float]:
    n = len(ranks)
    return {"hit@1": round(sum(r == 1 for r in ranks) / n, 3),
            "hit@5": round(sum(r is not None and r <= 5 for r in ranks) / n, 3),
            "mrr@10": round(sum(1 / r for r in ranks if r is not None) / n, 3),
            "page@5": round(sum(pages) / n, 3)}


async def retrieval(idx: Any) -> dict[str, Any]:
    """Each side's figures on the answerable probes, and the score threshold that best separates the unanswerable
    ones (a question whose best section scores under it: "not in the docs"; ``best_threshold``)."""
    unanswerable = [p["q"] for p in load_probes() if p["expect"] == "unanswerable"]
    probes = [p for p in load_probes() if p["expect"] != "unanswerable"]
    sides = {"bm25": lambda q: idx.engine.search("docs", q, limit=10),
             "vectors": lambda q: idx.vector_search("docs", q, limit=10),
             "hybrid": lambda q: idx.search("docs", q, limit=10)}
    out: dict[str, Any] = {}
    ranks_by: dict[str, list[int | None]] = {}
    for name, search in sides.items():
        ranks: list[int | None] = []
        pages: list[bool] = []
        ranked: list[tuple[str, list[str], list[str]]] = []
        tops: list[float] = []
        for p in probes:
            hits = await search(p["q"])
            tops.append(float(hits[0]["score"]) if hits else 0.0)
            urls = [h["url"] for h in hits]
            ranked.append((p["q"], p["expect"], urls[:5]))
            ranks.append(next((i + 1 for i, u in enumerate(urls) if u in p["expect"]), None))
            first_pages = list(dict.fromkeys(u.split("#", 1)[0] for u in urls))[:5]
            pages.append(any(e.split("#", 1)[0] in first_pages for e in p["expect"]))
        ranks_by[name] = ranks
        tops_un = [float(hits[0]["score"]) if (hits := await search(q)) else 0.0 for q in unanswerable]
        t, caught, lost = best_threshold(tops, tops_un)
        out[name] = {**figures(ranks, pages), "hit@5_as_written": hit5_as_written(ranked, pooled_of(PROBES)),
                     "threshold": {"score": round(t, 4), "unanswerable_below": caught, "unanswerable": len(tops_un),
                                   "answerable_below": lost}}
    out["answerable"] = len(probes)
    out["changed"] = [{"q": p["q"], "bm25": b, "hybrid": h}
                      for p, b, h in zip(probes, ranks_by["bm25"], ranks_by["hybrid"], strict=True) if b != h]
    return out


async def latency(idx: Any) -> dict[str, Any]:
    questions = [p["q"] for p in load_probes()]
    out: dict[str, Any] = {}
    for name, search in (("bm25", idx.engine.search), ("hybrid", idx.search)):
        for q in questions[:10]:
            await search("docs", q, limit=5)  # warm-up: caches, the app's vectors loaded
        times: list[float] = []
        for _ in range(3):
            for q in questions:
                t0 = time.perf_counter()
                await search("docs", q, limit=5)
                times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        out[name] = {"p50_ms": round(statistics.median(times), 2),
                     "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2), "queries": len(times)}
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--model", default=os.environ.get("AUTOPILOT_EMBEDDINGS_MODEL")
                    or str(Path.home() / ".cache" / "autopilot-widget" / "embeddings"))
    ap.add_argument("--pages", type=int, default=300, help="pages of the synthetic site (9 sections each)")
    ap.add_argument("--postgres", action="store_true", help="also on PostgreSQL (tests' server helper)")
    args = ap.parse_args()
    fetch(Path(args.model), [], log=lambda line: print(line, file=sys.stderr))
    load_start = os.getloadavg()
    result: dict[str, Any] = {"model": args.model, "cores": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="bench-hybrid-") as tmp:
        db = Path(tmp) / "relay.sqlite3"
        docs_args = ["--app", "docs", f"{ROOT / 'docs'}=/docs/", "--url-style", "html"]
        result["docs_index_bm25"] = run_index(docs_args, Path(tmp) / "bm25.sqlite3", None)
        result["docs_index_hybrid"] = r = run_index(docs_args, db, args.model)
        r["windows"] = await windows_of(db, "docs", None)
        r["windows_per_s"] = round(r["windows"] / r["seconds"], 1)
        print(json.dumps({k: v for k, v in r.items() if k != "stderr"}), flush=True)
        idx: Any = open_docs_index(None, str(db), embeddings_model=args.model)
        try:
            result["retrieval"] = await retrieval(idx)
            print(json.dumps({k: v for k, v in result["retrieval"].items() if k != "changed"}), flush=True)
            for c in result["retrieval"]["changed"]:
                print(f"  bm25 @{c['bm25']} -> hybrid @{c['hybrid']}: {c['q']}")
            result["latency_sqlite"] = await latency(idx)
            print(json.dumps(result["latency_sqlite"]), flush=True)
        finally:
            await idx.close()
        if args.pages:
            site = Path(tmp) / "site"
            make_site(site, args.pages, 9, vocabulary(), random.Random(7))
            syn = ["--app", "synthetic", str(site)]
            result["synthetic_bm25"] = run_index(syn, Path(tmp) / "syn-bm25.sqlite3", None)
            result["synthetic_hybrid"] = s = run_index(syn, Path(tmp) / "syn.sqlite3", args.model)
            s["windows"] = await windows_of(Path(tmp) / "syn.sqlite3", "synthetic", None)
            s["windows_per_s"] = round(s["windows"] / s["seconds"], 1)
            print(json.dumps({k: v for k, v in s.items() if k != "stderr"}), flush=True)
        if args.postgres:
            sys.path.insert(0, str(ROOT / "tests"))
            from relay_helpers import pg_server

            url = pg_server().database("bench_hybrid")
            result["docs_index_hybrid_pg"] = run_index(docs_args, db, args.model, database_url=url)
            pidx: Any = open_docs_index(url, str(db), embeddings_model=args.model)
            try:
                result["latency_postgres"] = await latency(pidx)
                print(json.dumps(result["latency_postgres"]), flush=True)
            finally:
                await pidx.close()
    result["load_start"] = [round(x, 2) for x in load_start]
    result["load_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps({"load_start": result["load_start"], "load_end": result["load_end"]}))
    save("docs_hybrid", result)


if __name__ == "__main__":
    asyncio.run(main())

"""Run every benchmark of bench/ one after the other and print each one's output (not a test).

    python bench/all.py [--quick] [--only boot,peer] [--list]

``--quick``: a short variant of each (small N: a smoke run of the benches, not figures to quote); without it, the
full runs (may take hours in all). Each run has a time limit and its exit status is reported at the end (this
script exits 1 if any failed). Every bench writes its figures to ``bench/results/<bench>-<UTC time>.json``
(bench/results.py); the summary lists the files.

Every ``bench/*.py`` script is in one of two tables: ``RUNS`` (what all.py runs, with its quick and full
arguments; those in ``OPTIONAL`` only when named with ``--only``, each with the reason) or ``NOT_RUN`` (helper
modules, with the reason). tests/test_bench_tables.py fails when a script is in neither.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


class Run(NamedTuple):
    """One bench as all.py runs it: its script, the arguments of each variant, and each variant's time limit (s)."""

    script: str
    quick: list[str]
    full: list[str]
    quick_limit: int
    full_limit: int


RUNS: dict[str, Run] = {
    # the host page and the first reply (docs/performance.md, "The host page", "The first reply")
    "boot": Run("boot.py", ["-n", "2"], ["-n", "5"], 150, 900),
    "peer": Run("peer.py", ["-n", "2", "--timeout", "280"], ["-n", "5"], 300, 2400),
    # every visit kind (cold, same-tab, new tab, restart, later pages of a site), from Chrome traces
    "jank": Run("jank.py", ["-n", "1"], ["-n", "3"], 300, 1800),
    "lighthouse": Run("lighthouse.py", ["-n", "1"], ["-n", "3"], 300, 1200),
    "new_tab": Run("new_tab.py", ["-n", "1"], ["-n", "4"], 300, 1200),
    "first_load": Run("first_load.py", [], ["-n", "3"], 150, 600),
    # a scripted reader, ours and Chainlit interleaved: click → composer focused, keys lost, first token; the race
    "reader": Run("reader.py", ["-n", "1", "--race", "2"], ["-n", "10", "--race", "20"], 600, 3600),
    "restore_profile": Run("restore_profile.py", ["-n", "1"], ["-n", "3"], 240, 900),
    "worker_profile": Run("worker_profile.py", ["-n", "1"], ["-n", "2"], 240, 900),
    # a prototype: Python in a dedicated worker against today's main-thread boot
    "worker_python": Run("worker_python.py", ["-n", "1", "--calls", "200"], ["-n", "3"], 240, 900),
    # calls, streaming, memory
    "calls": Run("calls.py", ["-n", "100", "--rtt", "100"], [], 150, 1800),
    "render": Run("render.py", ["--repeat", "1", "--browser"], ["--browser"], 120, 900),
    "render_browser": Run("render_browser.py", ["--socket"], ["--socket"], 180, 300),
    "memory": Run("memory.py", ["--quick", "--timeout", "280"], [], 300, 2400),
    "mcp_calls": Run("mcp_calls.py", ["-n", "10"], ["-n", "50"], 180, 600),
    # the docs index: retrieval on docs/*.md (bench/docs_probes.jsonl), indexing and search speed on a synthetic site
    "docs_search": Run("docs_search.py", ["--pages", "300", "--queries", "50"], [], 300, 3600),
    # hybrid docs search (an embedding model beside BM25): indexing speed and memory, query latency, retrieval
    "docs_hybrid": Run("docs_hybrid.py", ["--pages", "60"], ["--pages", "300", "--postgres"], 300, 1800),
    # docs search on outside corpora (FastAPI's and HTTPX's Markdown at pinned commits, the CPython docs as Debian
    # builds them; bench/outside_probes/)
    "docs_outside": Run("docs_outside.py", ["--no-model"], [], 120, 1800),
    # the docs index on real VitePress and Docusaurus builds (sections, anchors, no chrome text)
    "docs_generators": Run("docs_generators.py", ["--skip-build"], [], 120, 1800),
    # what the docs search step adds to the first token of a demo-model answer (one-shot and agentic)
    "docs_first_token": Run("docs_first_token.py", ["--runs", "5"], ["--runs", "40"], 120, 600),
    # the relay
    "relay": Run("relay.py", ["--clients", "100", "--calls", "1", "--solo-calls", "20", "--timeout", "100"], [],
                 130, 900),
    "scale": Run("scale.py", ["--conversations", "4", "--turns", "2"], [], 240, 1200),
    # 4,000-character messages: the flood the relay must cut off (the bench passes only when the socket is closed)
    "slow_reader": Run("slow_reader.py", ["--chars", "4000"], ["--chars", "4000"], 180, 600),
    "edge": Run("edge.py", ["--only", "sessions,unjoined", "--unjoined-s", "3"], [], 300, 1800),
    "kill_midcall": Run("kill_midcall.py", ["-n", "3"], ["-n", "30"], 240, 1800),
    # long versions of the suite's property and chaos tests (bench/_pytest_bench.py)
    "fuzz": Run("fuzz.py", ["--documents", "300"], [], 180, 1800),
    "fuzz_relay": Run("fuzz_relay.py", ["-n", "200"], [], 300, 1800),
    "fuzz_templates": Run("fuzz_templates.py", ["-n", "1000"], [], 120, 900),
    "chaos": Run("chaos.py", ["-n", "4"], ["-n", "100"], 300, 3600),
}

#: Benches of RUNS that run only when named with --only, and why.
OPTIONAL: dict[str, str] = {
    "worker_python": "a prototype of a worker-hosted Python that ships nothing; measured once (docs/performance.md)",
    "restore_profile": "a one-off profile of the restore's main-thread tasks (V8's sampler slows what it measures)",
    "worker_profile": "a one-off profile of the pre-warm worker's thread (V8's sampler slows what it measures)",
    "docs_outside": "needs the FastAPI and HTTPX docs and Debian's python3.11-doc, kept outside the repository "
                    "(bench/docs_outside.py says how to get them)",
    "docs_generators": "installs VitePress and Docusaurus from npm and builds a site with each (minutes, the "
                       "network); tests/test_docs_generators.py checks the committed pages of those builds",
    "chaos": "a long browser test (relay kills and socket cuts), not a figure; `bash dev test` runs its short form",
}

#: Scripts of bench/ that all.py never runs, and why.
NOT_RUN: dict[str, str] = {
    "all.py": "this script",
    "results.py": "a helper module: where every bench writes its figures (bench/results/)",
    "chrome_trace.py": "a helper module: main-thread tasks from a Chrome trace, used by boot, peer, jank and others",
    "_pytest_bench.py": "a helper module: runs one test file as a long benchmark (chaos, fuzz_relay, fuzz_templates)",
}


def scripts() -> list[str]:
    """Every ``bench/*.py`` script's file name."""
    return sorted(p.name for p in BENCH.glob("*.py"))


def unlisted() -> list[str]:
    """Scripts of bench/ in neither RUNS nor NOT_RUN (tests/test_bench_tables.py wants none)."""
    listed = {r.script for r in RUNS.values()} | set(NOT_RUN)
    return [s for s in scripts() if s not in listed]


RESULT_LINE = re.compile(r"^# results: (\S+)$", re.MULTILINE)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short variants (small N)")
    ap.add_argument("--only", default="", help="comma-separated subset of: " + ", ".join(RUNS))
    ap.add_argument("--list", action="store_true", help="print what would run, and what is not run and why, and exit")
    args = ap.parse_args()
    names = [n.strip() for n in args.only.split(",") if n.strip()] or [n for n in RUNS if n not in OPTIONAL]
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        ap.error(f"unknown benchmark(s) {unknown}; known: {', '.join(RUNS)}")
    plan = []
    for name in names:
        run = RUNS[name]
        cmd = [sys.executable, str(BENCH / run.script), *(run.quick if args.quick else run.full)]
        plan.append((name, run.script, cmd, run.quick_limit if args.quick else run.full_limit))
    print(f"# bench/all.py{' --quick' if args.quick else ''}  {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} "
          "UTC  "
          f"{platform.machine()} {os.cpu_count()} cores  load {os.getloadavg()[0]:.1f}", flush=True)
    for script in unlisted():
        print(f"(bench/{script} is in neither RUNS nor NOT_RUN of bench/all.py: add it to one)", flush=True)
    if args.list:
        for name, script, cmd, limit in plan:
            print(f"{name:15} {' '.join(['python', 'bench/' + script, *cmd[2:]])}  (limit {limit} s)")
        for name, why in OPTIONAL.items():
            if name not in names:
                print(f"{name:15} only with --only {name}: {why}")
        for script, why in NOT_RUN.items():
            print(f"{script:15} not run: {why}")
        return 0
    results = []
    t_all = time.monotonic()
    for name, script, cmd, limit in plan:
        print(f"\n## {name}: {' '.join(['python', 'bench/' + script, *cmd[2:]])}  (limit {limit} s)", flush=True)
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, timeout=limit, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            out, status = proc.stdout, ("ok" if proc.returncode == 0 else f"exit {proc.returncode}")
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            status = f"stopped after {limit} s"
        dt = time.monotonic() - t0
        # Progress lines ("[peer hh:mm:ss] ...") are noise here; the tables are what matter.
        print("\n".join(line for line in out.splitlines() if not line.startswith(("[peer ", "[memory ",
                                                                                  "installing lighthouse"))),
              flush=True)
        files: list[str] = RESULT_LINE.findall(out)
        results.append((name, status, dt, files[-1] if files else "no results file"))
    print(f"\n## summary ({time.monotonic() - t_all:.0f} s)")
    for name, status, dt, file in results:
        print(f"{name:15} {status:24} {dt:6.0f} s  {file}")
    return 0 if all(s == "ok" for _, s, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())

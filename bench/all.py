"""Run every benchmark of bench/ one after the other and print each one's output (not a test).

    python bench/all.py [--quick] [--only boot,peer] [--list]

``--quick``: a short variant of each, all of them in under 10 minutes on this machine (2 cores); without it, the
full runs (may take much longer). Benchmarks whose script is not there yet are skipped with a note; each run has
a time limit and its exit status is reported at the end (this script exits 1 if any failed).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

# name -> (script, quick args, full args, quick time limit s, full time limit s)
RUNS: dict[str, tuple[str, list[str], list[str], int, int]] = {
    "boot": ("boot.py", ["-n", "2"], ["-n", "5"], 150, 900),
    "calls": ("calls.py", ["-n", "100", "--rtt", "100"], [], 150, 1800),
    "render": ("render.py", ["--repeat", "1", "--browser"], ["--browser"], 120, 900),
    "relay": ("relay.py", ["--clients", "100", "--calls", "1", "--solo-calls", "20", "--timeout", "100"], [],
              130, 900),
    "peer": ("peer.py", ["-n", "2", "--timeout", "280"], ["-n", "5"], 300, 2400),
    "memory": ("memory.py", ["--quick", "--timeout", "280"], [], 300, 2400),
    # every visit kind (cold, same-tab, new tab, restart, later pages of a site), from Chrome traces
    "jank": ("jank.py", ["-n", "1"], ["-n", "3"], 300, 1800),
    "lighthouse": ("lighthouse.py", ["-n", "1"], ["-n", "3"], 300, 1200),
    # a prototype: Python in a dedicated worker against today's main-thread boot (run with --only worker_python)
    "worker_python": ("worker_python.py", ["-n", "1", "--calls", "200"], ["-n", "3"], 240, 900),
}
#: Run only when named with --only.
OPTIONAL = {"worker_python"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short variants, all within 10 minutes")
    ap.add_argument("--only", default="", help="comma-separated subset of: " + ", ".join(RUNS))
    ap.add_argument("--list", action="store_true", help="print what would run and exit")
    args = ap.parse_args()
    names = [n.strip() for n in args.only.split(",") if n.strip()] or [n for n in RUNS if n not in OPTIONAL]
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        ap.error(f"unknown benchmark(s) {unknown}; known: {', '.join(RUNS)}")
    others = sorted(p.name for p in BENCH.glob("*.py") if p.name != "all.py" and p.name not in
                    {r[0] for r in RUNS.values()})
    plan = []
    for name in names:
        script, quick, full, t_quick, t_full = RUNS[name]
        cmd = [sys.executable, str(BENCH / script), *(quick if args.quick else full)]
        plan.append((name, script, cmd, t_quick if args.quick else t_full))
    print(f"# bench/all.py{' --quick' if args.quick else ''}  {datetime.datetime.now():%Y-%m-%d %H:%M}  "
          f"{platform.machine()} {os.cpu_count()} cores", flush=True)
    if others:
        print(f"(other scripts in bench/, not run by all.py: {', '.join(others)})", flush=True)
    if args.list:
        for name, _, cmd, limit in plan:
            print(f"{name:7} {' '.join(Path(c).name if i < 2 else c for i, c in enumerate(cmd))}  (limit {limit} s)")
        return 0
    results = []
    t_all = time.monotonic()
    for name, script, cmd, limit in plan:
        if not (BENCH / script).is_file():
            print(f"\n## {name}: bench/{script} does not exist yet: skipped", flush=True)
            results.append((name, "skipped", 0.0))
            continue
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
        # Progress lines on stderr ("[peer hh:mm:ss] ...") are noise here; the tables are what matter.
        print("\n".join(line for line in out.splitlines() if not line.startswith(("[peer ", "[memory ", "installing lighthouse"))),
              flush=True)
        results.append((name, status, dt))
    print(f"\n## summary ({time.monotonic() - t_all:.0f} s)")
    for name, status, dt in results:
        print(f"{name:7} {status:24} {dt:6.0f} s")
    return 0 if all(s in ("ok", "skipped") for _, s, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())

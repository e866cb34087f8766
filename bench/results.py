"""Where a bench keeps its figures: one JSON file per run under ``bench/results/`` (docs/performance.md cites them).

Every bench's main ends with ``save("<bench>", figures)``; the file, ``bench/results/<bench>-<UTC time>.json``,
holds the command line, the git commit (and whether the tree had changes), the date, the load average when the
bench started and when it saved, the machine's facts and the figures themselves. A figure in the docs names the
file it came from; files from runs on a loaded machine are not committed (bench/results/README.md).

``BENCH_RESULTS_DIR`` writes elsewhere (the tests use it); ``BENCH_RESULTS=off`` writes nothing.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypedDict

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"

# Read when the bench imports this module, i.e. as it starts: a run's load is the pair (start, end).
_LOAD_AT_START = os.getloadavg()
_STARTED = time.monotonic()


class Machine(TypedDict):
    """What the figures depend on besides the code: the machine and the browser."""

    arch: str
    cores: int | None
    memory_gib: float | None
    os: str
    python: str
    chromium: str | None


class LoadAverage(TypedDict):
    """``os.getloadavg()`` (1, 5 and 15 minutes) when the bench started and when it saved its figures."""

    start: list[float]
    end: list[float]


class Record(TypedDict):
    """One run's file."""

    bench: str
    command: str
    commit: str | None
    tree_changed: bool | None
    build_id: str | None
    date: str
    seconds: float
    load_average: LoadAverage
    machine: Machine
    figures: object


def stats(values: Iterable[float]) -> dict[str, float | int | None]:
    """n, median, p90, p99, min and max of some samples (None where there are none), for a figures dict."""
    xs = sorted(float(v) for v in values)
    if not xs:
        return {"n": 0, "median": None, "p90": None, "p99": None, "min": None, "max": None}

    def pct(p: float) -> float:
        return xs[min(len(xs) - 1, max(0, math.ceil(p / 100 * len(xs)) - 1))]

    mid = len(xs) // 2
    median = xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
    return {"n": len(xs), "median": median, "p90": pct(90), "p99": pct(99), "min": xs[0], "max": xs[-1]}


def save(name: str, figures: object, argv: Sequence[str] | None = None) -> Path | None:
    """Write ``figures`` (JSON-able: dicts, lists, numbers, dataclasses…) and the run's facts to
    ``bench/results/<name>-<UTC time>.json``; return the path (None with ``BENCH_RESULTS=off``)."""
    if not name or not all(c.isalnum() or c in "_-" for c in name):
        raise ValueError(f"a bench's name is letters, digits, '_' or '-', not {name!r}")
    if os.environ.get("BENCH_RESULTS", "").lower() == "off":
        return None
    argv = list(sys.argv if argv is None else argv)
    now = datetime.datetime.now(datetime.UTC)
    record: Record = {
        "bench": name,
        "command": _command(argv),
        "commit": _git("rev-parse", "HEAD"),
        "tree_changed": _tree_changed(),
        "build_id": _build_id(),
        "date": now.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "seconds": round(time.monotonic() - _STARTED, 1),
        "load_average": {"start": [round(x, 2) for x in _LOAD_AT_START],
                         "end": [round(x, 2) for x in os.getloadavg()]},
        "machine": _machine(),
        "figures": _plain(figures),
    }
    folder = Path(os.environ.get("BENCH_RESULTS_DIR") or RESULTS)
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{name}-{now:%Y%m%dT%H%M%SZ}"
    path = folder / f"{stem}.json"
    k = 2
    while path.exists():  # two runs within one second (all.py --quick of a tiny bench)
        path, k = folder / f"{stem}-{k}.json", k + 1
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False, allow_nan=False) + "\n")
    print(f"# results: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", flush=True)
    return path


def _command(argv: list[str]) -> str:
    """The command as a reader would type it from the repository's root: ``python bench/x.py --flag``."""
    script = Path(argv[0]) if argv else Path("?")
    try:
        shown = script.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        shown = str(script)
    return shlex.join(["python", shown, *argv[1:]])


def _plain(value: object) -> object:
    """``value`` as plain JSON: dataclasses as dicts, tuples and sets as lists, NaN and infinities as None, other
    objects as their text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v) for v in value), key=repr)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    # Anything else (a Path, an enum…) as its text: a run's figures are not lost at its very end for one odd value.
    return str(value)


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _tree_changed() -> bool | None:
    out = _git("status", "--porcelain", "--untracked-files=no")
    return None if out is None else bool(out)


def _build_id() -> str | None:
    """The build the benches serve (widget/_dist), which the commit alone does not pin down."""
    try:
        return str(json.loads((ROOT / "widget" / "_dist" / "manifest.json").read_text())["build_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _machine() -> Machine:
    memory = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    chromium = None
    exe = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    if Path(exe).exists():
        try:
            chromium = subprocess.run([exe, "--version"], capture_output=True, text=True,
                                      timeout=20).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            chromium = None
    return {"arch": platform.machine(), "cores": os.cpu_count(), "memory_gib": memory, "os": platform.platform(),
            "python": platform.python_version(), "chromium": chromium}

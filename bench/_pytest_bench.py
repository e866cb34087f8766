"""Run one test file as a long benchmark: the test reads its size from an environment variable."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from results import save

ROOT = Path(__file__).resolve().parent.parent


def run(test_file: str, env_var: str, n: int, describe: str) -> int:
    """Run ``tests/<test_file>`` with ``env_var=n``; print one summary line; return pytest's exit code."""
    t = time.perf_counter()
    rc = subprocess.call(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" / test_file)],
        cwd=ROOT, env={**os.environ, env_var: str(n)},
    )
    verdict = "all invariants held" if rc == 0 else "INVARIANT BROKEN"
    seconds = time.perf_counter() - t
    print(f"# bench/{Path(sys.argv[0]).name}: {describe}: {verdict}, {seconds:.1f} s")
    save(Path(sys.argv[0]).stem, {"test_file": test_file, env_var: n, "what": describe, "pytest_exit": rc,
                                  "verdict": verdict, "seconds": seconds})
    return rc

"""Chaos run (issue 9.6): ≥ 100 rounds of relay restarts and WebSocket cuts with function calls in flight.

Each round sends a message whose function call is running in the page when the relay is killed (even rounds)
or the sockets are cut (odd rounds); the test asserts no call ran twice, every response was recorded once,
no event was missed, the UI showed reconnecting each time, and a reload shows the same conversation.

    python bench/chaos.py [-n 100]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=100)
    args = ap.parse_args()
    t = time.perf_counter()
    rc = subprocess.call(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests/test_browser_chaos.py")],
        cwd=ROOT, env={**os.environ, "CHAOS_ROUNDS": str(args.n)},
    )
    print(f"# bench/chaos.py: {args.n} rounds ({(args.n + 1) // 2} relay restarts, {args.n // 2} socket cuts): "
          f"{'all invariants held' if rc == 0 else 'INVARIANT BROKEN'}, {time.perf_counter() - t:.0f} s")
    sys.exit(rc)

"""Chaos run: ≥ 100 rounds of relay restarts (kills) and WebSocket cuts with function calls in flight.

Each round sends a message whose function call is running in the page when the relay is killed (even rounds)
or the sockets are cut (odd rounds); the test asserts no call ran twice, every response was recorded once,
no event was missed, the UI showed reconnecting each time, and a reload shows the same conversation.

    python bench/chaos.py [-n 100]
"""

from __future__ import annotations

import argparse
import sys

from _pytest_bench import run

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=100)
    n = ap.parse_args().n
    sys.exit(run("test_browser_chaos.py", "CHAOS_ROUNDS", n,
                 f"{n} rounds ({(n + 1) // 2} relay restarts, {n // 2} socket cuts)"))

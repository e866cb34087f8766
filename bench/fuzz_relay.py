"""Full relay bad-input fuzz (every socket event and HTTP endpoint).

The fast subset's families plus N random (event, payload) pairs on a joined socket (random, not derandomized), with a
bystander client served after each barrage.

    python bench/fuzz_relay.py [-n 3000]
"""

from __future__ import annotations

import argparse
import sys

from _pytest_bench import run

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=3000)
    n = ap.parse_args().n
    sys.exit(run("test_relay_fuzz.py", "RELAY_FUZZ_EXAMPLES", n, f"{n} random payloads + the hand-written families"))

"""Full URL-template fuzz (the template safety rules): ≥ 10,000 adversarial argument pairs through the template filler.

    python bench/fuzz_templates.py [-n 10000]
"""

from __future__ import annotations

import argparse
import sys

from _pytest_bench import run

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10_000)
    n = ap.parse_args().n
    sys.exit(run("test_templates_fuzz.py", "TEMPLATE_FUZZ_EXAMPLES", n,
                 f"{n} examples (0 scheme/host changes, 0 dot segments)"))

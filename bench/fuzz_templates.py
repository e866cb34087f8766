"""Full URL-template fuzz (issue 9.3): ≥ 10,000 adversarial argument pairs through the template filler.

    python bench/fuzz_templates.py [-n 10000]
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
    ap.add_argument("-n", type=int, default=10_000)
    args = ap.parse_args()
    t = time.perf_counter()
    env = {**os.environ, "TEMPLATE_FUZZ_EXAMPLES": str(args.n)}
    rc = subprocess.call(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests/test_templates_fuzz.py")],
        cwd=ROOT, env=env,
    )
    print(f"# bench/fuzz_templates.py: {args.n} examples, {'0 violations' if rc == 0 else 'VIOLATIONS FOUND'}, "
          f"{time.perf_counter() - t:.1f} s")
    sys.exit(rc)

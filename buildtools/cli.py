"""``python build.py``: the command line."""
from __future__ import annotations

import argparse
import sys

from .pipeline import build
from .util import BuildError, one_line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="build.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--clean", action="store_true", help="wipe widget/_dist before building")
    ap.add_argument("--no-precompile", action="store_true",
                    help="ship .py sources instead of .pyc (debugging)")
    ap.add_argument("--update-lock", action="store_true",
                    help="download the pinned versions again and rewrite build.lock.json")
    ap.add_argument("--quiet", action="store_true", help="print errors only")
    ap.add_argument("--snapshot", action="store_true",
                    help="also make a Pyodide memory snapshot (deps + widget modules imported) that the loader "
                         "restores instead of starting Python (~31 MB, ~5 MB brotli; tied to this exact build)")
    args = ap.parse_args(argv)
    if args.snapshot and args.no_precompile:
        ap.error("--snapshot needs the precompiled build")
    try:
        build(clean=args.clean, precompile=not args.no_precompile,
              update_lock=args.update_lock, quiet=args.quiet, snapshot=args.snapshot)
    except (BuildError, OSError) as e:
        print(f"build.py: error: {one_line(str(e))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("build.py: interrupted", file=sys.stderr)
        return 130
    return 0

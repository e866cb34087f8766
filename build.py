#!/usr/bin/env python3
"""Build the browser assets of the autopilot widget into ``widget/_dist/``.

Run from the repo root::

    python build.py [--clean] [--no-precompile] [--update-lock] [--quiet] [--snapshot]

or call :func:`build` (returns the output folder). Standard library only. The steps live in ``buildtools/``, one
module per step, with the programs they run under Node and inside Pyodide in ``buildtools/programs/``; the
package's docstring says what each step does and what ``widget/_dist/`` holds. A build whose inputs did not
change returns at once; each step is cached under ``.build-cache/`` (``$AUTOPILOT_BUILD_CACHE``).
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:  # `python /elsewhere/build.py`
    sys.path.insert(0, str(ROOT))

from buildtools import NPM_PINS, WHEEL_PINS, BuildError, build, default_cache_dir  # noqa: E402
from buildtools.cli import main  # noqa: E402

__all__ = ["NPM_PINS", "WHEEL_PINS", "BuildError", "build", "default_cache_dir", "main"]

if __name__ == "__main__":
    if __spec__ is not None and __spec__.name == "build":
        # `python -m build` run from the repo root finds this file before pypa's build: hand over to it, with the
        # repo root off sys.path (the in-tree build backend builds the browser assets into the wheel).
        import runpy

        sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT]
        sys.modules.pop("build", None)
        runpy.run_module("build", run_name="__main__", alter_sys=True)
        sys.exit(0)
    sys.exit(main())

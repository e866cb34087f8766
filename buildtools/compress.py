"""Brotli copies of the files the page fetches, made by Node's zlib and cached by content."""
from __future__ import annotations

import os
import time
from pathlib import Path

from .programs import program
from .util import json_bytes, require_tool, run_tool, write_atomic


def brotli(out_dir: Path, by_key: dict[tuple[str, int], Path], quiet: bool) -> None:
    """Brotli-compress the files not yet in the cache (Node's zlib, files in parallel)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    todo = [(str(src), str(out_dir / f"{sha}.q{q}.br"), q) for (sha, q), src in sorted(by_key.items())
            if not (out_dir / f"{sha}.q{q}.br").exists()]
    if todo:
        node = require_tool("node", "brotli-compress the build")
        t0 = time.perf_counter()
        script, job = out_dir / "brotli.mjs", out_dir / f"job-{os.getpid()}.json"
        if not script.exists() or script.read_text() != program("brotli.mjs"):
            write_atomic(script, program("brotli.mjs").encode())
        write_atomic(job, json_bytes({"files": todo}))
        try:
            run_tool([node, str(script), str(job)], "brotli (node)", timeout=1800)
        finally:
            job.unlink(missing_ok=True)
        if not quiet:
            print(f"      brotli: {len(todo)} file(s) compressed in {time.perf_counter() - t0:.1f}s (cached from "
                  "now on)", flush=True)

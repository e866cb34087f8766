"""Step 6: precompile the stdlib and the bundle to .pyc with Pyodide itself, under Node."""
from __future__ import annotations

import json
import re
from pathlib import Path

from .config import NODE_MOUNT
from .programs import program
from .util import BuildError, JsonObject, json_bytes, require_tool, run_tool, write_atomic


def precompile_node(cache_dir: Path, work: Path, index_dir: Path, targets: list[JsonObject],
                     verify: JsonObject, quiet: bool) -> JsonObject:
    node = require_tool("node", "precompile Python with Pyodide (or use --no-precompile)")
    proc = run_tool([node, "--version"], "node --version")
    m = re.match(r"v(\d+)", proc.stdout.strip())
    if not m or int(m.group(1)) < 18:
        raise BuildError(f"node {proc.stdout.strip()} is too old for Pyodide (need >= 18)")
    work.mkdir(parents=True, exist_ok=True)
    script_py, script_mjs = work / "precompile.py", work / "precompile.mjs"
    for p, text in ((script_py, program("precompile.py")), (script_mjs, program("precompile.mjs"))):
        if not p.exists() or p.read_text() != text:
            write_atomic(p, text.encode())
    mount = NODE_MOUNT
    job = {
        "index_dir": str(index_dir), "cache_dir": str(cache_dir), "mount": mount,
        "script": str(script_py), "quiet": quiet,
        "targets": [dict(t, src=f"{mount}/{t['src_rel']}", dst=f"{mount}/{t['dst_rel']}")
                    for t in targets],
        "verify": verify,
    }
    job_path = work / "job.json"
    write_atomic(job_path, json_bytes(job))
    proc = run_tool([node, str(script_mjs), str(job_path)], "precompile (node)", timeout=1800)
    try:
        result: JsonObject = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise BuildError("precompile (node): no result line on stdout") from None
    return result

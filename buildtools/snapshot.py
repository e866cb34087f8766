"""Optional step: a Pyodide memory snapshot with the dependencies and widget modules imported."""
from __future__ import annotations

import json
from pathlib import Path

from .config import BUNDLE_FS_PATH
from .programs import program
from .util import BuildError, JsonObject, json_bytes, require_tool, run_tool, write_atomic


def snapshot_node(
    work: Path, index_dir: Path, core: Path, bundle: Path, lock_info: JsonObject, out: Path
) -> JsonObject:
    """Make Pyodide's memory snapshot after the widget's imports (see programs/snapshot_prepare.py); its result."""
    node = require_tool("node", "make the memory snapshot")
    work.mkdir(parents=True, exist_ok=True)
    script = work / "snapshot.mjs"
    if not script.exists() or script.read_text() != program("snapshot.mjs"):
        write_atomic(script, program("snapshot.mjs").encode())
    job = {"index_dir": str(index_dir), "core": str(core), "bundle": str(bundle), "bundle_fs": BUNDLE_FS_PATH,
           "lock_info": lock_info, "out": str(out),
           "prepare": program("snapshot_prepare.py").replace("__BUNDLE__", BUNDLE_FS_PATH),
           "check": program("snapshot_check.py").replace("__BUNDLE__", BUNDLE_FS_PATH)}
    job_path = work / "snapshot-job.json"
    write_atomic(job_path, json_bytes(job))
    proc = run_tool([node, str(script), str(job_path)], "snapshot (node)", timeout=900)
    try:
        result: JsonObject = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise BuildError("snapshot (node): no result line on stdout") from None
    return result

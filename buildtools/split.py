"""Step 6b: split the precompiled stdlib and bundle into what the boot imports and lazy groups."""
from __future__ import annotations

import json
from pathlib import Path

from .config import NODE_MOUNT, REST_FS_PATH, SAMPLE_MD, SCHEMA_FS_PATH, STDLIB_CORE_EXTRA, STDLIB_REST_SAMPLE
from .programs import FINDER_GROUPS_LINE, program
from .util import BuildError, JsonObject, json_bytes, require_tool, run_tool, write_atomic


def split_node(cache_dir: Path, work: Path, index_dir: Path, full: Path, bundle: Path, out: dict[str, Path],
                zip_prefix: str) -> JsonObject:
    """Split the precompiled stdlib and bundle by what the boot imports (see programs/split.py); writes the zips and the
    list of bundle files that are not in the boot's bundle (``out``: core, rest, schema, lists)."""
    node = require_tool("node", "split the stdlib with Pyodide (or use --no-precompile)")
    work.mkdir(parents=True, exist_ok=True)
    files = {work / name: program(name) for name in ("precompile.py", "split.py", "split.mjs")}
    for p, text in files.items():
        if not p.exists() or p.read_text() != text:
            write_atomic(p, text.encode())
    mount = NODE_MOUNT

    def rel(p: Path) -> str:
        return f"{mount}/{p.relative_to(cache_dir).as_posix()}"

    job = {
        "index_dir": str(index_dir), "cache_dir": str(cache_dir), "mount": mount,
        "script": str(work / "precompile.py"), "split_script": str(work / "split.py"),
        "full_host": str(full), "core_host": str(out["core"]), "rest_host": str(out["rest"]),
        "schema_host": str(out["schema"]), "lists_host": str(out["lists"]),
        "py": {"full": rel(full), "bundle": rel(bundle), "core_dst": rel(out["core"]), "rest_dst": rel(out["rest"]),
               "schema_dst": rel(out["schema"]), "rest": rel(out["rest"]), "schema": rel(out["schema"]),
               "rest_fs": REST_FS_PATH, "schema_fs": SCHEMA_FS_PATH, "zip_prefix": zip_prefix,
               "finder": program("_autopilot_stdlib.py"), "finder_groups": FINDER_GROUPS_LINE,
               "extra": STDLIB_CORE_EXTRA, "sample": STDLIB_REST_SAMPLE, "sample_md": SAMPLE_MD},
    }
    job_path = work / "split-job.json"
    write_atomic(job_path, json_bytes(job))
    proc = run_tool([node, str(work / "split.mjs"), str(job_path)], "stdlib split (node)", timeout=900)
    try:
        result: JsonObject = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise BuildError("stdlib split (node): no result line on stdout") from None
    return result

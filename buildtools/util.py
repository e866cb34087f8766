"""Small helpers every step uses: hashing, atomic writes, running tools, progress, the cache lock, zips."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

from .config import STEPS, ZIP_DATE

#: A JSON object: the lock file, a job for a Node program, the result line a program prints.
JsonObject = dict[str, Any]


class BuildError(Exception):
    """A build step failed; str() is a one-line message for the user."""


# ---------------------------------------------------------------------------
# small helpers

def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def one_line(text: str) -> str:
    return " ".join(text.split())


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def json_bytes(obj: object) -> bytes:
    """``obj`` as indented, key-sorted JSON with a final newline (the same bytes for the same value)."""
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def rmtree(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def require_tool(name: str, why: str) -> str:
    exe = shutil.which(name)
    if not exe:
        raise BuildError(f"'{name}' not found on PATH (needed to {why}); install it and retry")
    return exe


def pip_command() -> list[str]:
    import importlib.util
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    for name in ("pip", "pip3"):
        exe = shutil.which(name)
        if exe:
            return [exe]
    raise BuildError("'pip' not found (neither `python -m pip` nor pip on PATH; needed to "
                     "download wheels); install it and retry")


def run_tool(cmd: list[str], what: str, *, cwd: Path | None = None,
         timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure raise BuildError with its most telling stderr line."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, timeout=timeout, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True)
    except FileNotFoundError:
        raise BuildError(f"{what}: '{cmd[0]}' not found") from None
    except subprocess.TimeoutExpired:
        raise BuildError(f"{what}: `{' '.join(cmd[:3])} ...` timed out after {timeout:.0f}s") from None
    if proc.returncode != 0:
        with contextlib.suppress(ValueError, TypeError, KeyError):  # npm --json: {"error": {"summary"}}
            summary = json.loads(proc.stdout)["error"]["summary"]
            raise BuildError(f"{what}: exited {proc.returncode}: {one_line(summary)[:300]}")
        lines = [ln.strip() for ln in ((proc.stderr or "") + "\n" + (proc.stdout or "")).splitlines()]
        lines = [ln for ln in lines if ln and "complete log of this run" not in ln
                 and not ln.startswith("npm error A complete log")]
        errs = [ln for ln in lines if re.search(r"error", ln, re.I)
                and not re.match(r"npm error (code|errno|syscall) ", ln)]
        detail = (errs or lines or ["(no output)"])[-1]
        shown = " ".join([Path(cmd[0]).name, *cmd[1:3]])
        raise BuildError(f"{what}: `{shown} ...` exited {proc.returncode}: {one_line(detail)[:300]}")
    return proc


class Progress:
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
def exclusive(lock_file: Path) -> Iterator[None]:
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


def zipinfo(name: str, is_dir: bool = False) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, ZIP_DATE)
    if is_dir:
        info.external_attr = (0o40755 << 16) | 0x10
        info.compress_type = zipfile.ZIP_STORED
    else:
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
    return info


def write_zip(path: Path, entries: dict[str, bytes]) -> None:
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
                z.writestr(zipinfo(name, True), b"")
            else:
                z.writestr(zipinfo(name), entries[name], compresslevel=9)
    os.replace(tmp, path)


def restore_zip(src: Path, dst: Path, drop: AbstractSet[str] = frozenset()) -> None:
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

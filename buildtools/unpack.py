"""Step 5: unpack the npm tarballs (once per sha256)."""
from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from .util import rmtree


def unpack_npm(tgz: Path, sha: str, unpack_dir: Path) -> tuple[Path, bool]:
    dest = unpack_dir / f"{tgz.name[:-4]}-{sha[:12]}"
    if (dest / ".complete").exists():
        return dest, False
    rmtree(dest)
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
            if hasattr(tarfile, "data_filter"):
                tf.extractall(tmp, members=members, filter="data")
            else:  # pragma: no cover - a Python without extraction filters
                tf.extractall(tmp, members=members)
        (tmp / "package" / ".complete").write_text(sha)
        os.replace(tmp / "package", dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest, True

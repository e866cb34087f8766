"""Step 6, inputs: the widget's browser files and the source zips the precompile compiles."""
from __future__ import annotations

import ast
import hashlib
import os
import re
import zipfile
from pathlib import Path

from .config import STDLIB_DROP_FILES, STDLIB_DROP_TOP, WHEEL_DROP_SUBDIRS, WHEEL_METADATA_DROP, WIDGET_EXCLUDE
from .util import BuildError, sha256_file


def widget_files(root: Path) -> dict[str, Path]:
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


def import_signature(widget: dict[str, Path]) -> str:
    """A hash of the import statements of widget/ (and of any file the host Python cannot parse)."""
    h = hashlib.sha256()
    for rel, path in sorted(widget.items()):
        if not rel.endswith(".py"):
            continue
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            h.update(f"{rel}:{sha256_file(path)}\n".encode())
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                h.update(f"{rel}:{ast.dump(node)}\n".encode())
    return h.hexdigest()


def stdlib_source_entries(stdlib_zip: Path) -> dict[str, bytes]:
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


def metadata_headers(data: bytes) -> bytes:
    """A core-metadata file's header block, without the long description after it (or in its body)."""
    text = data.replace(b"\r\n", b"\n")
    head, sep, _ = text.partition(b"\n\n")
    # An old-style "Description:" header holds the README too, in continuation lines.
    head = re.sub(rb"^Description:.*(?:\n[ \t|].*)*\n?", b"", head + b"\n", flags=re.M | re.I)
    return head.rstrip(b"\n") + b"\n"


def bundle_source_entries(wheels: dict[str, Path], widget: dict[str, Path]) -> dict[str, bytes]:
    entries: dict[str, bytes] = {}
    origin: dict[str, str] = {}
    for _name, whl in sorted(wheels.items()):
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
                meta = len(parts) == 2 and parts[0].endswith(".dist-info")
                if meta and parts[1] in WHEEL_METADATA_DROP:
                    continue
                if fn in entries:
                    raise BuildError(f"bundle: {fn} is in both {origin[fn]} and {whl.name}")
                entries[fn] = z.read(info)
                if meta and parts[1] == "METADATA":
                    entries[fn] = metadata_headers(entries[fn])
                origin[fn] = whl.name
    for rel, path in widget.items():
        if rel in entries:
            raise BuildError(f"bundle: {rel} is in both {origin[rel]} and the repo")
        entries[rel] = path.read_bytes()
    return entries

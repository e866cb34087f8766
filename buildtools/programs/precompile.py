"""Run inside Pyodide (precompile.mjs): the stdlib and the bundle compiled to .pyc zips, and the checks that they
import. split.py imports its helpers from here (as ``buildtools.programs.precompile``)."""

from __future__ import annotations

import ast
import importlib
import importlib._bootstrap_external as _bext
import importlib.util
import json
import time
import zipfile
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # collections.abc is not in the boot's stdlib zip: split.py's trace must not see it imported
    from collections.abc import Iterable

ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def zip_info(name: str, is_dir: bool = False) -> zipfile.ZipInfo:
    """A zip entry with a fixed date and the modes of a file or a folder (the same bytes on every build)."""
    info = zipfile.ZipInfo(name, ZIP_DATE)
    if is_dir:
        info.external_attr = (0o40755 << 16) | 0x10
        info.compress_type = zipfile.ZIP_STORED
    else:
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
    return info


def strip_docstrings(tree: ast.Module) -> ast.Module:
    """Drop module/class/function docstrings (what -OO does, without also dropping asserts)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.copy_location(ast.Pass(), body[0])]
    return tree


def compile_zip(src: str, dst: str, co_prefix: str, strip_docs: Iterable[str] = ()) -> dict[str, Any]:
    """Every .py becomes a sourceless unchecked-hash .pyc next to where it was (column tables are left out:
    Pyodide runs this with PYTHONNODEBUGRANGES; docstrings are dropped under the prefixes in strip_docs)."""
    t0 = time.perf_counter()
    n_pyc, failed = 0, []
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            name = info.filename
            if info.is_dir():
                zout.writestr(zip_info(name, True), b"")
                continue
            data = zin.read(info)
            if name.endswith(".py"):
                try:
                    if any(name.startswith(p) for p in strip_docs):
                        tree = strip_docstrings(ast.parse(data, co_prefix + name))
                        code = compile(tree, co_prefix + name, "exec", dont_inherit=True)
                    else:
                        code = compile(data, co_prefix + name, "exec", dont_inherit=True)
                except Exception as e:  # noqa: BLE001 - keep the source: it still imports (or fails) as before
                    failed.append(f"{name}: {type(e).__name__}: {e}")
                else:
                    # CPython's own writer of unchecked-hash .pyc files: private, so typeshed does not list it.
                    pyc = _bext._code_to_hash_pyc(  # type: ignore[attr-defined]
                        code, importlib.util.source_hash(data), checked=False
                    )
                    zout.writestr(zip_info(name[:-3] + ".pyc"), bytes(pyc), compresslevel=9)
                    n_pyc += 1
                    continue
            zout.writestr(zip_info(name), data, compresslevel=9)
    return {"pyc": n_pyc, "kept_source": failed, "seconds": round(time.perf_counter() - t0, 2)}


def module_names(zip_path: str, skip: Iterable[str]) -> list[str]:
    """The importable module names of a zip of .py/.pyc files, but for the top-level packages in ``skip``."""
    names: set[str] = set()
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


def import_all(names: Iterable[str]) -> dict[str, Any]:
    """Import each module: ``ok`` (the names that imported) and ``bad`` (name: why not)."""
    ok: list[str] = []
    bad: dict[str, str] = {}
    for name in names:
        try:
            importlib.import_module(name)
            ok.append(name)
        except BaseException as e:  # noqa: BLE001 - reported by name
            bad[name] = f"{type(e).__name__}: {e}"[:200]
    return {"ok": ok, "bad": bad}


def origins(names: Iterable[str]) -> dict[str, str | None]:
    """Where each module was loaded from (its spec's origin)."""
    out: dict[str, str | None] = {}
    for name in names:
        mod = importlib.import_module(name)
        out[name] = getattr(getattr(mod, "__spec__", None), "origin", None)
    return out


def smoke_bundle() -> bool:
    """The bundle's libraries do their job (a schema check, a JSON patch, Markdown)."""
    import jsonpatch
    import jsonschema
    import markdown
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}},
              "required": ["n"]}
    v = jsonschema.Draft202012Validator(schema)
    assert v.is_valid({"n": 3}) and not v.is_valid({"n": 0}) and not v.is_valid({})
    assert jsonpatch.apply_patch({"a": 1}, [{"op": "replace", "path": "/a", "value": 2}]) == {"a": 2}
    assert "<em>x</em>" in markdown.markdown("*x*")
    return True


def run(job_json: str) -> str:
    """Compile the job's targets; their results as JSON (precompile.mjs renames the .tmp files)."""
    job = json.loads(job_json)
    results = {}
    for t in job["targets"]:
        results[t["name"]] = compile_zip(t["src"], t["dst"] + ".tmp", t["co_prefix"], t.get("strip_docs", ()))
    return json.dumps(results)

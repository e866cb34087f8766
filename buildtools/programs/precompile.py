import importlib
import importlib._bootstrap_external as _bext
import importlib.util
import json
import time
import zipfile

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
                except Exception as e:  # noqa: BLE001 - keep the source: it still imports (or fails) as before
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
        except BaseException as e:  # noqa: BLE001 - reported by name
            bad[name] = f"{type(e).__name__}: {e}"[:200]
    return {"ok": ok, "bad": bad}


def origins(names):
    out = {}
    for name in names:
        mod = importlib.import_module(name)
        out[name] = getattr(getattr(mod, "__spec__", None), "origin", None)
    return out


def smoke_bundle():
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


def run(job_json):
    job = json.loads(job_json)
    results = {}
    for t in job["targets"]:
        results[t["name"]] = compile_zip(t["src"], t["dst"] + ".tmp", t["co_prefix"], t.get("strip_docs", ()))
    return json.dumps(results)

"""Run inside Pyodide (split.mjs): split the precompiled stdlib and bundle into what the widget's boot imports
and the lazy groups, then check a boot on the core needs no lazy group."""

from __future__ import annotations

from typing import TYPE_CHECKING

# split.mjs puts precompile.py at this path in Pyodide's file system before it runs this program.
from buildtools.programs.precompile import module_names, smoke_bundle, zip_info

if TYPE_CHECKING:  # collections.abc is not in the boot's stdlib zip: the trace below must not see it imported
    from collections.abc import Iterable


def exercise(bundle: str, extra: Iterable[str], sample_md: str) -> dict[str, str]:
    """Import and run what the widget's boot and first answer do; the widget modules that failed to import."""
    # As far as they run outside a browser.
    import importlib
    import sys
    if bundle not in sys.path:
        sys.path.insert(0, bundle)
    for name in extra:
        importlib.import_module(name)
    failed: dict[str, str] = {}
    for name in module_names(bundle, []):
        if name == "widget" or name.startswith("widget."):
            try:
                importlib.import_module(name)
            except BaseException as e:  # noqa: BLE001 - server-side transports, modules that need the page (js)
                failed[name] = f"{type(e).__name__}: {e}"[:200]
    try:
        from widget.core.markdown import render_markdown
    except ImportError as e:  # a tree without it (build.py's own tests)
        failed["widget.core.markdown"] = f"{type(e).__name__}: {e}"[:200]
    else:
        render_markdown(sample_md)
    import markdown  # noqa: F401 - imported at boot by the client (state sync) and the first answer
    return failed


def exercise_schema() -> None:
    """The first argument check against a JSON Schema: jsonschema and what it imports (the \"schema\" group)."""
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


def _loaded(prefix: str) -> set[str]:
    import sys
    out: set[str] = set()
    for mod in list(sys.modules.values()):
        origin = getattr(getattr(mod, "__spec__", None), "origin", None)
        if isinstance(origin, str) and origin.startswith(prefix):
            out.add(origin[len(prefix):])
    return out


def _with_parents(names: Iterable[str], data: dict[str, bytes]) -> set[str]:
    out = set(names)
    for name in names:
        parts = name.split("/")[:-1]
        for k in range(1, len(parts) + 1):  # parent packages' __init__
            init = "/".join(parts[:k]) + "/__init__.pyc"
            if init in data:
                out.add(init)
    return out


def _modules(names: Iterable[str]) -> tuple[str, ...]:
    mods: set[str] = set()
    for n in names:
        if n.endswith((".pyc", ".py")):
            mod = n.rsplit(".", 1)[0].replace("/", ".")
            if mod.endswith(".__init__"):
                mod = mod[: -len(".__init__")]
            if all(p.isidentifier() for p in mod.split(".")):
                mods.add(mod)
    return tuple(sorted(mods))


def _bundle_home(name: str) -> str:
    # The group a bundle file goes to follows its top-level package; metadata stays at boot (importlib.metadata
    # scans it: markdown's extension entry points), our widget package too (its imports are traced in full).
    top = name.split("/")[0]
    if top.endswith(".dist-info") or top == "widget":
        return "core"
    if top.endswith("-stubs") or name.endswith(".pyi"):
        return "drop"  # type stubs: never imported
    return top.split(".")[0]


def split_stdlib(job_json: str) -> str:
    """Write the core, rest and schema zips (.tmp) and the finder; the counts and lists as JSON."""
    import importlib._bootstrap_external as _bext
    import importlib.util
    import json
    import zipfile
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
    code_home: dict[str, str] = {}
    for name in bun:
        top = name.split("/")[0].split(".")[0]
        if name in core_bun:
            code_home.setdefault(top, "core")
        elif name in schema_bun:
            code_home[top] = code_home.get(top) or "schema"
    groups: dict[str, dict[str, bytes]] = {"core": {}, "schema": {}, "rest": {}}
    dropped: list[str] = []
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
    finder = job["finder"].replace(job["finder_groups"], "GROUPS = " + repr(finder_groups) + "\n")
    code = compile(finder, std_prefix + "_autopilot_stdlib.py", "exec", dont_inherit=True)
    core = {n: std[n] for n in core_std}
    # CPython's own writer of unchecked-hash .pyc files: private, so typeshed does not list it.
    pyc = _bext._code_to_hash_pyc(code, importlib.util.source_hash(finder.encode()), checked=False)  # type: ignore[attr-defined]
    core["_autopilot_stdlib.pyc"] = bytes(pyc)
    for dst, entries in ((job["core_dst"], core), (job["rest_dst"], rest), (job["schema_dst"], schema)):
        dirs = set()
        for n in entries:
            parts = n.split("/")[:-1]
            for k in range(1, len(parts) + 1):
                dirs.add("/".join(parts[:k]) + "/")
        with zipfile.ZipFile(dst + ".tmp", "w") as z:
            for n in sorted(dirs | set(entries)):
                info = zip_info(n, n.endswith("/"))
                info.compress_type = zipfile.ZIP_STORED
                z.writestr(info, b"" if n.endswith("/") else entries[n])
    return json.dumps({"core": len(core), "rest": len(rest), "rest_modules": len(finder_groups["rest"][1]),
                       "schema": len(schema), "schema_modules": len(finder_groups["schema"][1]),
                       "bundle_core": len(groups["core"]), "bundle_lazy": bundle_lazy, "dropped": len(dropped),
                       "not_imported": failed})


def verify_split(job_json: str) -> str:
    """Booted on the core zip with the bundle's core: the boot must need no lazy group; the lazy groups must work
    through the finder."""
    import importlib
    import json
    import zipfile
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
    def refuse(url: str) -> bytes:
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
    bad: dict[str, str] = {}
    for name in job["sample"]:
        try:
            importlib.import_module(name)
        except BaseException as e:  # noqa: BLE001 - reported by name
            bad[name] = f"{type(e).__name__}: {e}"[:200]
    if bad:
        raise RuntimeError(f"modules of the lazy groups do not import through the finder: {bad}")
    if not S.needs_rest(["import sqlite3"]) or S.needs_rest(["import json, asyncio"]):
        raise RuntimeError("needs_rest gives wrong answers")
    return json.dumps({"fetches": S.state()["fetches"]})

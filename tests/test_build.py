"""Tests of build.py: layout, manifest, caching, lock checks, and a Pyodide boot in Node.

The first build() of a fresh checkout downloads (npm, pip) and precompiles (~15 s);
later runs reuse .build-cache/ and take well under a second each.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.build

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import build as buildmod  # noqa: E402

CACHE = buildmod.default_cache_dir(ROOT).resolve()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def dist() -> Path:
    return buildmod.build(quiet=True)


@pytest.fixture(scope="module")
def manifest(dist: Path) -> dict:
    return json.loads((dist / "manifest.json").read_text())


@pytest.fixture(scope="module")
def out(dist: Path, manifest: dict) -> Path:
    return dist / manifest["build_id"]


def test_build_returns_dist_folder(dist):
    assert dist == ROOT / "widget" / "_dist"


def test_layout(dist, manifest, out):
    build_id = manifest["build_id"]
    assert re.fullmatch(r"[0-9a-f]{12}", build_id)
    # only the current versioned folder survives
    assert [p.name for p in dist.iterdir() if p.is_dir()] == [build_id]
    for rel in ["pyodide/pyodide.mjs", "pyodide/pyodide.asm.mjs", "pyodide/pyodide.asm.wasm",
                "pyodide/pyodide-lock.json", "pyodide/python_stdlib.zip",
                "vendor/socket.io.esm.min.js", "vendor/purify.es.mjs",
                "pyscript/core.js", "pyscript/core.css", "bundle.zip"]:
        assert (out / rel).is_file(), rel
    assert "export" in (out / "vendor/purify.es.mjs").read_text()
    # every chunk that pyscript/*.js imports is there
    for js in (out / "pyscript").glob("*.js"):
        for ref in re.findall(r'(?:from|import)\s*\(?\s*"\./([^"]+)"', js.read_text()):
            assert (out / "pyscript" / ref).is_file(), f"{js.name} imports missing {ref}"
    # static/ copied generically (autopilot.js is the unversioned loader)
    static = ROOT / "static"
    for p in static.rglob("*") if static.is_dir() else []:
        rel = p.relative_to(static).as_posix()
        if (not p.is_file() or rel == "autopilot.js" or rel.startswith("loader/")  # the loader's modules: joined
                or p.name.startswith(".") or "__pycache__" in rel):
            continue
        assert (out / rel).read_bytes() == p.read_bytes(), rel
    loader = static / "autopilot.js"
    if loader.is_file():
        js = (dist / "autopilot.js").read_text()
        assert "__BUILD_ID__" not in js
        if "__BUILD_ID__" in loader.read_text():
            assert build_id in js
        assert not (out / "autopilot.js").exists()
    assert manifest["versions"]["pyodide"] == buildmod.NPM_PINS["pyodide"]
    assert manifest["versions"]["jsonschema"] == "4.17.3"
    assert manifest["versions"]["python"].startswith("3.14")
    assert manifest["precompiled"] is True


def test_precompiled_zips(out):
    with zipfile.ZipFile(out / "pyodide/python_stdlib.zip") as z:
        names = set(z.namelist())
    assert {"json/__init__.pyc", "asyncio/__init__.pyc", "re/__init__.pyc", "os.pyc"} <= names
    assert "json/__init__.py" not in names
    assert not any("__pycache__" in n for n in names)
    assert not any(n.startswith("__phello__/") for n in names)

    with zipfile.ZipFile(out / "bundle.zip") as z:
        names = set(z.namelist())
        head = z.read("jsonpatch.pyc")[:16]
    with zipfile.ZipFile(out / "schema.zip") as z:
        schema = set(z.namelist())
    # sourceless, unchecked-hash pyc (flags == 0b01) of Python 3.14
    assert int.from_bytes(head[4:8], "little") == 1
    # What the boot imports is in bundle.zip; jsonschema and its deps in the lazily loaded schema.zip.
    for pkg in ["jsonpatch.pyc", "jsonpointer.pyc", "markdown/__init__.pyc", "markdown/extensions/tables.pyc"]:
        assert pkg in names, pkg
    for pkg in ["jsonschema/__init__.pyc", "attr/__init__.pyc", "pyrsistent/__init__.pyc",
                "jsonschema/schemas/draft2020-12.json", "urllib/request.pyc"]:
        assert pkg in schema and pkg not in names, pkg
    assert not any(n.startswith(("jsonschema/", "attr/", "attrs/", "pyrsistent/")) for n in names)
    # metadata stays at boot (importlib.metadata reads it), type stubs are dropped
    dist_infos = {n.split("/")[0] for n in names if ".dist-info/" in n}
    assert {"jsonschema-4.17.3.dist-info", "markdown-3.11.3.dist-info"} <= dist_infos
    assert not any(n.endswith(".pyi") or "-stubs/" in n for n in names | schema)
    assert not any(n.startswith("jsonschema/tests/") for n in schema)
    # our package, minus the server-only parts, all compiled
    widget_src = [p for p in (ROOT / "widget").rglob("*.py")
                  if not ({"relay", "conformance", "integrations", "_dist", "__pycache__"}
                          & set(p.relative_to(ROOT / "widget").parts))]
    for p in widget_src:
        rel = p.relative_to(ROOT).with_suffix(".pyc").as_posix()
        assert rel in names, rel
    assert not any(n.startswith(("widget/relay/", "widget/conformance/", "widget/integrations/", "widget/_dist/"))
                   for n in names)
    assert not any(n.endswith(".py") for n in names), [n for n in names if n.endswith(".py")][:5]


def test_manifest_hashes(dist, manifest):
    files = manifest["files"]
    on_disk = {p.relative_to(dist).as_posix() for p in dist.rglob("*") if p.is_file()}
    assert on_disk - {"manifest.json"} == set(files)
    for rel, meta in files.items():
        p = dist / rel
        assert p.stat().st_size == meta["bytes"], rel
        assert _sha(p) == meta["sha256"], rel
    # build_id is the hash of the versioned content
    h = hashlib.sha256()
    prefix = manifest["build_id"] + "/"
    for rel in sorted(r[len(prefix):] for r in files if r.startswith(prefix)):
        h.update(f"{rel}\0{files[prefix + rel]['sha256']}\n".encode())
    assert h.hexdigest()[:12] == manifest["build_id"]


def test_lock_records_every_download(manifest):
    lock = json.loads((ROOT / "build.lock.json").read_text())
    assert {k: v["version"] for k, v in lock["npm"].items()} == buildmod.NPM_PINS
    assert {k: v["version"] for k, v in lock["wheels"].items()} == buildmod.WHEEL_PINS
    for kind in ("npm", "wheels"):
        for entry in lock[kind].values():
            assert re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])
            cached = CACHE / "downloads" / kind / entry["file"]
            assert _sha(cached) == entry["sha256"]


def test_second_run_is_cached(dist, manifest, capsys):
    """An input touched (same content): every step runs and is served from the cache."""
    buildmod.build(quiet=True)  # (a checkout sharing this cache may have pruned what the first build made)
    capsys.readouterr()
    os.utime(ROOT / "build.lock.json")
    again = buildmod.build()
    text = capsys.readouterr().out
    assert again == dist
    assert json.loads((dist / "manifest.json").read_text())["build_id"] == manifest["build_id"]
    assert "[6/7] precompile ... cached" in text
    assert "[2/7] npm packages ... cached" in text and "[3/7] wheels ... cached" in text


def test_nothing_changed_is_done_at_once_and_a_changed_output_is_rebuilt(dist, manifest, capsys):
    buildmod.build(quiet=True)
    capsys.readouterr()
    assert buildmod.build() == dist
    assert capsys.readouterr().out == f"build {manifest['build_id']} up to date (no input changed)\n"
    # A file of the output changed by hand: the build runs (from the cache) and puts it back.
    loader = dist / "autopilot.js"
    good = loader.read_bytes()
    loader.write_bytes(good + b"\n// edited")
    buildmod.build()
    assert "[7/7] assemble" in capsys.readouterr().out
    assert loader.read_bytes() == good


NODE_SMOKE = r"""
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
globalThis.fetch = () => { throw new Error("network disabled in this test"); };
const base = process.argv[2];
const { loadPyodide } = await import(pathToFileURL(path.join(base, "pyodide", "pyodide.mjs")).href);
const t0 = performance.now();
const py = await loadPyodide({ indexURL: path.join(base, "pyodide") + path.sep });
const bootMs = performance.now() - t0;
py.FS.writeFile("/lib/bundle.zip", fs.readFileSync(path.join(base, "bundle-full.zip")));
const res = py.runPython(`
import json, sys, asyncio, re, email, urllib.parse
sys.path.insert(0, "/lib/bundle.zip")
import jsonschema, jsonpatch, markdown, markdown.extensions.toc
v = jsonschema.Draft202012Validator({"type": "object", "required": ["q"],
                                     "properties": {"q": {"type": "string"}}})
json.dumps({"valid": v.is_valid({"q": "x"}), "invalid": v.is_valid({"q": 1}),
            "json": json.__spec__.origin, "jsonschema": jsonschema.__spec__.origin})
`);
console.log(JSON.stringify({ boot_ms: Math.round(bootMs), ...JSON.parse(res) }));
"""


def test_node_boots_pyodide_from_output(out, tmp_path):
    script = tmp_path / "smoke.mjs"
    script.write_text(NODE_SMOKE)
    proc = subprocess.run(["node", str(script), str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["valid"] is True and res["invalid"] is False
    assert res["json"] == "/lib/python314.zip/json/__init__.pyc"
    assert res["jsonschema"] == "/lib/bundle.zip/jsonschema/__init__.pyc"


# A stdin handler that asks for a retry once (EAGAIN), then reads "hi\n": Pyodide waits 100 ms on its shared
# memory (Atomics.wait) and retries, where waiting is allowed (a worker, Node); on a page's main thread it cannot
# wait and the read ends empty. Counts the shared memories made while loading and after the read.
EAGAIN_READ = r"""
const shared = [];
const Memory = WebAssembly.Memory;
WebAssembly.Memory = function (d) { if (d && d.shared) shared.push(d); return new Memory(d); };
WebAssembly.Memory.prototype = Memory.prototype;
const pyodide = await loadPyodide(options);
const atLoad = shared.length;
let calls = 0;
pyodide.setStdin({ read(buf) {
  calls += 1;
  if (calls === 1) { const e = new Error("try again"); e.code = "EAGAIN"; throw e; }
  buf.set([104, 105, 10]);
  return 3;
} });
const result = { read: pyodide.runPython("import sys\nsys.stdin.readline()"), calls, atLoad, after: shared.length };
WebAssembly.Memory = Memory;
"""


def test_pyodide_makes_its_shared_memory_on_first_use(out, tmp_path):
    """pyodide.asm.mjs as shipped makes no shared WebAssembly.Memory when it loads (without cross-origin isolation
    that is a deprecated use of SharedArrayBuffer: Chrome warns, Lighthouse's best practices score drops); its one
    use, the wait before a stdin/stdout handler's retry, makes it then and still waits."""
    from buildtools.patch import _ALREADY_LAZY, _EAGER_SHARED_MEMORY

    js = (out / "pyodide" / "pyodide.asm.mjs").read_text()
    assert not _EAGER_SHARED_MEMORY.search(js), "the eager shared memory is back in pyodide.asm.mjs"
    assert len(_ALREADY_LAZY.findall(js)) == 1
    assert len(re.findall(r"shared:\s*(?:!0|true)", js)) == 1
    script = tmp_path / "eagain.mjs"
    script.write_text(r"""
import path from "node:path"; import { pathToFileURL } from "node:url";
const base = process.argv[2];
const { loadPyodide } = await import(pathToFileURL(path.join(base, "pyodide", "pyodide.mjs")).href);
const options = { indexURL: path.join(base, "pyodide") + path.sep,
                  stdLibURL: path.join(base, "pyodide", "python_stdlib_core.zip") };
""" + EAGAIN_READ + "console.log(JSON.stringify(result));\n")
    proc = subprocess.run(["node", str(script), str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"read": "hi\n", "calls": 2, "atLoad": 0, "after": 1}


def _fake_root(tmp_path: Path) -> Path:
    """A repo-like tree with files build.py must pick up generically (or leave out)."""
    root = tmp_path / "repo"
    files = {
        "widget/__init__.py": "VALUE = 1\n",
        "widget/deep/er/mod.py": "def f():\n    return 42\n",
        "widget/deep/__init__.py": "",
        "widget/data/strings.json": '{"hi": "there"}\n',
        "widget/broken.py": "def (:\n",
        "widget/relay/server.py": "SECRET = 1\n",
        "widget/_dist/old.txt": "x",
        "widget/__pycache__/x.cpython-311.pyc": "junk",
        "static/autopilot.js": 'const BUILD = "__BUILD_ID__";\n',
        "static/bridge.mjs": "export const x = 1;\n",
        "static/skin.css": ":host { color: red }\n",
        "static/demo/index.html": "<!doctype html><title>demo</title>\n",
        "static/.hidden": "no",
    }
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    shutil.copy(ROOT / "build.lock.json", root / "build.lock.json")
    return root


def test_generic_tree_and_no_precompile(tmp_path, dist, capsys):
    root = _fake_root(tmp_path)
    d = buildmod.build(root, cache_dir=CACHE)
    text = capsys.readouterr().out
    assert "WARNING: bundle: 1 file(s) kept as .py" in text and "widget/broken.py" in text
    man = json.loads((d / "manifest.json").read_text())
    bid = man["build_id"]
    out = d / bid
    assert (d / "autopilot.js").read_text() == f'const BUILD = "{bid}";\n'
    assert (out / "bridge.mjs").is_file() and (out / "skin.css").is_file()
    assert (out / "demo/index.html").is_file() and not (out / ".hidden").exists()
    assert not (out / "autopilot.js").exists()
    with zipfile.ZipFile(out / "bundle.zip") as z:
        names = set(z.namelist())
    assert {"widget/__init__.pyc", "widget/deep/__init__.pyc", "widget/deep/er/mod.pyc",
            "widget/data/strings.json", "widget/broken.py"} <= names
    assert not any(n.startswith(("widget/relay", "widget/_dist", "widget/__pycache__")) for n in names)

    # a new static file -> new build id, old folder removed
    (root / "static/extra.txt").write_text("new\n")
    d2 = buildmod.build(root, cache_dir=CACHE, quiet=True)
    bid2 = json.loads((d2 / "manifest.json").read_text())["build_id"]
    assert bid2 != bid and (d2 / bid2 / "extra.txt").is_file() and not (d2 / bid).exists()

    # --no-precompile ships sources
    d3 = buildmod.build(root, cache_dir=CACHE, quiet=True, precompile=False)
    man3 = json.loads((d3 / "manifest.json").read_text())
    assert man3["precompiled"] is False
    with zipfile.ZipFile(d3 / man3["build_id"] / "bundle.zip") as z:
        assert "widget/deep/er/mod.py" in z.namelist() and "jsonschema/__init__.py" in z.namelist()
    with zipfile.ZipFile(d3 / man3["build_id"] / "pyodide/python_stdlib.zip") as z:
        assert "json/__init__.py" in z.namelist()

    # --clean wipes the folder first
    (d3 / "stray.txt").write_text("x")
    buildmod.build(root, cache_dir=CACHE, quiet=True, precompile=False, clean=True)
    assert not (d3 / "stray.txt").exists()


def test_lock_mismatch_fails_clearly(tmp_path, dist):
    lock = json.loads((ROOT / "build.lock.json").read_text())
    lock["npm"]["dompurify"]["sha256"] = "0" * 64
    bad = tmp_path / "build.lock.json"
    bad.write_text(json.dumps(lock))
    with pytest.raises(buildmod.BuildError, match="sha256 mismatch for npm dompurify"):
        buildmod.build(ROOT, out_dir=tmp_path / "out", cache_dir=CACHE, lock_path=bad, quiet=True)
    assert not (tmp_path / "out").exists()
    # the shared cache still holds the good tarball
    good = json.loads((ROOT / "build.lock.json").read_text())["npm"]["dompurify"]
    assert _sha(CACHE / "downloads/npm" / good["file"]) == good["sha256"]

    lock = json.loads((ROOT / "build.lock.json").read_text())
    lock["wheels"]["markdown"]["version"] = "0.0"
    bad.write_text(json.dumps(lock))
    with pytest.raises(buildmod.BuildError, match="--update-lock"):
        buildmod.build(ROOT, out_dir=tmp_path / "out", cache_dir=CACHE, lock_path=bad, quiet=True)


def test_missing_tool_is_one_line_error(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path / "empty"), AUTOPILOT_BUILD_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, str(ROOT / "build.py"), "--quiet"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("build.py: error: 'npm' not found"), proc.stderr


# ---------------------------------------------------------------------------
# stdlib split, stored zips, brotli copies, the loader's boot files


def test_stdlib_split_into_core_and_lazy_groups(out):
    full = zipfile.ZipFile(out / "pyodide/python_stdlib.zip")
    core = zipfile.ZipFile(out / "pyodide/python_stdlib_core.zip")
    rest = zipfile.ZipFile(out / "pyodide/python_stdlib_rest.zip")
    schema = zipfile.ZipFile(out / "schema.zip")
    bundle = zipfile.ZipFile(out / "bundle.zip")
    files = lambda z: {n for n in z.namelist() if not n.endswith("/")}  # noqa: E731
    std = files(full)
    # every stdlib file is in exactly one of the three, and the core adds only the finder
    assert files(core) & files(rest) == files(core) & files(schema) == files(rest) & files(schema) == set()
    assert files(core) | (files(rest) & std) | (files(schema) & std) == std | {"_autopilot_stdlib.pyc"}
    assert {"json/__init__.pyc", "asyncio/__init__.pyc", "encodings/utf_16_le.pyc"} <= files(core)
    assert {"sqlite3/__init__.pyc", "xml/dom/minidom.pyc", "tkinter/__init__.pyc"} & files(rest) >= {
        "sqlite3/__init__.pyc", "xml/dom/minidom.pyc"}
    # the wheels' files the boot does not import are lazy too (none is lost, none is in two places)
    assert "markdown/extensions/toc.pyc" in files(rest) and "markdown/extensions/toc.pyc" not in files(bundle)
    wheel_files = (files(rest) | files(schema)) - std
    assert wheel_files & files(bundle) == set()
    # no folder without files in bundle.zip: it would import as a namespace package and hide the lazy one
    for d in {n for n in bundle.namelist() if n.endswith("/")}:
        assert any(n.startswith(d) and not n.endswith("/") for n in bundle.namelist()), d
    # stored: zipimport reads them without inflating, HTTP compression packs them
    for z in (core, rest, schema, bundle):
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}


def test_pyc_without_docstrings_and_column_tables(out, tmp_path):
    """Stdlib and wheel .pyc files carry no docstrings and no column tables; our widget/ keeps docstrings."""
    script = tmp_path / "check.mjs"
    script.write_text(r"""
import fs from "node:fs"; import path from "node:path"; import { pathToFileURL } from "node:url";
const base = process.argv[2];
const { loadPyodide } = await import(pathToFileURL(path.join(base, "pyodide", "pyodide.mjs")).href);
const py = await loadPyodide({ indexURL: path.join(base, "pyodide") + path.sep,
                               stdLibURL: path.join(base, "pyodide", "python_stdlib_core.zip") });
py.FS.writeFile("/lib/bundle.zip", fs.readFileSync(path.join(base, "bundle.zip")));
console.log(py.runPython(`
import json, sys
sys.path.insert(0, "/lib/bundle.zip")
import typing, markdown, widget.client
def cols(f):
    return any(c is not None for _, _, c, _ in f.__code__.co_positions())
json.dumps({"typing": typing.get_type_hints.__doc__, "markdown": markdown.markdown.__doc__,
            "widget": bool(widget.client.AutopilotClient.__doc__), "cols": cols(typing.get_type_hints)})
`));
""")
    proc = subprocess.run(["node", str(script), str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res == {"typing": None, "markdown": None, "widget": True, "cols": False}


def test_wheel_metadata_is_what_importlib_metadata_reads(out, tmp_path):
    """The bundle keeps each wheel's METADATA header block and entry points (versions, requirements, markdown's
    extensions by name) and licenses; not the long description (the README) nor pip's RECORD."""
    with zipfile.ZipFile(out / "bundle.zip") as z:
        meta = {n: z.read(n) for n in z.namelist() if ".dist-info/" in n and not n.endswith("/")}
    names = {n.split("/", 1)[1] for n in meta}
    assert "RECORD" not in names and {"METADATA", "entry_points.txt"} <= names
    assert any("LICENSE" in n or "COPYING" in n for n in names)
    for n, data in meta.items():
        if n.endswith("/METADATA"):
            assert b"\n\n" not in data and data.startswith(b"Metadata-Version:"), n
    script = tmp_path / "meta.mjs"
    script.write_text(r"""
import fs from "node:fs"; import path from "node:path"; import { pathToFileURL } from "node:url";
const base = process.argv[2];
const { loadPyodide } = await import(pathToFileURL(path.join(base, "pyodide", "pyodide.mjs")).href);
const py = await loadPyodide({ indexURL: path.join(base, "pyodide") + path.sep });
py.FS.writeFile("/lib/bundle.zip", fs.readFileSync(path.join(base, "bundle-full.zip")));
console.log(py.runPython(`
import json, sys
sys.path.insert(0, "/lib/bundle.zip")
from importlib import metadata
import markdown
json.dumps({"version": metadata.version("jsonschema"), "requires": bool(metadata.requires("jsonschema")),
            "toc": "toc" in {e.name for e in metadata.entry_points(group="markdown.extensions")},
            "html": "<h1 id=\\"a\\">a</h1>" in markdown.markdown("# a", extensions=["toc"])})
`));
""")
    proc = subprocess.run(["node", str(script), str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"version": "4.17.3", "requires": True, "toc": True,
                                                                 "html": True}


def test_brotli_copies_and_loader_boot_files(dist, manifest, out):
    # A .br copy next to every big file the loader fetches (the relay serves it), listed in the manifest.
    bid = manifest["build_id"]
    for rel in ["pyodide/pyodide.asm.wasm", "pyodide/pyodide.asm.mjs", "pyodide/python_stdlib_core.zip",
                "bundle.zip", "vendor/socket.io.esm.min.js"]:
        br = out / (rel + ".br")
        assert br.is_file() and br.stat().st_size < 0.9 * (out / rel).stat().st_size, rel
        assert f"{bid}/{rel}.br" in manifest["files"]
    assert not any(n.startswith(f"{bid}/pyscript/") and n.endswith(".br") for n in manifest["files"])
    proc = subprocess.run(["node", "-e", "const z=require('zlib'),fs=require('fs');"
                           "process.stdout.write(z.brotliDecompressSync(fs.readFileSync(process.argv[1]))"
                           ".toString('hex').slice(0,64))",
                           str(out / "bundle.zip.br")], capture_output=True, text=True, timeout=60)
    assert proc.stdout == (out / "bundle.zip").read_bytes()[:32].hex()
    # The loader knows the stdlib zips and the lock file's info (no lock file fetch).
    js = (dist / "autopilot.js").read_text()
    assert "/*__BOOT_FILES__*/" not in js
    boot = json.loads(re.search(r"(?:var|const) BOOT_FILES = (\{.*?\})(?: \|\| \{\})?;", js).group(1))
    assert boot["stdlib"] == "pyodide/python_stdlib_core.zip" and boot["rest"] == "pyodide/python_stdlib_rest.zip"
    assert boot["lockInfo"]["python"].startswith("3.14")


def test_node_boot_on_core_with_lazy_rest(out, tmp_path):
    script = tmp_path / "lazy.mjs"
    script.write_text(r"""
import fs from "node:fs"; import path from "node:path"; import { pathToFileURL } from "node:url";
globalThis.fetch = () => { throw new Error("network disabled in this test"); };
const base = process.argv[2];
const { loadPyodide } = await import(pathToFileURL(path.join(base, "pyodide", "pyodide.mjs")).href);
const py = await loadPyodide({ indexURL: path.join(base, "pyodide") + path.sep,
                               stdLibURL: path.join(base, "pyodide", "python_stdlib_core.zip") });
py.FS.writeFile("/tmp/rest.zip", fs.readFileSync(path.join(base, "pyodide", "python_stdlib_rest.zip")));
py.FS.writeFile("/tmp/schema.zip", fs.readFileSync(path.join(base, "schema.zip")));
console.log(py.runPython(`
import json, sys
import _autopilot_stdlib as S
zips = {"rest-url": "/tmp/rest.zip", "schema-url": "/tmp/schema.zip"}
S.install({"rest": "rest-url", "schema": "schema-url"}, fetch=lambda url: open(zips[url], "rb").read())
before = S.state()
try:
    import not_a_module_anywhere
except ModuleNotFoundError:
    missing_ok = True
after_missing = S.state()["fetches"]
import sqlite3, email.mime.text, encodings.cp1252
c = sqlite3.connect(":memory:")
json.dumps({"before": before["fetches"], "after_missing": after_missing, "after": S.state()["fetches"],
            "trigger": S.state()["trigger"], "sql": c.execute("select 2 + 2").fetchone()[0],
            "cp1252": "é".encode("cp1252").hex(), "needs": [S.needs_rest(["import csv"]),
            S.needs_rest(["from json import dumps"])]})
`));
""")
    proc = subprocess.run(["node", str(script), str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    # sqlite3 is in the rest zip, email (urllib.request imports it) in the schema zip: one fetch each
    assert res == {"before": 0, "after_missing": 0, "after": 2, "trigger": "email", "sql": 4, "cp1252": "e9",
                   "needs": [True, False]}


async def test_browser_boot_needs_no_lazy_zip_and_page_python_can_import_any_stdlib_module(demo_page):
    """The demo page boots, answers, and renders Markdown without the rest zip and without any synchronous fetch;
    jsonschema's zip comes asynchronously (right after the boot when a page function has an explicit schema to
    check, or before the first argument check), once; a later import of a module that is only in the rest zip
    fetches it once (synchronously) and works."""
    from support import py_eval

    page = demo_page.page
    state = await py_eval(page, "import _autopilot_stdlib as S\nS.state()")
    assert state["trigger"] is None and state["mounted"] is False and set(state["groups"]) <= {"schema"}, state
    await page.click("#autopilot-toggle-host >> button.toggle")
    box = page.locator("#autopilot-bar-host >> textarea.input")
    await box.fill("stdlib check **bold** `code`")
    await box.press("Enter")
    await page.locator("#autopilot-bar-host >> .messages > .message.assistant").last.locator("h3").wait_for()
    state = await py_eval(page, "import _autopilot_stdlib as S\nS.state()")
    assert state["trigger"] is None, f"the boot or an answer imported {state['trigger']} from a lazy zip"
    assert state["mounted"] is False and set(state["groups"]) <= {"schema"}, state
    # The answer has finished streaming (Send is back instead of Stop) before the next message is typed.
    await page.locator("#autopilot-bar-host >> button.send").wait_for(state="visible", timeout=20_000)
    # The demo model calls what the message names; add_numbers has a JSON Schema: checked after an asynchronous
    # fetch of jsonschema's zip.
    await py_eval(page, "from widget import get_client\n@get_client().function\n"
                        "def add_numbers(a: int, b: int) -> int:\n    return a + b\nTrue")
    # The relay has it (the state sync is debounced) before the message that names it goes out.
    await page.wait_for_function(
        """() => window.Autopilot.pyodide.runPython(
              "from widget import get_client\\n'add_numbers' in ((get_client().state.acked or {}).get("
              + "'autopilot') or {}).get('functions', {})")""", timeout=20_000)
    await box.fill('add_numbers {"a": 2, "b": 40}')
    await box.press("Enter")
    await page.wait_for_function(
        """() => { try { return JSON.parse(window.Autopilot.pyodide.runPython(
              "import json\\nfrom widget import get_client\\njson.dumps(get_client().get_function_call_history())"))
            .some(r => r.name === 'add_numbers' && r.respondedAt !== null); } catch (e) { return false; } }""",
        timeout=30_000)
    history = await py_eval(page, "from widget import get_client\nget_client().get_function_call_history()")
    call = next(r for r in history if r["name"] == "add_numbers")
    assert call["status"] == "success", call
    state = await py_eval(page, "import _autopilot_stdlib as S\nS.state()")
    assert state["groups"] == ["schema"] and state["fetches"] == 1 and state["trigger"] is None, state
    got = await py_eval(page, "import sqlite3, _autopilot_stdlib as S\n"
                              "[sqlite3.connect(':memory:').execute('select 6 * 7').fetchone()[0], "
                              "S.state()['fetches'], S.state()['trigger'], S.state()['groups']]")
    assert got == [42, 2, "sqlite3", ["rest", "schema"]]
    got = await py_eval(page, "import statistics, markdown.extensions.toc\nstatistics.median([1, 5, 9])")
    assert got == 5
    await demo_page.reset()


async def test_relay_serves_the_brotli_copies(demo_page):
    res = await demo_page.page.evaluate("""async () => {
        const r = await fetch(window.Autopilot.config.root + 'pyodide/pyodide.asm.wasm', {cache: 'no-store'});
        const e = performance.getEntriesByType('resource').filter(x => x.name.endsWith('pyodide.asm.wasm'));
        return {status: r.status, type: r.headers.get('content-type'), enc: r.headers.get('content-encoding'),
                size: (await r.arrayBuffer()).byteLength};
    }""")
    assert res == {"status": 200, "type": "application/wasm", "enc": "br", "size": res["size"]}
    assert res["size"] > 9_000_000  # decoded by the browser


def test_node_programs_parse() -> None:
    """The programs the build runs under Node are real modules: each parses (``node --check``)."""
    programs = sorted((ROOT / "buildtools" / "programs").glob("*.mjs"))
    assert {p.name for p in programs} >= {"precompile.mjs", "split.mjs", "brotli.mjs", "snapshot.mjs"}
    for p in programs:
        proc = subprocess.run(["node", "--check", str(p)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, f"{p.name}: {proc.stderr[-1000:]}"


async def test_browser_no_shared_memory_warning_and_the_retry_wait_behaves_as_before(demo_page):
    """A booted page has no SharedArrayBuffer issue (deprecation) in DevTools' issues; a stdin handler's EAGAIN
    retry behaves as before the edit: on the page's main thread Pyodide cannot wait (the read ends empty after one
    call), in a worker it waits, retries and reads."""
    page = demo_page.page
    cdp = await page.context.new_cdp_session(page)
    issues: list[dict] = []
    cdp.on("Audits.issueAdded", lambda ev: issues.append(ev["issue"]))
    await cdp.send("Audits.enable")  # sends the issues found so far
    await page.evaluate("() => new Promise((r) => setTimeout(r, 200))")
    await cdp.detach()
    assert not [i for i in issues if "SharedArrayBuffer" in json.dumps(i)], issues
    js_read = EAGAIN_READ.replace("const pyodide = await loadPyodide(options);",
                                  "const pyodide = window.Autopilot.pyodide;")
    js_read = (js_read.replace("const result", "try {\nconst result")
               + "return result;\n} finally { pyodide.setStdin(); WebAssembly.Memory = Memory; }")
    got = await page.evaluate("async () => {" + js_read + "}")
    assert got == {"read": "", "calls": 1, "atLoad": 0, "after": 1}
    worker = await page.evaluate("""async (body) => {
        const root = window.Autopilot.config.root;
        const src = `const { loadPyodide } = await import(${JSON.stringify(root + "pyodide/pyodide.mjs")});
          const options = { indexURL: ${JSON.stringify(root + "pyodide/")},
                            stdLibURL: ${JSON.stringify(root + "pyodide/python_stdlib_core.zip")} };
          ${body}
          postMessage(result);`;
        const url = URL.createObjectURL(new Blob([src], { type: "text/javascript" }));
        const w = new Worker(url, { type: "module" });
        try {
          return await new Promise((resolve) => {
            w.onmessage = (e) => resolve(e.data);
            w.onerror = (e) => resolve({ error: String(e.message) });
          });
        } finally { w.terminate(); URL.revokeObjectURL(url); }
    }""", EAGAIN_READ)
    assert worker == {"read": "hi\n", "calls": 2, "atLoad": 0, "after": 1}


def test_shipped_pyodide_instantiates_in_steps(out):
    js = (out / "pyodide" / "pyodide.asm.mjs").read_text()
    assert js.count("async function receiveInstanceInSteps(instance,module){") == 1
    assert js.count("resolve(receiveInstanceInSteps(inst,mod))") == 1
    assert "resolve(receiveInstance(inst,mod))" not in js
    assert js.count("autopilotYieldTask().then(()=>readyPromiseResolve?.(Module));") == 1
    assert js.startswith("var autopilotYieldTask=") and js.count("var autopilotYieldTask=") == 1
    assert js.count("async function _createPyodideModule(moduleArg={}){await autopilotYieldTask();") == 1
    assert "readyPromiseResolve?.(Module);" not in js.replace("=>readyPromiseResolve?.(Module));", "")


async def test_browser_loadpyodide_yields_to_the_page_between_instantiating_and_starting(demo_page):
    """Between the wasm instantiation and the runtime's start (its preRun hooks, where a restore goes on), the page
    runs other tasks: a loop of posted messages counts them. Without the edit that stretch is one task (0)."""
    got = await demo_page.page.evaluate("""async () => {
        const root = window.Autopilot.config.root;
        const { loadPyodide } = await import(root + "pyodide/pyodide.mjs");
        let ticks = 0, running = true, atInstance = null, atPreRun = null;
        const ch = new MessageChannel();
        ch.port1.onmessage = () => { ticks += 1; if (running) ch.port2.postMessage(null); };
        ch.port2.postMessage(null);
        const real = WebAssembly.instantiateStreaming;
        WebAssembly.instantiateStreaming = (...args) => {
          WebAssembly.instantiateStreaming = real;
          return real.apply(WebAssembly, args).then((r) => { atInstance = ticks; return r; });
        };
        try {
          const py = await loadPyodide({ indexURL: root + "pyodide/",
                                         stdLibURL: root + "pyodide/python_stdlib_core.zip",
                                         fsInit: () => { atPreRun = ticks; } });
          return { between: atPreRun - atInstance, python: py.runPython("1 + 1") };
        } finally {
          running = false;
          WebAssembly.instantiateStreaming = real;
          ch.port1.close();
        }
    }""")
    assert got["python"] == 2
    assert got["between"] >= 4, got  # before linking, before updateGOT, before the JS imports, after them

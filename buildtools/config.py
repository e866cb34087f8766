"""What the build pins and the constants its steps share."""
from __future__ import annotations

import re

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
# Of a wheel's .dist-info, the browser needs what importlib.metadata reads: METADATA's header block (name,
# version, requirements) and entry_points.txt (markdown finds its extensions there); the licenses stay with the
# code they cover. Left out: METADATA's body (the long description: the project's README, 28 KB for pyrsistent)
# and pip's installation records.
WHEEL_METADATA_DROP = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}

# Our own package: everything under widget/ except these (server-only / generated),
# __pycache__ and dotfiles.  Non-.py files (data) are included as they are.
#
# .pyc files carry a file name for tracebacks (there is no source to show anyway):
# stdlib modules get /lib/python314.zip/<path>.py (where Pyodide mounts the stdlib),
# bundle modules get /lib/python3.14/site-packages/<path>.py (where PyScript's "files"
# unpack it); loaded by zipimport from /lib/bundle.zip, __file__ is still right.
# server-side packages (the relay, the conformance suite, the docs generators' plugins): never in the browser bundle
WIDGET_EXCLUDE = {"relay", "_dist", "conformance", "integrations"}

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

# Where the loader writes bundle.zip in Pyodide's file system (the snapshot has it on sys.path already), and
# where the finder mounts the lazy groups.
BUNDLE_FS_PATH = "/lib/autopilot/bundle.zip"
REST_FS_PATH = "/lib/python-stdlib-rest.zip"
SCHEMA_FS_PATH = "/lib/autopilot/schema.zip"

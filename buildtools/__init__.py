"""The build of the browser assets (``python build.py`` drives it; ``build()`` is the entry point).

One module per step (``fetch``, ``unpack``, ``sources``, ``precompile``, ``split``, ``snapshot``, ``compress``,
``assemble``; ``pipeline`` runs them in order, each cached), and the programs they run under Node and inside Pyodide
as real files in ``programs/``. ``backend`` is the in-tree PEP 517 backend: setuptools', with this build run first,
so a wheel always ships the assets.

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
6b. splits the precompiled stdlib and bundle: a Pyodide in Node imports what the widget's boot and
   first answer import (the widget modules, jsonpatch, Markdown rendering); those files form the *core* zip
   and bundle.zip the page downloads; what the first argument check adds (jsonschema, attrs, pyrsistent and
   their stdlib imports) the lazy *schema* zip; everything else the lazy *rest* zip. A lazy zip is fetched on
   the first import of one of its modules by a meta-path finder (``_autopilot_stdlib``, in the core zip; see
   ``programs/_autopilot_stdlib.py``), or ahead of it (the loader for page Python, the client before an
   argument check). A second Pyodide booted on the core checks that the boot needs no lazy zip and that they
   import through the finder.
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

from .config import NPM_PINS, WHEEL_PINS
from .pipeline import build, default_cache_dir
from .util import BuildError

__all__ = ["NPM_PINS", "WHEEL_PINS", "BuildError", "build", "default_cache_dir"]

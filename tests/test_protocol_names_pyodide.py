"""The protocol package runs in Pyodide: it imports there and its enum members reach JS as strings (the build tier:
it starts Node with the Pyodide the build downloaded)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from widget.protocol import names

pytestmark = pytest.mark.build

ROOT = Path(__file__).resolve().parent.parent
# The Pyodide the build downloaded (its cache: AUTOPILOT_BUILD_CACHE, else .build-cache in the repository).
PYODIDE = sorted(
    Path(os.environ.get("AUTOPILOT_BUILD_CACHE", ROOT / ".build-cache")).glob("unpacked/pyodide-*/pyodide.mjs")
)


@pytest.mark.skipif(not PYODIDE or shutil.which("node") is None, reason="needs the build cache's Pyodide and node")
def test_imports_under_pyodide(tmp_path: Path) -> None:
    """The package ships to the browser: it imports under Pyodide and its enum members reach JS as strings."""
    script = tmp_path / "run.mjs"
    script.write_text(
        textwrap.dedent(f"""
        import {{ loadPyodide }} from {json.dumps(str(PYODIDE[-1]))};
        import fs from "node:fs";
        const py = await loadPyodide({{indexURL: {json.dumps(str(PYODIDE[-1].parent) + "/")}}});
        py.FS.mkdirTree("/x/widget/protocol");
        py.FS.writeFile("/x/widget/__init__.py", "");
        const src = {json.dumps(str(ROOT / "widget" / "protocol"))};
        for (const f of fs.readdirSync(src))
            if (f.endsWith(".py")) py.FS.writeFile("/x/widget/protocol/" + f, fs.readFileSync(src + "/" + f));
        const obj = py.runPython(`
        import sys, js; sys.path.insert(0, "/x")
        from pyodide.ffi import to_js
        from widget import protocol as P
        from widget.protocol import messages
        to_js({{"ev": P.Event.JOIN, "v": sys.version_info[:2], "n": len(P.ERROR_CODES)}},
              dict_converter=js.Object.fromEntries)
        `);
        console.log(JSON.stringify(obj));
    """)
    )
    out = subprocess.run(["node", str(script)], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"ev": "join", "v": got["v"], "n": len(names.ErrorCode)}
    assert got["v"][0] == 3 and got["v"][1] >= 12

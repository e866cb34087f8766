"""buildtools/join.py: the loader's ES modules joined into one classic script, in the order ES modules run."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from buildtools.join import join_loader
from buildtools.util import BuildError

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path / "autopilot.js"


def _run(js: bytes, tmp_path: Path) -> str:
    node = shutil.which("node")
    if not node:
        pytest.skip("node is not installed")
    script = tmp_path / "joined.js"
    script.write_bytes(js)
    proc = subprocess.run([node, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_modules_run_in_es_order_in_one_strict_function(tmp_path: Path) -> None:
    entry = _tree(tmp_path, {
        "autopilot.js": '/* the header */\nimport { a } from "./loader/a.mjs";\nimport { b, log } from '
                        '"./loader/b.mjs";\n'
                        'log("entry " + a() + b);\n',
        "loader/a.mjs": 'import { b, log } from "./b.mjs";\nlog("a");\n/** @param {number} n */\nexport function a() '
                        '{ return b + /** @type {number} */ (1); }\n',
        "loader/b.mjs": 'import { a } from "./a.mjs";\n/** @type {number} */\nexport const b = 41, c = 2;\n'
                        'export const log = (/** @type {string} */ s) => console.log(s);\nlog("b " + typeof a);\n',
    })
    js = join_loader(entry)
    text = js.decode()
    assert text.startswith("/* the header */\n(() => {\n\"use strict\";\n")
    assert "import " not in text and "export " not in text and "@type" not in text and "@param" not in text
    # b before a (a imports it), the entry last; b sees a's function (declarations are hoisted in the one scope).
    assert text.index("module loader/b.mjs") < text.index("module loader/a.mjs") < text.index("module autopilot.js")
    assert _run(js, tmp_path).split("\n")[:3] == ["b function", "a", "entry 4241"]


def test_an_entry_without_imports_is_left_as_it_is(tmp_path: Path) -> None:
    entry = _tree(tmp_path, {"autopilot.js": 'const BUILD = "__BUILD_ID__";\n'})
    assert join_loader(entry) == entry.read_bytes()


@pytest.mark.parametrize(("files", "says"), [
    ({"loader/a.mjs": "export const x = 1;\n", "loader/b.mjs": "const x = 2;\nexport const y = x;\n"},
     "'x' is declared at the top of both static/loader/a.mjs and static/loader/b.mjs"),
    ({"loader/a.mjs": "export const x = 1;\nexport default x;\n", "loader/b.mjs": "export const y = 2;\n"},
     "only export const|let|function|class survives the join"),
    ({"loader/a.mjs": "export const x = 1, z = 3;\n", "loader/b.mjs": "const y = 2;\n"},
     "imports y from static/loader/b.mjs, which does not export it"),
])
def test_what_does_not_survive_the_join_is_refused(tmp_path: Path, files: dict[str, str], says: str) -> None:
    entry = _tree(tmp_path,
                  {"autopilot.js": 'import { x } from "./loader/a.mjs";\nimport { y } from "./loader/b.mjs";\n'
                                             "console.log(x, y);\n", **files})
    with pytest.raises(BuildError, match=says.replace("|", r"\|").replace(".", r"\.")):
        join_loader(entry)


@pytest.mark.parametrize("line", ['import * as a from "./loader/a.mjs";', 'import { x as y } from "./loader/a.mjs";',
                                  'import { x } from "./loader/missing.mjs";'])
def test_imports_the_join_cannot_keep_are_refused(tmp_path: Path, line: str) -> None:
    entry = _tree(tmp_path, {"autopilot.js": 'import { z } from "./loader/b.mjs";\n' + line + "\n",
                             "loader/a.mjs": "export const x = 1;\n", "loader/b.mjs": "export const z = 1;\n"})
    with pytest.raises(BuildError, match="loader: "):
        join_loader(entry)


def test_the_real_loader_joins_every_module_into_valid_javascript(tmp_path: Path) -> None:
    js = join_loader(ROOT / "static" / "autopilot.js").decode()
    modules = {p.name for p in (ROOT / "static" / "loader").glob("*.mjs")}
    joined = {line.split("/")[-1] for line in js.splitlines() if line.startswith("// ==== module loader/")}
    assert joined == modules  # no module left out (or lying there unused)
    node = shutil.which("node")
    if not node:
        pytest.skip("node is not installed")
    (tmp_path / "autopilot.js").write_text(js)
    subprocess.run([node, "--check", str(tmp_path / "autopilot.js")], check=True, timeout=60)

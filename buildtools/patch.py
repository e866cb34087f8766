"""Build-time edits of Pyodide's files, each an exact, checked rewrite: a Pyodide whose text no longer matches
fails the build (the edit is then rewritten for it), and one that no longer needs the edit passes unchanged."""
from __future__ import annotations

import re
from pathlib import Path

from .util import BuildError, sha256, write_atomic

# pyodide.asm.mjs makes a one-page *shared* WebAssembly.Memory when the module loads, only for Atomics.wait in the
# retry loop of its stdin/stdout/stderr handlers (a handler that raises EAGAIN is retried after a 100 ms wait).
# Making shared memory on a page that is not cross-origin isolated is a deprecated use of SharedArrayBuffer: Chrome
# logs it and Lighthouse's best-practices score drops for it. The edit makes the memory on the first wait instead;
# on a page's main thread Atomics.wait throws and the wait reports "no wait" as before, in a worker it waits as
# before. Minified names vary between releases; the shape is matched.
_EAGER_SHARED_MEMORY = re.compile(
    r"var (?P<view>[\w$]+)=new Int32Array\(new WebAssembly\.Memory\((?P<opts>\{shared:!0,initial:1,maximum:1\})\)"
    r"\.buffer\);function (?P<fn>[\w$]+)\((?P<ms>[\w$]+)\)\{try\{return Atomics\.wait\((?P=view),0,0,(?P=ms)\),!0\}"
    r"catch\{return!1\}\}")
_LAZY_SHARED_MEMORY = ("var {view}=null;function {fn}({ms}){{try{{return {view}||({view}=new Int32Array("
                       "new WebAssembly.Memory({opts}).buffer)),Atomics.wait({view},0,0,{ms}),!0}}catch{{return!1}}}}")
_ALREADY_LAZY = re.compile(r"var ([\w$]+)=null;function [\w$]+\(([\w$]+)\)\{try\{return \1\|\|\(\1=new Int32Array\(")
_SHARED_MEMORY = re.compile(r"shared:\s*(?:!0|true)")


def lazy_shared_memory(js: str) -> str:
    """``pyodide.asm.mjs`` with its shared memory made on first use, not at module load."""
    found = list(_EAGER_SHARED_MEMORY.finditer(js))
    if len(found) > 1:
        raise BuildError("pyodide.asm.mjs: the shared-memory statement occurs more than once; check the edit")
    if found:
        m = found[0]
        js = js[:m.start()] + _LAZY_SHARED_MEMORY.format(**m.groupdict()) + js[m.end():]
    if len(_SHARED_MEMORY.findall(js)) != len(_ALREADY_LAZY.findall(js)):
        raise BuildError("pyodide.asm.mjs makes shared memory in a way the build does not know (a new Pyodide?): "
                         "update buildtools/patch.py so that it is made on first use, not at module load")
    return js


EDITS = {"pyodide/pyodide.asm.mjs": lazy_shared_memory}


def edited(rel: str, src: Path, cache: Path) -> Path:
    """``src`` itself, or an edited copy of it under ``cache`` (made once per content) when ``rel`` has an edit."""
    edit = EDITS.get(rel)
    if edit is None:
        return src
    data = src.read_bytes()
    # Named by the file and by this module's code: a changed edit makes a new copy.
    dst = cache / f"{sha256(data)[:16]}-{sha256(Path(__file__).read_bytes())[:12]}{src.suffix}"
    if not dst.is_file():
        write_atomic(dst, edit(data.decode("utf-8")).encode("utf-8"))
        # Keep the cache small: a few recent copies (other checkouts share it).
        older = sorted((p for p in cache.glob("*" + src.suffix) if p != dst), key=lambda p: p.stat().st_mtime)
        for p in older[:-4]:
            p.unlink(missing_ok=True)
    return dst

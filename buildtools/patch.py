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


# Pyodide's start from a memory snapshot (the page restoring the pre-warm worker's Python) ran as one main-thread
# task of ~110-200 ms of CPU on this project's machine (docs/performance.md, "The restore's main-thread tasks"):
# every step after the wasm's instantiation is reached through resolved promises, i.e. microtasks of one task.
# Its parts depend only on each other, and Emscripten's module factory is already asynchronous, so the edit
# yields to the event loop (a macrotask: a MessageChannel message, which background tabs do not throttle as they
# throttle timers) between them:
# - at the start of the factory (V8 compiles its 1.2 MB body on the call; the static set-up then runs in a task
#   of its own) and before the instantiation;
# - in receiveInstance, which links the main module: before its first statement, the export conversions,
#   assignWasmExports (a function of thousands of statements, compiled on its first call), updateGOT (every
#   exported function put into the table and the GOT), loadDylibs (-> reportUndefinedSymbols: every JavaScript
#   function the GOT lacks wrapped as a tiny wasm module, ~260 `new WebAssembly.Module`) and its return;
# - after the runtime's start (initRuntime; with a snapshot to restore, no main()) the factory's promise resolves
#   a task later.
# Pyodide's restore and Python-side set-up (pyodide.mjs, not edited) are then a task of their own. The statements
# and their order are Emscripten's; a failure in them now rejects loadPyodide (it was a console warning and a
# promise that never settled).
_YIELD_NAME = "autopilotYieldTask"
_YIELD = (f"var {_YIELD_NAME}=()=>new Promise(r=>{{if(typeof MessageChannel==\"function\"){{var c=new MessageChannel;"
          "c.port1.onmessage=()=>{c.port1.close();r()};c.port2.postMessage(null)}else setTimeout(r,0)});")
_RECEIVE_INSTANCE = (
    'function receiveInstance(instance,module){wasmExports=instance.exports;var origExports=wasmExports;'
    'mergeLibSymbols(wasmExports,"main");var metadata=getDylinkMetadata(module);if(metadata.neededDynlibs)'
    '{dynamicLibraries=metadata.neededDynlibs.concat(dynamicLibraries)}wasmExports=applySignatureConversions('
    'wasmExports);assignWasmExports(wasmExports);updateGOT(origExports);LDSO.init();loadDylibs();updateMemoryViews();'
    'return wasmExports}')
# Where the steps yield: before receiveInstance's first statement and each of these.
_STEP_BEFORE = ("wasmExports=applySignatureConversions(wasmExports);", "assignWasmExports(wasmExports);",
                "updateGOT(origExports);", "LDSO.init();", "return wasmExports}")
_INSTANTIATE_WASM = ('if(Module["instantiateWasm"]){return new Promise((resolve,reject)=>{Module["instantiateWasm"]'
                     '(info,(inst,mod)=>{resolve(receiveInstance(inst,mod))})})}')
_INSTANTIATE_WASM_IN_STEPS = (f'if(Module["instantiateWasm"]){{await {_YIELD_NAME}();return new Promise((resolve,'
                              'reject)=>{Module["instantiateWasm"](info,(inst,mod)=>{resolve(receiveInstanceInSteps('
                              'inst,mod))})})}')
_CREATE_WASM = "async function createWasm(){"
_FACTORY = "async function _createPyodideModule(moduleArg={}){"
_READY = "readyPromiseResolve?.(Module);"
_READY_LATER = f"{_YIELD_NAME}().then(()=>readyPromiseResolve?.(Module));"


def _in_steps(receive: str) -> str:
    """receiveInstance's text as an async receiveInstanceInSteps that yields before each step."""
    head = "function receiveInstance(instance,module){"
    body = receive[len(head):]
    for statement in _STEP_BEFORE:
        body = body.replace(statement, f"await {_YIELD_NAME}();" + statement, 1)
    return f"async function receiveInstanceInSteps(instance,module){{await {_YIELD_NAME}();" + body


def instantiate_in_steps(js: str) -> str:
    """``pyodide.asm.mjs`` whose wasm instantiation and linking yield to the event loop between their phases."""
    if _YIELD_NAME in js:  # already edited
        if (js.count(_INSTANTIATE_WASM_IN_STEPS) != 1 or js.count("async function receiveInstanceInSteps(") != 1
                or js.count(_READY_LATER) != 1 or js.count(f"{_FACTORY}await {_YIELD_NAME}();") != 1):
            raise BuildError("pyodide.asm.mjs: a partial instantiation-in-steps edit; check buildtools/patch.py")
        return js
    counts = {what: js.count(text) for what, text in (
        ("receiveInstance", _RECEIVE_INSTANCE), ("the instantiateWasm call", _INSTANTIATE_WASM),
        ("createWasm", _CREATE_WASM), ("the runtime's ready call", _READY), ("the module factory", _FACTORY))}
    unknown = [what for what, n in counts.items() if n != 1]
    if unknown:
        raise BuildError(f"pyodide.asm.mjs: {', '.join(unknown)} not found once as the build knows it (a new Pyodide "
                         "or Emscripten?): update the instantiation-in-steps edit in buildtools/patch.py, which splits "
                         "the page's restore into shorter main-thread tasks")
    js = js.replace(_INSTANTIATE_WASM, _INSTANTIATE_WASM_IN_STEPS).replace(_READY, _READY_LATER)
    js = js.replace(_FACTORY, f"{_YIELD}{_FACTORY}await {_YIELD_NAME}();")
    return js.replace(_CREATE_WASM, _in_steps(_RECEIVE_INSTANCE) + _CREATE_WASM)


def asm_edits(js: str) -> str:
    """Every edit of ``pyodide.asm.mjs``."""
    return instantiate_in_steps(lazy_shared_memory(js))


EDITS = {"pyodide/pyodide.asm.mjs": asm_edits}


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

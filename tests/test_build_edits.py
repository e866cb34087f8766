"""The build's edits of Pyodide's JavaScript as pure text functions: each applies once, and fails clearly on text it
does not know (the build itself: test_build.py)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

# buildtools/ is not an installed package: it is imported from the checkout, as test_build.py does.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def test_the_shared_memory_edit_fails_clearly_on_text_it_does_not_know():
    from buildtools.patch import lazy_shared_memory
    from buildtools.util import BuildError

    eager = ("var io=new Int32Array(new WebAssembly.Memory({shared:!0,initial:1,maximum:1}).buffer);"
             "function so(t){try{return Atomics.wait(io,0,0,t),!0}catch{return!1}}")
    lazy = lazy_shared_memory("a;" + eager + "b")
    assert lazy.startswith("a;var io=null;function so(t){try{return io||(io=new Int32Array(") and lazy.endswith("}b")
    assert lazy_shared_memory(lazy) == lazy  # idempotent
    assert lazy_shared_memory("no shared memory at all") == "no shared memory at all"
    with pytest.raises(BuildError, match="shared memory in a way the build does not know"):
        lazy_shared_memory(eager.replace("maximum:1", "maximum:2"))


# What the instantiation-in-steps edit matches in pyodide.asm.mjs (Emscripten's own text, unminified), with a
# little code around it.
_ASM_FRAGMENT = (
    'async function _createPyodideModule(moduleArg={}){var moduleRtn;var wasmExports;async function createWasm(){'
    'function receiveInstance(instance,module){wasmExports=instance.exports;var origExports=wasmExports;'
    'mergeLibSymbols(wasmExports,"main");var metadata=getDylinkMetadata(module);'
    'if(metadata.neededDynlibs){dynamicLibraries=metadata.neededDynlibs.concat(dynamicLibraries)}wasmExports='
    'applySignatureConversions(wasmExports);assignWasmExports(wasmExports);updateGOT(origExports);LDSO.init();'
    'loadDylibs();updateMemoryViews();return wasmExports}function receiveInstantiationResult(result){return '
    'receiveInstance(result["instance"],result["module"])}var info=getWasmImports();if(Module["instantiateWasm"])'
    '{return new Promise((resolve,reject)=>{Module["instantiateWasm"](info,(inst,mod)=>{resolve(receiveInstance('
    'inst,mod))})})}wasmBinaryFile??=findWasmBinary();}function doRun(){Module["calledRun"]=true;if(ABORT)return;'
    'initRuntime();preMain();readyPromiseResolve?.(Module);Module["onRuntimeInitialized"]?.();postRun()}return '
    'moduleRtn}export default _createPyodideModule;')


def test_the_instantiation_edit_yields_between_the_linking_phases_and_fails_clearly_on_unknown_text():
    from buildtools.patch import instantiate_in_steps
    from buildtools.util import BuildError

    edited = instantiate_in_steps(_ASM_FRAGMENT)
    assert instantiate_in_steps(edited) == edited  # idempotent
    # The page's path (instantiateWasm) goes through the steps; the original function stays for the other path.
    assert 'resolve(receiveInstanceInSteps(inst,mod))' in edited and "resolve(receiveInstance(inst,mod))" not in edited
    assert edited.count("function receiveInstance(instance,module){") == 1
    steps = re.search(r"async function receiveInstanceInSteps\(instance,module\)\{(.*?)\}async function createWasm",
                      edited).group(1)
    # Emscripten's statements, in their order, with yields between the phases.
    assert steps.replace("await autopilotYieldTask();", "") == re.search(
        r"function receiveInstance\(instance,module\)\{(.*?)\}function receiveInstantiationResult", edited).group(1)
    parts = steps.split("await autopilotYieldTask();")
    assert [p[:14] for p in parts] == ["", "wasmExports=in", "wasmExports=ap", "assignWasmExpo", "updateGOT(orig",
                                       "LDSO.init();lo", "return wasmExp"]
    assert 'if(Module["instantiateWasm"]){await autopilotYieldTask();return new Promise(' in edited
    # The factory yields once it is called (V8 compiles its body on the call; its set-up runs in the next task).
    assert edited.startswith("var autopilotYieldTask=()=>new Promise(")
    assert "async function _createPyodideModule(moduleArg={}){await autopilotYieldTask();var moduleRtn;" in edited
    # The factory's promise resolves a task after the runtime started (the restore that follows is a task of its own).
    assert "preMain();autopilotYieldTask().then(()=>readyPromiseResolve?.(Module));Module[" in edited
    for broken in (_ASM_FRAGMENT.replace("LDSO.init();", "LDSO.init(1);"),
                   _ASM_FRAGMENT.replace("readyPromiseResolve?.(Module)", "readyPromiseResolve(Module)"),
                   _ASM_FRAGMENT.replace("resolve(receiveInstance(inst,mod))", "resolve(receiveInstance(mod,inst))"),
                   _ASM_FRAGMENT + _ASM_FRAGMENT):
        with pytest.raises(BuildError, match="not found once as the build knows it"):
            instantiate_in_steps(broken)
    with pytest.raises(BuildError, match="partial"):
        instantiate_in_steps(edited.replace("resolve(receiveInstanceInSteps(inst,mod))", "resolve(x)"))

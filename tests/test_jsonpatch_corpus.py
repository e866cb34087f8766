"""RFC 6902 conformance: the json-patch-tests corpora on the relay's and the client's patching, 100 %.

Corpora: ``json-patch-tests.json`` and ``json-patch-spec_tests.json`` (json-patch/json-patch-tests, in
``../shared/corpora``). Every case not marked ``disabled`` runs; a case with ``expected`` must give exactly that
document, a case with ``error`` must be refused with the state unchanged (atomic).

Relay. ``widget.relay.hub.apply_patch_atomic`` is what ``on_state_patch`` applies (to a copy, op by op); each case
runs through it directly, and again through the real ``state_patch`` socket handler of an in-loop relay, the
stored state being read back from its store after the ack.

Where our semantics legitimately differ, and how the cases are adapted:
- The relay's document is ``{"autopilot": {"functions": {...}, "context": {...}}}``, and it refuses a patch that
  replaces ``/autopilot`` or makes ``functions``/``context`` a non-object. A corpus document may be any JSON value
  (arrays, ``""`` replaced by ``[]``), so each case's document is wrapped at ``/autopilot/context/doc`` and every
  ``path``/``from`` that is a JSON Pointer (``""`` or starting with ``/``) gets that prefix: ``""`` →
  ``/autopilot/context/doc``, ``/foo/0`` → ``/autopilot/context/doc/foo/0``. Anything else (``"foo"``, ``null``, a
  missing member) is left as it is, so the malformed-pointer cases stay malformed.
- The relay also checks the D4 limits on the result; no corpus document comes near them.

Client. The client never applies a patch it receives: its patching path is ``StateSync`` diffing the page's
document against the relay's copy. For every ``expected`` case the client, whose relay snapshot holds the case's
``doc``, is given ``expected`` as its context; the patch it flushes goes over the wire as JSON text and the relay
applies it: the result must be ``expected``, and equal to the client's own projection. It runs with the jsonpatch
installed here and with the pinned jsonpatch the browser bundle ships. ``error`` cases have no client side (the
client only diffs two valid documents; it never sends a hand-written patch); what the client does when the relay
refuses a patch (its base goes back to the last acknowledged document) is in tests/test_state_sync.py.

Beyond the corpora, a few cases of ours: multi-op atomicity (the jsonpatch in-place defect), ``test`` comparing
types strictly (RFC 6902 §4.6: ``1`` is not ``true``), and ``replace`` of an object member named ``-``.

Here the pure parts (the function, our cases); the socket handler's run and the client's diffs, which need a relay
and the build cache's jsonpatch, are in tests/test_jsonpatch_corpus_relay.py.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from test_patch_fuzz import canon

from widget.core.limits import check_state
from widget.relay.hub import _PatchFailed, apply_patch_atomic

pytestmark = pytest.mark.unit


def corpora_dir() -> Path:
    """``../shared/corpora`` beside the repo clone (CI), else the machine's shared folder."""
    here = Path(__file__).resolve().parents[2] / "shared" / "corpora"
    return here if here.is_dir() else Path("/work/shared/corpora")


FILES = ["json-patch-tests.json", "json-patch-spec_tests.json"]
PREFIX = "/autopilot/context/doc"


def load_cases() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for name in FILES:
        for i, case in enumerate(json.loads((corpora_dir() / name).read_text())):
            if case.get("disabled"):
                continue
            assert "expected" in case or "error" in case, (name, i, case)
            out.append((f"{name.split('.')[0]}#{i}", case))
    return out


CASES = load_cases()
EXPECTED = [(cid, c) for cid, c in CASES if "expected" in c]


def rewrite(pointer: Any) -> Any:
    if isinstance(pointer, str) and (pointer == "" or pointer.startswith("/")):
        return PREFIX + pointer
    return pointer


def wrap_patch(patch: list[Any]) -> list[Any]:
    out = []
    for op in patch:
        if isinstance(op, dict):
            op = dict(op)
            for member in ("path", "from"):
                if member in op:
                    op[member] = rewrite(op[member])
        out.append(op)
    return out


def wrap_doc(doc: Any) -> dict[str, Any]:
    return {"autopilot": {"functions": {}, "context": {"doc": copy.deepcopy(doc)}}}


def test_corpus_counts() -> None:
    """All of both files is accounted for: 108 enabled cases (74 expected, 34 error), 4 disabled upstream."""
    total = sum(len(json.loads((corpora_dir() / n).read_text())) for n in FILES)
    assert (total, len(CASES), len(EXPECTED)) == (112, 108, 74)


# --------------------------------------------------------------------------------------- relay, function


@pytest.mark.parametrize("case", [c for _, c in CASES], ids=[cid for cid, _ in CASES])
def test_relay_apply(case: dict[str, Any]) -> None:
    state = wrap_doc(case["doc"])
    before = canon(state)
    patch = wrap_patch(case["patch"])
    if "expected" in case:
        result = apply_patch_atomic(state, patch)
        check_state(result)
        assert canon(result) == canon(wrap_doc(case["expected"]))
    else:
        with pytest.raises(_PatchFailed):
            apply_patch_atomic(state, patch)
    assert canon(state) == before  # the input is never touched, success or not


# --------------------------------------------------------------------------------------- our own cases

ATOMIC = [
    ("later op fails", {"a": 1}, [{"op": "add", "path": "/b", "value": 2}, {"op": "remove", "path": "/missing"}]),
    ("move then fail", {"a": [1, 2]},
     [{"op": "move", "from": "/a/0", "path": "/c"}, {"op": "test", "path": "/c", "value": 2}]),
    ("copy then bad op", {"a": {"b": 1}}, [{"op": "copy", "from": "/a", "path": "/z"}, {"op": "nope", "path": "/a"}]),
    ("not an object", {"a": 1}, [{"op": "add", "path": "/b", "value": 1}, "remove /a"]),
]


@pytest.mark.parametrize("name,doc,patch", ATOMIC, ids=[a[0] for a in ATOMIC])
def test_multi_op_failure_is_atomic(name: str, doc: dict[str, Any], patch: list[Any]) -> None:
    state = wrap_doc(doc)
    before = canon(state)
    with pytest.raises(_PatchFailed):
        apply_patch_atomic(state, wrap_patch(patch))
    assert canon(state) == before


TEST_OP_TYPES = [
    ({"a": 1}, True), ({"a": 0}, False), ({"a": True}, 1), ({"a": [1]}, [True]), ({"a": {"x": 0}}, {"x": False}),
]


@pytest.mark.parametrize("doc,value", TEST_OP_TYPES, ids=[f"{d['a']!r}-vs-{v!r}" for d, v in TEST_OP_TYPES])
def test_test_op_compares_json_types(doc: dict[str, Any], value: Any) -> None:
    with pytest.raises(_PatchFailed):
        apply_patch_atomic(wrap_doc(doc), wrap_patch([{"op": "test", "path": "/a", "value": value}]))


def test_test_op_numbers_compare_by_value() -> None:
    """RFC 6902 §4.6: numbers are equal when their values are (1 and 1.0)."""
    apply_patch_atomic(wrap_doc({"a": 1}), wrap_patch([{"op": "test", "path": "/a", "value": 1.0}]))


def test_replace_member_named_dash() -> None:
    result = apply_patch_atomic(wrap_doc({"-": 1}), wrap_patch([{"op": "replace", "path": "/-", "value": 2}]))
    assert result["autopilot"]["context"]["doc"] == {"-": 2}

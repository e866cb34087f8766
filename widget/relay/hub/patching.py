"""State patches applied all or nothing: RFC 6902 on a copy, op by op, within the state limits."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import jsonpointer

from ... import protocol as P
from ...core.limits import check_state, depth, encode_compact
from ...core.validation import json_equal
from ...errors import StateLimitError


class PatchFailed(Exception):
    """A patch that cannot be applied; its message names the failing op."""


def apply_patch_atomic(doc: dict[str, Any], patch: Any) -> dict[str, Any]:
    """RFC 6902 applied to a deep copy, op by op, so a failing op leaves ``doc`` untouched and the
    error names the op (jsonpatch's in-place mode would leave a partial write)."""
    if not isinstance(patch, list):
        raise PatchFailed("patch must be a list of operations")
    work = copy.deepcopy(doc)
    # The state size limit holds during application, not only after: ``copy`` is the one op that grows the
    # document by more than its own bytes (each may double it). ``bound`` is an upper bound on the working
    # document's size not counting what the patch itself carries (add/replace values, move keys: at most the
    # message's bytes); each copy adds the size of what it copies, each remove takes off the size of what it
    # removes, and when the bound passes MAX_STATE_BYTES the document is measured exactly (check_state raises
    # state_too_large / state_too_deep). So a patch can never build more than about MAX_STATE_BYTES + its
    # own size + one copy, however many copies it holds.
    bound = -1
    for i, op in enumerate(patch):
        desc = f"op {i}"
        if isinstance(op, dict):
            desc += f" ({op.get('op')!s} {op.get('path')!s})"
        try:
            if not isinstance(op, dict):
                raise ValueError("an operation must be an object")
            if depth(op.get("value"), P.MAX_STATE_DEPTH) > P.MAX_STATE_DEPTH:  # refused before any library recurses
                raise StateLimitError(
                    P.ErrorCode.STATE_TOO_DEEP, f"{desc}: State nesting depth exceeds {P.MAX_STATE_DEPTH} levels."
                )
            source = op.get("from")
            if op.get("op") == "copy" and isinstance(source, str):
                if bound < 0:
                    bound = check_state(work)
                grow = len(encode_compact(jsonpointer.resolve_pointer(work, source)))
                work = jsonpatch.JsonPatch([op]).apply(work, in_place=True)
                bound += grow + len(str(op.get("path"))) + 4
                if bound > P.MAX_STATE_BYTES:
                    try:
                        bound = check_state(work)
                    except StateLimitError as exc:
                        raise StateLimitError(exc.code, f"{desc}: {exc}") from None
                continue
            if op.get("op") == "test":  # RFC 6902 §4.6 equality (jsonpatch's is Python's ==: 1 equals true)
                if "value" not in op:
                    raise ValueError("a test operation needs a value")
                if not isinstance(op.get("path"), str):
                    raise ValueError("a test operation needs a path")
                if not json_equal(jsonpointer.resolve_pointer(work, op["path"]), op["value"]):
                    raise ValueError("the value at the path is not equal to the test value")
                continue
            if op.get("op") == "replace" and isinstance(op.get("path"), str) and op["path"].endswith("/-"):
                parent = jsonpointer.resolve_pointer(work, op["path"][:-2])
                if isinstance(parent, dict):  # '-' is only special in arrays (jsonpatch 1.33 refuses it anywhere)
                    if "-" not in parent or "value" not in op:
                        raise ValueError("replace needs an existing member and a value")
                    parent["-"] = copy.deepcopy(op["value"])
                    continue
            if op.get("op") == "remove" and bound >= 0 and isinstance(op.get("path"), str):
                bound -= len(encode_compact(jsonpointer.resolve_pointer(work, op["path"])))
            work = jsonpatch.JsonPatch([op]).apply(work, in_place=True)
        except (
            jsonpatch.JsonPatchException,
            jsonpointer.JsonPointerException,
            KeyError,
            IndexError,
            TypeError,
            ValueError,
        ) as exc:
            raise PatchFailed(f"{desc} failed: {exc}") from None
        except RecursionError:
            raise PatchFailed(f"{desc} failed: value nested too deeply") from None
    if not isinstance(work, dict) or not isinstance(work.get(P.STATE_ROOT), dict):
        raise PatchFailed("the state must stay an object with an 'autopilot' object")
    root = work[P.STATE_ROOT]
    for key in ("functions", "context"):
        if key in root and not isinstance(root[key], dict):
            raise PatchFailed(f"/autopilot/{key} must be an object")
    return work


_PatchFailed = PatchFailed  # the name tests and older callers import

"""Mirrors registered functions and page context to the relay as JSON Patch (sans-I/O, time passed in).

Rules:
- Two debounced parts: ``functions`` (25 ms) and ``context`` (100 ms). Each change restarts its timer.
- ``base`` is the document the relay has (its snapshot plus every patch we sent); patches are diffs against it.
- At each flush the *projected* document is checked against the D4 limits; on failure nothing is sent, the
  part's dirty flag clears, ``base`` stays as it was, and the caller reports ``stateError``.
- A sent patch is in flight until acknowledged; the state is *dirty* while a part is pending or a patch is in
  flight (that is what the state-sync gate waits on).
- A refused patch resets ``base`` to the last acknowledged document and marks both parts dirty, so the next
  flush re-diffs from what the relay really holds.
"""

from __future__ import annotations

import copy
import itertools
import json
from dataclasses import dataclass
from typing import Any

import jsonpatch

from ..errors import StateLimitError
from ..protocol import CONTEXT_DEBOUNCE_MS, FUNCTIONS_DEBOUNCE_MS, STATE_ROOT
from .limits import check_state

FUNCTIONS = "functions"
CONTEXT = "context"


def to_json_value(value: Any, what: str) -> Any:
    """A detached JSON copy of ``value``; TypeError naming ``what`` when it is not JSON-serializable."""
    try:
        return json.loads(json.dumps(value, ensure_ascii=False, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serializable: {exc}") from None


#: RFC 8259 §6: integers beyond ±(2**53 − 1) do not survive JSON implementations that use doubles — the
#: browser's JS among them — so state holding one would differ between the page and the relay.
MAX_SAFE_INTEGER = 2**53 - 1


def _check_safe_integers(value: Any, what: str) -> None:
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            stack.extend((v, f"{path}/{k}") for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{path}/{i}") for i, v in enumerate(node))
        elif isinstance(node, int) and not isinstance(node, bool) and abs(node) > MAX_SAFE_INTEGER:
            raise TypeError(
                f"{what} holds the integer {node} at {path or '/'}, beyond ±(2**53 − 1): JSON in the browser would "
                "change it on the way to the relay. Send it as a string."
            )


def to_state_value(value: Any, what: str) -> Any:
    """``to_json_value`` for mirrored state: also refuses integers that JSON cannot carry exactly."""
    copy_ = to_json_value(value, what)
    _check_safe_integers(copy_, what)
    return copy_


def document(functions: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    """The stored-state document of D4."""
    return {STATE_ROOT: {FUNCTIONS: functions, CONTEXT: context}}


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def diff(base: dict[str, Any], projected: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch from ``base`` to ``projected`` (two D4 documents), checked before it is sent.

    ``make_patch`` of jsonpatch 1.33 (what CPython clients may have) emits wrong array indexes and moves for
    some reorderings (tests/test_patch_fuzz.py): the patch is applied here to a copy of ``base`` and, when the
    result is not ``projected``, each changed part is sent whole instead. ``replace`` of an object member named
    ``-`` is sent as the equivalent ``add`` (jsonpatch up to 1.33, which the relay may run, refuses it).
    """
    patch = jsonpatch.make_patch(base, projected).patch
    patch = [
        {**op, "op": "add"} if op.get("op") == "replace" and op.get("path", "").endswith("/-") else op
        for op in patch
    ]
    try:
        good = _canon(jsonpatch.apply_patch(base, copy.deepcopy(patch))) == _canon(projected)
    except Exception:  # noqa: BLE001 - any failure of the library means: do not trust this patch
        good = False
    if good:
        return patch
    old, new = base[STATE_ROOT], projected[STATE_ROOT]
    return [
        {"op": "add", "path": f"/{STATE_ROOT}/{part}", "value": new[part]}
        for part in (FUNCTIONS, CONTEXT)
        if _canon(old.get(part)) != _canon(new[part])
    ]


@dataclass
class Outgoing:
    """A patch to emit as ``state_patch`` under ``key``."""

    key: str
    patch: list[dict[str, Any]]
    size: int


class StateSync:
    """Debounced JSON-Patch mirroring of functions and context."""

    def __init__(
        self,
        functions_debounce_ms: float = FUNCTIONS_DEBOUNCE_MS,
        context_debounce_ms: float = CONTEXT_DEBOUNCE_MS,
        key_prefix: str = "p",
    ) -> None:
        self.debounce_s = {FUNCTIONS: functions_debounce_ms / 1000, CONTEXT: context_debounce_ms / 1000}
        self.local: dict[str, dict[str, Any]] = {FUNCTIONS: {}, CONTEXT: {}}
        self.base: dict[str, Any] | None = None  # None until the relay's snapshot arrives
        self.acked: dict[str, Any] | None = None
        self.due: dict[str, float | None] = {FUNCTIONS: None, CONTEXT: None}
        self.in_flight: dict[str, dict[str, Any]] = {}  # key -> projected document
        self._keys = itertools.count(1)
        self._key_prefix = key_prefix

    # --- local changes ----------------------------------------------------------
    def set_functions(self, descriptors: dict[str, Any], now: float) -> None:
        """Replace the function descriptors (already JSON)."""
        self.local[FUNCTIONS] = to_state_value(descriptors, "Function descriptors")
        self._touch(FUNCTIONS, now)

    def set_context(self, context: dict[str, Any], now: float) -> None:
        """Replace the whole context."""
        if not isinstance(context, dict):
            raise TypeError(f"Context must be a dict, got {type(context).__name__}.")
        self.local[CONTEXT] = to_state_value(context, "Context")
        self._touch(CONTEXT, now)

    def update_context(self, partial: dict[str, Any], now: float) -> None:
        """Shallow-merge ``partial`` into the context."""
        if not isinstance(partial, dict):
            raise TypeError(f"Context update must be a dict, got {type(partial).__name__}.")
        self.local[CONTEXT].update(to_state_value(partial, "Context"))
        self._touch(CONTEXT, now)

    @property
    def context(self) -> dict[str, Any]:
        """The local context (a copy)."""
        return copy.deepcopy(self.local[CONTEXT])

    def _touch(self, part: str, now: float) -> None:
        self.due[part] = now + self.debounce_s[part]

    # --- relay side -------------------------------------------------------------
    def snapshot(self, functions: Any, context: Any) -> None:
        """The relay's ``state`` after join becomes the diff base; everything local is due at once."""
        functions = functions if isinstance(functions, dict) else {}
        context = context if isinstance(context, dict) else {}
        self.base = document(functions, context)
        self.acked = copy.deepcopy(self.base)
        self.in_flight.clear()
        self.due = {FUNCTIONS: 0.0, CONTEXT: 0.0}

    def ack(self, key: str, ok: bool) -> None:
        """The relay acknowledged (``ok``) or refused the patch sent under ``key``."""
        projected = self.in_flight.pop(key, None)
        if projected is None:
            return
        if ok:
            self.acked = projected
        else:
            # The relay kept its previous document: diff from what it really holds.
            self.base = copy.deepcopy(self.acked)
            self.in_flight.clear()
            self.due = {FUNCTIONS: 0.0, CONTEXT: 0.0}

    def disconnected(self) -> None:
        """Forget what the relay holds until the next snapshot; local state stays."""
        self.base = None
        self.acked = None
        self.in_flight.clear()

    # --- scheduling ---------------------------------------------------------------
    def next_deadline(self) -> float | None:
        """When ``poll`` has work next, or None."""
        if self.base is None:
            return None
        times = [t for t in self.due.values() if t is not None]
        return min(times) if times else None

    def is_dirty(self) -> bool:
        """Pending changes or unacknowledged patches exist."""
        return any(t is not None for t in self.due.values()) or bool(self.in_flight)

    def has_pending(self) -> bool:
        """Changes not yet sent exist."""
        return any(t is not None for t in self.due.values())

    def poll(self, now: float) -> Outgoing | None:
        """Build the patch for every part whose debounce has elapsed (raises StateLimitError)."""
        parts = [p for p, t in self.due.items() if t is not None and t <= now]
        return self._build(parts)

    def flush(self) -> Outgoing | None:
        """Build the patch for every pending part now (raises StateLimitError)."""
        return self._build([p for p, t in self.due.items() if t is not None])

    def _build(self, parts: list[str]) -> Outgoing | None:
        if self.base is None or not parts:
            return None
        base_root = self.base[STATE_ROOT]
        projected_root = dict(base_root)
        for part in parts:
            projected_root[part] = self.local[part]
            self.due[part] = None
        projected = {STATE_ROOT: projected_root}
        try:
            size = check_state(projected)
        except StateLimitError:
            raise
        projected = copy.deepcopy(projected)  # before diffing: the patch's values must not alias local state
        patch = diff(self.base, projected)
        if not patch:
            return None
        key = f"{self._key_prefix}{next(self._keys)}"
        self.base = projected
        self.in_flight[key] = projected
        return Outgoing(key=key, patch=patch, size=size)

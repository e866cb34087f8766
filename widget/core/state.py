"""Mirrors registered functions and page context to the relay as JSON Patch (sans-I/O, time passed in).

Rules:
- Two debounced parts: ``functions`` (25 ms) and ``context`` (100 ms). Each change restarts its timer.
- ``base`` is the document the relay has (its snapshot plus every patch we sent); patches are diffs against it.
- At each flush the *projected* document is checked against the stored-state limits (64 KB, depth 32). When the
  parts together do not fit, each part that fits on its own is still sent; a part that does not fit is not sent,
  ``base`` keeps the relay's value, and the part stays *unsent*: it has no timer (no endless retries of the same
  oversized value) but goes out with the next flush, so a function flushed together with an oversized context
  reaches the relay as soon as the context fits again. The caller reports the refusal as ``stateError``.
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
    """The stored-state document: ``{"autopilot": {"functions": ..., "context": ...}}``."""
    return {STATE_ROOT: {FUNCTIONS: functions, CONTEXT: context}}


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def diff(base: dict[str, Any], projected: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch from ``base`` to ``projected`` (two stored-state documents), checked before it is sent.

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
    #: Parts left unsent because they would break the limits (the caller reports it); None when all fit.
    skipped: StateLimitError | None = None


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
        #: Parts changed locally but refused by the limits: no timer, sent with the next flush.
        self.unsent: set[str] = set()
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

    def mark_all_due(self) -> None:
        """Every part is due now (this client just became the one that writes the state)."""
        self.due = {FUNCTIONS: 0.0, CONTEXT: 0.0}

    # --- relay side -------------------------------------------------------------
    def snapshot(self, functions: Any, context: Any) -> None:
        """The relay's ``state`` after join becomes the diff base; everything local is due at once."""
        functions = functions if isinstance(functions, dict) else {}
        context = context if isinstance(context, dict) else {}
        self.base = document(functions, context)
        self.acked = copy.deepcopy(self.base)
        self.in_flight.clear()
        self.unsent.clear()
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
        """Changes waiting for their debounce or unacknowledged patches exist (what the state-sync gate waits
        on; a part refused by the limits is not waited on: it cannot go until it changes)."""
        return self.has_pending() or bool(self.in_flight)

    def needs_sync(self) -> bool:
        """Something local is not on the relay yet, including parts refused by the limits."""
        return self.is_dirty() or bool(self.unsent)

    def has_pending(self) -> bool:
        """Changes waiting for their debounce exist."""
        return any(t is not None for t in self.due.values())

    def poll(self, now: float) -> Outgoing | None:
        """Build the patch for every part whose debounce has elapsed, with any unsent part.

        Raises StateLimitError when nothing could be sent because of the limits."""
        parts = [p for p, t in self.due.items() if t is not None and t <= now]
        return self._build(parts + [p for p in self.unsent if p not in parts] if parts else [])

    def flush(self) -> Outgoing | None:
        """Build the patch for every pending or unsent part now (raises StateLimitError when none fits)."""
        return self._build([p for p in (FUNCTIONS, CONTEXT) if self.due[p] is not None or p in self.unsent])

    def _project(self, parts: list[str]) -> tuple[dict[str, Any], int]:
        assert self.base is not None
        root = dict(self.base[STATE_ROOT])
        for part in parts:
            root[part] = self.local[part]
        projected = {STATE_ROOT: root}
        return projected, check_state(projected)

    def _build(self, parts: list[str]) -> Outgoing | None:
        if self.base is None or not parts:
            return None
        parts = [p for p in (FUNCTIONS, CONTEXT) if p in parts]
        for part in parts:
            self.due[part] = None
        skipped: StateLimitError | None = None
        try:
            projected, size = self._project(parts)
            sending = parts
        except StateLimitError as exc:
            # Together they do not fit: send each part that fits on its own, keep the others unsent.
            skipped, sending = exc, []
            for part in parts:
                try:
                    self._project([*sending, part])
                    sending.append(part)
                except StateLimitError as part_exc:
                    skipped = part_exc
            if not sending:
                self.unsent.update(parts)
                raise skipped from None
            projected, size = self._project(sending)
        self.unsent.difference_update(sending)
        self.unsent.update(p for p in parts if p not in sending)
        projected = copy.deepcopy(projected)  # before diffing: the patch's values must not alias local state
        patch = diff(self.base, projected)
        if not patch:
            if skipped is not None:
                raise skipped
            return None
        key = f"{self._key_prefix}{next(self._keys)}"
        self.base = projected
        self.in_flight[key] = projected
        return Outgoing(key=key, patch=patch, size=size, skipped=skipped)

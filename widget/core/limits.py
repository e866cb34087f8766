"""The D4 state limits, measured the same way by the client and the relay."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..errors import StateLimitError
from ..protocol import MAX_STATE_BYTES, MAX_STATE_DEPTH, ErrorCode


def encode_compact(doc: Any) -> bytes:
    """The canonical byte form the 64 KB cap is measured on."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def depth(value: Any, limit: int = MAX_STATE_DEPTH) -> int:
    """Nesting depth (scalar 0, each container level +1); stops counting past ``limit``.

    Iterative so a hostile, deeply nested document cannot hit the recursion limit.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, level = stack.pop()
        children: Iterable[Any]
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        level += 1
        if level > deepest:
            deepest = level
            if deepest > limit:
                return deepest
        stack.extend((child, level) for child in children)
    return deepest


def check_state(doc: Any) -> int:
    """Raise StateLimitError when ``doc`` breaks a D4 limit (or cannot be measured: ``bad_request``); return its
    size in bytes otherwise."""
    d = depth(doc)
    if d > MAX_STATE_DEPTH:
        raise StateLimitError(
            ErrorCode.STATE_TOO_DEEP, f"State nesting depth exceeds {MAX_STATE_DEPTH} levels."
        )
    try:
        size = len(encode_compact(doc))
    except UnicodeEncodeError:  # a lone surrogate (e.g. "\ud800" in the JSON): it has no UTF-8 form to store
        raise StateLimitError(
            ErrorCode.BAD_REQUEST,
            "State contains a string that is not valid Unicode (a lone surrogate); nothing stored.",
        ) from None
    if size > MAX_STATE_BYTES:
        raise StateLimitError(
            ErrorCode.STATE_TOO_LARGE,
            f"State is {size} bytes; the relay stores at most {MAX_STATE_BYTES} bytes (64 KB).",
        )
    return size

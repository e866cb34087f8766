"""A small, fast checker for the JSON Schemas ``widget.protocol.schemas`` generates.

It understands exactly the keywords the generator writes (``$ref`` into ``$defs``, ``type``, ``properties``,
``required``, ``additionalProperties``, ``items``, ``enum``, ``const``, ``anyOf``, ``oneOf``, ``minLength``,
``maxLength``, ``minimum``, ``maximum``) and says what
jsonschema would say about them, at a fraction of the cost: a relay checks every payload it receives, and a
patch of thousands of operations must not cost seconds. Each schema is compiled once into nested closures;
the tests compare the verdicts with jsonschema's on every message they see.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Where in the value: ``()`` for the root, else ``(parent, key)`` (a chain, rendered only for a problem).
Path = tuple[Any, ...]
Found = list[tuple[Path, str]]
Check = Callable[[Any, Path, Found], None]


@dataclass(frozen=True)
class Problem:
    """One way a value breaks its schema: where (a JSON pointer into the value) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '/'}: {self.message}"


def _pointer(where: Path) -> str:
    parts = []
    while where:
        where, key = where
        parts.append(str(key))
    return "".join(f"/{p}" for p in reversed(parts))


def _is_type(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return name == "boolean"
    if name == "string":
        return isinstance(value, str)
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float))
    if name == "null":
        return value is None
    return False


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``1`` equals ``1.0`` but not ``true``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def _depth(found: Found) -> tuple[int, int]:
    """How far a failing branch got: its deepest problem, then its fewest problems."""
    return max(len(_pointer(w)) for w, _ in found), -len(found)


def _nothing(value: Any, path: Path, out: Found) -> None:
    return None


class Checker:
    """Checks values against one schema whose ``$ref``s point into ``defs``."""

    def __init__(self, schema: dict[str, Any], defs: dict[str, Any]) -> None:
        self.defs = defs
        self._compiled: dict[str, Check] = {}
        self._check = self._compile(schema)

    def problems(self, value: Any) -> list[Problem]:
        """Every problem of ``value`` (empty: it conforms), in document order."""
        out: Found = []
        self._check(value, (), out)
        return [Problem(_pointer(where), message) for where, message in out]

    # --- compilation: one closure per schema node ------------------------------------------------------
    def _compile(self, node: dict[str, Any]) -> Check:
        ref = node.get("$ref")
        if ref is not None:
            return self._named(ref.rsplit("/", 1)[-1])
        steps: list[Check] = []
        if "const" in node:
            steps.append(self._const(node["const"]))
        if "enum" in node:
            steps.append(self._enum(node["enum"]))
        if "type" in node:
            steps.append(self._type(node["type"]))
        for key in ("anyOf", "oneOf"):
            if key in node:
                steps.append(self._any([self._compile(b) for b in node[key]], exactly_one=key == "oneOf"))
        if "properties" in node or "required" in node or "additionalProperties" in node:
            steps.append(self._object(node))
        if "items" in node:
            steps.append(self._items(self._compile(node["items"])))
        if any(k in node for k in ("minLength", "maxLength", "minimum", "maximum")):
            steps.append(self._bounds(node))
        if not steps:
            return _nothing

        def check(value: Any, path: Path, out: Found) -> None:
            before = len(out)
            for step in steps:
                step(value, path, out)
                if len(out) > before:  # a wrong const/enum/type: the rest would only repeat it
                    return

        return check

    def _named(self, name: str) -> Check:
        if name not in self._compiled:
            # Placeholder first: a type that refers to itself compiles to a call through this table.
            self._compiled[name] = lambda value, path, out: self._compiled[name](value, path, out)
            self._compiled[name] = self._compile(self.defs[name])
        compiled = self._compiled

        def check(value: Any, path: Path, out: Found) -> None:
            compiled[name](value, path, out)

        return check

    @staticmethod
    def _const(expected: Any) -> Check:
        def check(value: Any, path: Path, out: Found) -> None:
            if not _same(value, expected):
                out.append((path, f"{expected!r} was expected"))

        return check

    @staticmethod
    def _enum(values: list[Any]) -> Check:
        strings = frozenset(v for v in values if isinstance(v, str))
        only_strings = len(strings) == len(values)

        def check(value: Any, path: Path, out: Found) -> None:
            if only_strings and isinstance(value, str):
                if value not in strings:
                    out.append((path, f"{_show(value)} is not one of {values!r}"))
            elif not any(_same(value, v) for v in values):
                out.append((path, f"{_show(value)} is not one of {values!r}"))

        return check

    @staticmethod
    def _type(kind: str | list[str]) -> Check:
        kinds = kind if isinstance(kind, list) else [kind]
        shown = ", ".join(repr(k) for k in kinds)

        def check(value: Any, path: Path, out: Found) -> None:
            for k in kinds:
                if _is_type(value, k):
                    return
            out.append((path, f"{_show(value)} is not of type {shown}"))

        return check

    def _object(self, node: dict[str, Any]) -> Check:
        props = {name: self._compile(sub) for name, sub in node.get("properties", {}).items()}
        required = tuple(node.get("required", ()))
        extra = node.get("additionalProperties", True)
        extra_check = self._compile(extra) if isinstance(extra, dict) else None
        closed = extra is False

        def check(value: Any, path: Path, out: Found) -> None:
            if not isinstance(value, dict):
                return
            for name in required:
                if name not in value:
                    out.append((path, f"{name!r} is a required property"))
            for name, item in value.items():
                sub = props.get(name)
                if sub is not None:
                    sub(item, (path, name), out)
                elif closed:
                    out.append((path, f"Additional properties are not allowed ({name!r} was unexpected)"))
                elif extra_check is not None:
                    extra_check(item, (path, name), out)

        return check

    @staticmethod
    def _bounds(node: dict[str, Any]) -> Check:
        """``minLength``/``maxLength`` of a string (in characters), ``minimum``/``maximum`` of a number."""
        shortest, longest = node.get("minLength"), node.get("maxLength")
        low, high = node.get("minimum"), node.get("maximum")

        def check(value: Any, path: Path, out: Found) -> None:
            if isinstance(value, str):
                if shortest is not None and len(value) < shortest:
                    out.append((path, f"{_show(value)} is too short"))
                elif longest is not None and len(value) > longest:
                    out.append((path, f"{_show(value)} is too long"))
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                if low is not None and value < low:
                    out.append((path, f"{_show(value)} is less than the minimum of {low}"))
                elif high is not None and value > high:
                    out.append((path, f"{_show(value)} is greater than the maximum of {high}"))

        return check

    @staticmethod
    def _items(item_check: Check) -> Check:
        def check(value: Any, path: Path, out: Found) -> None:
            if isinstance(value, list) and item_check is not _nothing:
                for i, item in enumerate(value):
                    item_check(item, (path, i), out)

        return check

    @staticmethod
    def _any(branches: list[Check], *, exactly_one: bool) -> Check:
        def check(value: Any, path: Path, out: Found) -> None:
            results: list[Found] = []
            for branch in branches:
                found: Found = []
                branch(value, path, found)
                if not found and not exactly_one:
                    return
                results.append(found)
            passing = sum(1 for r in results if not r)
            if passing == 1:
                return
            if passing > 1:
                out.append((path, f"{_show(value)} is valid under each of {passing} subschemas"))
                return
            consts = [[p for p in r if p[1].endswith(" was expected")] for r in results]
            if all(len(c) == 1 for c in consts) and len({_pointer(c[0][0]) for c in consts}) == 1:
                # Told apart by one constant (a message's role): name the ones allowed.
                allowed = ", ".join(c[0][1].removesuffix(" was expected") for c in consts)
                out.append((consts[0][0][0], f"not one of the allowed values ({allowed})"))
                return
            # Say why the closest branch failed: the one whose problems lie deepest (it matched the most).
            out.extend(sorted(results, key=_depth)[-1])

        return check

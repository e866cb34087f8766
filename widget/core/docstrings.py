"""Parameter descriptions from a docstring: Google (``Args:``), NumPy (``Parameters`` + dashes) and reST
(``:param x:``) styles. The parameter section leaves the function's description; everything else stays."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Google-style headers whose entries describe parameters (``Attributes:`` describes a dataclass's fields).
_GOOGLE_PARAMS = {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments", "attributes",
                  "other parameters"}
_GOOGLE_ANY = re.compile(r"^([A-Z][A-Za-z ]{1,30}):\s*$")
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}([A-Za-z_][A-Za-z0-9_]*)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")
_NUMPY_PARAMS = {"parameters", "other parameters", "attributes"}
_NUMPY_ENTRY = re.compile(r"^\*{0,2}([A-Za-z_][A-Za-z0-9_]*)(?:\s*,\s*[A-Za-z_][A-Za-z0-9_]*)*\s*(?::\s*(.*))?$")
_REST_FIELD = re.compile(r"^:(param|parameter|arg|argument|key|keyword|type|ivar|var|cvar)(?:\s+([^:]*?))?\s*:\s*(.*)$")


@dataclass
class Docstring:
    """A docstring split into the description (without parameter sections) and per-parameter text."""

    description: str
    params: dict[str, str] = field(default_factory=dict)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _join(parts: list[str]) -> str:
    return " ".join(p.strip() for p in parts if p.strip())


def parse_docstring(doc: str | None) -> Docstring:
    """Split a cleaned docstring (``inspect.getdoc``) into description and parameter descriptions."""
    if not doc:
        return Docstring("")
    lines = doc.expandtabs().splitlines()
    params: dict[str, str] = {}
    kept: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        # NumPy: a header line underlined with dashes.
        if i + 1 < len(lines) and re.fullmatch(r"-{3,}", lines[i + 1].strip() or "x") and stripped:
            if stripped.lower() in _NUMPY_PARAMS:
                i = _numpy_section(lines, i + 2, params)
                continue
        header = _GOOGLE_ANY.match(stripped)
        if header and header.group(1).lower() in _GOOGLE_PARAMS:
            i = _google_section(lines, i + 1, _indent(line), params)
            continue
        rest = _REST_FIELD.match(stripped)
        if rest:
            i = _rest_field(lines, i, rest, params)
            continue
        kept.append(line)
        i += 1
    while kept and not kept[-1].strip():
        kept.pop()
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()
    return Docstring(text, params)


def _google_section(lines: list[str], i: int, header_indent: int, params: dict[str, str]) -> int:
    entry_indent: int | None = None
    name: str | None = None
    parts: list[str] = []
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            # A blank line ends the section unless the next line is still indented under it.
            if i + 1 < len(lines) and lines[i + 1].strip() and _indent(lines[i + 1]) > header_indent:
                i += 1
                continue
            break
        ind = _indent(line)
        if ind <= header_indent:
            break
        if entry_indent is None:
            entry_indent = ind
        m = _GOOGLE_ENTRY.match(line.strip()) if ind == entry_indent else None
        if m:
            if name:
                params[name] = _join(parts)
            name, parts = m.group(1), [m.group(3)]
        elif name:
            parts.append(line)
        i += 1
    if name:
        params[name] = _join(parts)
    return i


def _numpy_section(lines: list[str], i: int, params: dict[str, str]) -> int:
    name: str | None = None
    names: list[str] = []
    parts: list[str] = []

    def flush() -> None:
        for n in names:
            params[n] = _join(parts)

    while i < len(lines):
        line = lines[i]
        if i + 1 < len(lines) and line.strip() and re.fullmatch(r"-{3,}", lines[i + 1].strip() or "x"):
            break  # the next section
        if not line.strip():
            i += 1
            continue
        if _indent(line) == 0:
            m = _NUMPY_ENTRY.match(line.strip())
            if not m:
                break
            flush()
            names = [n.strip().lstrip("*") for n in line.split(":", 1)[0].split(",")]
            name, parts = m.group(1), []
        elif name:
            parts.append(line)
        i += 1
    flush()
    return i


def _rest_field(lines: list[str], i: int, m: re.Match[str], params: dict[str, str]) -> int:
    kind, target, text = m.group(1), (m.group(2) or "").split(), m.group(3)
    parts = [text]
    field_indent = _indent(lines[i])
    i += 1
    while i < len(lines) and lines[i].strip() and _indent(lines[i]) > field_indent \
            and not lines[i].strip().startswith(":"):
        parts.append(lines[i])
        i += 1
    if kind != "type" and target:
        params[target[-1]] = _join(parts)  # ``:param int x:`` names x last
    return i

"""The loader: its ES modules (``static/autopilot.js`` and ``static/loader/*.mjs``) joined into one classic script.

The page loads the loader with a plain ``<script src>`` (possibly ``defer``): one file, one request, no module
loading at run time. Its source is ES modules, so that each part can be linted and type-checked on its own
(``bash dev lint``: eslint and ``tsc --checkJs``). The join, standard library only:

- follows the entry's ``import { a, b } from "./x.mjs";`` declarations (relative ``.mjs`` paths, named imports
  without renaming, or a bare ``import "./x.mjs";``) and orders the modules as ES modules would run: depth
  first, each after what it imports (a module already under way in a cycle is not entered again);
- drops the import declarations and the ``export`` keyword of ``export const|let|function|async function|class``
  (other forms of export, default or namespace imports are refused: their meaning does not survive the join);
- drops JSDoc blocks that hold a tag (``@type``, ``@param``...): types for tsc, not for the page;
- puts the modules, in that order, into one strict-mode function run at once, after the entry's leading comment.

All modules share that one function's scope, so a top-level name may be declared by one module only (checked,
as is that every imported name is exported by its module). An entry without import declarations is returned
as it is.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .util import BuildError

#: ``import { a, b } from "./x.mjs";`` or ``import "./x.mjs";`` at the start of a line.
IMPORT_RE = re.compile(r'^import[ \t]*(?:\{([^}]*)\}[ \t]*from[ \t]*)?"(\.{1,2}/[^"]+\.mjs)";[ \t]*\n', re.MULTILINE)
ANY_IMPORT_RE = re.compile(r"^import\b", re.MULTILINE)
EXPORT_DECL_RE = re.compile(r"^export[ \t]+(?=(?:const|let|var|class|function|async[ \t]+function)\b)", re.MULTILINE)
ANY_EXPORT_RE = re.compile(r"^export\b", re.MULTILINE)
#: A top-level declaration (at column 0, as the loader's modules write them) and the name it declares.
DECL_RE = re.compile(
    r"^(?:export[ \t]+)?(const|let|var|class|function\*?|async[ \t]+function\*?)[ \t]+([A-Za-z_$][\w$]*)(.*)$",
    re.MULTILINE)
#: A JSDoc block with a tag: for the type checker only.
JSDOC_RE = re.compile(r"/\*\*(?:(?!\*/).)*?@(?:type|typedef|param|returns?|template|property|callback|this)\b.*?\*/",
                      re.DOTALL)
LEADING_COMMENT_RE = re.compile(r"\A(/\*.*?\*/\n)", re.DOTALL)


@dataclass
class Module:
    """One source module: its path (relative to static/), imports and top-level declarations."""

    rel: str
    text: str
    imports: list[tuple[str, list[str]]] = field(default_factory=list)  # (module rel, names)
    declared: list[str] = field(default_factory=list)
    exported: set[str] = field(default_factory=set)


def _later_names(rest: str) -> list[str]:
    """Further names of ``let a = 1, b = 2;`` on one line (commas outside brackets and strings only)."""
    names, depth, quote, i = [], 0, "", 0
    while i < len(rest):
        c = rest[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'`":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            m = re.match(r"\s*([A-Za-z_$][\w$]*)\s*(?:=|,|;|$)", rest[i + 1:])
            if m:
                names.append(m.group(1))
        elif c == ";" and depth == 0:
            break
        i += 1
    return names


def _parse(static: Path, rel: str) -> Module:
    path = static / rel
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise BuildError(f"loader: cannot read static/{rel} ({e.strerror})") from None
    mod = Module(rel, text)
    for m in IMPORT_RE.finditer(text):
        target = (Path(rel).parent / m.group(2)).as_posix()
        target = Path(target).as_posix()
        parts: list[str] = []
        for p in target.split("/"):
            if p == "..":
                if not parts:
                    raise BuildError(f"loader: static/{rel} imports {m.group(2)}, outside static/")
                parts.pop()
            elif p not in (".", ""):
                parts.append(p)
        names = [n.strip() for n in (m.group(1) or "").split(",") if n.strip()]
        for n in names:
            if not re.fullmatch(r"[A-Za-z_$][\w$]*", n):
                raise BuildError(f"loader: static/{rel}: import {{ {n} }} (renamed or type-only imports do not "
                                 "survive the join; import the name as it is exported)")
        mod.imports.append(("/".join(parts), names))
    if len(ANY_IMPORT_RE.findall(text)) != len(mod.imports):
        bad = next(line for line in text.splitlines() if line.startswith("import")
                   and not IMPORT_RE.match(line + "\n"))
        raise BuildError(f"loader: static/{rel}: {bad.strip()!r} is not an import the join takes "
                         '(import { a, b } from "./x.mjs"; on one declaration)')
    if len(ANY_EXPORT_RE.findall(text)) != len(EXPORT_DECL_RE.findall(text)):
        bad = next(line for line in text.splitlines() if line.startswith("export") and not EXPORT_DECL_RE.match(line))
        raise BuildError(f"loader: static/{rel}: {bad.strip()!r}: only export const|let|function|class survives "
                         "the join")
    for m in DECL_RE.finditer(text):
        names = [m.group(2)]
        if m.group(1) in ("const", "let", "var"):
            names += _later_names(m.group(3))
        mod.declared += names
        if m.group(0).startswith("export"):
            mod.exported.update(names)
    return mod


def join_loader(entry: Path) -> bytes:
    """The loader's source ``entry`` (static/autopilot.js) with its modules joined in (bytes as read if none)."""
    static = entry.parent
    raw = entry.read_bytes()
    text = raw.decode("utf-8")
    if not IMPORT_RE.search(text):
        return raw
    modules: dict[str, Module] = {}
    order: list[Module] = []
    visiting: set[str] = set()

    def visit(rel: str, importer: str | None) -> None:
        if rel in modules or rel in visiting:
            return
        if not (static / rel).is_file():
            raise BuildError(f"loader: static/{importer} imports ./{rel}, which does not exist")
        visiting.add(rel)
        mod = _parse(static, rel)
        for target, _ in mod.imports:
            visit(target, rel)
        visiting.discard(rel)
        modules[rel] = mod
        order.append(mod)

    visit(entry.name, None)
    owner: dict[str, str] = {}
    for mod in order:
        for name in mod.declared:
            if name in owner:
                raise BuildError(f"loader: {name!r} is declared at the top of both static/{owner[name]} and "
                                 f"static/{mod.rel}; the joined modules share one scope: rename one")
            owner[name] = mod.rel
        for target, names in mod.imports:
            missing = [n for n in names if n not in modules[target].exported]
            if missing:
                raise BuildError(f"loader: static/{mod.rel} imports {', '.join(missing)} from static/{target}, "
                                 "which does not export it")
    head = LEADING_COMMENT_RE.match(text)
    out = [head.group(1) if head else "", "(() => {\n", '"use strict";\n']
    for mod in order:
        body = mod.text
        if mod.rel == entry.name and head:
            body = body[head.end():]
        body = IMPORT_RE.sub("", body)
        body = EXPORT_DECL_RE.sub("", body)
        body = _strip_jsdoc(body)
        out.append(f"// ==== module {mod.rel}\n")
        out.append(body.strip("\n") + "\n")
    out.append("})();\n")
    return "".join(out).encode("utf-8")


def _strip_jsdoc(body: str) -> str:
    """``body`` without its tagged JSDoc blocks (a block alone on its lines goes with its lines)."""
    def drop(m: re.Match[str]) -> str:
        start = body.rfind("\n", 0, m.start()) + 1
        end = body.find("\n", m.end())
        alone = not body[start:m.start()].strip() and not body[m.end():end if end >= 0 else len(body)].strip()
        return "\0" if alone else ""

    stripped = JSDOC_RE.sub(drop, body)
    # A line that held only a dropped block goes (its leading spaces and its newline too).
    return re.sub(r"^[ \t]*\0[ \t]*\n", "", stripped, flags=re.MULTILINE).replace("\0", "")

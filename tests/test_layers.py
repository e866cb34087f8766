"""The house rules of docs/architecture.md, checked on the code's own imports (every import, lazy ones too)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import NamedTuple

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "widget"


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


class Statement(NamedTuple):
    """One import statement of a file: ``import a, b`` (``module`` None) or ``from <level dots><module> import ...``
    (``module`` "" for ``from . import x``)."""

    module: str | None
    level: int
    names: tuple[str, ...]


def statements(tree: ast.Module) -> tuple[Statement, ...]:
    """Every import statement of a syntax tree, at any depth (function-level and ``TYPE_CHECKING`` ones too)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.append(Statement(None, 0, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.ImportFrom):
            out.append(Statement(node.module or "", node.level, tuple(a.name for a in node.names)))
    return tuple(out)


@functools.cache
def statements_of(path: Path) -> tuple[Statement, ...]:
    """A file's import statements, parsed once for all the rules. Only they are kept, not the syntax tree: the
    trees of widget/ are some 300,000 objects, which every later garbage collection of the run would walk again."""
    return statements(ast.parse(path.read_text(encoding="utf-8")))


def absolute(st: Statement, package: str) -> str:
    """The module a ``from ... import`` statement reads from, made absolute (``from ..x import y`` in
    ``widget.a.b`` reads ``widget.x``)."""
    if not st.level:
        return st.module or ""
    base = package.split(".")
    base = base[: len(base) - st.level + 1]
    return ".".join(base + ([st.module] if st.module else []))


def imports_of(path: Path) -> set[str]:
    """Every ``widget...`` module a file imports, at any depth of its code."""
    mod = module_of(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out: set[str] = set()
    for st in statements_of(path):
        if st.module is None:
            out.update(name for name in st.names if name.startswith("widget"))
            continue
        target = absolute(st, package)
        if target.startswith("widget"):
            out.add(target)
            out.update(f"{target}.{name}" for name in st.names)
    return out


def files(under: str) -> list[Path]:
    return sorted((ROOT / under).rglob("*.py")) if (ROOT / under).is_dir() else [ROOT / (under + ".py")]


def offenders(sources: list[str], forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for src in sources:
        for f in files(src):
            for imp in sorted(imports_of(f)):
                if any(imp == x or imp.startswith(x + ".") for x in forbidden):
                    bad.append(f"{f.relative_to(ROOT)} imports {imp}")
    return bad


# Browser-side code never imports the relay (it is not in the bundle); the relay is the only server side. The lists
# are found by looking, so a module added later is under the rules at once.
SERVER_SIDE = ("widget/relay", "widget/conformance", "widget/integrations")
BROWSER_SIDE = sorted(
    str(p.relative_to(ROOT).with_suffix("")) for p in PKG.iterdir()
    if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))
    and str(p.relative_to(ROOT).with_suffix("")) not in SERVER_SIDE
)
#: The runtime modules that perform the session's effects (``widget.client`` and its parts).
CLIENT_RUNTIME = ("widget.client",)

RULES = [
    ("browser-side code never imports the relay", BROWSER_SIDE, tuple(p.replace("/", ".") for p in SERVER_SIDE)),
    ("the vocabulary imports nothing of the widget but the error root", ["widget/protocol"],
     ("widget.core", "widget.store", "widget.ui", "widget.client", "widget.transports", "widget.browser",
      "widget.relay")),
    ("the core decides without the runtime, the UI or the network", ["widget/core"],
     CLIENT_RUNTIME + ("widget.store", "widget.ui", "widget.transports", "widget.browser", "widget.browser_env",
                       "widget.relay")),
    ("the headless store knows no DOM", ["widget/store"], ("widget.ui", "widget.browser", "widget.browser_env")),
    ("the UI renders from the store, never from the network", ["widget/ui"], ("widget.transports", "widget.relay")),
    ("the conformance suite speaks the protocol, never the relay's code", ["widget/conformance"],
     ("widget.relay", "widget.client", "widget.core")),
    ("the docs generators' plugins run in the docs build: no browser-side code", ["widget/integrations"],
     tuple(p.replace("/", ".") for p in BROWSER_SIDE)),
]


@pytest.mark.parametrize("rule, sources, forbidden", RULES, ids=[r[0] for r in RULES])
def test_house_rule(rule: str, sources: list[str], forbidden: tuple[str, ...]) -> None:
    assert offenders(sources, forbidden) == [], rule


def test_the_rules_see_imports() -> None:
    """The checker itself finds a relative, a lazy and an absolute import (so a rule cannot pass by blindness)."""
    found = imports_of(PKG / "relay" / "hub" / "turns.py")
    assert "widget.relay.models.base" in found and "widget.protocol" in found
    assert offenders(["widget/relay/hub"], ("widget.relay.models.base",))


def test_the_clients_parts_never_reach_into_the_facade() -> None:
    """widget/client/'s parts are given what they use (a context object), never ``AutopilotClient`` itself, and
    none re-declares a sibling's state for the type checker (docs/architecture.md, "The client's parts")."""
    parts = [p for p in sorted((PKG / "client").glob("*.py")) if p.stem not in ("__init__", "facade")]
    assert len(parts) >= 10
    sources = [str(p.relative_to(ROOT).with_suffix("")) for p in parts]
    assert offenders(sources, ("widget.client.facade", "widget.client.AutopilotClient")) == []
    assert [p.name for p in PKG.glob("client_*.py")] == []  # no mixin modules beside the package
    for p in (PKG / "client").glob("*.py"):
        assert "TYPE_CHECKING" not in p.read_text(encoding="utf-8"), p.name


def test_the_hubs_parts_never_reach_into_the_hub() -> None:
    """The relay's hub is composed as the client is: hub/core.py imports its parts, each given a narrow context
    (docs/architecture.md); no part imports core.py, not even for the type checker, and the MCP servers do not
    import the hub at all."""
    parts = [p for p in sorted((PKG / "relay" / "hub").glob("*.py")) if p.stem not in ("__init__", "core")]
    assert len(parts) >= 10
    sources = [str(p.relative_to(ROOT).with_suffix("")) for p in parts]
    assert offenders(sources, ("widget.relay.hub.core", "widget.relay.hub.Hub")) == []
    assert offenders(["widget/relay/mcp"], ("widget.relay.hub",)) == []


# --- No import cycle (docs/architecture.md, "One way to build a part") -------------------------------------------
def import_edges(path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` a file imports (see ``edges_of``)."""
    return edges_of(statements_of(path), module_of(path), path.name == "__init__.py", modules)


def edges_of(source: str | tuple[Statement, ...], mod: str, is_package: bool, modules: set[str]) -> set[str]:
    """The modules of ``modules`` the code of module ``mod`` (its text or its import statements) imports, at any
    depth (function-level and ``TYPE_CHECKING`` imports count: a cycle through them is still two modules that need
    each other). ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``."""
    package = mod if is_package else mod.rsplit(".", 1)[0]
    out: set[str] = set()
    for st in statements(ast.parse(source)) if isinstance(source, str) else source:
        if st.module is None:
            out.update(name for name in st.names if name in modules)
            continue
        target = absolute(st, package)
        for name in st.names:
            if f"{target}.{name}" in modules:
                out.add(f"{target}.{name}")
            elif target in modules:
                out.add(target)
    out.discard(mod)
    return out


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Every module of ``widget/`` (the build's output left out) and the modules of ``widget/`` it imports."""
    paths = {module_of(p): p for p in sorted(PKG.rglob("*.py")) if "_dist" not in p.relative_to(PKG).parts}
    names = set(paths)
    return {mod: import_edges(path, names) for mod, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.add(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


#: The cycles still tolerated, each named with what removes it; every other cycle fails the test, and an entry
#: whose cycle is gone must go too.
KNOWN_CYCLES: dict[str, set[str]] = {}


def test_no_import_cycle() -> None:
    """No two modules of widget/ need each other, even through a function-level or type-only import; the store,
    the UI and the relay's hub are composed from parts that get what they use (the UI's bar and the hub's core
    import their parts, none imports them)."""
    graph = import_graph()
    assert "widget.ui.bar" in graph and "widget.store.store" in graph and "widget.relay.hub.core" in graph
    found = cycles(graph)
    unknown = [sorted(c) for c in found if not any(c <= known for known in KNOWN_CYCLES.values())]
    assert unknown == [], "import cycles"
    stale = [name for name, known in KNOWN_CYCLES.items() if not any(c & known for c in found)]
    assert stale == [], "these cycles are gone: remove them from KNOWN_CYCLES"


def test_the_cycle_check_sees_cycles() -> None:
    """The checker finds a cycle through a function-level import and a ``TYPE_CHECKING`` one (no pass by blindness)."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": set()}) == []
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .bar import Bar\n"
              "def f():\n    from ..store import forms\n    import widget.core\n")
    modules = {"widget.ui.bar", "widget.ui.part", "widget.store", "widget.store.forms", "widget.core"}
    assert edges_of(source, "widget.ui.part", False, modules) == {"widget.ui.bar", "widget.store.forms",
                                                                 "widget.core"}
    assert "widget.ui.bar" in import_graph()["widget.browser"]  # imported inside a function there


def test_the_bars_parts_never_reach_into_the_bar() -> None:
    """widget/ui/'s parts get what they use (widget.ui.context, the store or its slice, sibling parts), never the
    bar; widget/store/'s parts get the client's narrow surface and callbacks, never the store; neither package
    re-declares a sibling's state for the type checker."""
    parts = [str(p.relative_to(ROOT).with_suffix("")) for p in sorted((PKG / "ui").glob("*.py")) if p.stem != "bar"]
    assert len(parts) >= 15
    assert offenders(parts, ("widget.ui.bar",)) == []
    store_parts = [str(p.relative_to(ROOT).with_suffix("")) for p in sorted((PKG / "store").glob("*.py"))
                   if p.stem not in ("__init__", "store")]
    assert offenders(store_parts, ("widget.store.store", "widget.store.Store")) == []
    for p in [*(PKG / "ui").glob("*.py"), *(PKG / "store").glob("*.py")]:
        assert "TYPE_CHECKING" not in p.read_text(encoding="utf-8"), p.name

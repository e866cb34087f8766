"""The house rules of docs/architecture.md, checked on the code's own imports (every import, lazy ones too)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "widget"


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every ``widget...`` module a file imports, at any depth of its code."""
    mod = module_of(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("widget"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("widget"):
                out.add(target)
                out.update(f"{target}.{a.name}" for a in node.names)
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
SERVER_SIDE = ("widget/relay", "widget/conformance")
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
     ("widget.core", "widget.store", "widget.ui", "widget.client", "widget.transports", "widget.browser", "widget.relay")),
    ("the core decides without the runtime, the UI or the network", ["widget/core"],
     CLIENT_RUNTIME + ("widget.store", "widget.ui", "widget.transports", "widget.browser", "widget.browser_env",
                       "widget.relay")),
    ("the headless store knows no DOM", ["widget/store"], ("widget.ui", "widget.browser", "widget.browser_env")),
    ("the UI renders from the store, never from the network", ["widget/ui"], ("widget.transports", "widget.relay")),
    ("the conformance suite speaks the protocol, never the relay's code", ["widget/conformance"],
     ("widget.relay", "widget.client", "widget.core")),
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

"""Modules loaded on first use (written by autopilot-widget's build.py).

The zips the page downloads at boot hold only what the widget's boot and first answer import; every other module
is in a *lazy group*, a zip of its own: ``schema`` (jsonschema and what it imports: fetched before the first
argument check that needs it) and ``rest`` (the rest of the standard library and the unused parts of the wheels).
This meta-path finder, just before PathFinder on ``sys.meta_path``, answers for exactly the modules of those zips:
on the first import of one of them it fetches its zip (synchronously in the browser: the one way to fetch inside an
import on the main thread), mounts it, and from then on those modules import like any other. The synchronous path is a
fallback: the loader fetches a group asynchronously before page Python runs when a static scan of that Python
needs it (``needs``), and the client awaits ``prefetch`` before it imports jsonschema. Names that are in no zip
fail as usual (``ModuleNotFoundError``) without any fetch.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Iterable, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import TypedDict

    class StateReport(TypedDict):
        """What ``state()`` reports."""

        mounted: bool
        groups: list[str]
        fetches: int
        trigger: str | None
        urls: dict[str, str]

# {group: (where its zip is mounted, [module names])}; the build writes this line (split.py).
GROUPS: dict[str, tuple[str, list[str]]] = {}
_GROUP_OF = {m: g for g, (_, mods) in GROUPS.items() for m in mods}



class _State:
    """The finder's state: the groups' URLs, which are mounted, the fetches so far and what triggered the last."""

    def __init__(self) -> None:
        self.urls: dict[str, str] = {}
        self.mounted: set[str] = set()
        self.fetches = 0
        self.trigger: str | None = None
        self.fetch: Callable[[str], Any] | None = None  # bytes, or a JS Uint8Array (``mount`` takes both)
        self.pending: dict[str, asyncio.Future[None]] = {}


_state = _State()


def _fetch_sync(url: str) -> bytes:
    # Synchronous XHR is the only way to fetch during an import on the browser's main thread; the response comes
    # as a binary string (x-user-defined: byte b -> U+F7xx for b >= 0x80), whose UTF-16 low bytes are the bytes.
    from js import XMLHttpRequest

    req = XMLHttpRequest.new()
    req.open("GET", url, False)
    req.overrideMimeType("text/plain; charset=x-user-defined")
    req.send(None)
    if req.status != 200:
        raise ImportError(f"a lazily loaded part of the Python library could not be fetched (HTTP {req.status}: "
                          f"{url})")
    return str(req.responseText).encode("utf-16-le")[::2]


def groups_of(fullname: str) -> set[str]:
    """The lazy groups whose zips hold ``fullname`` or one of its parent packages (importing it imports them)."""
    parts = fullname.split(".")
    return {_GROUP_OF[p] for p in (".".join(parts[: i + 1]) for i in range(len(parts))) if p in _GROUP_OF}


def mount(data: Any = None, group: str = "rest") -> None:
    """Make a group importable (``data``: its zip's bytes or a JS Uint8Array; None: it is already in place)."""
    if group in _state.mounted:
        return
    where = GROUPS[group][0]
    if data is not None:
        if hasattr(data, "to_bytes"):
            data = data.to_bytes()
        import os

        os.makedirs(os.path.dirname(where), exist_ok=True)
        with open(where, "wb") as f:
            f.write(data)
    _state.mounted.add(group)
    # (Not importlib.invalidate_caches(): PathFinder's imports importlib.metadata, which may be lazy itself.)
    for key in [k for k in sys.path_importer_cache if isinstance(k, str) and k.startswith(where)]:
        del sys.path_importer_cache[key]
    if where not in sys.path:
        sys.path.append(where)


def _ensure(group: str, fullname: str) -> None:
    if group in _state.mounted:
        return
    url = _state.urls.get(group)
    if url is None:
        raise ImportError(f"{fullname} is in the lazily loaded group {group!r}, whose URL is not set")
    fetch = _state.fetch or _fetch_sync
    _state.trigger = fullname
    _state.fetches += 1
    mount(fetch(url), group)


async def prefetch(names: Iterable[str]) -> None:
    """Fetch (asynchronously, once) and mount the groups that hold these modules, so importing them does not
    fetch synchronously. A failed fetch is left to the import, which then tries once more and fails clearly."""
    for group in set().union(*map(groups_of, names)) - _state.mounted:
        pending = _state.pending.get(group)
        if pending is None:
            pending = _state.pending[group] = _fetch_async(group)
        try:
            await pending
        except Exception:  # noqa: BLE001 - the synchronous fallback reports it
            pass
        finally:
            _state.pending.pop(group, None)


def _fetch_async(group: str) -> asyncio.Future[None]:
    import asyncio

    async def run() -> None:
        url = _state.urls.get(group)
        if url is None or _state.fetch is not None:  # tests and Node: the synchronous path
            return
        from js import Uint8Array, fetch

        resp = await fetch(url)
        if not resp.ok:
            raise ImportError(f"HTTP {resp.status}: {url}")
        buf = await resp.arrayBuffer()
        if group not in _state.mounted:
            _state.fetches += 1
            mount(Uint8Array.new(buf), group)

    return asyncio.ensure_future(run())


class RestFinder:
    """Finds the modules of the lazy groups (and only those), mounting a group's zip on first use.

    It sits just before PathFinder: a package split between zips (``importlib`` in the core, ``importlib.resources``
    lazy) has folders in more than one zip, and a folder without its ``__init__`` would otherwise be taken for a
    namespace package before this finder is asked. A module found the normal way (site-packages, a mounted zip)
    is still found there first."""

    @classmethod
    def find_spec(
        cls, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        group = _GROUP_OF.get(fullname)
        if group is None:
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None and spec.origin is not None:  # not a namespace portion
            return spec
        _ensure(group, fullname)
        parent = fullname.rpartition(".")[0]
        where = GROUPS[group][0] + ("/" + parent.replace(".", "/") if parent else "")
        spec = PathFinder.find_spec(fullname, [where])
        if spec is not None and parent:
            # A package split between zips: its submodules in this zip are found from now on.
            pkg = sys.modules.get(parent)
            pkg_path = getattr(pkg, "__path__", None)
            if pkg_path is not None and where not in pkg_path:
                try:
                    pkg_path.append(where)
                except AttributeError:
                    pass
        return spec

    @classmethod
    def invalidate_caches(cls) -> None:
        pass


def install(urls: dict[str, str] | str | None = None, fetch: Callable[[str], Any] | None = None) -> None:
    """Put the finder last on sys.meta_path; ``urls``: {group: URL of its zip} (a string: the rest zip's URL);
    ``fetch(url) -> bytes`` replaces the synchronous XHR (tests, Node)."""
    if isinstance(urls, str) or urls is None:
        urls = {"rest": urls} if urls else {}
    _state.urls = {str(k): str(v) for k, v in dict(urls).items()}
    _state.fetch = fetch
    "".encode("utf-16-le")  # the codec _fetch_sync needs, looked up now (it is in this zip)
    if RestFinder not in sys.meta_path:
        from importlib.machinery import PathFinder

        at = sys.meta_path.index(PathFinder) if PathFinder in sys.meta_path else len(sys.meta_path)
        sys.meta_path.insert(at, RestFinder)


def needs(sources: Iterable[object]) -> list[str]:
    """The lazy groups that these Python sources import from (statically), in a stable order."""
    import ast

    found: set[str] = set()
    for src in sources:
        try:
            tree = ast.parse(str(src))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                found |= groups_of(name)
    return sorted(found)


def needs_rest(sources: Iterable[object]) -> bool:
    """Whether any of these Python sources imports (statically) a module of the rest zip."""
    return "rest" in needs(sources)


def state() -> StateReport:
    """For tests and benchmarks: whether the rest is mounted, which groups are, how many fetches, which import
    triggered the last synchronous one."""
    return {"mounted": "rest" in _state.mounted, "groups": sorted(_state.mounted),
            "fetches": _state.fetches, "trigger": _state.trigger, "urls": dict(_state.urls)}

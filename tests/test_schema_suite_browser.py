"""The JSON-Schema-Test-Suite on ``widget.core.validation.validate`` inside the browser (Pyodide, bundled jsonschema).

Same cases as tests/test_schema_suite.py (draft 2020-12 and draft 7, draft-7 schemas tagged with their
``$schema``), run in the booted demo page's Pyodide with the bundle's jsonschema 4.17.3: the cases are written to
the page's in-memory file system once, then validated in batches of 250 (one ``runPython`` each, so no single task
holds the page for long). The verdicts must be exactly those of the same jsonschema 4.17.3 under CPython (the
pinned wheels in a subprocess) on every case, skip-listed or not — and so agree with the suite wherever the
reviewed skip list does not say otherwise. The robustness cases (validator exceptions are "invalid", no ``$ref``
is fetched, ``enum`` compares as JSON) run there too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_schema_suite import (
    ROBUSTNESS_SRC,
    SUITE_VERSION,
    VERDICTS_SRC,
    IntegerSchemaServer,
    fetch_suite,
    load_cases,
    mismatches,
    robustness_failures,
    run_pinned,
    summary,
)

pytestmark = pytest.mark.browser

BATCH = 250


@pytest.fixture(scope="module")
def cases() -> list[dict[str, Any]]:
    return load_cases(fetch_suite())


@pytest.fixture(scope="module")
def pinned(cases: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_pinned(VERDICTS_SRC, "suite_verdicts", cases, tmp_path_factory.mktemp("suite-pinned"))


async def write_file(page: Any, path: str, text: str) -> None:
    await page.evaluate("([p, t]) => window.Autopilot.pyodide.FS.writeFile(p, t)", [path, text])


async def test_suite_in_the_browser(demo_page: Any, cases: list[dict[str, Any]], pinned: dict[str, Any]) -> None:
    page = demo_page.page
    versions = await demo_page.py("import jsonschema, jsonpatch\n[jsonschema.__version__, jsonschema.__file__]")
    assert versions[0] == SUITE_VERSION, versions
    await write_file(page, "/tmp/suite_cases.json", json.dumps(cases))
    await demo_page.py(VERDICTS_SRC
                       + "\nimport json as _json\n_suite = _json.load(open('/tmp/suite_cases.json'))\nlen(_suite)")
    verdicts: dict[str, list[Any]] = {}
    for start in range(0, len(cases), BATCH):
        verdicts.update(await demo_page.py(f"suite_verdicts(_suite[{start}:{start + BATCH}])"))
    assert len(verdicts) == len(cases) == 2005
    differ = [f"{c['id']}: browser {verdicts[c['id']]} vs CPython {pinned['result'][c['id']]}"
              for c in cases if verdicts[c["id"]][0] != pinned["result"][c["id"]][0]]
    assert differ == []
    assert mismatches(cases, verdicts, SUITE_VERSION) == {"crashes": [], "wrong": [], "stale skips": []}
    s = summary(cases, verdicts, SUITE_VERSION)
    assert s["agree"] == s["ran"] == 1928, s
    assert demo_page.log.page_errors == []


async def test_robustness_in_the_browser(demo_page: Any) -> None:
    server = IntegerSchemaServer()
    await demo_page.py("import pathlib\npathlib.Path('/tmp/int.json').write_text('{\"type\": \"integer\"}')\nNone")
    where = {"http": server.url, "file": Path("/tmp/int.json").as_uri()}
    try:
        result = await demo_page.py(ROBUSTNESS_SRC + f"\nrobustness({where!r})")
    finally:
        server.close()
    assert robustness_failures(result) == []
    assert server.hits == [] and not [u for u in demo_page.log.requests if "/schemas/" in u]
    assert "could not be checked" in result["RecursionError: $ref to itself"][2]
    assert await demo_page.py("1 + 1") == 2  # the interpreter is still fine
    assert demo_page.log.page_errors == []

"""bench/all.py runs every bench or says why not, and every bench keeps its figures through bench/results.py."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ALL = _load("all")
RESULTS = _load("results")


def test_every_bench_script_is_run_or_said_why_not() -> None:
    """A new bench/*.py goes into RUNS (with its quick and full arguments) or NOT_RUN (with the reason)."""
    assert ALL.unlisted() == [], (
        f"bench/{', bench/'.join(ALL.unlisted())}: in neither RUNS nor NOT_RUN of bench/all.py; add it to one")
    in_runs = {run.script for run in ALL.RUNS.values()}
    assert not in_runs & set(ALL.NOT_RUN), "a script is both run and not run"


def test_the_tables_name_scripts_that_exist_with_reasons() -> None:
    """No stale entry: every script named exists, every exception has a reason."""
    present = set(ALL.scripts())
    for name, run in ALL.RUNS.items():
        assert run.script in present, f"RUNS[{name!r}] names bench/{run.script}, which does not exist"
        assert run.quick_limit > 0 and run.full_limit >= run.quick_limit, name
        assert all(isinstance(a, str) for a in [*run.quick, *run.full]), name
    for script, why in ALL.NOT_RUN.items():
        assert script in present, f"NOT_RUN names bench/{script}, which does not exist"
        assert why.strip(), script
    for name, why in ALL.OPTIONAL.items():
        assert name in ALL.RUNS and why.strip(), name


def test_every_bench_that_runs_saves_its_figures_under_its_name() -> None:
    """Each bench's main ends with ``save("<its name>", ...)`` (the pytest-driven ones through _pytest_bench)."""
    assert "save(Path(sys.argv[0]).stem" in (BENCH / "_pytest_bench.py").read_text()
    for run in ALL.RUNS.values():
        text = (BENCH / run.script).read_text()
        stem = run.script.removesuffix(".py")
        assert re.search(rf'\bsave\(\s*"{stem}"', text) or "from _pytest_bench import run" in text, (
            f"bench/{run.script} does not call save({stem!r}, figures) from bench/results.py")


def test_list_prints_the_plan_and_the_reasons(capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``--list`` shows what runs, what runs only with --only, and what never runs, each with its reason."""
    monkeypatch.setattr(sys, "argv", ["bench/all.py", "--quick", "--list"])
    assert ALL.main() == 0
    out = capsys.readouterr().out
    for name in ALL.RUNS:
        assert re.search(rf"^{name}\s", out, re.MULTILINE), name
    for script, why in ALL.NOT_RUN.items():
        assert f"{script:15} not run: {why}" in out
    assert "in neither RUNS nor NOT_RUN" not in out


@dataclasses.dataclass
class _Point:
    x: float
    tags: frozenset[str]


def test_save_writes_one_file_per_run_with_the_runs_facts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file's name, command line, facts and figures (made plain JSON)."""
    monkeypatch.setenv("BENCH_RESULTS_DIR", str(tmp_path))
    monkeypatch.delenv("BENCH_RESULTS", raising=False)
    figures = {"p": _Point(1.5, frozenset({"b", "a"})), "nan": float("nan"), "t": (1, 2), "k": [float("inf")]}
    first = RESULTS.save("jank", figures, argv=[str(BENCH / "jank.py"), "-n", "2", "--kinds", "cold second"])
    second = RESULTS.save("jank", {"n": 1}, argv=["bench/jank.py"])
    assert first is not None and second is not None and first != second
    assert re.fullmatch(r"jank-\d{8}T\d{6}Z\.json", first.name), first.name
    record = json.loads(first.read_text())
    assert record["bench"] == "jank"
    assert record["command"] == "python bench/jank.py -n 2 --kinds 'cold second'"
    assert record["figures"] == {"p": {"x": 1.5, "tags": ["a", "b"]}, "nan": None, "t": [1, 2], "k": [None]}
    assert len(record["load_average"]["start"]) == 3 and len(record["load_average"]["end"]) == 3
    assert record["machine"]["cores"] and record["machine"]["arch"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", record["date"])
    assert record["commit"] is None or re.fullmatch(r"[0-9a-f]{40}", record["commit"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, second.name])


def test_save_refuses_a_bad_name_and_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A name that is not a plain word is refused; ``BENCH_RESULTS=off`` writes nothing."""
    monkeypatch.setenv("BENCH_RESULTS_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="a bench's name"):
        RESULTS.save("../escape", {})
    monkeypatch.setenv("BENCH_RESULTS", "off")
    assert RESULTS.save("jank", {"n": 1}) is None
    assert list(tmp_path.iterdir()) == []


def test_stats_of_samples() -> None:
    """The summary a bench keeps of many samples."""
    assert RESULTS.stats([3, 1, 2, 4]) == {"n": 4, "median": 2.5, "p90": 4.0, "p99": 4.0, "min": 1.0, "max": 4.0}
    assert RESULTS.stats([])["median"] is None

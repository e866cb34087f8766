"""``autopilot-relay eval --app ID PROBES.jsonl``: how well an app's docs index finds what answers its readers.

A probe file has one JSON object per line: ``{"question": "...", "expect": ["/guide/theming/#colours", ...]}``
(the section URLs that answer it; ``"q"`` is accepted for ``"question"``) or ``{"question": "...", "expect":
"unanswerable"}`` (the docs do not answer it). For each answerable probe the command searches the index as
``search_docs`` does and finds the rank of the first expected URL among the best 10 sections; overall it prints
hit@1, hit@5 (the share of answerable probes with an expected section first / in the first five) and MRR@10 (the
mean of 1/rank, 0 past ten). With ``--threshold T`` an unanswerable probe counts as declined when its best
section scores under ``T`` (the engine's score, higher is better), and an answerable probe whose best section
scores under ``T`` is counted as lost. ``--json`` prints one JSON object for CI; ``--min-hit1``, ``--min-hit5``,
``--min-mrr`` make the exit status 1 when a figure falls under them.

An expected URL that is a path (``/guide/x/#a``) matches a section URL with any scheme and host
(``https://docs.example.com/guide/x/#a``), so one probe file serves an index built under any base URL.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict
from urllib.parse import urlsplit

from ...errors import ConfigError

#: Sections looked at per probe (MRR@10).
DEPTH = 10
#: Probes read from one file; a larger file is refused before anything runs.
MAX_PROBES = 5_000
#: Characters of one probe file line.
MAX_LINE_CHARS = 20_000

Expect = list[str] | Literal["unanswerable"]


@dataclass(frozen=True, slots=True)
class Probe:
    """One question and what answers it."""

    line: int
    question: str
    expect: Expect


class ProbeResult(TypedDict):
    """One probe's outcome (``rank`` is 1-based, None when no expected section is among the best 10)."""

    line: int
    question: str
    expect: Expect
    rank: int | None
    top_score: float | None
    below_threshold: bool | None
    found: list[str]
    ms: float


class Figures(TypedDict):
    """The overall figures (None: nothing to measure them on, or no ``--threshold``)."""

    hit_at_1: float | None
    hit_at_5: float | None
    mrr_at_10: float | None
    unanswerable_declined: int | None
    answerable_lost: int | None


class Report(Figures):
    """The whole run, as ``--json`` prints it."""

    app: str
    probes: int
    answerable: int
    unanswerable: int
    threshold: float | None
    passed: bool
    failures: list[str]
    results: list[ProbeResult]


def load_probes(path: Path) -> list[Probe]:
    """The probes of a JSON-lines file (``ConfigError`` naming the file and line of a bad one)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the probe file {path}: {exc}") from None
    probes: list[Probe] = []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        where = f"{path}:{n}"
        if len(raw) > MAX_LINE_CHARS:
            raise ConfigError(f"{where}: a probe line is at most {MAX_LINE_CHARS} characters")
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"{where}: a probe is a JSON object with question and expect")
        question = obj.get("question", obj.get("q"))
        if not isinstance(question, str) or not question.strip():
            raise ConfigError(f"{where}: question must be a non-empty string")
        expect = obj.get("expect")
        if expect != "unanswerable" and not (isinstance(expect, list) and expect
                                              and all(isinstance(u, str) and u for u in expect)):
            raise ConfigError(f'{where}: expect must be a list of section URLs or "unanswerable"')
        probes.append(Probe(n, question, expect))
        if len(probes) > MAX_PROBES:
            raise ConfigError(f"{path}: more than {MAX_PROBES} probes")
    if not probes:
        raise ConfigError(f"{path}: no probes")
    return probes


def url_matches(found: str, expected: str) -> bool:
    """Whether a section URL is an expected one (an expected path matches on any scheme and host)."""
    if found == expected:
        return True
    if expected.startswith("/"):
        parts = urlsplit(found)
        return (parts.path + (f"?{parts.query}" if parts.query else "")
                + (f"#{parts.fragment}" if parts.fragment else "")) == expected
    return False


def score(probes: list[Probe], hits: list[list[dict[str, Any]]], seconds: list[float],
          threshold: float | None) -> tuple[list[ProbeResult], Figures]:
    """Per-probe results and the overall figures from each probe's hits (best first)."""
    results: list[ProbeResult] = []
    h1 = h5 = 0
    rr = 0.0
    declined = lost = 0
    for probe, found, secs in zip(probes, hits, seconds, strict=True):
        urls = [str(h["url"]) for h in found[:DEPTH]]
        top = float(found[0]["score"]) if found else None
        below = None if threshold is None else (top is None or top < threshold)
        rank = None
        if probe.expect == "unanswerable":
            declined += bool(below)
        else:
            expect = probe.expect
            rank = next((i + 1 for i, u in enumerate(urls) if any(url_matches(u, e) for e in expect)), None)
            if rank is not None:
                h1 += rank == 1
                h5 += rank <= 5
                rr += 1 / rank
            lost += bool(below)
        results.append(ProbeResult(line=probe.line, question=probe.question, expect=probe.expect, rank=rank,
                                   top_score=None if top is None else round(top, 4), below_threshold=below,
                                   found=urls[:5], ms=round(secs * 1000, 2)))
    n = sum(p.expect != "unanswerable" for p in probes)
    figures = Figures(
        hit_at_1=round(h1 / n, 4) if n else None,
        hit_at_5=round(h5 / n, 4) if n else None,
        mrr_at_10=round(rr / n, 4) if n else None,
        unanswerable_declined=declined if threshold is not None else None,
        answerable_lost=lost if threshold is not None else None,
    )
    return results, figures


def eval_parser() -> argparse.ArgumentParser:
    """``autopilot-relay eval``'s options."""
    from .cli import _store_flags

    p = argparse.ArgumentParser(
        prog="autopilot-relay eval",
        description="Measure an app's docs index on a probe file (JSON lines: {\"question\": ..., \"expect\": "
                    "[section URLs] or \"unanswerable\"}): hit@1, hit@5 and MRR@10, per probe and overall.",
    )
    p.add_argument("probes", metavar="PROBES.jsonl", help="the probe file")
    _store_flags(p)
    p.add_argument("--threshold", type=float, default=None,
                   help="a best score under this declines (unanswerable probes should fall under it)")
    p.add_argument("--json", action="store_true", help="print one JSON object (for CI)")
    p.add_argument("--min-hit1", type=float, default=None, metavar="X", help="exit 1 when hit@1 < X")
    p.add_argument("--min-hit5", type=float, default=None, metavar="X", help="exit 1 when hit@5 < X")
    p.add_argument("--min-mrr", type=float, default=None, metavar="X", help="exit 1 when MRR@10 < X")
    return p


def _check_floor(name: str, value: float | None, floor: float | None) -> list[str]:
    if floor is None:
        return []
    if not 0 <= floor <= 1:
        raise ConfigError(f"--min-{name} must be between 0 and 1")
    if value is None:
        return [f"{name} has no answerable probe to measure"]
    return [f"{name} {value} is under --min-{name} {floor}"] if value < floor else []


async def _eval(args: argparse.Namespace, index: Any) -> int:
    probes = load_probes(Path(args.probes))
    floors = [("hit1", args.min_hit1), ("hit5", args.min_hit5), ("mrr", args.min_mrr)]
    for name, floor in floors:
        _check_floor(name, None, floor)  # a bad floor is refused before the run
    if not await index.has_index(args.app):
        print(f"autopilot relay eval: app {args.app!r} has no index (autopilot-relay index --app {args.app} "
              "PATH ...)", file=sys.stderr)
        return 1
    hits, seconds = [], []
    for probe in probes:
        t0 = time.perf_counter()
        hits.append(await index.search(args.app, probe.question, limit=DEPTH))
        seconds.append(time.perf_counter() - t0)
    results, figures = score(probes, hits, seconds, args.threshold)
    failures: list[str] = []
    values = (figures["hit_at_1"], figures["hit_at_5"], figures["mrr_at_10"])
    for (name, floor), value in zip(floors, values, strict=True):
        failures += _check_floor(name, value, floor)
    n = sum(p.expect != "unanswerable" for p in probes)
    report = Report(app=args.app, probes=len(probes), answerable=n, unanswerable=len(probes) - n,
                    threshold=args.threshold, passed=not failures, failures=failures, results=results,
                    hit_at_1=figures["hit_at_1"], hit_at_5=figures["hit_at_5"], mrr_at_10=figures["mrr_at_10"],
                    unanswerable_declined=figures["unanswerable_declined"],
                    answerable_lost=figures["answerable_lost"])
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        _print_text(report)
    for line in failures:
        print(f"autopilot relay eval: {line}", file=sys.stderr)
    return 1 if failures else 0


def _print_text(report: Report) -> None:
    for r in report["results"]:
        if r["expect"] == "unanswerable":
            mark = {None: "  -  ", True: "decl ", False: "ANSW "}[r["below_threshold"]]
        else:
            mark = f"@{r['rank']:<4}" if r["rank"] else "MISS "
        score_text = "-" if r["top_score"] is None else f"{r['top_score']:.3f}"
        print(f"{mark} {score_text:>8}  {r['question'][:90]}")
        if r["expect"] != "unanswerable" and (r["rank"] is None or r["rank"] > 5):
            print(f"{'':15}expected {', '.join(r['expect'])}; found {', '.join(r['found'][:3]) or 'nothing'}")

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    print(f"\n{report['app']}: {report['probes']} probes ({report['answerable']} answerable, "
          f"{report['unanswerable']} unanswerable)")
    print(f"hit@1 {fmt(report['hit_at_1'])}  hit@5 {fmt(report['hit_at_5'])}  MRR@10 {fmt(report['mrr_at_10'])}")
    if report["threshold"] is not None:
        print(f"threshold {report['threshold']}: {report['unanswerable_declined']}/{report['unanswerable']} "
              f"unanswerable declined, {report['answerable_lost']}/{report['answerable']} answerable lost")


def eval_main(argv: list[str]) -> int:
    """Run ``autopilot-relay eval``."""
    from .cli import _config, _run

    args = eval_parser().parse_args(argv)
    try:
        config = _config(args)
    except ConfigError as exc:
        print(f"autopilot relay eval: {exc}", file=sys.stderr)
        return 2
    return int(_run(args, config, _eval, "eval"))

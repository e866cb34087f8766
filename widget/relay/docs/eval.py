"""``autopilot-relay eval --app ID PROBES.jsonl``: how well an app's docs index finds what answers its readers.

A probe file has one JSON object per line: ``{"question": "...", "expect": ["/guide/theming/#colours", ...]}``
(the section URLs that answer it; ``"q"`` is accepted for ``"question"``) or ``{"question": "...", "expect":
"unanswerable"}`` (the docs do not answer it). For each answerable probe the command searches the index as
``search_docs`` does and finds the rank of the first expected URL among the best 10 sections; overall it prints
hit@1, hit@5 (the share of answerable probes with an expected section first / in the first five) and MRR@10 (the
mean of 1/rank, 0 past ten). With ``--threshold T`` an unanswerable probe counts as declined when its best
section scores under ``T`` (the engine's score, higher is better; with hybrid search the best cosine similarity
of the sections found, since the fused score is made of ranks and says nothing of how close a match is), and an
answerable probe whose best section scores under ``T`` is counted as lost. ``--json`` prints one JSON object for
CI; ``--min-hit1``, ``--min-hit5``, ``--min-mrr`` make the exit status 1 when a figure falls under them.

With ``--answers`` each question is also asked of the app's configured model in a one-shot turn, through the
relay's own turn machinery started in this process (conversations in a temporary store): whether the final answer
cited an expected section or declined (cited nothing), the turn's tool calls and its time.

An expected URL that is a path (``/guide/x/#a``) matches a section URL with any scheme and host
(``https://docs.example.com/guide/x/#a``), so one probe file serves an index built under any base URL.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import secrets
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict
from urllib.parse import urlsplit

import aiohttp
import socketio

from ... import protocol as P
from ...errors import ConfigError

#: Sections looked at per probe (MRR@10).
DEPTH = 10
#: Probes read from one file; a larger file is refused before anything runs.
MAX_PROBES = 5_000
#: Characters of one probe file line.
MAX_LINE_CHARS = 20_000
#: Longest wait for one answer with ``--answers`` (``--answer-timeout``).
ANSWER_TIMEOUT_S = 120.0

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


def top_score(found: list[dict[str, Any]]) -> float | None:
    """How well a search's best section matches (None: nothing found): with hybrid search the best cosine
    similarity among the hits (``similarity``), else the first hit's score."""
    similarities = [float(h["similarity"]) for h in found if "similarity" in h]
    if similarities:
        return max(similarities)
    return float(found[0]["score"]) if found else None


def score(probes: list[Probe], hits: list[list[dict[str, Any]]], seconds: list[float],
          threshold: float | None) -> tuple[list[ProbeResult], Figures]:
    """Per-probe results and the overall figures from each probe's hits (best first)."""
    results: list[ProbeResult] = []
    h1 = h5 = 0
    rr = 0.0
    declined = lost = 0
    for probe, found, secs in zip(probes, hits, seconds, strict=True):
        urls = [str(h["url"]) for h in found[:DEPTH]]
        top = top_score(found)
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
    from .cli import store_flags

    p = argparse.ArgumentParser(
        prog="autopilot-relay eval",
        description="Measure an app's docs index on a probe file (JSON lines: {\"question\": ..., \"expect\": "
                    "[section URLs] or \"unanswerable\"}): hit@1, hit@5 and MRR@10, per probe and overall.",
    )
    p.add_argument("probes", metavar="PROBES.jsonl", help="the probe file")
    store_flags(p)
    p.add_argument("--threshold", type=float, default=None,
                   help="a best score under this declines (unanswerable probes should fall under it); with hybrid "
                        "search the best cosine similarity (about 0.3-0.5), else the engine's score")
    p.add_argument("--json", action="store_true", help="print one JSON object (for CI)")
    p.add_argument("--min-hit1", type=float, default=None, metavar="X", help="exit 1 when hit@1 < X")
    p.add_argument("--min-hit5", type=float, default=None, metavar="X", help="exit 1 when hit@5 < X")
    p.add_argument("--min-mrr", type=float, default=None, metavar="X", help="exit 1 when MRR@10 < X")
    p.add_argument("--answers", action="store_true",
                   help="also ask each question in a one-shot turn of the app's configured model (the relay's own "
                        "turn machinery, in this process, conversations in a temporary store) and report whether "
                        "the answer cited an expected section or declined, its tool calls and times")
    p.add_argument("--answer-timeout", type=float, default=ANSWER_TIMEOUT_S, metavar="SECONDS",
                   help=f"longest wait for one answer (default {ANSWER_TIMEOUT_S:g})")
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
    answers: list[AnswerResult] | None = None
    if args.answers:
        answers = await ask_all(args, probes)
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
    out: dict[str, Any] = dict(report)
    if answers is not None:
        out["answers"] = answer_figures(probes, answers)
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
    else:
        _print_text(report)
        if answers is not None:
            _print_answers(out["answers"])
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


class AnswerResult(TypedDict):
    """One probe asked of the model: what the final answer cited, and what the turn did."""

    line: int
    cited: list[str]
    #: An answerable probe: whether a cited source is one of the expected sections (None: unanswerable probe).
    cited_expected: bool | None
    #: Whether the answer cited nothing (the relay's "not in the docs" text, or no answer at all).
    declined: bool
    #: The turn's tool calls in order ({tool, ok, ms}), from the relay's turn log.
    tools: list[dict[str, Any]]
    turn_ms: float | None
    #: Tokens of each model round ({step, model, input_tokens, output_tokens, ...}) and the turn's sums, from the
    #: turn log (empty when the provider reports no usage).
    usage: list[dict[str, Any]]
    tokens: dict[str, int]
    error: str | None


def _without_text_fragment(url: str) -> str:
    return url.split(":~:", 1)[0].rstrip("#")


async def ask_all(args: argparse.Namespace, probes: list[Probe]) -> list[AnswerResult]:
    """Each probe's question in a fresh conversation of a relay started in this process: the app as configured
    (its model, its docs settings) but in one-shot mode, the docs index the relay's, conversations in a temporary
    store that is deleted afterwards (the relay's own store is not written)."""
    from ..server import start_relay
    from ..storage import make_store
    from .cli import relay_config

    config = relay_config(args)
    if args.app not in config.apps:
        raise ConfigError(f"--answers: app {args.app!r} is not in the relay's config (its model and settings)")
    if not 0 < args.answer_timeout <= 3600:
        raise ConfigError("--answer-timeout must be 0-3600 seconds")
    token = secrets.token_urlsafe(24)
    config.apps = {args.app: dataclasses.replace(config.apps[args.app], secret=token, loop="one-shot",
                                                 allowed_origins=[])}
    config.host, config.port = "127.0.0.1", 0
    lines: list[dict[str, Any]] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            try:
                lines.append(json.loads(record.getMessage()))
            except ValueError:
                pass

    turn_log = logging.getLogger("widget.relay.turns")
    capture = Capture()
    turn_log.addHandler(capture)
    old_level = turn_log.level
    turn_log.setLevel(logging.INFO)
    out: list[AnswerResult] = []
    with tempfile.TemporaryDirectory(prefix="autopilot-eval-") as tmp:
        store = make_store(None, str(Path(tmp) / "conversations.sqlite3"))
        handle = await start_relay(config, store=store)
        try:
            async with aiohttp.ClientSession() as http:
                for probe in probes:
                    out.append(await _ask(http, handle.url, args.app, token, probe, lines, args.answer_timeout))
        finally:
            await handle.stop()
            turn_log.removeHandler(capture)
            turn_log.setLevel(old_level)
    return out


async def _ask(http: aiohttp.ClientSession, base: str, app_id: str, token: str, probe: Probe,
               lines: list[dict[str, Any]], timeout: float) -> AnswerResult:
    """One question in a fresh conversation; the final answer and the turn's log line."""
    ended: list[dict[str, Any]] = []
    done = asyncio.Event()
    joined = asyncio.Event()
    sio = socketio.AsyncClient(reconnection=False)
    sent = False

    async def on_ended(data: Any) -> None:
        ended.append(data.get("message") or {})

    async def on_input(data: Any) -> None:
        if sent and data.get("reason") == "message":
            done.set()

    async def on_state(_data: Any = None) -> None:
        joined.set()

    sio.on(P.Event.COMPLETION_ENDED, on_ended)
    sio.on(P.Event.USER_INPUT, on_input)
    sio.on(P.Event.STATE, on_state)
    result = AnswerResult(line=probe.line, cited=[], cited_expected=None, declined=True, tools=[], turn_ms=None,
                          usage=[], tokens={},
                          error=None)
    try:
        r = await http.post(f"{base}/api/apps/{app_id}/conversations", headers={"Authorization": f"Bearer {token}"})
        url = (await r.json())["url"]
        info = await (await http.get(url)).json()
        await sio.connect(info["relay_url"], socketio_path=info["relay_path"], transports=["websocket"])
        ack = await sio.call(P.Event.JOIN, {"token": info["token"], "version": P.PROTOCOL_VERSION, "last_seq": 0})
        if not ack.get("ok"):
            raise RuntimeError(f"join refused: {ack}")
        await asyncio.wait_for(joined.wait(), timeout)
        sent = True
        ack = await sio.call(P.Event.USER_MESSAGE, {"text": probe.question, "idempotency_key": f"eval-{probe.line}"},
                             timeout=timeout)
        if not ack.get("ok"):
            raise RuntimeError(f"message refused: {ack}")
        await asyncio.wait_for(done.wait(), timeout)
        cid = info["conversation"]["id"]
        for _ in range(100):  # the turn's log line is written as its task ends, just after its last event
            mine = [x for x in lines if x.get("conversation") == cid]
            if mine:
                result["tools"] = list(mine[-1].get("calls", []))
                result["turn_ms"] = mine[-1].get("ms")
                result["usage"] = list(mine[-1].get("usage", []))
                result["tokens"] = dict(mine[-1].get("tokens", {}))
                break
            await asyncio.sleep(0.05)
    except (TimeoutError, RuntimeError, OSError, KeyError, ValueError, socketio.exceptions.SocketIOError) as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        if sio.connected:
            await sio.disconnect()
    final = ended[-1] if ended else {}
    cited = [_without_text_fragment(str(src.get("url", ""))) for src in final.get("sources") or []]
    result["cited"] = cited
    result["declined"] = not cited
    if probe.expect != "unanswerable":
        expect = probe.expect
        result["cited_expected"] = any(url_matches(c, e) for c in cited for e in expect)
    return result


def answer_figures(probes: list[Probe], answers: list[AnswerResult]) -> dict[str, Any]:
    """The answers' figures: the share of answerable probes whose answer cited an expected section, unanswerable
    ones declined, answerable ones declined, errors, and each probe's result."""
    answerable = [a for p, a in zip(probes, answers, strict=True) if p.expect != "unanswerable"]
    unanswerable = [a for p, a in zip(probes, answers, strict=True) if p.expect == "unanswerable"]
    return {
        "cited_expected": round(sum(bool(a["cited_expected"]) for a in answerable) / len(answerable), 4)
        if answerable else None,
        "answerable_declined": sum(a["declined"] for a in answerable),
        "unanswerable_declined": sum(a["declined"] for a in unanswerable),
        "errors": sum(a["error"] is not None for a in answers),
        "results": answers,
    }


def _print_answers(figures: dict[str, Any]) -> None:
    print("\nanswers (one-shot turns of the app's model):")
    for a in figures["results"]:
        verdict = ("error" if a["error"] else "declined" if a["declined"]
                   else "cited" if a["cited_expected"] else "CITED OTHER" if a["cited_expected"] is False
                   else "ANSWERED")
        tools = ", ".join(f"{t.get('tool')} {t.get('ms')} ms" for t in a["tools"]) or "no tools"
        steps = " + ".join(f"{u.get('input_tokens')}/{u.get('output_tokens')}" for u in a["usage"])
        tokens = f"; tokens in/out per step {steps}" if steps else ""
        print(f"  line {a['line']}: {verdict}; {tools}; turn {a['turn_ms']} ms{tokens}"
              + (f"; {a['error']}" if a["error"] else ""))
    cited = "-" if figures["cited_expected"] is None else f"{figures['cited_expected']:.3f}"
    print(f"cited an expected section {cited}  answerable declined {figures['answerable_declined']}  "
          f"unanswerable declined {figures['unanswerable_declined']}  errors {figures['errors']}")


def eval_main(argv: list[str]) -> int:
    """Run ``autopilot-relay eval``."""
    from .cli import relay_config, run_command

    args = eval_parser().parse_args(argv)
    try:
        config = relay_config(args)
    except ConfigError as exc:
        print(f"autopilot relay eval: {exc}", file=sys.stderr)
        return 2
    return int(run_command(args, config, _eval, "eval"))

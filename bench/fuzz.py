"""Benchmark (full run, not a test): the differential fuzz of state sync over ≥ 10,000 documents.

The property and the generators are tests/test_patch_fuzz.py's (CI runs ~550 documents of it): random
(functions, context) sequences — fresh documents and mutations of the previous one (arrays reordered, keys renamed,
types changed, ``~``/``/`` keys, large integers, floats) — go through the client's ``StateSync`` diff, over the
wire as JSON text, into the relay's ``apply_patch_atomic`` + ``check_state``; after every step the relay's document
must equal the client's projection. Both client diff libraries run on the same sequences: the jsonpatch installed
here (CPython client) and the pinned wheel of the browser bundle; the relay side uses the installed one.

Besides divergences (must be 0) it counts the documents the client refused (a client may refuse integers beyond ±(2**53
− 1), which JSON in the browser cannot carry exactly: ``refused_by_client``), how often ``StateSync`` had to fall back
to sending a part whole because the library's own patch did not reproduce the document (``raw_bad``: what would have
diverged without that check), the ops emitted, and the time per flush.

``--js-wire`` also measures what the browser's real wire does to numbers: the bridge (static/bridge.mjs) hands
the JSON text to ``JSON.parse`` and socket.io ``JSON.stringify``s it again, so every number becomes an IEEE
double (``1.0`` → ``1``, ``-0.0`` → ``0``, integers beyond 2**53 rounded). It reports how many flushed documents
reached the relay with a different value (not only another spelling) than the client believes it holds.

    python bench/fuzz.py [--documents 10000] [--seed 1] [--js-wire]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import test_patch_fuzz as F  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from widget.core import state as state_mod  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from results import save  # noqa: E402


def js_number(x: Any) -> Any:
    """A JSON number after JSON.parse + JSON.stringify in JS (checked against node: 1.0→1, -0.0→0, 2**53+1→2**53)."""
    d = float(x)
    return int(d) if d.is_integer() and abs(d) < 1e21 else d


def js_wire(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return js_number(value)
    if isinstance(value, list):
        return [js_wire(v) for v in value]
    return {k: js_wire(v) for k, v in value.items()}


def same_values(a: Any, b: Any) -> bool:
    """Equal as JSON values: numbers compared by value (1 == 1.0), never bool against number."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_values(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


class Probe:
    """Wraps ``state.diff`` to count fallbacks and time each flush's diff."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.raw_bad = 0
        self.flush_ms: list[float] = []
        self._orig = state_mod.diff

    def __call__(self, base: dict[str, Any], projected: dict[str, Any]) -> list[dict[str, Any]]:
        t0 = time.perf_counter()
        out = self._orig(base, projected)
        self.flush_ms.append((time.perf_counter() - t0) * 1000)
        raw = self.module.make_patch(base, projected).patch
        try:
            ok = F.canon(self.module.apply_patch(base, raw)) == F.canon(projected)
        except Exception:  # noqa: BLE001
            ok = False
        self.raw_bad += not ok
        return out


def run(documents: int, seed_value: int, with_js_wire: bool) -> dict[str, Any]:
    libs = F.diff_libraries()
    stats = {name: F.Stats() for name in libs}
    probes = {name: Probe(m) for name, m in libs.items()}
    divergences: dict[str, list[str]] = {name: [] for name in libs}
    js = {"documents": 0, "value_changed": 0, "spelling_only": 0, "example": None}
    sequences = [0]
    # ~3.4 documents per sequence; generate until every library saw `documents`
    budget = int(documents / 3.0) + 200

    @seed(seed_value)
    @settings(max_examples=budget, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(F.sequences())
    def one(seq: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
        if min(s.documents for s in stats.values()) >= documents or not F.within_limits(seq):
            return
        sequences[0] += 1
        for name, module in libs.items():
            state_mod.diff = probes[name]
            try:
                with F.client_jsonpatch(module):
                    F.run_sequence(seq, stats[name])
            except AssertionError as exc:
                divergences[name].append(f"{exc} :: {json.dumps(seq, ensure_ascii=False)[:500]}")
            finally:
                state_mod.diff = probes[name]._orig
        if with_js_wire:
            for functions, context in seq:
                doc = F.document(functions, context)
                sent = json.loads(json.dumps(doc))
                js["documents"] += 1
                arrived = js_wire(sent)
                if not same_values(sent, arrived):
                    js["value_changed"] += 1
                    js["example"] = js["example"] or F.canon(sent)[:300]
                elif F.canon(sent) != F.canon(arrived):
                    js["spelling_only"] += 1

    t0 = time.perf_counter()
    one()
    wall = time.perf_counter() - t0
    out: dict[str, Any] = {"sequences": sequences[0], "wall_s": round(wall, 1), "libraries": {}}
    for name in libs:
        s, p = stats[name], probes[name]
        ms = sorted(p.flush_ms) or [0.0]
        out["libraries"][name] = {
            "documents": s.documents, "refused_by_client": s.refused, "patches": s.patches,
            "divergences": len(divergences[name]),
            "first_divergence": divergences[name][0] if divergences[name] else None,
            "raw_make_patch_wrong": p.raw_bad, "ops": dict(sorted(s.ops.items())),
            "wire_bytes_mean": round(s.wire_bytes / max(1, s.patches)),
            "diff_ms_p50": round(statistics.median(ms), 3), "diff_ms_p99": round(ms[int(len(ms) * 0.99) - 1], 3),
            "diff_ms_max": round(ms[-1], 3),
        }
    if with_js_wire:
        out["js_wire"] = js
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--documents", type=int, default=10_000, help="documents per diff library (default 10,000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--js-wire", action="store_true", help="also measure the browser bridge's JSON number round trip")
    args = ap.parse_args(argv)
    result = run(args.documents, args.seed, args.js_wire)
    print(json.dumps(result, indent=2, ensure_ascii=False))
    short = [lib for lib, r in result["libraries"].items() if r["documents"] < args.documents]
    if short:
        print(f"warning: fewer than {args.documents} documents for {short}", file=sys.stderr)
    save("fuzz", result)
    return 1 if any(r["divergences"] for r in result["libraries"].values()) or short else 0


if __name__ == "__main__":
    sys.exit(main())

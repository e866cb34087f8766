"""Lighthouse on a plain host page: without the widget, with the default tag, with ``data-boot="intent"`` / ``"ready"``.

What a site owner sees after adding the widget. Each variant is a small static host page (its own origin); the
widget's tag loads the loader from a local relay (``python -m widget.relay``, an app allowed for that origin).
Lighthouse 12 (npm ``lighthouse``; 13 needs Node 22) runs in its own folder, installed on first use with npm
(``$AUTOPILOT_LIGHTHOUSE_DIR``, default ``~/.cache/autopilot-widget/lighthouse``), never into the project; it
drives /usr/bin/chromium with the project's flags. Default: mobile, simulated throttling (Lighthouse's
defaults); ``--unthrottled`` measures with the machine's own CPU and network (``--throttling-method=provided``).

Prints per variant the medians of N runs: performance score, total blocking time, time to interactive,
main-thread work, transfer, best-practices score, and the deprecation warnings Lighthouse found (with the file
that triggered each).

``default-3p`` is the default tag with the relay on another site (see ``OTHER_SITE``); ``--dist`` serves another
build output folder (an older commit's build, to compare).

    python bench/lighthouse.py [-n 3] [--variants plain,default,intent,ready,default-3p] [--unthrottled] [--dist DIR]
"""

from __future__ import annotations

import argparse
import datetime
import http.server
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support import CHROMIUM, CHROMIUM_ARGS, free_port, start_relay  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from results import save, stats  # noqa: E402

LIGHTHOUSE_VERSION = "12"
LH_DIR = Path(os.environ.get("AUTOPILOT_LIGHTHOUSE_DIR") or Path.home() / ".cache" / "autopilot-widget" / "lighthouse")
APP = "lhbench"
VARIANTS = {"plain": None, "default": "", "intent": ' data-boot="intent"', "ready": ' data-boot="ready"',
            "default-3p": ""}
# The relay on another site than the page, as in most real deployments (a page on 127.0.0.1, the relay reached as
# localhost: Lighthouse counts its scripts as third-party). Every other variant has both on 127.0.0.1 (same site:
# the relay's scripts count as first-party, as when a site mounts the relay under its own domain).
OTHER_SITE = {"default-3p"}


def host_page(relay: str | None, attrs: str | None) -> str:
    """A plain host page; with ``attrs`` not None, the widget's tag with those extra attributes."""
    tag = "" if attrs is None else f'<script src="{relay}/widget/autopilot.js" data-app="{APP}"{attrs} defer></script>'
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>A host page</title>
<meta name="description" content="A plain host page for the widget's Lighthouse bench.">
<link rel="icon" href="data:,"></head><body><main><h1>A host page</h1>
<p>{'Some host content. ' * 60}</p></main>
{tag}
</body></html>"""


def lighthouse_cli() -> Path:
    """The Lighthouse CLI, installed into its own folder on first use."""
    cli = LH_DIR / "node_modules" / "lighthouse" / "cli" / "index.js"
    if not cli.is_file():
        LH_DIR.mkdir(parents=True, exist_ok=True)
        print(f"installing lighthouse@{LIGHTHOUSE_VERSION} into {LH_DIR} ...", file=sys.stderr)
        subprocess.run(["npm", "install", "--prefix", str(LH_DIR), "--no-audit", "--no-fund",
                        f"lighthouse@{LIGHTHOUSE_VERSION}"], check=True, stdout=sys.stderr)
    return cli


class Pages:
    """A tiny static server for the host pages (their own origin, as on a real site)."""

    def __init__(self) -> None:
        self.pages: dict[str, bytes] = {}
        pages = self.pages

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = pages.get(self.path.split("?")[0])
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: Any) -> None:
                pass

        self.port = free_port()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.origin = f"http://127.0.0.1:{self.port}"

    def add(self, path: str, html: str) -> str:
        self.pages[path] = html.encode()
        return self.origin + path

    def close(self) -> None:
        self.server.shutdown()


def run_lighthouse(cli: Path, url: str, out: Path, unthrottled: bool) -> dict[str, Any]:
    """One Lighthouse run of ``url``; the figures of its report."""
    cmd = ["node", str(cli), url, "--output=json", f"--output-path={out}", "--quiet",
           "--only-categories=performance,best-practices", f"--chrome-flags={' '.join(CHROMIUM_ARGS)}"]
    if unthrottled:
        cmd.append("--throttling-method=provided")
    subprocess.run(cmd, check=True, env={**os.environ, "CHROME_PATH": CHROMIUM}, timeout=600)
    lhr = json.loads(out.read_text())
    audits = lhr["audits"]
    deprecations = []
    for item in (audits.get("deprecations", {}).get("details") or {}).get("items", []):
        src = item.get("source") or {}
        deprecations.append(f"{item.get('value', '')} ({Path(str(src.get('url', ''))).name or 'page'})")
    maps = []  # scripts the source-map audit complains about (it weighs 0 in the score)
    for item in (audits.get("valid-source-maps", {}).get("details") or {}).get("items", []):
        if (item.get("subItems") or {}).get("items"):
            maps.append(Path(str(item.get("scriptUrl", ""))).name)
    errors = []
    for item in (audits.get("errors-in-console", {}).get("details") or {}).get("items", []):
        errors.append(str(item.get("description", ""))[:120])
    return {
        "performance": lhr["categories"]["performance"]["score"] * 100,
        "best_practices": lhr["categories"]["best-practices"]["score"] * 100,
        "tbt": audits["total-blocking-time"]["numericValue"],
        "tti": audits["interactive"]["numericValue"],
        "mainthread": audits["mainthread-work-breakdown"]["numericValue"],
        "bytes": audits["total-byte-weight"]["numericValue"],
        "deprecations": deprecations,
        "console_errors": errors,
        "source_maps": maps,
        "failed_best_practices": sorted(
            k for k, a in audits.items() if a.get("score") is not None and a["score"] < 1
            and k in {r["id"] for r in lhr["categories"]["best-practices"]["auditRefs"]}),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=3, help="runs per variant (median)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated: " + ", ".join(VARIANTS))
    ap.add_argument("--unthrottled", action="store_true", help="the machine's CPU and network, no simulation")
    ap.add_argument("--dist", help="the build output folder the relay serves (default: widget/_dist)")
    args = ap.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        ap.error(f"unknown variants: {', '.join(sorted(unknown))}")
    cli = lighthouse_cli()
    work = Path(tempfile.mkdtemp(prefix="bench-lighthouse-"))
    pages = Pages()
    relay = start_relay(work, extra=["--demo-chunk-delay-ms", "0", "--app", f"{APP}={pages.origin}"]
                        + (["--dist", args.dist] if args.dist else []))
    rows: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    try:
        other_site = relay.url.replace("//127.0.0.1:", "//localhost:")
        urls = {v: pages.add(f"/{v}.html", host_page(other_site if v in OTHER_SITE else relay.url, VARIANTS[v]))
                for v in variants}
        for i in range(args.n):  # interleaved
            for v in variants[i % len(variants):] + variants[:i % len(variants)]:
                rows[v].append(run_lighthouse(cli, urls[v], work / f"{v}-{i}.json", args.unthrottled))
    finally:
        relay.stop()
        pages.close()
        shutil.rmtree(work, ignore_errors=True)
    version = subprocess.run(["node", str(cli), "--version"], capture_output=True, text=True).stdout.strip()
    load = os.getloadavg()
    print(f"# bench/lighthouse.py  {datetime.datetime.now():%Y-%m-%d %H:%M}  {platform.machine()} {os.cpu_count()} "
          f"cores  load {load[0]:.1f} {load[1]:.1f}  N={args.n}  lighthouse {version}  "
          f"{'unthrottled (provided)' if args.unthrottled else 'mobile, simulated throttling'}  medians (min-max)")
    cols = [("performance", "performance", 1, ""), ("tbt", "TBT", 1, " ms"), ("tti", "interactive", 1e-3, " s"),
            ("mainthread", "main-thread work", 1e-3, " s"), ("bytes", "transfer", 1 / 1024, " KiB"),
            ("best_practices", "best practices", 1, "")]

    def cell(v: str, key: str, scale: float, unit: str) -> str:
        vals = [r[key] * scale for r in rows[v]]
        nd = 1 if unit == " s" else 0
        return f"{statistics.median(vals):.{nd}f}{unit} ({min(vals):.{nd}f}-{max(vals):.{nd}f})"

    print(f"{'variant':10} | " + " | ".join(f"{label:22}" for _, label, _, _ in cols))
    for v in variants:
        print(f"{v:10} | " + " | ".join(f"{cell(v, *c[0:1], *c[2:]):22}" for c in cols))
    for v in variants:
        deps = sorted({d for r in rows[v] for d in r["deprecations"]})
        failed = sorted({a for r in rows[v] for a in r["failed_best_practices"]})
        print(f"{v}: best-practices audits not passed: {', '.join(failed) or 'none'}")
        for d in deps:
            print(f"  deprecation: {d}")
        for m in sorted({m for r in rows[v] for m in r["source_maps"]}):
            print(f"  source map missing or invalid: {m}")
        for e in sorted({e for r in rows[v] for e in r["console_errors"]}):
            print(f"  console error: {e}")
    save("lighthouse", {"n": args.n, "lighthouse": version, "unthrottled": args.unthrottled, "dist": args.dist,
                        "medians": {v: {key: stats(r[key] for r in rows[v])["median"] for key, *_ in cols}
                                    for v in variants}, "runs": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())

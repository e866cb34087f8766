"""``python -m widget.conformance --relay URL --app ID``: run the suite, one line per flow; exit 0 when every flow
passed, 1 when one failed, 2 when none failed but one was skipped (a skipped flow is never a pass)."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
import time

import aiohttp

from . import FLOWS, Options, run_suite

#: How long the restarted relay may take to answer ``/readyz`` 200.
RESTART_READY_S = 60.0


async def restart_by_command(command: str, relays: list[str]) -> None:
    """Run ``command`` (a shell command), then wait until every relay answers ``/readyz`` with 200."""
    proc = await asyncio.create_subprocess_shell(command)
    if await proc.wait() != 0:
        raise RuntimeError(f"--restart-command exited with {proc.returncode}")
    deadline = time.monotonic() + RESTART_READY_S
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
        for base in relays:
            while True:
                try:
                    async with http.get(base.rstrip("/") + "/readyz") as r:
                        if r.status == 200:
                            break
                except (aiohttp.ClientError, TimeoutError):
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{base} did not answer /readyz 200 within {RESTART_READY_S:g} s of the restart")
                await asyncio.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    """The command line; the exit status (0: every flow passed)."""
    ap = argparse.ArgumentParser(prog="python -m widget.conformance", description=__doc__)
    ap.add_argument(
        "--relay",
        action="append",
        required=True,
        help="the relay's base URL (repeat for several processes of one deployment)",
    )
    ap.add_argument("--app", required=True, help="an app whose model is the demo model")
    ap.add_argument("--origin", help="an allowed Origin of the app (default: the relay's own origin)")
    ap.add_argument("--secret", help="the app's secret (creates conversations as a site's backend)")
    ap.add_argument("--ask-app", help="an app with the ask-user preset on (the ask_user flow is skipped without)")
    ap.add_argument("--ask-secret", help="that app's secret")
    ap.add_argument("--docs-app", help="an app with a docs index (the sources and uncited flows are skipped without)")
    ap.add_argument("--docs-secret", help="that app's secret")
    ap.add_argument("--docs-question", default=Options.docs_question,
                    help=f"a question the docs app's documentation answers (default {Options.docs_question!r})")
    ap.add_argument("--call-timeout", type=float, default=30.0, help="the relay's function_call_timeout_s (default 30)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for any one packet (default 10)")
    ap.add_argument(
        "--restart-command",
        help="a shell command that stops the relay with SIGTERM and starts it again on the same store (the "
        "rolling_deploy flow is skipped without; the relay's drain_timeout_s must be below its call timeout)",
    )
    ap.add_argument("--only", action="append", choices=sorted(FLOWS), help="run only this flow (repeatable)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)
    options = Options(call_timeout_s=args.call_timeout, ask_app=args.ask_app, ask_secret=args.ask_secret,
                      docs_app=args.docs_app, docs_secret=args.docs_secret, docs_question=args.docs_question)
    if args.restart_command:
        options.restart = functools.partial(restart_by_command, args.restart_command, args.relay)
    results = asyncio.run(
        run_suite(
            args.relay,
            args.app,
            origin=args.origin,
            secret=args.secret,
            options=options,
            only=args.only,
            timeout=args.timeout,
        )
    )
    if args.json:
        print(json.dumps([r.__dict__ for r in results], indent=2))
    else:
        for r in results:
            mark = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}[r.outcome]
            print(f"{mark} {r.name:<18} {r.seconds:6.2f} s  {r.summary}" + (f"\n     {r.detail}" if r.detail else ""))
        skipped = sum(r.outcome == "skipped" for r in results)
        print(f"{sum(r.ok for r in results)}/{len(results)} flows passed" + (f", {skipped} skipped" if skipped else ""))
    if any(r.outcome == "failed" for r in results):
        return 1
    return 0 if all(r.ok for r in results) else 2  # 2: nothing failed, but not everything was checked


if __name__ == "__main__":
    sys.exit(main())

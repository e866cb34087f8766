"""``python -m widget.conformance --relay URL --app ID``: run the suite, one line per flow, exit 1 on a failure."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from . import FLOWS, Options, run_suite


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
    ap.add_argument("--call-timeout", type=float, default=30.0, help="the relay's function_call_timeout_s (default 30)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for any one packet (default 10)")
    ap.add_argument("--only", action="append", choices=sorted(FLOWS), help="run only this flow (repeatable)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)
    options = Options(call_timeout_s=args.call_timeout, ask_app=args.ask_app, ask_secret=args.ask_secret)
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
            mark = "PASS" if r.ok else "FAIL"
            print(f"{mark} {r.name:<18} {r.seconds:6.2f} s  {r.summary}" + (f"\n     {r.detail}" if r.detail else ""))
        print(f"{sum(r.ok for r in results)}/{len(results)} flows passed")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

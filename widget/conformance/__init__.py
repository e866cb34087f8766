"""A conformance suite for relays of protocol v1: every flow of docs/protocol.md, packet by packet.

Run it against any relay whose app answers with the demo model (docs/demo-model.md)::

    python -m widget.conformance --relay http://127.0.0.1:8000 --app demo

or from Python: ``await run_suite(["http://..."], app="demo")`` returns one ``Result`` per flow. Several
``--relay`` URLs name processes of one deployment (sharing a store): sockets of one conversation are spread
over them. Server side only (it needs python-socketio and aiohttp).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from . import flows_deploy, flows_docs, flows_more, flows_rules  # noqa: F401 - register their flows
from .flows import FLOWS, Options
from .peer import Mismatch, Relay, Skipped

#: A flow passed, failed (``detail``: the first mismatch), or was skipped (``detail``: what it needs to run).
Outcome = Literal["passed", "failed", "skipped"]


@dataclass
class Result:
    """One flow's ``outcome`` (``ok`` only when it passed; a skipped flow is not ``ok``), ``detail`` (the first
    mismatch, or why it was skipped) and the ``seconds`` it took."""

    name: str
    summary: str
    ok: bool
    detail: str
    seconds: float
    outcome: Outcome = "passed"


async def run_flow(name: str, relay: Relay, options: Options) -> Result:
    """Run one flow; a mismatch or an error is a failed ``Result``, never an exception."""
    fn, summary = FLOWS[name]
    t0 = time.monotonic()
    try:
        note = await fn(relay, options)
        return Result(name, summary, True, note or "", time.monotonic() - t0)
    except Skipped as exc:
        return Result(name, summary, False, f"skipped: {exc}", time.monotonic() - t0, "skipped")
    except Mismatch as exc:
        return Result(name, summary, False, str(exc), time.monotonic() - t0, "failed")
    except Exception as exc:  # noqa: BLE001 - a broken relay may make anything fail; report it as that flow's
        return Result(name, summary, False, f"{type(exc).__name__}: {exc}", time.monotonic() - t0, "failed")


async def run_suite(
    relays: list[str],
    app: str,
    *,
    origin: str | None = None,
    secret: str | None = None,
    options: Options | None = None,
    only: Iterable[str] | None = None,
    timeout: float = 10.0,
) -> list[Result]:
    """Run the flows (all, or those named in ``only``) against the relay at ``relays``; one ``Result`` each."""
    relay = Relay(list(relays), app, origin=origin, secret=secret, timeout=timeout)
    try:
        names = list(only) if only is not None else list(FLOWS)
        return [await run_flow(n, relay, options or Options()) for n in names]
    finally:
        await relay.close()


__all__ = ["FLOWS", "Mismatch", "Options", "Outcome", "Result", "Skipped", "run_flow", "run_suite"]

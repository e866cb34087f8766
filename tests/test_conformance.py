"""The conformance suite (widget.conformance) against our relay on SQLite: every flow passes, packet by packet."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from docs_double import SITE, MemoryDocs
from relay_helpers import ASK_SECRET, SHOP_SECRET, launch

from widget.conformance import FLOWS, Options, run_suite

pytestmark = pytest.mark.relay

ROOT = Path(__file__).resolve().parent.parent


@pytest_asyncio.fixture(scope="module")
async def relay(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    """Our relay (demo model, 0.6 s call timeout, an ask-user app), in this test's loop."""
    # A call timeout long enough for the run_flag flow's steps on a loaded machine, short for the timeout flow.
    handle = await launch(tmp_path_factory.mktemp("conformance"), function_call_timeout_s=3.0)
    handle.hub.docs = MemoryDocs({"shop": list(SITE)})  # the shop app answers from docs (demo model)
    yield handle
    await handle.stop()


def options(relay: Any) -> Options:
    return Options(call_timeout_s=relay.config.function_call_timeout_s, ask_app="ask", ask_secret=ASK_SECRET,
                   docs_app="shop", docs_secret=SHOP_SECRET, docs_question="How do I change the bar's colours?")


#: Flows that need more than a relay in this process (rolling_deploy restarts it: tests/test_edges_drain.py runs it).
ELSEWHERE = {"rolling_deploy"}


@pytest.mark.parametrize("name", [n for n in FLOWS if n not in ELSEWHERE])
async def test_flow(relay: Any, name: str) -> None:
    [result] = await run_suite([relay.url], "demo", options=options(relay), only=[name])
    assert result.ok, f"{name}: {result.detail}"
    assert result.detail == ""  # nothing skipped against our relay


async def test_a_deviation_fails_its_flow(relay: Any, monkeypatch: pytest.MonkeyPatch, checked_traffic: Any) -> None:
    """The suite is not vacuous: a relay whose join ack lacks ``client_id`` fails the join flow (and the schema
    check of the traffic sees it too)."""
    from widget.relay.hub import joining

    original = joining.P.ok

    def ok_without_client_id(**fields: Any) -> dict[str, Any]:
        fields.pop("client_id", None)
        return original(**fields)

    monkeypatch.setattr(joining.P, "ok", ok_without_client_id)
    [result] = await run_suite([relay.url], "demo", options=options(relay), only=["join"])
    assert not result.ok and "join ack" in result.detail
    assert checked_traffic.problems and all("'client_id' is a required property" in p for p in checked_traffic.problems)
    checked_traffic.problems.clear()


def test_command_line(tmp_path: Path) -> None:
    """``python -m widget.conformance`` against a relay process: one line per flow, exit status 0."""
    sys.path.insert(0, str(ROOT / "tests"))
    from support import free_port, start_relay

    port = free_port()
    server = start_relay(
        tmp_path, port=port, extra=["--demo-chunk-delay-ms", "0", "--app", f"demo=http://127.0.0.1:{port}"]
    )
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "widget.conformance",
                "--relay",
                server.url,
                "--app",
                "demo",
                "--only",
                "http",
                "--only",
                "message_turn",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert "PASS http" in out.stdout and "2/2 flows passed" in out.stdout
    finally:
        server.stop()

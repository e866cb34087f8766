"""The conformance suite against the scale-out deployment: two relay processes on one PostgreSQL and one Redis,
the sockets of each conversation spread over both (every flow passes as against one process)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from relay_helpers import RelayProcess, pg_server, redis_server

from widget.conformance import FLOWS, Options, run_suite

pytestmark = pytest.mark.relay

ORIGIN = "https://conformance.invalid"
ASK_SECRET = "conformance-ask-secret-0123456789"
DOCS_SECRET = "conformance-docs-secret-0123456789"
#: The docs app's documentation (indexed into the shared PostgreSQL before the relays start).
DOCS_PAGE = "# Theming\n\n## Colours\n\nThe bar's colours come from CSS custom properties on the host element.\n"
CONFIG = f"""
function_call_timeout_s = 3.0
tool_call_timeout_s = 1.0
create_rate_per_minute = 10000
message_rate_per_minute = 10000
join_rate_per_minute = 10000

[apps.demo]
allowed_origins = ["{ORIGIN}"]

[apps.ask]
ask_user = true
secret = "{ASK_SECRET}"

[apps.docs]
secret = "{DOCS_SECRET}"

[models.demo]
adapter = "demo"
chunk_delay_ms = 2
"""


@pytest.fixture(scope="module")
def relays(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two relay processes sharing a fresh PostgreSQL database and a Redis channel."""
    workdir = tmp_path_factory.mktemp("conformance-scale")
    config = workdir / "relay.toml"
    config.write_text(CONFIG)
    dsn = pg_server().database("conf_" + uuid.uuid4().hex[:8])
    (workdir / "site").mkdir()
    (workdir / "site" / "theming.md").write_text(DOCS_PAGE)
    subprocess.run([sys.executable, "-m", "widget.relay", "index", "--app", "docs", "--database-url", dsn,
                    f"{workdir / 'site'}=/docs/"], check=True, capture_output=True, timeout=120)
    redis = redis_server()
    extra = ["--config", str(config), "--log-level", "warning", "--drain-timeout", "0.5"]
    procs = [RelayProcess(workdir, database_url=dsn, redis_url=redis.url, extra=extra) for _ in range(2)]
    PROCS[:] = procs
    yield [p.url for p in procs]
    for p in procs:
        p.stop()


#: The relay processes of the module's deployment (``rolling_deploy`` restarts them).
PROCS: list[RelayProcess] = []


async def restart_all() -> None:
    """A deploy: every process gets SIGTERM (each drains, 0.5 s) and starts again on its port. (One at a time, the
    surviving process holding the turn would time the call out, 3 s, before its own turn came: that is the protocol,
    but not what the flow checks.)"""
    for p in PROCS:
        assert p.proc is not None
        p.proc.send_signal(signal.SIGTERM)
    for p in PROCS:
        assert p.proc is not None
        await asyncio.to_thread(p.proc.wait, 30)
    for p in PROCS:
        await asyncio.to_thread(p.start)


@pytest.mark.parametrize("name", list(FLOWS))
async def test_flow_on_two_processes(relays: list[str], name: str) -> None:
    [result] = await run_suite(
        relays,
        "demo",
        origin=ORIGIN,
        only=[name],
        options=Options(call_timeout_s=3.0, ask_app="ask", ask_secret=ASK_SECRET, docs_app="docs",
                        docs_secret=DOCS_SECRET, docs_question="How do I change the colours?",
                        restart=restart_all),
    )
    assert result.ok, f"{name}: {result.detail}"


def test_the_deployment_has_two_processes(relays: list[str]) -> None:
    assert len(set(relays)) == 2

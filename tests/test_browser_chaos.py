"""Chaos, the CI subset: the relay is killed and restarted, and WebSockets are cut, while function calls are in
flight. The widget comes back, no call runs twice, no response is lost or applied twice, no event is missed,
and a reload shows the same conversation with its call timings. ``bench/chaos.py`` runs the long version.
"""

from __future__ import annotations

import asyncio
import json
import os
import re

import pytest
from support import py_eval, start_relay, wait_mark

from widget.relay.storage import SQLiteStore

pytestmark = pytest.mark.browser

PAGE = """<!doctype html><html><head><link rel="icon" href="data:,"><title>chaos</title></head><body>
<script type="autopilot-python">
import asyncio
from widget import get_client
client = get_client()
RUNS = {}
STATES = []
client.on("connectionStateChanged", lambda p: STATES.append(p["state"]))

@client.function
async def slow_step(i: int) -> dict:
    \"\"\"A step that takes a while, so the network can fail while it runs.\"\"\"
    RUNS[i] = RUNS.get(i, 0) + 1
    await asyncio.sleep(0.4)
    client.update_context({"last_step": i})
    return {"step": i}
</script>
<script src="/widget/autopilot.js" data-relay="{relay}" data-app="demo" data-boot="eager"></script>
</body></html>"""

ROUNDS = int(os.environ.get("CHAOS_ROUNDS", "5"))

STATE = """
from widget import get_client
c = get_client()
{"state": c.connection_state, "seq": c.seq.last_seq, "streaming": c.is_streaming,
 "history": [[h["id"], h["status"], h["respondedAt"] is not None] for h in c.get_function_call_history()],
 "ids": [m.get("id") for m in c.messages], "outbox": sorted(c.pending_responses)}
"""


PRELUDE = (
    "from widget import get_client\nfrom widget.browser import PAGE_NAMESPACE\n"
    "RUNS = PAGE_NAMESPACE['RUNS']\nSTATES = PAGE_NAMESPACE['STATES']\n"
)


async def wait_py(page, expr: str, timeout_s: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        if await py_eval(page, PRELUDE + expr):
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {expr!r}: {await py_eval(page, STATE)}")
        await asyncio.sleep(0.1)


async def test_relay_restarts_and_socket_cuts_with_calls_in_flight(browser, page_server, tmp_path):
    # --drain-timeout 0: a restart stops at once (the turn in flight is interrupted), as a relay that dies does.
    relay = start_relay(tmp_path, extra=["--app", f"demo={page_server.origin}", "--demo-chunk-delay-ms", "5",
                                         "--drain-timeout", "0"])
    sockets: list = []
    try:
        url = page_server.add("/__test__/chaos.html", PAGE.replace("{relay}", relay.url))
        ctx = await browser.new_context()
        page = await ctx.new_page()

        def route(ws):
            server = ws.connect_to_server()
            sockets.append((ws, server))

        await page.route_web_socket(re.compile(r".*/socket\.io/.*"), route)
        await page.goto(url)
        await wait_mark(page, "autopilot:joined")
        conn = "#autopilot-bar-host >> .connection"
        for step in range(ROUNDS):
            send = f"get_client().send_message('slow_step {{\"i\": {step}}}')"
            await py_eval(page, f"import asyncio\nfrom widget import get_client\nasyncio.ensure_future({send})\nTrue")
            await wait_py(page, f"{step} in RUNS")  # the call is running in the page now
            if step % 2 == 0:
                relay.restart()  # the relay dies mid-call and comes back on the same port and database
            else:
                for ws, server in sockets:  # the network drops both ways
                    await ws.close()
                    await server.close()
            await page.wait_for_selector(f"{conn}[data-state='connected']", state="attached", timeout=20000)
            await wait_py(page, "get_client().connection_state == 'connected' and not get_client().pending_responses "
                                "and not get_client().is_streaming", 30)
            if step % 2 == 0:
                # The turn died with the relay: it is failed; Retry goes on without re-running finished work.
                await wait_py(page, "any(m.get('role') == 'error' for m in get_client().messages[-2:])", 20)
        runs = await py_eval(page, PRELUDE + "RUNS")
        states = await py_eval(page, PRELUDE + "STATES")
        assert states.count("reconnecting") >= ROUNDS and states[-1] == "connected", states  # the UI was told
        assert runs == {str(i): 1 for i in range(ROUNDS)}, runs  # no call ran twice
        state = await py_eval(page, STATE)
        conv_id = await py_eval(page, "get_client().conversation['id']")
        # The relay recorded each step's response exactly once, and the page's event log has no gap.
        store = SQLiteStore(str(relay.db))
        await store.open()
        try:
            stored, messages = await store.snapshot(conv_id)
        finally:
            await store.close()
        tool = [m for m in messages if m.get("role") == "tool" and m.get("name") == "slow_step"]
        steps = [json.dumps(m.get("result")) for m in tool if m.get("status") == "success"]
        assert len(steps) == len(set(steps)), steps  # never applied twice
        # Cut sockets (odd steps): the turn went on on the relay and completed with the resent response.
        done = {json.loads(x)["step"] for x in steps}
        missing = set(range(1, ROUNDS, 2)) - done
        if missing:
            dump = tmp_path.parent.parent / f"chaos-{os.getpid()}"
            dump.mkdir(exist_ok=True)
            (dump / "messages.json").write_text(json.dumps(messages, indent=1, default=str))
            (dump / "relay.log").write_text(relay.log.read_text())
            print("conversation dumped to", dump)
        assert not missing, (missing, [m for m in messages if m.get("role") in ("tool", "error")
                                       and m.get("status") != "success"][-6:])
        assert state["seq"] == stored["seq"]
        # A reload shows the same conversation, with the call timings kept by the relay.
        await page.reload()
        await page.hover("#autopilot-toggle-host >> button.toggle")  # a later page view starts on intent
        await wait_mark(page, "autopilot:joined")
        after = await py_eval(page, STATE)
        assert after["ids"] == state["ids"]
        timings = await py_eval(page, "[m.get('total_ms') for m in get_client().messages if m.get('role') == 'tool' "
                                      "and m.get('status') == 'success']")
        assert timings and all(t is not None for t in timings)
        await ctx.close()
    finally:
        relay.stop()

"""Streaming cost (docs/performance.md): streamed events reach Python in batches, the bar renders streamed text at a
bounded cadence, and neither changes what is shown.

- ``BrowserTransport`` applies a ``__batch__`` from static/bridge.mjs event by event, in order (CPython, without a
  browser: tests/test_streaming.py).
- In Chromium, events arrive as WebSocket messages on the page's own socket.io connection (the whole real path:
  socket.io-client, bridge.mjs, the transport, the client): the first streamed event goes to Python at once, the
  ones right after it together, any other event after the ones waiting; every event is applied once, in order.
- The bar renders a fast stream ~10 times a second (less when renders are costly or the panel is closed), the end
  of the answer on the next frame, and the final DOM is ``sanitize(render_markdown(answer))``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from conftest import require_build
from support import open_page
from test_bar import BarPage, fixture_bar_relay, js_root, open_bar, py  # noqa: F401

pytestmark = pytest.mark.browser

#: The bridge's batch window (static/bridge.mjs STREAM_BATCH_MS), in seconds.
STREAM_BATCH_S = 0.1

#: Keeps every WebSocket the page opens, so a test can hand the socket.io connection synthetic messages.
CAPTURE_SOCKETS = """(() => {
  const Native = window.WebSocket;
  window.__sockets = [];
  window.WebSocket = class extends Native {
    constructor(...args) { super(...args); window.__sockets.push(this); }
  };
})();"""


def count_calls(marker: str) -> str:
    """Page Python that records, in ENTRIES, the start of each text the bridge hands to Python in one call carrying
    ``marker`` (each call json.loads its text once, in ``_on_event``). Only those calls count: the transport's other
    loads (an emit's acknowledgement, an HTTP answer) may land at any moment on a slow machine."""
    return f"""
import sys
import widget.transports.browser as tb
import json as _json
ENTRIES = []
class _CountingJson:
    dumps = staticmethod(_json.dumps)
    @staticmethod
    def loads(text):
        if sys._getframe(1).f_code.co_name == "_on_event" and text is not None and {marker!r} in text:
            ENTRIES.append(text[:90])
        return _json.loads(text)
tb.json = _CountingJson
"""

#: Delivers Socket.IO event frames as messages of the page's socket.io WebSocket, ``gap`` ms apart (0: in one go);
#: returns the ms from the first frame to the last (a loaded machine stretches the gaps).
DELIVER = """async ({frames, gap}) => {
  const ws = window.__sockets.find((s) => s.readyState === 1 && s.url.includes("EIO="));
  const t0 = performance.now();
  let last = t0;
  for (const data of frames) {
    last = performance.now();
    ws.onmessage(new MessageEvent("message", {data}));
    if (gap) await new Promise((r) => setTimeout(r, gap));
  }
  return last - t0;
}"""


def frames(events: list[tuple[str, dict[str, Any]]], first_seq: int) -> list[str]:
    """Socket.IO event frames (``42[name, payload]``) with ``seq`` numbered from ``first_seq``."""
    return ["42" + json.dumps([name, {**payload, "seq": first_seq + i}]) for i, (name, payload) in enumerate(events)]


@pytest_asyncio.fixture(scope="module")
async def socket_page(browser: Any, bar_relay: Any) -> AsyncIterator[BarPage]:
    """The demo page with its WebSockets captured, booted and joined, once per module."""
    require_build()
    ctx = await browser.new_context()
    await ctx.add_init_script(CAPTURE_SOCKETS)
    ctx, page, log = await open_page(browser, bar_relay.url + "/", context=ctx)
    yield BarPage(context=ctx, page=page, log=log, relay=bar_relay)
    await ctx.close()


# --------------------------------------------------------------------------------------------------------------
# Chromium: the real path


async def test_streamed_events_reach_python_in_batches_in_order(socket_page: BarPage) -> None:
    page = socket_page.page
    await open_bar(page)
    # Count calls into Python from the bridge (each one json.loads its text once) and record every applied event.
    first = await py(page, count_calls("batch-1") + """
APPLIED = []
_inner = client.transport._handler
def _recording(name, data):
    if isinstance(data, dict) and "seq" in data:
        APPLIED.append([name, data["seq"]])
    _inner(name, data)
client.transport.set_handler(_recording)
client.seq.last_seq + 1""")
    text = "".join(f"Word{i} " for i in range(40)) + "\n\n**done**"
    pieces = [text[i:i + 9] for i in range(0, len(text), 9)]
    # A short answer first, so the counted one's first call does not pay for the first render (a call that takes
    # longer than the batch window would rightly let the next delta go alone).
    warm: list[tuple[str, dict[str, Any]]] = [
        ("completion.started", {"turn_id": "t-warm", "message_id": "warm-1"}),
        ("completion_stream", {"message_id": "warm-1", "delta": "Warm *up*"}),
        ("completion.ended", {"message": {"id": "warm-1", "role": "assistant", "content": "Warm *up*"},
                              "tool_messages": []}),
        ("completion.finished", {"turn_id": "t-warm", "status": "done"})]
    events = [("completion.started", {"turn_id": "t-batch-1", "message_id": "batch-1"})]
    events += [("completion_stream", {"message_id": "batch-1", "delta": p}) for p in pieces]
    tail = [("completion.ended", {"message": {"id": "batch-1", "role": "assistant", "content": text},
                                  "tool_messages": []}),
            ("completion.finished", {"turn_id": "t-batch-1", "status": "done"})]
    all_frames = frames(warm + events + tail, first)
    try:
        await page.evaluate(DELIVER, {"frames": all_frames[:len(warm)], "gap": 0})
        await page.wait_for_function("() => !document.getElementById('autopilot-bar-host').shadowRoot"
                                     ".querySelector('[data-streaming=\"true\"]')")
        await asyncio.sleep(STREAM_BATCH_S * 1.5)  # a pause longer than the batch window: the next delta goes at once
        # The whole answer in one task. socket.io-client hands each decoded packet on in a microtask, so the bridge
        # sees them all after this task and before any timer: started and the first delta go at once, the other
        # deltas wait, the end hands them over (one call) before itself.
        await page.evaluate(DELIVER, {"frames": all_frames[len(warm):], "gap": 0})
        await page.wait_for_function("() => !document.getElementById('autopilot-bar-host').shadowRoot"
                                     ".querySelector('[data-streaming=\"true\"]')")
        state = await py(page, "[ENTRIES, APPLIED, client.seq.last_seq]")
    finally:
        await py(page, "tb.json = _json\nclient.transport.set_handler(_inner)\nTrue")
    entries, applied, last_seq = state
    # started, the first delta, one batch of all the other deltas, ended, finished
    assert len(entries) == 5, entries
    assert entries[2].startswith('[["completion_stream"') and entries[3].startswith('{"message"'), entries
    assert applied == [[name, first + i] for i, (name, _) in enumerate(warm + events + tail)]
    assert last_seq == first + len(warm) + len(events) + len(tail) - 1
    assert await js_root(page, "return r.querySelector('[data-key=\"batch-1\"] strong').textContent;") == "done"


async def test_a_slow_stream_goes_event_by_event_and_a_fast_one_in_batches(socket_page: BarPage) -> None:
    page = socket_page.page
    first = await py(page, count_calls("batch-2") + "client.seq.last_seq + 1")
    deltas = [("completion_stream", {"message_id": "batch-2", "delta": f"w{i} "}) for i in range(24)]
    start = [("completion.started", {"turn_id": "t-batch-2", "message_id": "batch-2"})]
    end = [("completion.finished", {"turn_id": "t-batch-2", "status": "done"})]
    all_frames = frames(start + deltas + end, first)
    try:
        await page.evaluate(DELIVER, {"frames": all_frames[:1], "gap": 0})
        # 4 deltas 130 ms apart (slower than a batch): each goes alone, at once.
        await page.evaluate(DELIVER, {"frames": all_frames[1:5], "gap": 130})
        slow = await py(page, "len(ENTRIES)")
        # 20 deltas 10 ms apart (200 ms): a handful of calls, not 20.
        spread = await page.evaluate(DELIVER, {"frames": all_frames[5:25], "gap": 10})
        await page.evaluate(DELIVER, {"frames": all_frames[25:], "gap": 0})
        fast = await py(page, "len(ENTRIES)") - slow - 1
        text = await py(page, "client.messages[-1]['content']")
    finally:
        await py(page, "tb.json = _json\nTrue")
    assert slow == 5
    # The first delta after the pause goes at once, then at most one call per 100 ms window the deltas spread over
    # (about 200 ms here; more on a loaded machine, whose timers fire late).
    assert 1 <= fast <= min(19, 2 + int(spread // 100)), (fast, spread)
    assert text == "".join(p["delta"] for _, p in deltas)


async def test_the_bar_renders_a_fast_stream_about_ten_times_a_second(socket_page: BarPage) -> None:
    page = socket_page.page
    await open_bar(page)
    result = await py(page, """
import asyncio, time
from widget.core.markdown import render_markdown
import autopilot_sanitize
B = bar.bar  # the Bar itself (``bar`` is the page's handle, which forwards reads only)
FRAMES = []
_flush = B.flush
def _timed_flush():
    FRAMES.append(time.monotonic())
    _flush()
B.flush = _timed_flush
def ev(name, payload):
    client._on_sequenced(name, {**payload, "seq": client.seq.last_seq + 1})
text = "## Fast\\n\\n" + " ".join(f"word{i}" for i in range(300)) + "\\n\\n- a\\n- b\\n"
step = 12
ev("completion.started", {"turn_id": "t-f", "message_id": "fast-1"})
t0 = time.monotonic()
for i in range(0, len(text), step):  # ~1 s at ~200 chunks a second
    ev("completion_stream", {"message_id": "fast-1", "delta": text[i:i + step]})
    await asyncio.sleep(0.005)
streamed = time.monotonic() - t0
during = len(FRAMES)
ev("completion.ended", {"message": {"id": "fast-1", "role": "assistant", "content": text}, "tool_messages": []})
ev("completion.finished", {"turn_id": "t-f", "status": "done"})
for _ in range(200):  # the end's render comes with the next animation frames (how soon is a bench's figure)
    if len(FRAMES) > during:
        break
    await asyncio.sleep(0.01)
del B.flush
view = B._views["fast-1"]
want = js.document.createElement("div")
autopilot_sanitize.setSafeHTML(want, render_markdown(text))
got = js.document.createElement("div")
got.innerHTML = view.stable.innerHTML + view.tail.innerHTML
[during, streamed, len(FRAMES) - during, want.innerHTML.replace("\\n", "") == got.innerHTML.replace("\\n", ""),
 B.stream_interval_ms]""")
    during, streamed, after, same, interval = result
    # At most one render per interval (100 ms, more when renders are costly) plus the first; at least a few.
    assert 2 <= during <= streamed * 1000 / 100 + 2, (during, streamed)
    assert after >= 1  # the end of the answer is rendered (not left for a next chunk that never comes)
    assert same
    assert 100 <= interval <= 250


async def test_the_streaming_interval_follows_the_render_cost_and_the_panel(socket_page: BarPage) -> None:
    page = socket_page.page
    await open_bar(page)
    got = await py(page, """
B = bar.bar
saved = B._stream_render_ms
out = []
for ms in (0.5, 2.5, 5.0, 50.0):
    B._stream_render_ms = ms
    out.append(B.stream_interval_ms)
B._stream_render_ms = 0.5
B.close()
out.append(B.stream_interval_ms)
B.open()
B._stream_render_ms = saved
out""")
    assert got == [100.0, 100.0, 200.0, 250.0, 250.0]

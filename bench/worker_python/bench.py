"""The Python side of the worker prototype (bench/worker_python.py): runs inside the dedicated worker.

Loaded after Pyodide started; it does what static/prewarm-worker.js does (the bundle on sys.path, the widget's
imports, a Markdown render), then offers the measurements the page's driver runs with ``await name(...)``.
Every result is JSON text.
"""

import asyncio
import json
import random
import sys

sys.path.insert(0, "/lib/autopilot/bundle.zip")
import widget.browser
import widget.ui.bar  # noqa: F401
from widget.core.markdown import StreamingRenderer, render_markdown

render_markdown("# t\n\n*a* **b** `c` [d](https://e.f/g)\n\n- h\n\n```\ni\n```\n")

import bench_proxy  # noqa: E402  (registered by worker.mjs)
from pyodide.ffi import can_run_sync, run_sync  # noqa: E402

client = None


async def connect(relay: str, app: str) -> str:
    """The widget's client, moved here: read the conversation, open the Socket.IO connection, join."""
    global client
    import autopilot_bridge

    from widget.client import AutopilotClient
    from widget.protocol import ClientEvent
    from widget.transports.browser import BrowserTransport

    client = AutopilotClient(BrowserTransport(autopilot_bridge), storage={})

    async def page_title(args, context):
        """A page function that reads the DOM: through the async proxy, so it has to await."""
        return await bench_proxy.dom("title", None)

    client.register_function("page_title", page_title, description="The page's title.")
    joined = asyncio.get_event_loop().create_future()
    client.on(ClientEvent.READY, lambda p: joined.done() or joined.set_result(bench_proxy.now()))
    await client.connect(relay_url=relay, app_id=app)
    return json.dumps({"joined": await asyncio.wait_for(joined, 30), "transport": "socket.io in the worker"})


async def call_page_function() -> str:
    """The reader asks; the relay's model calls page_title; the worker's function reads the page's title through
    the proxy; the answer finishes. Times from sending to the function's success and to the finished answer."""
    from widget.protocol import ClientEvent

    loop = asyncio.get_event_loop()
    success, finished = loop.create_future(), loop.create_future()
    client.on(ClientEvent.FUNCTION_SUCCESS,
              lambda p: success.done() or success.set_result((bench_proxy.now(), str(p.get("result")))))
    client.on("completion.finished",
              lambda p: success.done() and not finished.done() and finished.set_result(bench_proxy.now()))
    t = bench_proxy.now()
    await client.send_message("page_title")
    ok_at, payload = await asyncio.wait_for(success, 30)
    done_at = await asyncio.wait_for(finished, 30)
    return json.dumps({"to_function_success": ok_at - t, "to_finished": done_at - t, "result": payload[:200]})


async def rtt(mode: str, op: str, arg: object, n: int, gap_ms: float = 0) -> str:
    """``n`` DOM operations from Python, one after the other: ms each (Python's view, conversions included).
    mode: "async" (await the proxy), "jspi" (run_sync on it: looks synchronous), "sab" (Atomics.wait).
    ``gap_ms``: a random pause of up to that between calls (not timed), so that calls reach a busy page at
    random points of its tasks instead of in step with them."""
    if mode == "jspi" and not can_run_sync():
        return json.dumps({"error": "run_sync is not possible here (no JavaScript promise integration)"})
    times = []
    for _ in range(n):
        if gap_ms:
            await asyncio.sleep(random.uniform(0, gap_ms) / 1000)
        t = bench_proxy.now()
        if mode == "async":
            await bench_proxy.dom(op, arg)
        elif mode == "jspi":
            run_sync(bench_proxy.dom(op, arg))
        else:
            bench_proxy.domSync(op, arg)
        times.append(bench_proxy.now() - t)
    return json.dumps(times)


async def stream(text: str, chunks: int, every_s: float) -> str:
    """A streamed answer rendered here and applied by the page: ``chunks`` growing prefixes of ``text``, one
    every ``every_s``; each is fed to the bar's StreamingRenderer and its new HTML posted as one render op.
    Returns the worker's ms per chunk (Markdown → HTML)."""
    r = StreamingRenderer()
    times = []
    for i in range(1, chunks + 1):
        so_far = text if i == chunks else text[: len(text) * i // chunks]
        t = bench_proxy.now()
        r.feed(so_far)
        times.append(bench_proxy.now() - t)
        bench_proxy.render(r.appended, r.tail)
        await asyncio.sleep(every_s)
    return json.dumps(times)

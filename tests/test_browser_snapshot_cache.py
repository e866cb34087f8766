"""The stored snapshot: a tab's later page views restore the worker's started Python instead of starting it.

A tab's first start runs the pre-warm worker, which hands the page a memory snapshot of its Python and keeps a
gzip copy in the page origin's Cache Storage (one entry per relay root, tagged with the build). A later page view
of the tab, which would otherwise start Python on the page, restores that copy. A stale, corrupt or refused
entry means the usual start, and the entry goes; ``snapshotCache: false`` stores and reads nothing.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from conftest import require_build
from support import open_page, py_eval, wait_mark

TOGGLE = "#autopilot-toggle-host >> button.toggle"
ANSWERS = "#autopilot-bar-host >> .messages > .message.assistant"
MARKS = "() => performance.getEntriesByType('mark').map(m => m.name)"
CACHE, KEY_NAME = "autopilot-snapshot", "snapshot"

# A page function whose name must never reach the stored snapshot (page code runs after it is made).
PAGE_FN = "zq_page_fn_" + secrets.token_hex(4)

# The entry the page's origin holds for the relay: [build header, bytes header, compressed size] or null.
ENTRY = """async (key) => {
  const r = await (await caches.open('autopilot-snapshot')).match(key);
  if (!r) return null;
  return [r.headers.get('x-autopilot-build'), r.headers.get('x-autopilot-bytes'), (await r.arrayBuffer()).byteLength];
}"""

# The stored snapshot, decompressed, searched for each of the given strings (as UTF-8): which ones it holds.
FOUND_IN_ENTRY = """async ([key, needles]) => {
  const r = await (await caches.open('autopilot-snapshot')).match(key);
  const bytes = new Uint8Array(await new Response(r.body.pipeThrough(new DecompressionStream('gzip'))).arrayBuffer());
  const found = [];
  for (const n of needles) {
    const nb = new TextEncoder().encode(n);
    outer: for (let i = bytes.indexOf(nb[0]); i !== -1; i = bytes.indexOf(nb[0], i + 1)) {
      for (let j = 1; j < nb.length; j++) if (bytes[i + j] !== nb[j]) continue outer;
      found.push(n); break;
    }
  }
  return found;
}"""

# The snapshot bytes Pyodide's kept options still hold after the start (null: none).
RETAINED = "async () => (await window.Autopilot.pyodide._api.config._loadSnapshot) || null"

# Replace the entry with given bytes (gzip-compressed first when asked), tagged as the current build.
PUT_ENTRY = """async ([key, build, kind]) => {
  let body, size;
  if (kind === 'not-gzip') { body = new Uint8Array(4096).fill(7); size = 31457408; }
  else if (kind === 'truncated') {
    const old = await (await caches.open('autopilot-snapshot')).match(key);
    const whole = new Uint8Array(await old.arrayBuffer());
    body = whole.slice(0, whole.length >> 1); size = Number(old.headers.get('x-autopilot-bytes'));
  } else { // gzip of bytes Python's restore refuses (no snapshot header), the right length
    const raw = new Uint8Array(1 << 20).fill(3);
    const gz = new Blob([raw]).stream().pipeThrough(new CompressionStream('gzip'));
    body = new Uint8Array(await new Response(gz).arrayBuffer());
    size = raw.length;
  }
  await (await caches.open('autopilot-snapshot')).put(key, new Response(body,
    {headers: {'x-autopilot-build': build, 'x-autopilot-bytes': String(size)}}));
}"""


def site_page(page_server: Any, relay: Any, n: int, attrs: str = "") -> str:
    """Page ``n`` of a site on its own origin, with the default tag (idle boot) and a page function."""
    fn = (f'<script type="autopilot-python">\nfrom widget import get_client\n\n@get_client().function\n'
          f'def {PAGE_FN}() -> str:\n    """A page function."""\n    return "ok"\n</script>')
    html = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
            f"<title>site {n}</title></head><body><h1>Page {n}</h1>{fn}"
            f'<script src="{relay.url}/widget/autopilot.js" data-app="demo" {attrs} defer></script></body></html>')
    return page_server.add(f"/__snapcache__/{n}{'-off' if attrs else ''}.html", html)


def plain_page(page_server: Any) -> str:
    """A page of the same origin without the widget (to prepare its Cache Storage)."""
    return page_server.add("/__snapcache__/plain.html", "<!doctype html><title>plain</title><p>plain</p>")


def entry_key(relay: Any) -> str:
    return f"{relay.url}/widget/{KEY_NAME}"


async def later_view(page: Any, url: str) -> list[str]:
    """A later page view of the tab: the reader's hover starts it; the boot marks once joined."""
    await page.goto(url)
    await page.hover(TOGGLE)
    await wait_mark(page, "autopilot:joined")
    return await page.evaluate(MARKS)


async def a_turn_answers(page: Any) -> str:
    """Send a unique message and wait for the answer that echoes it; the message."""
    token = "snap-" + secrets.token_hex(4)
    assert await page.evaluate("t => window.Autopilot.send(t)", token) is True
    await page.locator(ANSWERS).filter(has_text=token).first.wait_for(state="attached", timeout=30_000)
    return token


async def test_a_later_view_restores_the_stored_snapshot(browser: Any, relay_server: Any, page_server: Any) -> None:
    build = require_build()
    urls = [site_page(page_server, relay_server, n) for n in (1, 2, 3)]
    key = entry_key(relay_server)
    ctx, page, log = await open_page(browser, urls[0])  # a tab's first view: the worker hands over and stores
    try:
        marks = await page.evaluate(MARKS)
        assert "autopilot:handoff" in marks and "autopilot:snapshot-cache" not in marks
        await wait_mark(page, "autopilot:snapshot-stored")
        stored = await page.evaluate("performance.getEntriesByName('autopilot:snapshot-stored')[0].detail")
        entry = await page.evaluate(ENTRY, key)
        assert entry == [build, str(stored["bytes"]), stored["compressed"]]
        assert stored["compressed"] < stored["bytes"] / 3
        # (Pyodide keeps its options: the restored bytes, the size of the heap, are not kept with them.)
        assert await page.evaluate(RETAINED) is None
        conv_id = await py_eval(page, "from widget import get_client\nget_client().conversation['id']")
        sent = [await a_turn_answers(page)]

        # A later view: no worker, the stored snapshot restored, the widget works.
        marks = await later_view(page, urls[1])
        assert "autopilot:snapshot-cache" in marks
        assert "autopilot:prewarmed" not in marks and "autopilot:snapshot-cache-dropped" not in marks
        read = await page.evaluate("performance.getEntriesByName('autopilot:snapshot-cache')[0].detail")
        assert await page.evaluate(RETAINED) is None
        assert read["bytes"] == stored["bytes"] and read["compressed"] == stored["compressed"]
        assert await py_eval(page, f"from widget import get_client\nget_client().registry.get('{PAGE_FN}') is not None")
        assert await py_eval(page, "from widget import get_client\nget_client().conversation['id']") == conv_id
        sent.append(await a_turn_answers(page))
        # Two views restore the same bytes; each reseeds its random state.
        first = await py_eval(page, "import random\nrandom.getrandbits(64)")
        assert "autopilot:snapshot-cache" in await later_view(page, urls[2])
        assert await py_eval(page, "import random\nrandom.getrandbits(64)") != first

        # What the host's storage holds is Python before any page code, configuration or conversation.
        needles = [PAGE_FN, conv_id, "/__snapcache__/", *sent, "widget.browser"]
        assert await page.evaluate(FOUND_IN_ENTRY, [key, needles]) == ["widget.browser"]
        assert log.console_errors == [] and log.page_errors == []
    finally:
        await ctx.close()


async def test_a_stale_builds_entry_is_dropped_then_replaced(browser: Any, relay_server: Any, page_server: Any) -> None:
    build = require_build()
    url = site_page(page_server, relay_server, 1)
    key = entry_key(relay_server)
    ctx = await browser.new_context()
    try:
        page = await ctx.new_page()
        await page.goto(plain_page(page_server))
        await page.evaluate(PUT_ENTRY, [key, "000000000000", "refused"])
        # A later view (the tab's started marker) finds another build's entry: removed, Python starts as usual.
        await page.evaluate("sessionStorage.setItem('autopilot:started:demo', '1')")
        marks = await later_view(page, url)
        assert "autopilot:snapshot-cache-dropped" in marks and "autopilot:snapshot-cache" not in marks
        await page.wait_for_function("k => caches.open('autopilot-snapshot').then(c => c.match(k)).then(r => !r)",
                                     arg=key)
        await a_turn_answers(page)
        # A tab's first view of the new build stores its own (over another build's entry, too).
        await page.evaluate(PUT_ENTRY, [key, "000000000000", "refused"])
        other = await ctx.new_page()
        await other.goto(url)
        await wait_mark(other, "autopilot:snapshot-stored")
        assert (await other.evaluate(ENTRY, key))[0] == build
        assert await other.evaluate("caches.open('autopilot-snapshot').then(c => c.keys()).then(k => k.length)") == 1
    finally:
        await ctx.close()


async def test_a_corrupt_entry_falls_back_to_a_normal_start_and_is_removed(
    browser: Any, relay_server: Any, page_server: Any
) -> None:
    build = require_build()
    urls = [site_page(page_server, relay_server, n) for n in (1, 2)]
    key = entry_key(relay_server)
    ctx, page, log = await open_page(browser, urls[0])
    try:
        await wait_mark(page, "autopilot:snapshot-stored")
        # Cut short (gzip's own check), not gzip, and a valid gzip of bytes Python's restore refuses.
        for kind, read in (("truncated", False), ("not-gzip", False), ("refused", True)):
            await page.evaluate(PUT_ENTRY, [key, build, kind])
            marks = await later_view(page, urls[1])
            assert "autopilot:snapshot-cache-dropped" in marks, kind
            assert ("autopilot:snapshot-cache" in marks) is read, kind
            reason = await page.evaluate("performance.getEntriesByName('autopilot:snapshot-cache-dropped')[0].detail")
            assert reason["reason"].startswith("restore failed" if read else "unreadable"), (kind, reason)
            assert await page.evaluate(ENTRY, key) is None, kind
            assert await py_eval(page, "from widget import get_client\nget_client().connection_state") == "connected"
        await a_turn_answers(page)
        assert log.page_errors == []
    finally:
        await ctx.close()


async def test_the_setting_off_stores_and_reads_nothing(browser: Any, relay_server: Any, page_server: Any) -> None:
    url_on = site_page(page_server, relay_server, 1)
    url_off = site_page(page_server, relay_server, 2, 'data-snapshot-cache="false"')
    key = entry_key(relay_server)
    ctx = await browser.new_context()
    try:
        # Off on a tab's first view: the worker hands over as usual and the origin's storage gets nothing.
        page = await ctx.new_page()
        workers: list[Any] = []
        gone = asyncio.Event()

        def on_worker(w: Any) -> None:
            workers.append(w)
            w.on("close", lambda _w: gone.set())

        page.on("worker", on_worker)
        await page.goto(url_off)
        await page.hover(TOGGLE)  # (a first view may wait for the reader's intent to start)
        await wait_mark(page, "autopilot:joined")
        assert "autopilot:handoff" in await page.evaluate(MARKS)
        await asyncio.wait_for(gone.wait(), 60)  # the worker is gone: nothing can be stored after this
        assert len(workers) == 1
        assert await page.evaluate("caches.keys()") == []
        assert "autopilot:snapshot-stored" not in await page.evaluate(MARKS)
        # On in another tab: stored. Off on a later view of that tab: neither read nor kept.
        other = await ctx.new_page()
        await other.goto(url_on)
        await wait_mark(other, "autopilot:snapshot-stored")
        marks = await later_view(other, url_off)
        assert "autopilot:snapshot-cache" not in marks and "autopilot:snapshot-cache-dropped" not in marks
        await other.wait_for_function("k => caches.open('autopilot-snapshot').then(c => c.match(k)).then(r => !r)",
                                      arg=key)
    finally:
        await ctx.close()

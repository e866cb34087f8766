"""The stored snapshot: a tab's later page views restore the worker's started Python instead of starting it.

A tab's first start runs the pre-warm worker, which hands the page a memory snapshot of its Python and keeps a
copy in the page origin's Cache Storage (one entry per relay root, tagged with the build and the body's format:
the snapshot's pages that are not all zeros, uncompressed, listed in a header). A later page view of the tab,
which would otherwise start Python on the page, rebuilds and restores that copy; so does a new tab's first view
whose reader comes before its own worker is done (the worker is then stopped). A stale, old-format, corrupt or
refused entry means the usual start, and the entry goes; ``snapshotCache: false`` stores and reads nothing.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import pytest
from conftest import require_build
from support import DIST, open_page, py_eval, wait_mark

pytestmark = pytest.mark.browser

TOGGLE = "#autopilot-toggle-host >> button.toggle"
ANSWERS = "#autopilot-bar-host >> .messages > .message.assistant"
MARKS = "() => performance.getEntriesByType('mark').map(m => m.name)"
CACHE, KEY_NAME = "autopilot-snapshot", "snapshot"
PAGE, FORMAT = 65536, "zero-pages-elided-65536"

# A page function whose name must never reach the stored snapshot (page code runs after it is made).
PAGE_FN = "zq_page_fn_" + secrets.token_hex(4)

# The entry the page's origin holds for the relay: its headers and the size of its body, or null.
ENTRY = """async (key) => {
  const r = await (await caches.open('autopilot-snapshot')).match(key);
  if (!r) return null;
  const h = (name) => r.headers.get('x-autopilot-' + name);
  return {build: h('build'), format: h('format'), bytes: h('bytes'), pages: h('pages'),
          size: (await r.arrayBuffer()).byteLength};
}"""

# The stored body (all of what is on disk) searched for each of the given strings (as UTF-8): which ones it holds.
FOUND_IN_ENTRY = """async ([key, needles]) => {
  const r = await (await caches.open('autopilot-snapshot')).match(key);
  const bytes = new Uint8Array(await r.arrayBuffer());
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

# Replace the entry with a bad one, tagged with the given build. Made from the worker's entry (kept aside in
# another cache on first use): 'truncated' (the body cut short), 'long' (the page list without its last run: the
# body holds more), 'bad-list' (the runs out of order), 'old-format' (the body gzip-compressed, no format header:
# an older loader's entry). 'refused': well-formed (pages 1 and 4 of 4 pages and 128 bytes, the last one short)
# of bytes Python's restore refuses (no snapshot header).
PUT_ENTRY = """async ([key, build, kind]) => {
  const cache = await caches.open('autopilot-snapshot');
  const aside = await caches.open('autopilot-snapshot-test-original');
  const headers = {'x-autopilot-build': build, 'x-autopilot-format': '%(format)s'};
  let body;
  if (kind === 'refused') {
    body = new Uint8Array(%(page)d + 128).fill(3);
    headers['x-autopilot-bytes'] = String(4 * %(page)d + 128);
    headers['x-autopilot-pages'] = '1,4';
  } else {
    if (!(await aside.match(key))) await aside.put(key, await cache.match(key));
    const old = await aside.match(key);
    const whole = new Uint8Array(await old.arrayBuffer());
    headers['x-autopilot-bytes'] = old.headers.get('x-autopilot-bytes');
    const pages = old.headers.get('x-autopilot-pages');
    headers['x-autopilot-pages'] = pages;
    body = whole;
    if (kind === 'truncated') body = whole.slice(0, whole.length >> 1);
    else if (kind === 'long') headers['x-autopilot-pages'] = pages.split(',').slice(0, -1).join(',');
    else if (kind === 'bad-list') headers['x-autopilot-pages'] = pages.split(',').reverse().join(',');
    else if (kind === 'old-format') {
      delete headers['x-autopilot-format'];
      delete headers['x-autopilot-pages'];
      const gz = new Blob([whole]).stream().pipeThrough(new CompressionStream('gzip'));
      body = new Uint8Array(await new Response(gz).arrayBuffer());
    }
  }
  await cache.put(key, new Response(body, {headers}));
}""" % {"page": PAGE, "format": FORMAT}


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


# The stored wasm: [build header, content type, byte length] or null.
WASM_ENTRY = """async (key) => {
  const r = await (await caches.open('autopilot-snapshot')).match(key);
  if (!r) return null;
  return [r.headers.get('x-autopilot-build'), r.headers.get('content-type'), (await r.arrayBuffer()).byteLength];
}"""


def wasm_key(relay: Any) -> str:
    return f"{relay.url}/widget/snapshot-wasm"


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
        assert entry["build"] == build and entry["format"] == FORMAT
        assert entry["bytes"] == str(stored["bytes"]) and entry["size"] == stored["stored"]
        # The body is the kept pages: as many as the list names (the snapshot's last page may be short), fewer
        # than the snapshot's pages (a started heap is mostly zeros).
        kept = [range(int(a), int(b or a) + 1) for a, _, b in (r.partition("-") for r in entry["pages"].split(","))]
        listed = [p for run in kept for p in run]
        assert listed == sorted(set(listed)) and len(listed) == stored["pages"]
        last = -(-stored["bytes"] // PAGE) - 1
        short = stored["bytes"] - last * PAGE
        assert stored["stored"] == len(listed) * PAGE - (PAGE - short if last in listed else 0)
        assert stored["stored"] < stored["bytes"] * 0.75
        # Beside it, Pyodide's wasm as served, decompressed, for the later views to instantiate without decoding.
        wasm_size = (DIST / build / "pyodide" / "pyodide.asm.wasm").stat().st_size
        assert await page.evaluate(WASM_ENTRY, wasm_key(relay_server)) == [build, "application/wasm", wasm_size]
        assert stored["wasm"] == wasm_size
        # (Pyodide keeps its options: the restored bytes, the size of the heap, are not kept with them.)
        assert await page.evaluate(RETAINED) is None
        conv_id = await py_eval(page, "from widget import get_client\nget_client().conversation['id']")
        sent = [await a_turn_answers(page)]

        # A later view: no worker, the stored snapshot restored (Python's runtime started before the restore, while
        # the bytes were read), the widget works.
        marks = await later_view(page, urls[1])
        assert "autopilot:snapshot-cache" in marks and "autopilot:wasm-cache" in marks
        assert marks.index("autopilot:runtime") < marks.index("autopilot:pyodide")
        assert "autopilot:prewarmed" not in marks and "autopilot:snapshot-cache-dropped" not in marks
        read = await page.evaluate("performance.getEntriesByName('autopilot:snapshot-cache')[0].detail")
        assert await page.evaluate(RETAINED) is None
        assert read["bytes"] == stored["bytes"] and read["stored"] == stored["stored"]
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


async def reader_at_once(ctx: Any, url: str) -> list[str]:
    """A new tab of the context whose reader hovers the toggle as soon as it shows (long before the pre-warm
    worker can be done), then sends; the boot marks once the answer is there."""
    page = await ctx.new_page()
    await page.goto(url, wait_until="commit")
    await page.hover(TOGGLE, timeout=30_000)
    await wait_mark(page, "autopilot:joined")
    await a_turn_answers(page)
    return await page.evaluate(MARKS)


async def test_a_new_tab_whose_reader_is_early_restores_the_stored_snapshot(
    browser: Any, relay_server: Any, page_server: Any
) -> None:
    """A new tab (a tab's first view) runs the worker; a reader there before it is done gets Python from the copy an
    earlier tab stored, and the worker is stopped. With nothing stored, the same reader waits for the worker."""
    urls = [site_page(page_server, relay_server, n) for n in (1, 2)]
    ctx = await browser.new_context()
    try:
        marks = await reader_at_once(ctx, urls[0])  # nothing stored yet: the worker's hand-over
        assert "autopilot:handoff" in marks and "autopilot:prewarm-abandoned" not in marks
        assert "autopilot:snapshot-cache" not in marks
        page = ctx.pages[0]
        await wait_mark(page, "autopilot:snapshot-stored")
        marks = await reader_at_once(ctx, urls[1])  # a new tab: the stored copy, the worker stopped
        assert "autopilot:prewarm-abandoned" in marks and "autopilot:snapshot-cache" in marks
        assert "autopilot:handoff" not in marks and "autopilot:snapshot-cache-dropped" not in marks
        newer = ctx.pages[1]
        registered = f"from widget import get_client\nget_client().registry.get('{PAGE_FN}') is not None"
        assert await py_eval(newer, registered)
        # Its own later views restore the stored copy as any tab's do.
        assert "autopilot:snapshot-cache" in await later_view(newer, urls[0])
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
        assert (await other.evaluate(ENTRY, key))["build"] == build
        assert await other.evaluate("caches.open('autopilot-snapshot').then(c => c.keys()).then(k => k.length)") == 2
    finally:
        await ctx.close()


async def first_view_stored(browser: Any, relay_server: Any, page_server: Any) -> tuple[str, list[str], Any]:
    """A tab's first view of a two-page site, joined, once the worker stored its copies: the build, the two
    pages' URLs and (context, page, log)."""
    build = require_build()
    urls = [site_page(page_server, relay_server, n) for n in (1, 2)]
    opened = await open_page(browser, urls[0])
    try:
        await wait_mark(opened[1], "autopilot:snapshot-stored")
    except BaseException:
        await opened[0].close()
        raise
    return build, urls, opened


async def test_a_corrupt_entry_falls_back_to_a_normal_start_and_is_removed(
    browser: Any, relay_server: Any, page_server: Any
) -> None:
    build, urls, (ctx, page, log) = await first_view_stored(browser, relay_server, page_server)
    key = entry_key(relay_server)
    try:
        # Bodies that do not match their page list, an entry in the old gzip format (this build's, but another
        # layout), and well-formed bytes Python's restore refuses.
        for kind, why in (("truncated", "unreadable"), ("long", "unreadable"), ("bad-list", "unreadable"),
                          ("old-format", "another format"), ("refused", "restore failed")):
            await page.evaluate(PUT_ENTRY, [key, build, kind])
            marks = await later_view(page, urls[1])
            assert "autopilot:snapshot-cache-dropped" in marks, kind
            assert ("autopilot:snapshot-cache" in marks) is (why == "restore failed"), kind
            reason = await page.evaluate("performance.getEntriesByName('autopilot:snapshot-cache-dropped')[0].detail")
            assert reason["reason"].startswith(why), (kind, reason)
            assert await page.evaluate(ENTRY, key) is None, kind
            assert await py_eval(page, "from widget import get_client\nget_client().connection_state") == "connected"
        await a_turn_answers(page)
        assert log.page_errors == []
    finally:
        await ctx.close()


# The stored entry's snapshot made `extra` bytes longer: the heap of a Python that had grown its memory (the pages
# past the original end are zeros, so the body is the same; only the full length changes).
GROW_ENTRY = """async ([key, extra]) => {
  const cache = await caches.open('autopilot-snapshot');
  const old = await cache.match(key);
  const headers = {};
  old.headers.forEach((v, k) => { headers[k] = v; });
  headers['x-autopilot-bytes'] = String(Number(headers['x-autopilot-bytes']) + extra);
  await cache.put(key, new Response(await old.arrayBuffer(), {headers}));
}"""

MEMORY = "() => window.Autopilot.pyodide._module.HEAPU8.length"


async def test_a_snapshot_larger_than_the_initial_memory_grows_it_before_the_restore(
    browser: Any, relay_server: Any, page_server: Any
) -> None:
    """A later view starts Python's runtime while the stored snapshot is read, so its memory has the wasm's initial
    size; a snapshot of a larger heap gets the memory grown to its size first, and is restored."""
    _build, urls, (ctx, page, log) = await first_view_stored(browser, relay_server, page_server)
    try:
        initial = await page.evaluate(MEMORY)
        await page.evaluate(GROW_ENTRY, [entry_key(relay_server), 2 * PAGE])
        marks = await later_view(page, urls[1])
        assert "autopilot:snapshot-cache" in marks and "autopilot:snapshot-cache-dropped" not in marks
        assert await page.evaluate(MEMORY) == initial + 2 * PAGE
        assert await py_eval(page, f"from widget import get_client\nget_client().registry.get('{PAGE_FN}') is not None")
        await a_turn_answers(page)
        assert log.page_errors == []
    finally:
        await ctx.close()


async def test_a_corrupt_stored_wasm_falls_back_to_the_http_cache_and_is_removed(
    browser: Any, relay_server: Any, page_server: Any
) -> None:
    """A stored wasm that does not compile (cut short): the later view instantiates Pyodide's own response
    instead, still restores the stored snapshot, and the wasm entry goes."""
    build, urls, (ctx, page, log) = await first_view_stored(browser, relay_server, page_server)
    key = wasm_key(relay_server)
    try:
        await page.evaluate("""async ([key, build]) => {
          const c = await caches.open('autopilot-snapshot');
          const whole = new Uint8Array(await (await c.match(key)).arrayBuffer());
          await c.put(key, new Response(whole.slice(0, whole.length >> 1),
            {headers: {'content-type': 'application/wasm', 'x-autopilot-build': build}}));
        }""", [key, build])
        marks = await later_view(page, urls[1])
        assert "autopilot:snapshot-cache" in marks and "autopilot:wasm-cache" not in marks
        reason = await page.evaluate("performance.getEntriesByName('autopilot:snapshot-cache-dropped')[0].detail")
        assert reason["reason"].startswith("stored wasm unusable"), reason
        await page.wait_for_function("k => caches.open('autopilot-snapshot').then(c => c.match(k)).then(r => !r)",
                                     arg=key)
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
        assert await other.evaluate(WASM_ENTRY, wasm_key(relay_server)) is None
    finally:
        await ctx.close()

"""Page Python (D9): inline blocks and data-python files share one namespace, run before the first sync,
and a traceback in one block goes to the console without stopping the widget."""

from __future__ import annotations

from support import py_eval, wait_mark

PAGE = """<!doctype html><html><head><link rel="icon" href="data:,"><title>page python</title></head><body>
<script type="autopilot-python">
from widget import get_client
client = get_client()
SHARED = "from block 1"

@client.function
def first() -> str:
    \"\"\"First block's function.\"\"\"
    return SHARED
</script>
<script type="autopilot-python">
raise RuntimeError("this block is broken on purpose")
</script>
<script src="/widget/autopilot.js" data-relay="{relay}" data-app="demo" data-boot="eager"
        data-python="/__test__/extra.py"></script>
</body></html>"""

EXTRA = """
from widget import get_client

@get_client().function
def from_file() -> str:
    \"\"\"Defined in a .py file named by data-python; sees the inline block's globals.\"\"\"
    return SHARED + " via file"
"""


async def test_inline_and_file_python_share_a_namespace_and_errors_do_not_stop_the_widget(
    browser, relay_server, page_server
):
    page_server.add("/__test__/extra.py", EXTRA, "text/x-python")
    url = page_server.add("/__test__/page-python.html", PAGE.format(relay=relay_server.url))
    ctx = await browser.new_context()
    page = await ctx.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    try:
        await page.goto(url)
        await wait_mark(page, "autopilot:joined")
        names = await py_eval(page, "from widget import get_client\nsorted(get_client().registry.descriptors())")
        assert names == ["first", "from_file"]
        result = await py_eval(
            page, "from widget.browser import PAGE_NAMESPACE\nPAGE_NAMESPACE['from_file']()"
        )
        assert result == "from block 1 via file"
        assert any("this block is broken on purpose" in c for c in console)
        assert await py_eval(page, "from widget import get_client\nget_client().connection_state") == "connected"
        # Both functions were in the first state sync: the relay's initial join already has them.
        history = await py_eval(
            page,
            "from widget import get_client\nc = get_client()\n"
            "sorted(c.state.acked['autopilot']['functions']) if c.state.acked else None",
        )
        assert history == ["first", "from_file"]
    finally:
        await ctx.close()

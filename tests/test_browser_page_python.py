"""Page Python: inline blocks and data-python files share one namespace, run before the first sync, and a
traceback in one block goes to the console and the bar without stopping the rest.

The same page Python runs on a plain page (autopilot-python blocks and a data-python file, our own Pyodide)
and on a PyScript page (py blocks, PyScript's Pyodide): it is a real module there (dataclasses, forward
references, pickle), its functions get their declared types, their docstrings describe their parameters,
a broken block shows in the bar, a raising function reaches the model, the console and the call pill.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from support import open_page, py_eval, wait_mark

pytestmark = pytest.mark.browser

HEAD = ('<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,">'
        "<title>{title}</title></head><body>")
BAR = "#autopilot-bar-host"

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


# ------------------------------------------------------------------------------------------------
# The same page Python on a plain page and on a PyScript page.

BLOCK_TYPES = """from __future__ import annotations  # every hint a forward reference, resolved through the module

import dataclasses
import datetime
import enum
from typing import Optional

from widget import get_client

client = get_client()


class Size(enum.Enum):
    S = "s"
    M = "m"


@dataclasses.dataclass
class Address:
    city: str
    zip: Optional[str] = None


@dataclasses.dataclass
class Booking:
    address: Address
    sizes: list[Size]
    party: tuple[int, int]
    when: datetime.date
    vip: bool = False


@client.function
def book(booking: Booking, note: Optional[str] = None) -> Booking:
    \"\"\"Book a table.

    Args:
        booking: What to book.
        note: A note for the kitchen.
    \"\"\"
    assert isinstance(booking.address, Address) and isinstance(booking.when, datetime.date)
    assert all(isinstance(s, Size) for s in booking.sizes) and isinstance(booking.party, tuple)
    return dataclasses.replace(booking, when=booking.when + datetime.timedelta(days=1), vip=note is not None)


@client.function
def explode(reason: str) -> str:
    \"\"\"Always fails.\"\"\"
    raise ValueError("exploded: " + reason)
"""

BLOCK_BROKEN = """x = 1
raise RuntimeError("broken on purpose")
"""

BLOCK_FILE = """import pickle
import sys

try:
    client.register_function("typo", lambda args, ctx: None,
                             parameters={"type": "object", "properties": {"x": {"type": "strin"}}})
    TYPO = "registered"
except Exception as exc:
    TYPO = type(exc).__name__ + ": " + str(exc)


@client.function
def fail_in_file() -> None:
    \"\"\"Always fails, from the file.\"\"\"
    raise KeyError("no such key")


@client.function
def page_facts() -> dict:
    \"\"\"What page Python can do: pickle its own classes, see its module.\"\"\"
    return {"pickle": pickle.loads(pickle.dumps(Address("Oslo"))) == Address("Oslo"),
            "module": sys.modules[Address.__module__].Address is Address, "typo": TYPO}
"""

PLAIN = HEAD + """<p>plain</p>
<script type="autopilot-python">{types}</script>
<script type="autopilot-python">{broken}</script>
<script src="{relay}/widget/autopilot.js" data-app="demo" data-boot="eager" data-python="/__pf__/file.py"></script>
</body></html>"""

PYSCRIPT = HEAD + """<p>pyscript</p>
<script type="module" src="{relay}/widget/pyscript/core.js"></script>
<script src="{relay}/widget/autopilot.js" data-app="demo"></script>
<script type="py" config="{relay}/widget/pyscript.json">{types}</script>
<script type="py">{broken}</script>
<script type="py" src="/__pf__/file.py"></script>
</body></html>"""

LISTEN = """() => { window.__log = []; window.__finished = 0;
  const A = window.Autopilot;
  A.on("functionSuccess", e => __log.push(["ok", e.request.name, e.result]));
  A.on("functionError", e => __log.push(["error", e.request.name, e.error]));
  A.on("completion.finished", () => window.__finished++); }"""


async def _call(page: Any, text: str, name: str) -> list[Any]:
    """Send ``text`` (the demo model calls ``name``) and return the function's logged outcome."""
    before = await page.evaluate("window.__finished")
    count = await page.evaluate("n => __log.filter(e => e[1] === n).length", name)
    assert await page.evaluate("t => window.Autopilot.send(t)", text) is True
    await page.wait_for_function("([n, c]) => __log.filter(e => e[1] === n).length > c", arg=[name, count],
                                 timeout=30_000)
    await page.wait_for_function(f"() => window.__finished > {before}", timeout=30_000)
    return [e for e in await page.evaluate("window.__log") if e[1] == name][-1]


def _shadow(selector: str) -> str:
    return f"{BAR} >> {selector}"


@pytest.mark.parametrize("variant", ["plain", "pyscript"])
async def test_page_python_is_a_module_with_typed_functions_and_visible_errors(
    browser, relay_server, page_server, variant
):
    page_server.add("/__pf__/file.py", BLOCK_FILE, "text/x-python")
    html = (PLAIN if variant == "plain" else PYSCRIPT).replace("{title}", variant, 1)
    html = html.replace("{types}", BLOCK_TYPES).replace("{broken}", BLOCK_BROKEN).replace("{relay}", relay_server.url)
    url = page_server.add(f"/__pf__/{variant}.html", html)
    ctx, page, log = await open_page(browser, url, timeout_ms=90_000)
    try:
        await page.evaluate(LISTEN)
        # 1. A real module: dataclasses and forward references worked (book is registered), pickle works,
        # the block after the broken one ran, and the broken one is in the bar and the console.
        facts = await py_eval(page, "from widget import "
                                    "get_client\nget_client().registry.get('page_facts').handler({}, {})")
        assert facts["pickle"] is True and facts["module"] is True
        block = "<page script 2>" if variant == "plain" else "<py script 2>"
        broken = f"page Python failed: {block}, line 2: RuntimeError: broken on purpose"
        typo = ("Function 'typo': parameters is not a valid JSON Schema: properties/x/type: 'strin' is not valid "
                "under any of the given schemas")
        # 3. An explicit schema with a typo is refused, naming the path: at registration where jsonschema is
        # loaded (PyScript's full bundle); on our own boot its import is kept off the boot path, so the check
        # runs right after it, removes the function and says so in the bar.
        if variant == "pyscript":
            assert facts["typo"] == "ConfigError: " + typo
            last_notice = broken
        else:
            assert facts["typo"] == "registered"
            last_notice = "page Python failed: " + typo
        await page.wait_for_function(
            "t => { const n = document.getElementById('autopilot-bar-host').shadowRoot.querySelector('.notice-text');"
            " return n !== null && n.textContent === t; }", arg=last_notice, timeout=30_000)
        names = await py_eval(page, "from widget import get_client\nsorted(get_client().registry.descriptors())")
        assert names == ["book", "explode", "fail_in_file", "page_facts"]
        assert any(c.startswith("[autopilot] " + broken)
                   and "Traceback" in c for c in log.console_errors), log.console_errors
        if variant == "plain":
            assert any(c.startswith("[autopilot] page Python failed: " + typo) for c in log.console_errors)

        # 3. The docstring's Args describe the parameters; the description keeps the rest.
        desc = await py_eval(page, "from widget import get_client\nget_client().registry.get('book').descriptor()")
        assert desc["description"] == "Book a table."
        props = desc["parameters"]["properties"]
        assert props["booking"]["description"] == "What to book."
        assert props["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}],
                                 "description": "A note for the kitchen.",
                                 "default": None}
        party = props["booking"]["properties"]["party"]
        assert party["minItems"] == party["maxItems"] == 2 and len(party["prefixItems"]) == 2
        assert props["booking"]["properties"]["vip"] == {"type": "boolean", "default": False}

        # 2. The function gets its declared types; its dataclass result comes back as JSON.
        booking = {"address": {"city": "Oslo"}, "sizes": ["m", "s"], "party": [2, 1], "when": "2026-12-24"}
        outcome = await _call(page, "book " + json.dumps({"booking": booking, "note": "window"}), "book")
        assert outcome == ["ok", "book", {"address": {"city": "Oslo", "zip": None}, "sizes": ["m", "s"],
                                          "party": [2, 1], "when": "2026-12-25", "vip": True}]
        # A value the schema lets through but the type refuses: the same structured error as validation's.
        bad = {**booking, "when": "2026-02-30"}
        outcome = await _call(page, "book " + json.dumps({"booking": bad}), "book")
        assert outcome[0] == "error" and outcome[2].startswith(
            "Invalid arguments for 'book': booking/when: '2026-02-30' is not a date string"), outcome

        # 4. A raising function: type and message to the model, traceback to the console, error on the pill.
        outcome = await _call(page, 'explode {"reason": "on purpose"}', "explode")
        assert outcome == ["error", "explode", "ValueError: exploded: on purpose"]
        await page.wait_for_function(
            "() => window.Autopilot.pyodide.runPython(\"from widget import get_client; any("
            "'ValueError: exploded: on purpose' in str(m.get('error')) for m in get_client().messages "
            "if m.get('role') == 'tool')\")", timeout=20_000)
        raised = [c for c in log.console_errors if "function explode raised" in c]
        assert raised and "Traceback" in raised[0] and "in explode" in raised[0], log.console_errors
        if variant == "plain":  # our runner puts the page's source where tracebacks look for it
            assert 'raise ValueError("exploded: " + reason)' in raised[0]
        if not await page.is_visible(_shadow("section.panel")):
            await page.click("#autopilot-toggle-host")
        pill = page.locator(_shadow(".message.assistant .call")).filter(has_text="explode").last
        await pill.wait_for(timeout=20_000)
        assert await pill.get_attribute("data-status") == "error"
        await pill.locator("summary").click()
        assert "ValueError: exploded: on purpose" in await pill.locator("pre.error").text_content()

        # The same from a data-python file / a py block with a src.
        outcome = await _call(page, "fail_in_file", "fail_in_file")
        assert outcome == ["error", "fail_in_file", "KeyError: 'no such key'"]
        assert any("function fail_in_file raised" in c and "Traceback" in c for c in log.console_errors)

        # 3. A JS registration with a broken schema is refused too (its promise rejects, naming the path).
        err = await page.evaluate("""() => window.Autopilot.registerFunction({name: "js_typo", handler: () => 1,
            parameters: {type: "object", properties: {n: {type: "integer", minimum: "0"}}}})
            .then(() => "ok", e => e.message)""")
        assert err.startswith("Function 'js_typo': parameters is not a valid JSON Schema: properties/n/minimum: "), err
        assert await page.evaluate("""() => window.Autopilot.registerFunction({name: "js_ok", handler: () => 1,
            parameters: {type: "object", properties: {n: {type: "integer", minimum: 0}}}})
            .then(() => "ok", e => e.message)""") == "ok"
        names = await py_eval(page, "from widget import get_client\nsorted(get_client().registry.descriptors())")
        assert names == ["book", "explode", "fail_in_file", "js_ok", "page_facts"]
        assert log.page_errors == [], log.page_errors
    finally:
        await ctx.close()

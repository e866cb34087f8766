"""Function calls in the browser: a Python function registered on the page is called by the demo model end to end."""

from __future__ import annotations

import pytest
from support import py_eval

pytestmark = pytest.mark.browser

SETUP = """
import asyncio
from widget import get_client
client = get_client()
CALLS = []

@client.function
def shout(text: str, times: int = 1) -> str:
    \"\"\"Returns the text in capitals, repeated.\"\"\"
    CALLS.append(text)
    client.update_context({"last_shout": text})
    return (text.upper() + " ") * times

asyncio.ensure_future(client.send_message('please call shout {"text": "hello", "times": 2}'))
True
"""


async def test_page_function_called_by_the_model_end_to_end(demo_page):
    page = demo_page.page
    assert await py_eval(page, SETUP) is True
    await page.wait_for_function(
        "() => window.Autopilot.pyodide.runPython("
        "'from widget import get_client; c = get_client(); "
        "bool(c.get_function_call_history()) and c.get_function_call_history()[0][\"respondedAt\"] is not None "
        "and not c.session.is_streaming')",
        timeout=20000,
    )
    record = await py_eval(page, "from widget import get_client\nget_client().get_function_call_history()[0]")
    assert record["name"] == "shout" and record["status"] == "success"
    assert record["totalMs"] >= record["handlerMs"] >= 0
    assert await py_eval(page, "CALLS") == ["hello"]
    last = await py_eval(page, "from widget import get_client\nget_client().messages[-1]['content']")
    assert "HELLO HELLO" in last

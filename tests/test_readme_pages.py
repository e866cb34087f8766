"""Every HTML and JS snippet of README.md and docs/embedding.md, served as a page against a real relay.

The snippets are read from the Markdown files at test time, so the docs and the code cannot drift apart: each
snippet becomes a page on the page server's origin (the relay's URL and app put in for the placeholders), and
the page must boot, join, register what the snippet registers, set the context it sets, run each of its
functions through the relay's demo model, and log no error. A JS snippet that does not set
``window.AutopilotConfig`` is tried on both sides of the loader's tag (above a ``defer`` tag, below a plain one):
the documented queue works in any tag order.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from support import open_page, py_eval, start_relay
from test_protocol_docs import SNIPPETS, Snippet

pytestmark = pytest.mark.browser

HEAD = ('<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,">'
        "<title>{title}</title></head><body>")


@pytest.fixture(scope="module")
def my_site(tmp_path_factory, page_server, relay_server):
    """A relay with the docs' app ``my-site``, allowing the page server's origin (relay_server: built)."""
    relay = start_relay(tmp_path_factory.mktemp("readme-relay"),
                        extra=["--demo-chunk-delay-ms", "2", "--app", f"my-site={page_server.origin}"])
    yield relay
    relay.stop()


def page_for(snippet: Snippet, relay: str) -> str:
    body = snippet.text.replace("https://relay.example.com", relay)
    if snippet.lang == "js":
        body = f"<script>\n{body}</script>"
    tag = f'<script src="{relay}/widget/autopilot.js" data-app="my-site"{{}}></script>'
    if snippet.order == "before":
        body = body + "\n" + tag.format(" defer")
    elif snippet.order == "after":
        body = tag.format("") + "\n" + body
    # The counter of finished turns the test waits on (queued: it works in any tag order, too).
    probe = ("<script>(window.Autopilot = window.Autopilot || []).push((A) => {"
             " window.__finished = 0; A.on('completion.finished', () => window.__finished++); });</script>")
    return HEAD.format(title=snippet.id) + "\n" + body + "\n" + probe + "</body></html>"


def functions_of(text: str) -> dict[str, dict[str, Any]]:
    """The page functions a snippet defines, with arguments the demo model can pass; sensitive ones left out."""
    out: dict[str, dict[str, Any]] = {}
    for m in re.finditer(r"@\w+\.function\s*\n\s*def (\w+)\(([^)]*)\)", text):
        args = {}
        for param in filter(None, (p.strip() for p in m.group(2).split(","))):
            name, _, kind = param.partition(":")
            args[name.strip()] = 3 if "int" in kind else "x"
        out[m.group(1)] = args
    for m in re.finditer(r"registerFunction\(\{(.*?)\n\s*\}\)|registerFunction\(\{(.*?)\}\)", text, re.S):
        block = m.group(1) or m.group(2)
        name = re.search(r'name: "(\w+)"', block)
        if name and "sensitive: true" not in block:
            out[name.group(1)] = {}
    return out


async def _say(page: Any, text: str, finished: int) -> None:
    await page.wait_for_function(f"() => window.__finished >= {finished}", timeout=30_000)
    assert await page.evaluate("t => window.Autopilot.send(t)", text) is True


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.id for s in SNIPPETS])
async def test_doc_snippet_is_a_working_page(browser, page_server, my_site, snippet):
    url = page_server.add(f"/__docs__/{snippet.id}.html", page_for(snippet, my_site.url))
    ctx, page, log = await open_page(browser, url, timeout_ms=90_000)
    try:
        assert await page.evaluate("window.Autopilot.ready.then(a => a === window.Autopilot)") is True
        names = set(await py_eval(page, "from widget import get_client\n"
                                        "[f['name'] for f in get_client().get_registered_functions()]"))
        wanted = functions_of(snippet.text)
        registered = set(re.findall(r'name: "(\w+)"', snippet.text)) | set(re.findall(r"def (\w+)\(", snippet.text))
        assert registered <= names, (registered, names)
        if re.search(r"set_?[cC]ontext\(", snippet.text):
            assert await py_eval(page, "from widget import get_client\nget_client().get_context()")
        for i, (name, args) in enumerate(sorted(wanted.items())):
            await _say(page, name + (" " + json.dumps(args) if args else ""), i)
            await page.wait_for_function(
                """name => JSON.parse(window.Autopilot.pyodide.runPython(
                     "import json\\nfrom widget import get_client\\n"
                     + "json.dumps(get_client().get_function_call_history())"))
                   .some(r => r.name === name && r.respondedAt !== null)""", arg=name, timeout=30_000)
            history = await py_eval(page, "from widget import get_client\nget_client().get_function_call_history()")
            assert [r["status"] for r in history if r["name"] == name] == ["success"], history
        if "#help" in snippet.text:
            await page.click("#help")
            await page.wait_for_selector("#autopilot-bar-host >> section.panel", state="visible")
        assert log.page_errors == [], log.page_errors
        assert log.console_errors == [], log.console_errors
    finally:
        await ctx.close()

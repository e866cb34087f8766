"""Starters and follow-up suggestions in Chromium, on a real relay over real Socket.IO.

The relay's config gives the demo app two starters and turns suggestions on; the demo model suggests three
follow-ups when asked to "suggest follow-ups". An empty bar shows the starters as buttons in the bar's shadow root;
a click, or Tab and Enter, sends one as the reader's message; they go with the first message. Pages replace them
(``client.set_starters`` from page Python, ``Autopilot.setStarters`` from JS, before the boot too) or clear them.
The suggestions come under the answer, send their text when pressed, vanish when the reader sends the next message,
and come back after a reload. axe finds no violation in either state.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from conftest import require_build
from support import PageServer, RelayServer, open_page, start_relay, wait_mark
from test_bar import BarPage, js_root, open_bar, py, q, send, user_count, wait_turn_done
from test_bar_a11y import axe_source, violations

from widget.relay.models.demo import DEMO_SUGGESTIONS

pytestmark = pytest.mark.browser

STARTERS = ["What can you do?", "Suggest follow-ups"]
STARTER_BUTTONS = ".starters > button.starter"
SUGGESTION_BUTTONS = ".suggestions > button.suggestion"


@pytest.fixture(scope="module")
def starters_relay(tmp_path_factory: pytest.TempPathFactory, page_server: PageServer) -> Iterator[RelayServer]:
    """A relay whose demo app has starters and suggestions on (and allows the test page server's origin)."""
    require_build()
    workdir = tmp_path_factory.mktemp("starters-relay")
    config = workdir / "relay.toml"
    config.write_text(
        "[apps.demo]\nask_user = true\nsuggestions = true\n"
        f"starters = {STARTERS!r}\n".replace("'", '"')
        + f'allowed_origins = ["{page_server.origin}"]\n'
    )
    server = start_relay(workdir, extra=["--config", str(config), "--demo-chunk-delay-ms", "2"])
    yield server
    server.stop()


@pytest_asyncio.fixture(scope="module")
async def bar(browser: Any, starters_relay: RelayServer) -> AsyncIterator[BarPage]:
    """The relay's demo page, booted and joined once for the module; each test starts a new chat."""
    ctx, page, log = await open_page(browser, starters_relay.url + "/")
    yield BarPage(context=ctx, page=page, log=log, relay=starters_relay)
    await ctx.close()


async def new_chat(page: Any) -> None:
    """A fresh, empty conversation with the bar open."""
    assert await page.evaluate("() => window.Autopilot.newConversation()") is True
    await open_bar(page)
    await page.wait_for_function("() => window.Autopilot.handle.store.messages.length === 0")


async def texts(page: Any, selector: str) -> list[str]:
    """The texts of the visible buttons matching ``selector`` in the bar."""
    return await js_root(page, "return [...r.querySelectorAll(arg)].filter((b) => b.offsetParent !== null)"
                               ".map((b) => b.textContent);", selector)


async def wait_texts(page: Any, selector: str, expected: list[str]) -> None:
    await page.wait_for_function(
        """([sel, want]) => { const r = document.getElementById('autopilot-bar-host').shadowRoot;
            const got = [...r.querySelectorAll(sel)].filter((b) => b.offsetParent !== null).map((b) => b.textContent);
            return JSON.stringify(got) === JSON.stringify(want); }""",
        arg=[selector, expected],
    )


async def last_user_text(page: Any) -> str:
    return await js_root(page, "const m = [...r.querySelectorAll('.message.user .content')].pop(); "
                               "return m ? m.textContent : null;")


async def tab_to(page: Any, selector: str, limit: int = 40) -> None:
    """Press Tab until the bar's focused element matches ``selector`` (keyboard reachability, no clicks).

    The bar keeps no focus trap (a non-modal dialog): from the composer, Tab goes out through the page's own
    controls and the toggle before it comes back to the bar's header, answers and suggestions (21 presses on the
    test page), so the limit covers a whole round, not only the bar's controls."""
    for _ in range(limit):
        await page.keyboard.press("Tab")
        if await js_root(page, "return !!(r.activeElement && r.activeElement.matches(arg));", selector):
            return
    raise AssertionError(f"Tab never reached {selector}")


# ------------------------------------------------------------------------------------------------------------------


async def test_app_starters_on_an_empty_bar_and_a_click_sends_one(bar: BarPage) -> None:
    page = bar.page
    await new_chat(page)
    await wait_texts(page, STARTER_BUTTONS, STARTERS)
    group = await js_root(page, "const g = r.querySelector('.starters'); "
                                "return [g.getAttribute('role'), g.getAttribute('aria-label'), "
                                "[...g.querySelectorAll('button')].map((b) => b.type)];")
    assert group == ["group", "Suggested questions", ["button", "button"]]
    assert await py(page, "client.starters") == STARTERS
    await page.locator(q(STARTER_BUTTONS)).first.click()
    await wait_turn_done(page, 1)
    assert await last_user_text(page) == STARTERS[0]  # exactly as if typed
    assert await texts(page, STARTER_BUTTONS) == []  # gone with the first message, and after the answer
    assert await page.is_hidden(q(".starters"))
    assert bar.log.page_errors == []


async def test_keyboard_reaches_a_starter_and_enter_sends_it(bar: BarPage) -> None:
    page = bar.page
    await new_chat(page)
    await wait_texts(page, STARTER_BUTTONS, STARTERS)
    await tab_to(page, "button.starter")
    focused = await js_root(page, "return r.activeElement.textContent;")
    await page.keyboard.press("Enter")
    await wait_turn_done(page, 1)
    assert await last_user_text(page) == focused
    # the pressed button went away: the composer has the focus, not the page's body
    assert await js_root(page, "return r.activeElement && r.activeElement.className;") == "input"


async def test_suggestions_under_the_answer_sent_by_a_press_and_gone_after(bar: BarPage) -> None:
    page = bar.page
    await new_chat(page)
    await send(page, "Please suggest follow-ups")
    await wait_texts(page, SUGGESTION_BUTTONS, list(DEMO_SUGGESTIONS))
    group = await js_root(page, "const g = r.querySelector('.suggestions'); "
                                "return [g.getAttribute('role'), g.getAttribute('aria-label')];")
    assert group == ["group", "Follow-up questions"]
    # under the last answer, and the relay's tool call is not shown as a call
    assert await js_root(page, "const s = r.querySelector('.suggestions'); const a = "
                               "[...r.querySelectorAll('.message.assistant')].pop(); "
                               "return !!(a.compareDocumentPosition(s) & Node.DOCUMENT_POSITION_FOLLOWING);")
    assert await js_root(page, "return r.querySelectorAll('.message .call').length;") == 0
    n = await user_count(page)
    await page.locator(q(SUGGESTION_BUTTONS)).nth(1).click()
    await wait_turn_done(page, n + 1)
    assert await last_user_text(page) == DEMO_SUGGESTIONS[1]
    assert await texts(page, SUGGESTION_BUTTONS) == []  # the new answer suggests nothing
    # typed messages make them go too
    await send(page, "suggest follow-ups again")
    await wait_texts(page, SUGGESTION_BUTTONS, list(DEMO_SUGGESTIONS))
    n = await user_count(page)
    await send(page, "hello", wait=False)
    await page.wait_for_function("(n) => document.getElementById('autopilot-bar-host').shadowRoot"
                                 ".querySelectorAll('.message.user').length > n", arg=n)
    assert await texts(page, SUGGESTION_BUTTONS) == []
    await wait_turn_done(page, n + 1)
    assert await texts(page, SUGGESTION_BUTTONS) == []
    assert bar.log.page_errors == []


async def test_suggestions_come_back_after_a_reload_and_work_from_the_keyboard(bar: BarPage) -> None:
    page = bar.page
    await new_chat(page)
    await send(page, "suggest followups")
    await wait_texts(page, SUGGESTION_BUTTONS, list(DEMO_SUGGESTIONS))
    await page.reload()
    await wait_mark(page, "autopilot:joined")
    await open_bar(page)
    await wait_texts(page, SUGGESTION_BUTTONS, list(DEMO_SUGGESTIONS))
    assert await texts(page, STARTER_BUTTONS) == []
    await tab_to(page, "button.suggestion")
    focused = await js_root(page, "return r.activeElement.textContent;")
    n = await user_count(page)
    await page.keyboard.press("Space")
    await wait_turn_done(page, n + 1)
    assert await last_user_text(page) == focused
    assert await texts(page, SUGGESTION_BUTTONS) == []


async def test_page_python_and_js_replace_and_clear_the_starters(bar: BarPage) -> None:
    page = bar.page
    await new_chat(page)
    await wait_texts(page, STARTER_BUTTONS, STARTERS)
    assert await py(page, "client.set_starters(['One', ' Two ', 'Three', 'Four'])") == ["One", "Two", "Three", "Four"]
    await wait_texts(page, STARTER_BUTTONS, ["One", "Two", "Three", "Four"])
    # a bad list changes nothing and says why
    said = await py(page, "from widget.errors import ConfigError\ntry:\n    client.set_starters(['a'] * 5)\n"
                          "except ConfigError as e:\n    _said = str(e)\n_said")
    assert said == "starters has 5 entries; at most 4 are shown"
    said = await page.evaluate(
        "() => window.Autopilot.setStarters(['ok', ' ']).then(() => 'accepted', (e) => e.message)")
    assert said == "starters[1] is empty"
    said = await page.evaluate(
        "() => window.Autopilot.setStarters('Hello').then(() => 'accepted', (e) => e.message)")
    assert said == "[autopilot] setStarters(starters) needs an array of strings, or null"
    assert await texts(page, STARTER_BUTTONS) == ["One", "Two", "Three", "Four"]
    # from JS: replaced, cleared (an empty list: no starters), and back to the app's (null)
    assert await page.evaluate("() => window.Autopilot.setStarters(['From JS'])") == ["From JS"]
    await wait_texts(page, STARTER_BUTTONS, ["From JS"])
    assert await page.evaluate("() => window.Autopilot.setStarters([])") == []
    await wait_texts(page, STARTER_BUTTONS, [])
    assert await page.is_hidden(q(".starters")) and await page.is_visible(q(".empty"))
    assert await page.evaluate("() => window.Autopilot.setStarters(null)") == STARTERS
    await wait_texts(page, STARTER_BUTTONS, STARTERS)
    # the page's starters stay for the page: a new chat shows them again, a press sends them
    await py(page, "client.set_starters(['Mine'])")
    await new_chat(page)
    await wait_texts(page, STARTER_BUTTONS, ["Mine"])
    await page.locator(q(STARTER_BUTTONS)).first.click()
    await wait_turn_done(page, 1)
    assert await last_user_text(page) == "Mine"
    await py(page, "client.set_starters(None)")


PYTHON_PAGE = """<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>starters</title>
</head><body>
<script type="autopilot-python">
from widget import get_client
get_client().set_starters(["From page Python", "Another"])
</script>
<script src="/widget/autopilot.js" data-relay="{relay}" data-app="demo" data-boot="eager"></script>
</body></html>"""

JS_PAGE = """<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>starters</title>
</head><body>
<script>(window.Autopilot ||= []).push((A) => {{ window.__set = A.setStarters(["Queued from JS"]); }});</script>
<script src="/widget/autopilot.js" data-relay="{relay}" data-app="demo" data-boot="eager"></script>
</body></html>"""


@pytest.mark.parametrize("name, html, shown", [
    ("python", PYTHON_PAGE, ["From page Python", "Another"]),
    ("js", JS_PAGE, ["Queued from JS"]),
])
async def test_a_page_sets_its_starters_before_the_boot(browser: Any, starters_relay: RelayServer,
                                                       page_server: PageServer, name: str, html: str,
                                                       shown: list[str]) -> None:
    url = page_server.add(f"/__test__/starters-{name}.html", html.format(relay=starters_relay.url))
    ctx, page, log = await open_page(browser, url)
    try:
        await open_bar(page)
        await wait_texts(page, STARTER_BUTTONS, shown)
        if name == "js":  # the call made before Python was ready was queued, then applied
            assert await page.evaluate("() => window.__set") == shown
        await page.locator(q(STARTER_BUTTONS)).last.click()
        await wait_turn_done(page, 1)
        assert await last_user_text(page) == shown[-1]
        assert log.page_errors == []
    finally:
        await ctx.close()


async def test_axe_finds_no_violation_with_starters_or_suggestions(browser: Any, starters_relay: RelayServer) -> None:
    ctx = await browser.new_context(bypass_csp=True)
    _, page, _ = await open_page(browser, starters_relay.url + "/", context=ctx)
    try:
        await page.add_script_tag(content=axe_source())
        found: dict[str, Any] = {}
        await open_bar(page)
        for scheme in ("light", "dark"):
            await page.emulate_media(color_scheme=scheme)
            await new_chat(page)
            await wait_texts(page, STARTER_BUTTONS, STARTERS)
            found[f"starters {scheme}"] = await violations(page)
            await send(page, "suggest follow-ups")
            await wait_texts(page, SUGGESTION_BUTTONS, list(DEMO_SUGGESTIONS))
            await js_root(page, "r.querySelector('button.suggestion').focus(); return true;")
            found[f"suggestions {scheme}"] = await violations(page)
        assert {k: v for k, v in found.items() if v} == {}
    finally:
        await ctx.close()

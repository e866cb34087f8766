"""axe-core on the demo page in Chromium, shadow DOM included: the widget adds no violation in any state.

States: closed, empty, answers with call pills (one opened), an answer's tools with a rating and its comment
form open (too long) then sent, a stopped call, confirmation, ask-user, an offered action and a form action's
form, the activity log, then the same conversation dark (with a comment form open) and on a phone-sized screen;
last, an answer with its cited sources (markers and rows), light and dark.
Also the two focus cues axe does not measure: the focus ring and the composer's typing ring are 3:1 on the panel.

axe-core comes from the npm registry (``npm pack``, pinned by version and sha256) into the build cache, never from
a CDN; it is injected into the test page only.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import test_bar
from support import ROOT, open_page
from test_bar import js_root, open_bar, py, q, send, user_count, wait_turn_done

pytestmark = pytest.mark.browser

bar_relay = test_bar.fixture_bar_relay  # the fixture, shared with test_bar

AXE_VERSION = "4.14.1"
AXE_SHA256 = "e6b0ce02b84d892e2e33e403485e7f3d6c29e2be6df65daf44d89ba564139745"

#: axe's results for our two hosts only (the demo page's own markup is not what this test is about).
RUN_AXE = """async () => {
  const result = await axe.run(document, {resultTypes: ['violations']});
  const ours = (n) => ['#autopilot-bar-host', '#autopilot-toggle-host'].includes(
    Array.isArray(n.target[0]) ? n.target[0][0] : n.target[0]);
  return result.violations.map((v) => ({id: v.id, impact: v.impact,
      nodes: v.nodes.filter(ours).map((n) => [JSON.stringify(n.target), n.failureSummary])}))
    .filter((v) => v.nodes.length);
}"""


def axe_source() -> str:
    """axe.min.js from the pinned npm tarball (fetched once into the build cache, checked by sha256)."""
    cache = Path(os.environ.get("AUTOPILOT_BUILD_CACHE") or ROOT / ".build-cache") / "test-npm"
    tgz = cache / f"axe-core-{AXE_VERSION}.tgz"

    def digest() -> str:
        return hashlib.sha256(tgz.read_bytes()).hexdigest() if tgz.is_file() else ""

    if digest() != AXE_SHA256:
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "pack", f"axe-core@{AXE_VERSION}", "--pack-destination", str(cache),
                        "--ignore-scripts", "--no-fund", "--no-audit"], check=True, capture_output=True, timeout=600)
    assert digest() == AXE_SHA256, f"{tgz.name} does not match its pinned sha256"
    with tarfile.open(tgz) as tar:
        member = tar.extractfile("package/axe.min.js")
        assert member is not None
        return member.read().decode()


#: Wait until the bar's opening animation and colour transitions (a theme switch) are over: axe measures colours
#: as they are on screen, and a half-faded text is not what a reader is left with. Spinners never finish.
SETTLED = """async () => {
  const roots = [document, ...['autopilot-bar-host', 'autopilot-toggle-host'].map(
    (id) => document.getElementById(id)).filter(Boolean).map((h) => h.shadowRoot)];
  const bar = document.getElementById('autopilot-bar-host').shadowRoot;
  for (const el of bar.querySelectorAll('*')) getComputedStyle(el).color;
  await new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(ok)));
  const running = roots.flatMap((r) => r.getAnimations())
    .filter((a) => a.effect && a.effect.getComputedTiming().iterations !== Infinity);
  await Promise.all(running.map((a) => a.finished.catch(() => null)));
  return running.length;
}"""


async def violations(page: Any) -> list[dict[str, Any]]:
    await page.evaluate(SETTLED)
    return await page.evaluate(RUN_AXE)


async def ring_contrast(page: Any) -> dict[str, float]:
    """Contrast of the focus ring on a focused header button and of the composer's typing ring, on the panel."""
    return await js_root(page, """
        const rgb = (c) => c.match(/[\\d.]+/g).slice(0, 3).map(Number);
        const lum = (c) => { const [r, g, b] = rgb(c).map((v) => { v /= 255;
            return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
            return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
        const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
            return (x + .05) / (y + .05); };
        const bg = getComputedStyle(r.querySelector('.panel')).backgroundColor;
        const row = getComputedStyle(r.querySelector('.composer-row'));
        const button = r.querySelector('button.new-chat');
        const before = r.activeElement;
        button.focus({focusVisible: true});
        const s = getComputedStyle(button);
        const out = {ring: s.outlineStyle === 'solid' ? ratio(s.outlineColor, bg) : 0,
                     ringWidth: parseFloat(s.outlineWidth)};
        r.querySelector('textarea.input').focus();
        const typing = getComputedStyle(r.querySelector('.composer-row'));
        out.typing = typing.outlineStyle === 'solid' ? ratio(typing.outlineColor, bg) : 0;
        out.typingWidth = parseFloat(typing.outlineWidth);
        out.unfocused = row.outlineStyle;
        return out;""")


@pytest.fixture(scope="module")
def axe() -> str:
    return axe_source()


async def test_axe_finds_no_violation_of_ours_in_any_state(browser, bar_relay, axe):
    ctx = await browser.new_context(bypass_csp=True)
    _, page, _ = await open_page(browser, bar_relay.url + "/", context=ctx)
    found: dict[str, Any] = {}

    async def check(state: str) -> None:
        if not await page.evaluate("() => !!window.axe"):
            await page.add_script_tag(content=axe)
        got = await violations(page)
        if got:
            found[state] = got

    try:
        await check("closed")
        await open_bar(page)
        assert await page.is_visible(q(".empty"))
        await check("empty")
        # Answers with Markdown and call pills, one pill opened.
        await send(page, "Hello **there**, `code` and [a link](https://example.com)")
        await send(page, 'add_to_cart {"sku": "nimbus"}')
        await js_root(page, "r.querySelector('.call').open = true; return true;")
        await check("answer with pills")
        # The answer tools (copy, thumbs) with a rating, its comment form open with the too-long message, then
        # the thanks once a comment is stored.
        answer = page.locator(q(".messages > .message.assistant >> nth=-1"))
        assert await answer.locator(".answer-tools button.copy").count() >= 2
        await answer.locator("button.rate-down").click()
        box = answer.locator("textarea.comment-input")
        await box.fill("x" * 2001)
        await answer.locator(".comment-error").wait_for()
        await check("comment form")
        await box.fill("A short comment")
        await answer.locator("button.comment-send").click()
        await answer.locator(".answer-status").filter(has_text="Thanks").wait_for()
        await check("comment sent")
        # A call the reader stopped.
        n = await user_count(page)
        await send(page, 'check_stock {"sku": "nimbus"}', wait=False)
        await page.wait_for_selector(q('.call[data-status="running"]'))
        await page.click(q("button.stop"))
        await wait_turn_done(page, n + 1)
        await check("stopped call")
        # A confirmation.
        n = await user_count(page)
        await send(page, "empty_cart please", wait=False)
        await page.wait_for_selector(q(".confirm"))
        await check("confirmation")
        await page.click(q("button.deny"))
        await wait_turn_done(page, n + 1)
        # Ask-user.
        n = await user_count(page)
        await send(page, "Before you pick, ask me", wait=False)
        form = page.locator(q("form.ask-user"))
        await form.wait_for()
        await check("ask-user")
        await form.locator(".ask-option").filter(has_text="Green").click()
        await form.locator("button.ask-submit").click()
        await wait_turn_done(page, n + 1)
        # An offered action, and a form action's form.
        await py(page, """
async def support(args, ctx):
    return {"message": "Thanks"}
REMOVE = client.register_tool("contact_support", support)
True""")
        await send(page, 'offer care_guide {"sku": "ember"}')
        await page.wait_for_selector(q(".message:last-child .action"))
        await send(page, 'offer contact_support {"email": "ada@example.com", "lamp": "halo"}')
        await page.locator(q(".message:last-child button.action-button")).click()
        await page.wait_for_selector(q("form.action-form"))
        await page.click(q("form.action-form button.action-send"))  # a refused Send: field errors shown
        await page.wait_for_selector(q(".action-field-error:not(:empty)"))
        await check("actions and forms")
        # The activity log, with its entries opened.
        await page.click(q("button.activity-button"))
        await page.wait_for_selector(q(".activity-entry"))
        await js_root(page, "for (const d of r.querySelectorAll('.activity-entry')) d.open = true; return true;")
        await check("activity log")
        light = await ring_contrast(page)
        await page.click(q("button.activity-button"))
        # Dark, then a phone-sized screen (the full-screen sheet).
        await page.emulate_media(color_scheme="dark")
        await check("dark")
        rated = page.locator(q(".message.assistant:has(button.rate-down[aria-pressed='true'])")).last
        await rated.locator("button.comment-toggle").click()
        await rated.locator("form.comment-form").wait_for()
        await check("dark comment form")
        await page.keyboard.press("Escape")
        await rated.locator("form.comment-form").wait_for(state="detached")
        await page.click(q("button.activity-button"))
        await check("dark activity log")
        dark = await ring_contrast(page)
        await page.click(q("button.activity-button"))
        await page.emulate_media(color_scheme="light")
        await page.set_viewport_size({"width": 360, "height": 740})
        await check("phone")
        # An answer with its cited sources: markers in the text and the rows under it (synthetic relay events handed
        # to the client's transport; the last step, so their seq never meets the relay's own), light then dark.
        await page.set_viewport_size({"width": 1280, "height": 720})
        await py(page, """
def _ev(name, payload):
    client.transport._handler(name, {**payload, "seq": client.seq.last_seq + 1})
_text = "Colours come from custom properties [s1]; your cart from the page [t2], limits from [s3]."
_sources = [
    {"id": "s1", "n": 1, "kind": "docs", "title": "Theming › Colours", "url": js.location.origin + "/docs/#colours"},
    {"id": "t2", "n": 2, "kind": "tool", "title": "Cart contents"},
    {"id": "s3", "n": 3, "kind": "docs", "title": "Plans › Limits", "url": "https://docs.example.com/plans/#limits"}]
_ev("completion.started", {"turn_id": "t-axe-src", "message_id": "axe-src"})
_ev("completion_stream", {"message_id": "axe-src", "delta": _text})
_ev("completion.ended", {"message": {"id": "axe-src", "role": "assistant", "content": _text, "sources": _sources},
                         "tool_messages": []})
_ev("completion.finished", {"turn_id": "t-axe-src", "status": "done"})
True""")
        await page.wait_for_selector(q('[data-key="axe-src"] ol.sources > li:nth-child(3)'))
        await page.locator(q('[data-key="axe-src"] a.cite')).first.click()  # the focus on its row
        await check("sources")
        await page.emulate_media(color_scheme="dark")
        await check("dark sources")
        assert found == {}, json.dumps(found, indent=1)
        for rings in (light, dark):
            assert rings["ring"] >= 3 and rings["ringWidth"] >= 2, rings
            assert rings["typing"] >= 3 and rings["typingWidth"] >= 2, rings
    finally:
        await ctx.close()

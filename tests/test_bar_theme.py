"""Theming from the host page, style isolation both ways, light/dark, and the 360 px phone sheet (Chromium)."""

from __future__ import annotations

from typing import Any

import pytest
from support import open_page
from test_bar import fixture_bar_relay, js_root, open_bar, q, send  # noqa: F401

pytestmark = pytest.mark.browser

SCRIPT = ('<script src="/widget/autopilot.js" data-relay="{relay}" data-app="demo" data-boot="eager" '
          'data-open="true" {extra}></script>')

THEMED = """<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>themed</title>
<style>
  :root {
    --autopilot-accent: rgb(200, 30, 90);
    --autopilot-radius: 4px;
    --autopilot-font: "Courier New", monospace;
    --autopilot-width: 333px;
    --autopilot-offset-x: 40px;
    --autopilot-surface: rgb(250, 240, 230);
  }
  @media (prefers-color-scheme: dark) { :root { --autopilot-surface: rgb(20, 10, 40); } }
  #autopilot-bar-host::part(panel) { border-width: 3px; }
  #autopilot-bar-host::part(title) { letter-spacing: 2px; }
</style></head><body><p>A themed page.</p>
""" + SCRIPT + "</body></html>"

AGGRESSIVE = """<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>hostile</title>
<style>
  html { font-size: 40px; }
  * { color: rgb(255, 0, 0) !important; font-family: Georgia, serif !important; line-height: 3 !important;
      letter-spacing: 5px !important; text-transform: uppercase !important; box-sizing: content-box !important; }
  div, section, header, form, button, textarea, ol, li, p, span {
      margin: 17px !important; padding: 13px !important; background: rgb(0, 255, 0) !important;
      border: 4px dashed blue !important; display: block !important; position: static !important;
      transform: translateX(30px) !important; opacity: 0.6 !important; filter: blur(1px) !important; }
  button { width: 300px !important; height: 90px !important; }
  .panel, .message, .header, .input, .send, .toggle, .composer, .bubble { outline: 9px solid rgb(1, 2, 3) !important; }
</style>
<script>
  window.addEventListener("DOMContentLoaded", () => {
    const pick = (el) => { const s = getComputedStyle(el); return [s.color, s.backgroundColor, s.position, s.margin,
      s.outlineWidth, s.fontFamily, s.width, s.borderTopStyle, s.lineHeight]; };
    window.__before = ["#page-panel", "#page-send", "#page-message", "p", "body"].map(
      (sel) => pick(document.querySelector(sel)));
    window.__pick = pick;
  });
</script></head><body>
<div class="panel" id="page-panel">A page element named like our panel</div>
<button class="send toggle" id="page-send" type="button">page button</button>
<p class="message bubble" id="page-message">A page paragraph.</p>
""" + SCRIPT + "</body></html>"


async def themed(browser: Any, page_server: Any, relay: Any, name: str, html: str, extra: str = "", **ctx_opts: Any):
    url = page_server.add(f"/__test__/{name}.html", html.replace("{relay}", relay.url).replace("{extra}", extra))
    ctx = await browser.new_context(**ctx_opts)
    _, page, log = await open_page(browser, url, context=ctx)
    await page.wait_for_selector(q("section.panel"), state="visible")
    return ctx, page, log


async def style(page: Any, selector: str, *props: str) -> list[str]:
    return await js_root(
        page,
        "const s = getComputedStyle(r.querySelector(arg[0])); return arg[1].map((p) => s.getPropertyValue(p));",
        [selector, list(props)],
    )


async def test_host_page_overrides_custom_properties_and_parts(browser, page_server, bar_relay):
    ctx, page, log = await themed(browser, page_server, bar_relay, "themed", THEMED, 'data-position="bottom-left"')
    try:
        width, radius, font, border, left, bg = await style(
            page, ".panel", "width", "border-top-left-radius", "font-family", "border-top-width", "left",
            "background-color")
        assert (width, radius, border, left) == ("333px", "4px", "3px", "40px")
        assert font.startswith('"Courier New"')
        assert bg == "rgb(250, 240, 230)"
        assert (await style(page, ".send", "background-color")) == ["rgb(200, 30, 90)"]
        assert (await style(page, ".title", "letter-spacing")) == ["2px"]
        toggle_bg = await page.evaluate(
            "getComputedStyle(document.getElementById('autopilot-toggle-host').shadowRoot"
            ".querySelector('button')).backgroundColor")
        assert toggle_bg == "rgb(200, 30, 90)"
        # bottom-left: the toggle moved too.
        box = await page.locator("#autopilot-toggle-host").bounding_box()
        assert box["x"] < 100
        assert log.console_errors == [] and log.page_errors == []
    finally:
        await ctx.close()


async def test_dark_scheme_defaults_page_overrides_and_forced_theme(browser, page_server, bar_relay):
    ctx, page, log = await themed(browser, page_server, bar_relay, "dark", THEMED, color_scheme="dark")
    try:
        # The page's own dark value wins over our dark default.
        assert await style(page, ".panel", "background-color") == ["rgb(20, 10, 40)"]
        # Without a page value, our dark defaults apply (text colour is light).
        text = (await style(page, ".panel", "color"))[0]
        r, g, b = (int(x) for x in text[4:-1].split(","))
        assert min(r, g, b) > 200
        assert await style(page, ".panel", "color-scheme") == ["dark"]
        # A forced light theme on the host, in a dark browser.
        await page.evaluate("document.getElementById('autopilot-bar-host').dataset.theme = 'light'")
        text = (await style(page, ".panel", "color"))[0]
        r, g, b = (int(x) for x in text[4:-1].split(","))
        assert max(r, g, b) < 60
    finally:
        await ctx.close()


async def test_hostile_page_styles_do_not_leak_in_and_ours_do_not_leak_out(browser, page_server, bar_relay):
    ctx, page, log = await themed(browser, page_server, bar_relay, "hostile", AGGRESSIVE)
    try:
        await send(page, "Hello from a hostile page")
        # Nothing of ours reached the page's elements, even those named like our parts.
        after = await page.evaluate(
            "['#page-panel', '#page-send', '#page-message', 'p', 'body'].map(s => "
            "window.__pick(document.querySelector(s)))")
        assert after == await page.evaluate("window.__before")
        assert await page.evaluate("getComputedStyle(document.querySelector('#page-panel')).position") == "static"
        # Nothing of the page reached the bar.
        pos, color, font, lh, ls, tt, transform, opacity, filt, outline = await style(
            page, ".panel", "position", "color", "font-family", "line-height", "letter-spacing", "text-transform",
            "transform", "opacity", "filter", "outline-width")
        assert pos == "fixed" and color != "rgb(255, 0, 0)" and "Georgia" not in font
        assert lh != "normal" and float(lh[:-2]) < 30 and ls == "normal" and tt == "none"
        assert transform == "none" and opacity == "1" and filt == "none" and outline != "9px"
        for part in (".send", ".input", ".messages", ".message.user .bubble", ".header", ".composer"):
            bg, margin, bs, width_out = await style(page, part, "background-color", "margin-top", "border-top-style",
                                                    "outline-width")
            assert bg != "rgb(0, 255, 0)" and margin != "17px" and bs != "dashed" and width_out != "9px", part
        # The panel sits where our skin puts it, inside the viewport, and the host's rules did not move it.
        box = await page.locator(q("section.panel")).bounding_box()
        assert box["x"] + box["width"] <= 1280 - 19 and box["width"] <= 401
        toggle = await page.locator("#autopilot-toggle-host >> button.toggle").bounding_box()
        assert (round(toggle["width"]), round(toggle["height"])) == (56, 56)
        host_pos = await page.evaluate("getComputedStyle(document.getElementById('autopilot-toggle-host')).position")
        assert host_pos == "fixed"
        user = page.locator(q(".message.user .content")).last
        assert await user.text_content() == "Hello from a hostile page"  # not uppercased, not red
        assert (await style(page, ".message.user .bubble", "text-transform")) == ["none"]
    finally:
        await ctx.close()


async def test_phone_viewport_is_a_full_screen_sheet(browser, bar_relay):
    ctx = await browser.new_context(viewport={"width": 360, "height": 740}, is_mobile=True, has_touch=True,
                                    device_scale_factor=2, reduced_motion="reduce")
    _, page, log = await open_page(browser, bar_relay.url + "/", context=ctx)
    try:
        await open_bar(page)
        box = await page.locator(q("section.panel")).bounding_box()
        assert (box["x"], box["y"], box["width"], box["height"]) == (0, 0, 360, 740)
        await send(page, "A long one: https://example.com/" + "very-long-path-segment/" * 8 + " and `code`")
        await send(page, 'list_products {"x": "' + "y" * 120 + '"}')
        # Nothing is wider than the screen; long URLs and code wrap or scroll inside their own box.
        overflow = await js_root(page, """
            const out = [];
            for (const el of r.querySelectorAll('*')) {
              const b = el.getBoundingClientRect();
              if (b.width && (b.right > 360.5 || b.left < -0.5) && !el.closest('pre, table, .call-text'))
                out.push(el.className || el.tagName);
            }
            const p = r.querySelector('.panel'), s = r.querySelector('.scroller');
            if (p.scrollWidth > p.clientWidth || s.scrollWidth > s.clientWidth) out.push('scroll');
            return out;""")
        assert overflow == []
        # Tap targets in the header and the composer are at least 40 px.
        for sel in ("button.new-chat", "button.activity-button", "button.close"):
            b = await page.locator(q(sel)).bounding_box()
            assert b["width"] >= 40 and b["height"] >= 40, sel
        send_box = await page.locator(q("button.send")).bounding_box()
        assert send_box["y"] + send_box["height"] <= 740
        # 16 px input: phones do not zoom into it.
        assert await style(page, ".input", "font-size") == ["16px"]
        await page.click(q("button.close"))
        assert await page.is_hidden(q("section.panel"))
    finally:
        await ctx.close()

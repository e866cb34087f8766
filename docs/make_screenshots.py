"""Regenerate the screenshots in docs/ (the open bar on the demo page: light, dark, phone).

    python docs/make_screenshots.py

Each shot is a fresh browser context on the demo page with the embedded demo model (no delays): a question with a
Markdown answer, a page function with its timing pill; the dark one also waits on a sensitive function's
confirmation prompt.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent))

from support import CHROMIUM, CHROMIUM_ARGS, start_relay, wait_mark  # noqa: E402

BAR = "#autopilot-bar-host"
SHOTS = [
    ("screenshot-light.png", {"viewport": {"width": 1280, "height": 800}, "color_scheme": "light"}, False),
    ("screenshot-dark.png", {"viewport": {"width": 1280, "height": 800}, "color_scheme": "dark"}, True),
    ("screenshot-phone.png", {"viewport": {"width": 360, "height": 740}, "color_scheme": "light", "is_mobile": True,
                              "has_touch": True, "device_scale_factor": 2}, False),
]
IDLE = """(n) => { const r = document.getElementById('autopilot-bar-host').shadowRoot;
    const msgs = r.querySelectorAll('.messages > .message');
    return r.querySelectorAll('.message.user').length >= n && msgs.length
      && !msgs[msgs.length - 1].classList.contains('user') && r.querySelector('.stop').hidden; }"""


async def ask(page, text: str, n: int, wait: bool = True) -> None:
    box = page.locator(f"{BAR} >> textarea.input")
    await box.fill(text)
    await box.press("Enter")
    if wait:
        await page.wait_for_function(IDLE, arg=n)


async def shoot(browser, url: str, name: str, options: dict, confirm: bool) -> None:
    ctx = await browser.new_context(reduced_motion="reduce", **options)
    page = await ctx.new_page()
    await page.goto(url)
    await wait_mark(page, "autopilot:joined")
    await page.click("#autopilot-toggle-host >> button.toggle")
    await ask(page, "Hello! What can you do on this page?", 1)
    await ask(page, 'Please add_to_cart {"sku": "aurora", "quantity": 2}', 2)
    if confirm:
        await ask(page, "Now empty_cart, please", 3, wait=False)
        await page.wait_for_selector(f"{BAR} >> .confirm")
    await page.evaluate("document.activeElement && document.activeElement.blur()")
    await asyncio.sleep(0.3)
    await page.screenshot(path=str(HERE / name))
    await ctx.close()


async def main() -> None:
    from playwright.async_api import async_playwright

    from build import build

    build(quiet=True)
    relay = start_relay(Path(tempfile.mkdtemp()), extra=["--demo-chunk-delay-ms", "0"])
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for name, options, confirm in SHOTS:
                await shoot(browser, relay.url + "/", name, options, confirm)
                print("wrote", HERE / name)
            await browser.close()
    finally:
        relay.stop()


if __name__ == "__main__":
    asyncio.run(main())

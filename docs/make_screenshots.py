"""Regenerate the screenshots in docs/ (the open bar on the demo page: light, dark, phone).

    python docs/make_screenshots.py
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from support import CHROMIUM, CHROMIUM_ARGS, start_relay, wait_mark  # noqa: E402

SHOTS = [
    ("screenshot-light.png", {"viewport": {"width": 1280, "height": 760}, "color_scheme": "light"}),
    ("screenshot-dark.png", {"viewport": {"width": 1280, "height": 760}, "color_scheme": "dark"}),
    ("screenshot-phone.png", {"viewport": {"width": 360, "height": 740}, "color_scheme": "light", "is_mobile": True}),
]


async def shoot(browser, url: str, name: str, options: dict) -> None:
    ctx = await browser.new_context(**options)
    page = await ctx.new_page()
    await page.goto(url)
    await wait_mark(page, "autopilot:joined")
    await page.click("#autopilot-toggle-host >> button.toggle")
    box = page.locator("#autopilot-bar-host >> textarea")
    await box.fill("What lamps do you have? Please call list_products")
    await box.press("Enter")
    await page.wait_for_function(
        "() => window.Autopilot.pyodide.runPython('from widget import get_client; "
        "c = get_client(); len(c.messages) >= 3 and not c.session.is_streaming')"
    )
    await asyncio.sleep(0.3)
    await page.screenshot(path=str(HERE / name))
    await ctx.close()


async def main() -> None:
    from playwright.async_api import async_playwright

    relay = start_relay(Path(tempfile.mkdtemp()), extra=["--demo-chunk-delay-ms", "0"])
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for name, options in SHOTS:
                await shoot(browser, relay.url + "/", name, options)
                print("wrote", HERE / name)
            await browser.close()
    finally:
        relay.stop()


if __name__ == "__main__":
    asyncio.run(main())

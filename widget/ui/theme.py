"""Following the host page's light or dark theme (a page's ``data-theme`` on the bar's host overrides it).

A site with its own theme switch (MkDocs-Material's palette toggle, a Tailwind ``dark`` class, Bootstrap's
``data-bs-theme``) may show a dark page in a light browser or the other way round. The bar follows what the page
shows: first the common theme attributes and classes on ``<html>`` and ``<body>``, then the page's computed
``color-scheme`` when it names one scheme, then the computed background of ``<body>`` / ``<html>`` when it is
opaque. With none of these the browser's ``prefers-color-scheme`` decides, as before. The answer goes on the host
as ``data-page-theme``; the skin prefers ``data-theme`` (the page's explicit choice) over it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from .dom import Listeners, absent

Theme = Literal["light", "dark"]

#: Attributes sites put their theme in (MkDocs-Material, generic, Bootstrap, GitHub-style, Docusaurus-style).
ATTRIBUTES = ("data-md-color-scheme", "data-theme", "data-bs-theme", "data-color-scheme", "data-color-mode",
              "data-mode")
#: Values of those attributes (and class names) that name a theme; anything else ("auto", "system") says nothing.
WORDS: dict[str, Theme] = {
    "dark": "dark", "slate": "dark", "night": "dark", "black": "dark", "dark-mode": "dark", "theme-dark": "dark",
    "dark-theme": "dark",
    "light": "light", "default": "light", "day": "light", "white": "light", "light-mode": "light",
    "theme-light": "light", "light-theme": "light",
}
CLASSES = ("dark", "dark-mode", "theme-dark", "dark-theme", "light", "light-mode", "theme-light", "light-theme")

_RGB = re.compile(r"rgba?\(\s*([\d.]+)[,\s]+([\d.]+)[,\s]+([\d.]+)(?:\s*[,/]\s*([\d.]+%?))?\s*\)")


def background_theme(css_color: str) -> Theme | None:
    """``dark`` or ``light`` from a computed ``rgb()``/``rgba()`` background; None when mostly transparent."""
    m = _RGB.fullmatch(css_color.strip())
    if m is None:
        return None
    alpha_text = m.group(4)
    alpha = 1.0 if alpha_text is None else (float(alpha_text[:-1]) / 100 if alpha_text.endswith("%")
                                             else float(alpha_text))
    if alpha < 0.5:
        return None
    r, g, b = (float(m.group(i)) / 255 for i in (1, 2, 3))

    def lin(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    luminance = 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)
    return "dark" if luminance < 0.18 else "light"  # 0.18: mid-grey, where black and white text contrast equally


def scheme_theme(color_scheme: str) -> Theme | None:
    """``dark`` or ``light`` when a computed ``color-scheme`` names exactly one of them."""
    words = set(color_scheme.split()) - {"only"}
    if words == {"dark"}:
        return "dark"
    if words == {"light"}:
        return "light"
    return None


class PageTheme:
    """Watches the page's theme and mirrors it on the bar's host; ``close`` stops watching."""

    def __init__(self, js: Any, listeners: Listeners, host: Any) -> None:
        self._host = host
        self._js = js
        self.theme: Theme | None = None
        self._observer = js.MutationObserver.new(listeners.proxy(lambda records, observer: self.update()))
        watched = ["class", "style", *ATTRIBUTES]
        options = js.JSON.parse('{"attributes": true, "attributeFilter": ' + json.dumps(watched) + "}")
        self._observer.observe(js.document.documentElement, options)
        if not absent(js.document.body):
            self._observer.observe(js.document.body, options)
        try:
            self._media = js.matchMedia("(prefers-color-scheme: dark)")
            listeners.add(self._media, "change", lambda e: self.update())
        except Exception:  # noqa: BLE001 - no matchMedia: the theme still follows the page's attributes
            self._media = None
        self.update()

    def detect(self) -> Theme | None:
        """What the page shows now (None: it says nothing; the browser's preference decides)."""
        doc = self._js.document
        elements = [el for el in (doc.documentElement, doc.body) if not absent(el)]
        for el in elements:
            for attr in ATTRIBUTES:
                value = el.getAttribute(attr)
                if not absent(value) and str(value).strip().lower() in WORDS:
                    return WORDS[str(value).strip().lower()]
            for cls in CLASSES:
                if el.classList.contains(cls):
                    return WORDS.get(cls, "dark" if "dark" in cls else "light")
        get_style = self._js.getComputedStyle
        found = scheme_theme(str(get_style(doc.documentElement).colorScheme or ""))
        if found is not None:
            return found
        for el in reversed(elements):  # the body's background is what surrounds the content
            found = background_theme(str(get_style(el).backgroundColor or ""))
            if found is not None:
                return found
        return None

    def update(self) -> None:
        """Look again and mirror the answer on the host."""
        try:
            theme = self.detect()
        except Exception:  # noqa: BLE001 - a page in the middle of being torn down: keep what was shown
            return
        if theme == self.theme:
            return
        self.theme = theme
        if theme is None:
            self._host.removeAttribute("data-page-theme")
        else:
            self._host.setAttribute("data-page-theme", theme)

    def close(self) -> None:
        """Stop watching (the listeners' proxies go with the bar's)."""
        self._observer.disconnect()

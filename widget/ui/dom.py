"""DOM helpers of the bar: element factories, icons, listener bookkeeping and small text helpers (Pyodide only).

Everything here is shared by the bar's parts (``widget.ui.bar`` and its sibling modules); none of it holds
conversation state.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

try:  # Pyodide: JS null is its own object, not None
    from pyodide.ffi import jsnull as _JSNULL
except ImportError:  # pragma: no cover - CPython
    _JSNULL = None

_live_proxies = 0

_SVG = '<svg viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" ' \
       'stroke-linejoin="round" aria-hidden="true" focusable="false">{}</svg>'
ICONS = {
    "chat": _SVG.format('<path d="M21 15a2 2 0 0 1-2 2H7l-4 4V5a2 2 0 0 1 2-2h14a2 2 0 0 1 2 2z"/>'),
    "close": _SVG.format('<path d="M18 6 6 18M6 6l12 12"/>'),
    "chevron": _SVG.format('<path d="m6 9 6 6 6-6"/>'),
    "new": _SVG.format('<path d="M12 20h9"/><path d="M16.5 3.5a2.1 2.1 0 0 1 3 3L7 19l-4 1 1-4z"/>'),
    "activity": _SVG.format('<path d="M22 12h-4l-3 9L9 3l-3 9H2"/>'),
    "history": _SVG.format('<path d="M3 12a9 9 0 1 0 3-6.7L3 8"/><path d="M3 3v5h5"/><path d="M12 7v5l3 2"/>'),
    "trash": _SVG.format('<path d="M3 6h18"/><path d="M8 6V4h8v2"/><path d="M19 6l-1 14H6L5 6"/>'
                         '<path d="M10 11v6M14 11v6"/>'),
    "back": _SVG.format('<path d="m15 18-6-6 6-6"/>'),
    "send": _SVG.format('<path d="M12 19V5M5 12l7-7 7 7"/>'),
    "stop": _SVG.format('<rect x="6" y="6" width="12" height="12" rx="2" fill="currentColor" stroke="none"/>'),
    "spark": _SVG.format('<path d="M12 3l1.9 5.1L19 10l-5.1 1.9L12 17l-1.9-5.1L5 10l5.1-1.9z"/>'
                         '<path d="M19 15l.8 2.2L22 18l-2.2.8L19 21l-.8-2.2L16 18l2.2-.8z"/>'),
    "check": _SVG.format('<path d="M20 6 9 17l-5-5"/>'),
    # our own thumb: a cuff and a hand; the "down" one is the same turned over (emoji need a font the
    # reader's system may lack: headless Chromium drew empty boxes)
    "thumb_up": _SVG.format('<path d="M3 10h4v11H3z"/><path d="M7 10l4-7c1.4 0 2.5 1.1 2.5 2.5V9h5.3a2 2 0 0 1 2 2.3'
                            'l-1.2 7.6A2.5 2.5 0 0 1 17.1 21H7"/>'),
    "thumb_down": _SVG.format('<g transform="rotate(180 12 12)"><path d="M3 10h4v11H3z"/><path d="M7 10l4-7c1.4 0 '
                              '2.5 1.1 2.5 2.5V9h5.3a2 2 0 0 1 2 2.3l-1.2 7.6A2.5 2.5 0 0 1 17.1 21H7"/></g>'),
    "error": _SVG.format('<circle cx="12" cy="12" r="9"/><path d="M15 9l-6 6M9 9l6 6"/>'),
    "running": _SVG.format('<path d="M21 12a9 9 0 1 1-6.2-8.6"/>'),
    "fn": _SVG.format('<path d="M10 20c2 0 2.5-1.5 3-4l1.5-8c.4-2.5 1-4 3-4"/><path d="M8 10h8"/>'),
    "retry": _SVG.format('<path d="M3 12a9 9 0 0 1 15.5-6.3L21 8"/><path d="M21 3v5h-5"/>'
                         '<path d="M21 12a9 9 0 0 1-15.5 6.3L3 16"/><path d="M3 21v-5h5"/>'),
}

#: What the Tab key cycles through inside the panel.
FOCUSABLE = (
    "button:not([disabled]), textarea:not([disabled]), input:not([disabled]), select:not([disabled]), summary, "
    'a[href], [tabindex]:not([tabindex="-1"])'
)


#: Explicit embeddings and overrides (LRE, RLE, LRO, RLO) become first-strong isolates (FSI), their closer (PDF)
#: the isolate's (PDI). An override reverses every character after it up to the end of its paragraph, so one
#: hostile character could make the rest of a line read backwards; a first-strong isolate only gives the text
#: after it the direction of its own first letter (Arabic right to left, Latin left to right) and cannot reorder
#: anything outside it. Same length, so streaming text stays a prefix of itself.
_NO_OVERRIDES = str.maketrans({"\u202a": "\u2068", "\u202b": "\u2068", "\u202d": "\u2068", "\u202e": "\u2068",
                               "\u202c": "\u2069"})


def bidi_safe(text: str) -> str:
    """Model, page or reader text with its bidi overrides made harmless (see ``_NO_OVERRIDES``)."""
    return text.translate(_NO_OVERRIDES)


def live_proxies() -> int:
    """JS proxies created by bars and not destroyed yet (0 once every bar is destroyed)."""
    return _live_proxies


def absent(value: Any) -> bool:
    """Whether a JS value is null/undefined (or Python's None)."""
    return value is None or (_JSNULL is not None and value is _JSNULL)


def has(obj: Any, name: str) -> bool:
    """``hasattr`` that survives a JS getter that throws."""
    try:
        return hasattr(obj, name)
    except Exception:  # noqa: BLE001 - a JS getter may throw
        return False


def fmt_ms(value: float | None) -> str | None:
    """Milliseconds as shown in a pill: one decimal under 10, whole numbers above."""
    if value is None:
        return None
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def as_text(value: Any) -> str:
    """Model/page data as readable text (never HTML)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def option_text(value: Any) -> str:
    """A schema value as form text: JSON for booleans, no trailing .0 on whole numbers."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def message_key(m: dict[str, Any], index: int) -> str:
    """The key a message's view is kept under: its id, else its position."""
    mid = m.get("id")
    return str(mid) if mid is not None else f"i{index}"


def noop() -> None:
    """Nothing (what a destroyed bar's unsubscribe becomes)."""


class Listeners:
    """Every ``addEventListener`` of one bar, with its proxy, so teardown can undo all of them."""

    def __init__(self) -> None:
        self._items: list[tuple[Any, str, Any, bool]] = []
        self._proxies: list[Any] = []

    def proxy(self, fn: Callable[..., Any]) -> Any:
        """A counted JS proxy of ``fn`` (destroyed by ``close``)."""
        global _live_proxies
        from pyodide.ffi import create_proxy

        p = create_proxy(fn)
        self._proxies.append(p)
        _live_proxies += 1
        return p

    def add(self, target: Any, event: str, fn: Callable[[Any], Any], capture: bool = False) -> None:
        """``target.addEventListener(event, fn)``, undone by ``close``."""
        p = self.proxy(fn)
        target.addEventListener(event, p, capture)
        self._items.append((target, event, p, capture))

    @property
    def count(self) -> int:
        """Live proxies of this bar."""
        return len(self._proxies)

    def close(self) -> None:
        """Remove every listener and destroy every proxy."""
        global _live_proxies
        for target, event, p, capture in self._items:
            target.removeEventListener(event, p, capture)
        self._items.clear()
        for p in self._proxies:
            p.destroy()
            _live_proxies -= 1
        self._proxies.clear()


class Dom:
    """Element factories bound to one bar's document, labels and title."""

    def __init__(self, js: Any, labels: dict[str, str], title: str) -> None:
        self.js = js
        self.labels = labels
        self.title = title
        self._ids = 0

    def t(self, key: str, **kw: Any) -> str:
        """A label, its ``{title}`` and other placeholders filled in."""
        text = self.labels.get(key, key)
        return text.format(title=self.title, **kw) if ("{" in text) else text

    def el(self, tag: str, cls: str | None = None, *, part: str | None = None, text: str | None = None,
           id: str | None = None) -> Any:
        """A new element; ``text`` is set as text (never parsed as HTML), its bidi overrides made harmless."""
        el = self.js.document.createElement(tag)
        if cls:
            el.className = cls
        if part:
            el.setAttribute("part", part)
        if id:
            el.id = id
        if text is not None:
            el.textContent = bidi_safe(text)
        return el

    def icon(self, name: str, cls: str = "icon") -> Any:
        """A hidden-from-assistive-technology span holding one of our icons."""
        span = self.el("span", cls)
        span.setAttribute("aria-hidden", "true")
        span.innerHTML = ICONS[name]  # our own static markup, never model data
        return span

    def icon_button(self, icon: str, cls: str, label: str, *, action: str | None = None,
                    part: str | None = None) -> Any:
        """A button showing an icon, named by ``label``."""
        b = self.el("button", f"icon-button {cls}", part=part)
        b.type = "button"
        b.setAttribute("aria-label", label)
        b.setAttribute("title", label)
        if action:
            b.setAttribute("data-action", action)
        b.appendChild(self.icon(icon))
        return b

    def text_button(self, label: str, cls: str, action: str, arg: Any = None, part: str | None = None) -> Any:
        """A button with a text label and a ``data-action`` (and ``data-id``) for the delegated click handler."""
        b = self.el("button", cls, part=part or cls, text=label)
        b.type = "button"
        b.setAttribute("data-action", action)
        if arg is not None:
            b.setAttribute("data-id", str(arg))
        return b

    def uid(self, prefix: str) -> str:
        """A fresh element id in this bar's shadow root."""
        self._ids += 1
        return f"ap-{prefix}-{self._ids}"

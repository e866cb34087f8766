"""The bar: a shadow-DOM overlay rendered from the headless store (the only module that touches the DOM).

Runs only under Pyodide. How it stays leak-free and fast:

- **Few proxies, all tracked.** Events are delegated: one listener per event type on the panel (click, keydown,
  submit, input/change) plus the toggle's click, the document's shortcut key and one animation-frame callback.
  Every JS callback is a ``create_proxy`` counted in ``live_proxies()``; ``destroy()`` removes each listener and
  destroys each proxy, so nothing is left behind however long the conversation was.
- **Keyed, batched updates.** Store changes only mark parts dirty; one ``requestAnimationFrame`` renders them.
  While an answer streams, its text is rendered at most 10 times a second (a timer defers the frame): chunks
  arrive at 20–200 a second, a reader follows a few updates a second, and each render costs Markdown, sanitizing,
  style, layout and paint. The interval also grows with what a render costs (down to 4 a second, also the rate
  while the panel is closed), so streaming keeps to ~5 % of the page's main thread on any device and under any
  load. Any other change (a new message, the composer, a confirmation, the end of the answer) renders on the next
  frame.
  Messages, function-call pills, activity entries and confirmations are keyed by id and touched only when their
  signature changed.
- **Incremental Markdown.** A streaming answer goes through ``StreamingRenderer``: finished blocks are rendered,
  sanitized and appended once; only the unfinished tail is re-rendered per frame. That Markdown and sanitizing run
  in the task that asks for the frame (the sanitizer's fragments wait on the view); the frame only inserts them,
  so neither task is long.
- **Two layers of sanitizing.** ``render_markdown`` escapes raw HTML at the source; the sink sanitizer
  (``static/sanitize.mjs``, DOMPurify) inserts the result. Everything else the model provides (function names,
  arguments, results, questions, options, labels) is set with ``textContent``. Without the sanitizer module,
  answers are shown as plain text.
- **Offered actions** (seed 002) are the page's controls, never the model's: a button shows the page's label and,
  on a second line, the model's arguments as text ("With plan: pro", also in its accessible name); a form action's
  button opens a form under the answer with one labelled field per parameter. The outcome replaces the button; a
  failure brings it back with the error. Only live offers are shown (a reload has none).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, Callable

from ..store import (
    ACTION_DONE,
    ACTION_RUNNING,
    WAIT_ASK_USER,
    WAIT_CONFIRMATION,
    WAIT_FUNCTION,
    Store,
    arguments_text,
)
from .labels import merged

log = logging.getLogger("widget")

try:  # Pyodide: JS null is its own object, not None
    from pyodide.ffi import jsnull as _JSNULL
except ImportError:  # pragma: no cover - CPython
    _JSNULL = None

_live_proxies = 0

#: Kept for callers of the first bar (connection-state texts); the bar itself reads the labels table.
STATE_LABELS = {
    "idle": "Not connected",
    "connecting": "Connecting…",
    "connected": "Connected",
    "reconnecting": "Reconnecting…",
    "disconnected": "Disconnected",
    "error": "Connection error",
}

_SVG = '<svg viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" ' \
       'stroke-linejoin="round" aria-hidden="true" focusable="false">{}</svg>'
ICONS = {
    "chat": _SVG.format('<path d="M21 15a2 2 0 0 1-2 2H7l-4 4V5a2 2 0 0 1 2-2h14a2 2 0 0 1 2 2z"/>'),
    "close": _SVG.format('<path d="M18 6 6 18M6 6l12 12"/>'),
    "chevron": _SVG.format('<path d="m6 9 6 6 6-6"/>'),
    "new": _SVG.format('<path d="M12 20h9"/><path d="M16.5 3.5a2.1 2.1 0 0 1 3 3L7 19l-4 1 1-4z"/>'),
    "activity": _SVG.format('<path d="M22 12h-4l-3 9L9 3l-3 9H2"/>'),
    "back": _SVG.format('<path d="m15 18-6-6 6-6"/>'),
    "send": _SVG.format('<path d="M12 19V5M5 12l7-7 7 7"/>'),
    "stop": _SVG.format('<rect x="6" y="6" width="12" height="12" rx="2" fill="currentColor" stroke="none"/>'),
    "spark": _SVG.format('<path d="M12 3l1.9 5.1L19 10l-5.1 1.9L12 17l-1.9-5.1L5 10l5.1-1.9z"/>'
                         '<path d="M19 15l.8 2.2L22 18l-2.2.8L19 21l-.8-2.2L16 18l2.2-.8z"/>'),
    "check": _SVG.format('<path d="M20 6 9 17l-5-5"/>'),
    "error": _SVG.format('<circle cx="12" cy="12" r="9"/><path d="M15 9l-6 6M9 9l6 6"/>'),
    "running": _SVG.format('<path d="M21 12a9 9 0 1 1-6.2-8.6"/>'),
    "fn": _SVG.format('<path d="M10 20c2 0 2.5-1.5 3-4l1.5-8c.4-2.5 1-4 3-4"/><path d="M8 10h8"/>'),
    "retry": _SVG.format('<path d="M3 12a9 9 0 0 1 15.5-6.3L21 8"/><path d="M21 3v5h-5"/>'
                         '<path d="M21 12a9 9 0 0 1-15.5 6.3L3 16"/><path d="M3 21v-5h5"/>'),
}

#: What the Tab key cycles through inside the panel.
_FOCUSABLE = (
    "button:not([disabled]), textarea:not([disabled]), input:not([disabled]), select:not([disabled]), summary, "
    'a[href], [tabindex]:not([tabindex="-1"])'
)


def live_proxies() -> int:
    """JS proxies created by bars and not destroyed yet (0 once every bar is destroyed)."""
    return _live_proxies


def _absent(value: Any) -> bool:
    return value is None or (_JSNULL is not None and value is _JSNULL)


def _fmt_ms(value: float | None) -> str | None:
    if value is None:
        return None
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _as_text(value: Any) -> str:
    """Model/page data as readable text (never HTML)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


class _Listeners:
    """Every ``addEventListener`` of one bar, with its proxy, so teardown can undo all of them."""

    def __init__(self) -> None:
        self._items: list[tuple[Any, str, Any, bool]] = []
        self._proxies: list[Any] = []

    def proxy(self, fn: Callable[..., Any]) -> Any:
        global _live_proxies
        from pyodide.ffi import create_proxy

        p = create_proxy(fn)
        self._proxies.append(p)
        _live_proxies += 1
        return p

    def add(self, target: Any, event: str, fn: Callable[[Any], Any], capture: bool = False) -> None:
        p = self.proxy(fn)
        target.addEventListener(event, p, capture)
        self._items.append((target, event, p, capture))

    @property
    def count(self) -> int:
        return len(self._proxies)

    def close(self) -> None:
        global _live_proxies
        for target, event, p, capture in self._items:
            target.removeEventListener(event, p, capture)
        self._items.clear()
        for p in self._proxies:
            p.destroy()
            _live_proxies -= 1
        self._proxies.clear()


class _MessageView:
    """DOM of one message, with what it last rendered."""

    __slots__ = (
        "key", "role", "el", "body", "stable", "tail", "calls", "call_views", "footer", "footer_sig",
        "text", "renderer", "busy", "stopped", "actions", "action_views", "empty", "pending",
    )

    def __init__(self, key: str, role: str) -> None:
        self.key = key
        self.role = role
        self.call_views: dict[str, _CallView] = {}
        self.action_views: dict[str, _ActionView] = {}
        self.actions: Any = None
        self.footer_sig: Any = None
        self.text: str | None = None
        self.renderer: Any = None
        self.busy = False
        self.stopped = False
        self.tail: Any = None
        self.stable: Any = None
        self.empty: str | None = None  # the body's data-empty value last written
        #: A streaming render prepared outside the frame: (text, sanitized new stable nodes, sanitized tail nodes);
        #: the renderer has already been fed ``text``, the DOM catches up when the frame applies it.
        self.pending: tuple[str, Any, Any] | None = None


class _CallView:
    __slots__ = ("el", "summary", "status", "time", "when", "body", "sig")


class _ActionView:
    """DOM of one offered action: its button, error, status/outcome line and (form actions) its form."""

    __slots__ = ("key", "el", "button", "error", "status", "status_label", "status_text", "form", "form_error",
                 "fields", "send", "sig", "form_sig")

    def __init__(self) -> None:
        self.form: Any = None
        self.form_error: Any = None
        self.fields: dict[str, tuple[Any, Any, Any]] = {}
        self.send: Any = None
        self.sig: Any = None
        self.form_sig: Any = None


class Bar:
    """The overlay bar; create it with ``enable_bar``."""

    #: While an answer streams, render its text at most this often (ms); other changes render on the next frame.
    STREAM_RENDER_INTERVAL_MS = 100.0
    #: ... and wait at least this many times as long as a streaming render took (a moving average of the part
    #: Python sees: Markdown, sanitizing, DOM writes, the forced layout of scrolling; 2.5–3 ms on an idle 2-core
    #: machine, so 8–10 renders a second there). Paint, compositing and the scroll event's frame come on top (a
    #: render costs the main thread ~2× what Python sees), so streaming renders keep to ~5 % of the main thread,
    #: whatever the device or its load ...
    STREAM_RENDER_COST_FACTOR = 40.0
    #: ... but never longer than this (ms), which is also the interval while the panel is closed.
    STREAM_RENDER_MAX_INTERVAL_MS = 250.0

    def __init__(
        self,
        store: Store,
        *,
        loader: Any = None,
        css: str = "",
        title: str | None = None,
        on_retry: Callable[[], Any] | None = None,
        labels: dict[str, str] | None = None,
        position: str | None = None,
        sanitizer: Any = None,
        shortcut: bool = True,
    ) -> None:
        import js

        self.js = js
        self.store = store
        self.loader = loader
        self.labels = merged(labels)
        self.title = title or self.labels["title"]
        self.on_retry = on_retry
        self.sanitizer = sanitizer
        self.is_open = False
        self.activity_open = False
        self._events = _Listeners()
        self._views: dict[str, _MessageView] = {}
        self._order: list[str] = []
        self._activity_views: dict[str, _CallView] = {}
        self._confirm_views: dict[int, Any] = {}
        self._ask_key: tuple[Any, ...] | None = None
        self._ask_tab = 0
        self._dirty: set[str] = set()
        self._frame: Any = None
        self._timer: Any = None  # setTimeout id deferring the next streaming-only frame
        self._last_stream_render = -1e9  # time.monotonic() (s) of the last frame that rendered the stream
        self._stream_render_ms = 0.0  # moving average of what a streaming-only frame took
        self._in_frame = False  # flush() runs from the animation frame (not a direct call)
        self._prepared_ms = 0.0  # what preparing the next streaming render took, outside its frame
        self._stream_behind = False  # the frame showed a prepared render older than the store's text
        self._return_focus: Any = None
        self._destroyed = False
        self._tasks: set[asyncio.Future[Any]] = set()
        self._render_markdown: Any = None
        self._renderer_cls: Any = None
        self._ids = 0
        self._stick = False
        self._composer_sig: Any = None
        self._busy = False
        #: Where focus goes once a pending action change is rendered: ("form" | "invalid", (message_id, action_id)).
        self._action_focus: tuple[str, tuple[str, str]] | None = None
        doc = js.document

        # --- host + shadow root + skin --------------------------------------------------------
        self.host = doc.createElement("div")
        self.host.id = "autopilot-bar-host"
        self.host.setAttribute("data-autopilot", "bar")
        pos = position or (str(loader.position) if loader is not None and _has(loader, "position") else "")
        if pos == "bottom-left":
            self.host.setAttribute("data-position", "bottom-left")
        self.root = self.host.attachShadow(js.JSON.parse('{"mode":"open"}'))
        try:
            sheet = js.CSSStyleSheet.new()
            sheet.replaceSync(css or "")
            self.root.adoptedStyleSheets = js.Array.of(sheet)
        except Exception:  # noqa: BLE001 - no constructable stylesheets: a <style> element
            style = doc.createElement("style")
            style.textContent = css or ""
            self.root.appendChild(style)

        # --- panel ----------------------------------------------------------------------------
        L = self.labels
        self.panel = self._el("section", "panel", part="panel")
        self.panel.setAttribute("role", "dialog")
        self.panel.setAttribute("aria-label", self._t("dialog"))
        self.panel.setAttribute("aria-describedby", "ap-hint")
        self.panel.hidden = True

        header = self._el("header", "header", part="header")
        brand = self._el("div", "brand")
        brand.appendChild(self._icon("spark", "logo"))
        titles = self._el("div", "titles")
        titles.appendChild(self._el("h2", "title", part="title", text=self.title, id="ap-title"))
        self.conn = self._el("span", "connection", part="connection")
        self.conn.setAttribute("role", "status")
        titles.appendChild(self.conn)
        brand.appendChild(titles)
        header.appendChild(brand)
        actions = self._el("div", "header-actions")
        self.new_chat = self._icon_button("new", "new-chat", L["new_chat"], action="new-chat", part="new-chat")
        self.activity_btn = self._icon_button(
            "activity", "activity-button", L["activity_open"], action="activity", part="activity-button"
        )
        self.activity_btn.setAttribute("aria-pressed", "false")
        self.activity_btn.setAttribute("aria-controls", "ap-activity")
        self.close_btn = self._icon_button("close", "close", self._t("close"), action="close", part="close")
        for b in (self.new_chat, self.activity_btn, self.close_btn):
            actions.appendChild(b)
        header.appendChild(actions)

        self.notice = self._el("div", "notice", part="notice")
        self.notice.setAttribute("role", "status")
        self.notice.hidden = True

        body = self._el("div", "body")
        self.scroller = self._el("div", "scroller", part="scroller")
        self.empty = self._el("div", "empty", part="empty")
        self.empty.appendChild(self._icon("spark", "empty-icon"))
        self.empty.appendChild(self._el("p", "empty-title", text=L["empty_title"]))
        self.empty.appendChild(self._el("p", "empty-text", text=L["empty_text"]))
        self.list = self._el("ol", "messages", part="messages")
        self.list.setAttribute("role", "log")
        self.list.setAttribute("aria-live", "polite")
        self.list.setAttribute("aria-label", L["conversation"])
        self.scroller.appendChild(self.empty)
        self.scroller.appendChild(self.list)
        body.appendChild(self.scroller)

        self.activity = self._el("section", "activity", part="activity", id="ap-activity")
        self.activity.setAttribute("aria-labelledby", "ap-activity-title")
        self.activity.hidden = True
        act_head = self._el("div", "activity-head")
        act_head.appendChild(self._icon_button("back", "activity-back", L["activity_close"], action="activity"))
        act_head.appendChild(self._el("h3", "activity-title", text=L["activity_title"], id="ap-activity-title"))
        self.activity.appendChild(act_head)
        self.activity_empty = self._el("p", "activity-empty", text=L["activity_empty"])
        self.activity_list = self._el("ol", "activity-list")
        self.activity.appendChild(self.activity_empty)
        self.activity.appendChild(self.activity_list)
        body.appendChild(self.activity)

        self.confirmations = self._el("div", "confirmations", part="confirmations")
        self.ask = self._el("form", "ask-user", part="ask-user")
        self.ask.setAttribute("data-form", "ask")
        self.ask.setAttribute("novalidate", "")
        self.ask.setAttribute("aria-labelledby", "ap-ask-title")
        self.ask.hidden = True

        self.composer = self._el("form", "composer", part="composer")
        self.composer.setAttribute("data-form", "composer")
        row = self._el("div", "composer-row")
        self.input = self._el("textarea", "input", part="input")
        self.input.setAttribute("aria-label", L["input"])
        self.input.setAttribute("aria-describedby", "ap-hint")
        self.input.setAttribute("placeholder", L["placeholder"])
        self.input.setAttribute("rows", "1")
        self.input.setAttribute("enterkeyhint", "send")
        self.send_btn = self._icon_button("send", "send", L["send"], part="send")
        self.send_btn.type = "submit"
        self.stop_btn = self._icon_button("stop", "stop", L["stop"], action="stop", part="stop")
        self.stop_btn.hidden = True
        row.appendChild(self.input)
        row.appendChild(self.send_btn)
        row.appendChild(self.stop_btn)
        self.composer.appendChild(row)
        self.composer.appendChild(self._el("p", "hint", text=L["hint"], id="ap-hint"))

        for part in (header, self.notice, body, self.confirmations, self.ask, self.composer):
            self.panel.appendChild(part)
        self.root.appendChild(self.panel)

        # --- listeners (delegated) --------------------------------------------------------------
        ev = self._events
        ev.add(self.panel, "click", self._on_click)
        ev.add(self.panel, "keydown", self._on_keydown)
        ev.add(self.panel, "submit", self._on_submit)
        ev.add(self.panel, "change", self._on_change)
        self._frame_cb = ev.proxy(self._on_frame)
        self._timer_cb = ev.proxy(self._on_timer)
        # Looked up once: every attribute read on a JS object is a crossing (~0.05 ms on a cold call path).
        self._raf, self._caf = js.requestAnimationFrame, js.cancelAnimationFrame
        self._set_timeout, self._clear_timeout = js.setTimeout, js.clearTimeout
        if shortcut:
            ev.add(doc, "keydown", self._on_document_keydown)

        (doc.body or doc.documentElement).appendChild(self.host)
        # Take over the loader's toggle: the same element stays on screen, so there is no flash.
        if loader is not None:
            self.toggle = loader.toggleButton
            self.toggle_host = loader.toggleHost
        else:
            self.toggle_host, self.toggle = self._make_toggle()
        ev.add(self.toggle, "click", lambda e: self.toggle_open())
        self.toggle.setAttribute("aria-label", self._t("open"))
        self.toggle.setAttribute("aria-expanded", "false")
        self.toggle.setAttribute("aria-haspopup", "dialog")
        self.toggle.setAttribute("title", self._t("open") + " (Alt+Shift+A)")
        if loader is not None:
            loader.handover()
        self._unsubscribe = store.subscribe(self._on_store)
        self._dirty.update({"status", "messages", "confirmations", "ask_user", "composer"})
        self.flush()

    # --- small DOM helpers ------------------------------------------------------------------------
    def _t(self, key: str, **kw: Any) -> str:
        text = self.labels.get(key, key)
        return text.format(title=self.title, **kw) if ("{" in text) else text

    def _el(self, tag: str, cls: str | None = None, *, part: str | None = None, text: str | None = None,
            id: str | None = None) -> Any:
        el = self.js.document.createElement(tag)
        if cls:
            el.className = cls
        if part:
            el.setAttribute("part", part)
        if id:
            el.id = id
        if text is not None:
            el.textContent = text
        return el

    def _icon(self, name: str, cls: str = "icon") -> Any:
        span = self._el("span", cls)
        span.setAttribute("aria-hidden", "true")
        span.innerHTML = ICONS[name]  # our own static markup, never model data
        return span

    def _icon_button(self, icon: str, cls: str, label: str, *, action: str | None = None,
                     part: str | None = None) -> Any:
        b = self._el("button", f"icon-button {cls}", part=part)
        b.type = "button"
        b.setAttribute("aria-label", label)
        b.setAttribute("title", label)
        if action:
            b.setAttribute("data-action", action)
        b.appendChild(self._icon(icon))
        return b

    def _text_button(self, label: str, cls: str, action: str, arg: Any = None, part: str | None = None) -> Any:
        b = self._el("button", cls, part=part or cls, text=label)
        b.type = "button"
        b.setAttribute("data-action", action)
        if arg is not None:
            b.setAttribute("data-id", str(arg))
        return b

    def _uid(self, prefix: str) -> str:
        self._ids += 1
        return f"ap-{prefix}-{self._ids}"

    def _make_toggle(self) -> tuple[Any, Any]:
        """A toggle of our own when no loader painted one (``enable_bar`` called by page code)."""
        doc = self.js.document
        host = doc.createElement("div")
        host.id = "autopilot-toggle-host"
        host.setAttribute("data-autopilot", "toggle")
        root = host.attachShadow(self.js.JSON.parse('{"mode":"open"}'))
        style = doc.createElement("style")
        style.textContent = TOGGLE_CSS
        button = doc.createElement("button")
        button.className = "toggle"
        button.type = "button"
        button.setAttribute("part", "toggle")
        button.innerHTML = ICONS["chat"]
        root.appendChild(style)
        root.appendChild(button)
        (doc.body or doc.documentElement).appendChild(host)
        return host, button

    # --- open / close -------------------------------------------------------------------------------
    def open(self) -> None:
        """Show the bar and focus the composer (or what waits for the reader)."""
        if self._destroyed:
            return
        if not self.is_open:
            active = self.js.document.activeElement
            self._return_focus = None if _absent(active) or active == self.js.document.body else active
        self.is_open = True
        self.panel.hidden = False
        self.host.setAttribute("data-open", "true")
        self.toggle.setAttribute("aria-expanded", "true")
        self.toggle.setAttribute("aria-label", self._t("close"))
        self.toggle.innerHTML = ICONS["chevron"]
        self.flush()
        self._scroll_to_end()
        self._focus_default()

    def close(self) -> None:
        """Hide the bar and return focus to where it was (the toggle)."""
        if self._destroyed:
            return
        was_open = self.is_open
        self.is_open = False
        self.panel.hidden = True
        self.host.removeAttribute("data-open")
        self.toggle.setAttribute("aria-expanded", "false")
        self.toggle.setAttribute("aria-label", self._t("open"))
        self.toggle.innerHTML = ICONS["chat"]
        if was_open:
            target = self._return_focus
            self._return_focus = None
            if _absent(target) or target == self.toggle_host or not target.isConnected:
                target = self.toggle
            target.focus()

    def toggle_open(self) -> None:
        """Open when closed, close when open."""
        self.close() if self.is_open else self.open()

    def _focus_default(self) -> None:
        if self.store.pending_confirmations and self._confirm_views:
            last = list(self._confirm_views.values())[-1]
            last.focus()
        elif self.store.pending_ask_user and not self.ask.hidden:
            self._focus_ask()
        else:
            self.input.focus()

    def show_activity(self, show: bool) -> None:
        """Show the activity log instead of the conversation (or back)."""
        self.activity_open = show
        self.activity.hidden = not show
        self.scroller.hidden = show
        self.activity_btn.setAttribute("aria-pressed", "true" if show else "false")
        label = self.labels["activity_close" if show else "activity_open"]
        self.activity_btn.setAttribute("aria-label", label)
        self.activity_btn.setAttribute("title", label)
        if show:
            self._dirty.add("activity")
            self.flush()
            back = self.activity.querySelector(".activity-back")
            back.focus()
        else:
            self.activity_btn.focus()
            self._scroll_to_end()

    # --- events -------------------------------------------------------------------------------------
    def _on_click(self, event: Any) -> None:
        target = event.target
        if _absent(target) or not _has(target, "closest"):
            return
        el = target.closest("[data-action]")
        if _absent(el):
            return
        action = str(el.getAttribute("data-action"))
        arg = el.getAttribute("data-id")
        arg = None if _absent(arg) else str(arg)
        s = self.store
        if action == "close":
            self.close()
        elif action == "new-chat":
            self._spawn(s.new_chat())
            self.input.focus()
        elif action == "activity":
            self.show_activity(not self.activity_open)
        elif action == "stop":
            self._spawn(s.stop())
        elif action == "retry":
            self._spawn(s.retry(arg))
            self.input.focus()
        elif action == "regenerate":
            self._spawn(s.regenerate())
            self.input.focus()
        elif action == "retry-connect":
            if self.on_retry is not None:
                self.on_retry()
        elif action == "use-here":
            self._spawn(s.use_here())
        elif action == "dismiss":
            s.dismiss_notice()
        elif action in ("allow", "deny") and arg is not None:
            s.resolve_confirmation(int(arg), action)
            self.input.focus()
        elif action == "ask-tab" and arg is not None:
            self._select_tab(int(arg), focus=True)
        elif action == "action-press":
            self._press_action(el)
        elif action == "action-cancel":
            s.cancel_action_form(str(el.getAttribute("data-mid")), str(el.getAttribute("data-aid")))

    def _on_keydown(self, event: Any) -> None:
        key = str(event.key)
        if key == "Escape":
            event.preventDefault()
            event.stopPropagation()
            form = event.target.closest(".action-form") if _has(event.target, "closest") else None
            if not _absent(form):  # Esc in an action's form cancels it (focus back on its button)
                self.store.cancel_action_form(str(form.getAttribute("data-mid")), str(form.getAttribute("data-aid")))
                return
            if self.activity_open:
                self.show_activity(False)
            else:
                self.close()
            return
        if key == "Tab":
            self._trap_tab(event)
            return
        target = event.target
        cls = target.classList
        if cls.contains("input"):
            if key == "Enter" and not event.shiftKey and not event.isComposing:
                event.preventDefault()
                self._send()
            return
        if cls.contains("ask-tab") and key in ("ArrowLeft", "ArrowRight", "Home", "End"):
            event.preventDefault()
            n = len(self.store.pending_ask_user)
            i = {"ArrowLeft": self._ask_tab - 1, "ArrowRight": self._ask_tab + 1, "Home": 0, "End": n - 1}[key]
            self._select_tab(i % max(n, 1), focus=True)

    def _on_document_keydown(self, event: Any) -> None:
        if event.altKey and event.shiftKey and not event.ctrlKey and not event.metaKey and str(event.code) == "KeyA":
            event.preventDefault()
            self.toggle_open()

    def _trap_tab(self, event: Any) -> None:
        """Keep Tab / Shift+Tab inside the open panel."""
        items = [el for el in self.root.querySelectorAll(_FOCUSABLE) if el.getClientRects().length > 0]
        if not items:
            return
        first, last = items[0], items[-1]
        active = self.root.activeElement
        if event.shiftKey:
            if _absent(active) or active == first or active == self.panel:
                event.preventDefault()
                last.focus()
        elif _absent(active) or active == last:
            event.preventDefault()
            first.focus()

    def _on_submit(self, event: Any) -> None:
        event.preventDefault()
        form = event.target.getAttribute("data-form")
        if form == "composer":
            self._send()
        elif form == "ask":
            self._submit_ask()
        elif form == "action":
            self._submit_action(event.target)

    def _on_change(self, event: Any) -> None:
        target = event.target
        param = target.getAttribute("data-param")
        if not _absent(param):
            target.setAttribute("data-touched", "true")
            form = target.closest(".action-form")
            if not _absent(form):
                self.store.clear_action_field_error(
                    str(form.getAttribute("data-mid")), str(form.getAttribute("data-aid")), str(param))
            return
        if not _absent(target.getAttribute("data-q")):
            panel = target.closest(".ask-panel")
            if not _absent(panel):
                panel.removeAttribute("data-invalid")
                err = panel.querySelector(".ask-field-error")
                if not _absent(err):
                    err.textContent = ""

    def _send(self) -> None:
        text = str(self.input.value)
        if not text.strip() or not self.store.can_send:
            return
        self.input.value = ""
        self._stick = True

        async def go() -> None:
            if not await self.store.send(text) and not str(self.input.value):
                self.input.value = text

        self._spawn(go())

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- store → frame ---------------------------------------------------------------------------------
    _KINDS = {
        "messages": ("messages", "composer"),
        "streaming": ("streaming", "composer"),
        "calls": ("streaming",),
        "activity": ("activity",),
        "connection": ("status", "composer"),
        "role": ("status", "composer"),
        "confirmations": ("confirmations", "composer"),
        "ask_user": ("ask_user", "composer"),
        "waiting": ("composer",),
        "notice": ("status",),
        "context_resolutions": ("composer",),
        "actions": ("messages",),
    }

    #: Dirty parts a streamed chunk makes (the composer's signature only changes when streaming starts or ends).
    _STREAM_ONLY = frozenset({"streaming", "composer"})

    def _on_store(self, what: str) -> None:
        self._dirty.update(self._KINDS.get(what, ("status",)))
        if self._frame is not None or self._destroyed:
            return
        if what == "streaming" and self._dirty <= self._STREAM_ONLY and self.store.is_streaming:
            # One more chunk: wait out the interval since the last streaming render (a timer, not a frame per
            # chunk), so the chunks in between are rendered together. Within a frame of it, the next animation
            # frame is soon enough.
            wait = self._last_stream_render + self.stream_interval_ms / 1000 - time.monotonic()
            if wait > 0.016:
                if self._timer is None:
                    self._timer = self._set_timeout(self._timer_cb, wait * 1000)
                return
            self._request_frame(prepare=True)
            return
        self._request_frame()

    @property
    def stream_interval_ms(self) -> float:
        """How long streamed text waits between renders now (ms): the base interval, longer when renders are costly
        or nobody sees them (the panel is closed; opening it renders at once)."""
        if not self.is_open:
            return self.STREAM_RENDER_MAX_INTERVAL_MS
        return min(self.STREAM_RENDER_MAX_INTERVAL_MS,
                   max(self.STREAM_RENDER_INTERVAL_MS, self.STREAM_RENDER_COST_FACTOR * self._stream_render_ms))

    def _request_frame(self, prepare: bool = False) -> None:
        if self._timer is not None:
            self._clear_timeout(self._timer)
            self._timer = None
        if self._frame is None and not self._destroyed:
            if prepare:
                self._prepare_stream()
            self._frame = self._raf(self._frame_cb)

    def _on_timer(self) -> None:
        self._timer = None
        if self._dirty:
            self._request_frame(prepare=self._dirty <= self._STREAM_ONLY)

    def _on_frame(self, timestamp: Any = None) -> None:
        self._frame = None
        self._in_frame = True
        try:
            self.flush()
        except Exception:  # noqa: BLE001 - a rendering bug must not kill the widget
            log.exception("bar render failed")
        finally:
            self._in_frame = False
        if self._stream_behind:  # newer text came in after the render was prepared: it waits for the next one
            self._stream_behind = False
            self._on_store("streaming")

    def _prepare_stream(self) -> None:
        """Render the streaming answer's Markdown and sanitize it now, in the task that asks for the frame, so the
        animation frame only inserts nodes (the two halves are two shorter tasks instead of one long one)."""
        s = self.store
        streaming, san = s.streaming_message, self.sanitizer
        if streaming is None or san is None:
            return
        view = self._views.get(_key(streaming, len(s.messages)))
        if view is None or view.pending is not None or view.renderer is None or not view.text:
            return  # the frame renders it: the first words, "Thinking…", a new view
        text = str(streaming.get("content") or "")
        if text == view.text or not text.startswith(view.text):
            return  # nothing new, or a restart (the frame starts over)
        started = time.monotonic()
        r = view.renderer
        previous_tail = r.tail
        r.feed(text)
        view.pending = (
            text,
            san.sanitizeToFragment(r.appended) if r.appended else None,
            san.sanitizeToFragment(r.tail) if r.tail != previous_tail else None,
        )
        self._prepared_ms = (time.monotonic() - started) * 1000  # part of this render's cost (see flush)

    def flush(self) -> None:
        """Render every dirty part now (the animation frame calls this; tests may too)."""
        if self._destroyed or not self._dirty:
            return
        dirty, self._dirty = self._dirty, set()
        if self._timer is not None:  # everything dirty renders now: the deferred frame has nothing left to do
            self._clear_timeout(self._timer)
            self._timer = None
        started = time.monotonic()
        stick = self._near_end() if ("messages" in dirty or "streaming" in dirty) else False
        if "status" in dirty:
            self.render_status()
        if "messages" in dirty:
            self.render_messages()
        elif "streaming" in dirty:
            self._render_streaming()
        if "confirmations" in dirty:
            self.render_confirmations()
        if "ask_user" in dirty:
            self.render_ask_user()
        if "composer" in dirty:
            self.render_composer()
        if self.activity_open and "activity" in dirty:
            self.render_activity()
        if stick or self._stick:
            self._stick = False
            self._scroll_to_end()
        streamed = self.store.streaming_message
        if ("streaming" in dirty or "messages" in dirty) and streamed is not None and streamed.get("content"):
            # Text was rendered (a "Thinking…" frame does not count: the first words go out at once).
            self._last_stream_render = now = time.monotonic()
            if dirty <= self._STREAM_ONLY:
                took = (now - started) * 1000 + self._prepared_ms
                self._stream_render_ms += (took - self._stream_render_ms) * 0.25
        self._prepared_ms = 0.0

    def _near_end(self) -> bool:
        if not self.is_open:
            return True
        sc = self.scroller
        return bool(sc.scrollHeight - sc.scrollTop - sc.clientHeight < 64)

    def _scroll_to_end(self) -> None:
        if self.is_open and not self.activity_open:
            self.scroller.scrollTop = self.scroller.scrollHeight

    # --- header, notice, composer -------------------------------------------------------------------------
    def render_status(self) -> None:
        """Connection state, read-only notice, connection errors, other notices."""
        s = self.store
        state = s.connection_state
        self.conn.textContent = self.labels.get(f"state_{state}", state)
        self.conn.setAttribute("data-state", state)
        self.panel.setAttribute("data-state", state)
        self.notice.textContent = ""
        self.notice.removeAttribute("data-kind")
        if state == "error" and (s.connection_error or s.errors):
            err = s.connection_error or s.errors[-1]
            self._notice(str(err.get("message") or self.labels["state_error"]), "error",
                         self._text_button(self.labels["retry"], "retry", "retry-connect")
                         if self.on_retry is not None else None)
        elif state == "connected" and not s.active:
            self._notice(self.labels["read_only"], "read-only",
                         self._text_button(self.labels["use_here"], "use-here", "use-here"))
        elif s.notice:
            self._notice(str(s.notice.get("message", "")), "warning",
                         self._text_button(self.labels["dismiss"], "dismiss", "dismiss"))
        else:
            self.notice.hidden = True

    def _notice(self, text: str, kind: str, button: Any) -> None:
        self.notice.setAttribute("data-kind", kind)
        self.notice.appendChild(self._el("p", "notice-text", text=text))
        if button is not None:
            self.notice.appendChild(button)
        self.notice.hidden = False

    def render_composer(self) -> None:
        """Enabled, read-only while the relay waits for the reader or the page, Stop while streaming."""
        s = self.store
        L = self.labels
        streaming = s.is_streaming
        waiting = s.waiting_for
        if s.connection_state != "connected":
            blocked = True
            placeholder = L.get(f"state_{s.connection_state}", L["placeholder_offline"])
        elif not s.active:
            blocked, placeholder = True, L["placeholder_read_only"]
        elif waiting == WAIT_ASK_USER:
            blocked, placeholder = True, L["placeholder_wait_ask_user"]
        elif waiting == WAIT_CONFIRMATION:
            blocked, placeholder = True, L["placeholder_wait_confirmation"]
        elif waiting == WAIT_FUNCTION or s.context_resolutions:
            blocked, placeholder = True, L["placeholder_wait_function"]
        else:
            blocked, placeholder = False, L["placeholder"]
        sig = (blocked, placeholder, streaming)
        if sig == self._composer_sig:  # per chunk this is the common case: no DOM write, no style invalidation
            return
        self._composer_sig = sig
        # read-only rather than disabled: a focused composer keeps focus (keyboard users are not dropped).
        self.input.readOnly = blocked
        self.input.setAttribute("aria-disabled", "true" if blocked else "false")
        self.input.setAttribute("placeholder", placeholder)
        self.composer.setAttribute("data-blocked", "true" if blocked else "false")
        stop_focused = self.root.activeElement == self.stop_btn
        self.stop_btn.hidden = not streaming
        self.send_btn.hidden = streaming
        self.send_btn.disabled = blocked
        if stop_focused and not streaming:
            self.input.focus()

    # --- messages --------------------------------------------------------------------------------------------
    def render_messages(self) -> None:
        """Keyed update of the whole list: only changed messages touch the DOM."""
        s = self.store
        messages = s.messages
        streaming = s.streaming_message
        keys: list[str] = []
        last_index = len(messages) - 1
        idle = not s.is_streaming
        for index, m in enumerate(messages):
            key = _key(m, index)
            keys.append(key)
            view = self._view(key, str(m.get("role") or "assistant"))
            self._fill(view, m, streaming=False, last=(index == last_index and idle and streaming is None))
        if streaming is not None:
            key = _key(streaming, len(messages))
            if key not in keys:
                keys.append(key)
                view = self._view(key, "assistant")
                self._fill(view, streaming, streaming=True, last=False)
        for key in [k for k in self._views if k not in keys]:
            self._views.pop(key).el.remove()
        if keys != self._order:
            for key in keys:  # appendChild moves: the list ends up in order
                self.list.appendChild(self._views[key].el)
            self._order = keys
        self.empty.hidden = bool(keys)
        self._set_busy(s.is_streaming)

    def _set_busy(self, busy: bool) -> None:
        if busy != self._busy:
            self._busy = busy
            self.list.setAttribute("aria-busy", "true" if busy else "false")

    def _render_streaming(self) -> None:
        """Per chunk: only the streaming message (its tail) is touched."""
        streaming = self.store.streaming_message
        if streaming is None:
            self.render_messages()
            return
        key = _key(streaming, len(self.store.messages))
        view = self._views.get(key)
        if view is None:
            self.render_messages()
            return
        if self._in_frame and view.pending is not None and view.pending[0] != (streaming.get("content") or ""):
            # Show what was prepared; the newer chunks wait for the next interval instead of making this frame
            # render Markdown again.
            streaming = {**streaming, "content": view.pending[0]}
            self._stream_behind = True
        self._fill(view, streaming, streaming=True, last=False)
        self._set_busy(True)

    def _view(self, key: str, role: str) -> _MessageView:
        view = self._views.get(key)
        if view is not None and view.role == role:
            return view
        if view is not None:
            view.el.remove()
        view = _MessageView(key, role)
        el = self._el("li", f"message {role}", part=f"message message-{role}")
        el.setAttribute("data-role", role)
        el.setAttribute("data-key", key)
        label = self._el("span", "sr-only", text=self.labels.get({"user": "you"}.get(role, role), role) + ":")
        el.appendChild(label)
        bubble = self._el("div", "bubble", part="bubble")
        body = self._el("div", "content markdown" if role == "assistant" else "content", part="content")
        bubble.appendChild(body)
        el.appendChild(bubble)
        view.el, view.body = el, body
        view.calls = self._el("div", "calls")
        view.calls.hidden = True
        el.appendChild(view.calls)
        if role == "assistant":
            view.actions = self._el("div", "actions", part="actions")
            view.actions.setAttribute("role", "group")
            view.actions.setAttribute("aria-label", self.labels["actions"])
            view.actions.hidden = True
            el.appendChild(view.actions)
        view.footer = self._el("div", "message-footer")
        view.footer.hidden = True
        el.appendChild(view.footer)
        if role == "assistant":
            view.stable = self._el("div", "md-stable")
            view.tail = self._el("div", "md-tail")
            body.appendChild(view.stable)
            body.appendChild(view.tail)
        self._views[key] = view
        self.list.appendChild(el)
        return view

    def _fill(self, view: _MessageView, m: dict[str, Any], *, streaming: bool, last: bool) -> None:
        text = str(m.get("content") or "")
        if view.role == "assistant":
            self._render_answer(view, text, streaming)
        elif view.text != text:
            view.body.textContent = text
            view.text = text
        if view.busy != streaming:
            view.busy = streaming
            if streaming:
                view.el.setAttribute("aria-busy", "true")
            else:
                view.el.removeAttribute("aria-busy")
            view.el.setAttribute("data-streaming", "true" if streaming else "false")
        self._render_calls(view, m.get("function_calls") or [])
        if view.actions is not None:
            self._render_actions(view, [] if streaming else self.store.actions_for(m.get("id")))
        # Footer: Stopped mark, Retry on the last error, Regenerate on the last answer.
        stopped = bool(m.get("stopped"))
        retry = view.role == "error" and last and (m.get("retryable", True) is not False)
        regen = view.role == "assistant" and last and not streaming
        sig = (stopped, retry, regen, m.get("id"))
        if sig != view.footer_sig:
            view.footer_sig = sig
            view.footer.textContent = ""
            if stopped:
                view.footer.appendChild(self._el("span", "stopped", text=self.labels["stopped"]))
            if retry:
                view.footer.appendChild(self._text_button(self.labels["retry"], "retry", "retry", m.get("id")))
            if regen:
                b = self._text_button(self.labels["regenerate"], "regenerate", "regenerate", m.get("id"))
                b.insertBefore(self._icon("retry"), b.firstChild)
                view.footer.appendChild(b)
            view.footer.hidden = not (stopped or retry or regen)

    def _markdown(self) -> tuple[Any, Any]:
        if self._render_markdown is None:
            from ..core.markdown import StreamingRenderer, render_markdown

            self._render_markdown, self._renderer_cls = render_markdown, StreamingRenderer
        return self._render_markdown, self._renderer_cls

    def _render_answer(self, view: _MessageView, text: str, streaming: bool) -> None:
        """Markdown → HTML (raw HTML escaped) → sink sanitizer → DOM; incremental while streaming."""
        if view.pending is not None:  # the renderer is ahead of the DOM: insert what was prepared first
            shown, appended, tail = view.pending
            view.pending = None
            if appended is not None:
                view.stable.append(appended)
            if tail is not None:
                view.tail.replaceChildren(tail)
            view.text = shown
        empty = "false" if text else "true"
        if view.tail is not None and view.empty != empty:
            view.empty = empty
            view.body.setAttribute("data-empty", empty)
        if view.text == text:
            return
        san = self.sanitizer
        if san is None:  # no sink sanitizer: plain text, never HTML
            view.stable.textContent = text
            view.text = text
            return
        if streaming and not text.strip() and view.text is None:
            view.tail.appendChild(self._el("span", "thinking", text=self.labels["thinking"]))
            view.text = text
            return
        render, renderer_cls = self._markdown()
        if streaming or view.renderer is not None:
            r = view.renderer
            if r is None or view.text is None or not text.startswith(view.text):
                r = view.renderer = renderer_cls()
                view.stable.textContent = ""
                view.tail.textContent = ""
            previous_tail = r.tail if view.text else None  # None: the tail still shows "Thinking…"
            r.feed(text)
            if r.appended:
                san.appendSafeHTML(view.stable, r.appended)
            if r.tail != previous_tail:
                san.setSafeHTML(view.tail, r.tail)
            if not streaming:
                view.renderer = None  # final: the committed text rendered exactly as render_markdown would
        else:
            san.setSafeHTML(view.stable, render(text))
            view.tail.textContent = ""
        view.text = text

    # --- function calls ------------------------------------------------------------------------------------------
    def _render_calls(self, view: _MessageView, calls: list[Any]) -> None:
        if not calls and not view.call_views:
            return
        seen = []
        for call in calls:
            if not isinstance(call, dict) or not isinstance(call.get("id"), str):
                continue
            cid = call["id"]
            seen.append(cid)
            cv = view.call_views.get(cid)
            if cv is None:
                cv = view.call_views[cid] = self._call_view(call, "call")
                view.calls.appendChild(cv.el)
            self._update_call(cv, call)
        for cid in [c for c in view.call_views if c not in seen]:
            view.call_views.pop(cid).el.remove()
        view.calls.hidden = not seen

    def _call_view(self, call: dict[str, Any], cls: str) -> _CallView:
        cv = _CallView()
        cv.el = self._el("details", cls, part=cls)
        cv.summary = self._el("summary", f"{cls}-summary", part=f"{cls}-summary")
        cv.status = self._el("span", "call-status")
        cv.summary.appendChild(self._el("span", "call-icon", part="call-icon"))
        cv.summary.appendChild(self._el("span", "call-name", text=str(call.get("name") or "")))
        cv.summary.appendChild(cv.status)
        cv.when = None
        if cls != "call":
            cv.when = self._el("span", "call-when")
            cv.summary.appendChild(cv.when)
        cv.time = self._el("span", "call-time")
        cv.summary.appendChild(cv.time)
        cv.el.appendChild(cv.summary)
        cv.body = self._el("div", "call-body", part="call-details")
        cv.el.appendChild(cv.body)
        cv.sig = None
        return cv

    def _update_call(self, cv: _CallView, call: dict[str, Any], when: Any = None) -> None:
        duration, total = self.store.call_timing(call)
        status = str(call.get("status") or "running")
        sig = (status, duration, total, call.get("result") is not None, call.get("error"), when)
        if sig == cv.sig:
            return
        cv.sig = sig
        L = self.labels
        status_text = L.get(f"call_{status}", status)
        if status == "running" and call.get("name") == "ask_user":
            status_text = L["call_waiting_user"]  # the relay's own tool: it waits for the reader's answer
        cv.el.setAttribute("data-status", status)
        base = "call" if cv.el.classList.contains("call") else "activity-entry"
        cv.el.setAttribute("part", f"{base} {base}-{status}")
        icon = cv.summary.firstChild
        icon.innerHTML = ICONS.get({"success": "check", "error": "error"}.get(status, "running"), "")
        cv.status.textContent = status_text
        shown = _fmt_ms(total if total is not None else duration)
        cv.time.textContent = L["ms"].format(value=shown) if shown else ""
        name = str(call.get("name") or "")
        timing = []
        if duration is not None:
            timing.append(f"{L['handler_time']} {L['ms'].format(value=_fmt_ms(duration))}")
        if total is not None:
            timing.append(f"{L['total_time']} {L['ms'].format(value=_fmt_ms(total))}")
        cv.summary.setAttribute("title", " · ".join([name, status_text, *timing]))
        if cv.when is not None:
            cv.when.textContent = when or ""
        body = cv.body
        body.textContent = ""
        if timing:
            body.appendChild(self._el("p", "call-timing", text=" · ".join(timing)))
        if call.get("kind") != "error":
            args = call.get("arguments")
            self._section(body, L["arguments"], _as_text(args) if args not in (None, {}) else L["no_arguments"])
        if call.get("result") is not None and status != "error":
            self._section(body, L["result"], _as_text(call.get("result")))
        if call.get("error"):
            self._section(body, L["error_text"], _as_text(call.get("error")), "error")

    def _section(self, parent: Any, title: str, text: str, cls: str = "") -> None:
        parent.appendChild(self._el("h4", "call-label", text=title))
        parent.appendChild(self._el("pre", f"call-text {cls}".strip(), text=text))

    # --- offered actions (seed 002) ----------------------------------------------------------------------------------
    def _render_actions(self, view: _MessageView, offers: list[dict[str, Any]]) -> None:
        """Keyed: one view per offer, touched only when its state changed."""
        if not offers and not view.action_views:
            return
        seen = []
        for offer in offers:
            aid = str(offer["id"])
            seen.append(aid)
            av = view.action_views.get(aid)
            if av is None:
                av = view.action_views[aid] = self._action_view(offer)
                view.actions.appendChild(av.el)
            self._update_action(av, offer)
        for aid in [a for a in view.action_views if a not in seen]:
            av = view.action_views.pop(aid)
            had_focus = av.el.contains(self.root.activeElement)
            av.el.remove()
            if had_focus:
                self.input.focus()
        view.actions.hidden = not seen

    def _action_view(self, offer: dict[str, Any]) -> _ActionView:
        """The button (the page's label; the model's arguments as text on a second line), error and status line."""
        L = self.labels
        av = _ActionView()
        mid, aid = str(offer["message_id"]), str(offer["id"])
        av.key = (mid, aid)
        av.el = self._el("div", "action", part="action")
        av.el.setAttribute("data-aid", aid)
        av.el.setAttribute("data-name", str(offer.get("name") or ""))
        label = str(offer.get("label") or offer.get("name") or "")
        b = av.button = self._el("button", "action-button", part="action-button")
        b.type = "button"
        b.setAttribute("data-action", "action-press")
        b.setAttribute("data-mid", mid)
        b.setAttribute("data-aid", aid)
        b.appendChild(self._el("span", "action-label", text=label))
        if offer.get("confirm") == "form":
            b.setAttribute("aria-expanded", "false")
        else:
            args = arguments_text(offer.get("arguments"))
            if args:
                line = L["action_with"].format(args=args)
                b.appendChild(self._el("span", "action-args", part="action-arguments", text=line))
                # Both lines are the button's name: "Open pricing" for the wrong plan is another action.
                b.setAttribute("aria-label", f"{label}, {line}")
        av.el.appendChild(b)
        av.error = self._el("p", "action-error", part="action-error", id=self._uid("action-error"))
        av.error.setAttribute("role", "alert")
        av.el.appendChild(av.error)
        av.status = self._el("p", "action-status", part="action-outcome")
        av.status.setAttribute("role", "status")
        av.status.setAttribute("tabindex", "-1")
        icon = self._el("span", "action-icon")
        icon.setAttribute("aria-hidden", "true")
        av.status.appendChild(icon)
        av.status_label = self._el("span", "action-outcome-label", text=label)
        av.status_text = self._el("span", "action-outcome-text")
        av.status.appendChild(av.status_label)
        av.status.appendChild(av.status_text)
        av.status.hidden = True
        av.el.appendChild(av.status)
        return av

    def _update_action(self, av: _ActionView, offer: dict[str, Any]) -> None:
        status = str(offer.get("status") or "offered")
        errors = offer.get("field_errors") or {}
        form_open = bool(offer.get("form_open"))
        sig = (status, offer.get("outcome"), offer.get("error"), form_open, tuple(sorted(errors.items())))
        if sig == av.sig:
            self._action_focus_done(av, status, errors)  # e.g. Send refused again with the same problems
            return
        av.sig = sig
        root = self.root
        focus_inside = av.el.contains(root.activeElement)
        L = self.labels
        done, running = status == ACTION_DONE, status == ACTION_RUNNING
        av.el.setAttribute("data-status", status)
        av.el.setAttribute("part", f"action action-{status}")
        # The button: gone once done (the outcome takes its place), back after a failure for a retry.
        av.button.hidden = done
        if running:
            av.button.setAttribute("aria-disabled", "true")  # not `disabled`: a focused button keeps the focus
        else:
            av.button.removeAttribute("aria-disabled")
        error = None if done or form_open else offer.get("error")
        av.error.textContent = error or ""
        if error:
            av.button.setAttribute("aria-describedby", av.error.id)
        else:
            av.button.removeAttribute("aria-describedby")
        # The status line: "Working…" while it runs, then the outcome (the page's words, or "Done.").
        if done or running:
            av.status.hidden = False
            av.status.setAttribute("data-kind", status)
            av.status.firstChild.innerHTML = ICONS["check" if done else "running"]
            av.status_label.hidden = not done
            av.status_text.textContent = str(offer.get("outcome") or "") if done else L["action_running"]
        else:
            av.status.hidden = True
            av.status_text.textContent = ""
        # The form of a form action.
        if form_open and av.form is None:
            self._build_action_form(av, offer)
        elif not form_open and av.form is not None:
            form_focus = av.form.contains(root.activeElement)
            av.form.remove()
            av.form = None
            av.fields = {}
            av.form_sig = None
            av.button.setAttribute("aria-expanded", "false")
            av.button.removeAttribute("aria-controls")
            if form_focus and not done:
                av.button.focus()
        if av.form is not None:
            self._update_action_form(av, offer, errors, running)
        if done and focus_inside:
            av.status.focus()  # the pressed button is gone: the reader lands on what happened
        self._action_focus_done(av, status, errors)

    def _action_focus_done(self, av: _ActionView, status: str, errors: dict[str, str]) -> None:
        """Move the focus the reader's last step asked for, once its result is on screen."""
        want = self._action_focus
        if want is None or want[1] != av.key:
            return
        if want[0] == "form" and av.form is not None:
            self._action_focus = None
            self._focus_action_form(av, errors)
        elif want[0] == "invalid" and (errors or status in (ACTION_DONE, "failed")):
            self._action_focus = None
            if errors and av.form is not None:
                self._focus_action_form(av, errors)

    def _build_action_form(self, av: _ActionView, offer: dict[str, Any]) -> None:
        """One field per parameter, labelled with its description, prefilled (the reader's last values, else the
        model's suggestions); checked by the store before anything is sent."""
        L = self.labels
        mid, aid = av.key
        params = offer.get("parameters") or {}
        props = params.get("properties") or {}
        required = set(params.get("required") or [])
        values = offer.get("values")
        prefill = values if isinstance(values, dict) else (offer.get("arguments") or {})
        form = self._el("form", "action-form", part="action-form", id=self._uid("action-form"))
        form.setAttribute("data-form", "action")
        form.setAttribute("data-mid", mid)
        form.setAttribute("data-aid", aid)
        form.setAttribute("novalidate", "")
        title_id = self._uid("action-title")
        form.setAttribute("aria-labelledby", title_id)
        form.appendChild(self._el("h4", "action-form-title", text=str(offer.get("title") or offer.get("label") or ""),
                                  id=title_id))
        av.fields = {}
        for name, prop in props.items():
            if not isinstance(prop, dict):
                continue
            field_id, err_id = self._uid("action-field"), self._uid("action-field-error")
            wrap = self._el("div", "action-field", part="action-field")
            wrap.setAttribute("data-field", name)
            ptype, fmt, enum = prop.get("type"), prop.get("format"), prop.get("enum")
            value = prefill.get(name)
            label = self._el("label", "action-field-label", text=str(prop.get("description") or name))
            label.setAttribute("for", field_id)
            if name in required:
                mark = self._el("span", "action-required", text=" *")
                mark.setAttribute("aria-hidden", "true")
                label.appendChild(mark)
            if isinstance(enum, list):
                control = self._el("select", "action-input")
                if name not in required or value is None:
                    option = self._el("option", text=L["action_choose"])
                    option.value = ""
                    control.appendChild(option)
                for e in enum:
                    option = self._el("option", text=_option_text(e))
                    option.value = _option_text(e)
                    if value is not None and _option_text(value) == _option_text(e):
                        option.selected = True
                    control.appendChild(option)
            elif ptype == "boolean":
                control = self._el("input", "action-check")
                control.type = "checkbox"
                control.checked = value is True
                if value is not None:
                    control.setAttribute("data-prefilled", "true")
            elif ptype == "string" and fmt == "multiline":
                control = self._el("textarea", "action-input")
                control.setAttribute("rows", "4")
                control.value = "" if value is None else str(value)
            else:
                control = self._el("input", "action-input")
                control.type = {"email": "email", "uri": "url"}.get(fmt, "text") if ptype == "string" else "text"
                if ptype in ("number", "integer"):
                    control.setAttribute("inputmode", "numeric" if ptype == "integer" else "decimal")
                if fmt == "email":
                    control.setAttribute("autocomplete", "email")
                elif fmt == "date":
                    control.setAttribute("placeholder", "YYYY-MM-DD")
                elif fmt == "date-time":
                    control.setAttribute("placeholder", "YYYY-MM-DDTHH:MM")
                if ptype == "string" and isinstance(prop.get("maxLength"), int):
                    control.setAttribute("maxlength", str(prop["maxLength"]))
                control.value = "" if value is None else _option_text(value)
            control.id = field_id
            control.setAttribute("data-param", name)
            control.setAttribute("aria-describedby", err_id)
            if name in required:
                control.setAttribute("aria-required", "true")
            err = self._el("p", "action-field-error", id=err_id)
            if ptype == "boolean" and not isinstance(enum, list):
                wrap.classList.add("action-field-check")
                wrap.appendChild(control)
                wrap.appendChild(label)
            else:
                wrap.appendChild(label)
                wrap.appendChild(control)
            wrap.appendChild(err)
            form.appendChild(wrap)
            av.fields[name] = (wrap, control, err)
        av.form_error = self._el("p", "action-form-error", id=self._uid("action-form-error"))
        av.form_error.setAttribute("role", "alert")
        form.appendChild(av.form_error)
        buttons = self._el("div", "action-form-actions")
        av.send = self._el("button", "action-send", part="action-send", text=L["action_send"])
        av.send.type = "submit"
        av.send.setAttribute("aria-describedby", av.form_error.id)
        cancel = self._text_button(L["action_cancel"], "action-cancel", "action-cancel", part="action-cancel")
        cancel.setAttribute("data-mid", mid)
        cancel.setAttribute("data-aid", aid)
        buttons.appendChild(av.send)
        buttons.appendChild(cancel)
        form.appendChild(buttons)
        av.el.insertBefore(form, av.error)
        av.form = form
        av.form_sig = None
        av.button.setAttribute("aria-expanded", "true")
        av.button.setAttribute("aria-controls", form.id)

    def _update_action_form(self, av: _ActionView, offer: dict[str, Any], errors: dict[str, str],
                            running: bool) -> None:
        sig = (tuple(sorted(errors.items())), offer.get("error"), running)
        if sig == av.form_sig:
            return
        av.form_sig = sig
        for name, (wrap, control, err) in av.fields.items():
            problem = errors.get(name)
            err.textContent = problem or ""
            if problem:
                control.setAttribute("aria-invalid", "true")
                wrap.setAttribute("data-invalid", "true")
            else:
                control.removeAttribute("aria-invalid")
                wrap.removeAttribute("data-invalid")
        av.form_error.textContent = "" if running else str(offer.get("error") or "")
        if running:
            av.send.setAttribute("aria-disabled", "true")
            av.form.setAttribute("aria-busy", "true")
        else:
            av.send.removeAttribute("aria-disabled")
            av.form.removeAttribute("aria-busy")

    def _focus_action_form(self, av: _ActionView, errors: dict[str, str]) -> None:
        """Into the form: the first field with a problem, else the first required one still empty, else the first."""
        target = None
        for name, (wrap, control, err) in av.fields.items():
            if name in errors:
                target = control
                break
        if target is None and not errors:
            for name, (wrap, control, err) in av.fields.items():
                if control.getAttribute("aria-required") == "true" and control.type != "checkbox" \
                        and not str(control.value).strip():
                    target = control
                    break
        if target is None and av.fields:
            target = next(iter(av.fields.values()))[1]
        if target is not None:
            target.focus()

    def _find_action_view(self, mid: str, aid: str) -> _ActionView | None:
        for view in self._views.values():
            av = view.action_views.get(aid)
            if av is not None and av.key == (mid, aid):
                return av
        return None

    def _press_action(self, button: Any) -> None:
        if button.getAttribute("aria-disabled") == "true":
            return
        mid, aid = str(button.getAttribute("data-mid")), str(button.getAttribute("data-aid"))
        av = self._find_action_view(mid, aid)
        if av is not None and av.form is not None:  # already open: go into it (Cancel closes it)
            self._focus_action_form(av, {})
            return
        if button.getAttribute("aria-expanded") == "false":
            self._action_focus = ("form", (mid, aid))
        self._spawn(self.store.press_action(mid, aid))

    def _collect_action_values(self, av: _ActionView) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, (wrap, control, err) in av.fields.items():
            if control.type == "checkbox":
                if control.checked:
                    values[name] = True
                elif control.getAttribute("data-prefilled") == "true" or control.getAttribute("data-touched") \
                        == "true" or control.getAttribute("aria-required") == "true":
                    values[name] = False
                else:
                    values[name] = None  # an optional yes/no the reader never touched stays absent
            else:
                text = str(control.value)
                values[name] = text if text != "" else None
        return values

    def _submit_action(self, form: Any) -> None:
        mid, aid = str(form.getAttribute("data-mid")), str(form.getAttribute("data-aid"))
        av = self._find_action_view(mid, aid)
        if av is None or av.form is None or av.send.getAttribute("aria-disabled") == "true":
            return
        self._action_focus = ("invalid", (mid, aid))
        self._spawn(self.store.submit_action_form(mid, aid, self._collect_action_values(av)))

    # --- activity log ------------------------------------------------------------------------------------------------
    def render_activity(self) -> None:
        """The activity log: every call (and page error) with status and timings, newest first."""
        entries = self.store.activity
        seen = []
        for e in entries:
            key = str(e.get("id"))
            seen.append(key)
            cv = self._activity_views.get(key)
            if cv is None:
                cv = self._activity_views[key] = self._call_view(e, "activity-entry")
                cv.el.setAttribute("data-kind", str(e.get("kind")))
            when = None
            if isinstance(e.get("started_at"), (int, float)):
                when = self.js.Date.new(e["started_at"]).toLocaleTimeString()
            self._update_call(cv, e, when)
        for key in [k for k in self._activity_views if k not in seen]:
            self._activity_views.pop(key).el.remove()
        current = [str(el.getAttribute("data-key")) for el in self.activity_list.children]
        if current != seen:
            for key in seen:
                item = self._activity_views[key].el
                item.setAttribute("data-key", key)
                self.activity_list.appendChild(item)
        self.activity_empty.hidden = bool(seen)

    # --- confirmations ---------------------------------------------------------------------------------------------------
    def render_confirmations(self) -> None:
        """One Allow / Deny prompt per pending sensitive call; focus moves to a new one."""
        pending = self.store.pending_confirmations
        ids = [c["id"] for c in pending]
        for cid in [c for c in self._confirm_views if c not in ids]:
            box = self._confirm_views.pop(cid)
            had_focus = box.contains(self.root.activeElement)
            box.remove()
            if had_focus:
                self.input.focus()
        newest = None
        for item in pending:
            cid = item["id"]
            if cid in self._confirm_views:
                continue
            req = item["request"]
            name = str(req.get("name") or "")
            box = self._el("div", "confirm", part="confirmation")
            box.setAttribute("role", "alertdialog")
            box.setAttribute("tabindex", "-1")
            title_id, desc_id = self._uid("confirm-title"), self._uid("confirm-desc")
            box.setAttribute("aria-labelledby", title_id)
            box.setAttribute("aria-describedby", desc_id)
            box.appendChild(self._el("h3", "confirm-title", text=self._t("confirm_title", name=name), id=title_id))
            box.appendChild(self._el("p", "confirm-text", text=self.labels["confirm_text"], id=desc_id))
            fn = self._el("p", "confirm-fn")
            fn.appendChild(self._el("code", "confirm-name", text=name))
            box.appendChild(fn)
            args = req.get("arguments")
            box.appendChild(self._el("pre", "confirm-args", part="confirmation-arguments",
                                     text=_as_text(args) if args not in (None, {}) else self.labels["no_arguments"]))
            buttons = self._el("div", "confirm-actions")
            buttons.appendChild(self._text_button(self.labels["allow"], "allow", "allow", cid))
            buttons.appendChild(self._text_button(self.labels["deny"], "deny", "deny", cid))
            box.appendChild(buttons)
            self.confirmations.appendChild(box)
            self._confirm_views[cid] = box
            newest = box
        if newest is not None:
            if not self.is_open:
                self.open()
            newest.focus()

    # --- ask user ------------------------------------------------------------------------------------------------------------
    def render_ask_user(self) -> None:
        """One tab per pending prompt, one submit for all; rebuilt only when the prompts change."""
        s = self.store
        prompts = s.pending_ask_user
        key = tuple(str(p.get("id")) for p in prompts)
        if key != self._ask_key:
            self._ask_key = key
            self._build_ask(prompts)
            if prompts:
                if not self.is_open:
                    self.open()
                self._focus_ask()
        if prompts:
            submit = self.ask.querySelector(".ask-submit")
            submit.disabled = s.ask_user_sending
            submit.textContent = self.labels["ask_sending" if s.ask_user_sending else "ask_submit"]
            err = self.ask.querySelector(".ask-error")
            err.textContent = s.ask_user_error or ""
            err.hidden = not s.ask_user_error

    def _build_ask(self, prompts: list[dict[str, Any]]) -> None:
        L = self.labels
        had_focus = self.ask.contains(self.root.activeElement)
        self.ask.textContent = ""
        self.ask.hidden = not prompts
        self._ask_tab = 0
        if not prompts:
            if had_focus:
                self.input.focus()
            return
        self.ask.appendChild(self._el("h3", "ask-title", text=L["ask_title"], id="ap-ask-title"))
        tablist = self._el("div", "ask-tabs", part="ask-tabs")
        tablist.setAttribute("role", "tablist")
        tablist.setAttribute("aria-label", L["ask_title"])
        tablist.hidden = len(prompts) < 2
        self.ask.appendChild(tablist)
        for i, prompt in enumerate(prompts):
            tab_id, panel_id = f"ap-ask-tab-{i}", f"ap-ask-panel-{i}"
            tab = self._el("button", "ask-tab", part="ask-tab", text=L["ask_question"].format(n=i + 1), id=tab_id)
            tab.type = "button"
            tab.setAttribute("role", "tab")
            tab.setAttribute("aria-controls", panel_id)
            tab.setAttribute("data-action", "ask-tab")
            tab.setAttribute("data-id", str(i))
            tablist.appendChild(tab)
            panel = self._el("div", "ask-panel", part="ask-panel", id=panel_id)
            panel.setAttribute("role", "tabpanel")
            panel.setAttribute("aria-labelledby", tab_id if len(prompts) > 1 else "ap-ask-title")
            panel.setAttribute("data-type", str(prompt.get("type")))
            self._ask_fields(panel, i, prompt)
            self.ask.appendChild(panel)
        footer = self._el("div", "ask-footer")
        err = self._el("p", "ask-error")
        err.setAttribute("role", "alert")
        err.hidden = True
        footer.appendChild(err)
        submit = self._el("button", "ask-submit", part="ask-submit", text=L["ask_submit"])
        submit.type = "submit"
        footer.appendChild(submit)
        self.ask.appendChild(footer)
        self._select_tab(0, focus=False)

    def _ask_fields(self, panel: Any, i: int, prompt: dict[str, Any]) -> None:
        L = self.labels
        kind = prompt.get("type")
        args = prompt.get("arguments") if isinstance(prompt.get("arguments"), dict) else {}
        q_id = f"ap-ask-q-{i}"
        fieldset = self._el("fieldset", "ask-fieldset")
        legend = self._el("legend", "ask-question", part="ask-question", text=str(prompt.get("question") or ""),
                          id=q_id)
        fieldset.appendChild(legend)
        name = f"ap-q{i}"
        if kind == "text":
            multiline = bool(args.get("multiline"))
            field = self._el("textarea" if multiline else "input", "ask-text")
            if not multiline:
                field.type = "text"
            else:
                field.setAttribute("rows", "3")
            field.setAttribute("aria-labelledby", q_id)
            if isinstance(args.get("placeholder"), str):
                field.setAttribute("placeholder", args["placeholder"])
            field.setAttribute("data-q", str(i))
            fieldset.appendChild(field)
        else:
            if kind == "bool":
                options = [("true", str(args.get("yes_label") or L["ask_yes"])),
                           ("false", str(args.get("no_label") or L["ask_no"]))]
                input_type = "radio"
            else:
                options = [(str(o.get("value")), str(o.get("label") if o.get("label") is not None else o.get("value")))
                           for o in args.get("options") or [] if isinstance(o, dict)]
                input_type = "checkbox" if kind == "checklist" else "radio"
            group = self._el("div", "ask-options")
            group.setAttribute("role", "group" if input_type == "checkbox" else "radiogroup")
            group.setAttribute("aria-labelledby", q_id)
            for j, (value, label) in enumerate(options):
                row = self._el("label", "ask-option")
                box = self._el("input", "ask-choice")
                box.type = input_type
                box.name = name
                box.value = value
                box.setAttribute("data-q", str(i))
                box.setAttribute("data-index", str(j))
                row.appendChild(box)
                row.appendChild(self._el("span", "ask-option-label", text=label))
                group.appendChild(row)
            fieldset.appendChild(group)
        err = self._el("p", "ask-field-error")
        err.setAttribute("aria-live", "polite")
        fieldset.appendChild(err)
        panel.appendChild(fieldset)

    def _select_tab(self, i: int, *, focus: bool) -> None:
        self._ask_tab = i
        for j, tab in enumerate(self.ask.querySelectorAll(".ask-tab")):
            selected = j == i
            tab.setAttribute("aria-selected", "true" if selected else "false")
            tab.setAttribute("tabindex", "0" if selected else "-1")
            if selected and focus:
                tab.focus()
        for j, panel in enumerate(self.ask.querySelectorAll(".ask-panel")):
            panel.hidden = j != i

    def _focus_ask(self) -> None:
        panel = self.ask.querySelector(f"#ap-ask-panel-{self._ask_tab}")
        if _absent(panel):
            return
        field = panel.querySelector("input, textarea")
        if not _absent(field):
            field.focus()

    def _collect_answers(self) -> tuple[list[dict[str, Any]], int | None]:
        """Answers from the form, and the index of the first prompt without a valid answer."""
        L = self.labels
        answers = []
        first_bad = None
        for i, prompt in enumerate(self.store.pending_ask_user):
            panel = self.ask.querySelector(f"#ap-ask-panel-{i}")
            kind = prompt.get("type")
            problem = None
            result: Any = None
            if kind == "text":
                value = str(panel.querySelector(".ask-text").value)
                if not value.strip():
                    problem = L["ask_required_text"]
                result = value
            else:
                chosen = [str(b.value) for b in panel.querySelectorAll(".ask-choice") if b.checked]
                if kind == "checklist":
                    result = chosen
                elif not chosen:
                    problem = L["ask_required_choice"]
                elif kind == "bool":
                    result = chosen[0] == "true"
                else:
                    result = chosen[0]
            err = panel.querySelector(".ask-field-error")
            err.textContent = problem or ""
            tab = self.ask.querySelector(f"#ap-ask-tab-{i}")
            if problem:
                panel.setAttribute("data-invalid", "true")
                tab.setAttribute("data-invalid", "true")
                for field in panel.querySelectorAll("input, textarea"):
                    field.setAttribute("aria-invalid", "true")
                if first_bad is None:
                    first_bad = i
            else:
                panel.removeAttribute("data-invalid")
                tab.removeAttribute("data-invalid")
                for field in panel.querySelectorAll("input, textarea"):
                    field.removeAttribute("aria-invalid")
            answers.append({"id": prompt.get("id"), "result": result})
        return answers, first_bad

    def _submit_ask(self) -> None:
        if self.store.ask_user_sending or not self.store.pending_ask_user:
            return
        answers, bad = self._collect_answers()
        err = self.ask.querySelector(".ask-error")
        if bad is not None:
            err.textContent = self.labels["ask_fix"]
            err.hidden = False
            self._select_tab(bad, focus=False)
            self._focus_ask()
            return
        err.hidden = True
        self._spawn(self.store.submit_ask_user(answers))

    # --- teardown ----------------------------------------------------------------------------------------------------------------
    def destroy(self) -> None:
        """Remove both elements, every listener and every proxy; pending work is cancelled."""
        if self._destroyed:
            return
        self._destroyed = True
        self._unsubscribe()
        # The store's unsubscribe closure holds our bound _on_store: a cycle that only Python's collector (which
        # runs when Python allocates, maybe never again) would free, and with it every element this bar rendered.
        self._unsubscribe = _noop
        if self._frame is not None:
            self._caf(self._frame)
            self._frame = None
        if self._timer is not None:
            self._clear_timeout(self._timer)
            self._timer = None
        for task in list(self._tasks):
            task.cancel()
        self._events.close()
        self._views.clear()
        self._activity_views.clear()
        self._confirm_views.clear()
        self.host.remove()
        self.toggle_host.remove()

    @property
    def proxy_count(self) -> int:
        """Live JS proxies held by this bar (0 after destroy)."""
        return self._events.count


def _noop() -> None:
    """Nothing (what a destroyed bar's unsubscribe becomes)."""


def _option_text(value: Any) -> str:
    """A schema value as form text: JSON for booleans, no trailing .0 on whole numbers."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _key(m: dict[str, Any], index: int) -> str:
    mid = m.get("id")
    return str(mid) if mid is not None else f"i{index}"


def _has(obj: Any, name: str) -> bool:
    try:
        return hasattr(obj, name)
    except Exception:  # noqa: BLE001 - a JS getter may throw
        return False


TOGGLE_CSS = (
    ":host{all:initial;position:fixed;z-index:2147483000;right:20px;bottom:20px}"
    "button.toggle{all:unset;box-sizing:border-box;width:56px;height:56px;border-radius:50%;display:grid;"
    "place-items:center;cursor:pointer;background:var(--autopilot-accent,#4f46e5);"
    "color:var(--autopilot-on-accent,#fff);box-shadow:0 4px 14px rgba(0,0,0,.25)}"
    "button.toggle:focus-visible{outline:3px solid var(--autopilot-focus,#f59e0b);outline-offset:3px}"
    "button.toggle svg{width:26px;height:26px}"
)


class BarHandle:
    """What ``enable_bar`` returns: the bar and its store; ``destroy()`` undoes everything ``enable_bar`` did."""

    def __init__(self, bar: Bar, store: Store, owns_store: bool, restore_handler: bool) -> None:
        self.bar = bar
        self.store = store
        self._owns_store = owns_store
        self._restore_handler = restore_handler

    def __getattr__(self, name: str) -> Any:
        return getattr(self.bar, name)

    def destroy(self) -> None:
        """Remove the bar and the toggle, every listener and proxy; unset our confirmation handler."""
        client = self.store.client
        if self._restore_handler and client._confirmation_handler == self.store.confirmation_handler:
            client.set_confirmation_handler(None)
        self.bar.destroy()
        if self._owns_store:
            self.store.close()


def enable_bar(
    target: Any,
    *,
    loader: Any = None,
    css: str = "",
    title: str | None = None,
    on_retry: Callable[[], Any] | None = None,
    labels: dict[str, str] | None = None,
    position: str | None = None,
    sanitizer: Any = None,
) -> BarHandle:
    """Mount the bar over a client (or a store you built) and return a handle whose ``destroy()`` removes it.

    ``loader`` is the JS loader's hand-over object (its toggle is taken over); without it the bar paints its own
    toggle. ``css`` is the skin (``static/skin.css``). ``sanitizer`` is the sink sanitizer module
    (``static/sanitize.mjs``); by default the one the loader registered as ``autopilot_sanitize``. When the page
    set no confirmation handler, the bar's Allow / Deny prompt becomes it.
    """
    owns = not isinstance(target, Store)
    store = Store(target) if owns else target
    if sanitizer is None:
        try:
            import autopilot_sanitize  # type: ignore[import-not-found]  # registered by the loader

            sanitizer = autopilot_sanitize if autopilot_sanitize.isSupported else None
        except ImportError:
            log.warning("no sink sanitizer: answers are shown as plain text")
    bar = Bar(store, loader=loader, css=css, title=title, on_retry=on_retry, labels=labels, position=position,
              sanitizer=sanitizer)
    restore = False
    if store.client._confirmation_handler is None:
        store.client.set_confirmation_handler(store.confirmation_handler)
        restore = True
    return BarHandle(bar, store, owns, restore)

"""The bar: a shadow-DOM overlay rendered from the headless store (the only package that touches the DOM).

Runs only under Pyodide. This module is the shell: the host element, the shadow root and its skin, the panel's
layout, opening and closing, the focus trap, the delegated event handlers and teardown. Each part of the panel is
its own module: ``header`` (title, connection, notice), ``messages`` (the conversation, Markdown), ``calls``
(function-call pills), ``actions`` (offered actions and their forms), ``activity`` (the activity log),
``confirm`` (Allow / Deny), ``ask`` (ask-user prompts), ``composer``; ``frames`` batches store changes into
animation frames and ``dom`` holds the element factories. A part gets what it uses (``widget.ui.context``: the
element factories, the shadow root, a few callbacks; the store or its slice; the sibling parts it renders into),
never the bar: this module imports the parts, none imports it. How it stays leak-free and fast:

- **Few proxies, all tracked.** Events are delegated: one listener per event type on the panel (click, keydown,
  submit, change) plus the toggle's click, the document's shortcut key and one animation-frame callback.
  Every JS callback is a ``create_proxy`` counted in ``live_proxies()``; ``destroy()`` removes each listener and
  destroys each proxy, so nothing is left behind however long the conversation was.
- **Keyed, batched updates** (``frames``): store changes only mark parts dirty; one ``requestAnimationFrame``
  renders them, streamed text at most ~10 times a second. Messages, function-call pills, activity entries and
  confirmations are keyed by id and touched only when their signature changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, TypedDict

from ..loader_data import TOGGLE_CSS  # one toggle CSS for the loader and the bar
from ..store import Store
from .actions import Actions
from .activity import ActivityLog
from .answer_tools import AnswerTools
from .ask import AskUser
from .calls import CallPills
from .composer import Composer
from .confirm import Confirmations
from .context import Opener, PartContext
from .dom import ICONS, Dom, Listeners, absent, has, live_proxies, noop
from .events import PanelEvents, Targets
from .frames import Frames
from .header import Header
from .history import HistoryPanel
from .labels import merged
from .messages import Messages
from .sources import Sources
from .starters import Prompts
from .theme import PageTheme
from .views import MessageView, Views

__all__ = ["ICONS", "STATE_LABELS", "TOGGLE_CSS", "Bar", "BarHandle", "enable_bar", "live_proxies"]

log = logging.getLogger("widget")

#: A toggle click within this long (ms) of the bar showing keeps it open: the reader's click that meets a bar
#: reopening by itself (left open on the previous page), or a second activation, never closes what just opened.
#: The loader's early frame counts from when it showed (static/loader/toggle.mjs: JUST_OPENED_MS).
JUST_OPENED_MS = 1000.0


class EarlyComposer(TypedDict):
    """What the bar applies of the loader's composer when it opens: the caret, the focus, when it showed."""

    start: int
    end: int
    focused: bool
    opened_at: float

#: Kept for callers of the first bar (connection-state texts); the bar itself reads the labels table.
STATE_LABELS = {
    "idle": "Not connected",
    "connecting": "Connecting…",
    "connected": "Connected",
    "reconnecting": "Reconnecting…",
    "disconnected": "Disconnected",
    "error": "Connection error",
}


class Bar:
    """The overlay bar; create it with ``enable_bar``."""

    STREAM_RENDER_INTERVAL_MS = Frames.STREAM_RENDER_INTERVAL_MS
    STREAM_RENDER_COST_FACTOR = Frames.STREAM_RENDER_COST_FACTOR
    STREAM_RENDER_MAX_INTERVAL_MS = Frames.STREAM_RENDER_MAX_INTERVAL_MS

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
        self.dom = dom = Dom(js, self.labels, self.title)
        self.events = Listeners()
        self._return_focus: Any = None
        self._opened_at = 0.0  # performance.now() when the bar (or the loader's frame before it) showed
        self._early: EarlyComposer | None = None  # the loader's composer, taken over: applied when the bar opens
        self._destroyed = False
        self._tasks: set[asyncio.Future[Any]] = set()
        self._stick = False
        doc = js.document

        # --- host + shadow root + skin --------------------------------------------------------
        self.host = doc.createElement("div")
        self.host.id = "autopilot-bar-host"
        self.host.setAttribute("data-autopilot", "bar")
        pos = position or (str(loader.position) if loader is not None and has(loader, "position") else "")
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

        # --- panel and its parts ----------------------------------------------------------------
        self.panel = dom.el("section", "panel", part="panel")
        self.panel.setAttribute("role", "dialog")
        # Non-modal: the page beside it stays usable (mouse and keyboard), so focus is not kept inside it.
        self.panel.setAttribute("aria-modal", "false")
        self.panel.setAttribute("aria-label", dom.t("dialog"))
        self.panel.setAttribute("aria-describedby", "ap-hint")
        self.panel.hidden = True
        # What the parts get (widget.ui.context): the bar's operations as callbacks that look the bar up when
        # called (``flush`` may be wrapped by a test), so a part holds no bar and the parts form a tree.
        self.ctx = ctx = PartContext(dom, self.root, self.spawn, self._focus_composer)
        opener = Opener(lambda: self.is_open, self.open)
        self.scroller = dom.el("div", "scroller", part="scroller")
        self.frames = Frames(js, self.events, store, is_open=lambda: self.is_open, flush=lambda: self.flush(),
                             render=self.render_parts, prepare_stream=lambda: self.messages.prepare_stream())
        self.header = Header(dom, store, panel=self.panel, retry_connect=on_retry is not None)
        pills = CallPills(dom, store)
        views: Views = {}  # the message views on screen: Messages keeps them, actions and answer tools read them
        sources = Sources(dom, self.root)
        self.actions = Actions(ctx, store, views)
        self.answer_tools = AnswerTools(ctx, store, views=views, sources=sources)
        self.messages = Messages(ctx, store, views=views, pills=pills, sources=sources, actions=self.actions,
                                 answer_tools=self.answer_tools, frames=self.frames, sanitizer=sanitizer)
        self.activity = ActivityLog(dom, store, pills)
        self.history = HistoryPanel(  # past conversations (widget.ui.history)
            ctx, store.history, button=self.header.history_btn, scroller=self.scroller,
            activity_open=lambda: self.activity_open, hide_activity=lambda: self.show_activity(False),
            stick_to_end=self.stick_to_end, flush=lambda: self.flush(),
        )
        self.confirmations = Confirmations(ctx, store, opener)
        self.ask = AskUser(ctx, store, opener)
        self.composer = Composer(ctx, store, stick_to_end=self.stick_to_end)
        self.input = self.composer.input
        # Starters (in the empty state) and follow-up suggestions (after the list).
        self.prompts = Prompts(ctx, store, self.composer, stick_to_end=self.stick_to_end)

        body = dom.el("div", "body")
        self.scroller.appendChild(self.messages.empty)
        self.messages.empty.appendChild(self.prompts.starters_el)
        self.scroller.appendChild(self.messages.list)
        self.scroller.appendChild(self.prompts.suggestions_el)
        body.appendChild(self.scroller)
        body.appendChild(self.activity.el)
        body.appendChild(self.history.el)
        for part in (self.header.el, self.header.notice, body, self.confirmations.el, self.ask.el, self.composer.el):
            self.panel.appendChild(part)
        self.root.appendChild(self.panel)

        # --- listeners (delegated) --------------------------------------------------------------
        targets = Targets(history=self.history, actions=self.actions, answer_tools=self.answer_tools,
                          prompts=self.prompts, ask=self.ask, composer=self.composer, sources=sources)
        ev, handlers = self.events, PanelEvents(ctx, store, targets, self)
        ev.add(self.panel, "click", handlers.on_click)
        ev.add(self.panel, "keydown", handlers.on_keydown)
        ev.add(self.panel, "submit", handlers.on_submit)
        ev.add(self.panel, "change", handlers.on_change)
        ev.add(self.panel, "input", handlers.on_input)
        ev.add(self.panel, "keyup", handlers.keep_key)
        if shortcut:
            ev.add(doc, "keydown", handlers.on_document_keydown)

        (doc.body or doc.documentElement).appendChild(self.host)
        # Take over the loader's toggle: the same element stays on screen, so there is no flash.
        if loader is not None:
            self.toggle = loader.toggleButton
            self.toggle_host = loader.toggleHost
        else:
            self.toggle_host, self.toggle = self._make_toggle()
        ev.add(self.toggle, "click", self.toggle_by_reader)
        self.toggle.setAttribute("aria-label", dom.t("open"))
        self.toggle.setAttribute("aria-expanded", "false")
        self.toggle.setAttribute("aria-haspopup", "dialog")
        self.toggle.setAttribute("title", dom.t("open") + " (Alt+Shift+A)")
        if loader is not None:
            loader.handover()
            self._take_early_composer(loader)
        self._set_toggle_icon("chat")
        #: Where the open state is remembered for this tab, across the site's pages (the loader's key), if anywhere.
        self._open_key = str(loader.openKey) if loader is not None and has(loader, "openKey") else None
        self.theme = PageTheme(js, self.events, self.host)
        self._unsubscribe = store.subscribe(self.frames.on_store)
        self.frames.dirty.update({"status", "messages", "confirmations", "ask_user", "composer"})
        self.flush()

    # --- what tests and benchmarks read -------------------------------------------------------------
    @property
    def stream_interval_ms(self) -> float:
        """How long streamed text waits between renders now (ms); see ``Frames.stream_interval_ms``."""
        return self.frames.stream_interval_ms

    @property
    def _stream_render_ms(self) -> float:
        return self.frames.stream_render_ms

    @_stream_render_ms.setter
    def _stream_render_ms(self, value: float) -> None:
        self.frames.stream_render_ms = value

    @property
    def _views(self) -> dict[str, MessageView]:
        return self.messages.views

    def _select_tab(self, i: int, *, focus: bool) -> None:
        self.ask.select_tab(i, focus=focus)

    @property
    def proxy_count(self) -> int:
        """Live JS proxies held by this bar (0 after destroy)."""
        return self.events.count

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

    def _take_early_composer(self, loader: Any) -> None:
        """The loader's composer (static/loader/composer.mjs) becomes this one: the reader's text and held message
        now, the caret and focus when the bar opens (in this same task: no frame shows neither)."""
        if not has(loader, "takeComposer"):
            return
        early: Any = loader.takeComposer()
        if absent(early):
            return
        self.input.value = str(early.text)
        if bool(early.held):
            self.composer.hold()  # sent once connected, exactly once (Composer.render)
        if bool(early.open):
            self._early = {"start": int(early.start), "end": int(early.end), "focused": bool(early.focused),
                           "opened_at": float(early.openedAt)}
            self.host.setAttribute("data-instant", "true")  # the panel replaces the frame without its entry animation

    def reader_acted(self) -> None:
        """The reader clicked or typed in the open bar: it is in use, so a toggle click from now on closes it (the
        "just opened" window is for a click that meets the bar showing, not for one after working in it)."""
        self._opened_at = -JUST_OPENED_MS

    def toggle_by_reader(self, event: Any) -> None:
        """The reader's click on the toggle: open, close, or keep open a bar that showed a moment before the click
        (the event's time: a click queued while the page was busy counts from when the reader made it). The shortcut
        toggles as it always did."""
        at = float(event.timeStamp) if not absent(event) and event.timeStamp else float(self.js.performance.now())
        if self.is_open and at - self._opened_at < JUST_OPENED_MS:
            self._focus_default()
            return
        self.toggle_open()

    def _set_toggle_icon(self, name: str) -> None:
        self.toggle.innerHTML = ICONS[name]
        self.toggle.firstChild.setAttribute("part", "toggle-icon")  # replaceable, like the header's logo

    def _remember_open(self, is_open: bool) -> None:
        if self._open_key is None:
            return
        # Storage may be refused (a sandboxed frame): the state is then just not kept.
        with contextlib.suppress(Exception):
            storage = self.js.sessionStorage
            if is_open:
                storage.setItem(self._open_key, "1")
            else:
                storage.removeItem(self._open_key)

    def _sensible_return_target(self, el: Any) -> bool:
        """Whether focus may go back to ``el`` on close: still there, visible, and not a field whose focus makes
        host UI open (a search box that opens its overlay on focus would reopen what the reader left)."""
        if absent(el) or not el.isConnected or el == self.js.document.body or el == self.toggle_host:
            return False
        if el.getClientRects().length == 0 or not absent(el.closest("[inert], [aria-hidden='true']")):
            return False
        tag = str(el.tagName).lower()
        if tag in ("textarea", "select") or bool(el.isContentEditable):
            return False
        return not (tag == "input" and str(el.type).lower() not in ("button", "submit", "reset", "checkbox", "radio",
                                                                     "image", "file", "color", "range"))

    # --- open / close -------------------------------------------------------------------------------
    def open(self) -> None:
        """Show the bar and focus the composer (or what waits for the reader)."""
        if self._destroyed:
            return
        early, self._early = self._early, None
        if not self.is_open:
            active = self.js.document.activeElement
            self._return_focus = active if self._sensible_return_target(active) else None
            self._opened_at = early["opened_at"] if early is not None else float(self.js.performance.now())
        self.is_open = True
        self.panel.hidden = False
        self.host.setAttribute("data-open", "true")
        self.toggle.setAttribute("aria-expanded", "true")
        self.toggle.setAttribute("aria-label", self.dom.t("close"))
        self._set_toggle_icon("chevron")
        self._remember_open(True)
        self.flush()
        self._scroll_to_end()
        if early is None or early["focused"]:
            self._focus_default()
        if early is not None:
            self.input.setSelectionRange(early["start"], early["end"])  # the caret where the reader left it

    def close(self) -> None:
        """Hide the bar and return focus to the control that opened it (else the toggle)."""
        if self._destroyed:
            return
        was_open = self.is_open
        self.is_open = False
        self.panel.hidden = True
        self.host.removeAttribute("data-open")
        self.host.removeAttribute("data-instant")
        self.toggle.setAttribute("aria-expanded", "false")
        self.toggle.setAttribute("aria-label", self.dom.t("open"))
        self._set_toggle_icon("chat")
        self._remember_open(False)
        if was_open:
            target = self._return_focus
            self._return_focus = None
            if not self._sensible_return_target(target):
                target = self.toggle
            target.focus()

    def toggle_open(self) -> None:
        """Open when closed, close when open."""
        self.close() if self.is_open else self.open()

    def _focus_composer(self) -> None:
        """Where the focus goes when what had it leaves (a part asks through its context)."""
        self.input.focus()

    def _focus_default(self) -> None:
        if self.store.pending_confirmations and self.confirmations.focus_last():
            return
        if self.history.visible:  # reopened on the list of past conversations
            self.history.back_button().focus()
            return
        if self.store.pending_ask_user and not self.ask.el.hidden:
            self.ask.focus()
        else:
            self.input.focus()

    def show_activity(self, show: bool) -> None:
        """Show the activity log instead of the conversation (or back)."""
        if self._destroyed:
            return
        if show and self.history.visible:
            self.history.show(False, focus=False)
        self.activity_open = show
        self.activity.el.hidden = not show
        self.scroller.hidden = show
        self.header.show_activity_pressed(show)
        if show:
            self.frames.dirty.add("activity")
            self.flush()
            self.activity.back_button().focus()
        else:
            self.header.activity_btn.focus()
            self._scroll_to_end()

    def spawn(self, coro: Any) -> None:
        """Run a store action in the background (cancelled by ``destroy``)."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- rendering -----------------------------------------------------------------------------------
    def flush(self) -> None:
        """Render every dirty part now (the animation frame calls this; tests may too)."""
        if not self._destroyed:
            self.frames.flush()

    def render_parts(self, dirty: set[str]) -> None:
        """Render the parts in ``dirty``, in an order that keeps the focus and the scroll position right."""
        stick = self._near_end() if ("messages" in dirty or "streaming" in dirty) else False
        if "status" in dirty:
            self.header.render()
        if "messages" in dirty:
            self.messages.render()
        elif "streaming" in dirty:
            self.messages.render_streaming()
        if "confirmations" in dirty:
            self.confirmations.render()
        if "ask_user" in dirty:
            self.ask.render()
        if "composer" in dirty:
            self.composer.render()
        if dirty & {"messages", "composer", "starters"}:
            self.prompts.render()
        if self.activity_open and "activity" in dirty:
            self.activity.render()
        if "history" in dirty:
            self.history.render()
        if stick or self._stick:
            self._stick = False
            self._scroll_to_end()

    def stick_to_end(self) -> None:
        """Scroll to the end at the next render (the reader just sent something)."""
        self._stick = True

    def _near_end(self) -> bool:
        if not self.is_open:
            return True
        sc = self.scroller
        return bool(sc.scrollHeight - sc.scrollTop - sc.clientHeight < 64)

    def _scroll_to_end(self) -> None:
        if self.is_open and not self.activity_open:
            self.scroller.scrollTop = self.scroller.scrollHeight

    # --- teardown ----------------------------------------------------------------------------------------
    def destroy(self) -> None:
        """Remove both elements, every listener and every proxy; pending work is cancelled."""
        if self._destroyed:
            return
        self._destroyed = True
        self._unsubscribe()
        # The store's unsubscribe closure holds our bound method: a cycle that only Python's collector (which
        # runs when Python allocates, maybe never again) would free, and with it every element this bar rendered.
        self._unsubscribe = noop
        self.frames.close()
        self.theme.close()
        for task in list(self._tasks):
            task.cancel()
        self.events.close()
        self.messages.clear()
        self.activity.clear()
        self.confirmations.clear()
        self.host.remove()
        self.toggle_host.remove()
        # The parts reach the bar through their context's callbacks: dropping every object of this package that
        # the bar holds (its parts, their context) breaks those cycles, so reference counting alone frees the bar
        # and every element it rendered (as above, the cycle collector may never run); the parts form a tree, so
        # they go too. Found by looking, not listed: a part added later cannot be forgotten here. The listeners
        # stay (closed above: ``proxy_count`` reads them).
        for name, value in list(vars(self).items()):
            if type(value).__module__.startswith(__package__ + ".") and value is not self.events:
                delattr(self, name)


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
        if self._restore_handler and client.confirmation_handler == self.store.confirmation_handler:
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
    if store.client.confirmation_handler is None:
        store.client.set_confirmation_handler(store.confirmation_handler)
        restore = True
    return BarHandle(bar, store, owns, restore)

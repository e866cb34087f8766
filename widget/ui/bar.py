"""The bar: a shadow-DOM overlay rendered from the headless store (the only module here that touches the DOM).

Runs only under Pyodide. Every JS callback is a ``create_proxy`` kept in ``self._proxies`` and destroyed by
``destroy()``, so tearing the bar down leaves no listener or proxy behind.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from ..store import Store

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

    def __init__(self, store: Store, *, loader: Any, css: str, title: str = "Autopilot",
                 on_retry: Callable[[], Any] | None = None) -> None:
        import js

        self.js = js
        self.store = store
        self.loader = loader
        self.title = title
        self.on_retry = on_retry
        self._proxies: list[Any] = []
        self._listeners: list[tuple[Any, str, Any]] = []
        self._rendered: dict[str, Any] = {}
        self.is_open = False
        doc = js.document
        self.host = doc.createElement("div")
        self.host.id = "autopilot-bar-host"
        self.host.setAttribute("data-autopilot", "bar")
        self.root = self.host.attachShadow(js.Object.fromEntries([["mode", "open"]]))
        sheet = js.CSSStyleSheet.new()
        sheet.replaceSync(css)
        self.root.adoptedStyleSheets = js.Array.of(sheet)
        self.panel = self._el("section", "panel", part="panel")
        self.panel.setAttribute("role", "dialog")
        self.panel.setAttribute("aria-label", title)
        self.panel.hidden = True
        header = self._el("header", "header", part="header")
        h = self._el("h2", "title", text=title)
        self.conn = self._el("span", "connection", part="connection")
        self.conn.setAttribute("role", "status")
        self.new_chat = self._button("New chat", "new-chat", self._on_new_chat)
        self.close_btn = self._button("✕", "close", lambda e: self.close())
        self.close_btn.setAttribute("aria-label", f"Close {title}")
        for child in (h, self.conn, self.new_chat, self.close_btn):
            header.appendChild(child)
        self.notice = self._el("div", "notice", part="notice")
        self.notice.hidden = True
        self.list = self._el("ol", "messages", part="messages")
        self.list.setAttribute("aria-live", "polite")
        self.list.setAttribute("aria-label", "Conversation")
        self.confirmations = self._el("div", "confirmations", part="confirmations")
        form = self._el("form", "composer", part="composer")
        self.input = self._el("textarea", "input", part="input")
        self.input.setAttribute("aria-label", "Message")
        self.input.setAttribute("placeholder", "Ask anything…")
        self.input.rows = 2
        self.send_btn = self._el("button", "send", part="send", text="Send")
        self.send_btn.type = "submit"
        form.appendChild(self.input)
        form.appendChild(self.send_btn)
        self._listen(form, "submit", self._on_submit)
        self._listen(self.input, "keydown", self._on_keydown)
        self._listen(self.panel, "keydown", self._on_panel_keydown)
        for child in (header, self.notice, self.list, self.confirmations, form):
            self.panel.appendChild(child)
        self.root.appendChild(self.panel)
        (doc.body or doc.documentElement).appendChild(self.host)
        # Take over the loader's toggle: same element, so no flash.
        self.toggle = loader.toggleButton
        self._listen(self.toggle, "click", lambda e: self.toggle_open())
        loader.handover()
        self._unsubscribe = store.subscribe(self._on_change)
        self.render_all()

    # --- DOM helpers -------------------------------------------------------------
    def _el(self, tag: str, cls: str, *, part: str | None = None, text: str | None = None) -> Any:
        el = self.js.document.createElement(tag)
        el.className = cls
        if part:
            el.setAttribute("part", part)
        if text is not None:
            el.textContent = text
        return el

    def _button(self, label: str, cls: str, handler: Callable[[Any], Any]) -> Any:
        b = self._el("button", cls, part=cls, text=label)
        b.type = "button"
        self._listen(b, "click", handler)
        return b

    def _listen(self, target: Any, event: str, handler: Callable[[Any], Any]) -> None:
        from pyodide.ffi import create_proxy

        proxy = create_proxy(handler)
        target.addEventListener(event, proxy)
        self._proxies.append(proxy)
        self._listeners.append((target, event, proxy))

    # --- open / close --------------------------------------------------------------
    def open(self) -> None:
        """Show the bar and focus the composer."""
        self.is_open = True
        self.panel.hidden = False
        self.toggle.setAttribute("aria-expanded", "true")
        self.host.setAttribute("data-open", "true")
        self.input.focus()

    def close(self) -> None:
        """Hide the bar and return focus to the toggle."""
        self.is_open = False
        self.panel.hidden = True
        self.toggle.setAttribute("aria-expanded", "false")
        self.host.removeAttribute("data-open")
        self.toggle.focus()

    def toggle_open(self) -> None:
        """Open when closed, close when open."""
        self.close() if self.is_open else self.open()

    def _on_panel_keydown(self, event: Any) -> None:
        if event.key == "Escape":
            event.preventDefault()
            self.close()

    # --- input -----------------------------------------------------------------------
    def _on_keydown(self, event: Any) -> None:
        if event.key == "Enter" and not event.shiftKey and not event.isComposing:
            event.preventDefault()
            self._send()

    def _on_submit(self, event: Any) -> None:
        event.preventDefault()
        self._send()

    def _send(self) -> None:
        text = str(self.input.value)
        if not text.strip():
            return
        self.input.value = ""
        asyncio.ensure_future(self._send_async(text))

    async def _send_async(self, text: str) -> None:
        try:
            await self.store.client.send_message(text)
        except Exception as exc:  # noqa: BLE001 - shown to the reader, text kept for another try
            self.input.value = text
            self.show_notice(f"Not sent: {exc}", retry=False)

    def _on_new_chat(self, event: Any) -> None:
        async def go() -> None:
            try:
                await self.store.client.new_conversation()
            except Exception as exc:  # noqa: BLE001
                self.show_notice(f"Could not start a new chat: {exc}", retry=True)

        asyncio.ensure_future(go())

    # --- rendering ---------------------------------------------------------------------
    def _on_change(self, what: str) -> None:
        if what in ("messages", "calls"):
            self.render_messages()
        elif what == "pending_confirmations":
            self.render_confirmations()
        else:
            self.render_status()

    def render_all(self) -> None:
        """Render every part from the store."""
        self.render_status()
        self.render_messages()
        self.render_confirmations()

    def render_status(self) -> None:
        """Connection state, role and errors."""
        s = self.store
        self.conn.textContent = STATE_LABELS.get(s.connection_state, s.connection_state)
        self.conn.setAttribute("data-state", s.connection_state)
        busy = s.connection_state != "connected" or not s.active
        self.send_btn.disabled = busy
        if s.connection_state == "error" and s.errors:
            self.show_notice(s.errors[-1].get("message", "Connection error"), retry=True)
        elif s.connection_state == "connected" and not s.active:
            self.show_notice("This conversation is active in another tab.", retry=False, use_here=True)
        else:
            self.notice.hidden = True

    def show_notice(self, text: str, *, retry: bool, use_here: bool = False) -> None:
        """A message above the conversation, with Retry or Use here when it helps."""
        self.notice.textContent = ""
        msg = self._el("p", "notice-text", text=text)
        self.notice.appendChild(msg)
        if retry and self.on_retry is not None:
            self.notice.appendChild(self._button("Retry", "retry", lambda e: self.on_retry()))
        if use_here:
            self.notice.appendChild(
                self._button("Use here", "use-here", lambda e: asyncio.ensure_future(self.store.client.activate()))
            )
        self.notice.hidden = False

    def render_messages(self) -> None:
        """Keyed update of the message list: only changed messages touch the DOM."""
        messages = list(self.store.visible_messages)
        streaming = self.store.streaming_message
        if streaming is not None:
            messages.append({**streaming, "_streaming": True})
        seen = set()
        for index, m in enumerate(messages):
            key = str(m.get("id") or f"i{index}")
            seen.add(key)
            el = self._rendered.get(key)
            if el is None:
                el = self._el("li", f"message {m.get('role', 'assistant')}", part=f"message {m.get('role', '')}")
                el.setAttribute("data-role", str(m.get("role")))
                body = self._el("div", "content")
                el.appendChild(body)
                calls = self._el("div", "calls")
                el.appendChild(calls)
                self.list.appendChild(el)
                self._rendered[key] = el
            body = el.firstChild
            text = str(m.get("content") or "")
            if body.textContent != text:
                body.textContent = text
            if m.get("_streaming"):
                el.setAttribute("aria-busy", "true")
            else:
                el.removeAttribute("aria-busy")
            self._render_calls(el.lastChild, m.get("function_calls") or [])
        for key in [k for k in self._rendered if k not in seen]:
            self._rendered.pop(key).remove()
        self.list.scrollTop = self.list.scrollHeight

    def _render_calls(self, container: Any, calls: list[dict[str, Any]]) -> None:
        labels = []
        for c in calls:
            status = c.get("status") or "running"
            ms = c.get("total_ms") if c.get("total_ms") is not None else c.get("duration_ms")
            timing = f" · {ms:.0f} ms" if isinstance(ms, (int, float)) else ""
            labels.append((f"{c.get('name')} — {status}{timing}", status))
        current = [str(ch.textContent) for ch in container.children]
        if current == [label for label, _ in labels]:
            return
        container.textContent = ""
        for label, status in labels:
            pill = self._el("span", f"pill {status}", part="pill", text=label)
            container.appendChild(pill)

    def render_confirmations(self) -> None:
        """One Allow/Deny prompt per pending sensitive call; focus moves to the newest."""
        import json

        self.confirmations.textContent = ""
        last_allow = None
        for item in self.store.pending_confirmations:
            req = item["request"]
            box = self._el("div", "confirm", part="confirmation")
            box.setAttribute("role", "alertdialog")
            box.setAttribute("aria-label", f"Allow {req.get('name')}?")
            box.appendChild(self._el("p", "confirm-title", text=f"Allow “{req.get('name')}” to run?"))
            box.appendChild(self._el("pre", "confirm-args", text=json.dumps(req.get("arguments"), indent=2)))
            cid = item["id"]
            allow = self._button("Allow", "allow", lambda e, cid=cid: self.store.resolve_confirmation(cid, "allow"))
            deny = self._button("Deny", "deny", lambda e, cid=cid: self.store.resolve_confirmation(cid, "deny"))
            box.appendChild(allow)
            box.appendChild(deny)
            self.confirmations.appendChild(box)
            last_allow = deny
        if last_allow is not None:
            if not self.is_open:
                self.open()
            last_allow.focus()

    # --- teardown ---------------------------------------------------------------------------
    def destroy(self) -> None:
        """Remove both elements, every listener and every proxy."""
        self._unsubscribe()
        for target, event, proxy in self._listeners:
            target.removeEventListener(event, proxy)
        for proxy in self._proxies:
            proxy.destroy()
        self._listeners.clear()
        self._proxies.clear()
        self.host.remove()
        self.loader.toggleHost.remove()

    @property
    def proxy_count(self) -> int:
        """Live JS proxies held by the bar (0 after destroy)."""
        return len(self._proxies)


def enable_bar(store: Store, *, loader: Any, css: str, title: str = "Autopilot",
               on_retry: Callable[[], Any] | None = None) -> Bar:
    """Mount the bar over ``store``; returns the bar (``destroy()`` removes it)."""
    bar = Bar(store, loader=loader, css=css, title=title, on_retry=on_retry)
    if store.client._confirmation_handler is None:
        store.client.set_confirmation_handler(store.confirmation_handler)
    return bar

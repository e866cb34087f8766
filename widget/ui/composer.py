"""The composer: the message field with Send (Stop while an answer streams), read-only while the relay waits.

While the connection is not up the reader may still type (keys pressed while the widget connects are not lost),
and Enter or Send holds the message until the connection is up, then sends it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..protocol import ConnectionState
from ..store import WAIT_ASK_USER, WAIT_CONFIRMATION, WAIT_FUNCTION, Store
from .context import PartContext


class Composer:
    """The composer form; ``render`` touches the DOM only when what it shows changed.

    ``stick_to_end``: the bar scrolls to the end at its next render (the reader just sent something).
    """

    def __init__(self, ctx: PartContext, store: Store, *, stick_to_end: Callable[[], None]) -> None:
        self._ctx = ctx
        self._store = store
        self._stick_to_end = stick_to_end
        dom, lbl = ctx.dom, ctx.dom.labels
        self._sig: Any = None
        self._held = False  # Enter/Send pressed before the connection was up: send once it is
        self.el = dom.el("form", "composer", part="composer")
        self.el.setAttribute("data-form", "composer")
        row = dom.el("div", "composer-row")
        self.input = dom.el("textarea", "input", part="input")
        self.input.setAttribute("aria-label", lbl["input"])
        self.input.setAttribute("aria-describedby", "ap-hint")
        self.input.setAttribute("placeholder", lbl["placeholder"])
        self.input.setAttribute("rows", "1")
        self.input.setAttribute("enterkeyhint", "send")
        self.send_btn = dom.icon_button("send", "send", lbl["send"], part="send")
        self.send_btn.type = "submit"
        self.stop_btn = dom.icon_button("stop", "stop", lbl["stop"], action="stop", part="stop")
        self.stop_btn.hidden = True
        row.appendChild(self.input)
        row.appendChild(self.send_btn)
        row.appendChild(self.stop_btn)
        self.el.appendChild(row)
        self.hint = dom.el("p", "hint", text=lbl["hint"], id="ap-hint")
        self.hint.setAttribute("aria-live", "polite")
        self.el.appendChild(self.hint)

    def render(self) -> None:
        """Enabled, read-only while the relay waits for the reader or the page, Stop while streaming."""
        s = self._store
        lbl = self._ctx.dom.labels
        streaming = s.is_streaming
        waiting = s.waiting_for
        offline = s.connection_state != ConnectionState.CONNECTED
        if offline:
            blocked = False  # typing is fine; sending waits for the connection (see send)
            placeholder = lbl.get(f"state_{s.connection_state}", lbl["placeholder_offline"])
        elif not s.active:
            blocked, placeholder = True, lbl["placeholder_read_only"]
        elif waiting == WAIT_ASK_USER:
            blocked, placeholder = True, lbl["placeholder_wait_ask_user"]
        elif waiting == WAIT_CONFIRMATION:
            blocked, placeholder = True, lbl["placeholder_wait_confirmation"]
        elif waiting == WAIT_FUNCTION or s.context_resolutions:
            blocked, placeholder = True, lbl["placeholder_wait_function"]
        else:
            blocked, placeholder = False, lbl["placeholder"]
        if self._held and s.can_send:
            self._held = False
            self.send()
        held = self._held
        sig = (blocked, placeholder, streaming, held)
        if sig == self._sig:  # per chunk this is the common case: no DOM write, no style invalidation
            return
        self._sig = sig
        self.el.setAttribute("data-held", "true" if held else "false")
        self.hint.textContent = lbl["hint_held"] if held else lbl["hint"]
        # read-only rather than disabled: a focused composer keeps focus (keyboard users are not dropped).
        self.input.readOnly = blocked
        self.input.setAttribute("aria-disabled", "true" if blocked else "false")
        self.input.setAttribute("placeholder", placeholder)
        self.el.setAttribute("data-blocked", "true" if blocked else "false")
        stop_focused = self._ctx.root.activeElement == self.stop_btn
        self.stop_btn.hidden = not streaming
        self.send_btn.hidden = streaming
        self.send_btn.disabled = blocked
        if stop_focused and not streaming:
            self.input.focus()

    def hold(self) -> None:
        """Send what is in the field once the connection is up (Enter pressed in the loader's composer)."""
        self._held = True

    def send(self) -> None:
        """Send what was typed; the text comes back into the field when the send failed and nothing new was typed."""
        text = str(self.input.value)
        store = self._store
        if not text.strip():
            return
        if store.connection_state != ConnectionState.CONNECTED:
            self._held = True  # kept in the field; render() sends it when the connection is up
            self.render()
            return
        if not store.can_send:
            return
        self.input.value = ""
        self._stick_to_end()

        async def go() -> None:
            if not await store.send(text) and not str(self.input.value):
                self.input.value = text

        self._ctx.spawn(go())

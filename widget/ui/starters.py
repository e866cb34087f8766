"""Starter prompts on the empty bar and the model's follow-up suggestions under the last answer.

Both are the reader's own words: each is a real button (keyboard reachable, named by its text, in a labelled group)
and pressing it sends its text as the reader's message, exactly as if it had been typed; nothing here runs a page
function or an action. Starters sit in the empty state and go with the first message; suggestions sit under the
conversation and go when the reader sends the next message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..protocol import ConnectionState
from ..store import Store
from .composer import Composer
from .context import PartContext
from .dom import absent

#: ``data-action`` values of these buttons (the bar's click handler hands them here).
ACTIONS = frozenset({"starter", "suggestion"})


class Prompts:
    """The starters row (in the empty state) and the suggestions row (after the message list)."""

    def __init__(self, ctx: PartContext, store: Store, composer: Composer, *,
                 stick_to_end: Callable[[], None]) -> None:
        self._ctx = ctx
        self._store = store
        self._composer = composer  # a press before the connection is up is held by it like a typed message
        self._stick_to_end = stick_to_end
        dom, lbl = ctx.dom, ctx.dom.labels
        self.starters_el = dom.el("div", "starters", part="starters")
        self.starters_el.setAttribute("role", "group")
        self.starters_el.setAttribute("aria-label", lbl["starters"])
        self.starters_el.hidden = True
        self.suggestions_el = dom.el("div", "suggestions", part="suggestions")
        self.suggestions_el.setAttribute("role", "group")
        self.suggestions_el.setAttribute("aria-label", lbl["suggestions"])
        self.suggestions_el.hidden = True
        #: What each row last rendered: (texts, enabled), and the texts its buttons stand for, by index.
        self._sig: dict[str, Any] = {"starter": None, "suggestion": None}
        self._texts: dict[str, list[str]] = {"starter": [], "suggestion": []}

    def render(self) -> None:
        """Both rows, touched only when what they show changed."""
        s = self._store
        # Before the connection is up a press is held by the composer like a typed message (see on_action).
        enabled = s.can_send or s.connection_state != ConnectionState.CONNECTED
        self._row("starter", self.starters_el, s.starters, enabled)
        self._row("suggestion", self.suggestions_el, s.suggestions[1], enabled)

    def _row(self, kind: str, row: Any, texts: list[str], enabled: bool) -> None:
        sig = (tuple(texts), enabled)
        if sig == self._sig[kind]:
            return
        self._sig[kind] = sig
        if tuple(self._texts[kind]) == sig[0] and int(row.children.length) == len(texts):
            for b in row.children:  # same texts: only the enabled state changed (focus stays where it is)
                b.disabled = not enabled
        else:
            focused = self._focused_index(row)
            row.textContent = ""
            for i, text in enumerate(texts):
                b = self._ctx.dom.text_button(text, kind, kind, part=kind)
                b.setAttribute("data-index", str(i))
                b.setAttribute("dir", "auto")
                b.disabled = not enabled
                row.appendChild(b)
            self._texts[kind] = list(texts)
            if focused is not None:
                self._refocus(row, focused)
        row.hidden = not texts

    def _focused_index(self, row: Any) -> int | None:
        active = self._ctx.root.activeElement
        if absent(active) or not row.contains(active):
            return None
        return int(active.getAttribute("data-index") or 0)

    def _refocus(self, row: Any, index: int) -> None:
        """Focus stays in a row whose buttons were replaced (else it would fall to the page's body)."""
        n = int(row.children.length)
        if n:
            row.children.item(min(index, n - 1)).focus()
        else:
            self._ctx.focus_composer()

    def on_action(self, action: str, el: Any) -> None:
        """A press on a starter or a suggestion: its text goes as the reader's message."""
        texts = self._texts.get(action, [])
        try:
            index = int(el.getAttribute("data-index"))
        except (TypeError, ValueError):
            return
        if not 0 <= index < len(texts):
            return
        store, composer = self._store, self._composer
        if store.connection_state != ConnectionState.CONNECTED:
            if not str(composer.input.value).strip():  # never overwrite what the reader typed
                composer.input.value = texts[index]
                composer.input.focus()
                composer.send()  # held, and sent once the connection is up
            return
        if store.can_send:
            self.send(texts[index])

    def send(self, text: str) -> None:
        """Send ``text`` as if typed: the conversation scrolls to it, the composer takes the focus (the pressed
        button goes away) and gets the text back if the send failed and nothing new was typed."""
        store, field = self._store, self._composer.input
        self._stick_to_end()
        field.focus()

        async def go() -> None:
            if not await store.send_prompt(text) and not str(field.value):
                field.value = text

        self._ctx.spawn(go())

"""Under each finished answer: copy it (as Markdown or as plain text), copy a code block, and rate it.

Every control is a real button (keyboard reachable, named for assistive technology). A copy writes to the
clipboard and the button says "Copied" for a moment (announced through the bar's live region); a thumb shows its
state with ``aria-pressed`` and pressing the pressed one takes the rating back. Nothing here runs page code.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .bar import Bar
    from .messages import MessageView

log = logging.getLogger("widget")

#: How long a copy button says "Copied", ms.
COPIED_MS = 1600
#: ``data-action`` values of these controls (the bar's click handler hands them here).
ACTIONS = frozenset({"answer-copy-md", "answer-copy-text", "answer-copy-code", "answer-rate-up", "answer-rate-down"})


class AnswerTools:
    """The copy and rating buttons of the bar's answers (one row per finished assistant message)."""

    def __init__(self, bar: Bar) -> None:
        self.bar = bar
        self.dom = bar.dom
        #: view key -> (row element, what it last rendered)
        self._rows: dict[str, tuple[Any, Any]] = {}

    def render(self, view: MessageView, m: dict[str, Any], streaming: bool) -> None:
        """The row of one assistant message: hidden while it streams or when it has no text."""
        message_id = m.get("id")
        text = str(m.get("content") or "")
        rating = self.bar.store.ratings.rating(message_id)
        sig = (message_id, text, streaming, rating)
        row, last = self._rows.get(view.key, (None, None))
        if row is not None and last == sig:
            return
        if row is None:
            row = self.dom.el("div", "answer-tools", part="answer-tools")
            row.setAttribute("role", "group")
            row.setAttribute("aria-label", self.dom.labels["answer_tools"])
            view.el.insertBefore(row, view.footer)
        self._rows[view.key] = (row, sig)
        row.textContent = ""
        row.hidden = streaming or not text or not isinstance(message_id, str)
        if row.hidden or not isinstance(message_id, str):
            return
        lbl = self.dom.labels
        row.appendChild(self._button(lbl["copy_markdown"], "copy", "answer-copy-md", message_id))
        row.appendChild(self._button(lbl["copy_text"], "copy", "answer-copy-text", message_id))
        thumbs = (("up", "answer-rate-up", lbl["rate_up"], "👍"), ("down", "answer-rate-down", lbl["rate_down"], "👎"))
        for value, action, label, face in thumbs:
            b = self.dom.el("button", f"rate rate-{value}", part=f"rate-{value}", text=face)
            b.type = "button"
            b.setAttribute("data-action", action)
            b.setAttribute("data-id", message_id)
            b.setAttribute("aria-label", label)
            b.setAttribute("title", label)
            b.setAttribute("aria-pressed", "true" if rating == value else "false")
            row.appendChild(b)
        self._code_buttons(view, row, message_id)

    def _button(self, label: str, cls: str, action: str, message_id: str) -> Any:
        b = self.dom.text_button(label, cls, action, message_id)
        b.setAttribute("data-label", label)
        return b

    def _code_buttons(self, view: MessageView, row: Any, message_id: str) -> None:
        """A copy button in the row for each code block of the answer (the answer's own HTML stays as rendered)."""
        count = int(view.body.querySelectorAll("pre").length)
        for i in range(count):
            label = self.dom.labels["copy_code"] if count == 1 else self.dom.t("copy_code_n", n=i + 1)
            b = self._button(label, "copy copy-code", "answer-copy-code", message_id)
            b.setAttribute("data-block", str(i))
            row.appendChild(b)

    def forget(self, key: str) -> None:
        """A message view went away."""
        self._rows.pop(key, None)

    # --- actions -------------------------------------------------------------------------------------
    def on_action(self, action: str, message_id: str | None, el: Any) -> None:
        """A click on one of this module's buttons."""
        if message_id is None:
            return
        if action in ("answer-rate-up", "answer-rate-down"):
            self.bar.spawn(self.bar.store.ratings.rate(message_id, "up" if action == "answer-rate-up" else "down"))
            return
        text = self._copy_text(action, message_id, el)
        if text is not None:
            self.bar.spawn(self._copy(text, el))

    def _copy_text(self, action: str, message_id: str, el: Any) -> str | None:
        message = next((m for m in self.bar.store.messages if m.get("id") == message_id), None)
        if message is None:
            return None
        if action == "answer-copy-md":
            return str(message.get("content") or "")
        view = next((v for v in self.bar.messages.views.values() if v.el.contains(el)), None)
        if view is None:
            return None
        if action == "answer-copy-code":
            blocks = view.body.querySelectorAll("pre")
            index = int(el.getAttribute("data-block") or 0)
            return str(blocks.item(index).textContent) if index < int(blocks.length) else None
        return str(view.body.innerText).strip()  # plain text: what the reader sees, with its line breaks

    async def _copy(self, text: str, button: Any) -> None:
        import js

        try:
            await js.navigator.clipboard.writeText(text)
        except Exception as exc:  # noqa: BLE001 - no clipboard permission: say so on the button
            log.warning("copy failed: %s", exc)
            self._say(button, self.dom.labels["copy_failed"])
            return
        self._say(button, self.dom.labels["copied"])

    def _say(self, button: Any, text: str) -> None:
        """Show ``text`` on the button for a moment, then its label again."""
        import js
        from pyodide.ffi import create_once_callable

        label = button.getAttribute("data-label") or button.textContent
        button.textContent = text
        button.setAttribute("data-copied", "true")

        def back() -> None:
            button.textContent = label
            button.removeAttribute("data-copied")

        js.setTimeout(create_once_callable(back), COPIED_MS)

"""Under each finished answer: copy it (as Markdown or as plain text), copy a code block, rate it and comment.

Every control is a real button (keyboard reachable, named for assistive technology). A copy writes to the
clipboard and the button says "Copied" for a moment (announced through the bar's live region); a thumb shows its
state with ``aria-pressed`` and pressing the pressed one takes the rating back. A thumb opens the optional comment
form (``widget.ui.comment_form``); once an answer is rated, its row has "Add a comment" / "Edit comment". The
buttons are built once per answer text and only their state changes afterwards, so a focused button keeps the
focus. Nothing here runs page code.
"""

from __future__ import annotations

import logging
from typing import Any

from ..store import Store
from .comment_form import CommentForms
from .context import PartContext
from .dom import absent
from .sources import Sources
from .views import AnswerRow, MessageView, Views

__all__ = ["ACTIONS", "COPIED_MS", "AnswerRow", "AnswerTools"]

log = logging.getLogger("widget")

#: How long a copy button says "Copied", ms.
COPIED_MS = 1600
#: ``data-action`` values of these controls (the bar's click handler hands them here).
ACTIONS = frozenset({"answer-copy-md", "answer-copy-text", "answer-copy-code", "answer-rate-up", "answer-rate-down",
                     "answer-comment", "comment-cancel"})


class AnswerTools:
    """The copy, rating and comment controls of the bar's answers (one row per finished assistant message)."""

    def __init__(self, ctx: PartContext, store: Store, *, views: Views, sources: Sources) -> None:
        self._ctx = ctx
        self._store = store
        self._views = views  # the message views on screen ("Copy as text" copies what one shows)
        self._sources = sources
        self.dom = ctx.dom
        #: view key -> its row
        self._rows: dict[str, AnswerRow] = {}
        self.comments = CommentForms(ctx, store.ratings, self._rows)

    def render(self, view: MessageView, m: dict[str, Any], held_back: bool) -> None:
        """The row of one assistant message: hidden when ``held_back`` (it streams, or it is not its turn's answer)
        or when it has no text."""
        message_id = m.get("id")
        mid = message_id if isinstance(message_id, str) else None
        text = str(m.get("content") or "")
        row = self._rows.get(view.key)
        if row is None:
            row = self._new_row(view, mid)
        hidden = held_back or not text or mid is None
        built = (mid, text, hidden)
        if row.built != built:
            if row.message_id != mid:
                self.comments.close(row, focus_back=False)
                row.thanked = False
                row.message_id = mid
            focused = self._focused_control(row)
            self._build(view, row, hidden)
            row.built, row.shown = built, None
            self._refocus(row, focused)
        row.el.hidden = row.area.hidden = hidden
        if not hidden:
            self.comments.show_state(row)

    def _new_row(self, view: MessageView, mid: str | None) -> AnswerRow:
        el = self.dom.el("div", "answer-tools", part="answer-tools")
        el.setAttribute("role", "group")
        el.setAttribute("aria-label", self.dom.labels["answer_tools"])
        area = self.dom.el("div", "answer-comment", part="answer-comment")
        status = self.dom.el("p", "answer-status", part="answer-status")
        status.setAttribute("role", "status")
        area.appendChild(status)
        view.el.insertBefore(el, view.footer)
        view.el.insertBefore(area, view.footer)
        row = AnswerRow(message_id=mid, el=el, area=area, status=status)
        self._rows[view.key] = row
        return row

    def _build(self, view: MessageView, row: AnswerRow, hidden: bool) -> None:
        row.el.textContent = ""
        row.up = row.down = row.comment = None
        message_id = row.message_id
        if hidden or message_id is None:
            return
        lbl = self.dom.labels
        row.el.appendChild(self._button(lbl["copy_markdown"], "copy", "answer-copy-md", message_id))
        row.el.appendChild(self._button(lbl["copy_text"], "copy", "answer-copy-text", message_id))
        thumbs = (("up", "answer-rate-up", lbl["rate_up"]), ("down", "answer-rate-down", lbl["rate_down"]))
        for value, action, label in thumbs:
            b = self.dom.el("button", f"rate rate-{value}", part=f"rate-{value}")
            b.type = "button"
            b.appendChild(self.dom.icon(f"thumb_{value}"))
            b.setAttribute("data-action", action)
            b.setAttribute("data-id", message_id)
            b.setAttribute("aria-label", label)
            b.setAttribute("title", label)
            row.el.appendChild(b)
            if value == "up":
                row.up = b
            else:
                row.down = b
        row.comment = self.dom.text_button(lbl["comment_add"], "comment-toggle", "answer-comment", message_id)
        row.comment.setAttribute("aria-expanded", "false")
        row.el.appendChild(row.comment)
        self._code_buttons(view, row.el, message_id)

    def _focused_control(self, row: AnswerRow) -> tuple[str, str] | None:
        active = self._ctx.root.activeElement
        if absent(active) or not row.el.contains(active):
            return None
        return str(active.getAttribute("data-action") or ""), str(active.getAttribute("data-block") or "")

    def _refocus(self, row: AnswerRow, focused: tuple[str, str] | None) -> None:
        """After a rebuild, the focus goes back to the button that had it (or the row's first)."""
        if focused is None:
            return
        for b in row.el.querySelectorAll("button"):
            if (str(b.getAttribute("data-action") or ""), str(b.getAttribute("data-block") or "")) == focused:
                b.focus()
                return
        first = row.el.querySelector("button:not([hidden])")
        if not absent(first):
            first.focus()

    def row_of(self, message_id: str) -> AnswerRow | None:
        """The row of an answer, if it is on screen."""
        return self.comments.row_of(message_id)

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
        """A message view went away (its row and comment area went with it)."""
        row = self._rows.pop(key, None)
        if row is not None:
            row.form = None

    # --- actions -------------------------------------------------------------------------------------
    def on_action(self, action: str, message_id: str | None, el: Any) -> None:
        """A click on one of this module's buttons."""
        if message_id is None:
            return
        if action in ("answer-rate-up", "answer-rate-down"):
            self._rate(message_id, "up" if action == "answer-rate-up" else "down")
            return
        row = self.row_of(message_id)
        if action == "answer-comment" and row is not None:
            if row.form is not None:
                self.comments.close(row, focus_back=True)
            else:
                rating = self._store.ratings.rating(message_id)
                if rating is not None:
                    self.comments.open(row, rating)
            return
        if action == "comment-cancel":
            if row is not None:
                self.comments.close(row, focus_back=True)
            return
        text = self._copy_text(action, message_id, el)
        if text is not None:
            self._ctx.spawn(self._copy(text, el))

    def _rate(self, message_id: str, value: str) -> None:
        """A thumb: stored at once; setting one opens the comment form, taking it back closes it."""
        ratings = self._store.ratings
        taking_back = ratings.rating(message_id) == value
        self._ctx.spawn(ratings.rate(message_id, value))
        row = self.row_of(message_id)
        if row is None:
            return
        row.thanked = False
        if taking_back:
            self.comments.close(row, focus_back=False)
        else:
            self.comments.open(row, value)
        self.comments.show_state(row)

    def _copy_text(self, action: str, message_id: str, el: Any) -> str | None:
        message = next((m for m in self._store.messages if m.get("id") == message_id), None)
        if message is None:
            return None
        if action == "answer-copy-md":  # sources as footnotes (widget.ui.sources)
            return self._sources.markdown_copy(message)
        view = next((v for v in self._views.values() if v.el.contains(el)), None)
        if view is None:
            return None
        if action == "answer-copy-code":
            blocks = view.body.querySelectorAll("pre")
            index = int(el.getAttribute("data-block") or 0)
            return str(blocks.item(index).textContent) if index < int(blocks.length) else None
        # plain text: what the reader sees, with its line breaks (markers read "[1]"), then the sources listed
        return self._sources.text_copy(view, message)

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

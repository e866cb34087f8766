"""The optional comment on a rated answer: a small form under the answer, opened by a thumb or "Add a comment".

A labelled textarea (prefilled with the stored comment when there is one) with a character counter, Send and
Cancel. Ctrl+Enter (Cmd+Enter) sends, plain Enter is a new line, Escape or Cancel closes it and puts the focus back
on the answer's buttons. The comment goes to the relay with the rating (one record per answer, replaced on each
change). A comment over ``MAX_FEEDBACK_COMMENT_CHARS`` is refused here with a visible message, and a failed send
says why: in both cases the reader's text stays in the box. Once stored, the form closes and the answer's status
line thanks the reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..protocol import MAX_FEEDBACK_COMMENT_CHARS
from ..store.feedback import Ratings, comment_over
from .context import PartContext
from .dom import absent, bidi_safe, has
from .views import AnswerRow, CommentForm

__all__ = ["CommentForm", "CommentForms"]


class CommentForms:
    """Opens, checks, sends and closes the comment forms of the bar's answers, and shows each answer row's rating
    state (rows of ``AnswerTools``, which owns this part and shares its ``rows``: view key -> row)."""

    def __init__(self, ctx: PartContext, ratings: Ratings, rows: Mapping[str, AnswerRow]) -> None:
        self._ctx = ctx
        self._ratings = ratings
        self._rows = rows
        self.dom = ctx.dom

    def row_of(self, message_id: str) -> AnswerRow | None:
        """The row of an answer, if it is on screen."""
        return next((r for r in self._rows.values() if r.message_id == message_id), None)

    def show_state(self, row: AnswerRow) -> None:
        """The rating, whether there is a comment, the form and the status line, as they are now."""
        ratings = self._ratings
        mid = row.message_id
        if mid is None or row.up is None:
            return
        rating, comment, error = ratings.rating(mid), ratings.comment(mid), ratings.errors.get(mid)
        form_id = row.form.el.id if row.form is not None else None
        state = (rating, comment, error, form_id, row.thanked)
        if row.shown == state:
            return
        row.shown = state
        lbl = self.dom.labels
        row.up.setAttribute("aria-pressed", "true" if rating == "up" else "false")
        row.down.setAttribute("aria-pressed", "true" if rating == "down" else "false")
        b = row.comment
        b.hidden = rating is None and form_id is None
        label = lbl["comment_edit"] if comment else lbl["comment_add"]
        if b.textContent != label:
            b.textContent = label
        if comment:
            b.setAttribute("data-commented", "true")
            b.setAttribute("title", bidi_safe(comment))
        else:
            b.removeAttribute("data-commented")
            b.removeAttribute("title")
        b.setAttribute("aria-expanded", "true" if form_id else "false")
        if form_id:
            b.setAttribute("aria-controls", form_id)
        else:
            b.removeAttribute("aria-controls")
        if error:
            status = self.dom.t("rate_failed", message=error)
        elif row.thanked and form_id is None:
            status = lbl["comment_thanks"]
        else:
            status = ""
        row.status.textContent = bidi_safe(status)
        row.status.setAttribute("data-kind", "error" if error else "thanks" if status else "none")


    def open(self, row: AnswerRow, rating: str) -> None:
        """Show the form under ``row`` (prefilled with the stored comment) and put the focus in it."""
        if row.message_id is None:
            return
        if row.form is None:
            row.form = self._build(row.message_id, rating)
            row.area.insertBefore(row.form.el, row.status)
            comment = self._ratings.comment(row.message_id)
            row.form.box.value = comment or ""
            self.counted(row.form)
        else:
            row.form.rating = rating
        row.thanked = False
        self.show_state(row)
        box = row.form.box
        box.focus()
        end = len(str(box.value))
        box.setSelectionRange(end, end)

    def close(self, row: AnswerRow, *, focus_back: bool) -> None:
        """Remove the form (its text is dropped: Cancel means cancel); the focus goes back to the answer's row."""
        form = row.form
        if form is None:
            return
        had_focus = form.el.contains(self._ctx.root.activeElement)
        form.el.remove()
        row.form = None
        self.show_state(row)
        if focus_back or had_focus:
            # "Edit comment" / "Add a comment"; before the rating is stored, the thumb that opened the form
            target = row.comment if row.comment is not None and not row.comment.hidden else row.el.querySelector(
                f"button.rate-{form.rating}")
            if absent(target):
                target = row.el.querySelector("button")
            if not absent(target):
                target.focus()

    def _build(self, message_id: str, rating: str) -> CommentForm:
        lbl = self.dom.labels
        dom = self.dom
        el = dom.el("form", "comment-form", part="comment-form", id=dom.uid("comment-form"))
        el.setAttribute("data-form", "comment")
        el.setAttribute("data-id", message_id)
        el.setAttribute("aria-label", lbl["comment_form"])
        el.setAttribute("novalidate", "")
        box_id, count_id, hint_id, error_id = (dom.uid(p) for p in ("comment", "comment-count", "comment-hint",
                                                                     "comment-error"))
        label = dom.el("label", "comment-label", text=lbl["comment_label"])
        label.setAttribute("for", box_id)
        box = dom.el("textarea", "comment-input", part="comment-input", id=box_id)
        box.setAttribute("rows", "3")
        box.setAttribute("aria-describedby", f"{count_id} {hint_id} {error_id}")
        meta = dom.el("div", "comment-meta")
        hint = dom.el("span", "comment-hint", text=lbl["comment_hint"], id=hint_id)
        count = dom.el("span", "comment-count", part="comment-count", id=count_id)
        meta.appendChild(hint)
        meta.appendChild(count)
        error = dom.el("p", "comment-error", part="comment-error", id=error_id)
        error.setAttribute("aria-live", "polite")
        buttons = dom.el("div", "comment-buttons")
        send = dom.el("button", "comment-send", part="comment-send", text=lbl["comment_send"])
        send.type = "submit"
        cancel = dom.text_button(lbl["comment_cancel"], "comment-cancel", "comment-cancel", message_id)
        buttons.appendChild(send)
        buttons.appendChild(cancel)
        for part in (label, box, meta, error, buttons):
            el.appendChild(part)
        return CommentForm(el=el, box=box, count=count, error=error, send=send, rating=rating)

    def _form_of(self, el: Any) -> tuple[AnswerRow, CommentForm] | None:
        if absent(el) or not has(el, "closest"):
            return None
        form_el = el.closest(".comment-form")
        if absent(form_el):
            return None
        row = self.row_of(str(form_el.getAttribute("data-id")))
        if row is None or row.form is None:
            return None
        return row, row.form

    def counted(self, form: CommentForm) -> int:
        """Update the counter (and the too-long message) from the box; how many characters are over the limit."""
        text = str(form.box.value)
        over = comment_over(text)
        form.count.textContent = self.dom.t("comment_count", n=len(text.strip()), max=MAX_FEEDBACK_COMMENT_CHARS)
        too_long = self.dom.t("comment_too_long", max=MAX_FEEDBACK_COMMENT_CHARS)
        if over:
            form.count.setAttribute("data-over", "true")
            form.box.setAttribute("aria-invalid", "true")
            if form.error.textContent != too_long:
                form.error.textContent = too_long
        else:
            form.count.removeAttribute("data-over")
            form.box.removeAttribute("aria-invalid")
            if form.error.textContent == too_long:
                form.error.textContent = ""
        return over

    def on_input(self, el: Any) -> None:
        """The reader typed in a comment box."""
        found = self._form_of(el)
        if found is not None:
            self.counted(found[1])

    def escape(self, el: Any) -> bool:
        """Escape in a comment form closes it; whether ``el`` was in one."""
        found = self._form_of(el)
        if found is None:
            return False
        self.close(found[0], focus_back=True)
        return True

    def submit(self, el: Any) -> None:
        """Send (the Send button or Ctrl/Cmd+Enter)."""
        found = self._form_of(el)
        if found is not None:
            self._ctx.spawn(self._send(*found))

    async def _send(self, row: AnswerRow, form: CommentForm) -> None:
        if form.sending or row.message_id is None:
            return
        if self.counted(form):
            form.box.focus()  # refused here: nothing is sent, the text stays
            return
        ratings = self._ratings
        mid = row.message_id
        form.sending = True
        form.send.setAttribute("aria-disabled", "true")
        form.el.setAttribute("aria-busy", "true")
        form.error.textContent = ""
        try:
            failed = await ratings.send_comment(mid, ratings.rating(mid) or form.rating, str(form.box.value))
        finally:
            form.sending = False
            form.send.removeAttribute("aria-disabled")
            form.el.removeAttribute("aria-busy")
        if row.form is not form:
            return  # closed meanwhile
        if failed is not None:
            form.error.textContent = bidi_safe(self.dom.t("comment_failed", message=failed))
            return
        self.close(row, focus_back=form.el.contains(self._ctx.root.activeElement))
        row.thanked = True
        self.show_state(row)

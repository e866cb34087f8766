"""Past conversations in the bar: the header's button opens a list (instead of the conversation, like the activity
log) of this browser's conversations with the site, most recently active first, the current one marked.

Each entry is two real buttons: its title reopens the conversation (the list closes, the composer takes the
focus), the bin asks to delete it — the entry turns into "Delete …? [Delete] [Cancel]" with the focus on Cancel,
and Escape cancels. Escape elsewhere in the list (or its Back button) closes it and the focus returns to the header's
button. The list is read from the relay each time it opens (``store.history``; titles come from the relay).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..store.history import PastConversations
from .context import PartContext
from .dom import absent

#: The ``data-action`` values this part handles (the panel's click handler passes them on).
ACTIONS = frozenset({"history", "history-open", "history-delete", "history-delete-yes", "history-delete-no"})


class HistoryPanel:
    """The list's section and its entries (see the module doc).

    It gets the store's past conversations, the header's button that opens it and the conversation's scroller it
    shows instead of, and the bar's operations around it: whether the activity log shows and hiding it (the list
    takes its place), scrolling to the end at the next render and rendering now (back to the conversation).
    """

    def __init__(
        self,
        ctx: PartContext,
        history: PastConversations,
        *,
        button: Any,
        scroller: Any,
        activity_open: Callable[[], bool],
        hide_activity: Callable[[], None],
        stick_to_end: Callable[[], None],
        flush: Callable[[], None],
    ) -> None:
        self._ctx = ctx
        self._history = history
        self._button = button
        self._scroller = scroller
        self._activity_open = activity_open
        self._hide_activity = hide_activity
        self._stick_to_end = stick_to_end
        self._flush = flush
        dom, lbl = ctx.dom, ctx.dom.labels
        self.visible = False
        self._shown: tuple[Any, ...] | None = None  # what the list shows now (rebuilt only when it changes)
        self._focus_after: str | None = None  # where the focus goes after the next render
        self.el = dom.el("section", "history", part="history", id="ap-history")
        self.el.setAttribute("aria-labelledby", "ap-history-title")
        self.el.hidden = True
        head = dom.el("div", "history-head")
        head.appendChild(dom.icon_button("back", "history-back", lbl["history_close"], action="history"))
        head.appendChild(dom.el("h3", "history-title", text=lbl["history_title"], id="ap-history-title"))
        self.el.appendChild(head)
        self.status = dom.el("p", "history-status")
        self.status.setAttribute("role", "status")
        self.list = dom.el("ul", "history-list")
        self.el.appendChild(self.status)
        self.el.appendChild(self.list)

    # --- showing -------------------------------------------------------------------------------------
    def show(self, show: bool, *, focus: bool = True) -> None:
        """Show the list instead of the conversation (reading it again), or go back to the conversation."""
        if show and self._activity_open():
            self._hide_activity()
        self.visible = show
        self.el.hidden = not show
        self._scroller.hidden = show or self._activity_open()
        button = self._button
        button.setAttribute("aria-pressed", "true" if show else "false")
        label = self._ctx.dom.labels["history_close" if show else "history_open"]
        button.setAttribute("aria-label", label)
        button.setAttribute("title", label)
        button.setAttribute("part", "history-button header-button" + (" header-button-pressed" if show else ""))
        store = self._history
        if show:
            store.confirming = None
            store.begin_refresh()  # the entries shown until it is read again may be old: the list says so
            self.render()
            self._ctx.spawn(store.refresh())
            if focus:
                self.back_button().focus()
        elif focus:
            button.focus()
            self._stick_to_end()
            self._flush()

    def back_button(self) -> Any:
        """The list's Back button (focused when the list opens)."""
        return self.el.querySelector(".history-back")

    # --- the reader's actions ----------------------------------------------------------------------------
    def on_action(self, action: str, arg: str | None) -> None:
        """A click on one of ``ACTIONS``."""
        store = self._history
        if action == "history":
            self.show(not self.visible)
        elif arg is None or store.busy is not None:
            return
        elif action == "history-open":
            self.show(False, focus=False)
            self._ctx.focus_composer()
            self._ctx.spawn(store.open(arg))
        elif action == "history-delete":
            self._focus_after = f".history-delete-no[data-id='{arg}']"
            store.ask_delete(arg)
        elif action == "history-delete-no":
            self.cancel_delete()
        elif action == "history-delete-yes":
            self._focus_after = self._neighbour_of(arg)
            self._ctx.spawn(store.delete(arg))

    def cancel_delete(self) -> bool:
        """Escape or Cancel while a deletion waits for confirmation: it is not done; True when one waited."""
        store = self._history
        if store.confirming is None:
            return False
        self._focus_after = f".history-delete[data-id='{store.confirming}']"
        store.ask_delete(None)
        return True

    def _neighbour_of(self, cid: str) -> str:
        """Where the focus goes once ``cid`` is deleted: the next entry, else the previous, else Back."""
        ids = [e["id"] for e in self._history.entries]
        if cid in ids and len(ids) > 1:
            i = ids.index(cid)
            other = ids[i + 1] if i + 1 < len(ids) else ids[i - 1]
            return f".history-open[data-id='{other}']"
        return ".history-back"

    # --- rendering ---------------------------------------------------------------------------------------
    def render(self) -> None:
        """The status line and the entries (rebuilt when what they show changed; at most 50 entries)."""
        if not self.visible:
            return
        store, lbl = self._history, self._ctx.dom.labels
        entries = store.entries
        if store.loading or store.busy is not None:  # what is shown may change in a moment
            self.list.setAttribute("aria-busy", "true")
        else:
            self.list.removeAttribute("aria-busy")
        if store.error:
            self.status.textContent = lbl["history_failed"].format(message=store.error)
            self.status.setAttribute("data-kind", "error")
        else:
            self.status.removeAttribute("data-kind")
            if store.loading and not store.loaded:
                self.status.textContent = lbl["history_loading"]
            elif not entries:
                self.status.textContent = lbl["history_empty"]
            else:
                self.status.textContent = ""
        self.status.hidden = not str(self.status.textContent)
        shown = tuple((e["id"], e["title"], e["updated_at"], e["current"]) for e in entries) + (
            store.confirming, store.busy)
        if shown != self._shown:
            self._shown = shown
            had_focus = self._focused_selector()
            self.list.replaceChildren()
            for e in entries:
                self.list.appendChild(self._entry(e, confirming=e["id"] == store.confirming, busy=store.busy))
            self._focus_after = self._focus_after or had_focus
        if self._focus_after is not None:
            target = self.el.querySelector(self._focus_after)
            if not absent(target) and not target.disabled:
                self._focus_after = None
                target.focus()
            elif not store.loading and store.busy is None:
                self._focus_after = None

    def _focused_selector(self) -> str | None:
        """The entry button that has the focus (it keeps it across a rebuild), if any."""
        active = self._ctx.root.activeElement
        if absent(active) or not self.list.contains(active):
            return None
        cid, cls = active.getAttribute("data-id"), str(active.className).split(" ")[-1]
        return None if absent(cid) else f".{cls}[data-id='{cid}']"

    def _entry(self, e: Any, *, confirming: bool, busy: str | None) -> Any:
        dom, lbl = self._ctx.dom, self._ctx.dom.labels
        cid, title = str(e["id"]), str(e["title"])
        item = dom.el("li", "history-item")
        item.setAttribute("data-id", cid)
        if e["current"]:
            item.setAttribute("data-current", "true")
        if confirming:
            text_id = dom.uid("history-confirm")
            item.setAttribute("data-confirming", "true")
            item.appendChild(dom.el("p", "history-confirm-text", text=lbl["history_confirm"].format(title=title),
                                    id=text_id))
            yes = dom.text_button(lbl["history_delete_yes"], "history-delete-yes", "history-delete-yes", cid)
            no = dom.text_button(lbl["history_delete_no"], "history-delete-no", "history-delete-no", cid)
            for b in (yes, no):
                b.setAttribute("aria-describedby", text_id)
            actions = dom.el("div", "history-confirm-actions")
            actions.appendChild(yes)
            actions.appendChild(no)
            item.appendChild(actions)
            return item
        open_btn = dom.el("button", "history-open", part="history-open")
        open_btn.type = "button"
        open_btn.setAttribute("data-action", "history-open")
        open_btn.setAttribute("data-id", cid)
        open_btn.appendChild(dom.el("span", "history-entry-title", text=title))
        when = dom.el("span", "history-when", text=self._when(e["updated_at"]))
        open_btn.appendChild(when)
        if e["current"]:
            open_btn.setAttribute("aria-current", "true")
            open_btn.appendChild(dom.el("span", "history-current", text=lbl["history_current"]))
        delete = dom.icon_button("trash", "history-delete", lbl["history_delete"].format(title=title),
                                 action="history-delete", part="history-delete")
        delete.setAttribute("data-id", cid)
        if busy is not None:
            open_btn.disabled = True
            delete.disabled = True
        item.appendChild(open_btn)
        item.appendChild(delete)
        return item

    def _when(self, seconds: Any) -> str:
        if not isinstance(seconds, (int, float)) or seconds <= 0:
            return ""
        return str(self._ctx.dom.js.Date.new(seconds * 1000).toLocaleString())

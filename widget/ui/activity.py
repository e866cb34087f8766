"""The activity log: every call (and page or state error) with status and timings, newest first."""

from __future__ import annotations

from typing import Any

from ..store import Store
from .calls import CallPills, CallView
from .dom import Dom


class ActivityLog:
    """The log's section (shown instead of the conversation) and its keyed entries."""

    def __init__(self, dom: Dom, store: Store, pills: CallPills) -> None:
        self.dom = dom
        self.store = store
        self.pills = pills
        self.views: dict[str, CallView] = {}
        self._items: dict[str, Any] = {}  # the <li> of each entry
        lbl = dom.labels
        self.el = dom.el("section", "activity", part="activity", id="ap-activity")
        self.el.setAttribute("aria-labelledby", "ap-activity-title")
        self.el.hidden = True
        head = dom.el("div", "activity-head")
        head.appendChild(dom.icon_button("back", "activity-back", lbl["activity_close"], action="activity"))
        head.appendChild(dom.el("h3", "activity-title", text=lbl["activity_title"], id="ap-activity-title"))
        self.el.appendChild(head)
        self.empty = dom.el("p", "activity-empty", text=lbl["activity_empty"])
        self.list = dom.el("ol", "activity-list")
        self.el.appendChild(self.empty)
        self.el.appendChild(self.list)

    def render(self) -> None:
        """Keyed update: entries are touched only when their signature changed, moved only when the order did."""
        seen = []
        for e in self.store.activity:
            key = str(e.get("id"))
            seen.append(key)
            cv = self.views.get(key)
            if cv is None:
                cv = self.views[key] = self.pills.view(e, "activity-entry")
                cv.el.setAttribute("data-kind", str(e.get("kind")))
                item = self.dom.el("li", "activity-item")  # the list's item; the entry is a <details> inside it
                item.setAttribute("data-key", key)
                item.appendChild(cv.el)
                self._items[key] = item
            when = None
            if isinstance(e.get("started_at"), (int, float)):
                when = self.dom.js.Date.new(e["started_at"]).toLocaleTimeString()
            self.pills.update(cv, e, when)
        for key in [k for k in self.views if k not in seen]:
            self.views.pop(key)
            self._items.pop(key).remove()
        current = [str(el.getAttribute("data-key")) for el in self.list.children]
        if current != seen:
            for key in seen:
                self.list.appendChild(self._items[key])
        self.empty.hidden = bool(seen)

    def clear(self) -> None:
        """Forget the views (teardown)."""
        self.views.clear()
        self._items.clear()

    def back_button(self) -> Any:
        """The log's Back button (focused when the log opens)."""
        return self.el.querySelector(".activity-back")

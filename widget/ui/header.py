"""The header (logo, title, connection state, New chat, Past conversations, Activity, Close) and the notice under
it."""

from __future__ import annotations

from typing import Any

from ..protocol import ConnectionState
from ..store import Store
from .dom import Dom


class Header:
    """The header's elements and the notice line (read-only, connection errors, dismissible problems).

    ``panel`` gets the connection state too (a skin styles by it); ``retry_connect``: a connection error offers
    Retry (the bar has an ``on_retry``).
    """

    def __init__(self, dom: Dom, store: Store, *, panel: Any, retry_connect: bool) -> None:
        self._dom = dom
        self._store = store
        self._panel = panel
        self._retry_connect = retry_connect
        lbl = dom.labels
        # Not a <header>: inside the page's document it would be a second "banner" landmark.
        self.el = dom.el("div", "header", part="header")
        brand = dom.el("div", "brand")
        logo = dom.icon("spark", "logo")
        logo.setAttribute("part", "logo")  # replaceable: ::part(logo) takes a background, ::part(logo-icon) hides
        logo.firstChild.setAttribute("part", "logo-icon")
        brand.appendChild(logo)
        titles = dom.el("div", "titles")
        titles.appendChild(dom.el("h2", "title", part="title", text=dom.title, id="ap-title"))
        self.conn = dom.el("span", "connection", part="connection")
        self.conn.setAttribute("role", "status")
        titles.appendChild(self.conn)
        brand.appendChild(titles)
        self.el.appendChild(brand)
        actions = dom.el("div", "header-actions")
        self.new_chat = dom.icon_button("new", "new-chat", lbl["new_chat"], action="new-chat",
                                        part="new-chat header-button")
        self.history_btn = dom.icon_button(
            "history", "history-button", lbl["history_open"], action="history", part="history-button header-button"
        )
        self.history_btn.setAttribute("aria-pressed", "false")
        self.history_btn.setAttribute("aria-controls", "ap-history")
        self.activity_btn = dom.icon_button(
            "activity", "activity-button", lbl["activity_open"], action="activity", part="activity-button header-button"
        )
        self.activity_btn.setAttribute("aria-pressed", "false")
        self.activity_btn.setAttribute("aria-controls", "ap-activity")
        self.close_btn = dom.icon_button("close", "close", dom.t("close"), action="close", part="close header-button")
        for b in (self.new_chat, self.history_btn, self.activity_btn, self.close_btn):
            actions.appendChild(b)
        self.el.appendChild(actions)

        self.notice = dom.el("div", "notice", part="notice")
        self.notice.setAttribute("role", "status")
        self.notice.hidden = True

    def show_activity_pressed(self, pressed: bool) -> None:
        """The Activity button's pressed state and name."""
        label = self._dom.labels["activity_close" if pressed else "activity_open"]
        self.activity_btn.setAttribute("aria-pressed", "true" if pressed else "false")
        # A part for the pressed state: ::part() cannot read attributes, and a restyled header needs to restyle it.
        self.activity_btn.setAttribute(
            "part", "activity-button header-button" + (" header-button-pressed" if pressed else ""))
        self.activity_btn.setAttribute("aria-label", label)
        self.activity_btn.setAttribute("title", label)

    def render(self) -> None:
        """Connection state, read-only notice, connection errors, other notices."""
        s, dom, lbl = self._store, self._dom, self._dom.labels
        state = s.connection_state
        self.conn.textContent = lbl.get(f"state_{state}", state)
        self.conn.setAttribute("data-state", state)
        self._panel.setAttribute("data-state", state)
        self.notice.textContent = ""
        self.notice.removeAttribute("data-kind")
        if state == ConnectionState.ERROR and (s.connection_error or s.errors):
            err = s.connection_error or s.errors[-1]
            self._notice(str(err.get("message") or lbl["state_error"]), "error",
                         dom.text_button(lbl["retry"], "retry", "retry-connect")
                         if self._retry_connect else None)
        elif state == ConnectionState.CONNECTED and not s.active:
            self._notice(lbl["read_only"], "read-only", dom.text_button(lbl["use_here"], "use-here", "use-here"))
        elif s.notice:
            self._notice(str(s.notice.get("message", "")), "warning",
                         dom.text_button(lbl["dismiss"], "dismiss", "dismiss"))
        else:
            self.notice.hidden = True

    def _notice(self, text: str, kind: str, button: Any) -> None:
        self.notice.setAttribute("data-kind", kind)
        self.notice.appendChild(self._dom.el("p", "notice-text", text=text))
        if button is not None:
            self.notice.appendChild(button)
        self.notice.hidden = False

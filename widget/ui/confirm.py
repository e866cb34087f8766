"""Confirmation prompts: one Allow / Deny box per pending sensitive call; focus moves to a new one."""

from __future__ import annotations

from typing import Any

from ..core.mcp_names import mcp_parts
from ..protocol import ConfirmationDecision
from ..store import Store
from .context import Opener, PartContext
from .dom import as_text

#: The id prefix of a call an in-browser agent made through WebMCP (``widget.webmcp.call_here``).
WEBMCP_CALL = "webmcp-"


def subject(request: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """Who asks and what runs, as a label key and its values: a server's tool the relay runs (``mcp__…``), a page
    function an in-browser agent calls (WebMCP), or a page function the assistant calls."""
    parts = mcp_parts(request.get("name"))
    if parts is not None:
        return "confirm_text_mcp", {"server": parts[0], "tool": parts[1]}
    if str(request.get("id") or "").startswith(WEBMCP_CALL):
        return "confirm_text_webmcp", {}
    return "confirm_text", {}


class Confirmations:
    """The prompts' container and one box per pending confirmation, keyed by the store's id."""

    def __init__(self, ctx: PartContext, store: Store, opener: Opener) -> None:
        self._ctx = ctx
        self._store = store
        self._opener = opener
        self.views: dict[int, Any] = {}
        self.el = ctx.dom.el("div", "confirmations", part="confirmations")

    def render(self) -> None:
        """Remove answered prompts (focus back to the composer), add new ones (the bar opens, focus moves in)."""
        ctx, dom, lbl = self._ctx, self._ctx.dom, self._ctx.dom.labels
        pending = self._store.pending_confirmations
        ids = [c["id"] for c in pending]
        for cid in [c for c in self.views if c not in ids]:
            box = self.views.pop(cid)
            had_focus = box.contains(ctx.root.activeElement)
            box.remove()
            if had_focus:
                ctx.focus_composer()
        newest = None
        for item in pending:
            cid = item["id"]
            if cid in self.views:
                continue
            req = item["request"]
            name = str(req.get("name") or "")
            box = dom.el("div", "confirm", part="confirmation")
            box.setAttribute("role", "alertdialog")
            box.setAttribute("tabindex", "-1")
            title_id, desc_id = dom.uid("confirm-title"), dom.uid("confirm-desc")
            box.setAttribute("aria-labelledby", title_id)
            box.setAttribute("aria-describedby", desc_id)
            box.appendChild(dom.el("h3", "confirm-title", text=dom.t("confirm_title", name=name), id=title_id))
            key, values = subject(req)
            box.appendChild(dom.el("p", "confirm-text", text=dom.t(key, **values), id=desc_id))
            fn = dom.el("p", "confirm-fn")
            fn.appendChild(dom.el("code", "confirm-name", text=name))
            box.appendChild(fn)
            args = req.get("arguments")
            box.appendChild(dom.el("pre", "confirm-args", part="confirmation-arguments",
                                   text=as_text(args) if args not in (None, {}) else lbl["no_arguments"]))
            buttons = dom.el("div", "confirm-actions")
            buttons.appendChild(dom.text_button(lbl["allow"], "allow", ConfirmationDecision.ALLOW, cid))
            buttons.appendChild(dom.text_button(lbl["deny"], "deny", ConfirmationDecision.DENY, cid))
            box.appendChild(buttons)
            self.el.appendChild(box)
            self.views[cid] = box
            newest = box
        if newest is not None:
            if not self._opener.is_open():
                self._opener.open()
            newest.focus()

    def focus_last(self) -> bool:
        """Focus the newest prompt; False when there is none."""
        if not self.views:
            return False
        list(self.views.values())[-1].focus()
        return True

    def clear(self) -> None:
        """Forget the views (teardown)."""
        self.views.clear()

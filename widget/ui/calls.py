"""Function-call pills: one ``<details>`` per call, with status, timings, arguments, result or error.

The same view shows a call under its message (``call``) and in the activity log (``activity-entry``).
"""

from __future__ import annotations

from typing import Any

from ..protocol import CallProgress, CallStatus, RelayTool
from ..store import Store
from .dom import ICONS, Dom, as_text, fmt_ms


class CallView:
    """DOM of one call, with the signature of what it last rendered."""

    __slots__ = ("body", "el", "sig", "status", "summary", "time", "when")
    el: Any
    summary: Any
    status: Any
    time: Any
    body: Any

    def __init__(self) -> None:
        self.when: Any = None
        self.sig: Any = None


class CallPills:
    """Builds and updates call views; keyed by call id under each message."""

    def __init__(self, dom: Dom, store: Store) -> None:
        self.dom = dom
        self.store = store

    def render(self, container: Any, views: dict[str, CallView], calls: list[Any]) -> None:
        """Keyed update of the pills of one message (``container`` is hidden when there are none)."""
        if not calls and not views:
            return
        seen = []
        for call in calls:
            if not isinstance(call, dict) or not isinstance(call.get("id"), str):
                continue
            cid = call["id"]
            seen.append(cid)
            cv = views.get(cid)
            if cv is None:
                cv = views[cid] = self.view(call, "call")
                container.appendChild(cv.el)
            self.update(cv, call)
        for cid in [c for c in views if c not in seen]:
            views.pop(cid).el.remove()
        container.hidden = not seen

    def view(self, call: dict[str, Any], cls: str) -> CallView:
        """A new view: icon, name, status, (when,) time in the summary; details in the body."""
        el = self.dom.el
        cv = CallView()
        cv.el = el("details", cls, part=cls)
        cv.summary = el("summary", f"{cls}-summary", part=f"{cls}-summary")
        cv.status = el("span", "call-status")
        cv.summary.appendChild(el("span", "call-icon", part="call-icon"))
        cv.summary.appendChild(el("span", "call-name", text=str(call.get("name") or "")))
        cv.summary.appendChild(cv.status)
        if cls != "call":
            cv.when = el("span", "call-when")
            cv.summary.appendChild(cv.when)
        cv.time = el("span", "call-time")
        cv.summary.appendChild(cv.time)
        cv.el.appendChild(cv.summary)
        cv.body = el("div", "call-body", part="call-details")
        cv.el.appendChild(cv.body)
        return cv

    def update(self, cv: CallView, call: dict[str, Any], when: Any = None) -> None:
        """Show the call's current state; nothing is touched when its signature did not change."""
        duration, total = self.store.call_timing(call)
        status = str(call.get("status") or CallProgress.RUNNING)
        stopped = self.store.call_stopped(call)
        sig = (status, stopped, duration, total, call.get("result") is not None, call.get("error"), when)
        if sig == cv.sig:
            return
        cv.sig = sig
        lbl = self.dom.labels
        shown = "stopped" if stopped else status  # the wire status stays in data-status
        status_text = lbl.get(f"call_{shown}", shown)
        if status == CallProgress.RUNNING and call.get("name") == RelayTool.ASK_USER:
            status_text = lbl["call_waiting_user"]  # the relay's own tool: it waits for the reader's answer
        cv.el.setAttribute("data-status", status)
        if stopped:
            cv.el.setAttribute("data-stopped", "true")
        else:
            cv.el.removeAttribute("data-stopped")
        base = "call" if cv.el.classList.contains("call") else "activity-entry"
        cv.el.setAttribute("part", f"{base} {base}-{shown}")
        icon = cv.summary.firstChild
        icon_name = {CallStatus.SUCCESS: "check", CallStatus.ERROR: "error", "stopped": "stop"}.get(shown, "running")
        icon.innerHTML = ICONS.get(icon_name, "")
        cv.status.textContent = status_text
        ms_text = fmt_ms(total if total is not None else duration)
        cv.time.textContent = lbl["ms"].format(value=ms_text) if ms_text else ""
        name = str(call.get("name") or "")
        timing = []
        if duration is not None:
            timing.append(f"{lbl['handler_time']} {lbl['ms'].format(value=fmt_ms(duration))}")
        if total is not None:
            timing.append(f"{lbl['total_time']} {lbl['ms'].format(value=fmt_ms(total))}")
        cv.summary.setAttribute("title", " · ".join([name, status_text, *timing]))
        if cv.when is not None:
            cv.when.textContent = when or ""
        body = cv.body
        body.textContent = ""
        if timing:
            body.appendChild(self.dom.el("p", "call-timing", text=" · ".join(timing)))
        if call.get("kind") != "error":
            args = call.get("arguments")
            self._section(body, lbl["arguments"], as_text(args) if args not in (None, {}) else lbl["no_arguments"])
        if call.get("result") is not None and status != "error":
            self._section(body, lbl["result"], as_text(call.get("result")))
        if call.get("error") and not stopped:
            self._section(body, lbl["error_text"], as_text(call.get("error")), "error")

    def _section(self, parent: Any, title: str, text: str, cls: str = "") -> None:
        parent.appendChild(self.dom.el("h4", "call-label", text=title))
        parent.appendChild(self.dom.el("pre", f"call-text {cls}".strip(), text=text))

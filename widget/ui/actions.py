"""Offered actions under an answer: the page's controls, never the model's.

A button shows the page's label and, on a second line, the model's arguments as text ("With plan: pro", also in
its accessible name); a form action's button opens a form under the answer with one labelled field per parameter.
The outcome replaces the button; a failure brings it back with the error. Only live offers are shown (a reload
has none).
"""

from __future__ import annotations

from typing import Any

from ..store import ACTION_DONE, ACTION_FAILED, ACTION_OFFERED, ACTION_RUNNING, Store, arguments_text
from .context import PartContext
from .dom import ICONS, bidi_safe, option_text
from .views import ActionView, MessageView, Views

__all__ = ["ActionView", "Actions"]


class Actions:
    """Renders the offers of each answer (keyed by action id) and runs what the reader does with them."""

    def __init__(self, ctx: PartContext, store: Store, views: Views) -> None:
        self._ctx = ctx
        self._store = store
        self._views = views  # the message views on screen (an offer's view is found in its message's)
        self.dom = ctx.dom
        #: Where focus goes once a pending action change is rendered: ("form" | "invalid", (message_id, action_id)).
        self._focus: tuple[str, tuple[str, str]] | None = None

    def render(self, view: MessageView, offers: list[dict[str, Any]]) -> None:
        """Keyed: one view per offer, touched only when its state changed."""
        if not offers and not view.action_views:
            return
        seen = []
        for offer in offers:
            aid = str(offer["id"])
            seen.append(aid)
            av = view.action_views.get(aid)
            if av is None:
                av = view.action_views[aid] = self._view(offer)
                view.actions.appendChild(av.el)
            self._update(av, offer)
        for aid in [a for a in view.action_views if a not in seen]:
            av = view.action_views.pop(aid)
            had_focus = av.el.contains(self._ctx.root.activeElement)
            av.el.remove()
            if had_focus:
                self._ctx.focus_composer()
        view.actions.hidden = not seen

    def _view(self, offer: dict[str, Any]) -> ActionView:
        """The button (the page's label; the model's arguments as text on a second line), error and status line."""
        lbl = self.dom.labels
        av = ActionView()
        mid, aid = str(offer["message_id"]), str(offer["id"])
        av.key = (mid, aid)
        av.el = self.dom.el("div", "action", part="action")
        av.el.setAttribute("data-aid", aid)
        av.el.setAttribute("data-name", str(offer.get("name") or ""))
        label = str(offer.get("label") or offer.get("name") or "")
        b = av.button = self.dom.el("button", "action-button", part="action-button")
        b.type = "button"
        b.setAttribute("data-action", "action-press")
        b.setAttribute("data-mid", mid)
        b.setAttribute("data-aid", aid)
        b.appendChild(self.dom.el("span", "action-label", text=label))
        if offer.get("confirm") == "form":
            b.setAttribute("aria-expanded", "false")
        else:
            args = arguments_text(offer.get("arguments"))
            if args:
                line = lbl["action_with"].format(args=args)
                # A space between the two lines (not shown between the button's lines), so the visible text
                # reads as its name does.
                b.appendChild(self.dom.js.document.createTextNode(" "))
                b.appendChild(self.dom.el("span", "action-args", part="action-arguments", text=line))
                # Both lines are the button's name: "Open pricing" for the wrong plan is another action.
                b.setAttribute("aria-label", f"{label}, {line}")
        av.el.appendChild(b)
        av.error = self.dom.el("p", "action-error", part="action-error", id=self.dom.uid("action-error"))
        av.error.setAttribute("role", "alert")
        av.el.appendChild(av.error)
        av.status = self.dom.el("p", "action-status", part="action-outcome")
        av.status.setAttribute("role", "status")
        av.status.setAttribute("tabindex", "-1")
        icon = self.dom.el("span", "action-icon")
        icon.setAttribute("aria-hidden", "true")
        av.status.appendChild(icon)
        av.status_label = self.dom.el("span", "action-outcome-label", text=label)
        av.status_text = self.dom.el("span", "action-outcome-text")
        av.status.appendChild(av.status_label)
        av.status.appendChild(av.status_text)
        av.status.hidden = True
        av.el.appendChild(av.status)
        return av

    def _update(self, av: ActionView, offer: dict[str, Any]) -> None:
        status = str(offer.get("status") or ACTION_OFFERED)
        errors = offer.get("field_errors") or {}
        form_open = bool(offer.get("form_open"))
        sig = (status, offer.get("outcome"), offer.get("error"), form_open, tuple(sorted(errors.items())))
        if sig == av.sig:
            self._focus_done(av, status, errors)  # e.g. Send refused again with the same problems
            return
        av.sig = sig
        root = self._ctx.root
        focus_inside = av.el.contains(root.activeElement)
        lbl = self.dom.labels
        done, running = status == ACTION_DONE, status == ACTION_RUNNING
        av.el.setAttribute("data-status", status)
        av.el.setAttribute("part", f"action action-{status}")
        # The button: gone once done (the outcome takes its place), back after a failure for a retry.
        av.button.hidden = done
        if running:
            av.button.setAttribute("aria-disabled", "true")  # not `disabled`: a focused button keeps the focus
        else:
            av.button.removeAttribute("aria-disabled")
        error = None if done or form_open else offer.get("error")
        av.error.textContent = bidi_safe(error or "")
        if error:
            av.button.setAttribute("aria-describedby", av.error.id)
        else:
            av.button.removeAttribute("aria-describedby")
        # The status line: "Working…" while it runs, then the outcome (the page's words, or "Done.").
        if done or running:
            av.status.hidden = False
            av.status.setAttribute("data-kind", status)
            av.status.firstChild.innerHTML = ICONS["check" if done else "running"]
            av.status_label.hidden = not done
            av.status_text.textContent = bidi_safe(str(offer.get("outcome") or "")) if done else lbl["action_running"]
        else:
            av.status.hidden = True
            av.status_text.textContent = ""
        # The form of a form action.
        if form_open and av.form is None:
            self._build_form(av, offer)
        elif not form_open and av.form is not None:
            form_focus = av.form.contains(root.activeElement)
            av.form.remove()
            av.form = None
            av.fields = {}
            av.form_sig = None
            av.button.setAttribute("aria-expanded", "false")
            av.button.removeAttribute("aria-controls")
            if form_focus and not done:
                av.button.focus()
        if av.form is not None:
            self._update_form(av, offer, errors, running)
        if done and focus_inside:
            av.status.focus()  # the pressed button is gone: the reader lands on what happened
        self._focus_done(av, status, errors)

    def _focus_done(self, av: ActionView, status: str, errors: dict[str, str]) -> None:
        """Move the focus the reader's last step asked for, once its result is on screen."""
        want = self._focus
        if want is None or want[1] != av.key:
            return
        if want[0] == "form" and av.form is not None:
            self._focus = None
            self._focus_form(av, errors)
        elif want[0] == "invalid" and (errors or status in (ACTION_DONE, ACTION_FAILED)):
            self._focus = None
            if errors and av.form is not None:
                self._focus_form(av, errors)

    def _build_form(self, av: ActionView, offer: dict[str, Any]) -> None:
        """One field per parameter, labelled with its description, prefilled (the reader's last values, else the
        model's suggestions); checked by the store before anything is sent."""
        lbl = self.dom.labels
        mid, aid = av.key
        params = offer.get("parameters") or {}
        props = params.get("properties") or {}
        required = set(params.get("required") or [])
        values = offer.get("values")
        prefill = values if isinstance(values, dict) else (offer.get("arguments") or {})
        form = self.dom.el("form", "action-form", part="action-form", id=self.dom.uid("action-form"))
        form.setAttribute("data-form", "action")
        form.setAttribute("data-mid", mid)
        form.setAttribute("data-aid", aid)
        form.setAttribute("novalidate", "")
        title_id = self.dom.uid("action-title")
        form.setAttribute("aria-labelledby", title_id)
        heading = str(offer.get("title") or offer.get("label") or "")
        form.appendChild(self.dom.el("h4", "action-form-title", text=heading, id=title_id))
        av.fields = {}
        for name, prop in props.items():
            if not isinstance(prop, dict):
                continue
            field_id, err_id = self.dom.uid("action-field"), self.dom.uid("action-field-error")
            wrap = self.dom.el("div", "action-field", part="action-field")
            wrap.setAttribute("data-field", name)
            ptype, fmt, enum = prop.get("type"), prop.get("format"), prop.get("enum")
            value = prefill.get(name)
            label = self.dom.el("label", "action-field-label", text=str(prop.get("description") or name))
            label.setAttribute("for", field_id)
            if name in required:
                mark = self.dom.el("span", "action-required", text=" *")
                mark.setAttribute("aria-hidden", "true")
                label.appendChild(mark)
            if isinstance(enum, list):
                control = self.dom.el("select", "action-input")
                if name not in required or value is None:
                    option = self.dom.el("option", text=lbl["action_choose"])
                    option.value = ""
                    control.appendChild(option)
                for e in enum:
                    option = self.dom.el("option", text=option_text(e))
                    option.value = option_text(e)
                    if value is not None and option_text(value) == option_text(e):
                        option.selected = True
                    control.appendChild(option)
            elif ptype == "boolean":
                control = self.dom.el("input", "action-check")
                control.type = "checkbox"
                control.checked = value is True
                if value is not None:
                    control.setAttribute("data-prefilled", "true")
            elif ptype == "string" and fmt == "multiline":
                control = self.dom.el("textarea", "action-input")
                control.setAttribute("rows", "4")
                control.value = "" if value is None else str(value)
            else:
                control = self.dom.el("input", "action-input")
                control.type = {"email": "email", "uri": "url"}.get(str(fmt), "text") if ptype == "string" else "text"
                if ptype in ("number", "integer"):
                    control.setAttribute("inputmode", "numeric" if ptype == "integer" else "decimal")
                if fmt == "email":
                    control.setAttribute("autocomplete", "email")
                elif fmt == "date":
                    control.setAttribute("placeholder", "YYYY-MM-DD")
                elif fmt == "date-time":
                    control.setAttribute("placeholder", "YYYY-MM-DDTHH:MM")
                if ptype == "string" and isinstance(prop.get("maxLength"), int):
                    control.setAttribute("maxlength", str(prop["maxLength"]))
                control.value = "" if value is None else option_text(value)
            control.id = field_id
            control.setAttribute("data-param", name)
            control.setAttribute("aria-describedby", err_id)
            if name in required:
                control.setAttribute("aria-required", "true")
            err = self.dom.el("p", "action-field-error", id=err_id)
            if ptype == "boolean" and not isinstance(enum, list):
                wrap.classList.add("action-field-check")
                wrap.appendChild(control)
                wrap.appendChild(label)
            else:
                wrap.appendChild(label)
                wrap.appendChild(control)
            wrap.appendChild(err)
            form.appendChild(wrap)
            av.fields[name] = (wrap, control, err)
        av.form_error = self.dom.el("p", "action-form-error", id=self.dom.uid("action-form-error"))
        av.form_error.setAttribute("role", "alert")
        form.appendChild(av.form_error)
        buttons = self.dom.el("div", "action-form-actions")
        av.send = self.dom.el("button", "action-send", part="action-send", text=lbl["action_send"])
        av.send.type = "submit"
        av.send.setAttribute("aria-describedby", av.form_error.id)
        cancel = self.dom.text_button(lbl["action_cancel"], "action-cancel", "action-cancel", part="action-cancel")
        cancel.setAttribute("data-mid", mid)
        cancel.setAttribute("data-aid", aid)
        buttons.appendChild(av.send)
        buttons.appendChild(cancel)
        form.appendChild(buttons)
        av.el.insertBefore(form, av.error)
        av.form = form
        av.form_sig = None
        av.button.setAttribute("aria-expanded", "true")
        av.button.setAttribute("aria-controls", form.id)

    def _update_form(self, av: ActionView, offer: dict[str, Any], errors: dict[str, str],
                            running: bool) -> None:
        sig = (tuple(sorted(errors.items())), offer.get("error"), running)
        if sig == av.form_sig:
            return
        av.form_sig = sig
        for name, (wrap, control, err) in av.fields.items():
            problem = errors.get(name)
            err.textContent = problem or ""
            if problem:
                control.setAttribute("aria-invalid", "true")
                wrap.setAttribute("data-invalid", "true")
            else:
                control.removeAttribute("aria-invalid")
                wrap.removeAttribute("data-invalid")
        av.form_error.textContent = "" if running else str(offer.get("error") or "")
        if running:
            av.send.setAttribute("aria-disabled", "true")
            av.form.setAttribute("aria-busy", "true")
        else:
            av.send.removeAttribute("aria-disabled")
            av.form.removeAttribute("aria-busy")

    def _focus_form(self, av: ActionView, errors: dict[str, str]) -> None:
        """Into the form: the first field with a problem, else the first required one still empty, else the first."""
        target = None
        for name, (_wrap, control, _err) in av.fields.items():
            if name in errors:
                target = control
                break
        if target is None and not errors:
            for _wrap, control, _err in av.fields.values():
                if control.getAttribute("aria-required") == "true" and control.type != "checkbox" \
                        and not str(control.value).strip():
                    target = control
                    break
        if target is None and av.fields:
            target = next(iter(av.fields.values()))[1]
        if target is not None:
            target.focus()

    def find(self, mid: str, aid: str) -> ActionView | None:
        """The view of offer ``aid`` of message ``mid``, if shown."""
        for view in self._views.values():
            av = view.action_views.get(aid)
            if av is not None and av.key == (mid, aid):
                return av
        return None

    def press(self, button: Any) -> None:
        """An offer's button was pressed: run it, open its form, or go into its open form."""
        if button.getAttribute("aria-disabled") == "true":
            return
        mid, aid = str(button.getAttribute("data-mid")), str(button.getAttribute("data-aid"))
        av = self.find(mid, aid)
        if av is not None and av.form is not None:  # already open: go into it (Cancel closes it)
            self._focus_form(av, {})
            return
        if button.getAttribute("aria-expanded") == "false":
            self._focus = ("form", (mid, aid))
        self._ctx.spawn(self._store.press_action(mid, aid))

    def _collect(self, av: ActionView) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, (_wrap, control, _err) in av.fields.items():
            if control.type == "checkbox":
                if control.checked:
                    values[name] = True
                elif control.getAttribute("data-prefilled") == "true" or control.getAttribute("data-touched") \
                        == "true" or control.getAttribute("aria-required") == "true":
                    values[name] = False
                else:
                    values[name] = None  # an optional yes/no the reader never touched stays absent
            else:
                text = str(control.value)
                values[name] = text if text != "" else None
        return values

    def submit(self, form: Any) -> None:
        """A form action's Send: the store checks the values before anything runs."""
        mid, aid = str(form.getAttribute("data-mid")), str(form.getAttribute("data-aid"))
        av = self.find(mid, aid)
        if av is None or av.form is None or av.send.getAttribute("aria-disabled") == "true":
            return
        self._focus = ("invalid", (mid, aid))
        self._ctx.spawn(self._store.submit_action_form(mid, aid, self._collect(av)))

    # --- activity log ------------------------------------------------------------------------------------------------

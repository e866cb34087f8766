"""Ask-user prompts: one tab per pending question, one submit for all answers."""

from __future__ import annotations

from typing import Any

from ..protocol import AskUserType
from ..store import Store
from .context import Opener, PartContext
from .dom import absent


class AskUser:
    """The ask-user form; rebuilt only when the pending prompts change."""

    def __init__(self, ctx: PartContext, store: Store, opener: Opener) -> None:
        self._ctx = ctx
        self._store = store
        self._opener = opener
        self.dom = ctx.dom
        self._key: tuple[Any, ...] | None = None
        #: The selected tab (the prompt shown).
        self.tab = 0
        self.el = ctx.dom.el("form", "ask-user", part="ask-user")
        self.el.setAttribute("data-form", "ask")
        self.el.setAttribute("novalidate", "")
        self.el.setAttribute("aria-labelledby", "ap-ask-title")
        self.el.hidden = True

    def render(self) -> None:
        """One tab per pending prompt, one submit for all; rebuilt only when the prompts change."""
        s = self._store
        prompts = s.pending_ask_user
        key = tuple(str(p.get("id")) for p in prompts)
        if key != self._key:
            self._key = key
            self._build(prompts)
            if prompts:
                if not self._opener.is_open():
                    self._opener.open()
                self.focus()
        if prompts:
            submit = self.el.querySelector(".ask-submit")
            submit.disabled = s.ask_user_sending
            submit.textContent = self.dom.labels["ask_sending" if s.ask_user_sending else "ask_submit"]
            err = self.el.querySelector(".ask-error")
            err.textContent = s.ask_user_error or ""
            err.hidden = not s.ask_user_error

    def _build(self, prompts: list[dict[str, Any]]) -> None:
        lbl = self.dom.labels
        had_focus = self.el.contains(self._ctx.root.activeElement)
        self.el.textContent = ""
        self.el.hidden = not prompts
        self.tab = 0
        if not prompts:
            if had_focus:
                self._ctx.focus_composer()
            return
        self.el.appendChild(self.dom.el("h3", "ask-title", text=lbl["ask_title"], id="ap-ask-title"))
        tablist = self.dom.el("div", "ask-tabs", part="ask-tabs")
        tablist.setAttribute("role", "tablist")
        tablist.setAttribute("aria-label", lbl["ask_title"])
        tablist.hidden = len(prompts) < 2
        self.el.appendChild(tablist)
        for i, prompt in enumerate(prompts):
            tab_id, panel_id = f"ap-ask-tab-{i}", f"ap-ask-panel-{i}"
            tab = self.dom.el("button", "ask-tab", part="ask-tab", text=lbl["ask_question"].format(n=i + 1), id=tab_id)
            tab.type = "button"
            tab.setAttribute("role", "tab")
            tab.setAttribute("aria-controls", panel_id)
            tab.setAttribute("data-action", "ask-tab")
            tab.setAttribute("data-id", str(i))
            tablist.appendChild(tab)
            panel = self.dom.el("div", "ask-panel", part="ask-panel", id=panel_id)
            panel.setAttribute("role", "tabpanel")
            panel.setAttribute("aria-labelledby", tab_id if len(prompts) > 1 else "ap-ask-title")
            panel.setAttribute("data-type", str(prompt.get("type")))
            self._fields(panel, i, prompt)
            self.el.appendChild(panel)
        footer = self.dom.el("div", "ask-footer")
        err = self.dom.el("p", "ask-error")
        err.setAttribute("role", "alert")
        err.hidden = True
        footer.appendChild(err)
        submit = self.dom.el("button", "ask-submit", part="ask-submit", text=lbl["ask_submit"])
        submit.type = "submit"
        footer.appendChild(submit)
        self.el.appendChild(footer)
        self.select_tab(0, focus=False)

    def _fields(self, panel: Any, i: int, prompt: dict[str, Any]) -> None:
        lbl = self.dom.labels
        kind = prompt.get("type")
        raw_args = prompt.get("arguments")
        args: dict[str, Any] = raw_args if isinstance(raw_args, dict) else {}
        q_id = f"ap-ask-q-{i}"
        fieldset = self.dom.el("fieldset", "ask-fieldset")
        legend = self.dom.el("legend", "ask-question", part="ask-question", text=str(prompt.get("question") or ""),
                          id=q_id)
        fieldset.appendChild(legend)
        name = f"ap-q{i}"
        if kind == "text":
            multiline = bool(args.get("multiline"))
            field = self.dom.el("textarea" if multiline else "input", "ask-text")
            if not multiline:
                field.type = "text"
            else:
                field.setAttribute("rows", "3")
            field.setAttribute("aria-labelledby", q_id)
            if isinstance(args.get("placeholder"), str):
                field.setAttribute("placeholder", args["placeholder"])
            field.setAttribute("data-q", str(i))
            fieldset.appendChild(field)
        else:
            if kind == AskUserType.BOOL:
                options = [("true", str(args.get("yes_label") or lbl["ask_yes"])),
                           ("false", str(args.get("no_label") or lbl["ask_no"]))]
                input_type = "radio"
            else:
                options = [(str(o.get("value")), str(o.get("label") if o.get("label") is not None else o.get("value")))
                           for o in args.get("options") or [] if isinstance(o, dict)]
                input_type = "checkbox" if kind == AskUserType.CHECKLIST else "radio"
            group = self.dom.el("div", "ask-options")
            group.setAttribute("role", "group" if input_type == "checkbox" else "radiogroup")
            group.setAttribute("aria-labelledby", q_id)
            for j, (value, label) in enumerate(options):
                row = self.dom.el("label", "ask-option")
                box = self.dom.el("input", "ask-choice")
                box.type = input_type
                box.name = name
                box.value = value
                box.setAttribute("data-q", str(i))
                box.setAttribute("data-index", str(j))
                row.appendChild(box)
                row.appendChild(self.dom.el("span", "ask-option-label", text=label))
                group.appendChild(row)
            fieldset.appendChild(group)
        err = self.dom.el("p", "ask-field-error")
        err.setAttribute("aria-live", "polite")
        fieldset.appendChild(err)
        panel.appendChild(fieldset)

    def move_tab(self, key: str) -> None:
        """Arrow keys, Home and End on the tabs (they wrap around)."""
        n = len(self._store.pending_ask_user)
        i = {"ArrowLeft": self.tab - 1, "ArrowRight": self.tab + 1, "Home": 0, "End": n - 1}[key]
        self.select_tab(i % max(n, 1), focus=True)

    def field_changed(self, target: Any) -> None:
        """The reader changed an answer: its problem goes."""
        panel = target.closest(".ask-panel")
        if not absent(panel):
            panel.removeAttribute("data-invalid")
            err = panel.querySelector(".ask-field-error")
            if not absent(err):
                err.textContent = ""

    def select_tab(self, i: int, *, focus: bool) -> None:
        """Show prompt ``i`` (and focus its tab)."""
        self.tab = i
        for j, tab in enumerate(self.el.querySelectorAll(".ask-tab")):
            selected = j == i
            tab.setAttribute("aria-selected", "true" if selected else "false")
            tab.setAttribute("tabindex", "0" if selected else "-1")
            if selected and focus:
                tab.focus()
        for j, panel in enumerate(self.el.querySelectorAll(".ask-panel")):
            panel.hidden = j != i

    def focus(self) -> None:
        """Focus the first field of the shown prompt."""
        panel = self.el.querySelector(f"#ap-ask-panel-{self.tab}")
        if absent(panel):
            return
        field = panel.querySelector("input, textarea")
        if not absent(field):
            field.focus()

    def _collect(self) -> tuple[list[dict[str, Any]], int | None]:
        """Answers from the form, and the index of the first prompt without a valid answer."""
        lbl = self.dom.labels
        answers = []
        first_bad = None
        for i, prompt in enumerate(self._store.pending_ask_user):
            panel = self.el.querySelector(f"#ap-ask-panel-{i}")
            kind = prompt.get("type")
            problem = None
            result: Any = None
            if kind == "text":
                value = str(panel.querySelector(".ask-text").value)
                if not value.strip():
                    problem = lbl["ask_required_text"]
                result = value
            else:
                chosen = [str(b.value) for b in panel.querySelectorAll(".ask-choice") if b.checked]
                if kind == "checklist":
                    result = chosen
                elif not chosen:
                    problem = lbl["ask_required_choice"]
                elif kind == AskUserType.BOOL:
                    result = chosen[0] == "true"
                else:
                    result = chosen[0]
            err = panel.querySelector(".ask-field-error")
            err.textContent = problem or ""
            tab = self.el.querySelector(f"#ap-ask-tab-{i}")
            if problem:
                panel.setAttribute("data-invalid", "true")
                tab.setAttribute("data-invalid", "true")
                for field in panel.querySelectorAll("input, textarea"):
                    field.setAttribute("aria-invalid", "true")
                if first_bad is None:
                    first_bad = i
            else:
                panel.removeAttribute("data-invalid")
                tab.removeAttribute("data-invalid")
                for field in panel.querySelectorAll("input, textarea"):
                    field.removeAttribute("aria-invalid")
            answers.append({"id": prompt.get("id"), "result": result})
        return answers, first_bad

    def submit(self) -> None:
        """Send every answer, or show what is missing (on the first prompt that lacks one)."""
        if self._store.ask_user_sending or not self._store.pending_ask_user:
            return
        answers, bad = self._collect()
        err = self.el.querySelector(".ask-error")
        if bad is not None:
            err.textContent = self.dom.labels["ask_fix"]
            err.hidden = False
            self.select_tab(bad, focus=False)
            self.focus()
            return
        err.hidden = True
        self._ctx.spawn(self._store.submit_ask_user(answers))


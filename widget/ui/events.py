"""The panel's delegated event handlers: one listener per event type on the panel, plus the document's shortcut.

Keys typed in the open bar are the bar's: a host page's own shortcuts (a search overlay that grabs every key, say)
must not see them, so every key event that reaches the panel stops there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..protocol import ConfirmationDecision
from ..store import Store
from .actions import Actions
from .answer_tools import ACTIONS as ANSWER_ACTIONS
from .answer_tools import AnswerTools
from .ask import AskUser
from .composer import Composer
from .context import PartContext, Shell
from .dom import absent, has
from .history import ACTIONS as HISTORY_ACTIONS
from .history import HistoryPanel
from .sources import CITE_ACTION, Sources
from .starters import ACTIONS as PROMPT_ACTIONS
from .starters import Prompts


def is_shortcut(event: Any) -> bool:
    """Alt+Shift+A: open or close the bar from anywhere on the page."""
    return bool(event.altKey and event.shiftKey and not event.ctrlKey and not event.metaKey
                and str(event.code) == "KeyA")


@dataclass(frozen=True)
class Targets:
    """The parts the panel's events go to."""

    history: HistoryPanel
    actions: Actions
    answer_tools: AnswerTools
    prompts: Prompts
    ask: AskUser
    composer: Composer
    sources: Sources


class PanelEvents:
    """Clicks on ``data-action`` controls, keys (Esc, Enter, tab arrows), form submits, changes, input. Tab is the
    browser's: the panel is a non-modal dialog beside a page that stays usable, so Tab may leave it.

    It dispatches to the parts (``Targets``) and the store, and triggers the bar's own operations through ``shell``.
    """

    def __init__(self, ctx: PartContext, store: Store, parts: Targets, shell: Shell) -> None:
        self._ctx = ctx
        self._store = store
        self._parts = parts
        self._shell = shell

    def on_click(self, event: Any) -> None:
        """A click on a control with ``data-action`` (and ``data-id``)."""
        self._shell.reader_acted()
        target = event.target
        if absent(target) or not has(target, "closest"):
            return
        el = target.closest("[data-action]")
        if absent(el):
            return
        action = str(el.getAttribute("data-action"))
        arg = el.getAttribute("data-id")
        arg = None if absent(arg) else str(arg)
        s = self._store
        if action == "close":
            self._shell.close()
        elif action == "new-chat":
            if self._parts.history.visible:
                self._parts.history.show(False, focus=False)
            self._ctx.spawn(s.new_chat())
            self._ctx.focus_composer()
        elif action == "activity":
            self._shell.show_activity(not self._shell.activity_open)
        elif action == "stop":
            self._ctx.spawn(s.stop())
        elif action == "retry":
            self._ctx.spawn(s.retry(arg))
            self._ctx.focus_composer()
        elif action == "regenerate":
            self._ctx.spawn(s.regenerate())
            self._ctx.focus_composer()
        elif action == "retry-connect":
            if self._shell.on_retry is not None:
                self._shell.on_retry()
        elif action == "use-here":
            self._ctx.spawn(s.use_here())
        elif action == "dismiss":
            s.dismiss_notice()
        elif action in (ConfirmationDecision.ALLOW, ConfirmationDecision.DENY) and arg is not None:
            s.resolve_confirmation(int(arg), action)
            self._ctx.focus_composer()
        elif action == "ask-tab" and arg is not None:
            self._parts.ask.select_tab(int(arg), focus=True)
        elif action == "action-press":
            self._parts.actions.press(el)
        elif action == "action-cancel":
            s.cancel_action_form(str(el.getAttribute("data-mid")), str(el.getAttribute("data-aid")))
        elif action in HISTORY_ACTIONS:  # past conversations (widget.ui.history)
            self._parts.history.on_action(action, arg)
        elif action in ANSWER_ACTIONS:  # copy or rate an answer (widget.ui.answer_tools)
            self._parts.answer_tools.on_action(action, arg, el)
        elif action in PROMPT_ACTIONS:  # a starter or a follow-up suggestion (widget.ui.starters)
            self._parts.prompts.on_action(action, el)
        elif action == CITE_ACTION:  # a source marker in an answer (widget.ui.sources)
            self._parts.sources.on_cite(event, el)

    def keep_key(self, event: Any) -> None:
        """A key released in the bar: the page does not see it."""
        event.stopPropagation()

    def on_keydown(self, event: Any) -> None:
        """Esc closes (a form, the log, the bar), Tab stays inside, Enter sends, arrows move between tabs."""
        event.stopPropagation()  # the bar's key (see _keep_key); the shortcut is handled here for the same reason
        self._shell.reader_acted()
        if is_shortcut(event):
            event.preventDefault()
            self._shell.toggle_open()
            return
        key = str(event.key)
        if key == "Escape":
            event.preventDefault()
            event.stopPropagation()
            form: Any = event.target.closest(".action-form") if has(event.target, "closest") else None
            if not absent(form):  # Esc in an action's form cancels it (focus back on its button)
                mid, aid = str(form.getAttribute("data-mid")), str(form.getAttribute("data-aid"))
                self._store.cancel_action_form(mid, aid)
                return
            if self._parts.answer_tools.comments.escape(event.target):  # Esc in a comment form closes it
                return
            if self._parts.history.visible:  # a deletion waiting for confirmation, else the list itself
                if not self._parts.history.cancel_delete():
                    self._parts.history.show(False)
            elif self._shell.activity_open:
                self._shell.show_activity(False)
            else:
                self._shell.close()
            return
        target = event.target
        cls = target.classList
        if cls.contains("comment-input"):  # Ctrl/Cmd+Enter sends a comment; Enter alone is a new line
            if key == "Enter" and (event.ctrlKey or event.metaKey) and not event.isComposing:
                event.preventDefault()
                self._parts.answer_tools.comments.submit(target)
            return
        if cls.contains("input"):
            if key == "Enter" and not event.shiftKey and not event.isComposing:
                event.preventDefault()
                self._parts.composer.send()
            return
        if cls.contains("ask-tab") and key in ("ArrowLeft", "ArrowRight", "Home", "End"):
            event.preventDefault()
            self._parts.ask.move_tab(key)

    def on_document_keydown(self, event: Any) -> None:
        """The shortcut, anywhere on the page."""
        if is_shortcut(event):
            event.preventDefault()
            event.stopPropagation()  # ours: a page listener on window must not act on it (and take the focus back)
            self._shell.toggle_open()

    def on_submit(self, event: Any) -> None:
        """The composer, the ask-user form or an action's form was submitted."""
        event.preventDefault()
        form = event.target.getAttribute("data-form")
        if form == "composer":
            self._parts.composer.send()
        elif form == "ask":
            self._parts.ask.submit()
        elif form == "action":
            self._parts.actions.submit(event.target)
        elif form == "comment":
            self._parts.answer_tools.comments.submit(event.target)

    def on_input(self, event: Any) -> None:
        """Typing in a comment box: its counter follows."""
        target = event.target
        if not absent(target) and has(target, "classList") and target.classList.contains("comment-input"):
            self._parts.answer_tools.comments.on_input(target)

    def on_change(self, event: Any) -> None:
        """A field changed: its error goes."""
        target = event.target
        param = target.getAttribute("data-param")
        if not absent(param):
            target.setAttribute("data-touched", "true")
            form = target.closest(".action-form")
            if not absent(form):
                self._store.clear_action_field_error(
                    str(form.getAttribute("data-mid")), str(form.getAttribute("data-aid")), str(param))
            return
        if not absent(target.getAttribute("data-q")):
            self._parts.ask.field_changed(target)

"""The conversation: one list item per message, keyed by id and touched only when its signature changed.

A streaming answer goes through ``StreamingRenderer``: finished blocks are rendered, sanitized and appended once;
only the unfinished tail is re-rendered per frame. That Markdown and sanitizing may run in the task that asks for
the frame (``prepare_stream``; the sanitizer's fragments wait on the view), so the frame only inserts them.

Two layers of sanitizing: ``render_markdown`` escapes raw HTML at the source; the sink sanitizer
(``static/sanitize.mjs``, DOMPurify) inserts the result. Everything else the model provides is set with
``textContent``. Without the sanitizer module, answers are shown as plain text.
"""

from __future__ import annotations

import time
from typing import Any

from ..core.markdown import MARK_OPEN
from ..protocol import Role
from ..store import Store
from ..store.sources import plain_markers
from .actions import Actions
from .answer_tools import AnswerTools
from .calls import CallPills
from .context import PartContext
from .dom import absent, bidi_safe, message_key
from .frames import Frames
from .sources import Sources, streaming_text
from .views import MessageView, Views

__all__ = ["MessageView", "Messages"]


class Messages:
    """The message list (and the empty state shown before the first message).

    It renders each message and hands its share of the view to the parts that fill it (call pills, offered
    actions, the answer's tools, its sources); ``frames`` says whether a render runs in the animation frame.
    """

    def __init__(
        self,
        ctx: PartContext,
        store: Store,
        *,
        views: Views,
        pills: CallPills,
        sources: Sources,
        actions: Actions,
        answer_tools: AnswerTools,
        frames: Frames,
        sanitizer: Any,
    ) -> None:
        self._ctx = ctx
        self._store = store
        self.dom = dom = ctx.dom
        self.pills = pills
        self._actions = actions
        self._answer_tools = answer_tools
        self._frames = frames
        self._sanitizer = sanitizer
        #: The views on screen by key (shared with the parts that render into them).
        self.views = views
        self.order: list[str] = []
        self._busy = False
        self._render_markdown: Any = None
        self._renderer_cls: Any = None
        #: Markers and source rows of the answers.
        self.sources = sources
        lbl = dom.labels
        self.empty = dom.el("div", "empty", part="empty")
        self.empty.appendChild(dom.icon("spark", "empty-icon"))
        self.empty.appendChild(dom.el("p", "empty-title", text=lbl["empty_title"]))
        self.empty.appendChild(dom.el("p", "empty-text", text=lbl["empty_text"]))
        # A log of messages, not a list: a log's children are not list items (a list inside it would need its own
        # element, which every assistive technology announces as "list, N items" on each new message).
        self.list = dom.el("div", "messages", part="messages")
        self.list.setAttribute("role", "log")
        self.list.setAttribute("aria-live", "polite")
        self.list.setAttribute("aria-label", lbl["conversation"])

    def render(self) -> None:
        """Keyed update of the whole list: only changed messages touch the DOM."""
        s = self._store
        messages = s.messages
        streaming = s.streaming_message
        keys: list[str] = []
        last_index = len(messages) - 1
        idle = not s.is_streaming
        for index, m in enumerate(messages):
            key = message_key(m, index)
            keys.append(key)
            view = self._view(key, str(m.get("role") or Role.ASSISTANT))
            # A turn's answer is its last assistant message: the rounds before it ("Calling ... on the page") get
            # no copy/rating row of their own.
            if index < last_index:
                answer = messages[index + 1].get("role") != Role.ASSISTANT
            else:
                answer = streaming is None and idle
            self._fill(view, m, streaming=False, last=(index == last_index and idle and streaming is None),
                       answer=answer)
        if streaming is not None:
            key = message_key(streaming, len(messages))
            if key not in keys:
                keys.append(key)
                view = self._view(key, Role.ASSISTANT)
                self._fill(view, streaming, streaming=True, last=False)
        gone = [k for k in self.views if k not in keys]
        if gone:
            # A withdrawn message (retry, regenerate, an uncited answer) may hold the focus: it goes to the composer
            # rather than to nowhere (the page's body, outside the bar's Tab trap).
            active = self._ctx.root.activeElement
            lost = False
            for key in gone:
                el = self.views.pop(key).el
                lost = lost or (not absent(active) and bool(el.contains(active)))
                el.remove()
                self._answer_tools.forget(key)
            if lost:
                self._ctx.focus_composer()
        if keys != self.order:
            for key in keys:  # appendChild moves: the list ends up in order
                self.list.appendChild(self.views[key].el)
            self.order = keys
        self.empty.hidden = bool(keys)
        self._set_busy(s.is_streaming)

    def _set_busy(self, busy: bool) -> None:
        if busy != self._busy:
            self._busy = busy
            self.list.setAttribute("aria-busy", "true" if busy else "false")

    def render_streaming(self) -> None:
        """Per chunk: only the streaming message (its tail) is touched."""
        streaming = self._store.streaming_message
        if streaming is None:
            self.render()
            return
        key = message_key(streaming, len(self._store.messages))
        view = self.views.get(key)
        if view is None:
            self.render()
            return
        frames = self._frames
        shown = streaming_text(bidi_safe(streaming.get("content") or ""))
        if frames.in_frame and view.pending is not None and view.pending[0] != shown:
            # Show what was prepared; the newer chunks wait for the next interval instead of making this frame
            # render Markdown again.
            streaming = {**streaming, "content": view.pending[0]}
            frames.stream_behind = True
        self._fill(view, streaming, streaming=True, last=False)
        self._set_busy(True)

    def _view(self, key: str, role: str) -> MessageView:
        view = self.views.get(key)
        if view is not None and view.role == role:
            return view
        if view is not None:
            view.el.remove()
        view = MessageView(key, role)
        el = self.dom.el("div", f"message {role}", part=f"message message-{role}")
        el.setAttribute("data-role", role)
        el.setAttribute("data-key", key)
        label = self.dom.el("span", "sr-only", text=self.dom.labels.get({"user": "you"}.get(role, role), role) + ":")
        el.appendChild(label)
        bubble = self.dom.el("div", "bubble", part="bubble")
        body = self.dom.el("div", "content markdown" if role == Role.ASSISTANT else "content", part="content")
        body.setAttribute("dir", "auto")  # its own base direction, isolated from the bar's (right-to-left text)
        bubble.appendChild(body)
        el.appendChild(bubble)
        view.el, view.body = el, body
        view.calls = self.dom.el("div", "calls")
        view.calls.hidden = True
        el.appendChild(view.calls)
        if role == "assistant":
            view.actions = self.dom.el("div", "actions", part="actions")
            view.actions.setAttribute("role", "group")
            view.actions.setAttribute("aria-label", self.dom.labels["actions"])
            view.actions.hidden = True
            el.appendChild(view.actions)
        view.footer = self.dom.el("div", "message-footer")
        view.footer.hidden = True
        el.appendChild(view.footer)
        if role == "assistant":
            view.stable = self.dom.el("div", "md-stable")
            view.tail = self.dom.el("div", "md-tail")
            body.appendChild(view.stable)
            body.appendChild(view.tail)
        self.views[key] = view
        self.list.appendChild(el)
        return view

    def _fill(self, view: MessageView, m: dict[str, Any], *, streaming: bool, last: bool, answer: bool = False) -> None:
        text = bidi_safe(str(m.get("content") or ""))
        if view.role == "assistant":
            # The rows first: the markers the body gets link to them.
            rows = self.sources.rows_of(m, streaming)
            self.sources.render(view, rows)
            cites = None if streaming else {r["id"]: r["n"] for r in rows}
            # A stopped answer may end in half a citation, as a streaming one does.
            cut = streaming or bool(m.get("stopped"))
            self._answer(view, streaming_text(text) if cut else text, streaming, cites)
        elif view.text != text:
            view.body.textContent = text
            view.text = text
        if view.busy != streaming:
            view.busy = streaming
            if streaming:
                view.el.setAttribute("aria-busy", "true")
            else:
                view.el.removeAttribute("aria-busy")
            view.el.setAttribute("data-streaming", "true" if streaming else "false")
        self.pills.render(view.calls, view.call_views, m.get("function_calls") or [])
        if view.actions is not None:
            self._actions.render(view, [] if streaming else self._store.actions_for(m.get("id")))
        if view.role == "assistant":
            self._answer_tools.render(view, m, streaming or not answer)
        # Footer: Stopped mark, Retry on the last error, Regenerate on the last answer.
        stopped = bool(m.get("stopped"))
        retry = view.role == Role.ERROR and last and (m.get("retryable", True) is not False)
        regen = view.role == Role.ASSISTANT and last and not streaming
        sig = (stopped, retry, regen, m.get("id"))
        if sig != view.footer_sig:
            view.footer_sig = sig
            view.footer.textContent = ""
            if stopped:
                view.footer.appendChild(self.dom.el("span", "stopped", text=self.dom.labels["stopped"]))
            if retry:
                view.footer.appendChild(self.dom.text_button(self.dom.labels["retry"], "retry", "retry", m.get("id")))
            if regen:
                b = self.dom.text_button(self.dom.labels["regenerate"], "regenerate", "regenerate", m.get("id"))
                b.insertBefore(self.dom.icon("retry"), b.firstChild)
                view.footer.appendChild(b)
            view.footer.hidden = not (stopped or retry or regen)

    def _markdown(self) -> tuple[Any, Any]:
        if self._render_markdown is None:
            from ..core.markdown import StreamingRenderer, render_markdown

            self._render_markdown, self._renderer_cls = render_markdown, StreamingRenderer
        return self._render_markdown, self._renderer_cls

    def _answer(self, view: MessageView, text: str, streaming: bool, cites: dict[str, int] | None) -> None:
        """Markdown → HTML (raw HTML escaped) → sink sanitizer → DOM; incremental while streaming. ``cites``: the
        committed answer's citation numbers (its markers), None while it streams (every citation token hidden)."""
        if view.pending is not None:  # the renderer is ahead of the DOM: insert what was prepared first
            shown, appended, tail = view.pending
            view.pending = None
            if appended is not None:
                view.stable.append(appended)
            if tail is not None:
                view.tail.replaceChildren(tail)
            view.text = shown
        empty = "false" if text else "true"
        if view.tail is not None and view.empty != empty:
            view.empty = empty
            view.body.setAttribute("data-empty", empty)
        if view.text == text and view.cites == cites:
            return
        san = self._sanitizer
        if san is None:  # no sink sanitizer: plain text, never HTML (citations read "[1]")
            view.stable.textContent = plain_markers(text, cites)
            view.cites = cites
            view.text = text
            return
        if streaming and not text.strip() and view.text is None:
            view.tail.appendChild(self.dom.el("span", "thinking", text=self.dom.labels["thinking"]))
            view.text = text
            return
        render, renderer_cls = self._markdown()
        view.cites = cites
        if streaming or (view.renderer is not None and not cites):
            r = view.renderer
            if r is None or view.text is None or not text.startswith(view.text):
                r = view.renderer = renderer_cls()
                view.stable.textContent = ""
                view.tail.textContent = ""
            previous_tail = r.tail if view.text else None  # None: the tail still shows "Thinking…"
            r.feed(text)
            if r.appended:
                san.appendSafeHTML(view.stable, r.appended)
            if r.tail != previous_tail:
                san.setSafeHTML(view.tail, r.tail)
            if not streaming:
                view.renderer = None  # final: the committed text rendered exactly as render_markdown would
        else:
            # Committed (a streamed answer with its sources is rendered once more, with its markers).
            html = render(text, cites)
            san.setSafeHTML(view.stable, html)
            view.tail.textContent = ""
            view.renderer = None
            if MARK_OPEN in html:
                self.sources.mark(view, view.stable)
        view.text = text


    def prepare_stream(self) -> float | None:
        """Render the streaming answer's Markdown and sanitize it now, in the task that asks for the frame, so the
        animation frame only inserts nodes (the two halves are two shorter tasks instead of one long one).

        Returns what preparing took (ms), None when there was nothing to prepare."""
        s = self._store
        streaming, san = s.streaming_message, self._sanitizer
        if streaming is None or san is None:
            return None
        view = self.views.get(message_key(streaming, len(s.messages)))
        if view is None or view.pending is not None or view.renderer is None or not view.text:
            return None  # the frame renders it: the first words, "Thinking…", a new view
        text = streaming_text(bidi_safe(str(streaming.get("content") or "")))
        if text == view.text or not text.startswith(view.text):
            return None  # nothing new, or a restart (the frame starts over)
        started = time.monotonic()
        r = view.renderer
        previous_tail = r.tail
        r.feed(text)
        view.pending = (
            text,
            san.sanitizeToFragment(r.appended) if r.appended else None,
            san.sanitizeToFragment(r.tail) if r.tail != previous_tail else None,
        )
        return (time.monotonic() - started) * 1000  # part of this render's cost (see the frames)

    def clear(self) -> None:
        """Forget the views (teardown)."""
        self.views.clear()

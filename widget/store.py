"""The headless store between the client and any UI (seed 001's Pinia-store role): no DOM here.

It copies client events into plain state and tells subscribers *what* changed, so the bar (or a page's own UI)
renders from it alone and only re-renders the part that changed::

    store = Store(client)
    off = store.subscribe(lambda what: print(what, store.messages))

What ``what`` can be (a subscriber is called once per change, synchronously, in the order they happen):

==================  ====================================================================================
``messages``        committed visible messages (``store.messages``) or local error messages changed
``streaming``       the streaming message grew or changed (``store.streaming_message``, ``is_streaming``)
``calls``           a function call started, ended or got its timings (``store.function_calls``)
``activity``        the activity log changed (``store.activity``: calls, page errors, state errors)
``connection``      ``connection_state`` / ``connection_error`` changed
``role``            this tab became (in)active (``store.active``)
``confirmations``   ``pending_confirmations`` changed
``ask_user``        ``pending_ask_user`` (or ``ask_user_error`` / ``ask_user_sending``) changed
``waiting``         ``waiting_for`` changed: what the relay waits for (composer disabled meanwhile)
``notice``          ``notice`` changed (a dismissible problem that is not part of the conversation)
``actions``         offered actions (seed 002) changed: offered, pressed, running, done, failed, form state
==================  ====================================================================================

Streaming is cheap on purpose: a chunk only says ``streaming``; committed messages are recomputed (tool results
paired, call-only rounds merged) only when the committed list changes, never per chunk.

Actions (``send``, ``stop``, ``retry``, ``regenerate``, ``new_chat``, ``use_here``, ``resolve_confirmation``,
``submit_ask_user``, ``press_action``, ``submit_action_form``) are thin wrappers over client methods that never
raise: a failure becomes a local error message (a failed send keeps its text for Retry), a ``notice``,
``ask_user_error``, or the error of an offered action (a failed action is offered again, for a retry).

Offered actions (seed 002, D7) are live only: ``store.actions_for(message_id)`` lists the offers shown under a
message, each ``{id, name, label, title, confirm, parameters, arguments, message_id, status, outcome, error,
field_errors, form_open, values}`` — ``status`` is ``offered``, ``running``, ``done`` or ``failed``. They come
from the client (offers received in this page session) and from the conversation's ``action`` messages (an
outcome recorded by another tab). A restored conversation has none.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import re
import time
from typing import Any, Callable

from .client import AutopilotClient
from .core.conversation import visible_messages
from .core.tools import check_tool_arguments
from .errors import WidgetError

log = logging.getLogger("widget")

Subscriber = Callable[[str], None]

#: ``waiting_for`` values (None: nothing; the reader may type).
WAIT_ASK_USER = "ask_user"
WAIT_CONFIRMATION = "confirmation"
WAIT_FUNCTION = "function"

#: Offered-action states (``status`` of ``store.actions_for(...)`` entries).
ACTION_OFFERED = "offered"
ACTION_RUNNING = "running"
ACTION_DONE = "done"
ACTION_FAILED = "failed"


class Store:
    """Reactive-by-subscription state of one client's conversation."""

    def __init__(self, client: AutopilotClient) -> None:
        self.client = client
        self.connection_state: str = client.connection_state
        self.connection_error: dict[str, Any] | None = client.last_error
        #: Kept for compatibility: every connection/state error seen, oldest first.
        self.errors: list[dict[str, Any]] = []
        #: ``[{"id": int, "request": {id, name, arguments, timestamp}}]`` waiting for Allow / Deny.
        self.pending_confirmations: list[dict[str, Any]] = []
        self.pending_ask_user: list[dict[str, Any]] = client.get_pending_ask_user()
        #: Why the last ask-user submission failed (None when it did not).
        self.ask_user_error: str | None = None
        self.ask_user_sending = False
        self.context_resolutions = 0
        #: A problem that is not a message of the conversation: ``{"code", "message"}`` or None.
        self.notice: dict[str, Any] | None = None
        #: Message ids of answers the reader stopped.
        self.stopped: set[str] = set()
        self.waiting_for: str | None = None
        self._subscribers: list[Subscriber] = []
        self._futures: dict[int, asyncio.Future[str]] = {}
        self._ids = itertools.count(1)
        self._local_errors: list[dict[str, Any]] = []
        self._messages: list[dict[str, Any]] = []
        self._signature: tuple[int, int] | None = None
        self._page_events: list[dict[str, Any]] = []
        self._activity: list[dict[str, Any]] | None = None
        self._streaming_id: str | None = None
        self._stopping = False
        self._closed = False
        #: Offered actions: message ids with offers seen live, the reader's side of each offer (form open, values,
        #: errors, running), where each offer is shown, and the derived per-message lists (None: recompute).
        self._offered_ids: list[str] = []
        self._action_ui: dict[tuple[str, str], dict[str, Any]] = {}
        self._offer_anchor: dict[str, str] = {}
        self._actions: dict[str, list[dict[str, Any]]] | None = None
        on = client.on
        self._unsubscribe = [
            on("connectionStateChanged", self._on_connection),
            on("roleChanged", lambda p: self._notify("role")),
            on("conversationLoaded", self._on_loaded),
            on("messagesChanged", self._on_messages_changed),
            on("completion.started", self._on_started),
            on("completion.finished", self._on_finished),
            on("function_call.begin", lambda p: self._calls_changed()),
            on("function_call.end", lambda p: self._calls_changed()),
            on("user_input", lambda p: self._update_waiting()),
            on("askUserRequired", self._on_ask_user),
            on("askUserCleared", self._on_ask_user),
            on("contextResolutionChanged", lambda p: self._set("context_resolutions", p["pending"], "waiting")),
            on("functionCall", lambda p: self._calls_changed()),
            on("functionSuccess", lambda p: self._calls_changed()),
            on("functionError", lambda p: self._calls_changed()),
            on("functionResponseSent", lambda p: self._calls_changed(messages=True)),
            on("functionConfirmationResolved", self._on_confirmation_resolved),
            on("stateError", self._on_state_error),
            on("pageError", self._on_page_error),
            on("actionsOffered", self._on_actions_offered),
            on("actionOutcome", lambda p: self._actions_changed()),
        ]
        self._refresh_messages()
        self._update_waiting(notify=False)

    # --- reading -----------------------------------------------------------------------------
    @property
    def messages(self) -> list[dict[str, Any]]:
        """Committed user/assistant/error messages, tool results paired onto calls, plus local send errors.

        Do not mutate: the list is shared until the next ``messages`` change.
        """
        return self._messages

    @property
    def visible_messages(self) -> list[dict[str, Any]]:
        """Alias of ``messages`` (seed 001 ``visibleMessages``)."""
        return self._messages

    @property
    def active(self) -> bool:
        """Whether this tab is the conversation's active client (False: read-only, offer "Use here")."""
        return self.client.active

    @property
    def streaming_message(self) -> dict[str, Any] | None:
        """The assistant message being streamed (``{id, role, content, function_calls}``), if any."""
        return self.client.session.streaming_message

    @property
    def is_streaming(self) -> bool:
        """Whether a completion is in progress."""
        return self.client.session.is_streaming

    @property
    def can_send(self) -> bool:
        """Whether a new user message may be sent now."""
        return (
            self.connection_state == "connected"
            and self.active
            and not self.is_streaming
            and self.waiting_for is None
        )

    @property
    def function_calls(self) -> list[dict[str, Any]]:
        """Every call of the conversation, newest first, with timings: ``{id, name, arguments, status, result,
        error, duration_ms, total_ms, started_at}``."""
        return [e for e in self.activity if e["kind"] == "call"]

    @property
    def activity(self) -> list[dict[str, Any]]:
        """The activity log, newest first: calls (``kind: "call"``) and page/state errors (``kind: "error"``)."""
        if self._activity is None:
            self._activity = self._build_activity()
        return self._activity

    def call_timing(self, call: dict[str, Any]) -> tuple[float | None, float | None]:
        """``(duration_ms, total_ms)`` of a call record: the relay's copy, else this tab's own measurement."""
        duration, total = call.get("duration_ms"), call.get("total_ms")
        if duration is None or total is None:
            record = self._history().get(call.get("id"))
            if record is not None:
                duration = duration if duration is not None else record.get("handlerMs")
                total = total if total is not None else record.get("totalMs")
        return _num(duration), _num(total)

    def last_user_text(self, before_id: Any = None) -> str | None:
        """The text of the last user message (before message ``before_id`` when given)."""
        last = None
        for m in self.client.messages:
            if before_id is not None and m.get("id") == before_id:
                break
            if m.get("role") == "user" and isinstance(m.get("content"), str):
                last = m["content"]
        return last

    # --- subscribing -------------------------------------------------------------------------
    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        """Call ``fn(what)`` after each change; returns an unsubscribe function."""
        self._subscribers.append(fn)

        def off() -> None:
            if fn in self._subscribers:
                self._subscribers.remove(fn)

        return off

    def _notify(self, what: str) -> None:
        for fn in list(self._subscribers):
            try:
                fn(what)
            except Exception as exc:  # noqa: BLE001 - one broken view must not break the others
                log.error("store subscriber raised on %r: %r", what, exc)

    def _set(self, attr: str, value: Any, what: str | None = None) -> None:
        setattr(self, attr, value)
        self._notify(what or attr)

    # --- client events -----------------------------------------------------------------------
    def _on_connection(self, payload: dict[str, Any]) -> None:
        self.connection_state = payload["state"]
        error = payload.get("error")
        if error:
            self.errors.append(error)
        if payload["state"] == "connected":
            self.connection_error = None
        elif error:
            self.connection_error = error
        self._notify("connection")
        self._update_waiting()

    def _on_loaded(self, payload: Any) -> None:
        # A (new) conversation: what was shown for the previous one goes (offers included: never restored).
        self._local_errors.clear()
        self.stopped.clear()
        self._offered_ids.clear()
        self._action_ui.clear()
        self._signature = None
        self._refresh_messages()
        self._activity = None
        self._notify("messages")
        self._notify("streaming")
        self._notify("activity")
        self._notify("actions")

    def _on_messages_changed(self, payload: Any) -> None:
        if self._refresh_messages():
            self._activity = None
            self._notify("messages")
            self._notify("activity")
            self._notify("actions")
        self._notify("streaming")

    def _on_actions_offered(self, payload: Any) -> None:
        mid = payload.get("message_id") if isinstance(payload, dict) else None
        if isinstance(mid, str) and mid not in self._offered_ids:
            self._offered_ids.append(mid)
        self._signature = None  # where the offers are shown is decided with the message list
        if self._refresh_messages():
            self._notify("messages")
        self._actions_changed()

    def _actions_changed(self) -> None:
        self._actions = None
        self._notify("actions")

    def _on_started(self, payload: Any) -> None:
        if isinstance(payload, dict) and isinstance(payload.get("message_id"), str):
            self._streaming_id = payload["message_id"]
        self._update_waiting()

    def _on_finished(self, payload: Any) -> None:
        if isinstance(payload, dict) and payload.get("status") == "cancelled" and self._streaming_id:
            self.stopped.add(self._streaming_id)
            self._signature = None  # re-render that message with its "stopped" mark
        self._streaming_id = None
        self._stopping = False
        self._update_waiting()

    def _calls_changed(self, *, messages: bool = False) -> None:
        self._activity = None
        if messages:
            self._signature = None
            if self._refresh_messages():
                self._notify("messages")
        self._notify("calls")
        self._notify("activity")
        self._update_waiting()

    def _on_ask_user(self, payload: Any) -> None:
        self.pending_ask_user = self.client.get_pending_ask_user()
        self.ask_user_error = None
        self._notify("ask_user")
        self._update_waiting()

    def _on_state_error(self, payload: dict[str, Any]) -> None:
        self.errors.append(payload)
        self._page_events.append(
            {
                "kind": "error",
                "id": f"state-{next(self._ids)}",
                "name": "State sync",
                "status": "error",
                "error": str(payload.get("message", "")),
                "code": payload.get("code"),
                "started_at": time.time() * 1000,
            }
        )
        self._activity = None
        self._notify("activity")

    def _on_page_error(self, payload: dict[str, Any]) -> None:
        self._page_events.append(
            {
                "kind": "error",
                "id": f"page-{next(self._ids)}",
                "name": f"Page Python {payload.get('source', '')}".strip(),
                "status": "error",
                "error": str(payload.get("traceback") or payload.get("message") or ""),
                "started_at": time.time() * 1000,
            }
        )
        self._activity = None
        self._notify("activity")
        if payload.get("message"):  # the page author's one line ("page Python failed: ..."), until dismissed
            self._set("notice", {"code": "page_python", "message": str(payload["message"])})

    # --- derived state -------------------------------------------------------------------------
    def _refresh_messages(self) -> bool:
        """Recompute ``messages`` when the committed list changed (O(1) check per event); True if it did."""
        raw = self.client.messages
        signature = (id(raw), len(raw))
        if signature == self._signature:
            return False
        self._signature = signature
        shown = visible_messages(raw)
        for m in shown:
            if m.get("id") in self.stopped:
                m["stopped"] = True
        shown = self._place_offers(raw, shown)
        if self._local_errors:
            shown = _merge_local(shown, self._local_errors)
        self._messages = shown
        return True

    def _place_offers(self, raw: list[dict[str, Any]], shown: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Decide under which shown message each live offer goes (``_offer_anchor``).

        Offers sit on the round's assistant message. When that message is not shown by itself (an empty round
        merged into the previous one's call pills, or a round that only offered), they go under the turn's
        previous shown answer; when the turn shows none, the offering message is shown (empty) to carry them.
        """
        self._offer_anchor = {}
        self._actions = None
        offered = set(self._offered_ids)
        candidates = [
            m["id"] for m in raw
            if m.get("role") == "assistant" and isinstance(m.get("id"), str)
            and (m["id"] in offered or m.get("actions"))
        ]
        live = [mid for mid in candidates if self.client.get_offered_actions(mid)]
        if not live:
            return shown
        visible = {m.get("id") for m in shown}
        position = {m.get("id"): i for i, m in enumerate(raw)}
        for mid in live:
            anchor = mid if mid in visible else None
            i = position[mid]
            if anchor is None:
                for j in range(i - 1, -1, -1):
                    role = raw[j].get("role")
                    if role == "user":
                        break
                    if role == "assistant" and raw[j].get("id") in visible:
                        anchor = raw[j]["id"]
                        break
            if anchor is None:
                at = 0
                for k, m in enumerate(shown):
                    if position.get(m.get("id"), -1) < i:
                        at = k + 1
                shown = shown[:at] + [{"id": mid, "role": "assistant", "content": "", "function_calls": []}] + shown[at:]
                visible.add(mid)
                anchor = mid
            self._offer_anchor[mid] = anchor
        return shown

    def _history(self) -> dict[Any, dict[str, Any]]:
        return {r["id"]: r for r in self.client.get_function_call_history()}

    def _build_activity(self) -> list[dict[str, Any]]:
        history = self._history()
        entries: list[dict[str, Any]] = []
        seen: set[Any] = set()
        sources = list(self._messages)
        if self.streaming_message is not None:
            sources.append(self.streaming_message)
        for m in sources:
            for call in m.get("function_calls") or []:
                if not isinstance(call, dict) or call.get("id") in seen:
                    continue
                seen.add(call.get("id"))
                duration, total = self.call_timing(call)
                record = history.get(call.get("id")) or {}
                status = call.get("status") or record.get("status") or "running"
                entries.append(
                    {
                        "kind": "call",
                        "id": call.get("id"),
                        "name": call.get("name") or record.get("name") or "",
                        "arguments": call.get("arguments"),
                        "status": status,
                        "result": call.get("result"),
                        "error": call.get("error"),
                        "duration_ms": duration,
                        "total_ms": total,
                        "started_at": record.get("startedAt") or _ms(m.get("created_at")),
                    }
                )
        # Calls this tab ran that no message shows yet (e.g. the relay has not echoed them).
        for call_id, record in history.items():
            if call_id in seen:
                continue
            entries.append(
                {
                    "kind": "call",
                    "id": call_id,
                    "name": record.get("name", ""),
                    "arguments": None,
                    "status": record.get("status", "running"),
                    "result": None,
                    "error": None,
                    "duration_ms": _num(record.get("handlerMs")),
                    "total_ms": _num(record.get("totalMs")),
                    "started_at": record.get("startedAt"),
                }
            )
        entries.reverse()  # newest first
        if self._page_events:
            entries = sorted(
                list(reversed(self._page_events)) + entries,
                key=lambda e: -(e.get("started_at") or 0),
            )
        return entries

    def _update_waiting(self, payload: Any = None, *, notify: bool = True) -> None:
        waiting = None
        if self.pending_ask_user:
            waiting = WAIT_ASK_USER
        elif self.pending_confirmations:
            waiting = WAIT_CONFIRMATION
        elif self.is_streaming and any(
            isinstance(c, dict) and c.get("status") == "running"
            for c in (self.streaming_message or {}).get("function_calls") or []
        ):
            waiting = WAIT_FUNCTION
        if waiting != self.waiting_for:
            self.waiting_for = waiting
            if notify:
                self._notify("waiting")

    # --- actions -------------------------------------------------------------------------------
    async def send(self, text: str) -> bool:
        """Send a user message; on failure a local error message with Retry appears. True when sent."""
        if not isinstance(text, str) or not text.strip():
            return False
        try:
            await self.client.send_message(text)
        except Exception as exc:  # noqa: BLE001 - shown in the conversation, with Retry
            self._add_local_error(_message_of(exc), retry_text=text, code=getattr(exc, "code", "not_sent"))
            return False
        return True

    async def stop(self) -> bool:
        """Stop the streaming answer (relay ``cancel``); True when a turn was cancelled."""
        self._stopping = True  # calls the relay now ends were stopped by the reader: no "expired" notice
        try:
            return await self.client.cancel()
        except Exception as exc:  # noqa: BLE001
            self._stopping = False
            self._set("notice", {"code": getattr(exc, "code", "cancel_failed"), "message": _message_of(exc)})
            return False

    async def retry(self, error_id: Any = None) -> bool:
        """Retry after an error: a local send error sends its text again; a failed turn goes on (relay ``retry``,
        which withdraws the failed round and runs it again)."""
        local = next((e for e in self._local_errors if e["id"] == error_id), None)
        if local is not None:
            self.dismiss_error(local["id"])
            return await self.send(local["retry_text"]) if local.get("retry_text") else False
        return await self._relay_op(self.client.retry, "retry_failed")

    async def regenerate(self) -> bool:
        """Replace the last answer with a new one (relay ``regenerate``)."""
        return await self._relay_op(self.client.regenerate, "regenerate_failed")

    async def _relay_op(self, op: Callable[[], Any], code: str) -> bool:
        try:
            await op()
            return True
        except Exception as exc:  # noqa: BLE001 - shown in the conversation
            self._add_local_error(_message_of(exc), code=getattr(exc, "code", code))
            return False

    async def new_chat(self) -> bool:
        """Start a fresh conversation (D2 "New chat")."""
        for cid in list(self._futures):
            self.resolve_confirmation(cid, "deny")
        try:
            await self.client.new_conversation()
            return True
        except Exception as exc:  # noqa: BLE001
            self._set("notice", {"code": getattr(exc, "code", "new_chat_failed"), "message": _message_of(exc)})
            return False

    async def use_here(self) -> bool:
        """Make this tab the active client ("Use here")."""
        try:
            await self.client.activate()
            return True
        except Exception as exc:  # noqa: BLE001
            self._set("notice", {"code": getattr(exc, "code", "activate_failed"), "message": _message_of(exc)})
            return False

    def dismiss_notice(self) -> None:
        """Hide the notice."""
        self._set("notice", None)

    def dismiss_error(self, error_id: Any) -> None:
        """Remove a local error message."""
        before = len(self._local_errors)
        self._local_errors = [e for e in self._local_errors if e["id"] != error_id]
        if len(self._local_errors) != before:
            self._signature = None
            self._refresh_messages()
            self._notify("messages")

    def dismiss_errors(self) -> None:
        """Forget shown errors (compatibility)."""
        self.errors = []
        self._set("notice", None)

    def _add_local_error(self, text: str, *, retry_text: str | None = None, code: str = "error") -> None:
        anchor = self._messages[-1].get("id") if self._messages else None
        while anchor is not None and str(anchor).startswith("local-"):
            anchor = next((e["after"] for e in self._local_errors if e["id"] == anchor), None)
        self._local_errors.append(
            {
                "id": f"local-{next(self._ids)}",
                "role": "error",
                "local": True,
                "content": text,
                "code": code,
                "retryable": retry_text is not None,
                "retry_text": retry_text,
                "after": anchor,
            }
        )
        self._signature = None
        self._refresh_messages()
        self._notify("messages")

    # --- confirmations -------------------------------------------------------------------------
    def confirmation_handler(self, request: dict[str, Any]) -> asyncio.Future[str]:
        """A confirmation handler that waits for the UI to call ``resolve_confirmation``.

        When the client gives up waiting (the relay ended the call), the prompt disappears by itself.
        """
        fut: asyncio.Future[str] = asyncio.get_event_loop().create_future()
        cid = next(self._ids)
        self._futures[cid] = fut
        self.pending_confirmations.append({"id": cid, "request": request})
        fut.add_done_callback(lambda f, cid=cid: self._confirmation_done(cid))
        self._notify("confirmations")
        self._update_waiting()
        return fut

    def resolve_confirmation(self, cid: int, decision: str) -> None:
        """The reader's answer: 'allow' or anything else (deny). Single use."""
        fut = self._futures.pop(cid, None)
        if fut is not None and not fut.done():
            fut.set_result("allow" if decision == "allow" else "deny")
        self._confirmation_done(cid)

    def _confirmation_done(self, cid: int) -> None:
        self._futures.pop(cid, None)
        before = len(self.pending_confirmations)
        self.pending_confirmations = [c for c in self.pending_confirmations if c["id"] != cid]
        if len(self.pending_confirmations) != before:
            self._notify("confirmations")
            self._update_waiting()

    def _on_confirmation_resolved(self, payload: dict[str, Any]) -> None:
        if payload.get("reason") == "expired" and not self._stopping:
            name = (payload.get("request") or {}).get("name", "")
            self._set(
                "notice",
                {"code": "confirmation_expired", "message": f"The request to run {name} expired before you answered."},
            )

    # --- ask user ------------------------------------------------------------------------------
    async def submit_ask_user(self, answers: list[dict[str, Any]]) -> bool:
        """Post the answers to every pending prompt; on failure ``ask_user_error`` says why. True when accepted."""
        self.ask_user_error = None
        self.ask_user_sending = True
        self._notify("ask_user")
        try:
            await self.client.respond_to_ask_user(answers)
            return True
        except Exception as exc:  # noqa: BLE001 - shown next to the prompts
            self.ask_user_error = _message_of(exc)
            return False
        finally:
            self.ask_user_sending = False
            self._notify("ask_user")

    # --- offered actions (seed 002) ---------------------------------------------------------------
    @property
    def actions(self) -> dict[str, list[dict[str, Any]]]:
        """Live offers by the id of the shown message they go under (see ``actions_for``)."""
        if self._actions is None:
            self._actions = self._build_actions()
        return self._actions

    def actions_for(self, message_id: Any) -> list[dict[str, Any]]:
        """The offers shown under message ``message_id`` (``[]`` for most messages, and after a reload)."""
        return self.actions.get(message_id, [])

    def _build_actions(self) -> dict[str, list[dict[str, Any]]]:
        recorded: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
        for m in self.client.messages:
            if m.get("role") == "action":
                recorded.setdefault((m.get("message_id"), m.get("action_id")), []).append(m)
        out: dict[str, list[dict[str, Any]]] = {}
        for mid, anchor in self._offer_anchor.items():
            for offer in self.client.get_offered_actions(mid):
                view = self._offer_view(mid, offer, recorded.get((mid, offer.get("id")), []))
                out.setdefault(anchor, []).append(view)
        return out

    def _offer_view(self, mid: str, offer: dict[str, Any], recorded: list[dict[str, Any]]) -> dict[str, Any]:
        ui = self._action_ui.get((mid, offer["id"]), {})
        status, outcome = offer.get("status") or ACTION_OFFERED, offer.get("outcome")
        succeeded = [r for r in recorded if r.get("ok") is True]
        if status == ACTION_DONE:
            pass
        elif succeeded:  # done in another tab of this conversation: never offered twice
            status, outcome = ACTION_DONE, succeeded[-1].get("outcome")
        elif ui.get("running") or status == ACTION_RUNNING:
            status = ACTION_RUNNING
        elif status == ACTION_FAILED:
            pass
        elif recorded:
            status, outcome = ACTION_FAILED, recorded[-1].get("outcome")
        if status == ACTION_DONE:
            outcome = outcome if isinstance(outcome, str) and outcome else "Done."
        elif status == ACTION_FAILED:
            outcome = outcome if isinstance(outcome, str) and outcome else "The action failed."
        else:
            outcome = None
        error = ui.get("error")
        if error is None and status == ACTION_FAILED:
            error = outcome
        return {
            "id": offer["id"],
            "name": offer.get("name"),
            "label": offer.get("label") or offer.get("name"),
            "title": offer.get("title"),
            "confirm": offer.get("confirm"),
            "parameters": offer.get("parameters") or {"type": "object", "properties": {}},
            "arguments": dict(offer.get("arguments") or {}),
            "message_id": mid,
            "status": status,
            "outcome": outcome,
            "error": None if status == ACTION_DONE else error,
            "field_errors": {} if status == ACTION_DONE else dict(ui.get("field_errors") or {}),
            "form_open": bool(ui.get("form_open")) and status != ACTION_DONE and offer.get("confirm") == "form",
            "values": ui.get("values"),
        }

    def _find_offer(self, message_id: Any, action_id: Any) -> dict[str, Any] | None:
        for anchor, offers in self.actions.items():
            for o in offers:
                if o["id"] == action_id and message_id in (o["message_id"], anchor):
                    return o
        return None

    def _ui(self, offer: dict[str, Any]) -> dict[str, Any]:
        return self._action_ui.setdefault((offer["message_id"], offer["id"]), {})

    async def press_action(self, message_id: Any, action_id: Any) -> bool:
        """The reader pressed an offer's button: a button action runs; a form action opens its form.

        True when the action ran and succeeded (or the form opened). A failure is shown as the offer's
        ``error`` and the offer stays pressable (a retry).
        """
        offer = self._find_offer(message_id, action_id)
        if offer is None or offer["status"] in (ACTION_DONE, ACTION_RUNNING):
            return False
        if offer["confirm"] == "form":
            self.open_action_form(message_id, action_id)
            return True
        return await self._run_offer(offer, None)

    def open_action_form(self, message_id: Any, action_id: Any) -> bool:
        """Open the form of a form action (prefilled with the reader's last values, else the model's)."""
        offer = self._find_offer(message_id, action_id)
        if offer is None or offer["confirm"] != "form" or offer["status"] == ACTION_DONE:
            return False
        ui = self._ui(offer)
        if not ui.get("form_open"):
            ui["form_open"] = True
            self._actions_changed()
        return True

    def cancel_action_form(self, message_id: Any, action_id: Any) -> None:
        """Close an action's form without sending; its field errors go, the offer stays."""
        offer = self._find_offer(message_id, action_id)
        if offer is None:
            return
        ui = self._ui(offer)
        if ui.get("form_open") or ui.get("field_errors") or ui.get("error"):
            ui.update(form_open=False, field_errors={}, error=None)
            self._actions_changed()

    def clear_action_field_error(self, message_id: Any, action_id: Any, name: str) -> None:
        """Forget the error of one form field (the reader changed it)."""
        offer = self._find_offer(message_id, action_id)
        if offer is None:
            return
        errors = self._ui(offer).get("field_errors") or {}
        if name in errors:
            del errors[name]
            self._actions_changed()

    async def submit_action_form(self, message_id: Any, action_id: Any, values: dict[str, Any]) -> bool:
        """Send a form action with the reader's ``values`` (strings from form fields or typed values).

        Every field is checked against the action's schema first (``form_arguments``): a problem becomes that
        field's entry in ``field_errors`` and nothing is sent. True when the action ran and succeeded.
        """
        offer = self._find_offer(message_id, action_id)
        if offer is None or offer["status"] in (ACTION_DONE, ACTION_RUNNING):
            return False
        ui = self._ui(offer)
        ui["values"] = dict(values) if isinstance(values, dict) else {}
        args, problems = form_arguments(offer["parameters"], ui["values"])
        if problems:
            ui.update(form_open=True, field_errors=problems, error=FORM_FIX)
            self._actions_changed()
            return False
        ui.update(field_errors={})
        return await self._run_offer(offer, args)

    async def _run_offer(self, offer: dict[str, Any], args: dict[str, Any] | None) -> bool:
        ui = self._ui(offer)
        ui.update(running=True, error=None)
        self._actions_changed()
        ok = False
        try:
            result = await self.client.run_action(offer["message_id"], offer["id"], args)
            ok = bool(result.get("ok"))
            if not ok:
                ui["error"] = str(result.get("outcome") or "The action failed.")
        except Exception as exc:  # noqa: BLE001 - shown with the offer, which stays for a retry
            ui["error"] = _message_of(exc)
        finally:
            ui["running"] = False
        if ok:
            ui.update(form_open=False, field_errors={}, error=None)
        self._actions_changed()
        return ok

    # --- teardown --------------------------------------------------------------------------------
    def close(self) -> None:
        """Unsubscribe from the client; pending confirmations are denied (fail closed)."""
        if self._closed:
            return
        self._closed = True
        for off in self._unsubscribe:
            off()
        self._unsubscribe = []
        for cid in list(self._futures):
            self.resolve_confirmation(cid, "deny")
        self._subscribers.clear()


#: The form-level message when some fields need the reader's attention.
FORM_FIX = "Some fields need your attention."
REQUIRED = "Please fill in this field."


def arguments_text(arguments: Any) -> str:
    """An action's arguments as the reader reads them: ``plan: pro, quantity: 2`` (absent ones left out)."""
    if not isinstance(arguments, dict):
        return ""
    parts = []
    for name, value in arguments.items():
        if value is None:
            continue
        if isinstance(value, bool):
            text = "yes" if value else "no"
        elif isinstance(value, float) and value.is_integer():
            text = str(int(value))
        else:
            text = str(value)
        parts.append(f"{name}: {text}")
    return ", ".join(parts)


def form_arguments(parameters: dict[str, Any], values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The arguments a form's ``values`` make, and a reader-facing problem per field (empty when all pass).

    Strings from form fields are converted by the property's type (``"2"`` → 2 for an integer, ``"on"`` → True);
    an empty field is absent, which a required property refuses. Each value is then checked against its
    property with ``widget.core.tools.check_tool_arguments`` (enum, format, bounds), the same check the client
    and the relay make.
    """
    props: dict[str, Any] = (parameters or {}).get("properties") or {}
    required = set((parameters or {}).get("required") or [])
    args: dict[str, Any] = {}
    problems: dict[str, str] = {}
    for name, prop in props.items():
        value, problem = _coerce(prop, values.get(name))
        if problem is None and value is None and name in required:
            problem = REQUIRED
        if problem is None and value is not None:
            _, found = check_tool_arguments({"type": "object", "properties": {name: prop}}, {name: value})
            if found:
                problem = _reader_problem(name, prop, found)
        if problem:
            problems[name] = problem
        elif value is not None:
            args[name] = value
    return args, problems


def _coerce(prop: dict[str, Any], raw: Any) -> tuple[Any, str | None]:
    ptype = prop.get("type")
    if raw is None:
        return None, None
    if ptype == "string":
        if not isinstance(raw, str):
            return raw, None
        text = raw if prop.get("format") == "multiline" else raw.strip()
        return (text if text.strip() else None), None
    if ptype == "boolean":
        if isinstance(raw, bool):
            return raw, None
        text = str(raw).strip().lower()
        if text in ("true", "on", "yes", "1"):
            return True, None
        if text in ("false", "off", "no", "0"):
            return False, None
        return (None, None) if not text else (raw, "Choose yes or no.")
    if ptype in ("number", "integer"):
        if isinstance(raw, bool):
            return raw, None
        if isinstance(raw, (int, float)):
            return raw, None
        text = str(raw).strip().replace("\u2212", "-")
        if not text:
            return None, None
        if re.fullmatch(r"[+-]?\d+", text):
            return int(text), None
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            return None, "Enter a whole number." if ptype == "integer" else "Enter a number."
        if ptype == "integer":
            if not number.is_integer():
                return None, "Enter a whole number."
            return int(number), None
        return number, None
    return raw, None


def _reader_problem(name: str, prop: dict[str, Any], problem: str) -> str:
    """``check_tool_arguments``' reason (it names the argument) as a sentence for the field's reader."""
    rest = problem[len(name) + 1:] if problem.startswith(name + " ") else problem
    if rest == "is not an email address":
        return "Enter an email address, like name@example.com."
    if rest == "is not an http(s) URL":
        return "Enter a web address that starts with https://."
    if rest.startswith("is not a date-time"):
        return "Enter a date and time, like 2025-01-31T14:30."
    if rest.startswith("is not a date"):
        return "Enter a date, like 2025-01-31."
    if rest.startswith("must be one of"):
        return "Choose one of: " + ", ".join(str(e) for e in prop.get("enum") or []) + "."
    if rest == "must be an integer":
        return "Enter a whole number."
    if rest == "must be a number":
        return "Enter a number."
    if rest == "must be a string":
        return "Enter some text."
    if rest == "must be a boolean":
        return "Choose yes or no."
    m = re.fullmatch(r"must have at (least|most) (\d+) characters", rest)
    if m:
        return f"Use at {m.group(1)} {m.group(2)} characters."
    m = re.fullmatch(r"must be (at least|at most|more than|less than) (.+)", rest)
    if m:
        return f"Enter a number {m.group(1)} {m.group(2)}."
    return f"This value {rest}."


def _merge_local(shown: list[dict[str, Any]], local: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Insert local error messages after the message they followed when they happened."""
    by_anchor: dict[Any, list[dict[str, Any]]] = {}
    for e in local:
        by_anchor.setdefault(e["after"], []).append(e)
    out = list(by_anchor.pop(None, []))
    for m in shown:
        out.append(m)
        out.extend(by_anchor.pop(m.get("id"), []))
    for rest in by_anchor.values():  # anchors no longer shown (trimmed): keep them at the end
        out.extend(rest)
    return out


def _message_of(exc: BaseException) -> str:
    if isinstance(exc, WidgetError):
        return getattr(exc, "message", None) or str(exc)
    return str(exc) or type(exc).__name__


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _ms(seconds: Any) -> float | None:
    return float(seconds) * 1000 if isinstance(seconds, (int, float)) else None

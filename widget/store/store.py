"""The ``Store`` class: client events in, plain state and change announcements out (see the package doc)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ..client import AutopilotClient
from ..core.conversation import visible_messages
from ..protocol import CallProgress, ClientEvent, ConfirmationReason, ConnectionState, Event, Role, TurnStatus
from .actions import OfferedActions
from .activity import PageEvents, build_activity, call_timing, cancelled
from .ask import AskUserPrompts
from .confirm import ConfirmationQueue
from .feedback import Ratings
from .history import PastConversations
from .local import LocalErrors
from .ops import ConversationOps
from .starters import Prompts

log = logging.getLogger("widget")

Subscriber = Callable[[str], None]

#: ``waiting_for`` values (None: nothing; the reader may type).
WAIT_ASK_USER = "ask_user"
WAIT_CONFIRMATION = "confirmation"
WAIT_FUNCTION = "function"

class Store:
    """Reactive-by-subscription state of one client's conversation.

    A facade: its parts (``OfferedActions``, ``ConversationOps``, ``Prompts``, ``AskUserPrompts``, ``Ratings``,
    ``PastConversations``, ``ConfirmationQueue``, ``LocalErrors``, ``PageEvents``) each get the client's few calls
    they make and callbacks into the store's change announcements, never the store; this class keeps the revision,
    listens to the client, builds the shown messages and forwards its public API to them.
    """

    def __init__(self, client: AutopilotClient) -> None:
        self.client = client
        self.connection_state: str = client.connection_state
        self.connection_error: dict[str, Any] | None = client.last_error
        #: Kept for compatibility: every connection/state error seen, oldest first.
        self.errors: list[dict[str, Any]] = []
        self.context_resolutions = 0
        #: A problem that is not a message of the conversation: ``{"code", "message"}`` or None.
        self.notice: dict[str, Any] | None = None
        #: Message ids of answers the reader stopped.
        self.stopped: set[str] = set()
        self.waiting_for: str | None = None
        self._subscribers: list[Subscriber] = []
        self._confirmations = ConfirmationQueue(self._confirmations_changed)
        self._local_errors = LocalErrors()
        self._page_events = PageEvents()
        self._ask_user = AskUserPrompts(client, self._ask_user_changed)
        self._streaming_id: str | None = None
        self._closed = False
        self._own = 0  # changes made here (see ``revision``)
        #: Bumped (with ``revision``) when what is shown with the committed messages changed here (stopped marks,
        #: local errors, offers, call results); the client's session counts changes of the list itself.
        self._committed = 0
        self._announced: tuple[int, int] = (-1, -1)  # the messages key last announced as "messages"
        self._messages: list[dict[str, Any]] = []
        self._messages_at: tuple[int, int] = (-1, -1)
        self._activity: list[dict[str, Any]] = []
        self._activity_at = -1
        self.offers = OfferedActions(client, shown=lambda: self.messages, revision=lambda: self.revision,
                                     changed=self._actions_changed)
        self._ops = ConversationOps(
            client, self._local_errors, shown=lambda: self.messages,
            set_notice=lambda notice: self._set("notice", notice), messages_changed=self._messages_changed,
            deny_confirmations=self._confirmations.deny_all,
        )
        self._prompts = Prompts(client, shown=lambda: self.messages, streaming=lambda: self.is_streaming,
                                send=self._ops.send, changed=self._notify)
        #: The reader's thumbs up/down on answers (widget.store.feedback).
        self.ratings = Ratings(client, self._ratings_changed)
        #: This browser's past conversations with the app (widget.store.history).
        self.history = PastConversations(client, lambda: self._notify("history"), self._confirmations.deny_all)
        on = client.on
        self._unsubscribe = [
            on(ClientEvent.CONNECTION_STATE_CHANGED, self._on_connection),
            on(ClientEvent.ROLE_CHANGED, lambda p: self._notify("role")),
            on(ClientEvent.CONVERSATION_LOADED, self._on_loaded),
            on(ClientEvent.MESSAGES_CHANGED, self._on_messages_changed),
            on(Event.COMPLETION_STARTED, self._on_started),
            on(Event.COMPLETION_FINISHED, self._on_finished),
            on(Event.FUNCTION_CALL_BEGIN, lambda p: self._calls_changed()),
            on(Event.FUNCTION_CALL_END, lambda p: self._calls_changed()),
            on(Event.USER_INPUT, lambda p: self._update_waiting()),
            on(ClientEvent.ASK_USER_REQUIRED, self._on_ask_user),
            on(ClientEvent.ASK_USER_CLEARED, self._on_ask_user),
            on(ClientEvent.CONTEXT_RESOLUTION_CHANGED,
               lambda p: self._set("context_resolutions", p["pending"], "waiting")),
            on(ClientEvent.FUNCTION_CALL, lambda p: self._calls_changed()),
            on(ClientEvent.FUNCTION_SUCCESS, lambda p: self._calls_changed()),
            on(ClientEvent.FUNCTION_ERROR, lambda p: self._calls_changed()),
            on(ClientEvent.FUNCTION_RESPONSE_SENT, lambda p: self._calls_changed(messages=True)),
            on(ClientEvent.FUNCTION_CONFIRMATION_RESOLVED, self._on_confirmation_resolved),
            on(ClientEvent.STATE_ERROR, self._on_state_error),
            on(ClientEvent.PAGE_ERROR, self._on_page_error),
            on(ClientEvent.ACTIONS_OFFERED, self._on_actions_offered),
            on(ClientEvent.ACTION_OUTCOME, lambda p: self._actions_changed()),
            on(ClientEvent.STARTERS_CHANGED, lambda p: self._notify("starters")),
        ]
        self._update_waiting(notify=False)

    # --- reading -----------------------------------------------------------------------------
    @property
    def messages(self) -> list[dict[str, Any]]:
        """Committed user/assistant/error messages, tool results paired onto calls, plus local send errors.

        Do not mutate: the list is shared until the next ``messages`` change.
        """
        key = self._messages_key()
        if self._messages_at != key:
            self._messages = self._build_messages()
            self._messages_at = key
        return self._messages

    @property
    def visible_messages(self) -> list[dict[str, Any]]:
        """Alias of ``messages`` (the client API's ``visibleMessages``)."""
        return self.messages

    @property
    def active(self) -> bool:
        """Whether this tab is the conversation's active client (False: read-only, offer "Use here")."""
        return self.client.active

    @property
    def streaming_message(self) -> dict[str, Any] | None:
        """The assistant message being streamed (``{id, role, content, function_calls}``), if any."""
        return self.client.streaming_message

    @property
    def is_streaming(self) -> bool:
        """Whether a completion is in progress."""
        return self.client.is_streaming

    @property
    def stopping(self) -> bool:
        """Whether the reader pressed Stop and the turn has not finished yet."""
        return self._ops.stopping

    def call_stopped(self, call: dict[str, Any]) -> bool:
        """Whether a call shows as stopped: ended by the relay because the reader stopped its turn."""
        return bool(call.get("stopped")) or (self._ops.stopping and cancelled(call))

    @property
    def can_send(self) -> bool:
        """Whether a new user message may be sent now."""
        return (
            self.connection_state == ConnectionState.CONNECTED
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
        if self._activity_at != self.revision:
            self._activity = build_activity(self.messages, self.streaming_message, self._history(),
                                            self._page_events.entries)
            self._activity_at = self.revision
        return self._activity

    def call_timing(self, call: dict[str, Any]) -> tuple[float | None, float | None]:
        """``(duration_ms, total_ms)`` of a call record: the relay's copy, else this tab's own measurement."""
        return call_timing(call, self._history())

    def last_user_text(self, before_id: Any = None) -> str | None:
        """The text of the last user message (before message ``before_id`` when given)."""
        last = None
        for m in self.client.messages:
            if before_id is not None and m.get("id") == before_id:
                break
            if m.get("role") == Role.USER and isinstance(m.get("content"), str):
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

    @property
    def revision(self) -> int:
        """Moves on every change of what the store shows (the client's messages included); derived lists are
        rebuilt on the first read after it moved."""
        return self.client.messages_revision + self._own

    def _messages_key(self) -> tuple[int, int]:
        """Changes when the shown messages may have: the client's list, or what the store shows with it."""
        return (self.client.messages_revision, self._committed)

    def _bump(self, *, committed: bool = False) -> None:
        self._own += 1
        if committed:
            self._committed += 1

    def _messages_changed(self) -> None:
        """The shown messages changed by the store's own doing (local errors, stopped marks, offers)."""
        self._bump(committed=True)
        self._announced = self._messages_key()
        self._notify("messages")

    def _set(self, attr: str, value: Any, what: str | None = None) -> None:
        setattr(self, attr, value)
        self._notify(what or attr)

    def expect_connect(self) -> None:
        """A connect follows at once (the widget's boot): the bar shows "Connecting…" from its first frame instead
        of "Not connected" until the client says so."""
        if self.connection_state == ConnectionState.IDLE:
            self._set("connection_state", ConnectionState.CONNECTING, "connection")

    # --- client events -----------------------------------------------------------------------
    def _on_connection(self, payload: dict[str, Any]) -> None:
        self.connection_state = payload["state"]
        error = payload.get("error")
        if error:
            self.errors.append(error)
        if payload["state"] == ConnectionState.CONNECTED:
            self.connection_error = None
        elif error:
            self.connection_error = error
        self._notify("connection")
        self._update_waiting()

    def _on_loaded(self, payload: Any) -> None:
        # A (new) conversation: what was shown for the previous one goes (offers included: never restored).
        self._local_errors.clear()
        self.stopped.clear()
        self.offers.forget()
        self._bump(committed=True)
        self._announced = self._messages_key()
        self._notify("messages")
        self._notify("streaming")
        self._notify("activity")
        self._notify("actions")

    def _on_messages_changed(self, payload: Any) -> None:
        key = self._messages_key()
        if key != self._announced:
            self._announced = key
            self._notify("messages")
            self._notify("activity")
            self._notify("actions")
        self._notify("streaming")

    def _on_actions_offered(self, payload: Any) -> None:
        mid = payload.get("message_id") if isinstance(payload, dict) else None
        if isinstance(mid, str):
            self.offers.offered(mid)
        self._messages_changed()  # where the offers are shown is decided with the message list
        self._actions_changed()

    def _actions_changed(self) -> None:
        self._bump()
        self._notify("actions")

    def _ratings_changed(self) -> None:
        self._bump()
        self._notify("messages")

    def _on_started(self, payload: Any) -> None:
        if isinstance(payload, dict) and isinstance(payload.get("message_id"), str):
            self._streaming_id = payload["message_id"]
        self._update_waiting()

    def _on_finished(self, payload: Any) -> None:
        if isinstance(payload, dict) and payload.get("status") == TurnStatus.CANCELLED and self._streaming_id:
            self.stopped.add(self._streaming_id)
            self._bump(committed=True)  # re-render that message with its "stopped" mark
        self._streaming_id = None
        self._ops.turn_ended()
        self._update_waiting()

    def _calls_changed(self, *, messages: bool = False) -> None:
        if messages:
            self._messages_changed()
        else:
            self._bump()
        self._notify("calls")
        self._notify("activity")
        self._update_waiting()

    def _on_ask_user(self, payload: Any) -> None:
        self._ask_user.refresh()

    def _ask_user_changed(self) -> None:
        self._notify("ask_user")
        self._update_waiting()

    def _on_state_error(self, payload: dict[str, Any]) -> None:
        self.errors.append(payload)
        self._page_events.state_error(payload)
        self._bump()
        self._notify("activity")

    def _on_page_error(self, payload: dict[str, Any]) -> None:
        self._page_events.page_error(payload)
        self._bump()
        self._notify("activity")
        if payload.get("message"):  # the page author's one line ("page Python failed: ..."), until dismissed
            self._set("notice", {"code": "page_python", "message": str(payload["message"])})

    # --- derived state -------------------------------------------------------------------------
    def _build_messages(self) -> list[dict[str, Any]]:
        """Committed user/assistant/error messages as shown: stopped marks, offers placed, local errors merged."""
        raw = self.client.messages
        shown = visible_messages(raw)
        for m in shown:
            if m.get("id") in self.stopped:
                m["stopped"] = True
                # Its calls that the stop ended show "Stopped", not "Failed".
                m["function_calls"] = [{**c, "stopped": True} if isinstance(c, dict) and cancelled(c) else c
                                       for c in m.get("function_calls") or []]
        shown = self.offers.place(raw, shown)
        return self._local_errors.merge(shown)

    def _history(self) -> dict[Any, dict[str, Any]]:
        return {r["id"]: r for r in self.client.get_function_call_history()}

    def _update_waiting(self, payload: Any = None, *, notify: bool = True) -> None:
        waiting = None
        if self.pending_ask_user:
            waiting = WAIT_ASK_USER
        elif self.pending_confirmations:
            waiting = WAIT_CONFIRMATION
        elif self.is_streaming and any(
            isinstance(c, dict) and c.get("status") == CallProgress.RUNNING
            for c in (self.streaming_message or {}).get("function_calls") or []
        ):
            waiting = WAIT_FUNCTION
        if waiting != self.waiting_for:
            self.waiting_for = waiting
            if notify:
                self._notify("waiting")

    # --- what the reader does (widget.store.ops) ----------------------------------------------------
    async def send(self, text: str) -> bool:
        """Send a user message; on failure a local error message with Retry appears. True when sent."""
        return await self._ops.send(text)

    async def stop(self) -> bool:
        """Stop the streaming answer (relay ``cancel``); True when a turn was cancelled."""
        return await self._ops.stop()

    async def retry(self, error_id: Any = None) -> bool:
        """Retry after an error: a local send error sends its text again; a failed turn goes on (relay ``retry``,
        which withdraws the failed round and runs it again)."""
        return await self._ops.retry(error_id)

    async def regenerate(self) -> bool:
        """Replace the last answer with a new one (relay ``regenerate``)."""
        return await self._ops.regenerate()

    async def new_chat(self) -> bool:
        """Start a fresh conversation ("New chat")."""
        return await self._ops.new_chat()

    async def use_here(self) -> bool:
        """Make this tab the active client ("Use here")."""
        return await self._ops.use_here()

    def dismiss_notice(self) -> None:
        """Hide the notice."""
        self._set("notice", None)

    def dismiss_error(self, error_id: Any) -> None:
        """Remove a local error message."""
        self._ops.dismiss_error(error_id)

    def dismiss_errors(self) -> None:
        """Forget shown errors (compatibility)."""
        self.errors = []
        self._set("notice", None)

    # --- starters and suggestions (widget.store.starters) -------------------------------------------
    @property
    def starters(self) -> list[str]:
        """The starter prompts to show: the client's (the page's or the app's) while nothing was said yet."""
        return self._prompts.starters

    @property
    def suggestions(self) -> tuple[str | None, list[str]]:
        """``(answer id, texts)``: the model's follow-up suggestions on the last answer, while it is the last thing
        shown and nothing streams; ``(None, [])`` otherwise."""
        return self._prompts.suggestions

    async def send_prompt(self, text: str) -> bool:
        """Send a starter or a suggestion as the reader's message (exactly as typed); see ``Prompts.send_prompt``."""
        return await self._prompts.send_prompt(text)

    # --- confirmations -------------------------------------------------------------------------
    @property
    def pending_confirmations(self) -> list[dict[str, Any]]:
        """``[{"id": int, "request": {id, name, arguments, timestamp}}]`` waiting for Allow / Deny."""
        return self._confirmations.pending

    def confirmation_handler(self, request: dict[str, Any]) -> asyncio.Future[str]:
        """A confirmation handler that waits for the UI to call ``resolve_confirmation``.

        When the client gives up waiting (the relay ended the call), the prompt disappears by itself.
        """
        return self._confirmations.handler(request)

    def resolve_confirmation(self, cid: int, decision: str) -> None:
        """The reader's answer: 'allow' or anything else (deny). Single use."""
        self._confirmations.resolve(cid, decision)

    def _confirmations_changed(self) -> None:
        self._notify("confirmations")
        self._update_waiting()

    def _on_confirmation_resolved(self, payload: dict[str, Any]) -> None:
        if payload.get("reason") == ConfirmationReason.EXPIRED and not self._ops.stopping:
            name = (payload.get("request") or {}).get("name", "")
            self._set(
                "notice",
                {"code": "confirmation_expired", "message": f"The request to run {name} expired before you answered."},
            )

    # --- ask user (widget.store.ask) -----------------------------------------------------------
    @property
    def pending_ask_user(self) -> list[dict[str, Any]]:
        """The prompts the model waits on."""
        return self._ask_user.pending

    @property
    def ask_user_error(self) -> str | None:
        """Why the last ask-user submission failed (None when it did not)."""
        return self._ask_user.error

    @property
    def ask_user_sending(self) -> bool:
        """Whether the reader's answers are being sent."""
        return self._ask_user.sending

    async def submit_ask_user(self, answers: list[dict[str, Any]]) -> bool:
        """Post the answers to every pending prompt; on failure ``ask_user_error`` says why. True when accepted."""
        return await self._ask_user.submit(answers)

    # --- offered actions ----------------------------------------------------------------------------
    @property
    def actions(self) -> dict[str, list[dict[str, Any]]]:
        """Live offers by the id of the shown message they go under (see ``actions_for``)."""
        return self.offers.by_message

    def actions_for(self, message_id: Any) -> list[dict[str, Any]]:
        """The offers shown under message ``message_id`` (``[]`` for most messages, and after a reload)."""
        return self.offers.by_message.get(message_id, [])

    async def press_action(self, message_id: Any, action_id: Any) -> bool:
        """The reader pressed an offer's button: a button action runs; a form action opens its form.

        True when the action ran and succeeded (or the form opened). A failure is shown as the offer's
        ``error`` and the offer stays pressable (a retry).
        """
        return await self.offers.press(message_id, action_id)

    def open_action_form(self, message_id: Any, action_id: Any) -> bool:
        """Open the form of a form action (prefilled with the reader's last values, else the model's)."""
        return self.offers.open_form(message_id, action_id)

    def cancel_action_form(self, message_id: Any, action_id: Any) -> None:
        """Close an action's form without sending; its field errors go, the offer stays."""
        self.offers.cancel_form(message_id, action_id)

    def clear_action_field_error(self, message_id: Any, action_id: Any, name: str) -> None:
        """Forget the error of one form field (the reader changed it)."""
        self.offers.clear_field_error(message_id, action_id, name)

    async def submit_action_form(self, message_id: Any, action_id: Any, values: dict[str, Any]) -> bool:
        """Send a form action with the reader's ``values`` (strings from form fields or typed values).

        Every field is checked against the action's schema first (``form_arguments``): a problem becomes that
        field's entry in ``field_errors`` and nothing is sent. True when the action ran and succeeded.
        """
        return await self.offers.submit_form(message_id, action_id, values)

    # --- teardown --------------------------------------------------------------------------------
    def close(self) -> None:
        """Unsubscribe from the client; pending confirmations are denied (fail closed)."""
        if self._closed:
            return
        self._closed = True
        for off in [*self._unsubscribe, *self.ratings.unsubscribe]:
            off()
        self._unsubscribe = []
        self._confirmations.deny_all()
        self._subscribers.clear()

"""The headless store between the client and any UI (the role a Pinia store plays in a Vue app): no DOM here.

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
``actions``         offered actions changed: offered, pressed, running, done, failed, form state
``history``         past conversations (``store.history``: entries, loading, error, the deletion being confirmed)
``starters``        the starter prompts changed (``store.starters``: the page's ``set_starters`` or the app's)
==================  ====================================================================================

Streaming is cheap on purpose: a chunk only says ``streaming``; committed messages are recomputed (tool results
paired, call-only rounds merged) only when the committed list changes, never per chunk. Change detection is a
revision counter (``store.revision``): every event that changes what the store shows bumps it, and each derived
list (messages, activity, offers) is rebuilt on the first read after the revision it was built at.

Actions (``send``, ``stop``, ``retry``, ``regenerate``, ``new_chat``, ``use_here``, ``resolve_confirmation``,
``submit_ask_user``, ``press_action``, ``submit_action_form``) are thin wrappers over client methods that never
raise: a failure becomes a local error message (a failed send keeps its text for Retry), a ``notice``,
``ask_user_error``, or the error of an offered action (a failed action is offered again, for a retry).

Starters and suggestions (``widget.store.starters``): ``store.starters`` lists the starter prompts while the
conversation is empty, ``store.suggestions`` is ``(answer id, texts)`` of the model's follow-up questions under the
last answer; ``send_prompt(text)`` sends one as the reader's message.

An answer's cited sources (``widget.store.sources``): an assistant message in ``store.messages`` keeps the
``sources`` the relay sent with it (live and restored alike); ``source_rows``, ``citation_numbers`` and the copy
helpers say what a view shows for them, as pure functions. An answer the relay withdraws (``messages.withdrawn``,
for a retry, a regenerate, or because it cited nothing: reason ``uncited``) leaves ``store.messages`` with the same
``messages`` change; its replacement streams in as any answer does.

Offered actions are live only: ``store.actions_for(message_id)`` lists the offers shown under a
message, each ``{id, name, label, title, confirm, parameters, arguments, message_id, status, outcome, error,
field_errors, form_open, values}`` — ``status`` is ``offered``, ``running``, ``done`` or ``failed``. They come
from the client (offers received in this page session) and from the conversation's ``action`` messages (an
outcome recorded by another tab). A restored conversation has none.
"""

from __future__ import annotations

from .actions import ACTION_DONE, ACTION_FAILED, ACTION_OFFERED, ACTION_RUNNING
from .forms import FORM_FIX, REQUIRED, arguments_text, form_arguments
from .store import WAIT_ASK_USER, WAIT_CONFIRMATION, WAIT_FUNCTION, Store, Subscriber

__all__ = [
    "ACTION_DONE",
    "ACTION_FAILED",
    "ACTION_OFFERED",
    "ACTION_RUNNING",
    "FORM_FIX",
    "REQUIRED",
    "WAIT_ASK_USER",
    "WAIT_CONFIRMATION",
    "WAIT_FUNCTION",
    "Store",
    "Subscriber",
    "arguments_text",
    "form_arguments",
]

"""What each rendered thing of the conversation holds: its elements and what it last showed.

Plain records, shared by the parts that render into one message (``messages`` builds a ``MessageView``;
``actions``, ``answer_tools``, ``comment_form`` and ``sources`` fill their share of it); the logic stays in each
part's own module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .calls import CallView


class ActionView:
    """DOM of one offered action: its button, error, status/outcome line and (form actions) its form."""

    __slots__ = (
        "button",
        "el",
        "error",
        "fields",
        "form",
        "form_error",
        "form_sig",
        "key",
        "send",
        "sig",
        "status",
        "status_label",
        "status_text",
    )
    key: tuple[str, str]
    el: Any
    button: Any
    error: Any
    status: Any
    status_label: Any
    status_text: Any

    def __init__(self) -> None:
        self.form: Any = None
        self.form_error: Any = None
        self.fields: dict[str, tuple[Any, Any, Any]] = {}
        self.send: Any = None
        self.sig: Any = None
        self.form_sig: Any = None


class MessageView:
    """DOM of one message, with what it last rendered."""

    __slots__ = (
        "action_views",
        "actions",
        "body",
        "busy",
        "call_views",
        "cites",
        "calls",
        "el",
        "empty",
        "footer",
        "footer_sig",
        "key",
        "pending",
        "renderer",
        "role",
        "source_ids",
        "sources",
        "sources_sig",
        "stable",
        "stopped",
        "tail",
        "text",
    )
    el: Any
    body: Any
    calls: Any
    footer: Any

    def __init__(self, key: str, role: str) -> None:
        self.key = key
        self.role = role
        self.call_views: dict[str, CallView] = {}
        self.action_views: dict[str, ActionView] = {}
        self.actions: Any = None
        self.footer_sig: Any = None
        self.text: str | None = None
        self.renderer: Any = None
        self.busy = False
        self.stopped = False
        self.tail: Any = None
        self.stable: Any = None
        self.empty: str | None = None  # the body's data-empty value last written
        #: The citation numbers (id -> n) the body was last rendered with (None: not yet, or streaming).
        self.cites: dict[str, int] | None = None
        #: The list of sources under the answer (``widget.ui.sources``), the rows it shows, and marker n -> (row
        #: element id, title).
        self.sources: Any = None
        self.sources_sig: Any = ()
        self.source_ids: dict[int, tuple[str, str]] = {}
        #: A streaming render prepared outside the frame: (text, sanitized new stable nodes, sanitized tail nodes);
        #: the renderer has already been fed ``text``, the DOM catches up when the frame applies it.
        self.pending: tuple[str, Any, Any] | None = None


#: The message views on screen by key (``Messages`` keeps them; the parts that render into them read them).
Views = dict[str, MessageView]


@dataclass(eq=False)
class CommentForm:
    """DOM and state of one open comment form."""

    el: Any
    box: Any
    count: Any
    error: Any
    send: Any
    #: The rating sent with the comment when the answer has none stored (its thumb's own request failed).
    rating: str
    sending: bool = False


@dataclass(eq=False)
class AnswerRow:
    """The tools of one answer: the button row, and under it the comment form and a status line."""

    message_id: str | None
    el: Any
    #: Under the row: the comment form (while open) and the status line (thanks, or why a rating failed).
    area: Any
    status: Any
    built: Any = None  # (message id, text, hidden) the buttons were built for
    shown: Any = None  # the state last shown on them
    up: Any = None
    down: Any = None
    comment: Any = None
    form: CommentForm | None = None
    #: The comment was just sent from here: the status line thanks the reader.
    thanked: bool = False

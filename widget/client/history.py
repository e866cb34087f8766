"""Past conversations: list this browser's own, reopen one, delete one.

Every conversation the client loads for an app (created, resumed, reopened) is added to the app's list in the
client's storage (``widget.core.history``: at most ``MAX_SUMMARY_IDS``, the oldest dropped), so "New chat" keeps
the previous one in it — unless that one never got a message: an empty chat left behind is not a past
conversation. ``conversations()`` asks the relay for the titles and times of the listed ids (docs/protocol.md
§2.8) and forgets the ids it no longer knows; ``open_conversation`` switches the client to one of them (it is
read, joined and rendered like a reload's); ``delete_conversation`` deletes one on the relay (the current one: a
fresh conversation takes its place). Each change of the list is the page's ``conversationsChanged`` event.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict

from .. import protocol as P
from ..core.history import ConversationList, conversation_id_of, is_conversation_id
from ..core.streaming import StreamingSession
from ..errors import ConfigError, ProtocolError
from .connection import Link, storage_key
from .wire import Wire, http_error


class PastConversation(TypedDict):
    """One entry of ``client.conversations()``: the relay's summary and whether it is the one shown now."""

    id: str
    #: The reader's first message, trimmed (None: no message yet).
    title: str | None
    created_at: float
    updated_at: float
    current: bool


class ConversationBook:
    """The app's list of this browser's conversations (one ``ConversationList`` per app: it keeps the list in
    memory once storage refused a write); told by the connection of each load, by "New chat" of leaving."""

    def __init__(self, storage: MutableMapping[str, str], link: Link, stream: StreamingSession,
                 emit: Callable[[str, Any], None]) -> None:
        self._storage = storage
        self._link = link
        self._stream = stream
        self._emit = emit
        self._lists: dict[str, ConversationList] = {}

    @property
    def current_id(self) -> str | None:
        """The id of the conversation shown now (None before the first load)."""
        cid = (self._link.conversation or {}).get("id")
        return cid if isinstance(cid, str) else None

    def held(self) -> ConversationList | None:
        """The app's list (None: no app, the client was given a conversation URL only)."""
        app_id = self._link.app_id
        if not app_id:
            return None
        if app_id not in self._lists:
            self._lists[app_id] = ConversationList(self._storage, app_id)
        return self._lists[app_id]

    def ids(self) -> list[str]:
        """See ``AutopilotClient.conversation_ids``."""
        held = self.held()
        return held.ids() if held is not None else []

    def list_changed(self) -> None:
        """Tell the page (``conversationsChanged``)."""
        self._emit(str(P.ClientEvent.CONVERSATIONS_CHANGED), {"ids": self.ids()})

    def remember(self, info: dict[str, Any]) -> None:
        """A conversation was loaded: it goes first in the app's list."""
        held = self.held()
        conv = info.get("conversation")
        cid = conv.get("id") if isinstance(conv, dict) else None
        if held is not None and isinstance(cid, str) and held.add(cid):
            self.list_changed()

    def forget(self, conversation_id: str | None) -> None:
        """Drop ``conversation_id`` from the app's list."""
        held = self.held()
        if held is not None and conversation_id and held.remove(conversation_id):
            self.list_changed()

    def leaving_current(self) -> None:
        """Before "New chat": a conversation without a message is dropped from the list (nothing to come back to)."""
        if not self._stream.messages and not self._stream.is_streaming:
            self.forget(self.current_id)

    def forget_url(self, url: str) -> None:
        """The stored conversation no longer exists (deleted, removed by retention): it leaves the list too."""
        self.forget(conversation_id_of(url))


class Switcher(Protocol):
    """What switching conversations needs of the connection (``widget.client.connection.Connection``)."""

    async def quiet_disconnect(self) -> None:
        """Leave the current conversation's socket."""
        ...

    async def connect_app(self, relay_url: str, app_id: str) -> dict[str, Any]:
        """Connect to the app's stored conversation (or a new one) with the first connect's options."""
        ...


@dataclass(frozen=True)
class HistoryContext:
    """What the past conversations use."""

    book: ConversationBook
    link: Link
    wire: Wire
    storage: MutableMapping[str, str]
    connection: Switcher
    #: Forget the current conversation's state in the session before connecting to another.
    new_conversation: Callable[[], None]


class History:
    """``conversations``, ``open_conversation`` and ``delete_conversation`` of ``AutopilotClient``."""

    def __init__(self, ctx: HistoryContext) -> None:
        self._ctx = ctx

    def _needs_app(self, what: str) -> tuple[str, str]:
        relay_url, app_id = self._ctx.link.relay_url, self._ctx.link.app_id
        if not relay_url or not app_id:
            raise ConfigError(f"{what} needs a client connected with relay_url and app_id.")
        return relay_url, app_id

    def _url_of(self, conversation_id: str) -> str:
        relay_url, _ = self._needs_app("A past conversation")
        return relay_url + P.HTTP_CONVERSATION.format(conversation_id=conversation_id)

    def _held_id(self, conversation_id: Any) -> str:
        """``conversation_id`` when it is one of this browser's conversations (the current one included)."""
        if not is_conversation_id(conversation_id):
            raise ConfigError(f"{conversation_id!r} is not a conversation id.")
        if conversation_id != self._ctx.book.current_id and conversation_id not in self._ctx.book.ids():
            raise ConfigError(f"{conversation_id!r} is not one of this browser's conversations.")
        return str(conversation_id)

    async def conversations(self) -> list[PastConversation]:
        """This browser's conversations with the app that still exist, most recently active first: ``{id, title,
        created_at, updated_at, current}`` (title None: no message yet). Ids the relay no longer knows are forgotten."""
        relay_url, app_id = self._needs_app("conversations()")
        held = self._ctx.book.held()
        ids = held.ids() if held is not None else []
        if not ids:
            return []
        url = relay_url + P.HTTP_CONVERSATION_SUMMARIES.format(app_id=app_id)
        status, body = await self._ctx.wire.http("POST", url, {"ids": ids})
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("conversations"), list):
            raise http_error(status, body, "Listing past conversations failed")
        current = self._ctx.book.current_id
        out: list[PastConversation] = []
        for s in body["conversations"]:
            if not isinstance(s, dict) or s.get("id") not in ids:
                continue  # the relay answers for the ids it was given, and only those
            title = s.get("title")
            out.append({
                "id": s["id"],
                "title": title if isinstance(title, str) else None,
                "created_at": float(s.get("created_at") or 0.0),
                "updated_at": float(s.get("updated_at") or 0.0),
                "current": s["id"] == current,
            })
        if held is not None and held.keep_only({e["id"] for e in out} | ({current} if current else set()), ids):
            self._ctx.book.list_changed()
        return out

    async def open_conversation(self, conversation_id: str) -> dict[str, Any]:
        """Switch to one of this browser's conversations: read it, join it, show its messages; returns it.

        ``not_found`` (and the id is forgotten) when the relay no longer has it; the current conversation stays.
        ``ConfigError`` for an id this browser does not hold (the list is of the reader's own conversations).
        """
        cid = self._held_id(conversation_id)
        relay_url, app_id = self._needs_app("open_conversation()")
        if cid == self._ctx.book.current_id and self._ctx.link.conversation is not None:
            return self._ctx.link.conversation
        url = self._url_of(cid)
        status, body = await self._ctx.wire.http("GET", url)
        if status == 404:
            self._ctx.book.forget(cid)
            raise ProtocolError(P.ErrorCode.NOT_FOUND, "That conversation no longer exists.")
        if status != 200 or not isinstance(body, dict):
            raise http_error(status, body, "Reading the conversation failed")
        if isinstance(body.get("conversation"), dict) and body["conversation"].get("app_id") not in (None, app_id):
            raise ConfigError(f"{cid!r} is a conversation of another app.")
        await self._ctx.connection.quiet_disconnect()
        self._ctx.storage[storage_key(app_id)] = url
        self._ctx.new_conversation()
        return await self._ctx.connection.connect_app(relay_url, app_id)

    async def delete_conversation(self, conversation_id: str) -> bool:
        """Delete one of this browser's conversations on the relay and forget it; True when it existed.

        Deleting the current one starts a fresh conversation in its place ("New chat")."""
        cid = self._held_id(conversation_id)
        relay_url, app_id = self._needs_app("delete_conversation()")
        current = cid == self._ctx.book.current_id
        if current:
            # Leave first: the relay disconnects the conversation's sockets, and this client must not rejoin it.
            await self._ctx.connection.quiet_disconnect()
        try:
            status, body = await self._ctx.wire.http("DELETE", self._url_of(cid))
            if status not in (204, 404):
                raise http_error(status, body, "Deleting the conversation failed")
        except Exception:
            if current:  # it is still there: back to it (a failure shows as the connection's error)
                with contextlib.suppress(Exception):
                    self._ctx.new_conversation()
                    await self._ctx.connection.connect_app(relay_url, app_id)
            raise
        self._ctx.book.forget(cid)
        if current:
            self._ctx.storage.pop(storage_key(app_id), None)
            self._ctx.new_conversation()
            await self._ctx.connection.connect_app(relay_url, app_id)
        return status == 204

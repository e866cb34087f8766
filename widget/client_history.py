"""Past conversations through ``AutopilotClient``: list this browser's own, reopen one, delete one.

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
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any, TypedDict, cast

from . import protocol as P
from .client_connection import _http_error, storage_key
from .core.events import Emitter
from .core.history import ConversationList, conversation_id_of, is_conversation_id
from .errors import ConfigError, ProtocolError

if TYPE_CHECKING:
    from .core.session import ClientSession


class PastConversation(TypedDict):
    """One entry of ``client.conversations()``: the relay's summary and whether it is the one shown now."""

    id: str
    #: The reader's first message, trimmed (None: no message yet).
    title: str | None
    created_at: float
    updated_at: float
    current: bool


class HistoryMixin:
    """``conversations``, ``open_conversation`` and ``delete_conversation`` of ``AutopilotClient``."""

    storage: MutableMapping[str, str]
    conversation: dict[str, Any] | None
    conversation_url: str | None
    core: ClientSession
    events: Emitter
    _relay_url: str | None
    _app_id: str | None
    _connect_options: dict[str, Any]

    if TYPE_CHECKING:  # provided by the client and its connection mixin

        async def _http(self, method: str, url: str, body: Any = None) -> tuple[int, Any]: ...

        async def _quiet_disconnect(self) -> None: ...

        @property
        def messages(self) -> list[dict[str, Any]]: ...

    # ------------------------------------------------------------------ the list
    @property
    def conversation_id(self) -> str | None:
        """The id of the conversation shown now (None before the first load)."""
        cid = (self.conversation or {}).get("id")
        return cid if isinstance(cid, str) else None

    def _conversation_list(self) -> ConversationList | None:
        """The app's list (one object per app: it keeps the list in memory once storage refused a write)."""
        if not self._app_id:
            return None
        lists: dict[str, ConversationList] = self.__dict__.setdefault("_conversation_lists", {})
        if self._app_id not in lists:
            lists[self._app_id] = ConversationList(self.storage, self._app_id)
        return lists[self._app_id]

    def conversation_ids(self) -> list[str]:
        """The ids of this browser's conversations with the app, most recently added first."""
        held = self._conversation_list()
        return held.ids() if held is not None else []

    def _list_changed(self) -> None:
        self.events.emit(str(P.ClientEvent.CONVERSATIONS_CHANGED), {"ids": self.conversation_ids()})

    def _remember_conversation(self, info: dict[str, Any]) -> None:
        """A conversation was loaded: it goes first in the app's list."""
        held = self._conversation_list()
        conv = info.get("conversation")
        cid = conv.get("id") if isinstance(conv, dict) else None
        if held is not None and isinstance(cid, str) and held.add(cid):
            self._list_changed()

    def _forget_conversation(self, conversation_id: str | None) -> None:
        held = self._conversation_list()
        if held is not None and conversation_id and held.remove(conversation_id):
            self._list_changed()

    def _leaving_current(self) -> None:
        """Before "New chat": a conversation without a message is dropped from the list (nothing to come back to)."""
        if not self.messages and not self.core.stream.is_streaming:
            self._forget_conversation(self.conversation_id)

    def _forget_stored_url(self, url: str) -> None:
        """The stored conversation no longer exists (deleted, removed by retention): it leaves the list too."""
        self._forget_conversation(conversation_id_of(url))

    def _needs_app(self, what: str) -> tuple[str, str]:
        if not self._relay_url or not self._app_id:
            raise ConfigError(f"{what} needs a client connected with relay_url and app_id.")
        return self._relay_url, self._app_id

    def _url_of(self, conversation_id: str) -> str:
        relay_url, _ = self._needs_app("A past conversation")
        return relay_url + P.HTTP_CONVERSATION.format(conversation_id=conversation_id)

    def _held_id(self, conversation_id: Any) -> str:
        """``conversation_id`` when it is one of this browser's conversations (the current one included)."""
        if not is_conversation_id(conversation_id):
            raise ConfigError(f"{conversation_id!r} is not a conversation id.")
        if conversation_id != self.conversation_id and conversation_id not in self.conversation_ids():
            raise ConfigError(f"{conversation_id!r} is not one of this browser's conversations.")
        return str(conversation_id)

    # ------------------------------------------------------------------ the page API
    async def conversations(self) -> list[PastConversation]:
        """This browser's conversations with the app that still exist, most recently active first: ``{id, title,
        created_at, updated_at, current}`` (title None: no message yet). Ids the relay no longer knows are forgotten."""
        relay_url, app_id = self._needs_app("conversations()")
        held = self._conversation_list()
        ids = held.ids() if held is not None else []
        if not ids:
            return []
        url = relay_url + P.HTTP_CONVERSATION_SUMMARIES.format(app_id=app_id)
        status, body = await self._http("POST", url, {"ids": ids})
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("conversations"), list):
            raise _http_error(status, body, "Listing past conversations failed")
        current = self.conversation_id
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
            self._list_changed()
        return out

    async def _reconnect(self, relay_url: str, app_id: str) -> dict[str, Any]:
        """Connect to the app's stored conversation (or a new one) with the options of the first connect."""
        connect = cast(Any, self).connect  # the connection mixin's
        conv: dict[str, Any] = await connect(relay_url=relay_url, app_id=app_id, **self._connect_options)
        return conv

    async def open_conversation(self, conversation_id: str) -> dict[str, Any]:
        """Switch to one of this browser's conversations: read it, join it, show its messages; returns it.

        ``not_found`` (and the id is forgotten) when the relay no longer has it; the current conversation stays.
        ``ConfigError`` for an id this browser does not hold (the list is of the reader's own conversations).
        """
        cid = self._held_id(conversation_id)
        relay_url, app_id = self._needs_app("open_conversation()")
        if cid == self.conversation_id and self.conversation is not None:
            return self.conversation
        url = self._url_of(cid)
        status, body = await self._http("GET", url)
        if status == 404:
            self._forget_conversation(cid)
            raise ProtocolError(P.ERR_NOT_FOUND, "That conversation no longer exists.")
        if status != 200 or not isinstance(body, dict):
            raise _http_error(status, body, "Reading the conversation failed")
        if isinstance(body.get("conversation"), dict) and body["conversation"].get("app_id") not in (None, app_id):
            raise ConfigError(f"{cid!r} is a conversation of another app.")
        await self._quiet_disconnect()
        self.storage[storage_key(app_id)] = url
        self.core.new_conversation()
        return await self._reconnect(relay_url, app_id)

    async def delete_conversation(self, conversation_id: str) -> bool:
        """Delete one of this browser's conversations on the relay and forget it; True when it existed.

        Deleting the current one starts a fresh conversation in its place ("New chat")."""
        cid = self._held_id(conversation_id)
        relay_url, app_id = self._needs_app("delete_conversation()")
        current = cid == self.conversation_id
        if current:
            # Leave first: the relay disconnects the conversation's sockets, and this client must not rejoin it.
            await self._quiet_disconnect()
        try:
            status, body = await self._http("DELETE", self._url_of(cid))
            if status not in (204, 404):
                raise _http_error(status, body, "Deleting the conversation failed")
        except Exception:
            if current:  # it is still there: back to it (a failure shows as the connection's error)
                with contextlib.suppress(Exception):
                    self.core.new_conversation()
                    await self._reconnect(relay_url, app_id)
            raise
        self._forget_conversation(cid)
        if current:
            self.storage.pop(storage_key(app_id), None)
            self.core.new_conversation()
            await self._reconnect(relay_url, app_id)
        return status == 204

"""MCP servers' tools on the relay: connections, the model's catalogue, and the call path.

Each relay process holds one connection per configured server (``McpLink``), made on the first turn that
needs it (start, handshake and tool list within ``startup_timeout_s``) and made again after the server dies.
A server that cannot start is retried after ``retry_after_s``; meanwhile each round's request tells the model
the server is unavailable and why, so a turn never waits on it.

A call (``McpTool.run``) shows in the bar like a page call - ``function_call.begin`` (never run by the page)
and ``function_call.end`` with its timings - runs within the server's ``timeout_s``, and its result reaches
the model as data cut to ``TOOL_REPLY_MAX_CHARS``. A sensitive tool is first sent to the active page as a
call the page's client answers with the reader's decision in the bar (a denial gives the model the same
message as a denied page function). The turn log records ``{tool, ok, ms}``; failures are logged with the
server and the kind of failure, never the arguments nor the text of the server's error (it may echo them).

What a server prints to stderr, and the exception text of a failed start or connection, go only to the relay's
log, with the configured secret values (``env``, ``headers``) masked: the page and the model get a fixed message
naming the server (a crashed server that printed its token must not put it in the conversation). Every message
is read with the server's ``max_result_bytes`` limit (``widget.relay.mcp.bounded``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ... import protocol as P
from ...core.mcp_names import mcp_tool_name
from ...errors import ConfigError
from ...protocol import ConversationStatus
from ..config import AppConfig, RelayConfig
from ..tools import flat_parameters, strict_schema
from .bounded import TOO_LARGE_CODE, bounded_stdio_client, capped_http_client, too_large_message
from .config import McpServerConfig

if TYPE_CHECKING:
    from ..models.base import ModelAdapter, ModelRequest
    from ..storage.store import Store

log = logging.getLogger("widget.relay")


class EmitEvent(Protocol):
    """Store a sequenced event of a conversation, then emit it (the hub's ``emit_event``); its seq."""

    def __call__(self, cid: str, name: str, payload: dict[str, Any], **store_kw: Any) -> Awaitable[int]: ...


@dataclass(frozen=True)
class ToolHost:
    """What a call of an MCP tool uses of the relay's hub (its call dispatch makes one; this package does not
    import the hub)."""

    store: Store
    emit_event: EmitEvent
    #: get ready for the page's answer to a call (before its ``function_call.begin`` is emitted)
    expect_call: Callable[[str, str], None]
    #: wait for the page's answer to a call, without emitting its ``function_call.end``: ``(end, ms)``
    await_call: Callable[[str, dict[str, Any]], Awaitable[tuple[dict[str, Any], float]]]
    #: whether the relay is shutting down
    closing: Callable[[], bool]


class RoundTools(Protocol):
    """What ``McpTools.extend`` uses of a round (``widget.relay.hub.prompts.RoundInfo``)."""

    app_id: str
    catalogue: dict[str, dict[str, Any]]

#: A server's stderr kept for the reason of a failed start (bytes, the tail).
STDERR_TAIL = 400
#: The stderr file is emptied when it grows past this (bytes).
STDERR_MAX = 1_000_000


class McpUnavailable(Exception):
    """A server cannot be used now; the message says why (it goes to the model and the log)."""


def _cut(text: str) -> str:
    limit = P.TOOL_REPLY_MAX_CHARS
    return text if len(text) <= limit else text[:limit] + " [cut]"


def result_of(res: Any) -> tuple[bool, Any]:
    """``(ok, value)`` of a ``CallToolResult``: the structured content when there is some, else the text
    parts joined (other parts named, e.g. ``[image]``); cut to ``TOOL_REPLY_MAX_CHARS``."""
    parts = []
    for c in getattr(res, "content", None) or []:
        kind = getattr(c, "type", "")
        parts.append(getattr(c, "text", "") if kind == "text" else f"[{kind or 'content'}]")
    text = "\n".join(parts)
    if getattr(res, "is_error", False):
        return False, _cut(text or "The tool failed.")
    structured = getattr(res, "structured_content", None)
    if structured is not None:
        if isinstance(structured, dict) and set(structured) == {"result"}:
            structured = structured["result"]  # a plain return value, wrapped by the server
        if isinstance(structured, str):
            return True, _cut(structured)
        dumped = json.dumps(structured, ensure_ascii=False)
        return True, structured if len(dumped) <= P.TOOL_REPLY_MAX_CHARS else _cut(dumped)
    return True, _cut(text)


class McpLink:
    """One server of one app, as this relay process reaches it."""

    def __init__(self, app_id: str, name: str, cfg: McpServerConfig) -> None:
        self.app_id, self.name, self.cfg = app_id, name, cfg
        self.session: Any = None
        self.tools: list[Any] = []
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._starting: asyncio.Future[list[Any]] | None = None
        self._error: str | None = None
        self._failed_at = 0.0
        self._stderr: Any = None
        #: when an HTTP response was cut at ``max_result_bytes`` (monotonic; 0: never)
        self._cut_at = 0.0

    def ready(self) -> bool:
        """Whether ``ensure`` answers at once (the server runs, or failed recently and is not tried again yet)."""
        running = self.session is not None and self._task is not None and not self._task.done()
        waiting = self._error is not None and time.monotonic() - self._failed_at < self.cfg.retry_after_s
        return (running and not self._stop.is_set()) or waiting

    async def ensure(self) -> list[Any]:
        """The server's tools, starting it first when it is not running (McpUnavailable with the reason)."""
        if self.session is not None and self._task is not None and not self._task.done() and not self._stop.is_set():
            return self.tools  # (a connection a failed call gave up on is stopping: the next use starts it again)
        if self._error is not None and time.monotonic() - self._failed_at < self.cfg.retry_after_s:
            raise McpUnavailable(self._error)
        if self._starting is None or self._starting.done():
            self._starting = asyncio.ensure_future(self._start())
        return await asyncio.shield(self._starting)

    async def _start(self) -> list[Any]:
        await self._teardown()
        self._stop = asyncio.Event()
        ready: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._task = asyncio.ensure_future(self._hold(ready))
        limit = self.cfg.startup_timeout_s
        try:
            tools = await asyncio.wait_for(asyncio.shield(ready), limit)
        except TimeoutError:
            reason = f"it did not start within {limit:g} s"
            detail = self._describe(None)
        except Exception as exc:  # noqa: BLE001 - whatever the transport raised becomes the reason
            reason = "it failed to start"
            detail = self._describe(exc)
        else:
            self._error = None
            log.info("MCP server %r of app %r started: %d tools", self.name, self.app_id, len(tools))
            offered = {getattr(t, "name", None) for t in tools}
            missing = [t for t in self.cfg.tools if t != "*" and t not in offered]
            if missing:  # a typo in the allowlist, or a server of another version: the operator is told at once
                log.warning(json.dumps({"event": "mcp_tools_missing", "app": self.app_id, "server": self.name,
                                        "tools": missing, "offered": sorted(n for n in offered if n)[:50]}))
            return tools
        await self._teardown()
        if ready.done() and not ready.cancelled():
            ready.exception()  # the teardown after a timeout fails it with nobody left waiting: mark it seen
        # The page and the model get the fixed reason; the detail (its stderr, masked) is the operator's.
        self._error, self._failed_at = f"The MCP server {self.name!r} is unavailable: {reason}.", time.monotonic()
        log.warning(json.dumps({"event": "mcp_unavailable", "app": self.app_id, "server": self.name, "reason": reason,
                                "detail": detail}, ensure_ascii=False))
        raise McpUnavailable(self._error)

    def _describe(self, exc: BaseException | None) -> str:
        """What went wrong, for the operator's log only: the exception and the server's stderr tail, with the
        configured secret values masked."""
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        text = (" ".join(str(exc).split()) or type(exc).__name__) if exc is not None else ""
        tail = self._stderr_tail()
        if tail:
            text = f"{text}; its stderr ends: {tail}" if text else f"its stderr ends: {tail}"
        return self.mask(text)

    def mask(self, text: str) -> str:
        """``text`` with every configured secret value (``env``, ``headers``, and each long word of one) masked."""
        secrets: set[str] = set()
        for value in (*self.cfg.resolved_env.values(), *self.cfg.resolved_headers.values()):
            secrets.add(value)
            secrets.update(w for w in value.split() if len(w) >= 8)
        for value in sorted((v for v in secrets if len(v) >= 4), key=len, reverse=True):
            text = text.replace(value, "[secret]")
        return text

    def _stderr_tail(self) -> str:
        f = self._stderr
        if f is None:
            return ""
        try:
            f.flush()
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - STDERR_TAIL))
            return " ".join(f.read().split())
        except (OSError, ValueError):
            return ""

    async def _hold(self, ready: asyncio.Future[list[Any]]) -> None:
        """Open the transport and the session, list the tools, then keep them open until stopped."""
        from mcp import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                if self.cfg.transport == "stdio":
                    from mcp.client.stdio import StdioServerParameters, get_default_environment

                    self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
                    params = StdioServerParameters(command=self.cfg.command[0], args=self.cfg.command[1:],
                                                   cwd=self.cfg.cwd,
                                                   env={**get_default_environment(), **self.cfg.resolved_env})
                    read, write = await stack.enter_async_context(
                        bounded_stdio_client(params, self._stderr, self.cfg.max_result_bytes))
                else:
                    from mcp.client.streamable_http import streamable_http_client

                    client = await stack.enter_async_context(capped_http_client(
                        dict(self.cfg.resolved_headers), self.cfg.max_result_bytes, self._note_cut))
                    read, write = await stack.enter_async_context(streamable_http_client(self.cfg.url,
                                                                                         http_client=client))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                tools: list[Any] = []
                cursor = None
                while True:
                    from mcp.types import PaginatedRequestParams

                    page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
                    tools += list(page.tools)
                    cursor = getattr(page, "next_cursor", None)
                    if not cursor or len(tools) > 1000:
                        break
                self.session, self.tools = session, tools
                if not ready.done():
                    ready.set_result(tools)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError("cancelled"))
            if not isinstance(exc, Exception):
                raise
            log.warning("MCP server %r of app %r closed: %s", self.name, self.app_id, self._describe(exc))
        finally:
            self.session = None

    def _note_cut(self) -> None:
        self._cut_at = time.monotonic()

    async def call(self, tool: str, arguments: dict[str, Any]) -> tuple[bool, Any]:
        """Run one tool within ``timeout_s``: ``(ok, result or error text)``."""
        if self._stderr is not None:
            with contextlib.suppress(OSError, ValueError):
                if self._stderr.tell() > STDERR_MAX:
                    self._stderr.seek(0)
                    self._stderr.truncate()
        try:
            await self.ensure()
        except McpUnavailable as exc:
            return False, str(exc)
        session, limit = self.session, self.cfg.timeout_s
        if session is None:
            return False, f"The MCP server {self.name!r} is unavailable: it stopped."
        started = time.monotonic()
        try:
            res = await asyncio.wait_for(session.call_tool(tool, arguments), limit)
        except TimeoutError:
            return False, f"The tool did not answer within {limit:g} s."
        except Exception as exc:  # noqa: BLE001 - the server or its connection failed mid-call
            from mcp.shared.exceptions import MCPError
            from mcp.types import CONNECTION_CLOSED

            if isinstance(exc, MCPError) and exc.code == TOO_LARGE_CODE:  # the relay's own answer (bounded.py)
                return False, too_large_message(self.cfg.max_result_bytes)
            if isinstance(exc, MCPError) and exc.code != CONNECTION_CLOSED:  # the server answered with an error
                return False, _cut(f"The tool failed: {exc.message}")
            self._stop.set()  # the connection is not trusted any more: the next use starts the server again
            if self._cut_at >= started:
                return False, too_large_message(self.cfg.max_result_bytes)
            log.warning(json.dumps({"event": "mcp_server_failed", "app": self.app_id, "server": self.name,
                                    "tool": tool, "detail": self._describe(exc)}, ensure_ascii=False))
            return False, f"The MCP server {self.name!r} failed during the call."
        return result_of(res)

    def failure_kind(self, error: str) -> str:
        """The kind of a failed call's error text (what ``call`` answered), for the log."""
        if error.startswith("The tool did not answer"):
            return "timeout"
        if error.startswith("The tool's result is over"):
            return "result_too_large"
        if error.startswith(f"The MCP server {self.name!r} failed during"):
            return "server_failed"
        if error.startswith(f"The MCP server {self.name!r} is unavailable"):
            return "unavailable"
        return "tool_error"

    async def _teardown(self) -> None:
        self._stop.set()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 5)
        self.session = None
        if self._stderr is not None:
            with contextlib.suppress(OSError):
                self._stderr.close()
            self._stderr = None

    async def aclose(self) -> None:
        """Stop the server (or close the connection)."""
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
        await self._teardown()


@dataclass
class McpTool:
    """A server's tool in the catalogue (the ``relay`` of a catalogue entry)."""

    link: McpLink
    tool: str
    sensitive: bool

    async def run(self, host: ToolHost, cid: str, c: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """Run a checked call of the model (``c``: id, name, arguments, message_id, turn_id): the pill,
        the reader's confirmation when sensitive, the server's answer. Returns ``(end, ms)`` like the
        relay's other tools; ``end["stored"]``: the call is in the store already."""
        t0 = time.monotonic()
        begin = {"id": c["id"], "name": c["name"], "arguments": c["arguments"], "message_id": c["message_id"]}
        end: dict[str, Any] = {"id": c["id"], "name": c["name"]}
        if self.sensitive:
            denied = await self._confirm(host, cid, c, begin)
            end["stored"] = True
        else:
            await host.emit_event(cid, P.Event.FUNCTION_CALL_BEGIN, {**begin, "kind": P.Kind.TOOL})
            denied = None
        t1 = time.monotonic()
        if denied is not None:
            ok, value = False, denied
        else:
            try:
                ok, value = await self.link.call(self.tool, c["arguments"])
            except asyncio.CancelledError:
                # The turn was stopped (Stop). A call the relay had not stored yet is stored pending now, so the turn's
                # end cancels it as it cancels a page call: its pill ends "Cancelled." and the round keeps its tool
                # message, which a reload shows. A confirmed call (stored, answered by the reader's "allow") ends here.
                if not host.closing():
                    with contextlib.suppress(Exception):
                        if end.get("stored"):
                            await host.emit_event(cid, P.Event.FUNCTION_CALL_END, {
                                "id": c["id"], "name": c["name"], "status": P.CallStatus.ERROR, "error": "Cancelled.",
                                "duration_ms": None, "total_ms": None})
                        else:
                            await host.store.add_calls(cid, c["turn_id"], [{
                                "id": c["id"], "name": c["name"], "kind": P.Kind.TOOL, "arguments": c["arguments"]}])
                raise
        duration_ms = round((time.monotonic() - t1) * 1000, 1)
        ms = round((time.monotonic() - t0) * 1000, 1)
        if ok:
            end.update(status=P.CallStatus.SUCCESS, result=value)
        else:
            end.update(status=P.CallStatus.ERROR, error=value)
            if denied is None:  # the kind of failure only: a server's error text may echo the arguments
                log.warning(json.dumps({"event": "mcp_call_failed", "app": self.link.app_id, "server": self.link.name,
                                        "tool": self.tool, "failure": self.link.failure_kind(value)}))
            if value.startswith("The tool did not answer"):
                end["timed_out"] = True
        end.update(duration_ms=None if denied is not None else duration_ms, total_ms=ms)
        await host.emit_event(cid, P.Event.FUNCTION_CALL_END,
                              {k: v for k, v in end.items() if k not in ("stored", "timed_out")})
        return end, ms

    async def _confirm(self, host: ToolHost, cid: str, c: dict[str, Any], begin: dict[str, Any]) -> str | None:
        """Send the call to the active page, whose client asks the reader (``widget.client_calls``); None when
        allowed, else the error the model gets (the page's denial, or its silence within the function limit)."""
        await host.store.add_calls(cid, c["turn_id"], [{"id": c["id"], "name": c["name"], "kind": P.Kind.FUNCTION,
                                                       "arguments": c["arguments"]}])
        host.expect_call(cid, c["id"])
        seq = await host.emit_event(cid, P.Event.FUNCTION_CALL_BEGIN, {**begin, "kind": P.Kind.FUNCTION},
                                   conversation={"status": ConversationStatus.WAITING_FOR_FUNCTION})
        await host.store.set_call_seq(cid, c["id"], seq)
        answer, _ms = await host.await_call(cid, {**c, "kind": P.Kind.FUNCTION})
        await host.store.update_conversation(cid, status=ConversationStatus.RUNNING)
        if answer["status"] == P.CallStatus.SUCCESS and answer.get("result") == "allow":
            return None
        return str(answer.get("error") or P.MSG_SENSITIVE_DENIED)


class McpTools:
    """Every app's MCP servers for one relay process (``Hub.mcp``)."""

    def __init__(self, config: RelayConfig) -> None:
        self.links: dict[tuple[str, str], McpLink] = {}
        for app_id, app in config.apps.items():
            for name, cfg in app.mcp.items():
                self.links[(app_id, name)] = McpLink(app_id, name, cfg)
        if self.links:
            try:
                import mcp  # noqa: F401
            except ImportError:
                raise ConfigError("MCP servers in the config need the official MCP SDK: "
                                  "pip install 'autopilot-widget[mcp]'") from None

    async def extend(self, app: AppConfig, info: RoundTools, request: ModelRequest, model: ModelAdapter | None,
                     with_tools: bool, before_wait: Callable[[], Awaitable[None]] | None = None) -> None:
        """Add the app's allowed MCP tools to a round's catalogue (and, ``with_tools``, to the model's tools);
        tell the model which servers are unavailable and why. A page entry of the same name wins. ``before_wait``
        is awaited first when a server must be started (it can take seconds): the turn shows as running meanwhile."""
        links = [self.links[(info.app_id, n)] for n in app.mcp if (info.app_id, n) in self.links]
        if not links:
            return
        if before_wait is not None and not all(link.ready() for link in links):
            await before_wait()
        listed = await asyncio.gather(*(link.ensure() for link in links), return_exceptions=True)
        keywords = model.schema_keywords if model is not None else frozenset({"enum"})
        formats = model.schema_formats if model is not None else frozenset()
        notes, specs = [], []
        for link, tools in zip(links, listed, strict=True):
            if isinstance(tools, BaseException):
                notes.append(str(tools) if isinstance(tools, McpUnavailable)
                             else f"The MCP server {link.name!r} is unavailable.")
                continue
            for t in tools:
                if not link.cfg.allows(t.name):
                    continue
                name = mcp_tool_name(link.name, t.name)
                if name is None or name in info.catalogue:
                    log.info("MCP tool %r of server %r left out: %s", t.name, link.name,
                             "its name is too long" if name is None else "the page has an entry of that name")
                    continue
                params, problem = flat_parameters(name, t.input_schema)
                if params is None:
                    log.info("MCP tool %r of server %r left out: %s", t.name, link.name, problem)
                    continue
                hints = t.annotations
                marked = bool(hints and hints.destructive_hint and not hints.read_only_hint)
                sensitive = link.cfg.sensitive.get(t.name, marked)
                info.catalogue[name] = {"kind": P.Kind.TOOL, "parameters": params,
                                        "relay": McpTool(link, t.name, sensitive)}
                desc = " ".join(str(t.description or t.title or t.name).split())
                specs.append({"name": name, "description": f"{desc} (a tool of the MCP server {link.name!r})",
                              "parameters": strict_schema(params, keywords, formats), "strict": True})
        if with_tools and specs:
            at = next((i for i, s in enumerate(request.tools) if s["name"] in set(P.RelayTool)),
                      len(request.tools))
            request.tools[at:at] = specs
        if notes:
            note = " ".join(notes) + " Its tools cannot be used in this answer; say so if the reader needs one."
            at = next((i for i, m in enumerate(request.messages) if m.get("role") != "system"), len(request.messages))
            request.messages.insert(at, {"role": "system", "content": note})

    async def aclose(self) -> None:
        """Stop every server."""
        await asyncio.gather(*(link.aclose() for link in self.links.values()), return_exceptions=True)

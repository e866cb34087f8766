"""Reading an MCP server with a byte limit per message.

The SDK's transports read each message whole (a stdio line, an HTTP response) before anything can look at its
size: a server answering 50 MB makes the relay hold 50 MB, and parse it, before the 4,000-character cut. Here a
stdio server's stdout goes through ``LineCap``, which keeps at most ``max_result_bytes`` of a line: a longer line
is skipped to its end, and when its start names a request id the session gets an error response for that id (the
call ends "The tool's result is over N bytes ...", the connection goes on); without an id the connection ends. An
HTTP server's responses to the relay's requests are cut the same way (the request fails; the link notes why).

``bounded_stdio_client`` is the SDK's ``stdio_client`` with that reader: the process start and stop (pipes, the
process tree, the grace periods) are the SDK's own functions.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TextIO

log = logging.getLogger("widget.relay")

#: The JSON-RPC error code of a result the relay did not read (in the implementation-defined server range).
TOO_LARGE_CODE = -32099
#: How much of a skipped line is kept to find its request id.
HEAD_BYTES = 256
_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")')


def too_large_message(limit: int) -> str:
    """What the model and the page are told of a result over the limit."""
    return f"The tool's result is over {limit:,} bytes; the relay did not read it. Ask for less."


@dataclass
class Oversize:
    """A line over the limit: its first bytes (to find the request id) and its length."""

    head: bytes
    length: int


class LineCap:
    """Splits a byte stream into lines of at most ``limit`` bytes (sans I/O); a longer line becomes ``Oversize``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buf = bytearray()
        self._over: Oversize | None = None

    def feed(self, chunk: bytes) -> list[bytes | Oversize]:
        """The lines completed by ``chunk``."""
        out: list[bytes | Oversize] = []
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            end = len(chunk) if nl < 0 else nl
            if self._over is not None:
                self._over.length += end - start
            elif len(self._buf) + end - start > self.limit:
                room = max(0, HEAD_BYTES - len(self._buf))
                head = bytes(self._buf[:HEAD_BYTES]) + chunk[start : min(end, start + room)]
                self._over = Oversize(head, len(self._buf) + end - start)
                self._buf = bytearray()
            else:
                self._buf += chunk[start:end]
            if nl < 0:
                return out
            if self._over is not None:
                out.append(self._over)
                self._over = None
            elif self._buf.strip():
                out.append(bytes(self._buf))
            self._buf = bytearray()
            start = nl + 1


def request_id(head: bytes) -> int | str | None:
    """The JSON-RPC ``id`` named at the start of a message, if any."""
    m = _ID.search(head)
    if m is None:
        return None
    try:
        value = json.loads(m.group(1))
    except ValueError:
        return None
    return value if isinstance(value, (int, str)) else None


def error_response(request: int | str, limit: int) -> str:
    """A JSON-RPC error response for ``request``: its result was over ``limit``."""
    return json.dumps({"jsonrpc": "2.0", "id": request,
                       "error": {"code": TOO_LARGE_CODE, "message": too_large_message(limit)}})


@asynccontextmanager
async def bounded_stdio_client(server: Any, errlog: TextIO, limit: int) -> AsyncGenerator[tuple[Any, Any], None]:
    """The SDK's ``stdio_client`` (``server``: its ``StdioServerParameters``) reading each line within ``limit``."""
    import anyio
    from mcp import types
    from mcp.client import stdio as sdk
    from mcp.shared.message import SessionMessage

    command = await sdk._get_executable_command(server.command)
    process = await sdk._create_platform_compatible_process(
        command=command, args=server.args, env=sdk.get_default_environment() | (server.env or {}), errlog=errlog,
        cwd=server.cwd)
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()

    def parse(line: bytes) -> SessionMessage | Exception:
        try:
            return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
        except ValueError as exc:
            log.warning("an MCP server sent a message that is not JSON-RPC (%s)", type(exc).__name__)
            return exc

    async def stdout_reader() -> None:
        assert process.stdout is not None
        cap = LineCap(limit)
        try:
            async with read_writer:
                try:
                    async for chunk in process.stdout:
                        for item in cap.feed(chunk):
                            if isinstance(item, Oversize):
                                rid = request_id(item.head)
                                log.warning("an MCP server sent a message of %d bytes, over max_result_bytes (%d)%s",
                                            item.length, limit, "" if rid is not None else "; closing the connection")
                                if rid is None:
                                    return
                                msg = parse(error_response(rid, limit).encode())
                            else:
                                msg = parse(item)
                            try:
                                await read_writer.send(msg)
                            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                                return
                finally:
                    await sdk._drain_stdout(process)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
            pass  # the connection is shutting down

    async def stdin_writer() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(sdk._WRITER_FLUSH_TIMEOUT):
            await writer_done.wait()
        await sdk._stop_server_process(process)
        await sdk._aclose_all(read_stream, write_stream, read_writer, write_reader)
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stdout_reader)
        tg.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await shutdown()
            tg.cancel_scope.cancel()


def capped_http_client(headers: dict[str, str], limit: int, on_oversize: Callable[[], None]) -> Any:
    """The SDK's HTTP client for a streamable-HTTP server, whose responses to POSTs are cut at ``limit`` bytes
    (the request fails; ``on_oversize`` is told first). The long-lived GET event stream is not cut."""
    import httpx2
    from mcp.shared._httpx_utils import create_mcp_http_client

    class CappedStream(httpx2.AsyncByteStream):
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def __aiter__(self) -> AsyncIterator[bytes]:
            seen = 0
            async for chunk in self.inner:
                seen += len(chunk)
                if seen > limit:
                    on_oversize()
                    raise httpx2.ReadError(f"a response over max_result_bytes ({limit})")
                yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    class CappedTransport(httpx2.AsyncBaseTransport):
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def handle_async_request(self, request: Any) -> Any:
            response = await self.inner.handle_async_request(request)
            if request.method == "POST":
                response.stream = CappedStream(response.stream)
            return response

        async def aclose(self) -> None:
            await self.inner.aclose()

    client = create_mcp_http_client(headers=headers)
    client._transport = CappedTransport(client._transport)
    return client

"""A small MCP server for the relay's MCP tests, over stdio or streamable HTTP.

    python tests/mcp_test_server.py stdio [--mode ok|crash|leak-crash|slow-start|hang-start]
    python tests/mcp_test_server.py http PORT

Tools: ``add(a, b)``, ``echo(text)`` (a long text comes back whole: the relay cuts it), ``whoami()`` (the
``MCP_TEST_TOKEN`` the server got from its environment), ``wipe(target)`` (destructive: needs the reader's
confirmation), ``sleep_forever()`` (never answers), ``die()`` (the process exits mid-call), ``nested(items)``
(an array parameter), ``hidden()`` (never on an allowlist in the tests), ``leak_and_die()`` (prints its token to
stderr, then exits mid-call), ``fail_echo(text)`` (an error whose message echoes its argument), ``big(n)`` (a
result of ``n`` characters). ``--mode leak-crash`` prints the token to stderr and exits before the handshake.
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("autopilot-test")


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="Return the text unchanged.")
def echo(text: str) -> str:
    return text


@server.tool(description="The token this server was started with.")
def whoami() -> str:
    return os.environ.get("MCP_TEST_TOKEN", "(none)")


@server.tool(description="Delete a target for good.", annotations=ToolAnnotations(destructive_hint=True))
def wipe(target: str) -> str:
    return f"wiped {target}"


@server.tool(description="Never answers.")
async def sleep_forever() -> str:
    await asyncio.sleep(3600)
    return "late"


@server.tool(description="The server process exits during the call.")
def die() -> str:
    os._exit(3)


@server.tool(description="Takes a list.")
def nested(items: list[str]) -> int:
    return len(items)


@server.tool(description="Prints the token to stderr, then the process exits during the call.")
def leak_and_die() -> str:
    print(f"fatal: lost connection, token={os.environ.get('MCP_TEST_TOKEN')}", file=sys.stderr, flush=True)
    os._exit(3)


@server.tool(description="Fails with a message that repeats its argument.")
def fail_echo(text: str) -> str:
    raise ValueError(f"cannot handle {text!r}")


@server.tool(description="A result of n characters.")
def big(n: int) -> str:
    return "y" * n


@server.tool(description="Not allowed by the tests' allowlists.")
def hidden() -> str:
    return "secret"


def main() -> None:
    transport = sys.argv[1]
    if transport == "stdio":
        mode = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--mode" else "ok"
        if mode == "crash":
            print("cannot start: configuration missing", file=sys.stderr)
            sys.exit(2)
        if mode == "leak-crash":
            print(f"cannot start: token {os.environ.get('MCP_TEST_TOKEN')} was refused", file=sys.stderr)
            sys.exit(2)
        if mode == "slow-start":  # the handshake comes 2 s late
            import time

            time.sleep(2)
        if mode == "hang-start":
            import time

            time.sleep(3600)
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))


if __name__ == "__main__":
    main()

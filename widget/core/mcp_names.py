"""Names of MCP server tools in the model's catalogue, shared by the relay (which names them) and the page's
client (which shows the reader's confirmation of a sensitive one).

A server's tool is ``mcp__<server>__<tool>``: the prefix keeps it apart from page functions (a page entry of
the same name wins, and the server's tool is left out), and it stays within the tool-name rule.
"""

from __future__ import annotations

import re

from ..protocol import is_tool_name

#: Every MCP tool's name starts with it.
MCP_PREFIX = "mcp__"


def mcp_tool_name(server: str, tool: str) -> str | None:
    """The catalogue name of a server's tool (characters outside the rule become ``_``), or None when it
    would be longer than 64 characters."""
    name = f"{MCP_PREFIX}{server}__{re.sub(r'[^A-Za-z0-9_-]', '_', tool)}"
    return name if is_tool_name(name) else None


def is_mcp_name(name: object) -> bool:
    """Whether ``name`` is an MCP server tool's catalogue name."""
    return isinstance(name, str) and name.startswith(MCP_PREFIX) and is_tool_name(name)


def mcp_parts(name: object) -> tuple[str, str] | None:
    """``(server, tool)`` of an MCP tool's catalogue name (server names have no ``_``), or None for any other name."""
    if not is_mcp_name(name):
        return None
    assert isinstance(name, str)
    server, sep, tool = name[len(MCP_PREFIX):].partition("__")
    return (server, tool) if sep and server and tool else None

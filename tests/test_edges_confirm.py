"""The confirmation says who asks and what runs (issue 31, item 5): a page function the assistant calls, a server's
tool the relay runs after the reader allows it, or a page function an in-browser agent (WebMCP) calls."""

from __future__ import annotations

import inspect

import pytest

from widget import webmcp
from widget.core.mcp_names import mcp_parts, mcp_tool_name
from widget.ui.confirm import WEBMCP_CALL, subject
from widget.ui.labels import LABELS

pytestmark = pytest.mark.unit


def test_who_asks_and_what_runs() -> None:
    assert subject({"id": "call_1", "name": "empty_cart"}) == ("confirm_text", {})
    assert subject({"id": "call_2", "name": "mcp__tickets__close_ticket"}) == (
        "confirm_text_mcp", {"server": "tickets", "tool": "close_ticket"})
    assert subject({"id": "webmcp-3", "name": "empty_cart"}) == ("confirm_text_webmcp", {})
    text = LABELS["confirm_text_mcp"].format(server="tickets", tool="close_ticket")
    assert "MCP server “tickets”" in text and "“close_ticket”" in text
    assert "page function" not in text and "in-browser agent" in LABELS["confirm_text_webmcp"]


def test_the_names_agree_with_their_makers() -> None:
    name = mcp_tool_name("docs-2", "search_all")
    assert name is not None and mcp_parts(name) == ("docs-2", "search_all")
    assert mcp_parts("get_cart") is None and mcp_parts("mcp__x") is None
    assert f'f"{WEBMCP_CALL}' in inspect.getsource(webmcp.call_here)

"""The protocol vocabulary: enum values are the wire strings, each with one spelling (in Pyodide: *_pyodide.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from enum import StrEnum
from pathlib import Path

import pytest

from widget import protocol as P
from widget.protocol import limits, messages, names

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")

def test_each_wire_name_has_one_spelling() -> None:
    """No flat alias beside an enum member (no ``EV_JOIN`` beside ``Event.JOIN``): code says ``P.Event.JOIN``."""
    for prefix in ("EV_", "ERR_", "KIND_", "STATUS_"):
        assert [n for n in dir(P) if n.startswith(prefix)] == [], prefix
    for tool in names.RelayTool:
        assert not hasattr(P, f"{tool.name}_TOOL"), tool
    for enum in (names.Event, names.ErrorCode, names.Kind, names.CallStatus):
        for member in enum:
            assert isinstance(member, str) and json.dumps(member) == json.dumps(member.value), member
            assert repr(member) == repr(member.value) and f"{member}" == member.value, member  # in messages too
    assert P.ERROR_CODES == frozenset(e.value for e in names.ErrorCode)
    assert P.ok(seq=3) == {"ok": True, "seq": 3}
    assert P.error("busy", "x") == {"ok": False, "error": {"code": "busy", "message": "x"}}


def test_wire_values_exactly() -> None:
    # Values the other side compares byte for byte; a typo here is a protocol break.
    assert names.ConversationStatus.WAITING_FOR_ASK_USER == "WAITING_FOR_ASK_USER"
    assert [e.value for e in names.Event if e in names.SEQUENCED_EVENTS] == [
        "completion.started",
        "completion_stream",
        "function_call.begin",
        "function_call.end",
        "function_call_iteration",
        "completion.ended",
        "completion.finished",
        "user_input",
        "ask_user.request",
        "message",
        "messages.withdrawn",
    ]
    assert names.CLIENT_EVENTS | names.RELAY_EVENTS == frozenset(names.Event)
    assert not names.CLIENT_EVENTS & names.RELAY_EVENTS
    assert names.IDEMPOTENT_EVENTS < names.CLIENT_EVENTS
    assert {e.value for e in names.ClientEvent} >= {
        "functionCall",
        "functionSuccess",
        "functionError",
        "functionResponseSent",
        "functionConfirmationRequired",
        "functionConfirmationResolved",
        "contextResolutionChanged",
        "stateError",
        "askUserRequired",
        "askUserCleared",
    }
    assert "functionCall" in names.SUBSCRIBABLE_EVENTS and "completion.ended" in names.SUBSCRIBABLE_EVENTS
    assert "join" not in names.SUBSCRIBABLE_EVENTS


def test_client_side_statuses_and_the_cancelled_call_text_exactly() -> None:
    # What page code reads (offer and call statuses) and what the relay writes on a cancelled call.
    assert [e.value for e in names.OfferStatus] == ["offered", "running", "done", "failed"]
    assert [e.value for e in names.CallProgress] == ["running", "success", "error"]
    assert {e.value for e in names.CallProgress} - {"running"} == {e.value for e in names.CallStatus}
    assert names.MSG_CALL_CANCELLED == "Cancelled." and P.MSG_CALL_CANCELLED == names.MSG_CALL_CANCELLED


def test_every_wire_name_is_in_the_document() -> None:
    """The document names every event, error code, status, role, kind and reason the code has."""
    for enum in (
        names.Event,
        names.ErrorCode,
        names.ConversationStatus,
        names.TurnStatus,
        names.Role,
        names.Kind,
        names.ToolMessageKind,
        names.UserInputReason,
        names.WithdrawReason,
        names.AskUserType,
        names.TurnErrorCode,
        names.RelayTool,
        names.ToolHandler,
        names.ActionConfirm,
    ):
        for member in enum:
            v = member.value
            assert f"`{v}`" in DOC or f"`{v} " in DOC or f'"{v}"' in DOC, f"{enum.__name__}.{member.name}"


def test_enums_are_str_enums_with_unique_values() -> None:
    for obj in vars(names).values():
        if isinstance(obj, type) and issubclass(obj, StrEnum) and obj is not StrEnum:
            values = [m.value for m in obj]
            assert len(values) == len(set(values)), obj
            for m in obj:
                assert json.dumps(m) == json.dumps(m.value) and f"{m}" == m.value


@pytest.mark.parametrize(
    "name,ok",
    [
        ("get_x", True),
        ("_a-b9", True),
        ("a" * 64, True),
        ("a" * 65, False),
        ("9a", False),
        ("a b", False),
        ("", False),
        ("é", False),
        ("a\n", False),
    ],
)
def test_tool_name_pattern(name: str, ok: bool) -> None:
    assert names.is_tool_name(name) is ok
    # The JSON Schema form (ECMA-262 ``$``: end of input only) says the same.
    assert (re.fullmatch(names.TOOL_NAME_PATTERN.removeprefix("^").removesuffix("$"), name) is not None) is ok


def test_limits_match_the_document() -> None:
    assert limits.MAX_STATE_BYTES == 65_536 and "65,536" in DOC
    assert limits.MAX_STATE_DEPTH == 32 and limits.MAX_SEQ == 2**63 - 1
    assert limits.MAX_USER_MESSAGE_CHARS == 16_000 and "16,000" in DOC
    assert limits.TOOL_REPLY_MAX_CHARS == 4000 and limits.MAX_ACTIONS == 3 and limits.JOIN_TOKEN_TTL_S == 300


def test_call_record_has_one_name_per_number() -> None:
    keys = set(messages.CallRecord.__annotations__)
    assert {"duration_ms", "total_ms"} <= keys and "handler_ms" not in keys
    assert set(messages.FunctionCallEndEvent.__annotations__) >= {"duration_ms", "total_ms", "seq"}
    assert {"duration_ms", "total_ms"} <= set(messages.FunctionResponsePayload.__annotations__)  # the same names
    assert {"duration_ms", "total_ms"} <= set(messages.CallStats.__annotations__)


def test_protocol_imports_only_the_standard_library(tmp_path: Path) -> None:
    """``widget.protocol`` alone (without the rest of ``widget``) pulls in no I/O and no third-party module."""
    pkg = tmp_path / "widget"
    shutil.copytree(ROOT / "widget" / "protocol", pkg / "protocol", ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "__init__.py").write_text("")
    code = (
        "import sys; before = set(sys.modules); import widget.protocol; "
        "print(sorted({m.split('.')[0] for m in set(sys.modules) - before}))"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.replace("'", '"')))
    assert "widget" in loaded
    assert not loaded & {
        "jsonschema",
        "socketio",
        "engineio",
        "asyncio",
        "aiohttp",
        "httpx",
        "starlette",
        "js",
        "pyodide",
        "threading",
        "socket",
    }


def test_optional_keys_are_optional() -> None:
    """``NotRequired`` survives (a postponed-annotations import would make every key required on 3.11)."""
    assert messages.JoinPayload.__optional_keys__ == {"last_seq"}
    assert "result" in messages.FunctionCallEndEvent.__optional_keys__
    assert messages.PatchOp.__required_keys__ == {"op", "path"}

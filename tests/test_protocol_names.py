"""The protocol vocabulary: enum values are the wire strings and the flat names stay (in Pyodide: *_pyodide.py)."""

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

# The names the protocol had before it became a package; code outside it still uses them.
FLAT_NAMES = [
    "PROTOCOL_VERSION",
    "HTTP_CREATE_CONVERSATION",
    "HTTP_CONVERSATION",
    "HTTP_ASK_USER",
    "DEFAULT_RELAY_PATH",
    "EV_JOIN",
    "EV_STATE_PATCH",
    "EV_USER_MESSAGE",
    "EV_FUNCTION_RESPONSE",
    "EV_CANCEL",
    "EV_REPLAY",
    "EV_ACTIVATE",
    "EV_RETRY",
    "EV_REGENERATE",
    "EV_ACTION_OUTCOME",
    "EV_STATE",
    "EV_CLIENT_ROLE",
    "EV_COMPLETION_STARTED",
    "EV_COMPLETION_STREAM",
    "EV_FUNCTION_CALL_BEGIN",
    "EV_FUNCTION_CALL_END",
    "EV_FUNCTION_CALL_ITERATION",
    "EV_COMPLETION_ENDED",
    "EV_COMPLETION_FINISHED",
    "EV_USER_INPUT",
    "EV_ASK_USER_REQUEST",
    "EV_MESSAGE",
    "EV_MESSAGES_WITHDRAWN",
    "SEQUENCED_EVENTS",
    "STATE_ROOT",
    "FUNCTIONS_PATH",
    "CONTEXT_PATH",
    "MAX_STATE_BYTES",
    "MAX_STATE_DEPTH",
    "ENGINEIO_MAX_BUFFER",
    "FUNCTIONS_DEBOUNCE_MS",
    "CONTEXT_DEBOUNCE_MS",
    "SYNC_STATE_BEFORE_FUNCTION_RESPONSE_TIMEOUT_MS",
    "CONTEXT_RESOLUTION_TIMEOUT_MS",
    "FUNCTION_CALL_HISTORY_LIMIT",
    "FUNCTION_CALL_TIMEOUT_S",
    "TOOL_CALL_TIMEOUT_S",
    "TOOL_REPLY_MAX_CHARS",
    "MAX_USER_MESSAGE_CHARS",
    "MAX_ITERATIONS",
    "MAX_ACTIONS",
    "MAX_TOOLS_ADVISED",
    "JOIN_TOKEN_TTL_S",
    "MAX_IDEMPOTENCY_KEY_CHARS",
    "OFFER_ACTIONS_TOOL",
    "KIND_FUNCTION",
    "KIND_TOOL",
    "KIND_ACTION",
    "STATUS_SUCCESS",
    "STATUS_ERROR",
    "MSG_SENSITIVE_DENIED",
    "ERR_BAD_REQUEST",
    "ERR_NOT_FOUND",
    "ERR_FORBIDDEN_ORIGIN",
    "ERR_UNAUTHORIZED",
    "ERR_RATE_LIMITED",
    "ERR_INVALID_TOKEN",
    "ERR_TOKEN_EXPIRED",
    "ERR_VERSION_MISMATCH",
    "ERR_NOT_JOINED",
    "ERR_NOT_ACTIVE",
    "ERR_STATE_TOO_LARGE",
    "ERR_STATE_TOO_DEEP",
    "ERR_PATCH_FAILED",
    "ERR_CALL_NOT_PENDING",
    "ERR_MESSAGE_TOO_LONG",
    "ERR_BUSY",
    "ERR_INTERNAL",
    "ERR_NOTHING_TO_RETRY",
    "ERROR_CODES",
    "ok",
    "error",
]


def test_flat_names_are_plain_strings_equal_to_their_enum_member() -> None:
    for name in FLAT_NAMES:
        assert hasattr(P, name), name
    for prefix, enum in (
        ("EV_", names.Event),
        ("ERR_", names.ErrorCode),
        ("KIND_", names.Kind),
        ("STATUS_", names.CallStatus),
    ):
        flat = {n: getattr(P, n) for n in dir(P) if n.startswith(prefix)}
        assert flat, prefix
        for n, value in flat.items():
            assert type(value) is str, n  # a plain str: behaves the same in every serializer
            assert enum(value) == value and enum[n.removeprefix(prefix)] == value, n
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
    assert "handler_ms" in messages.FunctionResponsePayload.__annotations__  # the one wire spelling


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

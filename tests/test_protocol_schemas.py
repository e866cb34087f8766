"""The machine-readable protocol: generated schemas, AsyncAPI and OpenAPI documents, the checks, the limits the
schemas carry (the served copies and the AsyncAPI validator: tests/test_edges_contract.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, is_typeddict

import jsonschema
import pytest
from openapi_spec_validator import validate as validate_openapi
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError
from protocol_traffic import Traffic

from widget.protocol import messages, names
from widget.protocol import schemas as S
from widget.relay.http import contract as C

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
CHECKED_IN = ROOT / "schemas"


def test_checked_in_documents_are_the_generated_ones() -> None:
    """``schemas/`` is ``python -m widget.relay.http.contract schemas``'s output (regenerate after changing a type)."""
    for name, doc in C.documents().items():
        assert (CHECKED_IN / name).read_text(encoding="utf-8") == C.dump(doc), f"schemas/{name} is stale"


def test_bundle_is_a_valid_2020_12_schema_covering_every_type() -> None:
    bundle = C.schema_bundle()
    jsonschema.Draft202012Validator.check_schema(bundle)
    assert bundle["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    typed = {v.__name__ for v in vars(messages).values() if is_typeddict(v) and v.__module__ == messages.__name__}
    assert typed - {"FunctionCallRecord", "Sequenced"} <= set(bundle["$defs"])
    assert set(bundle["x-events"]) == {e.value for e in names.Event}
    for name, entry in bundle["x-events"].items():
        assert ("ack" in entry) == (name in names.CLIENT_EVENTS), name
    assert bundle["$defs"]["ErrorCode"]["enum"] == [e.value for e in names.ErrorCode]
    assert bundle["$defs"]["ConversationStatus"]["enum"] == [e.value for e in names.ConversationStatus]
    # What the relay sends says exactly what is documented; what clients send may carry more.
    assert bundle["$defs"]["JoinAck"]["additionalProperties"] is False
    assert "additionalProperties" not in bundle["$defs"]["JoinPayload"]
    assert bundle["$defs"]["JoinPayload"]["required"] == ["token", "version"]


def test_openapi_document_passes_its_validator() -> None:
    doc = C.openapi()
    validate_openapi(copy.deepcopy(doc))
    assert doc["openapi"] == "3.1.0"
    assert set(doc["paths"]) == {op.path for op in S.HTTP}
    broken = copy.deepcopy(doc)
    broken["paths"]["/healthz"]["get"]["responses"] = "none"
    with pytest.raises(OpenAPIValidationError):
        validate_openapi(broken)


def test_every_local_ref_resolves() -> None:
    for doc in (C.asyncapi(), C.openapi(), C.schema_bundle()):
        text = json.dumps(doc)
        for ref in {part.split('"')[0] for part in text.split('"$ref": "')[1:]}:
            node: Any = doc
            for key in ref.removeprefix("#/").split("/"):
                node = node[key]
            assert isinstance(node, dict), ref


@pytest.mark.parametrize(
    "event,payload,ok",
    [
        ("join", {"token": "t", "version": 1, "last_seq": None}, True),
        ("join", {"token": "t", "version": 1}, True),
        ("join", {"token": "t"}, False),
        (
            "state_patch",
            {"patch": [{"op": "add", "path": "/autopilot/context/a", "value": 1}], "idempotency_key": "k"},
            True,
        ),
        ("state_patch", {"patch": [{"op": "frobnicate", "path": "/a"}], "idempotency_key": "k"}, False),
        ("user_message", {"text": "hi", "idempotency_key": "k", "extra": 1}, True),
        ("user_message", {"text": 5, "idempotency_key": "k"}, False),
        ("function_response", {"id": "c", "status": "success", "result": [1], "idempotency_key": "k"}, True),
        ("function_response", {"id": "c", "status": "done", "idempotency_key": "k"}, False),
        ("activate", {}, True),
        ("replay", {"last_seq": 3}, True),
        ("replay", {"last_seq": "3"}, False),
        ("completion.finished", {"seq": 9, "turn_id": "t_1", "status": "done"}, True),
        ("completion.finished", {"seq": 9, "turn_id": "t_1", "status": "over"}, False),
        ("completion.finished", {"seq": 9, "turn_id": "t_1", "status": "done", "extra": 1}, False),
        (
            "message",
            {"seq": 3, "message": {"id": "m", "role": "user", "content": "hi", "created_at": 1.0, "seq": 3}},
            True,
        ),
        ("message", {"seq": 3, "message": {"id": "m", "role": "robot", "content": "hi"}}, False),
        ("no.such.event", {}, False),
    ],
)
def test_check_payload(event: str, payload: Any, ok: bool) -> None:
    assert (C.check_payload(event, payload) == []) is ok


def test_check_ack_and_refusal_codes() -> None:
    assert C.check_ack("user_message", {"ok": True, "message_id": "m_1"}) == []
    assert C.check_ack("user_message", {"ok": True}) != []
    assert C.check_ack("user_message", {"ok": False, "error": {"code": "busy", "message": "A turn is running."}}) == []
    [problem] = C.check_ack("user_message", {"ok": False, "error": {"code": "nope", "message": "x"}})
    assert problem.path == "/error/code" and "nope" in problem.message
    assert C.refusal("user_message", {"text": "hi", "idempotency_key": "k"}) is None
    code, message = C.refusal("user_message", {"text": 5, "idempotency_key": "k"}) or ("", "")
    assert code == "bad_request" and "/text" in message
    assert (C.refusal("state_patch", {"patch": {}, "idempotency_key": "k"}) or ("",))[0] == "patch_failed"
    assert (C.refusal("join", {"token": 1, "version": 1}) or ("",))[0] == "invalid_token"
    assert (C.refusal("join", {"token": "t", "version": "1"}) or ("",))[0] == "version_mismatch"


def test_check_http() -> None:
    assert C.operation_for("GET", "/api/conversations/c_1") == "getConversation"
    assert C.operation_for("POST", "/api/apps/demo/conversations") == "createConversation"
    assert C.operation_for("GET", "/widget/autopilot.js") is None
    assert (
        C.check_http("createConversation", 201, {"ok": True, "id": "c_1", "url": "http://r/api/conversations/c_1"})
        == []
    )
    assert C.check_http("createConversation", 201, {"ok": True, "id": "c_1"}) != []
    assert C.check_http("createConversation", 418, {}) != []
    assert C.check_http("deleteConversation", 204, None) == []
    assert C.check_http("answerAskUser", 200, {"answers": {"id": "a", "result": True}}, request=True) == []


def test_traffic_recorder_reports_what_breaks_the_schemas() -> None:
    """The fixture that checks the relay tests' traffic is not vacuous."""
    t = Traffic()
    t.incoming("completion.started", ({"seq": 1, "turn_id": "t", "message_id": "m"},))
    t.ack("user_message", {"text": "x", "idempotency_key": "k"}, {"ok": True, "message_id": "m"})
    t.ack("user_message", {"text": 5}, {"ok": False, "error": {"code": "bad_request", "message": "m"}})  # refused
    assert t.problems == [] and sum(t.checked.values()) == 4
    t.incoming("completion.started", ({"seq": 1, "turn_id": "t"},))
    t.incoming("completion.started", ({}, {}))
    t.ack("user_message", {"text": 5, "idempotency_key": "k"}, {"ok": True, "message_id": "m"})  # accepted: checked
    t.http("GET", "/api/conversations/c_1", 200, None, {"ok": True})
    assert [p.split(":")[0].split(" ")[0] for p in t.problems[:3]] == ["event", "event", "payload"], t.problems
    assert any(p.startswith("http getConversation 200") for p in t.problems)


def test_fast_checker_is_fast_on_long_patches() -> None:
    """30,000 operations (what fits a 1 MB packet) are checked in well under a second, even on a loaded machine."""
    import time

    ops = {"patch": [{"op": "test", "path": "/autopilot/functions", "value": {}}] * 30_000, "idempotency_key": "k"}
    t0 = time.process_time()
    assert C.check_payload("state_patch", ops) == []
    assert time.process_time() - t0 < 1.0


BAD = [
    ("user_message", {"text": "hi", "idempotency_key": ""}),
    ("user_message", {"text": "hi", "idempotency_key": "k" * 129}),
    ("user_message", {"text": "", "idempotency_key": "k"}),
    ("user_message", {"text": "x" * 16_001, "idempotency_key": "k"}),
    ("join", {"token": "t", "version": 1, "last_seq": -1}),
    ("join", {"token": "t", "version": 1, "last_seq": 2**63}),
    ("replay", {"last_seq": None}),
    ("replay", {"last_seq": -3}),
    ("activate", []),
    ("activate", "now"),
    ("cancel", {"idempotency_key": "k" * 129}),
]
GOOD = [
    ("user_message", {"text": "x" * 16_000, "idempotency_key": "k" * 128}),
    ("join", {"token": "t", "version": 1, "last_seq": 2**63 - 1}),
    ("join", {"token": "t", "version": 1, "last_seq": None}),
    ("replay", {"last_seq": 0}),
    ("activate", {}),
]


@pytest.mark.parametrize(("event", "payload"), BAD + GOOD)
def test_the_schemas_carry_the_limits(event: str, payload: Any) -> None:
    ours = C.check_payload(event, payload)
    theirs = list(C.jsonschema_validator("event", event, "payload").iter_errors(payload))
    assert bool(ours) == bool(theirs) == ((event, payload) in BAD), (ours, theirs)


def test_openapi_has_the_protocol_documents() -> None:
    op = C.openapi()["paths"]["/api/protocol/{name}"]["get"]
    assert op["operationId"] == "protocolDocument"
    assert [p["name"] for p in op["parameters"]] == ["name"] and set(op["responses"]) == {"200", "404"}

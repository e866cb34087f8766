"""The streaming state machine: the relay's completion events in order, and bad input ignored, never raised; the
browser transport applies a ``__batch__`` from static/bridge.mjs event by event, in order (in CPython)."""

import json
from typing import Any

import pytest

from widget.core.streaming import StreamingSession
from widget.transports.browser import BATCH, BrowserTransport

pytestmark = pytest.mark.unit


def run(session, events):
    return [session.handle(name, payload) for name, payload in events]


def test_full_sequence_with_function_call():
    s = StreamingSession()
    results = run(
        s,
        [
            ("completion.started", {"message_id": "m1"}),
            ("completion_stream", {"message_id": "m1", "delta": "Let me "}),
            ("completion_stream", {"message_id": "m1", "delta": "check."}),
            ("function_call.begin", {"id": "c1", "name": "f", "arguments": {}}),
            ("function_call.end", {"id": "c1", "status": "success", "result": 42, "duration_ms": 1.5, "total_ms": 2}),
            ("function_call_iteration", {"iteration": 1}),
            ("completion_stream", {"message_id": "m1", "delta": " It is 42."}),
        ],
    )
    assert all(results)
    assert s.is_streaming
    assert s.streaming_message["content"] == "Let me check. It is 42."
    assert s.streaming_message["function_calls"][0]["result"] == 42
    assert s.iteration == 1
    s.handle("completion.ended", {"message": {"id": "m1", "role": "assistant", "content": "Let me check. It is 42."}})
    assert s.streaming_message is None and s.is_streaming
    assert s.messages[-1]["function_calls"][0]["duration_ms"] == 1.5  # live records kept
    s.handle("completion.finished", {"status": "done"})
    assert not s.is_streaming
    assert len(s.messages) == 1


def test_out_of_order_and_unknown_events_are_ignored():
    ignored = []
    s = StreamingSession(on_ignored=ignored.append)
    assert s.handle("completion_stream", {"delta": "x"}) is False
    assert s.handle("function_call.begin", {"id": "c"}) is False
    assert s.handle("made.up", {}) is False
    s.handle("completion.started", {"message_id": "m"})
    assert s.handle("completion_stream", "not a dict") is False
    assert s.handle("completion_stream", {"delta": 5}) is False
    assert s.handle("function_call.end", {"id": "unknown"}) is False
    assert len(ignored) == 6
    assert s.streaming_message["content"] == ""


def test_cancelled_turn_keeps_partial_text():
    s = StreamingSession()
    run(s, [("completion.started", {"message_id": "m"}), ("completion_stream", {"delta": "partial"})])
    s.handle("completion.finished", {"status": "cancelled"})
    assert s.messages == [{"id": "m", "role": "assistant", "content": "partial", "function_calls": []}]
    assert not s.is_streaming


def test_commit_is_not_duplicated_by_id():
    s = StreamingSession()
    s.load([{"id": "m", "role": "assistant", "content": "old"}])
    run(s, [("completion.started", {"message_id": "m"}),
            ("completion.ended", {"message": {"id": "m", "content": "x"}})])
    assert len(s.messages) == 1


def test_a_batch_is_applied_event_by_event_in_order() -> None:
    seen: list[tuple[str, Any]] = []

    def handler(name: str, data: Any) -> None:
        if data == {"boom": True}:
            raise RuntimeError("a broken listener")
        seen.append((name, data))

    t = BrowserTransport(bridge=None)
    t.set_handler(handler)
    t._on_event("completion_stream", json.dumps({"delta": "a", "seq": 1}))
    batch = [["completion_stream", {"delta": "b", "seq": 2}], ["not a pair"], ["completion_stream", {"boom": True}],
             [3, {}], ["completion_stream", {"delta": "c", "seq": 4}]]
    t._on_event(BATCH, json.dumps(batch))
    t._on_event(BATCH, "not json")  # nothing, no exception
    t._on_event("completion.ended", json.dumps({"seq": 5}))
    # A malformed item is skipped; a listener's exception loses nothing else of the batch.
    assert seen == [("completion_stream", {"delta": "a", "seq": 1}), ("completion_stream", {"delta": "b", "seq": 2}),
                    ("completion_stream", {"delta": "c", "seq": 4}), ("completion.ended", {"seq": 5})]

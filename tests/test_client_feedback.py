"""The client's side of answer ratings: the relay's ``feedback`` event becomes the page's ``feedback`` event (it is
not sequenced: the sequence is untouched), a GET's stored ratings come with ``conversationLoaded``, and
``rate_answer`` refuses a bad rating before sending anything."""

from __future__ import annotations

import pytest

from widget import protocol as P
from widget.core.session import ClientSession, Notify
from widget.errors import ConfigError


def test_feedback_event_reaches_the_page_without_touching_the_sequence() -> None:
    s = ClientSession(instance="t")
    s.load(
        {
            "conversation": {"id": "c_1", "seq": 7},
            "messages": [],
            "feedback": [{"message_id": "m_1", "turn_id": "t_1", "rating": "up", "comment": None, "updated_at": 1.0}],
        }
    )
    record = {"message_id": "m_1", "turn_id": "t_1", "rating": "down", "comment": "old", "updated_at": 2.0}
    assert s.received(P.EV_FEEDBACK, record, 1.0) == [Notify("feedback", record)]
    assert s.seq.last_seq == 7
    assert s.received(P.EV_FEEDBACK, "not an object", 1.0) == []
    loaded = s.load({"conversation": {"id": "c_1", "seq": 7}, "messages": []})
    assert [e.payload["feedback"] for e in loaded if isinstance(e, Notify) and e.event == "conversationLoaded"] == [[]]
    assert "feedback" in P.SUBSCRIBABLE_EVENTS


async def test_rate_answer_checks_before_sending() -> None:
    from fake_relay import MemoryTransport

    from widget.client import AutopilotClient

    client = AutopilotClient(MemoryTransport(None))  # type: ignore[arg-type] - nothing is sent
    with pytest.raises(ConfigError, match="rating"):
        await client.rate_answer("m_1", "meh")
    with pytest.raises(ConfigError, match="2000"):
        await client.rate_answer("m_1", "up", "x" * 2001)

"""The client's side of answer ratings: the relay's ``feedback`` event becomes the page's ``feedback`` event (it is
not sequenced: the sequence is untouched), a GET's stored ratings come with ``conversationLoaded``, and
``rate_answer`` refuses a bad rating or comment before sending anything; the store's ``Ratings`` keeps a comment
with its thumb and turns failures into text to show."""

from __future__ import annotations

from typing import Any

import pytest

from widget import protocol as P
from widget.core.session import ClientSession, Notify
from widget.errors import ConfigError, ConnectionFailed
from widget.store.feedback import Ratings, comment_over, comment_text

pytestmark = pytest.mark.unit


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
    assert s.received(P.Event.FEEDBACK, record, 1.0) == [Notify("feedback", record)]
    assert s.seq.last_seq == 7
    assert s.received(P.Event.FEEDBACK, "not an object", 1.0) == []
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
    with pytest.raises(ConfigError, match="comment"):
        await client.rate_answer("m_1", "up", 42)  # type: ignore[arg-type] - a caller's mistake
    # The relay trims a comment before its limit applies: so does the client.
    with pytest.raises(ConnectionFailed):  # past the checks: only the missing conversation stops it
        await client.rate_answer("m_1", "up", " " * 10 + "x" * 2000 + "\n")


class FakeRatingClient:
    """What ``Ratings`` uses of the client: ``on`` and ``rate_answer`` (recorded; fails with ``fail`` when set)."""

    def __init__(self) -> None:
        self.listeners: dict[str, Any] = {}
        self.sent: list[tuple[str, str | None, str | None]] = []
        self.fail: Exception | None = None

    def on(self, event: str, fn: Any) -> Any:
        self.listeners[event] = fn
        return lambda: None

    async def rate_answer(self, message_id: str, rating: str | None, comment: str | None = None) -> dict[str, Any]:
        self.sent.append((message_id, rating, comment))
        if self.fail is not None:
            raise self.fail
        return {"message_id": message_id, "turn_id": "t_1", "rating": rating,
                "comment": comment if rating else None, "updated_at": 2.0}


async def test_ratings_keep_the_comment_with_the_thumb_and_report_failures() -> None:
    client = FakeRatingClient()
    changes: list[int] = []
    ratings = Ratings(client, lambda: changes.append(1))  # type: ignore[arg-type] - the fake has what it uses
    client.listeners["conversationLoaded"]({"feedback": [
        {"message_id": "m_1", "turn_id": "t_1", "rating": "down", "comment": "too long", "updated_at": 1.0},
        {"message_id": "m_2", "turn_id": "t_2", "rating": "up", "comment": None, "updated_at": 1.0},
        {"message_id": "m_3", "rating": "meh"},
    ]})
    assert (ratings.rating("m_1"), ratings.comment("m_1")) == ("down", "too long")
    assert (ratings.rating("m_2"), ratings.comment("m_2"), ratings.rating("m_3")) == ("up", None, None)
    # The other thumb: the comment goes with it.
    await ratings.rate("m_1", "up")
    assert client.sent[-1] == ("m_1", "up", "too long")
    assert (ratings.rating("m_1"), ratings.comment("m_1")) == ("up", "too long")
    # A comment is sent with the rating; blank is no comment.
    assert await ratings.send_comment("m_2", "up", "  clear and short \n") is None
    assert client.sent[-1] == ("m_2", "up", "clear and short")
    assert ratings.comment("m_2") == "clear and short"
    assert await ratings.send_comment("m_2", "up", "   ") is None
    assert client.sent[-1] == ("m_2", "up", None) and ratings.comment("m_2") is None
    # A failure is returned as text (the stored state stays), and a failed thumb is kept per answer.
    client.fail = ConnectionFailed("Cannot reach the relay: down")
    assert await ratings.send_comment("m_1", "up", "new words") == "Cannot reach the relay: down"
    assert ratings.comment("m_1") == "too long"
    await ratings.rate("m_2", "down")
    assert ratings.errors == {"m_2": "Cannot reach the relay: down"} and ratings.rating("m_2") == "up"
    client.fail = None
    # The pressed thumb again takes the rating (and its comment) back.
    await ratings.rate("m_1", "up")
    assert client.sent[-1] == ("m_1", None, None)
    assert (ratings.rating("m_1"), ratings.comment("m_1")) == (None, None)
    # Another tab's change arrives as the feedback event.
    client.listeners["feedback"]({"message_id": "m_2", "rating": "down", "comment": "from the other tab"})
    assert (ratings.rating("m_2"), ratings.comment("m_2")) == ("down", "from the other tab")
    assert len(changes) >= 6


def test_comment_limits_count_what_the_relay_stores() -> None:
    assert comment_text("  hi \n") == "hi" and comment_text(" \n ") is None
    assert comment_over(" " * 50 + "x" * P.MAX_FEEDBACK_COMMENT_CHARS) == 0
    assert comment_over("x" * (P.MAX_FEEDBACK_COMMENT_CHARS + 3)) == 3

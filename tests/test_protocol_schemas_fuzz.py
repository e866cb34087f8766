"""The relay's fast payload checker gives jsonschema's verdict on any JSON value (a property search)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from widget.protocol import names
from widget.relay.http import contract as C

pytestmark = pytest.mark.fuzz


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.floats(-2, 2, allow_nan=False)
    | st.sampled_from(
        ["", "t", "add", "success", "error", "user", "done", "radiolist", "bad_request", "/autopilot/context/a"]
    ),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "token",
                    "version",
                    "last_seq",
                    "patch",
                    "op",
                    "path",
                    "value",
                    "from",
                    "text",
                    "id",
                    "status",
                    "result",
                    "error",
                    "idempotency_key",
                    "duration_ms",
                    "message",
                    "role",
                    "content",
                    "ok",
                    "code",
                    "seq",
                    "answers",
                    "x",
                ]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    event=st.sampled_from(sorted(names.CLIENT_EVENTS | {names.Event.MESSAGE, names.Event.COMPLETION_ENDED})),
    value=_json,
)
def test_fast_checker_agrees_with_jsonschema(event: str, value: Any) -> None:
    """The relay's checker (widget.protocol.check) gives jsonschema's verdict on any JSON value."""
    fast = C.check_payload(event, value)
    assert (fast == []) == C.jsonschema_validator("event", event, "payload").is_valid(value), (value, fast)

"""Sans-I/O state sync: debounce with time passed in, limits, acks and refusals."""

import pytest

from widget.core.limits import check_state, depth
from widget.core.state import StateSync
from widget.errors import StateLimitError
from widget.protocol import MAX_STATE_BYTES

pytestmark = pytest.mark.unit


def ready() -> StateSync:
    s = StateSync()
    s.snapshot({}, {})
    assert s.poll(0.0) is None  # nothing local yet: empty diff sends nothing
    return s


def test_context_debounce_restarts_and_collapses_bursts():
    s = ready()
    for i in range(1000):
        s.update_context({"n": i}, 0.0 + i * 0.00005)  # 1,000 calls within 50 ms
    last = 999 * 0.00005
    assert s.poll(last + 0.099) is None
    out = s.poll(last + 0.1)
    assert out is not None
    assert out.patch == [{"op": "add", "path": "/autopilot/context/n", "value": 999}]
    assert s.poll(10.0) is None


def test_functions_debounce_is_25ms_and_independent_of_context():
    s = ready()
    s.set_functions({"f": {"name": "f"}}, 1.0)
    s.update_context({"a": 1}, 1.0)
    assert s.next_deadline() == pytest.approx(1.025)
    out = s.poll(1.026)
    assert [op["path"] for op in out.patch] == ["/autopilot/functions/f"]
    out2 = s.poll(1.1)
    assert [op["path"] for op in out2.patch] == ["/autopilot/context/a"]


def test_one_key_change_in_60kb_context_is_a_small_patch():
    s = ready()
    big = {f"k{i}": "x" * 100 for i in range(550)}
    s.set_context(big, 0)
    first = s.poll(1)
    s.ack(first.key, True)
    s.update_context({"k7": "changed"}, 2)
    out = s.poll(3)
    assert out.patch == [{"op": "replace", "path": "/autopilot/context/k7", "value": "changed"}]
    import json

    assert len(json.dumps(out.patch)) < 200


def test_oversized_state_is_skipped_and_base_kept():
    s = ready()
    s.set_context({"ok": 1}, 0)
    o = s.poll(1)
    s.ack(o.key, True)
    s.set_context({"big": "x" * MAX_STATE_BYTES}, 2)
    with pytest.raises(StateLimitError) as info:
        s.poll(3)
    assert info.value.code == "state_too_large"
    assert s.base["autopilot"]["context"] == {"ok": 1}
    assert s.next_deadline() is None  # no endless retries of the same oversized state ...
    assert s.needs_sync() and s.unsent == {"context"}  # ... but it is still not on the relay
    assert not s.is_dirty()  # and nothing waits on it: it cannot go until it changes
    # the local value is the page's; a later small change diffs from the synced base
    s.set_context({"ok": 2}, 4)
    out = s.poll(5)
    assert out.patch == [{"op": "replace", "path": "/autopilot/context/ok", "value": 2}]


def test_too_deep_state_is_refused_before_diffing():
    s = ready()
    deep: dict = {}
    node = deep
    for _ in range(40):
        node["a"] = {}
        node = node["a"]
    s.set_context(deep, 0)
    with pytest.raises(StateLimitError) as info:
        s.poll(1)
    assert info.value.code == "state_too_deep"


def test_exact_64kb_boundary_counts_utf8_bytes():
    overhead = len('{"autopilot":{"functions":{},"context":{"s":""}}}')
    fits = {"autopilot": {"functions": {}, "context": {"s": "é" * ((MAX_STATE_BYTES - overhead) // 2)}}}
    assert check_state(fits) <= MAX_STATE_BYTES
    over = {"autopilot": {"functions": {}, "context": {"s": "é" * ((MAX_STATE_BYTES - overhead) // 2 + 1)}}}
    with pytest.raises(StateLimitError):
        check_state(over)


def test_refused_patch_resets_base_to_acked_and_resends():
    s = ready()
    s.set_context({"a": 1}, 0)
    o = s.poll(1)
    assert s.is_dirty()
    s.ack(o.key, False)
    out = s.flush()
    assert out.patch == [{"op": "add", "path": "/autopilot/context/a", "value": 1}]
    s.ack(out.key, True)
    assert not s.is_dirty()


def test_non_json_context_is_a_clear_error():
    s = ready()
    with pytest.raises(TypeError, match="JSON-serializable"):
        s.set_context({"x": object()}, 0)
    with pytest.raises(TypeError, match="must be a dict"):
        s.set_context(["not", "a", "dict"], 0)  # type: ignore[arg-type]


def test_depth_counts_levels_iteratively():
    assert depth(1) == 0
    assert depth({}) == 1
    assert depth({"a": [1, {"b": 2}]}) == 3
    nested: list = []
    for _ in range(10000):
        nested = [nested]
    assert depth(nested) > 32  # no RecursionError


def test_integers_json_cannot_carry_exactly_are_refused_in_state():
    s = ready()
    with pytest.raises(TypeError, match="beyond"):
        s.update_context({"id": 2**53}, 0)
    with pytest.raises(TypeError, match=r"/deep/0"):
        s.set_context({"deep": [-(2**60)]}, 0)
    s.update_context({"ok": 2**53 - 1, "f": 1e25}, 0)
    assert s.local["context"]["ok"] == 2**53 - 1


def test_a_part_not_sent_stays_marked_and_goes_with_the_next_flush():
    """A function flushed together with an oversized context is sent alone; the context stays unsent and goes out
    once it fits, without any other change to the functions."""
    s = ready()
    s.set_functions({"f": {"name": "f"}}, 0)
    s.set_context({"big": "x" * MAX_STATE_BYTES}, 0)
    out = s.flush()
    assert out is not None and out.skipped is not None and out.skipped.code == "state_too_large"
    assert [op["path"] for op in out.patch] == ["/autopilot/functions/f"]
    s.ack(out.key, True)
    assert s.unsent == {"context"} and s.needs_sync()
    with pytest.raises(StateLimitError):
        s.flush()  # still too large: nothing sent, still marked
    assert s.unsent == {"context"}
    s.set_context({"small": 1}, 1)
    out = s.poll(2)
    assert out.skipped is None and out.patch == [{"op": "add", "path": "/autopilot/context/small", "value": 1}]
    s.ack(out.key, True)
    assert not s.needs_sync() and s.unsent == set()


def test_an_oversized_function_catalog_stays_unsent_until_the_context_shrinks():
    """Neither part fits with the other's new value: nothing goes out, both stay marked; once the context
    shrinks, the functions reach the relay with it."""
    s = ready()
    s.set_context({"big": "x" * (MAX_STATE_BYTES - 2000)}, 0)
    out = s.flush()
    s.ack(out.key, True)
    s.set_functions({"f": {"name": "f", "description": "d" * 3000}}, 1)
    with pytest.raises(StateLimitError):
        s.poll(2)
    assert s.unsent == {"functions"} and s.next_deadline() is None
    s.set_context({}, 3)
    out = s.poll(4)
    assert sorted(op["path"] for op in out.patch) == ["/autopilot/context/big", "/autopilot/functions/f"]

"""The relay's bounds and figures as pure logic: the rate limiter (clock injected), the log-storm filter, the MCP
line cap, a patch's copy amplification, the stats' percentiles."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest

from widget.errors import StateLimitError
from widget.relay.http.insight import percentile
from widget.relay.http.limits import LogStormFilter
from widget.relay.hub import apply_patch_atomic
from widget.relay.mcp.bounded import LineCap, Oversize, error_response, request_id, too_large_message
from widget.relay.ratelimit import EXPIRE_PER_CHECK, RateLimiter

pytestmark = pytest.mark.unit


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_limiter_window_and_retry_after() -> None:
    clock = Clock()
    lim = RateLimiter(3, window_s=60, clock=clock)
    assert [lim.allow("a") for _ in range(4)] == [True, True, True, False]
    assert lim.allow("b")  # keys are independent
    assert lim.retry_after("a") == 60
    clock.now += 59.5
    assert not lim.allow("a") and lim.retry_after("a") == 0.5
    clock.now += 0.5  # the three hits leave the window together
    assert lim.retry_after("a") == 0 and all(lim.allow("a") for _ in range(3)) and not lim.allow("a")


def test_limiter_refused_hits_do_not_count() -> None:
    clock = Clock()
    lim = RateLimiter(1, window_s=10, clock=clock)
    assert lim.allow("a")
    for _ in range(100):
        clock.now += 0.05
        assert not lim.allow("a")
    clock.now = 1010.0
    assert lim.allow("a")


def test_limiter_zero_is_unlimited() -> None:
    lim = RateLimiter(0)
    assert all(lim.allow("a") for _ in range(1000)) and len(lim) == 0 and lim.retry_after("a") == 0


def test_limiter_100000_keys_expire_at_constant_cost() -> None:
    """100,000 keys (one per address or conversation) are all forgotten once their window has passed,
    by ordinary checks, each doing a bounded amount of work."""
    clock = Clock()
    lim = RateLimiter(5, window_s=60, clock=clock)
    for i in range(100_000):
        assert lim.allow(f"key-{i}")
    assert len(lim) == 100_000
    clock.now += 61
    before = len(lim)
    assert lim.allow("new")
    assert before - len(lim) + 1 <= EXPIRE_PER_CHECK + 1  # one check did at most EXPIRE_PER_CHECK evictions
    checks = 0
    while len(lim) > 1:
        lim.allow("new")
        checks += 1
    assert checks <= 100_000 // EXPIRE_PER_CHECK + 1
    assert len(lim) == 1


def test_limiter_keys_hit_again_are_kept() -> None:
    clock = Clock()
    lim = RateLimiter(100, window_s=60, clock=clock)
    for i in range(100):
        lim.allow(f"k{i}")
    clock.now += 30
    lim.allow("k0")  # k0 hit again: its window restarts from now
    clock.now += 31
    for _ in range(100):
        lim.allow("other")
    assert len(lim) == 2  # k0 and other; k1..k99 expired
    assert lim.retry_after("k0") == 0


def test_the_rate_limiter_forgets_100000_keys_and_each_check_touches_a_few() -> None:
    now = [0.0]
    limiter = RateLimiter(5, 60.0, clock=lambda: now[0])
    for i in range(100_000):
        assert limiter.allow(f"k{i}")
    assert len(limiter) == 100_000
    now[0] = 61.0
    allowed = []
    for _ in range(100_000 // EXPIRE_PER_CHECK + 1):
        before = len(limiter)
        allowed.append(limiter.allow("live"))
        assert before - len(limiter) <= EXPIRE_PER_CHECK  # bounded work per check, however many keys
    assert len(limiter) == 1
    assert allowed[:6] == [True] * 5 + [False] and not any(allowed[6:])
    assert limiter.retry_after("live") == 60.0


def test_a_log_storm_is_one_line_per_cause_per_interval() -> None:
    now = [0.0]
    storm = LogStormFilter(10.0, clock=lambda: now[0])
    logger = logging.getLogger("test.storm")

    def record(msg: str, *args: Any, exc: BaseException | None = None) -> logging.LogRecord:
        return logger.makeRecord(logger.name, logging.ERROR, __file__, 1, msg, args,
                                 (type(exc), exc, None) if exc else None)

    accept = OSError(24, "Too many open files")
    passed = [r for r in (record("socket.accept() out of system resource", exc=accept) for _ in range(1000))
              if storm.filter(r)]
    assert len(passed) == 1 and passed[0].exc_info is None and "Too many open files" in passed[0].getMessage()
    assert storm.filter(record("other cause %s", 1))
    assert not storm.filter(record("other cause %s", 2))
    now[0] = 10.5
    again = record("socket.accept() out of system resource", exc=accept)
    assert storm.filter(again) and "[999 more like this in the last 10 s]" in again.getMessage()


def test_line_cap_keeps_at_most_the_limit() -> None:
    cap = LineCap(10)
    assert cap.feed(b'{"a":1}\n{"id":') == [b'{"a":1}']
    out = cap.feed(b'7,"result":"' + b"z" * 100 + b'"}\nok\n')
    assert isinstance(out[0], Oversize) and out[0].length == 120 and out[0].head.endswith(b'"}') and out[1:] == [b"ok"]
    assert request_id(out[0].head) == 7 and len(cap._buf) == 0
    for _ in range(1000):  # a line that never ends holds no more than the limit
        assert cap.feed(b"x" * 65536) == []
    assert len(cap._buf) <= 10
    assert request_id(b'{"jsonrpc":"2.0","id":"r-1","result"') == "r-1" and request_id(b'{"result":') is None
    assert json.loads(error_response(7, 10))["error"]["message"] == too_large_message(10)


def test_copy_amplification_is_bounded() -> None:
    doc = {"autopilot": {"functions": {}, "context": {"a": "x" * 100}}}
    grow = [{"op": "copy", "from": "/autopilot/context", "path": f"/autopilot/context/c{i}"} for i in range(14)]
    shrink = [{"op": "remove", "path": f"/autopilot/context/c{i}"} for i in reversed(range(14))]
    t0 = time.perf_counter()
    try:
        with pytest.raises(StateLimitError):
            apply_patch_atomic(doc, grow + shrink)
    finally:
        assert time.perf_counter() - t0 < 5


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([5.0], 95) == 5.0
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0 and percentile(values, 95) == 95.0
    assert percentile([3.0, 1.0, 2.0, 10.0], 50) == 2.0 and percentile([3.0, 1.0, 2.0, 10.0], 95) == 10.0

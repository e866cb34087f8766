"""Bounds on what an outsider can make the relay hold: the rate limiter (pure, clock injected)."""

from __future__ import annotations

from widget.relay.ratelimit import EXPIRE_PER_CHECK, RateLimiter


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

"""The relay's one rate limiter: a sliding window per key whose idle keys expire in O(1).

Keys are kept in the order of their last accepted hit, so the keys whose window has passed are always at
the front: each check drops at most ``EXPIRE_PER_CHECK`` of them. A check costs O(1) (amortised over
the few timestamps of its own key), and a key that has not been hit for a window is forgotten whether
or not it is ever seen again: memory follows the keys active in the last window, not all keys ever seen.
"""

from __future__ import annotations

import bisect
import time
from collections import OrderedDict
from collections.abc import Callable

#: How many expired keys one check removes at most: more than one, so the expired keys shrink even
#: while every check adds a new key.
EXPIRE_PER_CHECK = 8


class RateLimiter:
    """At most ``limit`` accepted hits per ``window_s`` per key (``limit <= 0``: no limit)."""

    def __init__(self, limit: int, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window_s = window_s
        self.clock = clock
        #: key -> times of its accepted hits within the window, oldest first; the dict is ordered by
        #: each key's latest hit
        self._hits: OrderedDict[str, list[float]] = OrderedDict()

    def __len__(self) -> int:
        """How many keys are remembered (those hit within the last window, and a few not yet dropped)."""
        return len(self._hits)

    def _expire(self, now: float) -> None:
        edge = now - self.window_s
        for _ in range(EXPIRE_PER_CHECK):
            if not self._hits:
                return
            key, times = next(iter(self._hits.items()))
            if times and times[-1] > edge:
                return
            del self._hits[key]

    def _recent(self, key: str, now: float) -> list[float] | None:
        times = self._hits.get(key)
        if times is not None:
            del times[:bisect.bisect_right(times, now - self.window_s)]
        return times

    def allow(self, key: str) -> bool:
        """Count a hit for ``key`` if it is within the limit; False (nothing counted) if it is not."""
        if self.limit <= 0:
            return True
        now = self.clock()
        self._expire(now)
        times = self._recent(key, now)
        if times is None:
            self._hits[key] = [now]
            return True
        if len(times) >= self.limit:
            return False
        times.append(now)
        self._hits.move_to_end(key)
        return True

    def retry_after(self, key: str) -> float:
        """Seconds until ``key`` may be hit again (0 when it may now)."""
        if self.limit <= 0:
            return 0.0
        now = self.clock()
        times = self._recent(key, now)
        if not times or len(times) < self.limit:
            return 0.0
        return max(0.0, times[len(times) - self.limit] + self.window_s - now)

    def forget(self, key: str) -> None:
        """Drop what is known of ``key`` (its owner is gone)."""
        self._hits.pop(key, None)

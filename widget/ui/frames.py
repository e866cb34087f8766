"""Frame scheduling: store changes only mark parts dirty; one ``requestAnimationFrame`` renders them.

While an answer streams, its text is rendered at most 10 times a second (a timer defers the frame): chunks arrive
at 20–200 a second, a reader follows a few updates a second, and each render costs Markdown, sanitizing, style,
layout and paint. The interval also grows with what a render costs (down to 4 a second, also the rate while the
panel is closed), so streaming keeps to ~5 % of the page's main thread on any device and under any load. Any other
change (a new message, the composer, a confirmation, the end of the answer) renders on the next frame.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..store import Store
from .dom import Listeners

log = logging.getLogger("widget")

#: Which parts of the bar each store change makes dirty.
KINDS: dict[str, tuple[str, ...]] = {
    "messages": ("messages", "composer"),
    "streaming": ("streaming", "composer"),
    "calls": ("streaming",),
    "activity": ("activity",),
    "connection": ("status", "composer"),
    "role": ("status", "composer"),
    "confirmations": ("confirmations", "composer"),
    "ask_user": ("ask_user", "composer"),
    "waiting": ("composer",),
    "notice": ("status",),
    "context_resolutions": ("composer",),
    "actions": ("messages",),
    "history": ("history",),
    "starters": ("starters",),
}

#: Dirty parts a streamed chunk makes (the composer's signature only changes when streaming starts or ends).
STREAM_ONLY = frozenset({"streaming", "composer"})


class Frames:
    """The dirty set, the pending animation frame or streaming timer, and what streaming renders cost.

    It gets the page's ``js`` and the bar's listeners (its callbacks are counted proxies), the store (whether an
    answer streams) and the bar's operations it drives: whether the panel is open, ``flush`` (render the dirty parts
    now: looked up on the bar at each frame, a test may wrap it), ``render(dirty)`` and ``prepare_stream``.
    """

    #: While an answer streams, render its text at most this often (ms); other changes render on the next frame.
    STREAM_RENDER_INTERVAL_MS = 100.0
    #: ... and wait at least this many times as long as a streaming render took (a moving average of the part
    #: Python sees: Markdown, sanitizing, DOM writes, the forced layout of scrolling; 2.5–3 ms on an idle 2-core
    #: machine, so 8–10 renders a second there). Paint, compositing and the scroll event's frame come on top (a
    #: render costs the main thread ~2× what Python sees), so streaming renders keep to ~5 % of the main thread,
    #: whatever the device or its load ...
    STREAM_RENDER_COST_FACTOR = 40.0
    #: ... but never longer than this (ms), which is also the interval while the panel is closed.
    STREAM_RENDER_MAX_INTERVAL_MS = 250.0

    def __init__(
        self,
        js: Any,
        listeners: Listeners,
        store: Store,
        *,
        is_open: Callable[[], bool],
        flush: Callable[[], None],
        render: Callable[[set[str]], None],
        prepare_stream: Callable[[], float | None],
    ) -> None:
        self._store = store
        self._is_open = is_open
        self._flush = flush
        self._render = render
        self._prepare_stream = prepare_stream
        self.dirty: set[str] = set()
        self.frame: Any = None
        self.timer: Any = None  # setTimeout id deferring the next streaming-only frame
        self.last_stream_render = -1e9  # time.monotonic() (s) of the last frame that rendered the stream
        self.stream_render_ms = 0.0  # moving average of what a streaming-only frame took
        self.in_frame = False  # flush() runs from the animation frame (not a direct call)
        self.prepared_ms = 0.0  # what preparing the next streaming render took, outside its frame
        self.stream_behind = False  # the frame showed a prepared render older than the store's text
        self.destroyed = False
        self._frame_cb = listeners.proxy(self._on_frame)
        self._timer_cb = listeners.proxy(self._on_timer)
        # Looked up once: every attribute read on a JS object is a crossing (~0.05 ms on a cold call path).
        self._raf, self._caf = js.requestAnimationFrame, js.cancelAnimationFrame
        self._set_timeout, self._clear_timeout = js.setTimeout, js.clearTimeout

    @property
    def stream_interval_ms(self) -> float:
        """How long streamed text waits between renders now (ms): the base interval, longer when renders are costly
        or nobody sees them (the panel is closed; opening it renders at once)."""
        if not self._is_open():
            return self.STREAM_RENDER_MAX_INTERVAL_MS
        return min(self.STREAM_RENDER_MAX_INTERVAL_MS,
                   max(self.STREAM_RENDER_INTERVAL_MS, self.STREAM_RENDER_COST_FACTOR * self.stream_render_ms))

    def on_store(self, what: str) -> None:
        """A store change: mark its parts dirty and ask for a frame (or, for one more chunk, a timer)."""
        self.dirty.update(KINDS.get(what, ("status",)))
        if self.frame is not None or self.destroyed:
            return
        if what == "streaming" and self.dirty <= STREAM_ONLY and self._store.is_streaming:
            # One more chunk: wait out the interval since the last streaming render (a timer, not a frame per
            # chunk), so the chunks in between are rendered together. Within a frame of it, the next animation
            # frame is soon enough.
            wait = self.last_stream_render + self.stream_interval_ms / 1000 - time.monotonic()
            if wait > 0.016:
                if self.timer is None:
                    self.timer = self._set_timeout(self._timer_cb, wait * 1000)
                return
            self.request(prepare=True)
            return
        self.request()

    def request(self, prepare: bool = False) -> None:
        """Ask for an animation frame (once); ``prepare`` renders the streaming Markdown now, outside it."""
        self.cancel_timer()
        if self.frame is None and not self.destroyed:
            if prepare:
                took = self._prepare_stream()
                if took is not None:
                    self.prepared_ms = took
            self.frame = self._raf(self._frame_cb)

    def cancel_timer(self) -> None:
        """Drop the deferred streaming frame (everything dirty renders now, or never)."""
        if self.timer is not None:
            self._clear_timeout(self.timer)
            self.timer = None

    def _on_timer(self) -> None:
        self.timer = None
        if self.dirty:
            self.request(prepare=self.dirty <= STREAM_ONLY)

    def _on_frame(self, timestamp: Any = None) -> None:
        self.frame = None
        self.in_frame = True
        try:
            self._flush()  # the bar's, looked up on it each time: a test may wrap it
        except Exception:
            log.exception("bar render failed")
        finally:
            self.in_frame = False
        if self.stream_behind:  # newer text came in after the render was prepared: it waits for the next one
            self.stream_behind = False
            self.on_store("streaming")

    def flush(self) -> None:
        """Render every dirty part now, and learn what a streaming-only render costs."""
        if self.destroyed or not self.dirty:
            return
        dirty, self.dirty = self.dirty, set()
        self.cancel_timer()
        started = time.monotonic()
        self._render(dirty)
        streamed = self._store.streaming_message
        if ("streaming" in dirty or "messages" in dirty) and streamed is not None and streamed.get("content"):
            # Text was rendered (a "Thinking…" frame does not count: the first words go out at once).
            self.last_stream_render = now = time.monotonic()
            if dirty <= STREAM_ONLY:
                took = (now - started) * 1000 + self.prepared_ms
                self.stream_render_ms += (took - self.stream_render_ms) * 0.25
        self.prepared_ms = 0.0

    def close(self) -> None:
        """Cancel the pending frame and timer; nothing renders after this."""
        self.destroyed = True
        if self.frame is not None:
            self._caf(self.frame)
            self.frame = None
        self.cancel_timer()

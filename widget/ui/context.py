"""What the bar gives its parts: the element factories, its shadow root and a few of its operations.

Parts never get the bar (``widget.ui.bar`` imports every part; no part imports it, not even for a type). Each part
gets a ``PartContext`` with what nearly every part uses, the slice of the store it reads (the ``Store``, or one of
its parts such as ``store.history``), the sibling parts it renders into, and callbacks for the other few bar
operations it triggers (open the bar, scroll to the end on the next render, render now). The panel's event
handlers (``widget.ui.events``) dispatch to the parts and trigger the bar's own operations through ``Shell``.

Teardown stays cycle-free: a part may point at the bar only through these callbacks and at other parts one way
(a tree), so once ``Bar.destroy`` drops its parts, reference counting alone frees them and the bar.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from .dom import Dom

#: Run a store action in the background (the bar keeps the task and cancels it on teardown).
Spawn = Callable[[Coroutine[Any, Any, Any]], None]


@dataclass(frozen=True)
class PartContext:
    """What nearly every part uses: element factories and labels, the shadow root (what has the focus, an element
    by id), running a store action and moving the focus to the composer (where it goes when what had it leaves)."""

    dom: Dom
    #: The bar's shadow root.
    root: Any
    spawn: Spawn
    focus_composer: Callable[[], None]


@dataclass(frozen=True)
class Opener:
    """For a part that asks for the reader's attention (a confirmation, an ask-user prompt): open the bar."""

    is_open: Callable[[], bool]
    open: Callable[[], None]


class Shell(Protocol):
    """The bar's own operations the panel's event handlers trigger (``Bar`` has them)."""

    #: What the connection error's Retry calls (None: no such button).
    on_retry: Callable[[], Any] | None

    @property
    def activity_open(self) -> bool: ...

    def close(self) -> None: ...

    def toggle_open(self) -> None: ...

    def reader_acted(self) -> None: ...

    def show_activity(self, show: bool) -> None: ...

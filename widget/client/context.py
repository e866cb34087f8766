"""The page context mirrored to ``/autopilot/context``, and context resolutions: holds on the function responses
until the page's own state has caught up (the session withholds the responses while one is outstanding)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..core.session import ClientSession, Effect


@dataclass(frozen=True)
class PageContextDeps:
    """What the page context uses: the session and its driver's hooks (the part's context object; "Deps",
    as "context" is already its subject)."""

    core: ClientSession
    apply: Callable[[list[Effect]], None]
    now: Callable[[], float]
    reschedule: Callable[[], None]


class PageContext:
    """``set_context``, ``update_context`` and the context resolutions of ``AutopilotClient``."""

    def __init__(self, ctx: PageContextDeps) -> None:
        self._ctx = ctx

    def set(self, context: dict[str, Any]) -> None:
        """See ``AutopilotClient.set_context``."""
        self._ctx.core.state.set_context(context, self._ctx.now())
        self._ctx.reschedule()

    def update(self, partial: dict[str, Any]) -> None:
        """See ``AutopilotClient.update_context``."""
        self._ctx.core.state.update_context(partial, self._ctx.now())
        self._ctx.reschedule()

    def begin_resolution(self, label: str) -> Callable[[], None]:
        """See ``AutopilotClient.begin_context_resolution``."""
        ctx = self._ctx
        rid, effects = ctx.core.begin_resolution(label)
        ctx.apply(effects)

        def release() -> None:
            ctx.apply(ctx.core.end_resolution(rid, ctx.now()))

        return release

    def hold_until(self, awaitable: Awaitable[Any], label: str) -> asyncio.Future[Any]:
        """See ``AutopilotClient.hold_context_until``."""
        release = self.begin_resolution(label)

        async def run() -> Any:
            try:
                return await awaitable
            finally:
                release()

        return asyncio.ensure_future(run())

"""What the sans-I/O client session asks its driver to do (its effects), and the options it reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from .. import protocol as P
from ..protocol import ClientEvent


class CallToRun(TypedDict):
    """A page function call handed to the driver: from ``function_call.begin`` or a ``pending_calls`` list."""

    id: str
    name: str
    arguments: Any


@dataclass(frozen=True)
class Send:
    """Emit ``event`` with ``payload``; report its acknowledgement under ``tag``."""

    event: str
    payload: dict[str, Any]
    tag: str


@dataclass(frozen=True)
class Notify:
    """Deliver a client event to page listeners."""

    #: A ``ClientEvent``, or a sequenced relay event re-emitted under its wire name.
    event: ClientEvent | str
    payload: Any = None


@dataclass(frozen=True)
class RunCall:
    """Run this page function call (``{id, name, arguments}``)."""

    call: CallToRun


@dataclass(frozen=True)
class EndCall:
    """The relay ended a call still running here: a confirmation it waits on is void."""

    call_id: str


@dataclass(frozen=True)
class Rejoin:
    """The socket came back on its own: read the conversation again and join."""


Effect = Send | Notify | RunCall | EndCall | Rejoin


@dataclass
class Options:
    """The ``connect()`` options the protocol logic reads."""

    sync_state_before_function_response: bool = True
    sync_state_before_function_response_timeout_ms: float = P.SYNC_STATE_BEFORE_FUNCTION_RESPONSE_TIMEOUT_MS
    context_resolution_timeout_ms: float = P.CONTEXT_RESOLUTION_TIMEOUT_MS


@dataclass
class FlushResult:
    """What a forced flush did: the effects to perform, the patch tag to wait on, whether every part went."""

    effects: list[Effect]
    tag: str | None
    complete: bool

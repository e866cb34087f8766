"""Every message of the relay integration tests, checked against the protocol's schemas.

``checked_traffic`` (autouse for the modules in ``CHECKED_MODULES``) wraps the test clients' transports -
python-socketio's ``AsyncClient`` (``call``/``emit`` acks and every event received) and aiohttp's
``ClientSession`` (requests and responses of the relay's HTTP API) - and fails the test when a message
breaks its schema: any event or ack the relay sends, any HTTP response it gives, and any client payload the
relay *accepted* (refused ones are the tests of refusals).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import socketio

from widget.relay.http import contract as C

#: Test modules whose traffic is checked (relay integration tests and the conformance suite).
CHECKED_MODULES = {
    "test_relay",
    "test_relay_tools",
    "test_relay_turns",
    "test_relay_hardening",
    "test_client_relay",
    "test_conformance",
    "test_conformance_scale",
    "test_relay_mcp",
    "test_relay_store",
    "test_relay_summaries",
}
#: Socket.IO's own pseudo-events, not protocol messages.
_INTERNAL = {"connect", "disconnect", "connect_error", "__disconnect_final"}


@dataclass
class Traffic:
    """What was checked, and what broke its schema."""

    checked: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def note(
        self, what: str, problems: list[C.Problem], value: Any, schema: tuple[str, str, str] | None = None
    ) -> None:
        self.checked[what.split(" ")[0]] += 1
        for p in problems:
            self.problems.append(f"{what}: {p} in {json.dumps(value, default=str)[:300]}")
        if schema is not None and C.jsonschema_validator(*schema).is_valid(value) != (not problems):
            # The relay's fast checker and jsonschema must give the same verdict on every message.
            self.problems.append(
                f"{what}: the fast checker and jsonschema disagree on {json.dumps(value, default=str)[:300]}"
            )

    def incoming(self, event: str, args: tuple[Any, ...]) -> None:
        if event in _INTERNAL:
            return
        if len(args) != 1:
            self.problems.append(f"event {event!r} carries {len(args)} arguments (one object expected)")
            return
        known = event in C.S.EVENT_BY_NAME
        self.note(
            f"event {event}", C.check_event(event, args[0]), args[0], ("event", event, "payload") if known else None
        )

    def ack(self, event: str, data: Any, ack: Any) -> None:
        if event not in C.S.EVENT_BY_NAME or C.S.EVENT_BY_NAME[event].from_relay:
            return  # a test sending a name outside the protocol on purpose
        refusal = isinstance(ack, dict) and ack.get("ok") is False
        ack_type = "ErrorAck" if refusal else C.S.EVENT_BY_NAME[event].ack.__name__
        self.note(f"ack {event}", C.check_ack(event, ack), ack, ("def", ack_type, ""))
        # Every payload sent, accepted or not: the relay's checker and jsonschema must give the same verdict.
        problems = C.check_payload(event, data)
        if C.jsonschema_validator("event", event, "payload").is_valid(data) != (not problems):
            self.problems.append(f"payload {event}: the fast checker and jsonschema disagree on {str(data)[:300]}")
        if isinstance(ack, dict) and ack.get("ok") is True:
            self.note(f"payload {event} (accepted)", problems, data)

    def http(self, method: str, path: str, status: int, request: Any, body: Any) -> None:
        op = C.operation_for(method, path)
        if op is None:
            return
        has_body = C.schema_bundle()["x-http"][op]["responses"].get(str(status)) is not None
        self.note(
            f"http {op} {status}", C.check_http(op, status, body), body, ("http", op, str(status)) if has_body else None
        )
        if 200 <= status < 300 and request is not None:
            self.note(
                f"http {op} request",
                C.check_http(op, status, request, request=True),
                request,
                ("http", op, "body") if "body" in C.schema_bundle()["x-http"][op] else None,
            )


@pytest.fixture(autouse=True)
def checked_traffic(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Traffic | None]:
    """Check the test's Socket.IO and HTTP traffic against the schemas (only in ``CHECKED_MODULES``)."""
    if request.module.__name__.rsplit(".", 1)[-1] not in CHECKED_MODULES:
        yield None
        return
    traffic = Traffic()
    trigger, call, emit, send = (
        socketio.AsyncClient._trigger_event,
        socketio.AsyncClient.call,
        socketio.AsyncClient.emit,
        aiohttp.ClientSession._request,
    )

    async def _trigger_event(self: Any, event: str, namespace: str, *args: Any) -> Any:
        traffic.incoming(event, args)
        return await trigger(self, event, namespace, *args)

    async def _call(self: Any, event: str, data: Any = None, *a: Any, **kw: Any) -> Any:
        ack = await call(self, event, data, *a, **kw)
        traffic.ack(event, data, ack)
        return ack

    async def _emit(self: Any, event: str, data: Any = None, namespace: Any = None, callback: Any = None) -> Any:
        if callback is not None:
            inner = callback

            def callback(*args: Any) -> Any:
                traffic.ack(event, data, args[0] if len(args) == 1 else list(args))
                return inner(*args)

        return await emit(self, event, data, namespace=namespace, callback=callback)

    async def _request(self: Any, method: str, url: Any, **kw: Any) -> Any:
        resp = await send(self, method, url, **kw)
        try:
            raw = await resp.read()
        except Exception:  # noqa: BLE001 - the test sees the failure itself
            return resp
        body: Any = None
        if raw and "json" in (resp.content_type or ""):
            try:
                body = json.loads(raw)
            except ValueError:
                traffic.problems.append(f"http {method} {resp.url.path} {resp.status}: body is not JSON")
                return resp
        req = kw.get("json")
        if req is None and isinstance(kw.get("data"), (bytes, str)):
            try:
                req = json.loads(kw["data"])
            except ValueError:
                req = None
        traffic.http(method, resp.url.path, resp.status, req, body)
        return resp

    monkeypatch.setattr(socketio.AsyncClient, "_trigger_event", _trigger_event)
    monkeypatch.setattr(socketio.AsyncClient, "call", _call)
    monkeypatch.setattr(socketio.AsyncClient, "emit", _emit)
    monkeypatch.setattr(aiohttp.ClientSession, "_request", _request)
    yield traffic
    if traffic.problems:
        shown = "\n".join(traffic.problems[:20])
        pytest.fail(f"{len(traffic.problems)} message(s) broke the protocol's schemas:\n{shown}", pytrace=False)

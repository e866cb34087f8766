"""The CPython client against the real relay (subprocess) over real Socket.IO: create, read, join, sync, and a turn."""

from __future__ import annotations

import asyncio

import pytest

from widget import AutopilotClient, ConnectionFailed, ProtocolError
from widget import protocol as P
from widget.transports.python_socketio import PythonSocketIOTransport

pytestmark = pytest.mark.relay


def make_client(relay_server, **kw) -> AutopilotClient:
    return AutopilotClient(PythonSocketIOTransport(), headers={"Origin": relay_server.url}, **kw)


async def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


async def test_connect_sync_and_a_function_call_turn(relay_server):
    client = make_client(relay_server)
    calls = []

    @client.function
    def get_weather(city: str) -> dict:
        """Current weather of a city."""
        calls.append(city)
        client.update_context({"last_city": city})
        return {"city": city, "temp_c": 21}

    client.set_context({"page": "/weather"})
    finished = asyncio.Event()
    client.on("completion.finished", lambda p: finished.set())
    try:
        conv = await client.connect(relay_url=relay_server.url, app_id="demo")
        assert conv["id"].startswith("c_")
        assert client.connection_state == "connected" and client.active
        await client.send_message('please call get_weather {"city": "Oslo"}')
        await asyncio.wait_for(finished.wait(), 20)
        assert calls == ["Oslo"]
        record = client.get_function_call_history()[0]
        assert record["name"] == "get_weather" and record["status"] == "success"
        assert record["totalMs"] >= record["handlerMs"]
        # The handler dirtied the context: the gate committed it before the response went out.
        assert record["totalMs"] > 0
        final = client.messages[-1]
        assert final["role"] == "assistant" and "Oslo" in final["content"]
    finally:
        await client.disconnect()

    # A reload (new client, same storage) resumes the conversation and sees the stored messages.
    again = make_client(relay_server, storage=client.storage)
    try:
        conv2 = await again.connect(relay_url=relay_server.url, app_id="demo")
        assert conv2["id"] == conv["id"]
        roles = [m["role"] for m in again.messages]
        assert "user" in roles and "assistant" in roles and "tool" in roles
        tool = next(m for m in again.messages if m["role"] == "tool")
        assert tool["result"] == {"city": "Oslo", "temp_c": 21}
        assert tool["total_ms"] is not None  # the client's timings are stored with the result
    finally:
        await again.disconnect()


async def test_wrong_relay_url_is_a_clear_error_not_a_hang(relay_server):
    from support import free_port

    client = make_client(relay_server, step_timeout_s=5)
    with pytest.raises(ConnectionFailed, match="Cannot reach the relay"):
        await client.connect(relay_url=f"http://127.0.0.1:{free_port()}", app_id="demo")
    assert client.connection_state == "error"


async def test_unknown_conversation_url_and_unknown_app(relay_server):
    client = make_client(relay_server)
    with pytest.raises(ProtocolError) as info:
        await client.connect(relay_url=relay_server.url, app_id="no-such-app")
    assert info.value.code == P.ErrorCode.NOT_FOUND


async def test_version_mismatch_is_refused_with_both_versions(relay_server, monkeypatch):
    client = make_client(relay_server)
    monkeypatch.setattr(P, "PROTOCOL_VERSION", 99)
    try:
        with pytest.raises(ProtocolError) as info:
            await client.connect(relay_url=relay_server.url, app_id="demo")
        assert info.value.code == P.ErrorCode.VERSION_MISMATCH
        assert "99" in info.value.message and "1" in info.value.message
    finally:
        await client.disconnect()


async def test_browser_create_without_allowed_origin_is_refused(relay_server):
    client = AutopilotClient(PythonSocketIOTransport(), headers={"Origin": "https://evil.example"})
    with pytest.raises(ProtocolError) as info:
        await client.connect(relay_url=relay_server.url, app_id="demo")
    assert info.value.code == P.ErrorCode.FORBIDDEN_ORIGIN


async def test_model_error_then_retry_and_regenerate(relay_server):
    client = make_client(relay_server)
    finished: list[dict] = []
    client.on("completion.finished", finished.append)
    try:
        await client.connect(relay_url=relay_server.url, app_id="demo")
        await client.send_message("simulate model error always, please")
        await wait_for(lambda: finished and finished[-1]["status"] == "failed")
        errors = [m for m in client.messages if m["role"] == "error"]
        assert errors and errors[-1]["retryable"] is True
        with pytest.raises(ProtocolError) as info:
            await client.send_message("x" * (P.MAX_USER_MESSAGE_CHARS + 1))
        assert info.value.code == P.ErrorCode.MESSAGE_TOO_LONG
        # Retry withdraws the error message; the demo model fails again on the same text, deterministically.
        n = len(finished)
        await client.retry()
        await wait_for(lambda: len(finished) > n)
        assert [m for m in client.messages if m["role"] == "error"][-1]["id"] != errors[-1]["id"]
        # A good turn, then regenerate: the old answer is withdrawn and replaced.
        n = len(finished)
        await client.send_message("hello there")
        await wait_for(lambda: len(finished) > n and finished[-1]["status"] == "done")
        old = client.messages[-1]
        n = len(finished)
        await client.regenerate()
        await wait_for(lambda: len(finished) > n)
        ids = [m["id"] for m in client.messages]
        assert old["id"] not in ids and client.messages[-1]["role"] == "assistant"
        # The live list equals what a reload shows.
        fresh = make_client(relay_server, storage=client.storage)
        await fresh.connect(relay_url=relay_server.url, app_id="demo")
        assert [m["id"] for m in fresh.messages] == ids
        await fresh.disconnect()
    finally:
        await client.disconnect()


async def test_join_after_opens_the_socket_first_and_joins_with_what_was_registered_meanwhile(relay_server):
    """``join_after``: the conversation is read and the socket opened at once; the join and the first state sync
    wait, so a function registered meanwhile is in the initial patch, and the relay already sees it."""
    client = make_client(relay_server)
    gate = asyncio.get_running_loop().create_future()
    connecting = asyncio.ensure_future(client.connect(relay_url=relay_server.url, app_id="demo", join_after=gate))
    try:
        await wait_for(lambda: client.transport.connected)
        await asyncio.sleep(0.2)
        assert client.connection_state == "connecting" and not connecting.done()

        @client.function
        def late(n: int) -> int:
            """Registered while the socket was already open."""
            return n + 1

        gate.set_result(None)
        await asyncio.wait_for(connecting, 10)
        assert client.connection_state == "connected"
        # The initial sync (acknowledged before connect() returns) carried it.
        assert "late" in (client.state.acked or {})["autopilot"]["functions"]
        finished = asyncio.Event()
        client.on("completion.finished", lambda p: finished.set())
        await client.send_message('call late {"n": 41}')
        await asyncio.wait_for(finished.wait(), 20)
        record = client.get_function_call_history()[0]
        assert record["name"] == "late" and record["status"] == "success"
    finally:
        connecting.cancel()
        await client.disconnect()


async def test_connect_again_after_disconnect_joins_once(relay_server, caplog):
    """A client reconnected by ``connect()`` after ``disconnect()`` joins once; no background task fails."""
    client = make_client(relay_server)
    joins: list[str] = []
    client.on("joined", lambda p: joins.append(p["conversation_id"]))
    try:
        await client.connect(relay_url=relay_server.url, app_id="demo")
        await client.disconnect()
        with caplog.at_level("ERROR", logger="widget"):
            await client.connect(relay_url=relay_server.url, app_id="demo")
            await asyncio.sleep(0.5)
        assert len(joins) == 2 and joins[0] == joins[1]
        assert client.connection_state == "connected"
        assert not [r for r in caplog.records if "task failed" in r.getMessage()]
    finally:
        await client.disconnect()


async def test_use_here_runs_the_call_the_activate_hands_over(relay_server):
    """A call left pending by the active tab that went away is run by the tab that takes the role ("Use here")."""
    here = make_client(relay_server)
    runs: list[str] = []

    @here.function
    def stock_level(sku: str) -> dict:
        """Stock of one product."""
        runs.append(sku)
        return {"sku": sku, "units": 7}

    gone = make_client(relay_server)
    started = asyncio.Event()
    never = asyncio.get_running_loop().create_future()

    @gone.function
    async def stock_level(sku: str) -> dict:  # noqa: F811 - the same function on the other tab
        """Stock of one product."""
        started.set()
        await never  # this tab goes away before it answers
        return {}

    finished = asyncio.Event()
    here.on("completion.finished", lambda p: finished.set())
    try:
        await here.connect(relay_url=relay_server.url, app_id="demo")
        gone.storage = here.storage
        await gone.connect(relay_url=relay_server.url, app_id="demo")  # the newest tab is the active one
        await wait_for(lambda: gone.active and not here.active)
        await gone.send_message('stock_level {"sku": "A-1"}')
        await asyncio.wait_for(started.wait(), 20)
        await gone.disconnect()
        await here.activate()
        await asyncio.wait_for(finished.wait(), 20)
        assert runs == ["A-1"]
        record = here.get_function_call_history()[0]
        assert record["status"] == "success" and record["respondedAt"] is not None
    finally:
        never.cancel()
        await gone.disconnect()
        await here.disconnect()


async def test_use_here_puts_back_this_pages_functions(relay_server):
    """Another tab wrote its own catalogue meanwhile: after "Use here" the relay holds this page's again."""
    here = make_client(relay_server)

    @here.function
    def mine(n: int) -> int:
        """This page's function."""
        return n

    other = make_client(relay_server)

    @other.function
    def theirs(n: int) -> int:
        """The other tab's function."""
        return n

    errors: list[dict] = []
    here.on("stateError", errors.append)
    try:
        await here.connect(relay_url=relay_server.url, app_id="demo")
        other.storage = here.storage
        await other.connect(relay_url=relay_server.url, app_id="demo")
        await wait_for(lambda: not here.active)
        assert list((other.state.acked or {})["autopilot"]["functions"]) == ["theirs"]
        patches: list[tuple[list, object]] = []
        emit = here.transport.emit

        async def recording(event, data, timeout=None):
            ack = await emit(event, data, timeout)
            if event == P.Event.STATE_PATCH:
                patches.append((data["patch"], ack))
            return ack

        here.transport.emit = recording  # type: ignore[method-assign]
        await here.activate()
        await wait_for(lambda: bool(patches))
        ops = sorted((op["op"], op["path"]) for op in patches[0][0])
        assert ops == [("add", "/autopilot/functions/mine"), ("remove", "/autopilot/functions/theirs")]
        assert patches[0][1] == {"ok": True} and errors == []
    finally:
        await other.disconnect()
        await here.disconnect()

"""Ask user end to end with the CPython client against a real relay whose app has the Ask User preset on."""

from __future__ import annotations

import asyncio

import pytest
from relay_helpers import ASK_SECRET, launch

from widget import AutopilotClient, ConfigError
from widget.transports.python_socketio import PythonSocketIOTransport

pytestmark = pytest.mark.relay


@pytest.fixture
async def ask_relay(tmp_path):
    handle = await launch(tmp_path)
    yield handle
    await handle.stop()


def backend_client(**kw) -> AutopilotClient:
    # A site's backend creates conversations with the app secret, not by Origin.
    return AutopilotClient(PythonSocketIOTransport(), headers={"Authorization": f"Bearer {ASK_SECRET}"}, **kw)


async def test_prompt_suspends_turn_survives_reload_and_answers_resume(ask_relay):
    client = backend_client()
    required = asyncio.Event()
    client.on("askUserRequired", lambda p: required.set())
    cleared = []
    client.on("askUserCleared", cleared.append)
    finished = asyncio.Event()
    client.on("completion.finished", lambda p: finished.set())
    try:
        await client.connect(relay_url=ask_relay.url, app_id="ask")
        await client.send_message("please ask me something")
        await asyncio.wait_for(required.wait(), 10)
        prompts = client.get_pending_ask_user()
        assert len(prompts) == 1 and prompts[0]["type"] == "radiolist"

        # A reload while suspended re-surfaces the prompt from the conversation GET.
        reloaded = backend_client(storage=client.storage)
        await reloaded.connect(relay_url=ask_relay.url, app_id="ask")
        assert [p["id"] for p in reloaded.get_pending_ask_user()] == [prompts[0]["id"]]
        await reloaded.disconnect()

        with pytest.raises(ConfigError, match="one of"):
            await client.respond_to_ask_user({"id": prompts[0]["id"], "result": "purple"})
        await client.respond_to_ask_user({"id": prompts[0]["id"], "result": "blue"})
        assert client.get_pending_ask_user() == [] and cleared
        await asyncio.wait_for(finished.wait(), 10)
        assert "blue" in client.messages[-1]["content"]
    finally:
        await client.disconnect()

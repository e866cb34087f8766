"""More flows: retry and regenerate, ask-user, tools, actions, the active client, idempotency."""

from __future__ import annotations

from typing import Any

from ..protocol import Event
from .flows import (
    ACTION,
    FUNC,
    TOOL,
    Options,
    declare,
    flow,
    key,
    plain_round,
    round_start,
    send,
    turn_end,
)
from .peer import Peer, Relay, Skipped, accepted, check, refused


async def _failed_turn(peer: Peer) -> tuple[str, str]:
    """A turn whose model fails before its first chunk: an ``error`` message, then ``completion.finished {failed}``
    and ``user_input``. ``(turn_id, error message id)``."""
    ev = await peer.expect(Event.MESSAGE)
    err = ev["message"]
    check(
        err.get("role") == "error"
        and err.get("code") == "model_error"
        and err.get("retryable") is True
        and isinstance(err.get("content"), str),
        f"the failed turn's error message: {err!r}",
    )
    done = await peer.expect(Event.COMPLETION_FINISHED, status="failed")
    await peer.expect(Event.USER_INPUT, reason="message")
    return done["turn_id"], err["id"]


@flow("retry_regenerate")
async def retry_regenerate_flow(r: Relay, o: Options) -> None:
    """A failed turn, ``retry`` (same turn, its error withdrawn), ``regenerate`` (a new turn), ``nothing_to_retry``."""
    url = await r.create()
    peer, _ = await r.peer(url)
    try:
        refused(
            await peer.call(Event.REGENERATE, {"idempotency_key": key()}),
            "nothing_to_retry",
            "regenerate, no message yet",
        )
        await send(peer, "simulate model error always")
        tid, err_id = await _failed_turn(peer)
        check((await r.get(url))["conversation"]["status"] == "failed", "a failed turn leaves the conversation failed")
        ack = await peer.call(Event.RETRY, {"idempotency_key": key()})
        check(ack == {"ok": True, "turn_id": tid}, f"retry goes on with the failed turn: {ack!r}")
        await peer.expect(Event.MESSAGES_WITHDRAWN, message_ids=[err_id], reason="retry", turn_id=tid)
        tid2, err2 = await _failed_turn(peer)
        check(tid2 == tid and err2 != err_id, "the retried turn keeps its id and stores a new error")
        url = await r.create()
        await peer.close()
        peer, _ = await r.peer(url)
        refused(await peer.call(Event.RETRY, {"idempotency_key": key()}), "nothing_to_retry", "retry, nothing failed")
        await send(peer, "hello")
        tid, aid, _ = await plain_round(peer)
        await turn_end(peer, tid)
        refused(await peer.call(Event.RETRY, {"idempotency_key": key()}), "nothing_to_retry", "retry after a done turn")
        ack = accepted(await peer.call(Event.REGENERATE, {"idempotency_key": key()}), "regenerate")
        check(set(ack) == {"ok", "turn_id"} and ack["turn_id"] != tid, f"regenerate starts a new turn: {ack!r}")
        await peer.expect(Event.MESSAGES_WITHDRAWN, message_ids=[aid], reason="regenerate", turn_id=ack["turn_id"])
        _, aid2, _ = await plain_round(peer, ack["turn_id"])
        await turn_end(peer, ack["turn_id"])
        check(aid2 != aid, "the new answer is a new message")
        msgs = (await r.get(url))["messages"]
        check(
            [m["role"] for m in msgs] == ["user", "assistant"] and msgs[1]["id"] == aid2,
            f"GET shows the replacement only: {msgs!r}",
        )
    finally:
        await peer.close()


@flow("ask_user")
async def ask_user_flow(r: Relay, o: Options) -> str | None:
    """The model asks (``ask_user.request``, ``user_input {ask_user}``); answers are checked, then the turn resumes."""
    if o.ask_app is None:
        raise Skipped("no --ask-app (an app with the ask-user preset on)")
    url = await r.create(o.ask_app, o.ask_secret)
    peer, _ = await r.peer(url)
    try:
        await send(peer, "ask me")
        tid, mid, text = await round_start(peer)
        ended = await peer.expect(Event.COMPLETION_ENDED)
        check(
            ended["message"]["id"] == mid and ended["message"]["content"] == text and ended["tool_messages"] == [],
            f"the asking round: {ended!r}",
        )
        req = await peer.expect(Event.ASK_USER_REQUEST)
        [prompt] = req["prompts"]
        check(
            prompt.get("type") == "radiolist"
            and [o_["value"] for o_ in prompt["arguments"]["options"]] == ["blue", "green", "red"],
            f"the demo model's prompt: {prompt!r}",
        )
        await peer.expect(Event.USER_INPUT, reason="ask_user")
        info = await r.get(url)
        check(
            info["conversation"]["status"] == "WAITING_FOR_ASK_USER" and info.get("pending_ask_user") == [prompt],
            f"GET while suspended: {info['conversation']!r} {info.get('pending_ask_user')!r}",
        )
        refused(
            await peer.call(Event.USER_MESSAGE, {"text": "x", "idempotency_key": key()}),
            "busy",
            "a message while suspended",
        )
        for body, what in (
            ({"answers": [{"id": prompt["id"], "result": "purple"}]}, "a value that is not an option"),
            ({"answers": [{"id": "call_unknown", "result": "blue"}]}, "an unknown prompt id"),
            ({"answers": [{"id": prompt["id"]}]}, "an answer without result"),
        ):
            status, err, _ = await r.request("POST", f"{url}/ask_user", json=body)
            check(
                status == 400 and err["error"]["code"] == "bad_request",
                f"{what}: 400 bad_request, got {status} {err!r}",
            )
        answer = {"answers": {"id": prompt["id"], "result": "green"}, "idempotency_key": key("ask")}
        status, body, _ = await r.request("POST", f"{url}/ask_user", json=answer)
        check(status == 200 and body["ok"] is True and "pending_ask_user" not in body, f"the answer: {status} {body!r}")
        tool = (await peer.expect(Event.MESSAGE))["message"]
        check(
            tool.get("role") == "tool"
            and tool.get("function_call_id") == prompt["id"]
            and tool.get("result") == "green"
            and tool.get("kind") == "relay",
            f"the answer's tool message: {tool!r}",
        )
        await peer.expect(Event.FUNCTION_CALL_ITERATION, turn_id=tid, iteration=1)
        await plain_round(peer, tid)
        await turn_end(peer, tid)
        status, again, _ = await r.request("POST", f"{url}/ask_user", json=answer)
        check(status == 200 and again["ok"] is True, f"a repeat with the same key is answered 200: {status} {again!r}")
        status, err, _ = await r.request("POST", f"{url}/ask_user", json={"answers": answer["answers"]})
        check(status == 400 and err["error"]["code"] == "bad_request", f"a repeat without key: {status} {err!r}")
        await peer.quiet()
        return None
    finally:
        await peer.close()


@flow("tools")
async def tools_flow(r: Relay, o: Options) -> None:
    """A page tool: ``kind: "tool"`` on begin/end; bad arguments answered by the relay; a repeat from the first."""
    url = await r.create()
    peer, _ = await r.peer(url)
    try:
        await declare(peer, TOOL)
        await send(peer, 'plan_limits {"plan": "pro"}')
        tid, mid, _ = await round_start(peer)
        begin = await peer.expect(
            Event.FUNCTION_CALL_BEGIN, name="plan_limits", arguments={"plan": "pro"}, kind="tool", run=True
        )
        ack = await peer.call(
            Event.FUNCTION_RESPONSE,
            {"id": begin["id"], "status": "success", "result": {"seats": 5}, "idempotency_key": key()},
        )
        check(ack == {"ok": True}, f"function_response: {ack!r}")
        await peer.expect(Event.FUNCTION_CALL_END, id=begin["id"], status="success", result={"seats": 5})
        ended = await peer.expect(Event.COMPLETION_ENDED)
        check([t.get("kind") for t in ended["tool_messages"]] == ["tool"], f"a tool's message has kind tool: {ended!r}")
        await peer.expect(Event.FUNCTION_CALL_ITERATION, turn_id=tid, iteration=1)
        await plain_round(peer, tid)
        await turn_end(peer, tid)
        # Arguments that fail the flat schema: the relay answers, the page is never called.
        await send(peer, 'plan_limits {"plan": "gold"}')
        tid, mid, _ = await round_start(peer)
        ended = await peer.expect(Event.COMPLETION_ENDED)
        check(ended["message"]["id"] == mid, f"completion.ended closes the streamed message: {ended!r}")
        [tm] = ended["tool_messages"]
        check(tm["status"] == "error" and tm["error"].startswith("Invalid arguments:"), f"refused arguments: {tm!r}")
        await peer.expect(Event.FUNCTION_CALL_ITERATION, turn_id=tid, iteration=1)
        await plain_round(peer, tid)
        await turn_end(peer, tid)
        # The same call twice in one round: one begin/end; the second tool message is answered from the first.
        await send(peer, 'plan_limits {"plan": "team"} and plan_limits {"plan": "team"}')
        tid, _mid, _ = await round_start(peer)
        begin = await peer.expect(Event.FUNCTION_CALL_BEGIN, arguments={"plan": "team"})
        await peer.call(
            Event.FUNCTION_RESPONSE, {"id": begin["id"], "status": "success", "result": 1, "idempotency_key": key()}
        )
        await peer.expect(Event.FUNCTION_CALL_END, id=begin["id"])
        ended = await peer.expect(Event.COMPLETION_ENDED)
        first, second = ended["tool_messages"]
        check(
            first["function_call_id"] == begin["id"]
            and second.get("answered_from") == begin["id"]
            and second["result"] == 1,
            f"the repeat is answered from the first: {ended['tool_messages']!r}",
        )
        await peer.expect(Event.FUNCTION_CALL_ITERATION, turn_id=tid, iteration=1)
        await plain_round(peer, tid)
        await turn_end(peer, tid)
    finally:
        await peer.close()


@flow("actions")
async def actions_flow(r: Relay, o: Options) -> None:
    """An offered action on ``completion.ended`` (never in a GET); its outcome recorded once, as an ``action``."""
    url = await r.create()
    peer, _ = await r.peer(url)
    try:
        await declare(peer, ACTION)
        await send(peer, 'offer open_pricing {"plan": "pro"}')
        tid, mid, ended = await plain_round(peer)
        await turn_end(peer, tid)
        [offer] = ended["message"].get("actions") or [None]
        check(
            isinstance(offer, dict)
            and offer["name"] == "open_pricing"
            and offer["arguments"] == {"plan": "pro"}
            and str(offer["id"]).startswith("act_"),
            f"the offer: {ended['message']!r}",
        )
        msgs = (await r.get(url))["messages"]
        check(all("actions" not in m for m in msgs), "a GET never returns actions")
        outcome = {
            "message_id": mid,
            "action_id": offer["id"],
            "name": "open_pricing",
            "arguments": {"plan": "pro"},
            "ok": True,
            "outcome": "Done.",
            "idempotency_key": key("act"),
        }
        ack = accepted(await peer.call(Event.ACTION_OUTCOME, outcome), "action_outcome")
        check(set(ack) == {"ok", "message_id"}, f"action_outcome ack: {ack!r}")
        rec = (await peer.expect(Event.MESSAGE))["message"]
        check(
            rec.get("role") == "action"
            and rec.get("id") == ack["message_id"]
            and rec.get("message_id") == mid
            and rec.get("action_id") == offer["id"]
            and rec.get("ok") is True
            and rec.get("outcome") == "Done.",
            f"the action message: {rec!r}",
        )
        check(await peer.call(Event.ACTION_OUTCOME, outcome) == ack, "a repeat with the same key gets the same ack")
        refused(
            await peer.call(Event.ACTION_OUTCOME, {**outcome, "idempotency_key": key()}),
            "bad_request",
            "a second outcome of a done action",
        )
        refused(
            await peer.call(Event.ACTION_OUTCOME, {**outcome, "action_id": "act_nope", "idempotency_key": key()}),
            "not_found",
            "an action that was not offered",
        )
        await peer.quiet()
    finally:
        await peer.close()


@flow("active_client")
async def active_client_flow(r: Relay, o: Options) -> None:
    """The socket that joined last is active: ``client.role``, ``not_active``, ``run`` on its copy, ``activate``."""
    url = await r.create()
    a, ack_a = await r.peer(url)
    b: Peer | None = None
    try:
        await declare(a, FUNC)
        b, ack_b = await r.peer(url)
        check(ack_a["active"] is True and ack_b["active"] is True, "each join makes its socket active")
        await a.expect(Event.CLIENT_ROLE, active=False, conversation_id=ack_a["conversation_id"])
        refused(
            await a.call(Event.STATE_PATCH, {"patch": [], "idempotency_key": key()}),
            "not_active",
            "a passive socket's patch",
        )
        await send(a, "get_selection")  # any joined socket may send a message
        await b.expect(Event.MESSAGE)
        for peer, run in ((a, False), (b, True)):
            _, _mid, _ = await round_start(peer)
            begin = await peer.expect(Event.FUNCTION_CALL_BEGIN, run=run)
        refused(
            await a.call(
                Event.FUNCTION_RESPONSE, {"id": begin["id"], "status": "success", "result": 1, "idempotency_key": key()}
            ),
            "not_active",
            "an answer from a passive socket",
        )
        ack = await a.call(Event.ACTIVATE, {})
        check(ack.get("ok") is True and ack.get("active") is True, f"activate: {ack!r}")
        pending: list[dict[str, Any]] = ack.get("pending_calls") or []
        await a.expect(Event.STATE)  # after an activate: the stored state, so the page can put its functions back
        await b.expect(Event.CLIENT_ROLE, active=False, conversation_id=ack_a["conversation_id"])
        # The call was sent to b with run: true and b is still connected: it stays b's (a call runs at most once).
        check(
            all(c["id"] != begin["id"] for c in pending),
            f"a call another live socket runs is not handed over: {pending!r}",
        )
        ack = await b.call(
            Event.FUNCTION_RESPONSE, {"id": begin["id"], "status": "success", "result": 2, "idempotency_key": key()}
        )
        check(ack == {"ok": True}, f"the socket running a call may answer it after losing the role: {ack!r}")
        await a.expect(Event.FUNCTION_CALL_END, id=begin["id"], result=2)
    finally:
        await a.close()
        if b is not None:
            await b.close()


@flow("idempotency")
async def idempotency_flow(r: Relay, o: Options) -> None:
    """A write repeated with its idempotency key gets the first ack and is applied once."""
    url = await r.create()
    peer, _ = await r.peer(url)
    try:
        patch = {"patch": [{"op": "add", "path": "/autopilot/context/list", "value": []}], "idempotency_key": key()}
        check(await peer.call(Event.STATE_PATCH, patch) == {"ok": True}, "first patch")
        once = {
            "patch": [{"op": "add", "path": "/autopilot/context/list/-", "value": 1}],
            "idempotency_key": key("once"),
        }
        for _ in range(2):
            check(await peer.call(Event.STATE_PATCH, once) == {"ok": True}, "a repeated patch is acked")
        msg = {"text": "hello twice", "idempotency_key": key("m")}
        first = accepted(await peer.call(Event.USER_MESSAGE, msg), "user_message")
        check(await peer.call(Event.USER_MESSAGE, msg) == first, "a repeated message gets the first ack")
        await peer.expect(Event.MESSAGE)
        tid, _, _ = await plain_round(peer)
        await turn_end(peer, tid)
        await peer.quiet()
        check(
            [m["role"] for m in (await r.get(url))["messages"]] == ["user", "assistant"], "the message is stored once"
        )
        other, _ = await r.peer(url, expect_state=False)
        state = await other.expect(Event.STATE)
        await other.close()
        check(state["context"] == {"list": [1]}, f"the repeated patch was applied once: {state['context']!r}")
    finally:
        await peer.close()

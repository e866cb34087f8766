"""Flows of answers from the site's documentation (docs/protocol.md §8.3): an answer's ``sources``, and an uncited
answer withdrawn (``uncited``). They need an app with a docs index whose model is the demo model (``--docs-app``)
and a question its documentation answers (``--docs-question``)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

from ..protocol import Event
from .flows import FUNC, Options, declare, flow, round_end, round_start, send
from .peer import Peer, Relay, Skipped, check

#: A citation in an answer's text (written out here, not imported: the suite checks the document, not the code).
CITE = re.compile(r"\[([st][1-9][0-9]{0,3})\]")
#: Words no documentation holds (the demo model's search finds nothing, and its answer cites nothing).
NOWHERE = "zqxj vbnwk plmq"


async def _docs_turn(r: Relay, o: Options, question: str) -> tuple[str, Peer, list[tuple[str, dict[str, Any]]]]:
    """A conversation of the docs app (the page declares a function, so the turn has search steps) and one turn
    answering ``question``: ``(url, peer, the turn's events up to user_input)``."""
    if o.docs_app is None:
        raise Skipped("no --docs-app (an app with a docs index and the demo model)")
    url = await r.create(o.docs_app, o.docs_secret)
    peer, _ = await r.peer(url)
    await declare(peer, FUNC)
    await send(peer, question)
    start = peer.cursor
    while True:
        event, data = await peer.next()
        if event == Event.USER_INPUT:
            break
    return url, peer, [(e, d) for e, d in peer.events[start:peer.cursor]]


def _check_search_rounds(events: list[tuple[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Every ``search_docs`` call is answered by the relay (no ``function_call.begin``) with a tool message of kind
    ``relay`` whose result lists sections with their ids; the sections by id."""
    check(not [d for e, d in events if e == Event.FUNCTION_CALL_BEGIN and d.get("name") == "search_docs"],
          "search_docs is answered by the relay: no function_call.begin")
    sections: dict[str, dict[str, Any]] = {}
    for e, d in events:
        if e != Event.COMPLETION_ENDED:
            continue
        for tm in d["tool_messages"]:
            if tm.get("name") != "search_docs":
                continue
            check(tm.get("kind") == "relay" and tm.get("status") == "success", f"a search_docs tool message: {tm!r}")
            result = tm.get("result")
            check(isinstance(result, dict) and isinstance(result.get("sections"), list), f"search_docs result: {tm!r}")
            for s in result["sections"]:
                check(set(s) == {"id", "title", "url", "text"} and re.fullmatch(r"s[1-9][0-9]*", s["id"])
                      is not None, f"a section of a search_docs result: {s!r}")
                check(sections.get(s["id"], s)["url"] == s["url"], f"one id, one section: {s!r}")
                sections[s["id"]] = s
    return sections


@flow("sources")
async def sources_flow(r: Relay, o: Options) -> None:
    """An answer from the docs cites ``[s1]``: ``sources`` on ``completion.ended``, the same in a GET and a replay."""
    url, peer, events = await _docs_turn(r, o, o.docs_question)
    try:
        sections = _check_search_rounds(events)
        finished = [d for e, d in events if e == Event.COMPLETION_FINISHED]
        check(len(finished) == 1 and finished[0]["status"] == "done", f"the turn ends done: {finished!r}")
        check(Event.MESSAGES_WITHDRAWN not in [e for e, _ in events], "a cited answer is not withdrawn")
        final = [d for e, d in events if e == Event.COMPLETION_ENDED][-1]
        msg = final["message"]
        sources = msg.get("sources")
        check(isinstance(sources, list) and len(sources) > 0, f"the answer to {o.docs_question!r} has sources: {msg!r}")
        cited = list(dict.fromkeys(CITE.findall(msg["content"])))
        check([s["id"] for s in sources] == [c for c in cited if c in {s["id"] for s in sources}],
              f"sources in the order of first citation: {sources!r} for {msg['content']!r}")
        for n, s in enumerate(sources, 1):
            check(set(s) <= {"id", "n", "kind", "title", "url"} and s["n"] == n and isinstance(s["title"], str)
                  and s["title"] != "", f"source {n}: {s!r}")
            if s["kind"] == "docs":
                check(isinstance(s.get("url"), str), f"a docs source has a url: {s!r}")
                if s["id"] in sections:
                    check(s["url"].split(":~:")[0] == sections[s["id"]]["url"],
                          f"a docs source's url is its section's (with a text fragment at most): {s!r}")
            else:
                check(s["kind"] == "tool" and "url" not in s, f"a tool source has no url: {s!r}")
        stored = [m for m in (await r.get(url))["messages"] if m["role"] == "assistant"][-1]
        check(stored.get("sources") == sources, f"GET returns the stored sources: {stored!r}")
        again, _ = await r.peer(url, 0)
        try:
            deadline = time.monotonic() + r.timeout
            while not again.replay_done and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            check(bool(again.replay_done), "a join from 0 ends its replay with replay.done")
            replayed = [d for e, d in again.events if e == Event.COMPLETION_ENDED][-1]
            check(json.dumps(replayed, sort_keys=True) == json.dumps(final, sort_keys=True),
                  "a replay sends completion.ended (and its sources) as it was sent live")
        finally:
            await again.close()
    finally:
        await peer.close()


@flow("uncited")
async def uncited_flow(r: Relay, o: Options) -> None:
    """An answer that cites nothing is withdrawn (``messages.withdrawn {reason: uncited}``) and replaced."""
    url, peer, events = await _docs_turn(r, o, NOWHERE)
    try:
        names = [e for e, _ in events]
        check(Event.MESSAGES_WITHDRAWN in names, f"the uncited answer is withdrawn: {names}")
        i = names.index(Event.MESSAGES_WITHDRAWN)
        gone = events[i][1]
        answer = events[i - 1][1]
        check(names[i - 1] == Event.COMPLETION_ENDED and not answer["message"].get("sources"),
              f"the withdrawn answer ended just before, citing nothing: {answer!r}")
        ids = [answer["message"]["id"], *(t["id"] for t in answer["tool_messages"])]
        check(gone["message_ids"] == ids and gone["reason"] == "uncited" and isinstance(gone["turn_id"], str),
              f"messages.withdrawn of the answer and its tool messages: {gone!r}")
        check(names[i + 1:i + 2] == [Event.COMPLETION_STARTED], f"a new answer follows: {names[i:]}")
        peer.cursor = peer.cursor - (len(events) - i - 1)
        tid, mid, text = await round_start(peer, gone["turn_id"])
        ended = await round_end(peer, mid, text)
        check(text.strip() != "" and "sources" not in ended["message"] and ended["tool_messages"] == [],
              f"the replacement is the app's not-found text: {ended!r}")
        await peer.expect(Event.COMPLETION_FINISHED, turn_id=tid, status="done")
        await peer.expect(Event.USER_INPUT, reason="message")
        msgs = (await r.get(url))["messages"]
        check(all(m["id"] not in ids for m in msgs) and msgs[-1]["id"] == mid and msgs[-1]["content"] == text,
              f"GET shows the replacement, not the withdrawn answer: {msgs!r}")
    finally:
        await peer.close()

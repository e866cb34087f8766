"""The json-patch-tests corpora through a relay's real ``state_patch`` handler, and the client's diffs (installed and
browser jsonpatch) applied by the relay; the cases and how they are adapted: tests/test_jsonpatch_corpus.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from relay_helpers import joined, launch
from test_jsonpatch_corpus import CASES, EXPECTED, wrap_doc, wrap_patch
from test_patch_fuzz import canon, client_jsonpatch, diff_libraries

from widget.core.state import StateSync, document
from widget.relay.hub import apply_patch_atomic

pytestmark = pytest.mark.relay


@pytest_asyncio.fixture(scope="module")
async def relay(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    handle = await launch(tmp_path_factory.mktemp("relay-corpus"))
    yield handle
    await handle.stop()


async def test_relay_state_patch_handler(relay: Any) -> None:
    """Every case through ``state_patch`` on a real socket: ack and stored document as the corpus says."""
    async with aiohttp.ClientSession() as http:
        rec, data, _ = await joined(http, relay.url)
        cid = data["conversation"]["id"]
        failures = []
        for n, (case_id, case) in enumerate(CASES):
            reset = [{"op": "add", "path": "/autopilot/context", "value": {"doc": case["doc"]}}]
            assert await rec.call("state_patch", {"patch": reset, "idempotency_key": f"reset-{n}"}) == {"ok": True}
            before = await relay.hub.store.get_state(cid)
            ack = await rec.call("state_patch", {"patch": wrap_patch(case["patch"]), "idempotency_key": f"case-{n}"})
            after = await relay.hub.store.get_state(cid)
            if "expected" in case:
                if ack != {"ok": True} or canon(after) != canon(wrap_doc(case["expected"])):
                    failures.append((case_id, ack, after))
            elif not (ack.get("ok") is False and ack["error"]["code"] == "patch_failed"
                      and canon(after) == canon(before)):
                failures.append((case_id, ack, after))
        await rec.disconnect()
    assert failures == [], f"{len(failures)} of {len(CASES)} failed: {failures[:5]}"


@pytest.mark.parametrize("lib", ["installed", "browser"])
def test_client_diff_reaches_expected(lib: str) -> None:
    """For every ``expected`` case: the client's patch from ``doc`` to ``expected``, applied by the relay."""
    module = next(m for name, m in diff_libraries().items() if name.startswith(lib))
    failures = []
    with client_jsonpatch(module):
        for case_id, case in EXPECTED:
            sync = StateSync()
            sync.snapshot({}, {"doc": case["doc"]})
            sync.set_context({"doc": case["expected"]}, 0.0)
            out = sync.flush()
            relay_doc = wrap_doc(case["doc"])
            if out is not None:
                relay_doc = apply_patch_atomic(relay_doc, json.loads(json.dumps(out.patch)))
                sync.ack(out.key, True)
            want = document({}, {"doc": case["expected"]})
            if not (canon(relay_doc) == canon(want) == canon(sync.base)):
                failures.append((case_id, out and out.patch))
    assert failures == []

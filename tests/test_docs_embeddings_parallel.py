"""The embedding model run on several windows at once (issue 33 item 7, indexing speed): ``Embedder.embed`` with
``threads`` workers gives the same vectors, byte for byte and in the same order, as one window at a time, as each
text embedded alone, and as the model file run as it is (``lean_graph`` leaves out steps that never change a
vector here; an ``Embedder`` switches to it after ``LEAN_AFTER_WINDOWS`` windows); a worker's error reaches the
caller. Uses the real model folder, made by ``fetch`` as in
test_docs_hybrid.py (``~/.cache/autopilot-widget/embeddings`` or ``AUTOPILOT_TEST_EMBEDDINGS_MODEL``)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from widget.relay.docs.embeddings import (
    DIMS,
    LEAN_AFTER_WINDOWS,
    MAX_TOKENS,
    MODEL_FILE,
    Embedder,
    EmbeddingsUnavailable,
    fetch,
    lean_graph,
    windows,
)

pytestmark = pytest.mark.relay


@pytest.fixture(scope="module")
def model_dir() -> Path:
    """The model folder, made by ``fetch`` (kept when already made)."""
    folder = Path(os.environ.get("AUTOPILOT_TEST_EMBEDDINGS_MODEL")
                  or Path.home() / ".cache" / "autopilot-widget" / "embeddings").expanduser()
    fetch(folder, [], log=lambda line: None)
    return folder


def texts() -> list[str]:
    """Windows of very different lengths (4 to 256 tokens), so parallel workers finish out of order."""
    words = ("the relay keeps each conversation in its store and answers over a socket while the bar renders "
             "markdown streams tools and actions").split()
    out: list[str] = []
    for i in range(30):
        n = (i * 37) % 160 + 1
        out += windows(f"Page {i} › Section", " ".join(words[(i + k) % len(words)] for k in range(n)))
    return out


def threads_of(emb: Embedder) -> set[str]:
    """The names of the threads ``emb`` runs the model on, filled as it embeds."""
    ran: set[str] = set()
    vector = emb._vector

    def spy(ids: list[int]) -> object:
        ran.add(threading.current_thread().name)
        return vector(ids)

    emb._vector = spy  # type: ignore[method-assign]
    return ran


def test_parallel_windows_give_the_serial_vectors_in_order(model_dir: Path) -> None:
    batch = texts()
    serial = Embedder(model_dir, threads=1).embed(batch)
    assert serial.shape == (len(batch), DIMS) and np.allclose(np.linalg.norm(serial, axis=1), 1.0, atol=1e-5)
    for threads in (2, 3):
        emb = Embedder(model_dir, threads=threads)
        ran = threads_of(emb)
        parallel = emb.embed(batch)
        assert len(ran) == threads, ran  # the windows really ran on that many threads
        assert parallel.tobytes() == serial.tobytes()
    # Each row is also the text's vector when embedded alone (nothing else in the call changes it).
    alone = Embedder(model_dir, threads=2)
    for i in (0, 7, len(batch) - 1):
        assert alone.embed([batch[i]]).tobytes() == serial[i:i + 1].tobytes()
    assert alone.embed([]).shape == (0, DIMS)


def test_the_lean_graph_gives_the_files_vectors(model_dir: Path, tmp_path: Path) -> None:
    """The file run as it is (onnxruntime, two threads per call, as the relay did before) against ``Embedder``."""
    import onnxruntime as ort

    lean = lean_graph(model_dir / MODEL_FILE)
    assert lean is not None and len(lean) < (model_dir / MODEL_FILE).stat().st_size
    opts = ort.SessionOptions()
    opts.enable_cpu_mem_arena = False
    opts.intra_op_num_threads = 2
    plain = ort.InferenceSession(str(model_dir / MODEL_FILE), sess_options=opts, providers=["CPUExecutionProvider"])
    emb = Embedder(model_dir)
    assert emb.go_lean() and emb.lean
    batch = texts()
    for i, enc in enumerate(emb.tokenizer.encode_batch(batch)):
        ids = np.asarray([enc.ids], dtype=np.int64)
        assert ids.shape[1] <= MAX_TOKENS
        hidden = plain.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                  "token_type_ids": np.zeros_like(ids)})[0][0]
        pooled = hidden.mean(axis=0)
        expected = (pooled / max(float(np.linalg.norm(pooled)), 1e-12)).astype(np.float32)
        assert emb.embed([batch[i]])[0].tobytes() == expected.tobytes(), i
    # A file onnx cannot read is loaded as it is (onnxruntime says what is wrong with it).
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"not a model")
    assert lean_graph(bad) is None


def test_a_lean_graph_that_gives_other_vectors_is_not_used(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph the rewrite got wrong (here: one bias changed) is caught by the check at load: the file runs."""
    import onnx
    from onnx import numpy_helper

    from widget.relay.docs import embeddings

    def wrong(model: Path) -> bytes:
        proto = onnx.load(str(model))
        bias = next(t for t in proto.graph.initializer if t.name.endswith("LayerNorm.bias"))
        bias.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(bias) + 0.05, bias.name))
        data: bytes = proto.SerializeToString()
        return data

    right = Embedder(model_dir, threads=1).embed(texts()[:3])
    monkeypatch.setattr(embeddings, "lean_graph", wrong)
    emb = Embedder(model_dir, threads=1)
    assert not emb.go_lean() and not emb.lean
    assert emb.embed(texts()[:3]).tobytes() == right.tobytes()


def test_the_lean_graph_comes_after_enough_windows(model_dir: Path) -> None:
    """A search or a small index run keeps the file's graph (no ``import onnx`` to wait for); a large run goes lean."""
    emb = Embedder(model_dir)
    first = emb.embed(["colours"] * (LEAN_AFTER_WINDOWS - 1))
    assert not emb.lean
    emb.embed(["colours"])  # a search's one text: past the count, and still the file's graph
    assert not emb.lean
    vec = emb.embed(["colours", "colours"])
    assert emb.lean and vec[0].tobytes() == first[0].tobytes()


def test_a_workers_error_reaches_the_caller(model_dir: Path) -> None:
    emb = Embedder(model_dir, threads=2)
    vector = emb._vector
    calls: list[int] = []

    def failing(ids: list[int]) -> object:
        calls.append(1)
        if len(calls) == 5:
            raise RuntimeError("model call failed")
        return vector(ids)

    emb._vector = failing  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="model call failed"):
        emb.embed(texts())
    assert len(calls) < len(texts())  # the other worker stopped too
    with pytest.raises(EmbeddingsUnavailable, match="embeddings threads must be 1-64, got 0"):
        Embedder(model_dir, threads=0)

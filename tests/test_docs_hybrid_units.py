"""Hybrid docs search's pure parts (issue 33 item 7): reciprocal rank fusion, a section's windows, the settings.
The searches with the real model, on both engines, are in test_docs_hybrid.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from widget.relay.docs import hybrid
from widget.relay.docs.embeddings import MAX_WINDOWS_PER_SECTION, WINDOW_WORDS, windows
from widget.relay.docs.hybrid import RRF_K, fuse
from widget.relay.docs.search import DocHit

pytestmark = pytest.mark.unit


def test_fuse_is_reciprocal_rank_fusion() -> None:
    def hit(key: str) -> DocHit:
        return DocHit(key=key, page_title="P", headings=[key], url=f"/p/#{key}", text=key, score=99.0)

    bm25 = [hit("a"), hit("b"), hit("c")]
    vec = [hit("d"), hit("b"), hit("e"), hit("f"), hit("a")]
    out = fuse([bm25, vec], 10)
    # b, second in both (2/(k+2)), beats a, first and fifth (1/(k+1) + 1/(k+5)); a section in one list only comes
    # after both; c and e tie (third in one list each): the first list's comes first.
    assert [h["key"] for h in out] == ["b", "a", "d", "c", "e", "f"]
    assert out[0]["score"] == round(2 / (RRF_K + 2), 6)
    assert out[1]["score"] == round(1 / (RRF_K + 1) + 1 / (RRF_K + 5), 6)
    assert out[0]["url"] == "/p/#b" and out[0]["text"] == "b"
    assert len(fuse([bm25, vec], 2)) == 2
    assert fuse([[], []], 5) == []


def test_fuse_weighs_each_list() -> None:
    def hit(key: str) -> DocHit:
        return DocHit(key=key, page_title="P", headings=[key], url=f"/p/#{key}", text=key, score=99.0)

    bm25 = [hit("a"), hit("b")]
    vec = [hit("b"), hit("c")]
    # Equal weights: b (in both) first, then a (BM25's first) before c (the vectors' second).
    assert [h["key"] for h in fuse([bm25, vec], 5)] == ["b", "a", "c"]
    # The vectors weighted up enough: their second beats BM25's first.
    heavy = fuse([bm25, vec], 5, weights=[1.0, 2.0])
    assert [h["key"] for h in heavy] == ["b", "c", "a"]
    assert heavy[0]["score"] == round(1 / (RRF_K + 2) + 2 / (RRF_K + 1), 6)
    with pytest.raises(ValueError, match="2 lists"):
        fuse([bm25, vec], 5, weights=[1.0])


def test_windows_cover_the_whole_section_within_bounds() -> None:
    words = [f"w{i}" for i in range(1000)]
    wins = windows("Page › Section", " ".join(words))
    assert len(wins) == -(-1000 // WINDOW_WORDS)  # ceil(1000 / WINDOW_WORDS)
    assert all(w.startswith("Page › Section: ") for w in wins)
    body = [w.split(": ", 1)[1].split() for w in wins]
    assert [x for b in body for x in b] == words  # every word once, in order
    assert max(len(b) for b in body) <= WINDOW_WORDS
    huge = windows("", " ".join(["word"] * 1_000_000))
    assert len(huge) == MAX_WINDOWS_PER_SECTION
    assert windows("Only a heading", "") == ["Only a heading"]
    assert windows("", "  ") == []


def test_settings(tmp_path: Path) -> None:
    from widget.errors import ConfigError
    from widget.relay.config import load_config

    cfg = load_config(None, env={"AUTOPILOT_EMBEDDINGS_MODEL": "/models/minilm",
                                 "AUTOPILOT_EMBEDDINGS_MAX_WINDOWS": "5000", "AUTOPILOT_EMBEDDINGS_THREADS": "4"})
    assert (cfg.embeddings_model, cfg.embeddings_max_windows, cfg.embeddings_threads) == ("/models/minilm", 5000, 4)
    toml = tmp_path / "relay.toml"
    toml.write_text('embeddings_model = "/m"\nembeddings_max_windows = 0\n')
    with pytest.raises(ConfigError, match="embeddings_max_windows must be 1-10000000, got 0"):
        load_config(str(toml), env={})
    toml.write_text('embeddings_model = "/m"\nembeddings_threads = 65\n')
    with pytest.raises(ConfigError, match="embeddings_threads must be 1-64, got 65"):
        load_config(str(toml), env={})
    default = load_config(None, env={})
    assert (default.embeddings_model, default.embeddings_threads) == (None, 2)


def test_vectors_of_another_window_size_are_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reuse key of a section's vectors names the window size: a run after a change of size embeds again."""
    before = hybrid.text_hash("model-a", "Page › Section", "the text")
    assert before == hybrid.text_hash("model-a", "Page › Section", "the text")
    monkeypatch.setattr(hybrid, "WINDOW_WORDS", hybrid.WINDOW_WORDS + 1)
    assert hybrid.text_hash("model-a", "Page › Section", "the text") != before

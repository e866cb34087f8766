"""Per-conversation sequence numbers: duplicates dropped, gaps detected, so the client asks for a replay."""

from __future__ import annotations

from dataclasses import dataclass

NEW = "new"
DUPLICATE = "duplicate"
GAP = "gap"


@dataclass
class SeqTracker:
    """Tracks the highest contiguous ``seq`` seen; a gap asks the caller to request a replay."""

    last_seq: int = 0
    replay_requested: bool = False

    def classify(self, seq: object) -> str:
        """NEW (apply it), DUPLICATE (drop it) or GAP (drop it and ask for a replay)."""
        if not isinstance(seq, int) or isinstance(seq, bool):
            return DUPLICATE
        if seq <= self.last_seq:
            return DUPLICATE
        if seq == self.last_seq + 1:
            self.last_seq = seq
            return NEW
        return GAP

    def reset(self, last_seq: int) -> None:
        """Start from ``last_seq`` (the conversation GET's ``seq``)."""
        self.last_seq = last_seq
        self.replay_requested = False

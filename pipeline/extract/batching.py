"""Batches of similar lengths, planned the same way on every run.

Sorting a window of samples by length keeps padding small (a batch costs its longest
sample times its size). The plan depends only on the dataset and the options, never on
what is already done, so a resumed run recomputes exactly the batches an uninterrupted run
would have, and its files are bit-identical; batches already fully written are skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PlannedBatch:
    indices: tuple[int, ...]  # longest first
    lengths: tuple[int, ...]

    @property
    def padded_len(self) -> int:
        return self.lengths[0]

    @property
    def padded_tokens(self) -> int:
        return self.lengths[0] * len(self.indices)

    @property
    def tokens(self) -> int:
        return sum(self.lengths)


def plan_batches(
    indices: Sequence[int], lengths: Sequence[int], batch_tokens: int, window: int
) -> list[PlannedBatch]:
    """Greedy packing, longest first within each window of `window` consecutive indices.

    A sample longer than `batch_tokens` gets a batch of its own rather than being refused.
    """
    batches: list[PlannedBatch] = []
    for start in range(0, len(indices), window):
        chunk = sorted(indices[start : start + window], key=lambda i: (-lengths[i], i))
        cur: list[int] = []
        for i in chunk:
            if cur and lengths[cur[0]] * (len(cur) + 1) > batch_tokens:
                batches.append(PlannedBatch(tuple(cur), tuple(lengths[j] for j in cur)))
                cur = []
            cur.append(i)
        if cur:
            batches.append(PlannedBatch(tuple(cur), tuple(lengths[j] for j in cur)))
    return batches

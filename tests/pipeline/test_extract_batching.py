"""Batches of similar lengths, planned identically on every run."""

from __future__ import annotations

import random

from pipeline.extract.batching import plan_batches


def test_plan_covers_every_sample_once_within_the_token_budget():
    rng = random.Random(3)
    lengths = [rng.randint(1, 300) for _ in range(500)] + [900]
    indices = list(range(0, len(lengths), 2)) + [500]
    batches = plan_batches(indices, lengths, batch_tokens=512, window=64)
    flat = [i for b in batches for i in b.indices]
    assert sorted(flat) == sorted(indices)
    for b in batches:
        assert list(b.lengths) == sorted(b.lengths, reverse=True)
        assert b.padded_tokens <= 512 or len(b.indices) == 1
    assert plan_batches(indices, lengths, 512, 64) == batches
    # Sorting within a window keeps padding low compared with taking samples in order.
    padded = sum(b.padded_tokens for b in batches)
    assert padded < 1.15 * sum(lengths[i] for i in indices)

"""The draft vocabulary: the target tokens the drafter can propose, and the maps to target ids.

A drafter's lm_head over the full target vocabulary (128k for Llama 3) costs more than the
rest of the drafter; EAGLE-3 keeps only the most frequent answer tokens. Draft id i maps to
target id `i + d2t[i]` (SGLang stores the offsets, not the ids), and `t2d[t]` says whether
target id t is in the draft vocabulary. Draft ids are in ascending target-id order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DraftVocab:
    ids: torch.Tensor  # [Vd] int64 target ids, ascending
    d2t: torch.Tensor  # [Vd] int64 offsets: target id = i + d2t[i]
    t2d: torch.Tensor  # [V] bool
    coverage: float  # share of the counted tokens that are in the draft vocabulary

    @property
    def size(self) -> int:
        return int(self.ids.numel())


def from_counts(counts: torch.Tensor, size: int) -> DraftVocab:
    """The `size` most frequent tokens of `counts` ([V] int64); ties and unseen tokens go by
    lower id first, so the same counts always give the same vocabulary."""
    vocab = int(counts.numel())
    size = min(int(size), vocab)
    if size <= 0:
        raise ValueError(f"draft vocabulary size must be positive, got {size}")
    counts = counts.to(torch.int64).cpu()
    # stable sort on -count keeps ascending id order among equal counts
    order = torch.sort(-counts, stable=True).indices[:size]
    ids = torch.sort(order).values
    return from_ids(ids, vocab, coverage=float(counts[ids].sum()) / max(1, int(counts.sum())))


def from_ids(ids: torch.Tensor, vocab_size: int, coverage: float = float("nan")) -> DraftVocab:
    ids = torch.sort(ids.to(torch.int64).cpu()).values
    if ids.numel() and (int(ids[0]) < 0 or int(ids[-1]) >= vocab_size):
        raise ValueError(f"draft token ids must lie in 0..{vocab_size - 1}")
    if torch.unique(ids).numel() != ids.numel():
        raise ValueError("draft token ids must be distinct")
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[ids] = True
    return DraftVocab(ids=ids, d2t=ids - torch.arange(ids.numel()), t2d=t2d, coverage=coverage)


def from_buffers(d2t: torch.Tensor, t2d: torch.Tensor) -> DraftVocab:
    """Back from a checkpoint's buffers (checks the two agree)."""
    ids = d2t.to(torch.int64).cpu() + torch.arange(d2t.numel())
    v = from_ids(ids, int(t2d.numel()))
    if not torch.equal(v.t2d, t2d.cpu().bool()):
        raise ValueError("d2t and t2d describe different draft vocabularies")
    return v

"""What training asks of its data, offline or online: one protocol, two answers.

`data.Store` (a hidden-state store: the states were extracted) and `online.Records` (the
merged dataset: the target computes the states batch by batch) both answer it; nothing past
`setup.open_source` knows which one it holds, not even whether the target must run beside the
drafter: the source says so (`target_states`). Positions are the source's samples in its own
order (the store's manifest order, the dataset's lines), and the batch plan, the held-out
slice and the resume rules are written over them alike.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch


@dataclass(frozen=True)
class VocabDataset:
    """A merged JSONL to choose the draft vocabulary over: its sha256 when it must be a known
    file, and whether a failure to read it stops the run (else the source's samples serve)."""

    path: Path
    sha256: str | None
    required: bool


class StateFiller(Protocol):
    """What fills a batch's states when its source holds none (online.TargetStates: the target's forward)."""

    def fill(self, batch: dict[str, torch.Tensor], lengths: list[int]) -> None:
        """Adds hidden_state, aux_hidden_state and the per-row `nonfinite` flag to a device batch."""

    def close(self) -> None: ...


class Source(Protocol):
    @property
    def kind(self) -> str:
        """'store' or 'online': summary.json's `source`."""

    @property
    def samples(self) -> int: ...

    @property
    def tokens(self) -> int: ...

    @property
    def lengths(self) -> list[int]:
        """Tokens per position: what the batch plan packs by."""

    def describe(self) -> str:
        """Where the data is, for the log."""

    def batch(self, positions: list[int], max_len: int) -> dict[str, torch.Tensor]:
        """The right-padded micro-batch of `positions`, cut to max_len: input_ids, loss_mask,
        lengths, and the states when the source holds them (else the target's TargetStates fills them)."""

    def loss_token_counts(self, vocab_size: int, rank: int, world_size: int, positions: list[int]) -> torch.Tensor:
        """[vocab] counts of the tokens under loss_mask over this rank's share of `positions`."""

    def identity(self) -> dict:
        """What a checkpoint remembers of the data it was trained on (a resume must match it)."""

    def held_out_keys(self, positions: list[int]) -> tuple[set[str], set[int]]:
        """`positions` as a reader of the merged dataset recognises them: record ids, else line numbers."""

    def vocab_dataset(self, vocab_data: str | None, log: Callable[[str], None]) -> VocabDataset | None:
        """The merged dataset the draft vocabulary is counted over (`--vocab-data`, else the source's
        own), or None when the source's training samples are counted instead."""

    def target_states(self, target: Path, device: torch.device, compile: bool | None, log: Callable[[str], None],
                      stop: threading.Event) -> StateFiller | None:
        """The target loaded to compute each batch's states, or None when the batches carry them."""

"""A training run's summary, `RUN_DIR/summary.json`: where the run stands (steps, the last
checkpoint, stopped or finished), its last figures and their history, validation, the draft
vocabulary and the speed. Written when a run ends or stops (rank 0); read back by a resumed
run that finds nothing left to train, and by bench. docs/train.md says what each figure means.

`loss` and `acc` are NaN when no step was logged yet (a run stopped before its first log):
this record keeps NaN as JSON's `NaN`, which Python's json reads back.

`write_summary` is the one writer, `read_summary` the one reader.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pipeline.records.codec import Kind

VERSION = 1
KIND = Kind(tag="train_summary", title="training summary", writer="python -m pipeline.train", version=VERSION,
            known=(1,), legacy_keys=("steps", "total_steps", "history"), limit=64 << 20)


@dataclass(frozen=True)
class StepFigures:
    """Loss and per-position accuracy at a step (training's over its log window, or validation's)."""

    step: int
    loss: float
    acc: tuple[float, ...]


@dataclass(frozen=True)
class DraftVocab:
    """How well the draft vocabulary covers the answer tokens: on what it was chosen, and on the
    held-out samples (None with no held-out slice)."""

    source: str
    coverage_chosen_on: float
    held_out_coverage: float | None
    held_out_distinct_tokens: int | None = None
    held_out_distinct_missing: int | None = None


@dataclass(frozen=True)
class Validation:
    samples: int
    tokens: int
    loss: float | None  # the last validation's; None before the first
    acc: tuple[float, ...] | None
    history: tuple[StepFigures, ...]


@dataclass(frozen=True, kw_only=True)
class TrainSummary:
    steps: int  # done, over every session of the run
    total_steps: int
    resumed_from: int | None
    stopped: bool
    loss: float
    acc: tuple[float, ...]
    tokens: int  # real (unpadded) tokens seen, every session
    seconds: float  # this session's
    tokens_this_session: int
    tokens_per_s: float | None
    checkpoint: str | None
    draft_vocab_size: int
    draft_vocab_coverage: float | None
    draft_vocab: DraftVocab | None
    val: Validation | None
    world_size: int
    device: str
    history: tuple[StepFigures, ...]
    source: str  # "store" or "online"
    peak_gpu_bytes: int | None
    version: int = field(default=VERSION, init=False)


def write_summary(path: str | os.PathLike[str], summary: TrainSummary) -> None:
    KIND.write(path, summary)


def read_summary(path: str | os.PathLike[str], missing: str | None = None) -> TrainSummary:
    """The summary at `path`; a RecordError naming the file when it is missing (`missing` says
    what to do instead of the default), not a training summary, of an unknown version or malformed."""
    return KIND.decode(TrainSummary, KIND.load(path, missing), os.fspath(path))

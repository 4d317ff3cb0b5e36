"""Merge's stats, written beside the merged dataset (`<out stem>.stats.json`, or `--stats`): what
each source gave and lost, the settings of the merge, and the dataset's sha256 that ties the
two files together, and the tokenizer's identity (its vocabulary and merges, not its path).
Read by extraction (`--stats`: its estimate and the dataset check), by online training (the
tokenizer the data was merged with must be the target's) and by the console's checks (a
free-space need over `stats.tokens`, the sha256 check).

`write_stats` is the one writer, `read_stats` the one reader.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.records.codec import Kind
from pipeline.records.source_reading import SourceReading

VERSION = 1
KIND = Kind(tag="merge_stats", title="merge stats file", writer="python -m pipeline.merge", version=VERSION,
            known=(1,), legacy_keys=("dataset_sha256", "sources"), limit=16 << 20)


@dataclass(frozen=True)
class SourceStats:
    shape: str  # the record shape merge read ("messages", ...), "mixed", or "none"
    shapes: dict[str, int]
    records: int  # kept
    tokens: int
    loss_tokens: int
    read: int
    dropped_too_long: int
    dropped_empty_mask: int
    truncated: int
    over_char_bound: int
    lines_too_long: int
    skipped: int
    input: SourceReading


@dataclass(frozen=True)
class Policy:
    strict: bool
    max_invalid: float
    role_map: dict[str, str]
    on_assistant_first: str
    same_role: str


@dataclass(frozen=True, kw_only=True)
class MergeStats:
    records: int
    tokens: int
    loss_tokens: int
    max_len: int
    on_long: str
    seed: int
    tokenizer: str
    mask_method: str
    char_bound: int
    line_bound: int
    sources: dict[str, SourceStats]
    skipped: int
    policy: Policy
    dropped: int
    truncated: int
    dataset_sha256: str  # of the dataset these stats describe
    tokenizer_identity: str | None = None  # pipeline.target.tokenizer's "tok1:...": its vocabulary and merges
    version: int = field(default=VERSION, init=False)

    def __post_init__(self) -> None:
        for name in ("records", "tokens", "max_len"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} is {getattr(self, name)}, a count that cannot be negative")


def beside(dataset: Path) -> Path:
    """Where merge writes the stats of `dataset` unless --stats says otherwise."""
    return dataset.with_name(f"{dataset.stem}.stats.json")


def write_stats(path: str | os.PathLike[str], stats: MergeStats) -> None:
    KIND.write(path, stats)


def read_stats(path: str | os.PathLike[str], missing: str | None = None) -> MergeStats:
    """The stats at `path`; a RecordError naming the file when it is missing (`missing` says
    what to do instead of the default), not merge's stats, of an unknown version or malformed."""
    return KIND.decode(MergeStats, KIND.load(path, missing), os.fspath(path))

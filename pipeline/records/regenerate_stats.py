"""Regenerate's stats, written beside its output (`<out stem>.stats.json`, or `--stats`): what
came in, what went out, what failed and why, and the options the output was started with.
Written at the start, every few seconds while the run goes, and at its end (`status` says
which); read back by a resumed run (its options must match, its time adds up) and by the
console's checks (`status: done`, `records_out`).

`write_stats` is the one writer, `read_stats` the one reader.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

from pipeline.records.codec import Kind
from pipeline.records.source_reading import SourceReading

VERSION = 1
KIND = Kind(tag="regenerate_stats", title="regenerate stats file", writer="python -m pipeline.regenerate",
            version=VERSION, known=(1,), legacy_keys=("records_in", "regenerable", "options"), limit=16 << 20)


@dataclass(frozen=True, kw_only=True)
class RegenerateStats:
    status: Literal["running", "done", "failed", "stopped"]
    records_in: int  # records met in the sources
    regenerable: int  # of them, records with a question to answer
    wanted: int  # of those, the ones this output is to hold (--limit, --samples-per-prompt)
    records_out: int  # written by this and earlier runs into the output
    resumed: int  # already in the output when this run started
    skipped: dict[str, int]  # by reason, records the sources' reader left out
    failures: dict[str, int]  # by reason, records that got no answer
    failure_examples: dict[str, tuple[str, ...]]
    answers: int
    generated_tokens: int
    loops_cut: int  # answers cut where they looped (--trim-loops)
    loop_tokens_cut: int
    seconds: float  # this run's and the earlier runs' of the same output
    sources: dict[str, SourceReading]
    options: dict[str, object]  # regenerate's options as it names them (pipeline/regenerate/options.py)
    version: int = field(default=VERSION, init=False)


def write_stats(path: str | os.PathLike[str], stats: RegenerateStats) -> None:
    KIND.write(path, stats)


def read_stats(path: str | os.PathLike[str], missing: str | None = None) -> RegenerateStats:
    """The stats at `path`; a RecordError naming the file when it is missing (`missing` says
    what to do instead of the default), not regenerate's stats, of an unknown version or malformed."""
    return KIND.decode(RegenerateStats, KIND.load(path, missing), os.fspath(path))

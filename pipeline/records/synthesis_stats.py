"""Regenerate's stats in synthesis mode (`--synthesize N`), beside its output: how many records
were wanted, asked and kept, what each filter dropped (with examples), what was generated, and
the options the output was started with. Written at the start, every few seconds and at the end
(`status` says which); read back by a resumed synthesis (its options must match, its time adds
up) and by the console's checks.

`write_stats` is the one writer, `read_stats` the one reader.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

from pipeline.records.codec import Kind

VERSION = 1
KIND = Kind(tag="synthesis_stats", title="synthesis stats file", writer="python -m pipeline.regenerate --synthesize",
            version=VERSION, known=(1,), legacy_keys=("wanted", "dropped", "options"), limit=16 << 20)


@dataclass(frozen=True, kw_only=True)
class SynthesisStats:
    status: Literal["running", "done", "failed", "stopped"]
    wanted: int  # records the output is to hold (--synthesize)
    max_asked: int  # record indexes this output may use
    records_out: int  # in the output, written by this and earlier runs
    resumed: int  # already in the output when this run started
    asked: int  # records this run started
    surplus: int  # finished after the output was full: not written, not counted
    dropped: dict[str, int]  # records dropped, by the filter or failure
    ended_early: dict[str, int]  # kept records a later question's filter ended
    examples: dict[str, tuple[str, ...]]  # by reason
    questions: int
    question_tokens: int
    answer_tokens: int
    generated_tokens: int  # questions and answers
    answers: int
    loops_cut: int
    loop_tokens_cut: int
    seconds: float  # this run's and the earlier runs' of the same output
    options: dict[str, object]  # synthesis's options as it names them (pipeline/regenerate/synthesis/options.py)
    version: int = field(default=VERSION, init=False)


def write_stats(path: str | os.PathLike[str], stats: SynthesisStats) -> None:
    KIND.write(path, stats)


def read_stats(path: str | os.PathLike[str], missing: str | None = None) -> SynthesisStats:
    """The stats at `path`; a RecordError naming the file when it is missing (`missing` says
    what to do instead of the default), not synthesis stats, of an unknown version or malformed."""
    return KIND.decode(SynthesisStats, KIND.load(path, missing), os.fspath(path))

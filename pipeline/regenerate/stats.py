"""The stats file beside the output: what came in, what went out, what failed and why.

Written atomically at the start (so a resumed run can check it uses the same options),
every few seconds while running, and at the end; `status` says which.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

from pipeline.records.codec import MissingRecord, RecordError
from pipeline.records.regenerate_stats import RegenerateStats, read_stats, write_stats
from pipeline.records.source_reading import SourceReading
from pipeline.records.synthesis_stats import SynthesisStats
from pipeline.regenerate.errors import BadInput

Earlier = TypeVar("Earlier", RegenerateStats, SynthesisStats)
EXAMPLES = 5  # failure examples kept per reason
LATER_KEYS = {"samples_per_prompt": 1, "trim_loops": False}  # options added after outputs existed: the value those runs had


@dataclass
class Stats:
    options: dict
    records_in: int = 0  # records met in the sources
    regenerable: int = 0  # of them, records with a question to answer
    wanted: int = 0  # of those, the ones this output is to hold (--limit)
    records_out: int = 0  # written by this and earlier runs into the output
    resumed: int = 0  # already in the output when this run started
    skipped: Counter = field(default_factory=Counter)
    failures: Counter = field(default_factory=Counter)
    failure_examples: dict[str, list[str]] = field(default_factory=dict)
    generated_tokens: int = 0
    answers: int = 0
    loops_cut: int = 0  # answers cut where they looped (--trim-loops)
    loop_tokens_cut: int = 0
    started: float = field(default_factory=time.time)
    seconds_before: float = 0.0  # spent by earlier runs of the same output
    sources: dict[str, SourceReading] = field(default_factory=dict)
    status: Literal["running", "done", "failed", "stopped"] = "running"

    def fail(self, reason: str, example: str) -> None:
        self.failures[reason] += 1
        shown = self.failure_examples.setdefault(reason, [])
        if len(shown) < EXAMPLES:
            shown.append(example[:300])

    def seconds(self) -> float:
        return round(self.seconds_before + time.time() - self.started, 3)

    def to_record(self) -> RegenerateStats:
        return RegenerateStats(
            status=self.status, records_in=self.records_in, regenerable=self.regenerable, wanted=self.wanted,
            records_out=self.records_out, resumed=self.resumed, skipped=dict(sorted(self.skipped.items())),
            failures=dict(sorted(self.failures.items())),
            failure_examples={k: tuple(v) for k, v in self.failure_examples.items()}, answers=self.answers,
            generated_tokens=self.generated_tokens, loops_cut=self.loops_cut, loop_tokens_cut=self.loop_tokens_cut,
            seconds=self.seconds(), sources=self.sources, options=self.options)

    def write(self, path: Path) -> None:
        write_stats(path, self.to_record())


def previous(path: Path, generation: dict,
             read: Callable[[Path], Earlier] = read_stats) -> Earlier | None:  # type: ignore[assignment]
    """The stats an earlier run of this output left (read by `read`: regenerate's, or
    synthesis's), refusing a resume with other sampling."""
    try:
        old = read(path)
    except MissingRecord:
        return None
    except RecordError as e:
        raise BadInput(f"{e}; or delete it to start over") from None
    changed = [k for k, v in generation.items() if old.options.get(k, LATER_KEYS.get(k)) != v]
    if changed:
        shown = ", ".join(f"{k}: {old.options.get(k)!r} then, {generation[k]!r} now" for k in changed)
        raise BadInput(f"{path}: the output was started with other options ({shown}); a resumed run must use the "
                       "same ones, or write to another --out")
    return old

"""`python -m pipeline.regenerate --estimate ... --json`: an upper bound on the bytes a
regenerate run writes (pipeline/regenerate/estimate.py says how). One JSON line on stdout, read
by the console's checks (`free_space` over `estimate.bytes`).

`format_estimate` is the one writer (the line the stage prints), `parse_estimate` the one reader.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.records.codec import Kind

VERSION = 1
KIND = Kind(tag="regenerate_estimate", title="regenerate estimate",
            writer="python -m pipeline.regenerate --estimate --json", version=VERSION, known=(1,),
            legacy_keys=("answers", "answer_bytes", "kept_bytes"), limit=1 << 20)


@dataclass(frozen=True, kw_only=True)
class RegenerateEstimate:
    records: int  # samples the run writes (records x --samples-per-prompt)
    answers: int
    max_new_tokens: int
    kept_bytes: int  # the system and user text the records keep
    answer_bytes: int
    bytes: int
    formula: str
    version: int = field(default=VERSION, init=False)


def format_estimate(estimate: RegenerateEstimate) -> str:
    return KIND.dumps(estimate)


def parse_estimate(text: str | bytes, source: str) -> RegenerateEstimate:
    """The estimate in a program's output (`source` names it in errors); a RecordError when it
    is not one, of an unknown version or malformed."""
    return KIND.decode(RegenerateEstimate, KIND.parse(text, source), source)

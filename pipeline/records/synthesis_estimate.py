"""`python -m pipeline.regenerate --synthesize N --estimate --json`: an upper bound on the bytes a
synthesis run writes (pipeline/regenerate/synthesis/estimate.py says how). One JSON line on
stdout, read by the console's checks (`free_space` over `estimate.bytes`).

`format_estimate` is the one writer (the line the stage prints), `parse_estimate` the one reader.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.records.codec import Kind

VERSION = 1
KIND = Kind(tag="synthesis_estimate", title="synthesis estimate",
            writer="python -m pipeline.regenerate --synthesize N --estimate --json", version=VERSION, known=(1,),
            legacy_keys=("records", "turns", "bytes", "formula"), limit=1 << 20)


@dataclass(frozen=True, kw_only=True)
class SynthesisEstimate:
    records: int
    turns: int
    bytes: int
    formula: str
    version: int = field(default=VERSION, init=False)


def format_estimate(estimate: SynthesisEstimate) -> str:
    return KIND.dumps(estimate)


def parse_estimate(text: str | bytes, source: str) -> SynthesisEstimate:
    """The estimate in a program's output (`source` names it in errors); a RecordError when it
    is not one, of an unknown version or malformed."""
    return KIND.decode(SynthesisEstimate, KIND.parse(text, source), source)

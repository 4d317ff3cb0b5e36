"""`python -m pipeline.extract --estimate --json`: the bytes an extraction writes, from merge's
stats and the target's config alone (pipeline/extract/estimate.py says how). One JSON line on
stdout, read by the console's checks (`free_space` over `estimate.bytes`).

`format_estimate` is the one writer (the line the stage prints), `parse_estimate` the one reader.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.records.codec import Kind

VERSION = 1
KIND = Kind(tag="extract_estimate", title="extraction estimate", writer="python -m pipeline.extract --estimate --json",
            version=VERSION, known=(1,), legacy_keys=("bytes", "hidden_state_bytes", "per_token_bytes"), limit=1 << 20)


@dataclass(frozen=True, kw_only=True)
class ExtractEstimate:
    bytes: int  # an upper bound on the store's size
    tokens: int
    records: int
    limit: int | None  # --limit: the dataset's first N samples
    hidden: int
    num_layers: int
    dtype: str  # the capture dtype
    store_dtype: str  # what the store holds (float8_e4m3fn with --store-dtype fp8)
    dtype_bytes: int
    hidden_state_bytes: int
    scale_bytes: int
    overhead_bytes: int
    per_token_bytes: int
    per_record_overhead_bytes: int
    formula: str
    version: int = field(default=VERSION, init=False)


def format_estimate(estimate: ExtractEstimate) -> str:
    return KIND.dumps(estimate)


def parse_estimate(text: str | bytes, source: str) -> ExtractEstimate:
    """The estimate in a program's output (`source` names it in errors); a RecordError when it
    is not one, of an unknown version or malformed."""
    return KIND.decode(ExtractEstimate, KIND.parse(text, source), source)

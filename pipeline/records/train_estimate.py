"""`python -m pipeline.train --estimate --json`: the GPU memory a training run of these settings
needs, as named parts (pipeline/train/estimate.py says how each is counted). One JSON line on
stdout, read by the console's checks (`gpu_free_memory` over `estimate.gpu_bytes`) and bench.

`format_estimate` is the one writer (the line the stage prints), `parse_estimate` the one reader.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.records.codec import Kind

VERSION = 1
KIND = Kind(tag="train_estimate", title="training estimate", writer="python -m pipeline.train --estimate --json",
            version=VERSION, known=(1,), legacy_keys=("gpu_bytes", "parts", "margin"), limit=1 << 20)


@dataclass(frozen=True, kw_only=True)
class TrainEstimate:
    gpu_bytes: int  # per rank, the parts' sum with the margin
    parts: dict[str, int]  # drafter_and_optimizer, target_head, activations; online: target_weights, target_forward
    online: bool
    batch_tokens: int
    max_len: int
    draft_vocab: int
    ttt_length: int
    margin: float
    version: int = field(default=VERSION, init=False)


def format_estimate(estimate: TrainEstimate) -> str:
    return KIND.dumps(estimate)


def parse_estimate(text: str | bytes, source: str) -> TrainEstimate:
    """The estimate in a program's output (`source` names it in errors); a RecordError when it
    is not one, of an unknown version or malformed."""
    return KIND.decode(TrainEstimate, KIND.parse(text, source), source)

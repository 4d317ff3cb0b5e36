"""How many bytes an extraction will write, for the console's `free_space` check.

Read from the merge stats and the target's config.json only (no torch, no weights), so it
runs in a second before a multi-hour job. The figure is an upper bound on disk use:
`tokens x 4 x hidden x dtype_bytes` for the hidden states, plus per token the int64 id and
uint8 mask, plus per sample the safetensors header (sized for the longest sample), up to
one filesystem block of slack and its manifest line.
"""

from __future__ import annotations

from pathlib import Path

from .errors import BadInput
from .layout import DTYPES, dtype_name, header
from .meta import TargetInfo
from pipeline.jsonfile import read_json

BLOCK_SLACK = 4096  # a file ends part-way through a block
MANIFEST_LINE = 256  # index, id, tokens, bytes, file
META_BYTES = 4096


def read_stats(stats_path: Path) -> dict:
    path = Path(stats_path)
    stats = read_json(path, f"stats file {path} does not exist (--stats); run pipeline.merge first", BadInput)
    if not isinstance(stats, dict):
        raise BadInput(f"{path}: expected a JSON object of merge stats")
    for key in ("records", "tokens"):
        if not isinstance(stats.get(key), int) or stats[key] < 0:
            raise BadInput(f"{path}: key {key!r} must be a non-negative integer, got {stats.get(key)!r}")
    return stats


def estimate(model_dir: Path, stats_path: Path, dtype: str = "bf16") -> dict:
    target = TargetInfo.from_dir(Path(model_dir))
    stats = read_stats(stats_path)
    try:
        name = dtype_name(dtype)
    except ValueError as e:
        raise BadInput(f"--dtype: {e}") from None
    dtype_bytes = DTYPES[name][1]
    tokens, records, hidden = stats["tokens"], stats["records"], target.hidden_size
    longest = stats.get("max_len") if isinstance(stats.get("max_len"), int) and stats["max_len"] > 0 else max(tokens, 1)
    hidden_bytes = tokens * 4 * hidden * dtype_bytes
    token_overhead = tokens * (8 + 1)
    per_record = len(header(longest, hidden, name)) + BLOCK_SLACK + MANIFEST_LINE
    overhead = token_overhead + records * per_record + META_BYTES
    return {
        "bytes": hidden_bytes + overhead,
        "tokens": tokens,
        "records": records,
        "hidden": hidden,
        "num_layers": target.num_layers,
        "dtype": name,
        "dtype_bytes": dtype_bytes,
        "hidden_state_bytes": hidden_bytes,
        "overhead_bytes": overhead,
        "per_token_bytes": 4 * hidden * dtype_bytes + 9,
        "per_record_overhead_bytes": per_record,
        "formula": "tokens*4*hidden*dtype_bytes + tokens*9 + records*(header+4096+256) + 4096",
    }

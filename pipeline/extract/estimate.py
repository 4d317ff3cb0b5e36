"""How many bytes an extraction will write, for the console's `free_space` check.

Read from the merge stats and the target's config.json only (no torch, no weights), so it
runs in a second before a multi-hour job. The figure is an upper bound on disk use:
`tokens x 4 x hidden x dtype_bytes` for the hidden states, plus per token the int64 id and
uint8 mask, plus per sample the safetensors header (sized for the longest sample), up to
one filesystem block of slack and its manifest line. With `--store-dtype fp8` a value takes
1 byte and each token 16 bytes of float32 scales more (pipeline/store/layout.py,
token_bytes), about half of bf16's.

With `--limit N` the run extracts the dataset's first N samples: their tokens are counted from
the dataset itself when `--data` is given (one streamed pass reading only the lengths),
else bounded by N x the stats' longest sample, never more than the whole dataset.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pipeline.extract.options import Options
from pipeline.program_edge import BadInput
from pipeline.records import merge_stats
from pipeline.records.extract_estimate import ExtractEstimate, format_estimate
from pipeline.records.merge_stats import MergeStats
from pipeline.sizes import format_bytes
from pipeline.store.layout import DTYPES, SCALE_BYTES, dtype_name, header, token_bytes
from pipeline.store.meta import TargetInfo

BLOCK_SLACK = 4096  # a file ends part-way through a block
MANIFEST_LINE = 256  # index, id, tokens, bytes, file
META_BYTES = 4096


def read_stats(path: Path) -> MergeStats:
    """Merge's stats (`--stats`), refused by name when missing, not merge's or malformed."""
    return merge_stats.read_stats(path, f"stats file {path} does not exist (--stats); run pipeline.merge first")


def first_tokens(data: Path, limit: int) -> tuple[int, int]:
    """(records, tokens) of the first `limit` samples of a merged dataset."""
    records = tokens = 0
    try:
        with open(data, "rb") as f:
            for n, line in enumerate(f, 1):
                if records >= limit:
                    break
                try:
                    ids = json.loads(line)["input_ids"]
                except (ValueError, KeyError, TypeError):
                    raise BadInput(f"{data}:{n}: not a merged sample (no input_ids); pass the dataset merge wrote") from None
                records += 1
                tokens += len(ids)
    except FileNotFoundError:
        raise BadInput(f"--data {data} does not exist; run pipeline.merge first") from None
    return records, tokens


def estimate(model_dir: Path, stats_path: Path, dtype: str = "bf16", limit: int | None = None,
             data: Path | None = None, fp8: bool = False) -> ExtractEstimate:
    target = TargetInfo.from_dir(Path(model_dir))
    stats = read_stats(stats_path)
    records, tokens = stats.records, stats.tokens
    if limit is not None:
        if limit < 0:
            raise BadInput(f"--limit must not be negative, got {limit}")
        if data is not None:
            records, tokens = first_tokens(Path(data), limit)
        else:
            records = min(limit, stats.records)
            tokens = min(stats.tokens, records * stats.max_len)
    try:
        name = dtype_name(dtype)
    except ValueError as e:
        raise BadInput(f"--dtype: {e}") from None
    value_bytes = 1 if fp8 else DTYPES[name][1]
    hidden = target.hidden_size
    longest = stats.max_len if stats.max_len > 0 else max(tokens, 1)
    hidden_bytes = tokens * 4 * hidden * value_bytes
    scale_bytes = tokens * SCALE_BYTES if fp8 else 0
    token_overhead = tokens * (8 + 1)
    per_record = len(header(longest, hidden, name, fp8)) + BLOCK_SLACK + MANIFEST_LINE
    overhead = token_overhead + records * per_record + META_BYTES
    return ExtractEstimate(
        bytes=hidden_bytes + scale_bytes + overhead,
        tokens=tokens,
        records=records,
        limit=limit,
        hidden=hidden,
        num_layers=target.num_layers,
        dtype=name,
        store_dtype="float8_e4m3fn" if fp8 else name,
        dtype_bytes=value_bytes,
        hidden_state_bytes=hidden_bytes,
        scale_bytes=scale_bytes,
        overhead_bytes=overhead,
        per_token_bytes=token_bytes(hidden, name, fp8),
        per_record_overhead_bytes=per_record,
        formula=("tokens*4*hidden*1 + tokens*16 (fp8 scales)" if fp8 else "tokens*4*hidden*dtype_bytes")
        + " + tokens*9 + records*(header+4096+256) + 4096",
    )


def run(opts: Options) -> int:
    """`pipeline.extract --estimate`: the bytes on stdout (--json: the record's line), what they
    are made of on stderr."""
    assert opts.model is not None and opts.stats is not None  # validate(): --estimate needs them
    est = estimate(opts.model, opts.stats, opts.dtype, opts.limit, opts.data, fp8=opts.fp8)
    if opts.json:
        print(format_estimate(est))
    else:
        print(est.bytes)
        print(f"extract estimate: {format_bytes(est.bytes)} for {est.tokens:,} tokens in {est.records:,} "
              f"samples (hidden {est.hidden}, {est.store_dtype})", file=sys.stderr)
    return 0

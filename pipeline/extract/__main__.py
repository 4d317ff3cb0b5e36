"""`python -m pipeline.extract`: capture a target's hidden states into the store, or
estimate how many bytes that will take.

    python -m pipeline.extract --backend hf --model TARGET --data MERGED.jsonl --out STORE [--store-dtype fp8] [...]
    python -m pipeline.extract --estimate --model TARGET --stats STATS.json [--dtype bf16] [--store-dtype fp8]
        [--json] [--limit N [--data DATASET]]
    python -m pipeline.extract --verify --out STORE [--model TARGET] [--sample N] [--json]
    python -m pipeline.extract --backend sglang --server URL --dump-dir DIR --model TARGET --data MERGED.jsonl --out STORE

Exit codes: 0 done (or this rank's share done; --verify: the store is intact), 2 bad input
(also: "store STORE in use by pid N", another extraction writes to it; --verify: the store
has problems, each printed on one line, as train refuses such a sample with 2), 3 stopped by
the disk reserve or a full disk (free space and rerun to resume), 1 anything else, 4 (--backend sglang) the server is
unreachable or failed --max-failures requests in a row: restart it and rerun to resume
(pipeline/extract/sglang_client.py), 130 interrupted (Ctrl-C), 143 stopped by SIGTERM (the
manifest is kept; rerun to resume). The codes and the `extract: error: ...` line are the
stage edge's (pipeline/program_edge.py); the run itself is driver.py's, whichever backend.

--verify checks every sample's size, header, checksum and values (with --sample N: the
checksums and values of N random ones and the last N written, and it says how many it did
not read), that the manifest lists every sample, and with --model that the target's weights
are those the store was written with (pipeline/store/integrity.py). The header must be the
one meta.json declares and the values must mean states (pipeline/store/meaning.py: finite,
fp8 scales in range), so a sample rewritten with its manifest line resealed is still found;
each problem names the file, the sample and the key. --json prints StoreReport.to_json():
{"ok", "out", "expected", "samples", "tokens", "bytes", "sizes_checked", "checksums_checked",
"headers_checked", "values_checked", "target_fingerprint", "model_fingerprint",
"store_dtype", "problems", "problem_count"}.

--store-dtype fp8 stores the final and aux states as float8 e4m3 with float32 scales, one
per token for the final state and one per token per capture layer for aux: about half the
bytes of bf16 (1 byte a value and 16 bytes of scales a token against 2 bytes a value).
Training, --verify and the checksums read such a store as they read any; the trainer gets
the states dequantized to the dtype they were captured in (pipeline/store/fp8.py says why
per layer for aux, docs/train.md "fp8 store" what it costs in acceptance).
"""

from __future__ import annotations

import argparse
import json
import sys

from pipeline import cpu_threads
from pipeline.extract.driver import RESUME, drive, need
from pipeline.extract.estimate import estimate
from pipeline.extract.hf_backend import HFBackend
from pipeline.extract.options import build_parser, options_from
from pipeline.extract.reserve import disk_full, is_disk_full
from pipeline.extract.sharding import device_for, resolve_shard
from pipeline.program_edge import BadInput, run_program
from pipeline.records.extract_estimate import format_estimate
from pipeline.sizes import format_bytes
from pipeline.store.integrity import verify_store
from pipeline.store.meta import TargetInfo


def _estimate(args: argparse.Namespace) -> int:
    need(args, "model", "stats")
    est = estimate(args.model, args.stats, args.dtype, args.limit, args.data, fp8=args.store_dtype == "fp8")
    if args.json:
        print(format_estimate(est))
    else:
        print(est.bytes)
        print(f"extract estimate: {format_bytes(est.bytes)} for {est.tokens:,} tokens in {est.records:,} "
              f"samples (hidden {est.hidden}, {est.store_dtype})", file=sys.stderr)
    return 0


def _verify(args: argparse.Namespace) -> int:
    need(args, "out")
    if args.sample is not None and args.sample < 1:
        raise BadInput(f"--sample must be at least 1, got {args.sample}")
    mode = "all" if args.sample is None else "sample"
    report = verify_store(args.out, model=args.model, checksums=mode, sample=args.sample or 0)
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        for line in report.problems:
            print(f"verify: {line}", flush=True)
        print(f"verify: {report.summary()}", flush=True)
    return 0 if report.ok else 2


def _extract(args: argparse.Namespace) -> int:
    need(args, "model", "data", "out")

    options = options_from(args)
    target = TargetInfo.from_dir(args.model)
    shard = resolve_shard(args.rank, args.world_size)
    cpu_threads.fit("extract", args.threads)
    if args.device == "cpu":
        device = "cpu"  # no torch import before the input checks: refusals stay instant
    else:
        import torch

        device = device_for(args.device, shard, torch.cuda.is_available(), torch.cuda.device_count())

    return drive(options, target, HFBackend(args.model, device, shard, compile=False if args.no_compile else None))


def _body(args: argparse.Namespace) -> int:
    try:
        if args.verify:
            return _verify(args)
        if args.estimate:
            return _estimate(args)
        if args.backend == "sglang":
            from pipeline.extract.sglang_client import extract

            return extract(args)
        return _extract(args)
    except OSError as e:
        if is_disk_full(e):
            raise disk_full(e, "writing the store", args.out) from None
        raise


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_program("extract", lambda: _body(args), stop_note=RESUME)


if __name__ == "__main__":
    sys.exit(main())

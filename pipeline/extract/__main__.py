"""`python -m pipeline.extract`: capture a target's hidden states into the store, or
estimate how many bytes that will take.

    python -m pipeline.extract --backend hf --model TARGET --data MERGED.jsonl --out STORE [...]
    python -m pipeline.extract --estimate --model TARGET --stats STATS.json [--dtype bf16] [--json]
        [--limit N [--data DATASET]]
    python -m pipeline.extract --verify --out STORE [--model TARGET] [--sample N] [--json]
    python -m pipeline.extract --backend sglang --server URL --dump-dir DIR --model TARGET --data MERGED.jsonl --out STORE

Exit codes: 0 done (or this rank's share done; --verify: the store is intact), 2 bad input
(also: "store STORE in use by pid N", another extraction writes to it), 3 stopped by the
disk reserve or a full disk (free space and rerun to resume), 1 anything else (--verify:
the store has problems, each printed on one line), 4 (--backend sglang) the server is
unreachable or failed --max-failures requests in a row: restart it and rerun to resume
(pipeline/extract/sglang_client.py).

--verify checks every sample's size and checksum (with --sample N: N random ones and the
last N written), that the manifest lists every sample, and with --model that the target's
weights are those the store was written with (pipeline/store/integrity.py). --json
prints StoreReport.to_json(): {"ok", "out", "expected", "samples", "tokens", "bytes",
"sizes_checked", "checksums_checked", "target_fingerprint", "model_fingerprint",
"problems", "problem_count"}.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

from ..events import EventWriter
from ..store.errors import StoreError
from .errors import BadInput, ExtractError
from .reserve import disk_full, format_bytes, is_disk_full, parse_size

PROG = "python -m pipeline.extract"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Extract EAGLE-3 hidden states from a target model.")
    p.add_argument("--estimate", action="store_true", help="print the bytes a run will write, and exit")
    p.add_argument("--verify", action="store_true",
                   help="check the store at --out (sizes, checksums, completeness; with --model its target) and exit")
    p.add_argument("--sample", type=int, default=None,
                   help="--verify only: checksum N random samples and the last N written instead of all")
    p.add_argument("--backend", default="hf", choices=["hf", "sglang"],
                   help="capture backend (default hf: transformers; sglang: a patched SGLang server, see sglang_client.py)")
    p.add_argument("--model", type=Path, help="target model folder (save_pretrained layout)")
    p.add_argument("--data", type=Path, help="merged dataset (JSONL)")
    p.add_argument("--out", type=Path, help="store folder")
    p.add_argument("--stats", type=Path, help="merge stats JSON (its dataset_sha256 is checked against --data)")
    p.add_argument("--batch-tokens", type=int, default=16384, help="padded tokens per forward (default 16384)")
    p.add_argument("--max-len", type=int, default=None, help="truncate samples to this many tokens")
    p.add_argument("--writers", type=int, default=4, help="concurrent store writes (default 4): writer threads for the HF backend, "
                        "write slots for the SGLang client")
    p.add_argument("--queue", type=int, default=4,
                   help="captured batches held in host memory awaiting writes (default 4); "
                        "host memory is about queue x batch-tokens x 4 x hidden x dtype bytes")
    p.add_argument("--reserve", default="10GB", help="stop cleanly when free space would drop below this (default 10GB)")
    p.add_argument("--rank", type=int, default=None, help="this process's shard (default: $RANK under torchrun, else 0)")
    p.add_argument("--world-size", type=int, default=None, help="number of shards (default: $WORLD_SIZE, else 1)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--no-compile", action="store_true",
                   help="do not torch.compile the decoder layers (compiled by default on CUDA, never on CPU)")
    p.add_argument("--limit", type=int, default=None, help="extract only the first N samples of the dataset")
    p.add_argument("--window", type=int, default=2048, help="samples sorted together by length (default 2048)")
    p.add_argument("--dtype", default="bf16", help="--estimate only: bytes per value (bf16, fp16, fp32)")
    p.add_argument("--json", action="store_true", help="--estimate, --verify: print a JSON object")
    s = p.add_argument_group("--backend sglang")
    s.add_argument("--server", help="the extraction-mode server's URL, e.g. http://127.0.0.1:30000")
    s.add_argument("--dump-dir", type=Path, help="the server's dump folder (its EAGLE3_DUMP_DIR)")
    s.add_argument("--dump-budget", default="8GB", help="bytes the dump folder may hold: the server's "
                   "EAGLE3_DUMP_BUDGET (default 8GB); requests are held back to stay under it")
    s.add_argument("--concurrency", type=int, default=8, help="requests in flight (default 8)")
    s.add_argument("--request-timeout", type=float, default=600.0,
                   help="seconds one request may take, answer and dump included (default 600)")
    s.add_argument("--retries", type=int, default=3, help="attempts per sample (default 3)")
    s.add_argument("--max-failures", type=int, default=20,
                   help="failed attempts in a row that mean the server is dead: stop with exit 4 (default 20)")
    return p


def _need(args: argparse.Namespace, *names: str) -> None:
    missing = [f"--{n.replace('_', '-')}" for n in names if getattr(args, n) is None]
    if missing:
        raise BadInput(f"missing {', '.join(missing)}; see {PROG} --help")


def _estimate(args: argparse.Namespace) -> int:
    from .estimate import estimate

    _need(args, "model", "stats")
    est = estimate(args.model, args.stats, args.dtype, args.limit, args.data)
    if args.json:
        print(json.dumps(est))
    else:
        print(est["bytes"])
        print(f"extract estimate: {format_bytes(est['bytes'])} for {est['tokens']:,} tokens in {est['records']:,} "
              f"samples (hidden {est['hidden']}, {est['dtype']})", file=sys.stderr)
    return 0


def _verify(args: argparse.Namespace) -> int:
    from ..store.integrity import verify_store

    _need(args, "out")
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
    return 0 if report.ok else 1


def _extract(args: argparse.Namespace) -> int:
    _need(args, "model", "data", "out")
    from .job import ExtractOptions, prepare
    from ..store.meta import TargetInfo
    from .sharding import device_for, resolve_shard

    try:
        reserve = parse_size(args.reserve)
    except ValueError as e:
        raise BadInput(f"--reserve: {e}") from None
    target = TargetInfo.from_dir(args.model)
    shard = resolve_shard(args.rank, args.world_size)
    options = ExtractOptions(data=args.data, out=args.out, stats=args.stats, batch_tokens=args.batch_tokens,
                             max_len=args.max_len, writers=args.writers, queue=args.queue, reserve=reserve,
                             limit=args.limit, window=args.window)
    options.validate()
    if args.device == "cpu":
        device = "cpu"  # no torch import before the input checks: refusals stay instant
    else:
        import torch

        device = device_for(args.device, shard, torch.cuda.is_available(), torch.cuda.device_count())
    dtype = "bfloat16" if device.startswith("cuda") else "float32"
    job = prepare(options, target, dtype, shard)
    try:
        return _run(args, job, device, dtype)
    finally:
        if job.lock is not None:
            job.lock.release()


def _run(args: argparse.Namespace, job, device: str, dtype: str) -> int:
    shard = job.shard
    events = EventWriter.from_env()
    for index, why in sorted(job.damaged.items()):
        print(f"extract: sample {index} fails the resume check and will be extracted again: {why}", flush=True)
    todo = job.rank_todo_samples
    tag = f"rank {shard.rank}/{shard.world_size}: " if shard.world_size > 1 else ""
    print(f"extract: {tag}{job.total} samples in the run, {len(job.done)} already in the manifest; "
          f"this process: {todo} samples in {len(job.todo)} batches on {device} ({dtype}), "
          f"capture layers {job.layers}, store {job.out}", flush=True)

    from . import engine

    if todo == 0:
        complete = engine.finalize_or_stop(job.out, job.total)
        print(f"extract: {tag}nothing left to do" + ("; store complete" if complete else ""), flush=True)
        return 0

    import torch

    from .capture import load_target

    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    torch_dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    model = load_target(args.model, device, torch_dtype)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    result = engine.run(job, model, device, events, log=lambda s: print(s, flush=True), stop=stop,
                        compile=False if args.no_compile else None)
    print(f"extract: {tag}wrote {result.samples} samples, {result.tokens:,} tokens, {format_bytes(result.bytes)} "
          f"in {result.seconds:.1f} s ({result.tokens_per_s:,.0f} tokens/s)", flush=True)
    if result.complete:
        print(f"extract: store complete: {job.out} ({result.done} samples)", flush=True)
    else:
        print(f"extract: {tag}share done; {result.done}/{result.total} samples in the store, it completes when "
              "the other ranks finish", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.verify:
            return _verify(args)
        if args.backend == "sglang" and not args.estimate:
            from .sglang_client import extract

            return extract(args)
        return _estimate(args) if args.estimate else _extract(args)
    except (ExtractError, StoreError) as e:
        print(f"extract: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    except OSError as e:
        if not is_disk_full(e):
            print(f"extract: failed: {e}", file=sys.stderr, flush=True)
            return 1
        stop = disk_full(e, "writing the store", args.out)
        print(f"extract: {stop}", file=sys.stderr, flush=True)
        return stop.exit_code
    except KeyboardInterrupt:
        print("extract: interrupted; rerun the same command to resume", file=sys.stderr, flush=True)
        return 1
    except Exception as e:  # noqa: BLE001 - the program's edge: one line, no traceback
        print(f"extract: failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())

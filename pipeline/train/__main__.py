"""`python -m pipeline.train`: train an EAGLE-3 drafter, offline on a hidden-state store or
online on the merged dataset (the target, loaded here, computes the states batch by batch).

    python -m pipeline.train --store STORE | --data MERGED.jsonl --target TARGET --out RUN_DIR [--epochs N | --steps N]
        [--batch-tokens N | --batch-size N] [--lr X] [--ttt-length 7] [--draft-vocab 32000] [--resume]
        [--val-share 0.02 | --val-samples N] [--vocab-data MERGED.jsonl|store] [--stats STATS.json|none]
    torchrun --nproc-per-node 8 -m pipeline.train ...      (DDP; --nnodes/--rdzv-* work unchanged)
    python -m pipeline.train --estimate --target TARGET [--data MERGED.jsonl] [--batch-tokens N] [--json]

Writes RUN_DIR/checkpoints/step_*/ (+ `latest`), RUN_DIR/summary.json, and events to
$EAGLE3_EVENTS (progress in steps, metrics loss, acc_<i>, loss_<i>, tokens_per_s, lr,
val_loss, val_acc_<i>). `--resume` with a larger --steps/--epochs extends a finished run.

Online, --data must come with merge's stats (beside it, or --stats) recording the target's
tokenizer: data merged with another tokenizer (even a permutation of the same size) is exit 2.

Exit codes: 0 finished, 2 bad input (store incomplete or from another target, a sample that
means nothing, a target whose config does not describe its weights, data merged with another
tokenizer or changed mid-run, missing files, bad arguments, a checkpoint that does not fit;
each names the file), 3 stopped by SIGTERM after writing a
checkpoint (rerun with --resume), or stopped at a step whose loss, gradient or weights are not
finite (the checkpoints kept are all finite), 130 the same after Ctrl-C, 1 anything else.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from contextlib import AbstractContextManager
from pathlib import Path

from pipeline import cpu_threads
from pipeline.program_edge import SigtermGuard, on_sigterm, run_program
from pipeline.records.train_estimate import format_estimate

from .errors import Stopped

PROG = "python -m pipeline.train"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Train an EAGLE-3 drafter on a hidden-state store (offline) "
                                "or on the merged dataset, the target computing the states as it goes (online).")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--store", type=Path, default=None, help="offline: hidden-state store (pipeline.extract --out)")
    src.add_argument("--data", type=Path, default=None, help="online: merged JSONL (pipeline.merge --out); the target "
                     "is loaded on each rank's device and nothing is written to disk")
    p.add_argument("--target", type=Path, required=True, help="target model folder (config.json + safetensors)")
    p.add_argument("--out", type=Path, default=None, help="run folder: checkpoints, summary.json (required to train)")
    p.add_argument("--estimate", action="store_true", help="print the GPU memory a run of these settings needs "
                   "(target, drafter, optimiser, one batch's activations) and exit")
    p.add_argument("--json", action="store_true", help="--estimate: print a JSON object")
    p.add_argument("--no-compile-target", dest="compile_target", action="store_const", const=False, default=None,
                   help="online: run the target's layers eagerly (default: torch.compile on CUDA)")
    p.add_argument("--no-compile-loss", dest="compile_loss", action="store_const", const=False, default=None,
                   help="run the drafter's step eagerly: the objective's passes over the vocabulary, the TTT "
                   "attention's merge, the layer around it (default: torch.compile on CUDA)")
    p.add_argument("--draft-vocab", type=int, default=32000, help="draft vocabulary size (default 32000, capped at "
                   "the target's)")
    p.add_argument("--ttt-length", type=int, default=7, help="training-time-test steps (default 7)")
    p.add_argument("--lr", type=float, default=1e-4, help="peak learning rate (default 1e-4)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--epochs", type=int, default=None, help="passes over the store (default 1)")
    g.add_argument("--steps", type=int, default=None, help="optimiser steps instead of epochs")
    b = p.add_mutually_exclusive_group()
    b.add_argument("--batch-tokens", type=int, default=None,
                   help="padded tokens per rank per step (default 16384); samples of similar length batch together")
    b.add_argument("--batch-size", type=int, default=None, help="samples per rank per step instead")
    p.add_argument("--max-len", type=int, default=2048, help="cut samples to this many tokens (default 2048)")
    p.add_argument("--seed", type=int, default=0, help="model init and data order (default 0)")
    p.add_argument("--warmup-ratio", type=float, default=0.02, help="share of steps in linear warmup (default 0.02)")
    p.add_argument("--min-lr-ratio", type=float, default=0.0, help="cosine floor as a share of --lr (default 0)")
    p.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay (default 0)")
    p.add_argument("--max-grad-norm", type=float, default=0.5, help="gradient clipping, 0 for none (default 0.5)")
    p.add_argument("--save-every", type=int, default=1000, help="checkpoint every N steps and at the end (default 1000)")
    p.add_argument("--keep-last", type=int, default=3, help="checkpoints kept (default 3)")
    p.add_argument("--log-every", type=int, default=10, help="log and emit metrics every N steps (default 10)")
    p.add_argument("--workers", type=int, default=2, help="data loader processes per rank (default 2)")
    p.add_argument("--prefetch", type=int, default=4, help="batches each loader process reads ahead (default 4)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint "
                   "(starts fresh when there is none)")
    p.add_argument("--overwrite", action="store_true", help="delete the checkpoints in --out and start over")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available; rank's LOCAL_RANK GPU)")
    p.add_argument("--gpu-memory-share", type=float, default=None, help="the most of its GPU this process may hold, "
                   "0.02-1 (default: all): for several trainers on one GPU, whose caching allocators would otherwise "
                   "each keep what they once used and starve the others")
    p.add_argument("--checksums", default="sample", choices=["all", "sample", "none"],
                   help="store files whose checksum is verified before training (default sample)")
    p.add_argument("--init-head", default="target", choices=["target", "random"],
                   help="start the drafter's lm_head from the target's rows of the draft vocabulary (default)")
    v = p.add_mutually_exclusive_group()
    v.add_argument("--val-share", type=float, default=0.02,
                   help="share of the store held out for validation, never trained on (default 0.02, at most 256 "
                        "samples; 0 for none)")
    v.add_argument("--val-samples", type=int, default=None, help="held-out validation samples instead of a share")
    p.add_argument("--val-every", type=int, default=None, help="validate every N steps and at the end "
                   "(default: --save-every)")
    p.add_argument("--vocab-data", default=None, help="merged JSONL to choose the draft vocabulary over (default: "
                   "the store's meta.json dataset when it is there unchanged; 'store' for the store's samples)")
    p.add_argument("--stats", default=None, metavar="STATS.json|none",
                   help="online: merge's stats of --data (default: <data stem>.stats.json beside it); the tokenizer "
                        "they record must be the target's. 'none' trains without that check")
    cpu_threads.add_option(p)
    return p


def stop_signals(stop: threading.Event, got: list[int] | None = None) -> AbstractContextManager[SigtermGuard]:
    """SIGTERM/SIGINT: checkpoint and stop (the loop sees `stop` between steps and between TTT
    passes). A DataLoader worker forked before its worker_init_fn ignores these inherits this
    handler: there it stays silent and running (a worker that exited would make torch raise in
    the main process, maybe mid-checkpoint), so the operator reads the message once, from the
    process that checkpoints. `got` collects the signals that came."""

    def on_signal(signum: int) -> None:
        print(f"train: {signal.Signals(signum).name} received; checkpointing and stopping", flush=True)
        if got is not None:
            got.append(signum)
        stop.set()

    return on_sigterm(on_signal, signals=(signal.SIGTERM, signal.SIGINT), child="ignore")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.estimate:
        return run_program("train", lambda: _estimate(args))
    if args.out is None:
        build_parser().error("--out is required to train (only --estimate runs without it)")
    stop = threading.Event()
    got: list[int] = []

    def body() -> int:
        cpu_threads.fit("train", args.threads)
        from .loop import Options, run

        fields = dict(vars(args))
        fields.pop("estimate"), fields.pop("json")
        opts = Options(**fields)
        try:
            summary = run(opts, log=lambda s: print(s, flush=True), stop=stop)
        except Stopped as e:
            if got and got[0] == signal.SIGINT:  # Ctrl-C: the same checkpoint, the interrupt's exit code
                raise KeyboardInterrupt(str(e)) from None
            raise
        if summary.checkpoint:
            print(f"train: done: {summary.steps} steps, loss {summary.loss:.4f}, acc_0 {summary.acc[0]:.3f}; "
                  f"checkpoint {summary.checkpoint}", flush=True)
        return 0

    with stop_signals(stop, got):
        return run_program("train", body)


def _estimate(args: argparse.Namespace) -> int:
    from .estimate import describe, estimate, micro_batch_tokens

    est = estimate(args.target, online=args.data is not None or args.store is None,
                   batch_tokens=micro_batch_tokens(args.batch_tokens, args.batch_size, args.max_len),
                   draft_vocab=args.draft_vocab, ttt_length=args.ttt_length, max_len=args.max_len)
    print(format_estimate(est) if args.json else describe(est), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

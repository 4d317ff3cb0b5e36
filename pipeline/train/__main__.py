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

import signal
import sys
import threading
from contextlib import AbstractContextManager

from pipeline import cpu_threads
from pipeline.program_edge import SigtermGuard, on_sigterm, run_program
from pipeline.records.train_estimate import format_estimate
from pipeline.train.errors import Stopped
from pipeline.train.estimate import describe, estimate, micro_batch_tokens
from pipeline.train.options import Options, parse


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
    opts = parse(argv)
    if opts.estimate:
        return run_program("train", lambda: _estimate(opts))
    stop = threading.Event()
    got: list[int] = []

    def body() -> int:
        cpu_threads.fit("train", opts.threads)
        from pipeline.train.loop import run

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


def _estimate(opts: Options) -> int:
    est = estimate(opts.target, online=opts.online or opts.store is None,
                   batch_tokens=micro_batch_tokens(opts.batch_tokens, opts.batch_size, opts.max_len),
                   draft_vocab=opts.draft_vocab, ttt_length=opts.ttt_length, max_len=opts.max_len)
    print(format_estimate(est) if opts.json else describe(est), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

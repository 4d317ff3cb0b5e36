"""One training run, start or resume, on one process or as a rank of torchrun.

Exactness on resume rests on three things: the data order is a pure function of (seed,
epoch, batch settings, world size, held-out slice) (schedule.build_schedule), the checkpoint
holds everything else that changes (weights, AdamW moments, scheduler, step, RNG states, the
metrics history), and a run refuses to resume on another source, other batch settings or
another held-out slice (checkpoint.check_resume). Logged metrics cost one all-reduce and one host sync
every --log-every steps; the finiteness check none (the device skips a refused step, the host
reads the flag a step later: step.py).

The pieces: setup.build (source, drafter, optimiser), step (one optimiser step and its
metrics), validation.Validator, checkpoint (keep and restore), summary (summary.json); this
module sequences them, and decides when to stop (`should_stop`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import NoReturn

import torch

from pipeline.events import warn
from pipeline.records.train_summary import TrainSummary
from pipeline.train import checkpoint, draft_vocab, summary
from pipeline.train import step as steps
from pipeline.train.data import StepDataset
from pipeline.train.dist import Dist
from pipeline.train.errors import Stopped
from pipeline.train.estimate import estimate, micro_batch_tokens, short_share
from pipeline.train.finite import NotFinite
from pipeline.train.loader import batches
from pipeline.train.loss import StepAborted
from pipeline.train.options import Options
from pipeline.train.run import Run
from pipeline.train.setup import build
from pipeline.train.validation import Validator

STEP_DELAY_ENV = "EAGLE3_TRAIN_STEP_DELAY"
"""Test hook: seconds to sleep after each step, so a kill test lands mid-run. Unset in real runs."""

__all__ = ["Options", "run"]


def run(opts: Options, log: Callable[[str], None] = print, stop: threading.Event | None = None) -> TrainSummary:
    opts = opts.resolved()
    opts.validate()
    stop = stop or threading.Event()
    dist = Dist.from_env(opts.device)
    log = log if dist.rank == 0 else (lambda _s: None)
    try:
        if opts.gpu_memory_share is not None and dist.device.type == "cuda":
            torch.cuda.set_per_process_memory_fraction(opts.gpu_memory_share, dist.device)
            if dist.rank == 0:
                _check_share(opts, opts.gpu_memory_share, torch.cuda.get_device_properties(dist.device).total_memory, log)
        return _run(opts, dist, log, stop)
    finally:
        dist.close()


def _check_share(opts: Options, share: float, total: int, log: Callable[[str], None]) -> None:
    """Rank 0 only: the estimate reads the target's config and weight headers, the same for every rank."""
    est = estimate(opts.target, online=opts.online,
                   batch_tokens=micro_batch_tokens(opts.batch_tokens, opts.batch_size, opts.max_len),
                   draft_vocab=opts.draft_vocab, ttt_length=opts.ttt_length, max_len=opts.max_len)
    warning = short_share(est, share, total)
    if warning:
        warn("train", warning, log=log)


def _run(opts: Options, dist: Dist, log: Callable[[str], None], stop: threading.Event) -> TrainSummary:
    r = build(opts, dist, log, stop)
    try:
        if r.state is not None:
            if not checkpoint.restore(r):
                return summary.finished(r)
        else:
            log(draft_vocab.describe(r.model.vocab, r.model.vocab_note or {}, r.dcfg.vocab_size, len(r.val_pos)))
        log(_intro_line(r))
        return _train(r)
    finally:
        r.close()


def _train(r: Run) -> TrainSummary:
    """The steps from r.progress.start on; the loader's workers are gone when this returns or raises."""
    dataset = StepDataset(r.source, r.schedule[r.progress.start:], r.plans, r.dist.rank, r.opts.max_len)
    with batches(dataset, r.opts.workers, r.opts.prefetch, r.cuda) as feed:
        return _steps(r, feed)


def _steps(r: Run, feed: Iterator[dict[str, torch.Tensor]]) -> TrainSummary:
    opts, world, n, progress = r.opts, r.dist.world_size, r.opts.ttt_length, r.progress
    validate = Validator(r)
    val_every = opts.val_every or opts.save_every
    win = steps.Window(n, r.device)
    last = {"loss": progress.history[-1]["loss"], "acc": progress.history[-1]["acc"]} if progress.history else \
        {"loss": float("nan"), "acc": [float("nan")] * n}
    began, tokens_at_start = time.monotonic(), progress.tokens_total
    step = progress.start
    saved_at = progress.start if r.state is not None else None
    delay = float(os.environ.get(STEP_DELAY_ENV) or 0)
    r.drafter.train()
    for batch in feed:
        try:
            batch = steps.to_device(r, batch)
            result = steps.forward_backward(r, batch)
        except StepAborted:
            r.opt.zero_grad(set_to_none=True)
            _settle(r)
            _stop_mid_step(r, step, saved_at, win, last, began, tokens_at_start)
        try:
            steps.apply(r, step, result.loss, batch)
        except NotFinite as e:
            _refused(r, e)
        step += 1
        if delay:
            time.sleep(delay)
        win.add(result, world)
        log_now = step % opts.log_every == 0 or step == r.total or (world == 1 and r.stop.is_set())
        if log_now or step % val_every == 0 or step % opts.save_every == 0:
            _settle(r)  # nothing of a refused step is logged, validated or saved
        if log_now:
            last = steps.log_window(r, win, step)
            win = steps.Window(n, r.device)
        stop_now = should_stop(r, log_now)
        if (step % val_every == 0 or step == r.total) and not stop_now:
            validate(step)
        if step % opts.save_every == 0 or step == r.total:
            checkpoint.keep(r, step, win.tokens)
            saved_at = step
        if stop_now:
            if saved_at != step:
                checkpoint.keep(r, step, win.tokens)
            r.log(f"train: stopped after step {step}/{r.total}: kept its checkpoint; dropped nothing")
            summary.summarize(r, step, last, True, began, tokens_at_start)
            r.events.close()
            raise Stopped(f"stopped at step {step}/{r.total}; checkpoint "
                          f"{checkpoint.folder_of(r.out, step)}; rerun with --resume to continue")
    _settle(r)
    done = summary.summarize(r, step, last, False, began, tokens_at_start)
    if r.dist.rank == 0:
        r.events.close()
    return done


def should_stop(r: Run, at_log_line: bool) -> bool:
    """Whether the run stops after this step (SIGTERM/SIGINT set `r.stop`): decided at log lines
    only, where alone a stop asked for always makes one, and with ranks every rank sums the same
    flag, so all stop after the same step or none does (a rank stopping alone would leave the
    others waiting in their next all-reduce)."""
    if not at_log_line:
        return False
    if r.dist.world_size == 1:
        return r.stop.is_set()
    asked = torch.tensor([1.0 if r.stop.is_set() else 0.0], device=r.device)
    return bool(r.dist.all_reduce_sum(asked).item() > 0)


def _settle(r: Run) -> None:
    """The last step's finiteness check, read now: a refused step ends the run (exit 3)."""
    try:
        r.guard.settle(r.total, lambda: checkpoint.last_good(r))
    except NotFinite as e:
        _refused(r, e)


def _refused(r: Run, e: NotFinite) -> NoReturn:
    r.events.message(str(e), level="error")
    r.events.close()
    raise e


def _stop_mid_step(r: Run, step: int, saved_at: int | None, win: steps.Window, last: dict, began: float,
                   tokens_at_start: int) -> NoReturn:
    """A stop landed inside step `step + 1`: keep step `step` (saved now if it was not), drop the rest."""
    kept = checkpoint.keep(r, step, win.tokens) if saved_at != step and step else None
    r.progress.tokens_total += int(win.tokens.item())
    kept_name = kept or (checkpoint.folder_of(r.out, step) if step else None)
    r.log(f"train: stopped during step {step + 1}/{r.total}: kept "
          + (f"the checkpoint of step {step} ({kept_name})" if step else "nothing (no step had finished)")
          + f"; dropped the unfinished step {step + 1} (--resume trains it again)")
    if step:
        summary.summarize(r, step, last, True, began, tokens_at_start)
    r.events.close()
    raise Stopped(f"stopped at step {step}/{r.total}"
                  + (f"; checkpoint {kept_name}; rerun with --resume to continue" if step else "")) from None


def _intro_line(r: Run) -> str:
    lengths, plan = r.source.lengths, r.plan
    return (f"train: {len(r.train_pos)} samples, {sum(lengths[p] for p in r.train_pos):,} tokens"
            + (f" ({len(r.val_pos)} more held out for validation)" if r.val_pos else "")
            + (" from " + r.source.describe() if r.states is not None else "")
            + f"; {r.total} steps of {plan.describe()}; TTT {r.opts.ttt_length}; lr {r.opts.lr}, "
            f"warmup {r.optimiser.warmup}; "
            f"device {r.device}" + (f", {r.dist.world_size} ranks" if r.dist.world_size > 1 else ""))

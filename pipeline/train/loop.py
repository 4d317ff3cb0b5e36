"""One training run, start or resume, on one process or as a rank of torchrun.

Exactness on resume rests on three things: the data order is a pure function of (seed,
epoch, batch settings, world size, held-out slice) (schedule.build_schedule), the checkpoint
holds everything else that changes (weights, AdamW moments, scheduler, step, RNG states, the
metrics history), and a run refuses to resume on another source, other batch settings or
another held-out slice (resume.py). Logged metrics cost one all-reduce and one host sync
every --log-every steps; the finiteness check none (the device skips a refused step, the host
reads the flag a step later: step.py).

The pieces: setup.build (source, drafter, optimiser), setup.restore, step (one optimiser
step and its metrics), validation.Validator, saving (checkpoints, summary.json); this
module only sequences them.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import NoReturn

import torch

from pipeline.events import warn
from pipeline.records.train_summary import TrainSummary
from pipeline.train import checkpoint, saving
from pipeline.train import step as steps
from pipeline.train.data import StepDataset
from pipeline.train.dist import Dist
from pipeline.train.errors import Stopped
from pipeline.train.estimate import estimate, micro_batch_tokens, short_share
from pipeline.train.loader import batches
from pipeline.train.loss import StepAborted
from pipeline.train.options import Options
from pipeline.train.setup import Run, build, restore
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
                _check_share(opts, torch.cuda.get_device_properties(dist.device).total_memory, log)
        return _run(opts, dist, log, stop)
    finally:
        dist.close()


def _check_share(opts: Options, total: int, log: Callable[[str], None]) -> None:
    """Rank 0 only: the estimate reads the target's config and weight headers, the same for every rank."""
    est = estimate(opts.target, online=opts.online,
                   batch_tokens=micro_batch_tokens(opts.batch_tokens, opts.batch_size, opts.max_len),
                   draft_vocab=opts.draft_vocab, ttt_length=opts.ttt_length, max_len=opts.max_len)
    warning = short_share(est, opts.gpu_memory_share, total)
    if warning:
        warn("train", warning, log=log)


def _run(opts: Options, dist: Dist, log: Callable[[str], None], stop: threading.Event) -> TrainSummary:
    r = build(opts, dist, log, stop)
    try:
        if r.state is not None:
            finished = restore(r)
            if finished is not None:
                return finished
        else:
            log(_vocab_line(r))
        log(_intro_line(r))
        return _train(r)
    finally:
        r.close()


def _train(r: Run) -> TrainSummary:
    """The steps from r.start on; the loader's workers are gone when this returns or raises."""
    dataset = StepDataset(r.source, r.schedule[r.start:], r.plans, r.dist.rank, r.opts.max_len)
    with batches(dataset, r.opts.workers, r.opts.prefetch, r.cuda) as feed:
        return _steps(r, feed)


def _steps(r: Run, feed) -> TrainSummary:
    opts, world, n = r.opts, r.dist.world_size, r.opts.ttt_length
    validate = Validator(r)
    val_every = opts.val_every or opts.save_every
    win = steps.Window(n, r.device)
    last = {"loss": r.history[-1]["loss"], "acc": r.history[-1]["acc"]} if r.history else \
        {"loss": float("nan"), "acc": [float("nan")] * n}
    began, tokens_at_start = time.monotonic(), r.tokens_total
    step = r.start
    saved_at = r.start if r.state is not None else None
    delay = float(os.environ.get(STEP_DELAY_ENV) or 0)
    r.drafter.train()
    for batch in feed:
        try:
            batch = steps.to_device(r, batch)
            loss, sums, correct, prep, counts = steps.forward_backward(r, batch)
        except StepAborted:
            r.opt.zero_grad(set_to_none=True)
            _settle(r)
            _stop_mid_step(r, step, saved_at, win, last, began, tokens_at_start)
        try:
            steps.apply(r, step, loss, batch)
        except steps.NotFinite as e:
            _refused(r, e)
        step += 1
        if delay:
            time.sleep(delay)
        steps.add_to_window(win, loss, sums, correct, prep, counts, batch, world)
        stop_now = r.stop.is_set() if world == 1 else False
        log_now = step % opts.log_every == 0 or step == r.total or (world == 1 and stop_now)
        if log_now or step % val_every == 0 or step % opts.save_every == 0:
            _settle(r)  # nothing of a refused step is logged, validated or saved
        if log_now:
            last, stop_now = steps.log_window(r, win, step)
            win = steps.Window(n, r.device)
        if (step % val_every == 0 or step == r.total) and not stop_now:
            validate(step)
        if step % opts.save_every == 0 or step == r.total:
            saving.save(r, step, win.tokens)
            saved_at = step
        if stop_now:
            if saved_at != step:
                saving.save(r, step, win.tokens)
            r.log(f"train: stopped after step {step}/{r.total}: kept its checkpoint; dropped nothing")
            saving.summarize(r, step, last, True, began, tokens_at_start)
            r.events.close()
            raise Stopped(f"stopped at step {step}/{r.total}; checkpoint "
                          f"{r.out / checkpoint.DIR / checkpoint.step_name(step)}; rerun with --resume to continue")
    _settle(r)
    summary = saving.summarize(r, step, last, False, began, tokens_at_start)
    if r.dist.rank == 0:
        r.events.close()
    return summary


def _settle(r: Run) -> None:
    """The last step's finiteness check, read now: a refused step ends the run (exit 3)."""
    try:
        r.guard.settle(r)
    except steps.NotFinite as e:
        _refused(r, e)


def _refused(r: Run, e: steps.NotFinite) -> NoReturn:
    r.events.message(str(e), level="error")
    r.events.close()
    raise e


def _stop_mid_step(r: Run, step: int, saved_at: int | None, win: steps.Window, last: dict, began: float,
                   tokens_at_start: int) -> None:
    """A stop landed inside step `step + 1`: keep step `step` (saved now if it was not), drop the rest."""
    kept = saving.save(r, step, win.tokens) if saved_at != step and step else None
    r.tokens_total += int(win.tokens.item())
    kept_name = kept or (r.out / checkpoint.DIR / checkpoint.step_name(step) if step else None)
    r.log(f"train: stopped during step {step + 1}/{r.total}: kept "
          + (f"the checkpoint of step {step} ({kept_name})" if step else "nothing (no step had finished)")
          + f"; dropped the unfinished step {step + 1} (--resume trains it again)")
    if step:
        saving.summarize(r, step, last, True, began, tokens_at_start)
    r.events.close()
    raise Stopped(f"stopped at step {step}/{r.total}"
                  + (f"; checkpoint {kept_name}; rerun with --resume to continue" if step else "")) from None


def _intro_line(r: Run) -> str:
    lengths, plan = r.source.lengths, r.plan
    return (f"train: {len(r.train_pos)} samples, {sum(lengths[p] for p in r.train_pos):,} tokens"
            + (f" ({len(r.val_pos)} more held out for validation)" if r.val_pos else "")
            + (" from " + r.source.describe() if r.states is not None else "")
            + f"; {r.total} steps of {plan.describe()}; TTT {r.opts.ttt_length}; lr {r.opts.lr}, warmup {r.warmup}; "
            f"device {r.device}" + (f", {r.dist.world_size} ranks" if r.dist.world_size > 1 else ""))


def _vocab_line(r: Run) -> str:
    vocab, note, held_out = r.vocab, r.vocab_note, len(r.val_pos)
    line = (f"train: draft vocabulary {vocab.size} of {r.dcfg.vocab_size} tokens, chosen over {note['source']}: it "
            f"covers {note['coverage_chosen_on']:.1%} of the answer tokens it was chosen on")
    if note.get("held_out_coverage") is not None:
        line += (f" and {note['held_out_coverage']:.1%} of the {held_out} held-out samples' "
                 f"({note['held_out_distinct_missing']} of their {note['held_out_distinct_tokens']} distinct answer "
                 "tokens are missing)")
    else:
        line += " (no held-out slice to measure it on: --val-share 0)"
    return line

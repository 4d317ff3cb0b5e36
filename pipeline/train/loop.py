"""One training run, start or resume, on one process or as a rank of torchrun.

Exactness on resume rests on three things: the data order is a pure function of (seed,
epoch, batch settings, world size) (data.plan_epoch), the checkpoint holds everything else
that changes (weights, AdamW moments, scheduler, step, RNG states), and a run refuses to
resume on another store or other batch settings. Logged metrics cost one all-reduce and one
host sync every --log-every steps; between them the GPU runs ahead.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..atomicfile import write_json_atomic
from ..drafter import target_head
from ..drafter import vocab as dvocab
from ..drafter.config import DrafterConfig
from ..drafter.model import Eagle3Drafter, load_drafter
from ..events import EventWriter
from . import checkpoint
from .data import BatchPlan, StepDataset, count_loss_tokens, open_store, plan_epoch
from .dist import Dist
from .errors import BadInput, Stopped, TrainError
from .loss import TargetHead, TTTObjective, prepare, weights

SUMMARY = "summary.json"
STEP_DELAY_ENV = "EAGLE3_TRAIN_STEP_DELAY"
"""Test hook: seconds to sleep after each step, so a kill test lands mid-run. Unset in real runs."""
MAX_HISTORY = 4096
MAX_STEPS = 100_000_000


@dataclass
class Options:
    store: Path
    target: Path
    out: Path
    draft_vocab: int = 32000
    ttt_length: int = 7
    lr: float = 1e-4
    epochs: int | None = None
    steps: int | None = None
    batch_tokens: int | None = None
    batch_size: int | None = None
    max_len: int = 2048
    seed: int = 0
    warmup_ratio: float = 0.02
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.0
    max_grad_norm: float = 0.5
    save_every: int = 1000
    keep_last: int = 3
    log_every: int = 10
    workers: int = 2
    prefetch: int = 4
    resume: bool = False
    overwrite: bool = False
    device: str | None = None
    checksums: str = "sample"
    init_head: str = "target"

    def validate(self) -> None:
        def bound(name: str, v: float | None, lo: float, hi: float) -> None:
            if v is not None and not lo <= v <= hi:
                raise BadInput(f"--{name.replace('_', '-')} {v}: must be in {lo}..{hi}")

        if self.epochs is None and self.steps is None:
            self.epochs = 1
        if self.batch_tokens is None and self.batch_size is None:
            self.batch_tokens = 16384
        if self.batch_tokens is not None and self.batch_size is not None:
            raise BadInput("--batch-tokens and --batch-size exclude each other; pass one")
        bound("draft_vocab", self.draft_vocab, 1, 4_000_000)
        bound("ttt_length", self.ttt_length, 1, 32)
        bound("lr", self.lr, 1e-8, 1.0)
        bound("epochs", self.epochs, 1, 10_000)
        bound("steps", self.steps, 1, MAX_STEPS)
        bound("batch_tokens", self.batch_tokens, 1, 1 << 24)
        bound("batch_size", self.batch_size, 1, 1 << 16)
        bound("max_len", self.max_len, 2, 1 << 20)
        bound("warmup_ratio", self.warmup_ratio, 0.0, 1.0)
        bound("min_lr_ratio", self.min_lr_ratio, 0.0, 1.0)
        bound("weight_decay", self.weight_decay, 0.0, 10.0)
        bound("max_grad_norm", self.max_grad_norm, 0.0, 1e6)
        bound("save_every", self.save_every, 1, MAX_STEPS)
        bound("keep_last", self.keep_last, 1, 10_000)
        bound("log_every", self.log_every, 1, MAX_STEPS)
        bound("workers", self.workers, 0, 64)
        bound("prefetch", self.prefetch, 1, 64)
        if self.batch_tokens is not None and self.batch_tokens < self.max_len:
            raise BadInput(f"--batch-tokens {self.batch_tokens} is below --max-len {self.max_len}: a long sample "
                           "would not fit; raise --batch-tokens or lower --max-len")
        if self.init_head not in ("target", "random"):
            raise BadInput(f"--init-head {self.init_head!r}: use target or random")
        if self.checksums not in ("all", "sample", "none"):
            raise BadInput(f"--checksums {self.checksums!r}: use all, sample or none")


@dataclass
class Window:
    """Metrics summed since the last log line (device tensors: no sync until logged)."""

    n: int
    device: torch.device
    steps: int = 0
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.loss = torch.zeros((), device=self.device)
        self.sums = torch.zeros(self.n, device=self.device)
        self.correct = torch.zeros(self.n, device=self.device)
        self.acc_rows = torch.zeros(self.n, device=self.device)
        self.loss_rows = torch.zeros(self.n, device=self.device)
        self.tokens = torch.zeros((), device=self.device)


def lr_lambda(total: int, warmup: int, min_ratio: float) -> Callable[[int], float]:
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return f


def _schedule(lengths: list[int], plan: BatchPlan, epochs: int | None, steps: int | None):
    plans: dict[int, list] = {}
    schedule: list[tuple[int, int]] = []
    epoch = 0
    while (epochs is not None and epoch < epochs) or (steps is not None and len(schedule) < steps):
        plans[epoch] = plan_epoch(lengths, plan, epoch)
        if not plans[epoch]:
            raise BadInput(f"the store's {len(lengths)} samples make fewer micro-batches than the {plan.world_size} "
                           "ranks of one step; use fewer ranks or smaller batches")
        schedule.extend((epoch, k) for k in range(len(plans[epoch])))
        epoch += 1
    if steps is not None:
        schedule = schedule[:steps]
    return plans, schedule


def _ignore_signals(_worker_id: int) -> None:
    """DataLoader workers leave SIGTERM/SIGINT to the main process, which checkpoints first."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _identity(opts: Options, plan: BatchPlan, store_identity: dict) -> dict:
    return {"store": store_identity, "plan": asdict(plan), "ttt_length": opts.ttt_length,
            "epochs": opts.epochs, "steps": opts.steps}


def _check_resume(saved: dict, now: dict, folder: Path) -> None:
    for section in ("store", "plan"):
        for key, value in now[section].items():
            if saved[section].get(key) != value:
                raise BadInput(f"{folder}: was trained with {section} {key}={saved[section].get(key)!r}, this run has "
                               f"{value!r}; resume with the same store and batch settings, or pass --overwrite")
    for key in ("ttt_length", "epochs", "steps"):
        if saved.get(key) != now[key]:
            raise BadInput(f"{folder}: was trained with {key}={saved.get(key)!r}, this run has {now[key]!r}; "
                           "resume with the same settings, or pass --overwrite")


def run(opts: Options, log: Callable[[str], None] = print, stop: threading.Event | None = None) -> dict:
    opts.validate()
    stop = stop or threading.Event()
    dist = Dist.from_env(opts.device)
    try:
        return _run(opts, dist, log if dist.rank == 0 else (lambda _s: None), stop)
    finally:
        dist.close()


def _run(opts: Options, dist: Dist, log: Callable[[str], None], stop: threading.Event) -> dict:
    device, world, rank = dist.device, dist.world_size, dist.rank
    cuda = device.type == "cuda"
    events = EventWriter.from_env() if rank == 0 else EventWriter(None)
    out = Path(opts.out)
    checkpoint.refuse_run_folder(out, [opts.store, opts.target])
    store = open_store(opts.store, opts.target, checksums=opts.checksums if rank == 0 else "none")
    cfg_json = target_head.read_config(opts.target)
    dcfg = DrafterConfig.from_target(cfg_json, opts.draft_vocab, where=str(Path(opts.target) / "config.json"))
    if opts.max_len > dcfg.max_position_embeddings:
        log(f"train: warning: --max-len {opts.max_len} is above the target's max_position_embeddings "
            f"{dcfg.max_position_embeddings}")
    plan = BatchPlan(batch_tokens=opts.batch_tokens, batch_size=opts.batch_size, max_len=opts.max_len,
                     world_size=world, seed=opts.seed)
    plans, schedule = _schedule(store.lengths, plan, opts.epochs, opts.steps)
    total = len(schedule)
    identity = _identity(opts, plan, store.identity())

    existing = checkpoint.latest_checkpoint(out)
    if existing is not None and not opts.resume:
        if not opts.overwrite:
            raise BadInput(f"{out} already holds checkpoints (latest {existing.name}); pass --resume to continue "
                           "it or --overwrite to start over")
        dist.barrier()
        if rank == 0:
            shutil.rmtree(out / checkpoint.DIR)
        dist.barrier()
        existing = None
    state = None
    if existing is not None:
        state = checkpoint.load_state(existing)
        _check_resume(state["identity"], identity, existing)
        drafter = load_drafter(existing)
        if drafter.config != dcfg:
            raise BadInput(f"{existing}/config.json does not describe a drafter of {opts.target} with "
                           f"--draft-vocab {opts.draft_vocab}; resume with the same target, or pass --overwrite")
        vocab = dvocab.from_buffers(drafter.d2t, drafter.t2d)
    else:
        counts = dist.all_reduce_sum(count_loss_tokens(store, dcfg.vocab_size, rank, world))
        vocab = dvocab.from_counts(counts, dcfg.draft_vocab_size)
        torch.manual_seed(opts.seed)
        drafter = Eagle3Drafter(dcfg)
        drafter.set_vocab(vocab)
    head_weight = target_head.read_lm_head(opts.target)
    drafter.load_embeddings(target_head.read_embeddings(opts.target))
    if state is None and opts.init_head == "target":
        with torch.no_grad():
            drafter.lm_head.weight.copy_(head_weight[vocab.ids].float())
    drafter.to(device)
    amp_dtype = torch.bfloat16 if cuda else torch.float32
    head = TargetHead(head_weight, vocab.ids, vocab.t2d, device, amp_dtype)
    del head_weight
    objective = dist.wrap(TTTObjective(drafter, opts.ttt_length))

    params = [p for p in drafter.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=opts.lr, betas=(0.9, 0.95), weight_decay=opts.weight_decay,
                            fused=True if cuda else None)
    warmup = max(1, round(opts.warmup_ratio * total)) if opts.warmup_ratio > 0 else 0
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(total, warmup, opts.min_lr_ratio))
    start = 0
    if state is not None:
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        checkpoint.set_rng_state(state["rng"])
        start = int(state["step"])
        if start >= total:
            log(f"train: {existing} is the last step ({start}/{total}); nothing left to train")
            try:
                return json.loads((out / SUMMARY).read_text())
            except (OSError, ValueError):
                return {"steps": start, "total_steps": total, "checkpoint": str(existing), "loss": float("nan"),
                        "acc": [float("nan")] * opts.ttt_length}
        log(f"train: resuming {existing} at step {start}/{total}")
    else:
        log(f"train: draft vocabulary {vocab.size} of {dcfg.vocab_size} tokens covers {vocab.coverage:.1%} of the "
            "loss tokens")
    log(f"train: {store.samples} samples, {store.tokens:,} tokens; {total} steps of {plan.describe()}; "
        f"TTT {opts.ttt_length}; lr {opts.lr}, warmup {warmup}; device {device}"
        + (f", {world} ranks" if world > 1 else ""))

    def snapshot(step: int) -> dict:
        return {"step": step, "epoch_position": list(schedule[step]) if step < total else None,
                "optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "rng": checkpoint.rng_state(),
                "identity": identity, "world_size": world}

    def save(step: int) -> Path | None:
        if world > 1:
            agree = dist.ranks_agree(torch.stack([p.detach().double().sum() for p in params]).sum())
            if not agree:
                raise TrainError(f"step {step}: the ranks' weights differ; not checkpointing a diverged model")
            log(f"train: step {step}: all {world} ranks agree on the weights")
        path = None
        if rank == 0:
            path = checkpoint.save(out, drafter, snapshot(step), keep_last=opts.keep_last)
            nbytes = sum(p.stat().st_size for p in path.iterdir())
            events.artifact(str(path), bytes=nbytes, step=step)
        dist.barrier()
        return path

    loader = torch.utils.data.DataLoader(
        StepDataset(store, schedule[start:], plans, rank, opts.max_len), batch_size=None, shuffle=False,
        num_workers=opts.workers, pin_memory=cuda, prefetch_factor=opts.prefetch if opts.workers else None,
        worker_init_fn=_ignore_signals if opts.workers else None)
    w = weights(opts.ttt_length, device)
    n = opts.ttt_length
    win = Window(n, device)
    history: list[dict] = []
    last = {"loss": float("nan"), "acc": [float("nan")] * n}
    began = time.monotonic()
    tokens_total = 0
    step = start
    saved_at = start if state is not None else None
    delay = float(os.environ.get(STEP_DELAY_ENV) or 0)
    drafter.train()
    for batch in loader:
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            prep = prepare(head, batch, n, amp_dtype if cuda else torch.float32)
            counts = dist.all_reduce_sum(prep.loss_rows.sum((1, 2)).float())
            sums, correct = objective(prep)
            loss = (w * sums / counts.clamp(min=1)).sum() * world
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if opts.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, opts.max_grad_norm)
        opt.step()
        sched.step()
        step += 1
        if delay:
            time.sleep(delay)
        win.steps += 1
        win.loss += loss.detach() / world
        win.sums += sums.detach()
        win.correct += correct.float()
        win.acc_rows += prep.acc_rows.sum((1, 2)).float()
        win.loss_rows += counts
        win.tokens += batch["lengths"].sum()
        stop_now = stop.is_set() if world == 1 else False
        if step % opts.log_every == 0 or step == total or (world == 1 and stop_now):
            packed = torch.cat([win.loss[None], win.sums, win.correct, win.acc_rows, win.tokens[None],
                                torch.tensor([1.0 if stop.is_set() else 0.0], device=device)])
            vals = dist.all_reduce_sum(packed).tolist()
            elapsed = max(time.monotonic() - win.started, 1e-9)
            loss_v = vals[0] / win.steps
            sums_v = vals[1:1 + n]
            acc = [c / max(a, 1.0) for c, a in zip(vals[1 + n:1 + 2 * n], vals[1 + 2 * n:1 + 3 * n])]
            rows = win.loss_rows.tolist()
            pos_loss = [s / max(r, 1.0) for s, r in zip(sums_v, rows)]
            tokens = int(vals[1 + 3 * n])
            tokens_total += tokens
            stop_now = vals[-1] > 0
            tps = tokens / elapsed
            lr = sched.get_last_lr()[0]
            last = {"loss": loss_v, "acc": acc}
            history.append({"step": step, "loss": round(loss_v, 6), "acc": [round(a, 4) for a in acc]})
            if len(history) > MAX_HISTORY:
                history = history[::2]
            events.progress(step, total, unit="steps", tokens=tokens_total)
            events.metric("loss", loss_v, step=step)
            for i, a in enumerate(acc):
                events.metric(f"acc_{i}", a, step=step)
            for i, pl in enumerate(pos_loss):
                events.metric(f"loss_{i}", pl, step=step)
            events.metric("tokens_per_s", tps, step=step)
            events.metric("lr", lr, step=step)
            log(f"train: step {step}/{total} loss {loss_v:.4f} acc " + " ".join(f"{a:.3f}" for a in acc)
                + f" | {tps:,.0f} tok/s lr {lr:.2e}")
            win = Window(n, device)
        if step % opts.save_every == 0 or step == total:
            save(step)
            saved_at = step
        if stop_now:
            if saved_at != step:
                save(step)
            raise Stopped(f"stopped at step {step}/{total}; checkpoint {out / checkpoint.DIR / checkpoint.step_name(step)}"
                          "; rerun with --resume to continue")
    seconds = time.monotonic() - began
    final = checkpoint.latest_checkpoint(out) if rank == 0 else None
    summary = {
        "steps": step, "total_steps": total, "resumed_from": start if state is not None else None,
        "loss": last["loss"], "acc": last["acc"], "tokens": tokens_total, "seconds": round(seconds, 3),
        "tokens_per_s": tokens_total / seconds if seconds > 0 else None,
        "checkpoint": str(final) if final else None, "draft_vocab_size": vocab.size,
        "draft_vocab_coverage": vocab.coverage if state is None else None,
        "world_size": world, "device": str(device), "history": history,
    }
    if rank == 0:
        write_json_atomic(out / SUMMARY, summary)
        events.close()
    return summary

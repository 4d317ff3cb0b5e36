"""One training run, start or resume, on one process or as a rank of torchrun.

Exactness on resume rests on three things: the data order is a pure function of (seed,
epoch, batch settings, world size, held-out slice) (data.plan_epoch), the checkpoint holds
everything else that changes (weights, AdamW moments, scheduler, step, RNG states, the
metrics history), and a run refuses to resume on another store, other batch settings or
another held-out slice. A resume with another --steps/--epochs extends (or shortens) the run:
the data order of the steps already done is the longer run's too, and the learning rate
follows the new total's schedule from the resumed step. Logged metrics cost one all-reduce
and one host sync every --log-every steps; between them the GPU runs ahead.
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

from ..atomic_io import write_json_atomic
from ..drafter import target_head
from ..drafter import vocab as dvocab
from ..drafter.config import DrafterConfig
from ..drafter.model import Eagle3Drafter, load_drafter
from ..events import EventWriter
from ..program_edge import leave_stops_to_parent
from . import checkpoint
from .data import (BatchPlan, StepDataset, collate, count_dataset_tokens, count_loss_tokens, open_store, plan_epoch,
                   read_sample, split_validation)
from .dist import Dist
from .errors import BadInput, Stopped, TrainError
from .loss import StepAborted, TargetHead, TTTObjective, prepare, weights

SUMMARY = "summary.json"
STEP_DELAY_ENV = "EAGLE3_TRAIN_STEP_DELAY"
"""Test hook: seconds to sleep after each step, so a kill test lands mid-run. Unset in real runs."""
MAX_HISTORY = 4096
MAX_STEPS = 100_000_000
DEFAULT_VAL_MAX = 256
"""--val-share's slice is capped at this many samples (an explicit --val-samples is not): each validation
reads its samples from the store, 50 MB apiece for an 8B target at 2048 tokens."""


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
    val_share: float = 0.02
    val_samples: int | None = None
    val_every: int | None = None
    vocab_data: str | None = None

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
        bound("val_share", self.val_share, 0.0, 0.5)
        bound("val_samples", self.val_samples, 0, MAX_STEPS)
        bound("val_every", self.val_every, 1, MAX_STEPS)
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


def _schedule(lengths: list[int], positions: list[int], plan: BatchPlan, epochs: int | None, steps: int | None):
    """Every step of the run over the store positions `positions` (the training share)."""
    plans: dict[int, list] = {}
    schedule: list[tuple[int, int]] = []
    sub = [lengths[p] for p in positions]
    identity = len(positions) == len(lengths)
    epoch = 0
    while (epochs is not None and epoch < epochs) or (steps is not None and len(schedule) < steps):
        steps_of = plan_epoch(sub, plan, epoch)
        plans[epoch] = steps_of if identity else [[[positions[i] for i in mb] for mb in st] for st in steps_of]
        if not plans[epoch]:
            raise BadInput(f"the store's {len(lengths)} samples make fewer micro-batches than the {plan.world_size} "
                           "ranks of one step; use fewer ranks or smaller batches")
        schedule.extend((epoch, k) for k in range(len(plans[epoch])))
        epoch += 1
    if steps is not None:
        schedule = schedule[:steps]
    return plans, schedule


def _ignore_signals(_worker_id: int) -> None:
    """DataLoader workers leave SIGTERM/SIGINT to the main process, which checkpoints first
    (and ends them)."""
    leave_stops_to_parent(signal.SIG_IGN)


def _identity(opts: Options, plan: BatchPlan, store_identity: dict, val: list[int], total: int) -> dict:
    return {"store": store_identity, "plan": asdict(plan), "ttt_length": opts.ttt_length,
            "epochs": opts.epochs, "steps": opts.steps, "total_steps": total,
            "val_samples": len(val), "val_digest": _digest(val)}


def _digest(positions: list[int]) -> str:
    import hashlib

    return hashlib.sha256(",".join(map(str, positions)).encode()).hexdigest()[:16]


def _check_resume(saved: dict, now: dict, folder: Path) -> None:
    for section in ("store", "plan"):
        for key, value in now[section].items():
            if saved[section].get(key) != value:
                raise BadInput(f"{folder}: was trained with {section} {key}={saved[section].get(key)!r}, this run has "
                               f"{value!r}; resume with the same store and batch settings, or pass --overwrite")
    if saved.get("ttt_length") != now["ttt_length"]:
        raise BadInput(f"{folder}: was trained with ttt_length={saved.get('ttt_length')!r}, this run has "
                       f"{now['ttt_length']!r}; resume with the same --ttt-length, or pass --overwrite")
    if saved.get("val_samples", 0) != now["val_samples"] or saved.get("val_digest", now["val_digest"]) != now["val_digest"]:
        raise BadInput(f"{folder}: was trained holding out {saved.get('val_samples', 0)} validation samples, this run "
                       f"holds out {now['val_samples']}{' others' if saved.get('val_samples') == now['val_samples'] else ''}"
                       "; resume with the same --val-share/--val-samples and --seed (--val-samples "
                       f"{saved.get('val_samples', 0)}), or pass --overwrite")


def _val_count(opts: Options, samples: int) -> int:
    if opts.val_samples is not None:
        return opts.val_samples
    return min(int(opts.val_share * samples), DEFAULT_VAL_MAX)


def _vocab_counts(opts: Options, store, vocab_size: int, train: list[int], val: list[int], dist: Dist,
                  log: Callable[[str], None]) -> tuple[torch.Tensor, str]:
    """Counts the draft vocabulary is chosen by, and where they come from: the merged dataset
    (--vocab-data, or the store's meta `dataset` when it is there unchanged) without the
    held-out records, else the store's training samples."""
    source = opts.vocab_data
    if source != "store":
        path = Path(source) if source else (Path(store.meta["dataset"]) if store.meta.get("dataset") else None)
        if path is not None and (source or path.is_file()):
            skip_ids = {store.ids[p] for p in val if store.ids[p] is not None}
            skip_lines = {store.indices[p] for p in val}
            try:
                counts, skipped = (count_dataset_tokens(path, vocab_size, store.meta.get("dataset_sha256"), skip_ids,
                                                        skip_lines) if dist.rank == 0
                                   else (torch.zeros(vocab_size, dtype=torch.int64), 0))
            except BadInput as e:
                if source:
                    raise
                log(f"train: {e}; the draft vocabulary comes from the store's samples instead")
            else:
                return dist.all_reduce_sum(counts), f"{path} ({skipped} held-out records left out)"
        elif path is not None:
            log(f"train: the store's dataset {path} is not here; the draft vocabulary comes from the store's samples "
                "(pass --vocab-data MERGED.jsonl to choose it over the whole dataset)")
    counts = count_loss_tokens(store, vocab_size, dist.rank, dist.world_size, positions=train)
    return dist.all_reduce_sum(counts), f"the store's {len(train)} training samples"


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
    dist.barrier()  # every rank judged the folder before rank 0 marks it
    if rank == 0:
        checkpoint.claim_run_folder(out)
    store = open_store(opts.store, opts.target, checksums=opts.checksums if rank == 0 else "none")
    cfg_json = target_head.read_config(opts.target)
    dcfg = DrafterConfig.from_target(cfg_json, opts.draft_vocab, where=str(Path(opts.target) / "config.json"))
    if opts.max_len > dcfg.max_position_embeddings:
        log(f"train: warning: --max-len {opts.max_len} is above the target's max_position_embeddings "
            f"{dcfg.max_position_embeddings}")
    plan = BatchPlan(batch_tokens=opts.batch_tokens, batch_size=opts.batch_size, max_len=opts.max_len,
                     world_size=world, seed=opts.seed)
    existing = checkpoint.latest_checkpoint(out)
    state = checkpoint.load_state(existing) if existing is not None and opts.resume else None
    n_val = _val_count(opts, store.samples)
    if state is not None and "val_samples" not in state["identity"]:
        n_val = 0  # a checkpoint of a trainer without validation: resume it as it was trained
        log(f"train: {existing} was trained without a held-out slice; resuming it without one")
    train_pos, val_pos = split_validation(store.samples, n_val, opts.seed)
    plans, schedule = _schedule(store.lengths, train_pos, plan, opts.epochs, opts.steps)
    total = len(schedule)
    identity = _identity(opts, plan, store.identity(), val_pos, total)

    if existing is not None and not opts.resume:
        if not opts.overwrite:
            raise BadInput(f"{out} already holds checkpoints (latest {existing.name}); pass --resume to continue "
                           "it (a larger --steps or --epochs extends it) or --overwrite to start over")
        dist.barrier()
        if rank == 0:
            shutil.rmtree(out / checkpoint.DIR)
        dist.barrier()
        existing = None
    if existing is not None:
        _check_resume(state["identity"], identity, existing)
        drafter = load_drafter(existing)
        if drafter.config != dcfg:
            raise BadInput(f"{existing}/config.json does not describe a drafter of {opts.target} with "
                           f"--draft-vocab {opts.draft_vocab}; resume with the same target, or pass --overwrite")
        vocab = dvocab.from_buffers(drafter.d2t, drafter.t2d)
        vocab_note = state.get("vocab_note")
    else:
        counts, vocab_source = _vocab_counts(opts, store, dcfg.vocab_size, train_pos, val_pos, dist, log)
        vocab = dvocab.from_counts(counts, dcfg.draft_vocab_size)
        vocab_note = {"source": vocab_source, "coverage_chosen_on": vocab.coverage, "held_out_coverage": None}
        if val_pos:
            held = dist.all_reduce_sum(count_loss_tokens(store, dcfg.vocab_size, rank, world, positions=val_pos)).cpu()
            vocab_note["held_out_coverage"] = float(held[vocab.ids].sum()) / max(1, int(held.sum()))
            vocab_note["held_out_distinct_tokens"] = int((held > 0).sum())
            vocab_note["held_out_distinct_missing"] = int(((held > 0) & ~vocab.t2d).sum())
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
    raw_objective = TTTObjective(drafter, opts.ttt_length)
    if world == 1:
        raw_objective.should_stop = stop.is_set  # a stop lands between TTT steps, not only between steps
    objective = dist.wrap(raw_objective)

    params = [p for p in drafter.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=opts.lr, betas=(0.9, 0.95), weight_decay=opts.weight_decay,
                            fused=True if cuda else None)
    warmup = max(1, round(opts.warmup_ratio * total)) if opts.warmup_ratio > 0 else 0
    schedule_fn = lr_lambda(total, warmup, opts.min_lr_ratio)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule_fn)
    start = 0
    n = opts.ttt_length
    history: list[dict] = []
    val_history: list[dict] = []
    tokens_total = 0
    if state is not None:
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        checkpoint.set_rng_state(state["rng"])
        start = int(state["step"])
        history = list(state.get("history") or [])
        val_history = list(state.get("val_history") or [])
        tokens_total = int(state.get("tokens") or 0)
        if start >= total:
            log(f"train: {existing} is the last step ({start}/{total}); nothing left to train (pass a larger --steps "
                "or --epochs with --resume to extend the run)")
            try:
                return json.loads((out / SUMMARY).read_text())
            except (OSError, ValueError):
                return {"steps": start, "total_steps": total, "checkpoint": str(existing), "loss": float("nan"),
                        "acc": [float("nan")] * opts.ttt_length, "history": history, "tokens": tokens_total}
        for g, base in zip(opt.param_groups, sched.base_lrs):
            g["lr"] = base * schedule_fn(start)  # the new total's schedule when the run was extended
        sched._last_lr = [g["lr"] for g in opt.param_groups]
        saved_total = state["identity"].get("total_steps")
        if saved_total is not None and saved_total != total:
            log(f"train: {'extending' if total > saved_total else 'shortening'} the run from {saved_total} to {total} "
                f"steps; from step {start} the learning rate follows the {total}-step schedule "
                f"({opt.param_groups[0]['lr']:.2e} now)")
        log(f"train: resuming {existing} at step {start}/{total}")
    else:
        log(_vocab_line(vocab, dcfg.vocab_size, vocab_note, len(val_pos)))
    log(f"train: {len(train_pos)} samples, {sum(store.lengths[p] for p in train_pos):,} tokens"
        + (f" ({len(val_pos)} more held out for validation)" if val_pos else "")
        + f"; {total} steps of {plan.describe()}; TTT {opts.ttt_length}; lr {opts.lr}, warmup {warmup}; device {device}"
        + (f", {world} ranks" if world > 1 else ""))

    val_micro = [mb for st in plan_epoch([store.lengths[p] for p in val_pos],
                                         BatchPlan(plan.batch_tokens, plan.batch_size, plan.max_len, 1, plan.seed), 0)
                 for mb in st]
    val_micro = [[val_pos[i] for i in mb] for mb in val_micro][rank::world]
    val_every = opts.val_every or opts.save_every
    w = weights(n, device)

    def validate(step: int) -> dict | None:
        """Loss and acc_i on the held-out slice (no gradient); None when there is none or a stop came."""
        if not val_pos:
            return None
        acc_sum = torch.zeros(4 * n, device=device)
        drafter.eval()
        check = TTTObjective(drafter, n)
        with torch.no_grad():
            for mb in val_micro:
                if stop.is_set():
                    drafter.train()
                    return None
                b = collate([read_sample(store.root / store.files[p], opts.max_len) for p in mb])
                b = {k: v.to(device, non_blocking=True) for k, v in b.items()}
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
                    prep = prepare(head, b, n, amp_dtype if cuda else torch.float32)
                    sums, correct = check(prep)
                acc_sum += torch.cat([sums.float(), correct.float(), prep.loss_rows.sum((1, 2)).float(),
                                      prep.acc_rows.sum((1, 2)).float()])
        drafter.train()
        vals = dist.all_reduce_sum(acc_sum).tolist()
        sums_v, correct_v, rows_v, acc_rows_v = (vals[k * n:(k + 1) * n] for k in range(4))
        loss_v = sum(float(w[i]) * s / max(r, 1.0) for i, (s, r) in enumerate(zip(sums_v, rows_v)))
        acc = [c / max(a, 1.0) for c, a in zip(correct_v, acc_rows_v)]
        entry = {"step": step, "loss": round(loss_v, 6), "acc": [round(a, 4) for a in acc]}
        val_history.append(entry)
        events.metric("val_loss", loss_v, step=step)
        for i, a in enumerate(acc):
            events.metric(f"val_acc_{i}", a, step=step)
        log(f"train: step {step}/{total} validation ({len(val_pos)} held-out samples): loss {loss_v:.4f} acc "
            + " ".join(f"{a:.3f}" for a in acc))
        return entry

    def snapshot(step: int, tokens: int) -> dict:
        return {"step": step, "epoch_position": list(schedule[step]) if step < total else None,
                "optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "rng": checkpoint.rng_state(),
                "identity": identity, "world_size": world, "history": history, "val_history": val_history,
                "tokens": tokens, "vocab_note": vocab_note}

    def save(step: int, pending_tokens: torch.Tensor) -> Path | None:
        if world > 1:
            agree = dist.ranks_agree(torch.stack([p.detach().double().sum() for p in params]).sum())
            if not agree:
                raise TrainError(f"step {step}: the ranks' weights differ; not checkpointing a diverged model")
            log(f"train: step {step}: all {world} ranks agree on the weights")
        tokens = tokens_total + int(dist.all_reduce_sum(pending_tokens.detach().clone()).item())
        path = None
        if rank == 0:
            path = checkpoint.save(out, drafter, snapshot(step, tokens), keep_last=opts.keep_last)
            nbytes = sum(p.stat().st_size for p in path.iterdir())
            events.artifact(str(path), bytes=nbytes, step=step)
        dist.barrier()
        return path

    def summarize(step: int, last: dict, stopped: bool) -> dict:
        seconds = time.monotonic() - began
        final = checkpoint.latest_checkpoint(out) if rank == 0 else None
        summary = {
            "steps": step, "total_steps": total, "resumed_from": start if state is not None else None,
            "stopped": stopped, "loss": last["loss"], "acc": last["acc"], "tokens": tokens_total,
            "seconds": round(seconds, 3), "tokens_this_session": tokens_total - tokens_at_start,
            "tokens_per_s": (tokens_total - tokens_at_start) / seconds if seconds > 0 else None,
            "checkpoint": str(final) if final else None, "draft_vocab_size": vocab.size,
            "draft_vocab_coverage": (vocab_note or {}).get("held_out_coverage"),
            "draft_vocab": vocab_note,
            "val": ({"samples": len(val_pos), "tokens": sum(store.lengths[p] for p in val_pos),
                     "loss": val_history[-1]["loss"] if val_history else None,
                     "acc": val_history[-1]["acc"] if val_history else None, "history": val_history}
                    if val_pos else None),
            "world_size": world, "device": str(device), "history": history,
        }
        if rank == 0:
            write_json_atomic(out / SUMMARY, summary)
        return summary

    loader = torch.utils.data.DataLoader(
        StepDataset(store, schedule[start:], plans, rank, opts.max_len), batch_size=None, shuffle=False,
        num_workers=opts.workers, pin_memory=cuda, prefetch_factor=opts.prefetch if opts.workers else None,
        worker_init_fn=_ignore_signals if opts.workers else None)
    win = Window(n, device)
    last = {"loss": history[-1]["loss"], "acc": history[-1]["acc"]} if history else \
        {"loss": float("nan"), "acc": [float("nan")] * n}
    began = time.monotonic()
    tokens_at_start = tokens_total
    step = start
    saved_at = start if state is not None else None
    delay = float(os.environ.get(STEP_DELAY_ENV) or 0)
    drafter.train()
    for batch in loader:
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        try:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
                prep = prepare(head, batch, n, amp_dtype if cuda else torch.float32)
                counts = dist.all_reduce_sum(prep.loss_rows.sum((1, 2)).float())
                sums, correct = objective(prep)
                loss = (w * sums / counts.clamp(min=1)).sum() * world
            opt.zero_grad(set_to_none=True)
            if world == 1 and stop.is_set():
                raise StepAborted
            loss.backward()
            if world == 1 and stop.is_set():
                raise StepAborted
        except StepAborted:
            opt.zero_grad(set_to_none=True)
            kept = save(step, win.tokens) if saved_at != step and step else None
            tokens_total += int(win.tokens.item())
            kept_name = kept or (out / checkpoint.DIR / checkpoint.step_name(step) if step else None)
            log(f"train: stopped during step {step + 1}/{total}: kept "
                + (f"the checkpoint of step {step} ({kept_name})" if step else "nothing (no step had finished)")
                + f"; dropped the unfinished step {step + 1} (--resume trains it again)")
            if step:
                summarize(step, last, stopped=True)
            events.close()
            raise Stopped(f"stopped at step {step}/{total}"
                          + (f"; checkpoint {kept_name}; rerun with --resume to continue" if step else "")) from None
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
        if (step % val_every == 0 or step == total) and not stop_now:
            validate(step)
        if step % opts.save_every == 0 or step == total:
            save(step, win.tokens)
            saved_at = step
        if stop_now:
            if saved_at != step:
                save(step, win.tokens)
            log(f"train: stopped after step {step}/{total}: kept its checkpoint; dropped nothing")
            summarize(step, last, stopped=True)
            events.close()
            raise Stopped(f"stopped at step {step}/{total}; checkpoint {out / checkpoint.DIR / checkpoint.step_name(step)}"
                          "; rerun with --resume to continue")
    summary = summarize(step, last, stopped=False)
    if rank == 0:
        events.close()
    return summary


def _vocab_line(vocab, vocab_size: int, note: dict, held_out: int) -> str:
    line = (f"train: draft vocabulary {vocab.size} of {vocab_size} tokens, chosen over {note['source']}: it covers "
            f"{note['coverage_chosen_on']:.1%} of the answer tokens it was chosen on")
    if note.get("held_out_coverage") is not None:
        line += (f" and {note['held_out_coverage']:.1%} of the {held_out} held-out samples' "
                 f"({note['held_out_distinct_missing']} of their {note['held_out_distinct_tokens']} distinct answer "
                 "tokens are missing)")
    else:
        line += " (no held-out slice to measure it on: --val-share 0)"
    return line

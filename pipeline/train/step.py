"""One optimiser step, what it returns (`StepResult`), and the metrics window it adds to.

The finiteness check of a step is read a step late (finite.py): `apply` queues the optimiser
step, which the device skips when the loss or the gradient is not finite, and settles the
previous step's flag first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from pipeline.train import checkpoint
from pipeline.train.loss import StepAborted, prepare, scored_positions, weights
from pipeline.train.run import Run


@dataclass(frozen=True)
class StepResult:
    """What one step's forward and backward leave for the optimiser and the metrics window
    (device tensors: reading them would wait for the device)."""

    loss: torch.Tensor  # the weighted loss backward ran on (this rank's share of the global one)
    sums: torch.Tensor  # [n] per TTT step: summed loss over this rank's scored rows
    correct: torch.Tensor  # [n] per TTT step: rows whose top token was the target's
    acc_rows: torch.Tensor  # [n] rows the accuracy is taken over
    loss_rows: torch.Tensor  # [n] scored rows over every rank (the loss's denominators)
    tokens: torch.Tensor  # the micro-batch's tokens


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

    def add(self, result: StepResult, world: int) -> None:
        self.steps += 1
        self.loss += result.loss.detach() / world
        self.sums += result.sums.detach()
        self.correct += result.correct.float()
        self.acc_rows += result.acc_rows
        self.loss_rows += result.loss_rows
        self.tokens += result.tokens


def to_device(run: Run, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch on the run's device, with the positions the objective scores (found on the host,
    where the mask is: no device sync) and the target's states when the run is online. Every
    copy is from pinned memory (the loader pins its batches): a copy from pageable memory waits
    for the device to finish all the work queued before it."""
    states = run.states
    lengths = batch["lengths"].tolist() if states is not None else []
    scored = scored_positions(batch["loss_mask"])
    batch = {**batch, "scored": scored.pin_memory() if run.cuda else scored}
    moved = {k: v.to(run.device, non_blocking=True) for k, v in batch.items()}
    if states is not None:
        states.fill(moved, lengths)
    return moved


def forward_backward(run: Run, batch: dict[str, torch.Tensor]) -> StepResult:
    """The step's loss, backward done, and its figures; StepAborted when a stop came."""
    world, n = run.dist.world_size, run.opts.ttt_length
    w = weights(n, run.device)
    with torch.autocast(run.device.type, dtype=torch.bfloat16, enabled=run.cuda):
        prep = prepare(run.head, batch, n, run.amp_dtype)
        counts = run.dist.all_reduce_sum(prep.loss_count)
        sums, correct = run.objective(prep)
        loss = (w * sums / counts.clamp(min=1)).sum() * world
    run.opt.zero_grad(set_to_none=True)
    if world == 1 and run.stop.is_set():
        raise StepAborted
    loss.backward()
    if world == 1 and run.stop.is_set():
        raise StepAborted
    return StepResult(loss=loss, sums=sums, correct=correct, acc_rows=prep.acc_count, loss_rows=counts,
                      tokens=batch["lengths"].sum())


def apply(run: Run, step: int, loss: torch.Tensor, batch: dict[str, torch.Tensor]) -> None:
    """Clip and queue the optimiser step, which the device skips if the loss or the gradient is
    not finite; first settles the previous step's check (NotFinite if that step was refused)."""
    if run.opts.max_grad_norm > 0:
        norm = torch.nn.utils.clip_grad_norm_(run.params, run.opts.max_grad_norm)
    else:
        norm = torch.nn.utils.get_total_norm([p.grad for p in run.params if p.grad is not None])
    states = batch["nonfinite"].any().float() if "nonfinite" in batch else torch.zeros((), device=norm.device)
    summed = run.dist.all_reduce_sum(torch.stack([loss.detach().float(), norm.float(), states]))
    bad = (~torch.isfinite(summed[:2]).all()).float()
    run.guard.settle(run.total, lambda: checkpoint.last_good(run))
    run.opt.found_inf = bad  # type: ignore[attr-defined]  # read by the fused AdamW, as GradScaler's skipped steps are
    try:
        run.opt.step()
    finally:
        del run.opt.found_inf  # type: ignore[attr-defined]
    run.sched.step()
    run.guard.arm(step + 1, torch.cat([bad[None], summed[:1] / run.dist.world_size, summed[1:]]))


def log_window(run: Run, win: Window, step: int) -> dict:
    """Reduce the window across ranks, log and emit it; {loss, acc}."""
    n, progress = run.opts.ttt_length, run.progress
    packed = torch.cat([win.loss[None], win.sums, win.correct, win.acc_rows, win.tokens[None]])
    vals = run.dist.all_reduce_sum(packed).tolist()
    elapsed = max(time.monotonic() - win.started, 1e-9)
    loss_v = vals[0] / win.steps
    acc = [c / max(a, 1.0) for c, a in zip(vals[1 + n:1 + 2 * n], vals[1 + 2 * n:1 + 3 * n])]
    pos_loss = [s / max(r, 1.0) for s, r in zip(vals[1:1 + n], win.loss_rows.tolist())]
    tokens = int(vals[1 + 3 * n])
    progress.tokens_total += tokens
    tps = tokens / elapsed
    lr = float(run.sched.get_last_lr()[0])
    progress.history.append({"step": step, "loss": round(loss_v, 6), "acc": [round(a, 4) for a in acc]})
    if len(progress.history) > MAX_HISTORY:
        progress.history = progress.history[::2]
    ev = run.events
    ev.progress(step, run.total, unit="steps", tokens=progress.tokens_total)
    ev.metric("loss", loss_v, step=step)
    for i, a in enumerate(acc):
        ev.metric(f"acc_{i}", a, step=step)
    for i, pl in enumerate(pos_loss):
        ev.metric(f"loss_{i}", pl, step=step)
    ev.metric("tokens_per_s", tps, step=step)
    ev.metric("lr", lr, step=step)
    run.log(f"train: step {step}/{run.total} loss {loss_v:.4f} acc " + " ".join(f"{a:.3f}" for a in acc)
            + f" | {tps:,.0f} tok/s lr {lr:.2e}")
    return {"loss": loss_v, "acc": acc}


MAX_HISTORY = 4096

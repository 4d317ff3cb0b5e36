"""One optimiser step, and the metrics window it adds to.

A step is refused before the optimiser moves when its loss or gradient is not finite: AdamW
would carry a NaN into its moments, every later step would log `loss nan`, and the pruning
of old checkpoints would then keep only poisoned ones. The refusal happens on the device:
the fused AdamW skips a step flagged `found_inf` (weights, moments and step count untouched),
so the host never waits for the check. It reads the flag a step later (`FiniteGuard`), when
the device has long written it, and before anything is logged, validated or saved, then
stops the run naming the refused step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from pipeline.train import checkpoint
from pipeline.train.errors import Stopped
from pipeline.train.loss import StepAborted, prepare, scored_positions, weights

if TYPE_CHECKING:
    from pipeline.train.setup import Run


class NotFinite(Stopped):
    """The loss or gradient of a step is NaN or infinite: the run stops (exit 3) before the
    optimiser takes it, keeping the checkpoints it has, all finite."""


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


def to_device(run: Run, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch on the run's device, with the positions the objective scores (found on the host,
    where the mask is: no device sync) and the target's states when the run is online. Every
    copy is from pinned memory (the loader pins its batches): a copy from pageable memory waits
    for the device to finish all the work queued before it."""
    lengths = batch["lengths"].tolist() if run.states is not None else None
    scored = scored_positions(batch["loss_mask"])
    batch = {**batch, "scored": scored.pin_memory() if run.cuda else scored}
    moved = {k: v.to(run.device, non_blocking=True) for k, v in batch.items()}
    if run.states is not None:
        run.states.fill(moved, lengths)
    return moved


def forward_backward(run: Run, batch: dict[str, torch.Tensor]):
    """(loss, per-step sums, correct, prepared, global row counts); StepAborted when a stop came."""
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
    return loss, sums, correct, prep, counts


class FiniteGuard:
    """The last step's finiteness flag, copied to the host without waiting for it: `arm` queues
    the copy behind the step's work, `settle` reads it (waiting only for that copy, which the
    device finished while the host queued the next step) and raises NotFinite if it was bad."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.host = torch.zeros(4, pin_memory=self.cuda)
        self.event = torch.cuda.Event() if self.cuda else None
        self.step: int | None = None

    def arm(self, step: int, stats: torch.Tensor) -> None:
        """stats: [bad, loss, gradient norm, non-finite target states] of 1-based step `step`."""
        self.host.copy_(stats, non_blocking=self.cuda)
        if self.event is not None:
            self.event.record()
        self.step = step

    def settle(self, run: Run) -> None:
        if self.step is None:
            return
        if self.event is not None:
            self.event.synchronize()
        step, self.step = self.step, None
        bad, loss, norm, bad_states = self.host.tolist()
        if bad:
            raise NotFinite(_not_finite_message(run, step, loss, norm, bad_states > 0))


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
    run.guard.settle(run)
    run.opt.found_inf = bad  # read by the fused AdamW, as GradScaler's skipped steps are
    try:
        run.opt.step()
    finally:
        del run.opt.found_inf
    run.sched.step()
    run.guard.arm(step + 1, torch.cat([bad[None], summed[:1] / run.dist.world_size, summed[1:]]))


def _not_finite_message(run: Run, step: int, loss: float, norm: float, bad_states: bool) -> str:
    cause = ("the target's states for this batch are not finite (check the target's weights and dtype)"
             if bad_states else "lower --lr or raise --warmup-ratio, or look for extreme values in the data")
    return (f"step {step}/{run.total}: the loss ({loss:.4g}) or gradient norm ({norm:.4g}) is not finite; "
            f"stopped before the optimiser took it; {cause}; {last_good(run)}")


def last_good(run: Run) -> str:
    """Where a run stopped for non-finite numbers goes on from."""
    kept = checkpoint.latest_checkpoint(run.out) if run.dist.rank == 0 else None
    return (f"the last checkpoint, {kept}, holds finite weights: rerun with --resume from it"
            if kept else "no checkpoint was written yet")


def add_to_window(win: Window, loss: torch.Tensor, sums: torch.Tensor, correct: torch.Tensor, prep,
                  counts: torch.Tensor, batch: dict[str, torch.Tensor], world: int) -> None:
    win.steps += 1
    win.loss += loss.detach() / world
    win.sums += sums.detach()
    win.correct += correct.float()
    win.acc_rows += prep.acc_count
    win.loss_rows += counts
    win.tokens += batch["lengths"].sum()


def log_window(run: Run, win: Window, step: int) -> tuple[dict, bool]:
    """Reduce the window across ranks, log and emit it; ({loss, acc}, whether any rank was asked to stop)."""
    n, device = run.opts.ttt_length, run.device
    packed = torch.cat([win.loss[None], win.sums, win.correct, win.acc_rows, win.tokens[None],
                        torch.tensor([1.0 if run.stop.is_set() else 0.0], device=device)])
    vals = run.dist.all_reduce_sum(packed).tolist()
    elapsed = max(time.monotonic() - win.started, 1e-9)
    loss_v = vals[0] / win.steps
    acc = [c / max(a, 1.0) for c, a in zip(vals[1 + n:1 + 2 * n], vals[1 + 2 * n:1 + 3 * n])]
    pos_loss = [s / max(r, 1.0) for s, r in zip(vals[1:1 + n], win.loss_rows.tolist())]
    tokens = int(vals[1 + 3 * n])
    run.tokens_total += tokens
    tps = tokens / elapsed
    lr = run.sched.get_last_lr()[0]
    run.history.append({"step": step, "loss": round(loss_v, 6), "acc": [round(a, 4) for a in acc]})
    if len(run.history) > MAX_HISTORY:
        run.history = run.history[::2]
    ev = run.events
    ev.progress(step, run.total, unit="steps", tokens=run.tokens_total)
    ev.metric("loss", loss_v, step=step)
    for i, a in enumerate(acc):
        ev.metric(f"acc_{i}", a, step=step)
    for i, pl in enumerate(pos_loss):
        ev.metric(f"loss_{i}", pl, step=step)
    ev.metric("tokens_per_s", tps, step=step)
    ev.metric("lr", lr, step=step)
    run.log(f"train: step {step}/{run.total} loss {loss_v:.4f} acc " + " ".join(f"{a:.3f}" for a in acc)
            + f" | {tps:,.0f} tok/s lr {lr:.2e}")
    return {"loss": loss_v, "acc": acc}, vals[-1] > 0


MAX_HISTORY = 4096

"""The EAGLE-3 objective: training-time test against the target's own distribution.

Alignment (stored sample of T tokens x_0..x_{T-1}; target state s_p after reading x_p):
at TTT step i, row t feeds token x_{t+1+i} and (step 0) the captured layers at t, or (step
i >= 1) the drafter's previous output; it is scored against the target's distribution at
position t+1+i (lm_head(s_{t+1+i}) restricted to the draft vocabulary and renormalised),
i.e. the token x_{t+2+i}. Row t counts at step i when x_{t+2+i} is under loss_mask and the
target's top token there is in the draft vocabulary (the drafter cannot propose others);
accuracy counts every loss-masked row, so it is the honest rate. Step i weighs 0.8^i.
The loss is the cross-entropy minus the target's entropy, i.e. KL(target || drafter): the
same gradient, and a value that reads 0 for a perfect drafter whatever the target's entropy.

Each loss is a sum over this rank's rows divided by the GLOBAL row count of that step
(all-reduced before the forward), times the world size: DDP's gradient average then gives
exactly the gradient of the global mean, whatever the split across ranks.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ..drafter.model import Eagle3Drafter, TTTCache
from .vocab_kernels import EAGER_KERNELS, VocabKernels

DECAY = 0.8
TTT_DELAY = float(os.environ.get("EAGLE3_TRAIN_TTT_DELAY") or 0)
"""Test hook: seconds to sleep before each TTT step, so a stop test lands mid-step. Unset in real runs."""
HEAD_CHUNK_ROWS = 8192


class SoftCrossEntropy(torch.autograd.Function):
    """-(p . log_softmax(z)) per row, for p that sums to 1: logsumexp(z) - p.z. Its gradient
    (softmax(z) - p) is formed once in backward; the [rows, vocab] log-probabilities that
    log_softmax followed by a product would keep for backward are never materialised. Both
    passes are `kernels`' (pipeline.train.vocab_kernels: one fused kernel each on CUDA)."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, p: torch.Tensor, kernels: VocabKernels) -> torch.Tensor:  # noqa: ANN001
        with torch.autocast(z.device.type, enabled=False):  # fp32 math; z is kept in its own dtype
            lse, loss = kernels.soft_ce_forward(z, p)
            ctx.save_for_backward(z, p, lse)
            ctx.kernels = kernels
            return loss

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # noqa: ANN001
        z, p, lse = ctx.saved_tensors
        with torch.autocast(z.device.type, enabled=False):
            return ctx.kernels.soft_ce_grad(z, p, lse, g), None, None


def shift_left(x: torch.Tensor, n: int) -> torch.Tensor:
    """x[:, t + n] at column t, zeros (False) past the end."""
    if n == 0:
        return x
    pad = torch.zeros_like(x[:, :n])
    return torch.cat((x[:, n:], pad), dim=1) if n < x.shape[1] else torch.zeros_like(x)


class TargetHead:
    """The target's lm_head: full rows (for its top token) and the draft vocabulary's rows."""

    def __init__(self, weight: torch.Tensor, draft_ids: torch.Tensor, t2d: torch.Tensor,
                 device: torch.device, dtype: torch.dtype, kernels: VocabKernels = EAGER_KERNELS) -> None:
        self.full = weight.to(device=device, dtype=dtype)
        self.kernels = kernels
        self.draft = self.full[draft_ids.to(device)].contiguous()
        self.t2d = t2d.to(device)

    @torch.no_grad()
    def view(self, final: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(probabilities over the draft vocab [B,T,Vd] fp32, their entropy [B,T], top target id [B,T],
        top in draft vocab [B,T])."""
        b, t, h = final.shape
        flat = final.reshape(-1, h).to(self.full.dtype)
        probs, entropy = self.kernels.probs_entropy(flat @ self.draft.T)
        top = torch.cat([(flat[r:r + HEAD_CHUNK_ROWS] @ self.full.T).argmax(-1)
                         for r in range(0, flat.shape[0], HEAD_CHUNK_ROWS)])
        return probs.view(b, t, -1), entropy.view(b, t), top.view(b, t), self.t2d[top].view(b, t)


@dataclass
class Prepared:
    """What one micro-batch needs besides the drafter, all on the device."""

    input_ids: torch.Tensor  # [B,T]
    aux: torch.Tensor  # [B,T,3H]
    probs: torch.Tensor  # [B,T,Vd] target distribution at each position
    entropy: torch.Tensor  # [B,T] its entropy (so the loss reads as a KL divergence, 0 when matched)
    top: torch.Tensor  # [B,T] target's top token at each position
    loss_rows: torch.Tensor  # [n,B,T] bool: rows in the loss, per step
    acc_rows: torch.Tensor  # [n,B,T] bool: rows in the accuracy, per step


def prepare(head: TargetHead, batch: dict[str, torch.Tensor], steps: int, dtype: torch.dtype) -> Prepared:
    probs, entropy, top, in_draft = head.view(batch["hidden_state"])
    mask = batch["loss_mask"].bool()
    acc_rows = torch.stack([shift_left(mask, 2 + i) for i in range(steps)])
    loss_rows = acc_rows & torch.stack([shift_left(in_draft, 1 + i) for i in range(steps)])
    return Prepared(input_ids=batch["input_ids"], aux=batch["aux_hidden_state"].to(dtype), probs=probs,
                    entropy=entropy, top=top,
                    loss_rows=loss_rows, acc_rows=acc_rows)


class StepAborted(Exception):
    """A stop asked for between two TTT steps: the unfinished step is dropped, not finished."""


class TTTObjective(nn.Module):
    """Wraps the drafter so one forward runs the whole unrolled chain (what DDP wraps).
    `should_stop` is asked before each TTT step, so a stop on a slow device waits for one
    drafter forward, not a whole step (a step of TTT 7 on CPU can outlast a stop's grace)."""

    def __init__(self, drafter: Eagle3Drafter, steps: int, kernels: VocabKernels = EAGER_KERNELS) -> None:
        super().__init__()
        self.drafter = drafter
        self.steps = steps
        self.kernels = kernels
        self.should_stop: Callable[[], bool] | None = None

    def forward(self, p: Prepared) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss sum per step [n] with grad, correct top-1 per step [n])."""
        b, t = p.input_ids.shape
        pos = torch.arange(t, device=p.input_ids.device).expand(b, t)
        cache = TTTCache()
        hidden = p.aux
        sums, correct = [], []
        for i in range(self.steps):
            if self.should_stop is not None and self.should_stop():
                raise StepAborted
            if TTT_DELAY:
                time.sleep(TTT_DELAY)
            logits, hidden = self.drafter(shift_left(p.input_ids, 1 + i), hidden, pos + i, cache)
            n = max(t - 1 - i, 0)  # rows whose target position t+1+i exists
            row_loss = SoftCrossEntropy.apply(logits[:, :n], p.probs[:, 1 + i:], self.kernels) - p.entropy[:, 1 + i:]
            sums.append((row_loss * p.loss_rows[i, :, :n]).sum())
            with torch.no_grad():
                pred = self.drafter.draft_to_target(logits[:, :n].argmax(-1))
                correct.append(((pred == p.top[:, 1 + i:]) & p.acc_rows[i, :, :n]).sum())
        return torch.stack(sums), torch.stack(correct)


def weights(steps: int, device: torch.device) -> torch.Tensor:
    return DECAY ** torch.arange(steps, dtype=torch.float32, device=device)

"""The EAGLE-3 objective: training-time test against the target's own distribution.

Alignment (stored sample of T tokens x_0..x_{T-1}; target state s_p after reading x_p):
at TTT step i, row t feeds token x_{t+1+i} and (step 0) the captured layers at t, or (step
i >= 1) the drafter's previous output; it is scored against the target's distribution at
position p = t+1+i (lm_head(s_p) restricted to the draft vocabulary and renormalised),
i.e. the token x_{p+1}. Row t counts at step i when x_{p+1} is under loss_mask and the
target's top token at p is in the draft vocabulary (the drafter cannot propose others);
accuracy counts every loss-masked row, so it is the honest rate. Step i weighs 0.8^i.
The loss is the cross-entropy minus the target's entropy, i.e. KL(target || drafter): the
same gradient, and a value that reads 0 for a perfect drafter whatever the target's entropy.

Everything is indexed by the target positions p whose next token is under loss_mask (the
answer tokens, about 60 % of a batch's rows; prompts and padding are not scored). The
target's logits, log-sum-exp, entropy and top token are computed once for those positions;
step i scores the drafter's rows p-1-i against them, the same target rows at every step,
so nothing is shifted or copied between steps, and the drafter's head and loss run only on
those rows (head_loss: fused, chunked, never a [B, T, vocab] tensor).

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

from pipeline.compiled_ops import CompiledOps
from pipeline.drafter.model import Eagle3Drafter, TTTCache
from pipeline.drafter.ttt_attention import EAGER_MERGE
from pipeline.train.head_loss import head_soft_cross_entropy
from pipeline.train.loss_kernels import EAGER_KERNELS, LossKernels

DECAY = 0.8
TTT_DELAY = float(os.environ.get("EAGLE3_TRAIN_TTT_DELAY") or 0)
"""Test hook: seconds to sleep before each TTT step, so a stop test lands mid-step. Unset in real runs."""
HEAD_CHUNK_ROWS = 8192


def shift_left(x: torch.Tensor, n: int) -> torch.Tensor:
    """x[:, t + n] at column t, zeros (False) past the end."""
    if n == 0:
        return x
    pad = torch.zeros_like(x[:, :n])
    return torch.cat((x[:, n:], pad), dim=1) if n < x.shape[1] else torch.zeros_like(x)


def scored_positions(loss_mask: torch.Tensor) -> torch.Tensor:
    """Flat positions b*T + p (p >= 1) of a [B,T] loss mask whose next token is under it: the
    target positions some TTT step scores. Computed where the mask is (the loader's CPU batch:
    no device sync)."""
    scored = shift_left(loss_mask.bool(), 1)
    scored[:, 0] = False  # no drafter row precedes position 0
    return scored.reshape(-1).nonzero().squeeze(1)


class TargetHead:
    """The target's lm_head: full rows (for its top token) and the draft vocabulary's rows."""

    def __init__(self, weight: torch.Tensor, draft_ids: torch.Tensor, t2d: torch.Tensor,
                 device: torch.device, dtype: torch.dtype, kernels: LossKernels = EAGER_KERNELS) -> None:
        self.full = weight.to(device=device, dtype=dtype)
        self.kernels = kernels
        self.draft = self.full[draft_ids.to(device)].contiguous()
        self.t2d = t2d.to(device)

    @torch.no_grad()
    def view(self, final: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """For final states [N,H]: (logits over the draft vocab [N,Vd] in the head's dtype, their
        log-sum-exp [N] fp32, the entropy of their softmax [N], top target id [N], top in draft vocab [N])."""
        flat = final.to(self.full.dtype)
        logits = flat @ self.draft.T
        lse, entropy = self.kernels.target_stats(logits)
        top = torch.cat([(flat[r:r + HEAD_CHUNK_ROWS] @ self.full.T).argmax(-1)
                         for r in range(0, flat.shape[0], HEAD_CHUNK_ROWS)]) if flat.shape[0] else \
            torch.zeros(0, dtype=torch.int64, device=flat.device)
        return logits, lse, entropy, top, self.t2d[top]


@dataclass
class Prepared:
    """What one micro-batch needs besides the drafter, all on the device. N is the number of
    scored target positions, n the number of TTT steps."""

    input_ids: torch.Tensor  # [B,T]
    aux: torch.Tensor  # [B,T,3H]
    pos: torch.Tensor  # [N] flat target positions b*T + p
    logits: torch.Tensor  # [N,Vd] the target's logits over the draft vocabulary there
    lse: torch.Tensor  # [N] their log-sum-exp (the target's distribution is exp(logits - lse))
    entropy: torch.Tensor  # [N] its entropy (so the loss reads as a KL divergence, 0 when matched)
    top: torch.Tensor  # [N] the target's top token
    valid: torch.Tensor  # [n,N] bool: step i has a drafter row for the position (p >= 1+i): the accuracy's rows
    counted: torch.Tensor  # [n,N] bool: ... and the target's top is in the draft vocabulary: the loss's rows

    @property
    def loss_count(self) -> torch.Tensor:
        return self.counted.sum(1).float()

    @property
    def acc_count(self) -> torch.Tensor:
        return self.valid.sum(1).float()

    def entropy_sums(self) -> torch.Tensor:
        """[n] the target's entropy summed over each step's loss rows: sums + this is the cross-entropy."""
        return (self.counted * self.entropy).sum(1)


def prepare(head: TargetHead, batch: dict[str, torch.Tensor], steps: int, dtype: torch.dtype) -> Prepared:
    final = batch["hidden_state"]
    b, t, h = final.shape
    pos = batch.get("scored")
    pos = scored_positions(batch["loss_mask"]) if pos is None else pos
    pos = pos.to(final.device)
    logits, lse, entropy, top, in_draft = head.view(final.reshape(-1, h)[pos])
    col = pos % t
    valid = col[None, :] >= torch.arange(1, steps + 1, device=pos.device)[:, None]
    return Prepared(input_ids=batch["input_ids"], aux=batch["aux_hidden_state"].to(dtype), pos=pos, logits=logits,
                    lse=lse, entropy=entropy, top=top, valid=valid, counted=valid & in_draft[None, :])


class StepAborted(Exception):
    """A stop asked for between two TTT steps: the unfinished step is dropped, not finished."""


class TTTObjective(nn.Module):
    """Wraps the drafter so one forward runs the whole unrolled chain (what DDP wraps).
    `should_stop` is asked before each TTT step, so a stop on a slow device waits for one
    drafter forward, not a whole step (a step of TTT 7 on CPU can outlast a stop's grace)."""

    def __init__(self, drafter: Eagle3Drafter, steps: int, kernels: LossKernels = EAGER_KERNELS,
                 merge: CompiledOps = EAGER_MERGE) -> None:
        super().__init__()
        self.drafter = drafter
        self.steps = steps
        self.kernels = kernels
        self.merge = merge
        self.should_stop: Callable[[], bool] | None = None

    def forward(self, p: Prepared) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss sum per step [n] with grad, correct top-1 per step [n])."""
        b, t = p.input_ids.shape
        pos = torch.arange(t, device=p.input_ids.device).expand(b, t)
        cache = TTTCache(self.merge)
        hidden = p.aux
        d = self.drafter
        sums, correct = [], []
        for i in range(self.steps):
            if self.should_stop is not None and self.should_stop():
                raise StepAborted
            if TTT_DELAY:
                time.sleep(TTT_DELAY)
            hidden = d.hidden_out(shift_left(p.input_ids, 1 + i), hidden, pos + i, cache)
            valid = p.valid[i]
            rows = torch.where(valid, p.pos - (1 + i), p.pos)  # an invalid row reads any row and weighs 0
            x = d.norm(hidden.reshape(-1, hidden.shape[-1])[rows])
            counted = p.counted[i].float()
            total, top = head_soft_cross_entropy(x, d.lm_head.weight, p.logits, p.lse, counted, self.kernels)
            sums.append(total - (counted * p.entropy).sum())
            with torch.no_grad():
                correct.append(((d.draft_to_target(top) == p.top) & valid).sum())
        return torch.stack(sums), torch.stack(correct)


def weights(steps: int, device: torch.device) -> torch.Tensor:
    return DECAY ** torch.arange(steps, dtype=torch.float32, device=device)

"""The objective's passes over vocabulary-wide rows, as single fused kernels on CUDA.

Each pass reads rows of logits over the draft vocabulary (32,000 wide) and returns a few
numbers per row: the target's log-sum-exp and entropy once per batch, then at every TTT
step the drafter's log-sum-exp, its soft cross-entropy against the target, its top token
and, when training, the gradient of that cross-entropy. Written out eagerly, each is a
chain of fp32 copies of the rows (the upcast, logsumexp's max, subtract, exp and sum, the
dot with the target's probabilities, the gradient, the cast back); compiled with
torch.compile, each becomes one or two kernels that read the bf16 rows once or twice and
keep the fp32 math in registers. The math is the eager one, so the two agree to fp32
rounding. The target's probabilities are never stored: they are exp(logits - lse) of its
bf16 logits, formed inside each pass, exactly as a stored fp32 softmax of those logits.

Compiled by default on CUDA (`--no-compile-loss` turns it off); eager on CPU. A compile that
fails goes back to eager with one warning line (pipeline/compiled_ops.py).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from pipeline.compiled_ops import CompiledOps


def _wide(x: torch.Tensor) -> torch.Tensor:
    """x in fp32 when it is narrower (bf16 logits); fp32 and fp64 as they are."""
    return x if x.element_size() >= 4 else x.float()


def target_stats(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logsumexp, entropy of the softmax) of [N, V] logits, in fp32 at least."""
    lf = _wide(logits)
    lse = torch.logsumexp(lf, dim=-1)
    p = torch.exp(lf - lse.unsqueeze(-1))
    return lse, lse - (p * lf).sum(-1)


def _soft_ce(z: torch.Tensor, t_logits: torch.Tensor,
             t_lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    zf = _wide(z)
    p = torch.exp(_wide(t_logits).to(zf.dtype) - t_lse.to(zf.dtype).unsqueeze(-1))
    lse = torch.logsumexp(zf, dim=-1)
    return zf, p, lse, lse - (p * zf).sum(-1)


def head_forward(z: torch.Tensor, t_logits: torch.Tensor, t_lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(-(p . log_softmax(z)) per row, argmax of z) for the target's p = exp(t_logits - t_lse)."""
    _zf, _p, _lse, loss = _soft_ce(z, t_logits, t_lse)
    return loss, z.argmax(-1)


def head_grad(z: torch.Tensor, t_logits: torch.Tensor, t_lse: torch.Tensor,
              w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """head_forward's two, and d/dz of sum(w * loss): w * (softmax(z) - p), in z's dtype."""
    zf, p, lse, loss = _soft_ce(z, t_logits, t_lse)
    dz = (torch.exp(zf - lse.unsqueeze(-1)) - p) * w.to(zf.dtype).unsqueeze(-1)
    return loss, z.argmax(-1), dz.to(z.dtype)


EAGER: dict[str, Callable] = {"target_stats": target_stats, "head_forward": head_forward, "head_grad": head_grad}


class LossKernels(CompiledOps):
    """The three passes, compiled or eager; one instance per run, shared by training and validation."""

    def __init__(self, compile: bool, log: Callable[[str], None] = print) -> None:
        super().__init__(EAGER, compile, "the loss kernels", "--no-compile-loss", log)

    def target_stats(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.call("target_stats", logits)

    def head_forward(self, z: torch.Tensor, t_logits: torch.Tensor,
                     t_lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.call("head_forward", z, t_logits, t_lse)

    def head_grad(self, z: torch.Tensor, t_logits: torch.Tensor, t_lse: torch.Tensor,
                  w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.call("head_grad", z, t_logits, t_lse, w)


EAGER_KERNELS = LossKernels(compile=False)

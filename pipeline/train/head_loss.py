"""The drafter's lm_head and the soft cross-entropy against the target, fused over row chunks.

At each TTT step the drafter's logits over the draft vocabulary are the step's largest
tensor by far: [rows, 32,000] against a hidden size of a few hundred. Here they never
exist whole. The rows are taken a chunk at a time (about 256 MB of bf16 logits): the
chunk's logits are one matmul, one fused pass (loss_kernels) turns them and the target's
logits into each row's loss, top token and gradient, and two more matmuls turn that
gradient into the gradients of the head's input and weight, accumulated in fp32. Nothing
of the chunk is kept: the gradients are formed in the forward (the loss is a weighted sum,
so its gradient only waits for one scalar, which backward multiplies in), as Liger-Kernel's
fused linear losses do. A step holds the rows' [rows, hidden] gradient instead of their
[rows, vocab] logits, and no [B, T, vocab] tensor is sliced, padded or copied between steps.

The math is the unfused one's: logits in the compute dtype (bf16 under CUDA autocast, as
the head's matmul gave them), every reduction in fp32, the gradient of the logits cast to
the compute dtype before its two matmuls, as autograd's would be.
"""

from __future__ import annotations

from typing import Any

import torch

from pipeline.train.loss_kernels import LossKernels

CHUNK_ELEMENTS = 1 << 27
"""Logits held at once: 128M elements, 256 MB in bf16 (4,194 rows of a 32,000-token draft vocabulary)."""


def chunk_rows(vocab: int) -> int:
    return max(1, CHUNK_ELEMENTS // max(vocab, 1))


class HeadSoftCrossEntropy(torch.autograd.Function):
    """(sum over rows of w * -(p . log_softmax(x W^T)), argmax of x W^T per row), for the target's
    p = exp(t_logits - t_lse). x [N, H]; weight [V, H]; t_logits [N, V] in the compute dtype;
    t_lse and w [N] fp32. `grad` False (validation) skips the gradient passes."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, t_logits: torch.Tensor, t_lse: torch.Tensor,  # noqa: ANN001
                w: torch.Tensor, kernels: LossKernels, grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
        dtype = t_logits.dtype
        wide = torch.promote_types(dtype, torch.float32)  # sums in fp32, or fp64 for fp64 inputs
        with torch.autocast(x.device.type, enabled=False):
            xc, wc = x.to(dtype), weight.to(dtype)
            n = xc.shape[0]
            total = torch.zeros((), dtype=wide, device=x.device)
            top = torch.empty(n, dtype=torch.int64, device=x.device)
            dx = torch.empty_like(xc) if grad else None
            dw = torch.zeros(weight.shape, dtype=wide, device=x.device) if grad else None
            step = chunk_rows(weight.shape[0])
            for s in range(0, n, step):
                e = min(s + step, n)
                z = xc[s:e] @ wc.T
                if dx is not None and dw is not None:
                    loss, top[s:e], dz = kernels.head_grad(z, t_logits[s:e], t_lse[s:e], w[s:e])
                    torch.mm(dz, wc, out=dx[s:e])
                    dw.add_(dz.T @ xc[s:e])
                else:
                    loss, top[s:e] = kernels.head_forward(z, t_logits[s:e], t_lse[s:e])
                total += (loss * w[s:e]).sum()
        ctx.mark_non_differentiable(top)
        ctx.dtypes = (x.dtype, weight.dtype)
        if grad:
            ctx.save_for_backward(dx, dw)
        return total, top

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor, _g_top: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        dx, dw = ctx.saved_tensors
        x_dtype, w_dtype = ctx.dtypes
        return (dx.to(dw.dtype).mul_(g).to(x_dtype), dw.mul(g).to(w_dtype), None, None, None, None, None)


def head_soft_cross_entropy(x: torch.Tensor, weight: torch.Tensor, t_logits: torch.Tensor, t_lse: torch.Tensor,
                            w: torch.Tensor, kernels: LossKernels) -> tuple[torch.Tensor, torch.Tensor]:
    grad = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
    return HeadSoftCrossEntropy.apply(x, weight, t_logits, t_lse, w, kernels, grad)

"""Training-time-test attention for draft steps i >= 1, without a [heads, T, T] score matrix.

At step i, row t attends to step 0's keys at positions <= t (causal) and to its own key of
each step 1..i (one "diagonal" key per step). Written out, that is a [T, T + i] score matrix
per head in fp32, masked, softmaxed and multiplied back: at 2048 tokens and 32 heads, half a
gigabyte per step through several kernels forward and more backward, most of the cost of a
step beyond its matmuls.

Here the causal part is one flash-attention call over step 0's keys that also returns its
log-sum-exp, and the i diagonal keys are i dot products per row. The two are merged exactly:
with lse the log-sum-exp over all keys, the causal output weighs exp(lse0 - lse) and the
value of step j weighs exp(s_j - lse). Backward is flash-attention's own backward, given
the merged output and the incoming gradient scaled by the causal weight: its internal
rowsum(dO * O) term is then the merged attention's, so the gradients come out as those of
softmax over all T + i keys. The diagonal terms are elementwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from pipeline.compiled_ops import CompiledOps


def _flash_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   scale: float) -> tuple[torch.Tensor, torch.Tensor, tuple[Any, ...] | None]:
    """(out, lse [B,H,T] fp32, what backward needs)."""
    if q.device.type == "cuda":
        out, lse, cq, ck, mq, mk, seed, offset, _ = torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, 0.0, True, False, scale=scale)
        return out, lse, (cq, ck, mq, mk, seed, offset)
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True, scale=scale)
    return out, lse, None


def _flash_backward(grad: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                    lse: torch.Tensor, aux: tuple[Any, ...] | None, scale: float) -> Any:
    if aux is not None:
        cq, ck, mq, mk, seed, offset = aux
        return torch.ops.aten._scaled_dot_product_flash_attention_backward(
            grad, q, k, v, out, lse, cq, ck, mq, mk, 0.0, True, seed, offset, scale=scale)
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad, q, k, v, out, lse, 0.0, True, scale=scale)


_checked: dict[tuple[str, torch.dtype, int], bool] = {}
CHECK_TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 1e-2}


def flash_supported(q: torch.Tensor) -> bool:
    """Whether this merge can run here: CPU flash takes every float dtype, CUDA flash
    bf16/fp16 with heads of at most 256. The first use on a device and dtype also checks the
    merge against the score matrix on a small input, values and gradients: flash attention's
    private ops may change between torch releases, and a merge that no longer matches falls
    back to the score matrix with a warning instead of training a wrong drafter."""
    kind, dtype, dim = q.device.type, q.dtype, q.shape[-1]
    if kind == "cpu":
        ok = dtype in CHECK_TOLERANCE
    else:
        ok = kind == "cuda" and dtype in (torch.bfloat16, torch.float16) and dim <= 256
    if not ok:
        return False
    key = (kind, dtype, dim)
    if key not in _checked:
        _checked[key] = _self_check(q.device, dtype, dim)
    return _checked[key]


def score_matrix(q: torch.Tensor, ks: list[torch.Tensor], vs: list[torch.Tensor], scale: float) -> torch.Tensor:
    """The definition, in fp32 (returned in q's dtype): softmax over [causal scores against
    ks[0] ; q . ks[j] for each j >= 1], times the values."""
    dtype = q.dtype
    q, ks, vs = q.float(), [k.float() for k in ks], [v.float() for v in vs]
    t = q.shape[2]
    scores = torch.matmul(q, ks[0].transpose(2, 3)) * scale
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    diag = torch.stack([(q * k).sum(-1) * scale for k in ks[1:]], dim=-1)
    w = torch.softmax(torch.cat((scores, diag), dim=-1), dim=-1)
    out = torch.matmul(w[..., :t], vs[0])
    for j, v in enumerate(vs[1:]):
        out = out + w[..., t + j, None] * v
    return out.to(dtype)


def _self_check(device: torch.device, dtype: torch.dtype, dim: int) -> bool:
    import warnings

    g = torch.Generator(device="cpu").manual_seed(0)
    shape = (1, 2, 37, dim)
    leaves = [torch.randn(shape, generator=g).to(device=device, dtype=dtype) for _ in range(7)]
    grad = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
    scale = 1.0 / dim ** 0.5
    try:
        with torch.enable_grad(), torch.autocast(device.type, enabled=False):
            got_leaves = [x.clone().requires_grad_() for x in leaves]
            q, k0, v0, k1, v1, k2, v2 = got_leaves
            got = CausalPlusDiagonal.apply(q, k0, v0, scale, EAGER_MERGE, k1, k2, v1, v2)
            got_grads = torch.autograd.grad(got, got_leaves, grad)
            ref_leaves = [x.clone().requires_grad_() for x in leaves]
            q, k0, v0, k1, v1, k2, v2 = ref_leaves
            ref = score_matrix(q.float(), [k0.float(), k1.float(), k2.float()], [v0.float(), v1.float(), v2.float()],
                               scale)
            ref_grads = torch.autograd.grad(ref, ref_leaves, grad.float())
        with torch.no_grad():
            worst = max(float((a.float() - b.float()).abs().max() / (b.float().abs().max() + 1))
                        for a, b in zip((got, *got_grads), (ref, *ref_grads)))
    except Exception as e:  # noqa: BLE001 - any failure of the private ops means: use the reference
        warnings.warn(f"TTT attention: flash merge unavailable on {device.type} {dtype} ({type(e).__name__}: {e}); "
                      "using the score matrix (slower, same result)", RuntimeWarning, stacklevel=3)
        return False
    if worst > CHECK_TOLERANCE[dtype]:
        warnings.warn(f"TTT attention: flash merge differs from the score matrix on {device.type} {dtype} "
                      f"(relative error {worst:.2e}); using the score matrix (slower, same result)",
                      RuntimeWarning, stacklevel=3)
        return False
    return True


def merge_forward(q: torch.Tensor, out0: torch.Tensor, lse0: torch.Tensor, ks: torch.Tensor, vs: torch.Tensor,
                  scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The causal part's output and log-sum-exp merged with the i diagonal keys and values
    (ks, vs [i,B,H,T,D]): (output in q's dtype, the causal part's weight alpha [B,H,T], each
    diagonal key's weight beta [i,B,H,T], both fp32)."""
    s = (q.float() * ks.float()).sum(-1) * scale  # [i,B,H,T]
    lse = torch.logaddexp(lse0, torch.logsumexp(s, dim=0))
    alpha = torch.exp(lse0 - lse)
    beta = torch.exp(s - lse)
    merged = alpha[..., None] * out0.float() + (beta[..., None] * vs.float()).sum(0)
    return merged.to(q.dtype), alpha, beta


def merge_grad_out(grad: torch.Tensor, out: torch.Tensor, alpha: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the gradient flash attention's backward is given: the incoming one scaled by the causal
    weight, in out's dtype; rowsum(dO * O) of the merged attention [B,H,T] fp32)."""
    g = grad.float()
    return (alpha[..., None] * g).to(out.dtype), (g * out.float()).sum(-1)


def merge_grad_diag(grad: torch.Tensor, q: torch.Tensor, dq: torch.Tensor, d: torch.Tensor, beta: torch.Tensor,
                    ks: torch.Tensor, vs: torch.Tensor, scale: float) -> tuple[torch.Tensor, ...]:
    """(dq with the diagonal keys' part added, the diagonal keys' gradients, their values')."""
    g = grad.float()
    ds = beta * ((g * vs.float()).sum(-1) - d) * scale  # [i,B,H,T]
    dq = dq.float() + (ds[..., None] * ks.float()).sum(0)
    return dq.to(q.dtype), (ds[..., None] * q.float()).to(ks.dtype), (beta[..., None] * g).to(vs.dtype)


MERGE: dict[str, Callable[..., Any]] = {"merge_forward": merge_forward, "merge_grad_out": merge_grad_out, "merge_grad_diag": merge_grad_diag}
EAGER_MERGE = CompiledOps(MERGE, compile=False, what="the TTT attention's merge", flag="")
"""The merge written out op by op; training compiles the same table (pipeline.train.drafter_compile)."""


class CausalPlusDiagonal(torch.autograd.Function):
    """softmax over [causal keys of step 0 ; one own key per later step] times the values.
    q, k0, v0: [B,H,T,D] (keys already expanded to q's heads); then the i diagonal keys and
    the i diagonal values, each [B,H,T,D]. `merge` runs the elementwise parts, compiled or not."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k0: torch.Tensor, v0: torch.Tensor, scale: float,
                merge: CompiledOps, *diag: torch.Tensor) -> torch.Tensor:
        n = len(diag) // 2
        ks, vs = torch.stack(diag[:n]), torch.stack(diag[n:])  # one [i,B,H,T,D] each: one graph for every i
        with torch.autocast(q.device.type, enabled=False):
            out0, lse_kernel, aux = _flash_forward(q, k0, v0, scale)
            out, alpha, beta = merge.call("merge_forward", q, out0, lse_kernel[..., :q.shape[2]].float(), ks, vs,
                                          scale)
        ctx.scale, ctx.aux, ctx.merge = scale, aux, merge
        ctx.save_for_backward(q, k0, v0, out, lse_kernel, alpha, beta, ks, vs)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k0, v0, out, lse_kernel, alpha, beta, ks, vs = ctx.saved_tensors
        with torch.autocast(q.device.type, enabled=False):
            g0, d = ctx.merge.call("merge_grad_out", grad, out, alpha)
            dq, dk0, dv0 = _flash_backward(g0, q, k0, v0, out, lse_kernel, ctx.aux, ctx.scale)
            dq, dks, dvs = ctx.merge.call("merge_grad_diag", grad, q, dq, d, beta, ks, vs, ctx.scale)
        return (dq, dk0, dv0, None, None, *dks.unbind(0), *dvs.unbind(0))


def causal_plus_diagonal(q: torch.Tensor, k0: torch.Tensor, v0: torch.Tensor, ks: list[torch.Tensor],
                         vs: list[torch.Tensor], scale: float, merge: CompiledOps = EAGER_MERGE) -> torch.Tensor:
    return CausalPlusDiagonal.apply(q, k0, v0, scale, merge, *ks, *vs)

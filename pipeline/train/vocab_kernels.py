"""The objective's passes over vocabulary-wide tensors, as single fused kernels on CUDA.

A step holds [B,T,Vd] tensors: the target's distribution over the draft vocabulary, and at
each of the 7 TTT steps the drafter's logits. Written out eagerly, every pass over them
materialises fp32 copies (the upcast, logsumexp's max, subtract, exp and sum, the dot with
the target's probabilities; backward again, then the cast back), about 50 GB of memory
traffic per TTT step at 16k tokens and a 32k draft vocabulary: for a small target that is
most of a step, far more than its matmuls. Compiled with torch.compile, each pass becomes
one kernel that reads the bf16 logits and the probabilities once and keeps the fp32 math
in registers. The math is the eager one, so the two agree to fp32 rounding.

Compiled by default on CUDA (`--no-compile-loss` turns it off); eager on CPU. If compiling
fails (no Triton, an unsupported op) the kernels go back to eager with one warning line,
rather than the run failing. Shapes are compiled dynamic: every TTT step has its own row
count and every batch its own length, which would otherwise each cost a recompile.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..capture import compile_failed


def _wide(x: torch.Tensor) -> torch.Tensor:
    """x in fp32 when it is narrower (bf16 logits); fp32 and fp64 as they are."""
    return x if x.element_size() >= 4 else x.float()


def probs_entropy(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(softmax in fp32, its entropy) of [..., V] logits."""
    logp = torch.log_softmax(_wide(logits), dim=-1)
    probs = logp.exp()
    return probs, -(probs * logp).sum(-1)


def soft_ce_forward(z: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logsumexp(z), -(p . log_softmax(z))) per row, in fp32 at least whatever z's dtype."""
    zf = _wide(z)
    lse = torch.logsumexp(zf, dim=-1)
    return lse, lse - (p.to(zf.dtype) * zf).sum(-1)


def soft_ce_grad(z: torch.Tensor, p: torch.Tensor, lse: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """d/dz of g * soft_ce: g * (softmax(z) - p), in z's dtype."""
    zf = _wide(z)
    return torch.exp(zf - lse.unsqueeze(-1)).sub_(p.to(zf.dtype)).mul_(g.unsqueeze(-1)).to(z.dtype)


EAGER = {"probs_entropy": probs_entropy, "soft_ce_forward": soft_ce_forward, "soft_ce_grad": soft_ce_grad}


class VocabKernels:
    """The three passes, compiled or eager; one instance per run, shared by training and validation."""

    def __init__(self, compile: bool, log: Callable[[str], None] = print) -> None:
        self.log = log
        self._compiled = {name: torch.compile(fn, dynamic=True) for name, fn in EAGER.items()} if compile else None

    @property
    def compiled(self) -> bool:
        return self._compiled is not None

    def _call(self, name: str, *args: torch.Tensor):
        if self._compiled is not None:
            try:
                return self._compiled[name](*args)
            except torch.cuda.OutOfMemoryError:
                raise
            except Exception as e:  # noqa: BLE001 - any compile failure falls back to the same math, eagerly
                self._compiled = None
                self.log(compile_failed("train", "the loss kernels", e, "--no-compile-loss"))
        return EAGER[name](*args)

    def probs_entropy(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._call("probs_entropy", logits)

    def soft_ce_forward(self, z: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._call("soft_ce_forward", z, p)

    def soft_ce_grad(self, z: torch.Tensor, p: torch.Tensor, lse: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return self._call("soft_ce_grad", z, p, lse, g)


EAGER_KERNELS = VocabKernels(compile=False)

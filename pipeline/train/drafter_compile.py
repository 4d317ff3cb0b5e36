"""The drafter compiled for training: each run of elementwise work between two matmuls becomes
one kernel.

Eagerly, one TTT step of the decoder layer is well over a hundred small kernels over
[rows, hidden] tensors, forward and backward: the fp32 norms (upcast, square, mean, rsqrt,
two multiplies, casts), the casts autocast puts before every projection, the concatenation,
the rope's halves, the MLP's SiLU and product, the residual adds; and step i's attention
merges its flash output with i diagonal keys in a dozen fp32 passes per key, forward and
backward. torch.compile (dynamic shapes) fuses each run of them. The attention's flash
calls stay out: the layer is compiled as its two halves around the attention
(`DecoderLayer.before_attention` / `after_attention`; the TTT cache keeps Python state and
its flash merge calls private ops), the final norm (on the rows the objective scores) as one
more, and the merge's elementwise parts as the pure functions `ttt_attention.MERGE` runs
inside its autograd Function, over the diagonal keys stacked (one graph for every step).
Export, evaluation and serving never see this: it replaces methods on the training
process's own modules and hands the objective its own merge.

On with the loss's kernels (CUDA, unless --no-compile-loss), off on CPU. Before the first
step the compiled drafter takes a tiny batch through three TTT steps, forward and backward,
beside the eager one: a compile that fails (no Triton) or a result that differs beyond
rounding leaves the drafter eager with one warning line; a later failure (a shape that does
not compile) turns it eager from that call on, also with one warning line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from pipeline.compiled_ops import CompiledOps, compile_failed
from pipeline.drafter.model import Eagle3Drafter, TTTCache
from pipeline.drafter.ttt_attention import EAGER_MERGE, MERGE
from pipeline.events import warn
from pipeline.train.loss_kernels import LossKernels

PARTS = (("midlayer", "before_attention"), ("midlayer", "after_attention"), ("norm", "forward"))
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 1e-2}
"""Largest difference from eager, relative to the largest value, in outputs and gradients: the
compiled kernels round bf16 intermediates differently (they stay in fp32 inside a kernel)."""
FLAG = "--no-compile-loss"


def training_kernels(drafter: Eagle3Drafter, compile: bool, dtype: torch.dtype,
                     log: Callable[[str], None]) -> tuple[LossKernels, CompiledOps]:
    """The loss's passes and the TTT attention's merge, compiled or eager, and the drafter's layer
    compiled in place when `compile` and its trial against eager pass."""
    kernels = LossKernels(compile, log)
    if not compile:
        return kernels, EAGER_MERGE
    merge = CompiledOps(MERGE, True, "the TTT attention's merge", FLAG, log)
    return kernels, (merge if CompiledDrafter(drafter, log).install(merge, dtype) else EAGER_MERGE)


class CompiledDrafter:
    def __init__(self, drafter: Eagle3Drafter, log: Callable[[str], None]) -> None:
        self.drafter = drafter
        self.log = log
        self.parts = [(drafter.get_submodule(m), name) for m, name in PARTS]
        self.trying = False  # in the trial a failure is install's to report, once

    def install(self, merge: CompiledOps, dtype: torch.dtype) -> bool:
        """Compile in place and check against eager; False (and eager, one warning line) if that fails."""
        try:
            want = _trial(self.drafter, EAGER_MERGE, dtype)
            for module, name in self.parts:
                compiled = torch.compile(getattr(module, name), dynamic=True)
                setattr(module, name, self._guarded(module, name, compiled))
            self.trying = True
            got = _trial(self.drafter, merge, dtype)
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as e:  # noqa: BLE001 - any compile failure: the same math, eagerly
            self.uncompile()
            warn("train", compile_failed("the drafter's layer", e, FLAG), log=self.log)
            return False
        finally:
            self.trying = False
        if not merge.compiled or any(name not in vars(module) for module, name in self.parts):
            self.uncompile()  # one of them fell back to eager in the trial (and said so): both do
            return False
        worst = max(_relative(a, b) for a, b in zip(got, want))
        if worst > TOLERANCE.get(dtype, 1e-4):
            self.uncompile()
            warn("train", f"the compiled drafter differs from the eager one (relative error {worst:.1e}); "
                          f"continuing uncompiled ({FLAG} skips the attempt)", log=self.log)
            return False
        return True

    def uncompile(self) -> None:
        for module, name in self.parts:
            module.__dict__.pop(name, None)

    def _guarded(self, module: torch.nn.Module, name: str, compiled: Callable) -> Callable:
        def call(*args: Any) -> Any:
            try:
                return compiled(*args)
            except torch.cuda.OutOfMemoryError:
                raise
            except Exception as e:  # noqa: BLE001 - a shape that does not compile: the same math, eagerly
                if self.trying:
                    raise
                self.uncompile()
                warn("train", compile_failed("the drafter's layer", e, FLAG), log=self.log)
                return getattr(module, name)(*args)
        return call


def _trial(drafter: Eagle3Drafter, merge: CompiledOps, dtype: torch.dtype) -> list[torch.Tensor]:
    """Three TTT steps of a tiny batch (no diagonal key, one, two), forward and backward: the
    outputs, then every parameter's gradient."""
    cfg, device = drafter.config, drafter.fc.weight.device
    g = torch.Generator(device="cpu").manual_seed(0)
    b, t = 3, 13  # sizes unlike the 1 or 2 diagonal keys: no guard that ties them for the real batches
    ids = torch.randint(0, cfg.vocab_size, (b, t), generator=g).to(device)
    aux = torch.randn(b, t, 3 * cfg.input_hidden_size, generator=g).to(device=device, dtype=dtype)
    pos = torch.arange(t, device=device).expand(b, t)
    cache, hidden, outs = TTTCache(merge), aux, []
    with torch.enable_grad(), torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
        for i in range(3):
            hidden = drafter.hidden_out(ids, hidden, pos + i, cache)
            outs.append(drafter.norm(hidden.reshape(-1, hidden.shape[-1])).float())
        out = torch.cat(outs)
    probe = torch.randn(out.shape, generator=g).to(device)  # a direction: a normed output's own size is constant
    params = [p for p in drafter.parameters() if p.requires_grad]
    grads = torch.autograd.grad((out * probe).mean(), params, allow_unused=True)  # lm_head: not in this trial
    return [out.detach(), *(gr for gr in grads if gr is not None)]


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).abs().max() / (want.float().abs().max() + 1e-6))

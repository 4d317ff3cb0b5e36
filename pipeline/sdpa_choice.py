"""Which fused attention kernel torch's SDPA may pick on CUDA, for the stages whose batches
change length from one call to the next: online training and extraction.

On Hopper, torch picks cuDNN's attention first for a causal call. cuDNN builds an execution
plan for every shape it has not seen, tens of milliseconds of host time each, and a trainer's
micro-batches are as long as their longest row: nearly every step is a new shape. Traced on an
H100, the online trainer spent 77 ms of a 156 ms step on the host in cuDNN's attention (the
target's 30 layers forward, the drafter's first TTT step backward) while the GPU computed for
55 ms. Flash attention has no plan to build and computes the same causal softmax (equal within
bf16 rounding), so these stages leave cuDNN's kernel out; the others keep torch's choice.
"""

from __future__ import annotations

import torch


def leave_out_cudnn() -> None:
    """For this process: SDPA chooses among flash, memory-efficient and math, never cuDNN."""
    torch.backends.cuda.enable_cudnn_sdp(False)

"""The refusal of a step whose loss or gradient is not finite, read a step late.

A step is refused before the optimiser moves when its loss or gradient is not finite: AdamW
would carry a NaN into its moments, every later step would log `loss nan`, and the pruning
of old checkpoints would then keep only poisoned ones. The refusal happens on the device:
the fused AdamW skips a step flagged `found_inf` (weights, moments and step count untouched),
so the host never waits for the check. It reads the flag a step later (`FiniteGuard`), when
the device has long written it, and before anything is logged, validated or saved, then
stops the run naming the refused step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from pipeline.train.errors import Stopped


class NotFinite(Stopped):
    """The loss or gradient of a step is NaN or infinite: the run stops (exit 3) before the
    optimiser takes it, keeping the checkpoints it has, all finite."""


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

    def settle(self, total: int, last_good: Callable[[], str]) -> None:
        """NotFinite naming the armed step (of `total`) and, from `last_good`, where to go on from."""
        if self.step is None:
            return
        if self.event is not None:
            self.event.synchronize()
        step, self.step = self.step, None
        bad, loss, norm, bad_states = self.host.tolist()
        if bad:
            cause = ("the target's states for this batch are not finite (check the target's weights and dtype)"
                     if bad_states > 0 else
                     "lower --lr or raise --warmup-ratio, or look for extreme values in the data")
            raise NotFinite(f"step {step}/{total}: the loss ({loss:.4g}) or gradient norm ({norm:.4g}) is not "
                            f"finite; stopped before the optimiser took it; {cause}; {last_good()}")

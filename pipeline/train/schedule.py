"""The run's steps and learning rate as pure functions of its settings, so a resume rebuilds
exactly the schedule the interrupted run was following."""

from __future__ import annotations

import math
from collections.abc import Callable

from pipeline.train.data import BatchPlan, plan_epoch
from pipeline.train.errors import BadInput


def lr_lambda(total: int, warmup: int, min_ratio: float) -> Callable[[int], float]:
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return f


def build_schedule(lengths: list[int], positions: list[int], plan: BatchPlan, epochs: int | None,
                   steps: int | None) -> tuple[dict[int, list], list[tuple[int, int]]]:
    """Every step of the run over the source positions `positions` (the training share):
    ({epoch: its steps of micro-batches}, [(epoch, step in epoch)] in run order)."""
    plans: dict[int, list] = {}
    schedule: list[tuple[int, int]] = []
    sub = [lengths[p] for p in positions]
    identity = len(positions) == len(lengths)
    epoch = 0
    while (epochs is not None and epoch < epochs) or (steps is not None and len(schedule) < steps):
        steps_of = plan_epoch(sub, plan, epoch)
        plans[epoch] = steps_of if identity else [[[positions[i] for i in mb] for mb in st] for st in steps_of]
        if not plans[epoch]:
            raise BadInput(f"the {len(lengths)} samples make fewer micro-batches than the {plan.world_size} "
                           "ranks of one step; use fewer ranks or smaller batches")
        schedule.extend((epoch, k) for k in range(len(plans[epoch])))
        epoch += 1
    if steps is not None:
        schedule = schedule[:steps]
    return plans, schedule


def validation_batches(lengths: list[int], val: list[int], plan: BatchPlan, rank: int,
                       world: int) -> list[list[int]]:
    """This rank's share of the held-out micro-batches (one fixed pass, the same every time)."""
    one = BatchPlan(plan.batch_tokens, plan.batch_size, plan.max_len, 1, plan.seed)
    micro = [mb for st in plan_epoch([lengths[p] for p in val], one, 0) for mb in st]
    return [[val[i] for i in mb] for mb in micro][rank::world]

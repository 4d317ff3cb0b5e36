"""The run's steps and learning rate as pure functions of its settings, so a resume rebuilds
exactly the schedule the interrupted run was following.

- `split_validation` holds out a seeded slice of the source's positions that is never trained on.
- `plan_epoch` turns (seed, epoch) into the exact list of steps: samples shuffled, sorted by
  length inside windows (little padding), packed into micro-batches by a token budget, the
  micro-batches shuffled, and grouped `world_size` to a step. The plan depends on nothing
  else, so a resume rebuilds it and starts at the saved step; rank r trains micro-batch r
  of every step.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.train.errors import BadInput

WINDOW = 1024  # samples sorted by length together


def split_validation(samples: int, count: int, seed: int) -> tuple[list[int], list[int]]:
    """(train positions, held-out positions), both ascending: `count` positions drawn by the
    seed alone, so a resume and every rank hold out the same samples."""
    if count <= 0:
        return list(range(samples)), []
    if count >= samples:
        raise BadInput(f"a validation slice of {count} samples leaves none of the store's {samples} to train on; "
                       "lower --val-samples or --val-share")
    held = set(random.Random(f"eagle3-val:{seed}").sample(range(samples), count))
    return [p for p in range(samples) if p not in held], sorted(held)


@dataclass(frozen=True)
class BatchPlan:
    batch_tokens: int | None  # padded tokens per micro-batch (one rank, one step)
    batch_size: int | None  # or samples per micro-batch
    max_len: int
    world_size: int
    seed: int

    def describe(self) -> str:
        per = f"{self.batch_tokens} padded tokens" if self.batch_tokens else f"{self.batch_size} samples"
        return f"{per} per micro-batch x {self.world_size} rank(s), max-len {self.max_len}"


def plan_epoch(lengths: list[int], plan: BatchPlan, epoch: int) -> list[list[list[int]]]:
    """The steps of one epoch; each step holds `world_size` micro-batches of store positions.
    Micro-batches that do not fill a last step are dropped (never more than world_size - 1)."""
    rng = random.Random(f"eagle3-train:{plan.seed}:{epoch}")
    order = list(range(len(lengths)))
    rng.shuffle(order)
    micro: list[list[int]] = []
    for w in range(0, len(order), WINDOW):
        window = sorted(order[w:w + WINDOW], key=lambda i: (-min(lengths[i], plan.max_len), i))
        cur: list[int] = []
        for i in window:
            width = min(lengths[cur[0]], plan.max_len) if cur else min(lengths[i], plan.max_len)
            full = ((len(cur) + 1) * width > plan.batch_tokens if plan.batch_tokens
                    else len(cur) >= (plan.batch_size or 1))
            if cur and full:
                micro.append(cur)
                cur = []
            cur.append(i)
        if cur:
            micro.append(cur)
    rng.shuffle(micro)
    w = plan.world_size
    return [micro[s:s + w] for s in range(0, len(micro) - w + 1, w)]


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

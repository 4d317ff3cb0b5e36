"""A training run as its parts read it: what setup built once (`Run`, frozen) and what moves
as it trains (`Progress`).

The step, the validation, the checkpoint, the summary and the loop each read what they need
from the one `Run`; an online run differs from an offline one only in its `source` and its
`states` (the target that computes what a store would have held). The optimiser, the
scheduler and the guard are objects that change inside, as torch's do; the run's own counters
are `progress`, which a checkpoint saves and a resume puts back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from pipeline.compiled_ops import CompiledOps
from pipeline.drafter.config import DrafterConfig
from pipeline.drafter.model import Eagle3Drafter
from pipeline.drafter.vocab import DraftVocab
from pipeline.events import EventWriter
from pipeline.train.dist import Dist
from pipeline.train.finite import FiniteGuard
from pipeline.train.loss import TargetHead
from pipeline.train.loss_kernels import LossKernels
from pipeline.train.options import Options
from pipeline.train.schedule import BatchPlan
from pipeline.train.source import Source, StateFiller


@dataclass
class Progress:
    """How far the run is: the step it resumed at, the logged and validated metrics, the tokens trained."""

    start: int = 0
    history: list[dict] = field(default_factory=list)
    val_history: list[dict] = field(default_factory=list)
    tokens_total: int = 0


@dataclass(frozen=True)
class Model:
    """The drafter with its draft vocabulary, the target's head it learns from, and the kernels of its step."""

    drafter: Eagle3Drafter
    vocab: DraftVocab
    vocab_note: dict | None  # where the vocabulary was chosen and what it covers (draft_vocab.py)
    head: TargetHead
    kernels: LossKernels
    merge: CompiledOps


@dataclass(frozen=True)
class Optimiser:
    objective: torch.nn.Module  # the TTT objective, DDP-wrapped with ranks
    params: list[torch.nn.Parameter]
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LambdaLR
    schedule_fn: Callable[[int], float]
    warmup: int
    guard: FiniteGuard


@dataclass(frozen=True)
class Run:
    opts: Options
    dist: Dist
    log: Callable[[str], None]
    stop: threading.Event
    events: EventWriter
    out: Path
    source: Source
    states: StateFiller | None  # online: the target computing each batch's states
    dcfg: DrafterConfig
    plan: BatchPlan
    train_pos: list[int]
    val_pos: list[int]
    plans: dict
    schedule: list[tuple[int, int]]
    identity: dict
    state: dict | None  # the checkpoint's train_state.pt when resuming
    existing: Path | None  # that checkpoint's folder
    model: Model
    optimiser: Optimiser
    progress: Progress = field(default_factory=Progress)

    @property
    def device(self) -> torch.device:
        return self.dist.device

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def total(self) -> int:
        return len(self.schedule)

    @property
    def amp_dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.cuda else torch.float32

    @property
    def drafter(self) -> Eagle3Drafter:
        return self.model.drafter

    @property
    def head(self) -> TargetHead:
        return self.model.head

    @property
    def objective(self) -> torch.nn.Module:
        return self.optimiser.objective

    @property
    def params(self) -> list[torch.nn.Parameter]:
        return self.optimiser.params

    @property
    def opt(self) -> torch.optim.Optimizer:
        return self.optimiser.opt

    @property
    def sched(self) -> torch.optim.lr_scheduler.LambdaLR:
        return self.optimiser.sched

    @property
    def guard(self) -> FiniteGuard:
        return self.optimiser.guard

    def close(self) -> None:
        if self.states is not None:
            self.states.close()

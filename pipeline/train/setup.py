"""Everything a run holds before its first step: the data source, the drafter and its draft
vocabulary, the target's head, the optimiser and the schedule, fresh or from a checkpoint.

One `Run` carries them, so the step, the validation, the checkpoint and the loop each read
what they need from one place, and an online run differs from an offline one only in its
`source` and its `states` (the target that computes what a store would have held).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from pipeline.compiled_ops import CompiledOps
from pipeline.drafter import target_head
from pipeline.drafter import vocab as dvocab
from pipeline.drafter.config import DrafterConfig
from pipeline.drafter.model import Eagle3Drafter, load_drafter
from pipeline.drafter.ttt_attention import EAGER_MERGE
from pipeline.events import EventWriter, warn
from pipeline.records.codec import RecordError, UnknownVersion
from pipeline.records.train_summary import TrainSummary, read_summary
from pipeline.sdpa_choice import leave_out_cudnn
from pipeline.target.config import read_config
from pipeline.train import checkpoint, saving
from pipeline.train.data import BatchPlan, count_dataset_tokens, open_store, split_validation
from pipeline.train.dist import Dist
from pipeline.train.drafter_compile import training_kernels
from pipeline.train.errors import BadInput
from pipeline.train.loss import TargetHead, TTTObjective
from pipeline.train.online import TargetStates, open_records
from pipeline.train.options import DEFAULT_VAL_MAX, Options
from pipeline.train.resume import SUMMARY, check_resume, identity_of
from pipeline.train.schedule import build_schedule, lr_lambda
from pipeline.train.step import FiniteGuard
from pipeline.train.vocab_kernels import EAGER_KERNELS, VocabKernels


@dataclass
class Run:
    opts: Options
    dist: Dist
    log: Callable[[str], None]
    stop: threading.Event
    events: EventWriter
    out: Path
    source: object  # data.Store or online.Records
    states: TargetStates | None
    dcfg: DrafterConfig
    plan: BatchPlan
    train_pos: list[int]
    val_pos: list[int]
    plans: dict
    schedule: list[tuple[int, int]]
    identity: dict
    state: dict | None = None
    existing: Path | None = None
    drafter: Eagle3Drafter | None = None
    vocab: dvocab.DraftVocab | None = None
    vocab_note: dict | None = None
    head: TargetHead | None = None
    objective: torch.nn.Module | None = None
    kernels: VocabKernels = EAGER_KERNELS
    merge: CompiledOps = EAGER_MERGE
    params: list = field(default_factory=list)
    opt: torch.optim.Optimizer | None = None
    guard: FiniteGuard | None = None
    sched: torch.optim.lr_scheduler.LambdaLR | None = None
    schedule_fn: Callable[[int], float] | None = None
    warmup: int = 0
    start: int = 0
    history: list[dict] = field(default_factory=list)
    val_history: list[dict] = field(default_factory=list)
    tokens_total: int = 0

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

    def close(self) -> None:
        if self.states is not None:
            self.states.close()


def val_count(opts: Options, samples: int) -> int:
    if opts.val_samples is not None:
        return opts.val_samples
    return min(int(opts.val_share * samples), DEFAULT_VAL_MAX)


def open_source(opts: Options, dist: Dist, log: Callable[[str], None]):
    """(source, where it is): the store, checked as the extractor checks it, or the merged dataset
    (with merge's stats proving it was tokenized by the target's tokenizer)."""
    if opts.online:
        return open_records(opts.data, opts.target, opts.stats, log)
    return open_store(opts.store, opts.target, checksums=opts.checksums if dist.rank == 0 else "none")


def build(opts: Options, dist: Dist, log: Callable[[str], None], stop: threading.Event) -> Run:
    """The run up to its optimiser: folder claimed, source opened, plan made, drafter built or loaded."""
    rank = dist.rank
    out = Path(opts.out)
    inputs = [p for p in (opts.store, opts.data, opts.target) if p is not None]
    checkpoint.refuse_run_folder(out, inputs)
    dist.barrier()  # every rank judged the folder before rank 0 marks it
    if rank == 0:
        checkpoint.claim_run_folder(out)
    source = open_source(opts, dist, log)
    cfg_json = read_config(opts.target, "--target")
    dcfg = DrafterConfig.from_target(cfg_json, opts.draft_vocab, where=str(Path(opts.target) / "config.json"))
    if opts.max_len > dcfg.max_position_embeddings:
        warn("train", f"--max-len {opts.max_len} is above the target's max_position_embeddings "
                      f"{dcfg.max_position_embeddings}", log=log)
    plan = BatchPlan(batch_tokens=opts.batch_tokens, batch_size=opts.batch_size, max_len=opts.max_len,
                     world_size=dist.world_size, seed=opts.seed)
    existing = checkpoint.latest_checkpoint(out)
    state = checkpoint.load_state(existing) if existing is not None and opts.resume else None
    n_val = val_count(opts, source.samples)
    if state is not None and "val_samples" not in state["identity"]:
        n_val = 0  # a checkpoint of a trainer without validation: resume it as it was trained
        log(f"train: {existing} was trained without a held-out slice; resuming it without one")
    train_pos, val_pos = split_validation(source.samples, n_val, opts.seed)
    plans, schedule = build_schedule(source.lengths, train_pos, plan, opts.epochs, opts.steps)
    run = Run(opts=opts, dist=dist, log=log, stop=stop,
              events=EventWriter.from_env() if rank == 0 else EventWriter(None), out=out, source=source,
              states=None, dcfg=dcfg, plan=plan, train_pos=train_pos, val_pos=val_pos, plans=plans,
              schedule=schedule, identity={}, state=state, existing=existing)
    run.identity = identity_of(opts, plan, source.identity(), val_pos, run.total)
    if existing is not None and not opts.resume:
        _clear_checkpoints(run)
    leave_out_cudnn()  # the drafter's first TTT step, backward: a new shape nearly every step
    _build_drafter(run)
    if opts.online:
        run.states = TargetStates(Path(opts.target), dist.device, opts.compile_target, log, stop)
    _build_optimizer(run)
    return run


def _clear_checkpoints(run: Run) -> None:
    if not run.opts.overwrite:
        raise BadInput(f"{run.out} already holds checkpoints (latest {run.existing.name}); pass --resume to continue "
                       "it (a larger --steps or --epochs extends it) or --overwrite to start over")
    run.dist.barrier()
    if run.dist.rank == 0:
        shutil.rmtree(run.out / checkpoint.DIR)
    run.dist.barrier()
    run.existing = None


def _build_drafter(run: Run) -> None:
    opts, dist, dcfg = run.opts, run.dist, run.dcfg
    if run.existing is not None:
        check_resume(run.state["identity"], run.identity, run.existing)
        drafter = load_drafter(run.existing)
        if drafter.config != dcfg:
            raise BadInput(f"{run.existing}/config.json does not describe a drafter of {opts.target} with "
                           f"--draft-vocab {opts.draft_vocab}; resume with the same target, or pass --overwrite")
        vocab = dvocab.from_buffers(drafter.d2t, drafter.t2d)
        run.vocab_note = run.state.get("vocab_note")
    else:
        counts, vocab_source = vocab_counts(run)
        vocab = dvocab.from_counts(counts, dcfg.draft_vocab_size)
        note = {"source": vocab_source, "coverage_chosen_on": vocab.coverage, "held_out_coverage": None}
        if run.val_pos:
            held = dist.all_reduce_sum(run.source.loss_token_counts(dcfg.vocab_size, dist.rank, dist.world_size,
                                                                    run.val_pos)).cpu()
            note["held_out_coverage"] = float(held[vocab.ids].sum()) / max(1, int(held.sum()))
            note["held_out_distinct_tokens"] = int((held > 0).sum())
            note["held_out_distinct_missing"] = int(((held > 0) & ~vocab.t2d).sum())
        run.vocab_note = note
        torch.manual_seed(opts.seed)
        drafter = Eagle3Drafter(dcfg)
        drafter.set_vocab(vocab)
    head_weight = target_head.read_lm_head(opts.target)
    drafter.load_embeddings(target_head.read_embeddings(opts.target))
    if run.state is None and opts.init_head == "target":
        with torch.no_grad():
            drafter.lm_head.weight.copy_(head_weight[vocab.ids].float())
    drafter.to(run.device)
    run.kernels, run.merge = training_kernels(drafter, opts.compile_loss if opts.compile_loss is not None else run.cuda,
                                              run.amp_dtype, run.log)
    run.head = TargetHead(head_weight, vocab.ids, vocab.t2d, run.device, run.amp_dtype, run.kernels)
    run.drafter, run.vocab = drafter, vocab


def vocab_counts(run: Run) -> tuple[torch.Tensor, str]:
    """Counts the draft vocabulary is chosen by, and where they come from: the merged dataset
    (--vocab-data; an online run's --data; the store's meta `dataset` when it is there unchanged)
    without the held-out records, else the store's training samples."""
    dist, source, vocab_size = run.dist, run.source, run.dcfg.vocab_size
    path, sha, required = _vocab_file(run)
    if path is not None:
        skip_ids, skip_lines = _held_out_keys(run)
        try:
            counts, skipped = (count_dataset_tokens(path, vocab_size, sha, skip_ids, skip_lines) if dist.rank == 0
                               else (torch.zeros(vocab_size, dtype=torch.int64), 0))
        except BadInput as e:
            if required:
                raise
            run.log(f"train: {e}; the draft vocabulary comes from the store's samples instead")
        else:
            return dist.all_reduce_sum(counts), f"{path} ({skipped} held-out records left out)"
    counts = source.loss_token_counts(vocab_size, dist.rank, dist.world_size, run.train_pos)
    return dist.all_reduce_sum(counts), f"the store's {len(run.train_pos)} training samples"


def _vocab_file(run: Run) -> tuple[Path | None, str | None, bool]:
    """(merged JSONL to count, the sha256 it must have, whether a failure to read it is an error)."""
    opts, source = run.opts, run.source
    if opts.vocab_data == "store":
        return None, None, False
    if opts.online:
        path = Path(opts.vocab_data or opts.data)
        return path, source.index.sha256 if path == Path(opts.data) else None, True
    sha = source.meta.get("dataset_sha256")
    if opts.vocab_data:
        return Path(opts.vocab_data), sha, True
    if not source.meta.get("dataset"):
        return None, None, False
    path = Path(source.meta["dataset"])
    if path.is_file():
        return path, sha, False
    run.log(f"train: the store's dataset {path} is not here; the draft vocabulary comes from the store's samples "
            "(pass --vocab-data MERGED.jsonl to choose it over the whole dataset)")
    return None, None, False


def _held_out_keys(run: Run) -> tuple[set[str], set[int]]:
    """The held-out records as a dataset reader recognises them: by id, else by line."""
    if run.opts.online:
        return run.source.ids_of(run.val_pos), set()
    source = run.source
    return ({source.ids[p] for p in run.val_pos if source.ids[p] is not None},
            {source.indices[p] for p in run.val_pos})


def _build_optimizer(run: Run) -> None:
    opts = run.opts
    raw_objective = TTTObjective(run.drafter, opts.ttt_length, run.kernels, run.merge)
    if run.dist.world_size == 1:
        raw_objective.should_stop = run.stop.is_set  # a stop lands between TTT steps, not only between steps
    run.objective = run.dist.wrap(raw_objective)
    run.params = [p for p in run.drafter.parameters() if p.requires_grad]
    run.opt = torch.optim.AdamW(run.params, lr=opts.lr, betas=(0.9, 0.95), weight_decay=opts.weight_decay,
                                fused=True)  # fused: it skips a step flagged not finite on the device (step.py)
    run.guard = FiniteGuard(run.device)
    run.warmup = max(1, round(opts.warmup_ratio * run.total)) if opts.warmup_ratio > 0 else 0
    run.schedule_fn = lr_lambda(run.total, run.warmup, opts.min_lr_ratio)
    run.sched = torch.optim.lr_scheduler.LambdaLR(run.opt, run.schedule_fn)


def restore(run: Run) -> TrainSummary | None:
    """Put the checkpoint's optimiser, schedule, RNG and counters back; returns the run's last
    summary instead when the checkpoint is already its last step (nothing left to train). A
    summary a kill left unwritten (or damaged) is written again from the checkpoint."""
    state, opt, sched = run.state, run.opt, run.sched
    opt.load_state_dict(state["optimizer"])
    sched.load_state_dict(state["scheduler"])
    checkpoint.set_rng_state(state["rng"])
    run.start = int(state["step"])
    run.history = list(state.get("history") or [])
    run.val_history = list(state.get("val_history") or [])
    run.tokens_total = int(state.get("tokens") or 0)
    total, start, log = run.total, run.start, run.log
    if start >= total:
        log(f"train: {run.existing} is the last step ({start}/{total}); nothing left to train (pass a larger --steps "
            "or --epochs with --resume to extend the run)")
        try:
            return read_summary(run.out / SUMMARY)
        except UnknownVersion:
            raise
        except RecordError as e:
            log(f"train: {e}: writing it again from the checkpoint")
            nothing = {"loss": float("nan"), "acc": [float("nan")] * run.opts.ttt_length}
            last = run.history[-1] if run.history else nothing
            return saving.summarize(run, start, last, False, time.monotonic(), run.tokens_total)
    for g, base in zip(opt.param_groups, sched.base_lrs):
        g["lr"] = base * run.schedule_fn(start)  # the new total's schedule when the run was extended
    sched._last_lr = [g["lr"] for g in opt.param_groups]
    saved_total = state["identity"].get("total_steps")
    if saved_total is not None and saved_total != total:
        log(f"train: {'extending' if total > saved_total else 'shortening'} the run from {saved_total} to {total} "
            f"steps; from step {start} the learning rate follows the {total}-step schedule "
            f"({opt.param_groups[0]['lr']:.2e} now)")
    log(f"train: resuming {run.existing} at step {start}/{total}")
    return None

"""Everything a run holds before its first step, built once: the data source, the drafter and
its draft vocabulary, the target's head, the optimiser and the schedule, fresh or from a
checkpoint (run.py: the `Run` they make)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import torch

from pipeline.drafter.config import DrafterConfig
from pipeline.drafter.model import Eagle3Drafter, load_drafter
from pipeline.drafter.vocab import DraftVocab
from pipeline.events import EventWriter, warn
from pipeline.sdpa_choice import leave_out_cudnn
from pipeline.target.config import read_config
from pipeline.target.tensors import read_embeddings, read_lm_head
from pipeline.train import checkpoint, draft_vocab
from pipeline.train.data import open_store
from pipeline.train.dist import Dist
from pipeline.train.drafter_compile import training_kernels
from pipeline.train.errors import BadInput
from pipeline.train.finite import FiniteGuard
from pipeline.train.loss import TargetHead, TTTObjective
from pipeline.train.online import open_records
from pipeline.train.options import DEFAULT_VAL_MAX, Options
from pipeline.train.run import Model, Optimiser, Run
from pipeline.train.schedule import BatchPlan, build_schedule, lr_lambda, split_validation
from pipeline.train.source import Source


def val_count(opts: Options, samples: int) -> int:
    if opts.val_samples is not None:
        return opts.val_samples
    return min(int(opts.val_share * samples), DEFAULT_VAL_MAX)


def open_source(opts: Options, dist: Dist, log: Callable[[str], None]) -> Source:
    """The store, checked as the extractor checks it, or the merged dataset (with merge's stats
    proving it was tokenized by the target's tokenizer): the one place that tells them apart."""
    if opts.data is not None:
        return open_records(opts.data, opts.target, opts.stats, log)
    assert opts.store is not None  # Options.validate: one of --store and --data
    return open_store(opts.store, opts.target, checksums=opts.checksums if dist.rank == 0 else "none")


def build(opts: Options, dist: Dist, log: Callable[[str], None], stop: threading.Event) -> Run:
    """The run up to its optimiser: folder claimed, source opened, plan made, drafter built or loaded."""
    assert opts.out is not None  # Options.validate: a run needs --out
    out = Path(opts.out)
    checkpoint.refuse_run_folder(out, [p for p in (opts.store, opts.data, opts.target) if p is not None])
    dist.barrier()  # every rank judged the folder before rank 0 marks it
    if dist.rank == 0:
        checkpoint.claim_run_folder(out)
    source = open_source(opts, dist, log)
    dcfg = _drafter_config(opts, log)
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
    identity = checkpoint.identity_of(opts, plan, source.identity(), val_pos, len(schedule))
    if existing is not None and state is None:
        checkpoint.clear(out, dist, existing, opts.overwrite)
        existing = None
    leave_out_cudnn()  # the drafter's first TTT step, backward: a new shape nearly every step
    if existing is not None and state is not None:
        checkpoint.check_resume(state["identity"], identity, existing)
        model = _resumed_model(opts, dist, dcfg, existing, state, log)
    else:
        vocab, note = draft_vocab.choose(source, dist, dcfg.vocab_size, dcfg.draft_vocab_size, opts.vocab_data,
                                         train_pos, val_pos, log)
        torch.manual_seed(opts.seed)
        drafter = Eagle3Drafter(dcfg)
        drafter.set_vocab(vocab)
        model = _model(opts, dist, drafter, vocab, note, fresh=True, log=log)
    states = source.target_states(Path(opts.target), dist.device, opts.compile_target, log, stop)
    return Run(opts=opts, dist=dist, log=log, stop=stop,
               events=EventWriter.from_env() if dist.rank == 0 else EventWriter(None), out=out, source=source,
               states=states, dcfg=dcfg, plan=plan, train_pos=train_pos, val_pos=val_pos, plans=plans,
               schedule=schedule, identity=identity, state=state, existing=existing, model=model,
               optimiser=_optimiser(opts, dist, model, stop, len(schedule)))


def _drafter_config(opts: Options, log: Callable[[str], None]) -> DrafterConfig:
    dcfg = DrafterConfig.from_target(read_config(opts.target, "--target"), opts.draft_vocab,
                                     where=str(Path(opts.target) / "config.json"))
    if opts.max_len > dcfg.max_position_embeddings:
        warn("train", f"--max-len {opts.max_len} is above the target's max_position_embeddings "
                      f"{dcfg.max_position_embeddings}", log=log)
    return dcfg


def _resumed_model(opts: Options, dist: Dist, dcfg: DrafterConfig, existing: Path, state: dict,
                   log: Callable[[str], None]) -> Model:
    drafter = load_drafter(existing)
    if drafter.config != dcfg:
        raise BadInput(f"{existing}/config.json does not describe a drafter of {opts.target} with "
                       f"--draft-vocab {opts.draft_vocab}; resume with the same target, or pass --overwrite")
    vocab, note = draft_vocab.resumed(drafter, state)
    return _model(opts, dist, drafter, vocab, note, fresh=False, log=log)


def _model(opts: Options, dist: Dist, drafter: Eagle3Drafter, vocab: DraftVocab, note: dict | None, fresh: bool,
           log: Callable[[str], None]) -> Model:
    """The drafter with the target's embeddings (and, fresh, its head's rows of the draft
    vocabulary), on the device, with the kernels of its step and the target's head."""
    head_weight = read_lm_head(opts.target)
    drafter.load_embeddings(read_embeddings(opts.target))
    if fresh and opts.init_head == "target":
        with torch.no_grad():
            drafter.lm_head.weight.copy_(head_weight[vocab.ids].float())
    device = dist.device
    amp_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    drafter.to(device)
    kernels, merge = training_kernels(drafter, opts.compile_loss if opts.compile_loss is not None
                                      else device.type == "cuda", amp_dtype, log)
    head = TargetHead(head_weight, vocab.ids, vocab.t2d, device, amp_dtype, kernels)
    return Model(drafter=drafter, vocab=vocab, vocab_note=note, head=head, kernels=kernels, merge=merge)


def _optimiser(opts: Options, dist: Dist, model: Model, stop: threading.Event, total: int) -> Optimiser:
    raw_objective = TTTObjective(model.drafter, opts.ttt_length, model.kernels, model.merge)
    if dist.world_size == 1:
        raw_objective.should_stop = stop.is_set  # a stop lands between TTT steps, not only between steps
    params = [p for p in model.drafter.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=opts.lr, betas=(0.9, 0.95), weight_decay=opts.weight_decay,
                            fused=True)  # fused: it skips a step flagged not finite on the device (step.py)
    warmup = max(1, round(opts.warmup_ratio * total)) if opts.warmup_ratio > 0 else 0
    schedule_fn = lr_lambda(total, warmup, opts.min_lr_ratio)
    return Optimiser(objective=dist.wrap(raw_objective), params=params, opt=opt,
                     sched=torch.optim.lr_scheduler.LambdaLR(opt, schedule_fn), schedule_fn=schedule_fn,
                     warmup=warmup, guard=FiniteGuard(dist.device))

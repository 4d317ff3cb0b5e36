"""What a run leaves behind: checkpoints (agreed on by every rank first) and summary.json (its
record: pipeline/records/train_summary.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from pipeline.records.train_summary import DraftVocab, StepFigures, TrainSummary, Validation, write_summary
from pipeline.train import checkpoint
from pipeline.train.errors import TrainError
from pipeline.train.resume import SUMMARY
from pipeline.train.step import NotFinite, last_good

if TYPE_CHECKING:
    from pipeline.train.setup import Run


def _snapshot(run: Run, step: int, tokens: int) -> dict:
    return {"step": step, "epoch_position": list(run.schedule[step]) if step < run.total else None,
            "optimizer": run.opt.state_dict(), "scheduler": run.sched.state_dict(), "rng": checkpoint.rng_state(),
            "identity": run.identity, "world_size": run.dist.world_size, "history": run.history,
            "val_history": run.val_history, "tokens": tokens, "vocab_note": run.vocab_note}


def save(run: Run, step: int, pending_tokens: torch.Tensor) -> Path | None:
    dist = run.dist
    if dist.world_size > 1:
        agree = dist.ranks_agree(torch.stack([p.detach().double().sum() for p in run.params]).sum())
        if not agree:
            raise TrainError(f"step {step}: the ranks' weights differ; not checkpointing a diverged model")
        run.log(f"train: step {step}: all {dist.world_size} ranks agree on the weights")
    if not all(bool(torch.isfinite(p.detach()).all()) for p in run.params):
        # The same stop as a non-finite loss (exit 3): the run diverged, the checkpoints kept are good.
        text = (f"step {step}/{run.total}: the drafter's weights are not finite after the optimiser's step; "
                "not checkpointing them; lower --lr or raise --warmup-ratio, or resume from an earlier checkpoint; "
                + last_good(run))
        run.events.message(text, level="error")
        raise NotFinite(text)
    tokens = run.tokens_total + int(dist.all_reduce_sum(pending_tokens.detach().clone()).item())
    path = None
    if dist.rank == 0:
        path = checkpoint.save(run.out, run.drafter, _snapshot(run, step, tokens), keep_last=run.opts.keep_last)
        nbytes = sum(p.stat().st_size for p in path.iterdir())
        run.events.artifact(str(path), bytes=nbytes, step=step)
    dist.barrier()
    return path


def _figures(history: list[dict]) -> tuple[StepFigures, ...]:
    return tuple(StepFigures(step=h["step"], loss=h["loss"], acc=tuple(h["acc"])) for h in history)


def _draft_vocab(note: dict | None) -> DraftVocab | None:
    if note is None:
        return None
    return DraftVocab(source=note["source"], coverage_chosen_on=note["coverage_chosen_on"],
                      held_out_coverage=note.get("held_out_coverage"),
                      held_out_distinct_tokens=note.get("held_out_distinct_tokens"),
                      held_out_distinct_missing=note.get("held_out_distinct_missing"))


def _validation(run: Run) -> Validation | None:
    val_pos, lengths, last = run.val_pos, run.source.lengths, run.val_history[-1] if run.val_history else None
    if not val_pos:
        return None
    return Validation(samples=len(val_pos), tokens=sum(lengths[p] for p in val_pos),
                      loss=last["loss"] if last else None, acc=tuple(last["acc"]) if last else None,
                      history=_figures(run.val_history))


def summarize(run: Run, step: int, last: dict, stopped: bool, began: float, tokens_at_start: int) -> TrainSummary:
    seconds = time.monotonic() - began
    final = checkpoint.latest_checkpoint(run.out) if run.dist.rank == 0 else None
    summary = TrainSummary(
        steps=step, total_steps=run.total, resumed_from=run.start if run.state is not None else None,
        stopped=stopped, loss=last["loss"], acc=tuple(last["acc"]), tokens=run.tokens_total,
        seconds=round(seconds, 3), tokens_this_session=run.tokens_total - tokens_at_start,
        tokens_per_s=(run.tokens_total - tokens_at_start) / seconds if seconds > 0 else None,
        checkpoint=str(final) if final else None, draft_vocab_size=run.vocab.size,
        draft_vocab_coverage=(run.vocab_note or {}).get("held_out_coverage"),
        draft_vocab=_draft_vocab(run.vocab_note), val=_validation(run), world_size=run.dist.world_size,
        device=str(run.device), history=_figures(run.history), source=run.source.kind,
        peak_gpu_bytes=torch.cuda.max_memory_allocated(run.device) if run.cuda else None,
    )
    if run.dist.rank == 0:
        write_summary(run.out / SUMMARY, summary)
    return summary

"""A run's record, summary.json (pipeline/records/train_summary.py): written at its end, at a
stop, and again from the checkpoint when a resume finds the run finished but its summary lost."""

from __future__ import annotations

import time

import torch

from pipeline.records.codec import RecordError, UnknownVersion
from pipeline.records.train_summary import (
    DraftVocab,
    StepFigures,
    TrainSummary,
    Validation,
    read_summary,
    write_summary,
)
from pipeline.train import checkpoint
from pipeline.train.run import Run

SUMMARY = "summary.json"


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
    val_pos, lengths, val_history = run.val_pos, run.source.lengths, run.progress.val_history
    last = val_history[-1] if val_history else None
    if not val_pos:
        return None
    return Validation(samples=len(val_pos), tokens=sum(lengths[p] for p in val_pos),
                      loss=last["loss"] if last else None, acc=tuple(last["acc"]) if last else None,
                      history=_figures(val_history))


def summarize(run: Run, step: int, last: dict, stopped: bool, began: float, tokens_at_start: int) -> TrainSummary:
    seconds = time.monotonic() - began
    final = checkpoint.latest_checkpoint(run.out) if run.dist.rank == 0 else None
    progress, note = run.progress, run.model.vocab_note
    summary = TrainSummary(
        steps=step, total_steps=run.total, resumed_from=progress.start if run.state is not None else None,
        stopped=stopped, loss=last["loss"], acc=tuple(last["acc"]), tokens=progress.tokens_total,
        seconds=round(seconds, 3), tokens_this_session=progress.tokens_total - tokens_at_start,
        tokens_per_s=(progress.tokens_total - tokens_at_start) / seconds if seconds > 0 else None,
        checkpoint=str(final) if final else None, draft_vocab_size=run.model.vocab.size,
        draft_vocab_coverage=(note or {}).get("held_out_coverage"),
        draft_vocab=_draft_vocab(note), val=_validation(run), world_size=run.dist.world_size,
        device=str(run.device), history=_figures(progress.history), source=run.source.kind,
        peak_gpu_bytes=torch.cuda.max_memory_allocated(run.device) if run.cuda else None,
    )
    if run.dist.rank == 0:
        write_summary(run.out / SUMMARY, summary)
    return summary


def finished(run: Run) -> TrainSummary:
    """The summary of a run resumed at its last step: the one it wrote, else (a kill left it
    unwritten, or damaged) written again from the checkpoint."""
    try:
        return read_summary(run.out / SUMMARY)
    except UnknownVersion:
        raise
    except RecordError as e:
        run.log(f"train: {e}: writing it again from the checkpoint")
        nothing = {"loss": float("nan"), "acc": [float("nan")] * run.opts.ttt_length}
        last = run.progress.history[-1] if run.progress.history else nothing
        return summarize(run, run.progress.start, last, False, time.monotonic(), run.progress.tokens_total)

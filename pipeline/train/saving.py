"""What a run leaves behind: checkpoints (agreed on by every rank first) and summary.json."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..atomic_io import write_json_atomic
from . import checkpoint
from .errors import TrainError
from .resume import SUMMARY
from .step import NotFinite, last_good

if TYPE_CHECKING:
    from .setup import Run


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


def summarize(run: Run, step: int, last: dict, stopped: bool, began: float, tokens_at_start: int) -> dict:
    seconds = time.monotonic() - began
    final = checkpoint.latest_checkpoint(run.out) if run.dist.rank == 0 else None
    val_pos, lengths = run.val_pos, run.source.lengths
    summary = {
        "steps": step, "total_steps": run.total, "resumed_from": run.start if run.state is not None else None,
        "stopped": stopped, "loss": last["loss"], "acc": last["acc"], "tokens": run.tokens_total,
        "seconds": round(seconds, 3), "tokens_this_session": run.tokens_total - tokens_at_start,
        "tokens_per_s": (run.tokens_total - tokens_at_start) / seconds if seconds > 0 else None,
        "checkpoint": str(final) if final else None, "draft_vocab_size": run.vocab.size,
        "draft_vocab_coverage": (run.vocab_note or {}).get("held_out_coverage"),
        "draft_vocab": run.vocab_note,
        "val": ({"samples": len(val_pos), "tokens": sum(lengths[p] for p in val_pos),
                 "loss": run.val_history[-1]["loss"] if run.val_history else None,
                 "acc": run.val_history[-1]["acc"] if run.val_history else None, "history": run.val_history}
                if val_pos else None),
        "world_size": run.dist.world_size, "device": str(run.device), "history": run.history,
        "source": run.source.kind,
        "peak_gpu_bytes": torch.cuda.max_memory_allocated(run.device) if run.cuda else None,
    }
    if run.dist.rank == 0:
        write_json_atomic(run.out / SUMMARY, summary)
    return summary

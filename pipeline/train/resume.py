"""What a checkpoint must agree with to be resumed, and how its state is put back.

The run's identity (source, batch plan, TTT length, held-out slice) is saved in every
checkpoint; a resume that differs in any of them would train other batches than the
interrupted run, so it is refused with the flag to change. A resume with another
--steps/--epochs extends (or shortens) the run: the learning rate follows the new total's
schedule from the resumed step.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from . import checkpoint
from .errors import BadInput

if TYPE_CHECKING:
    from .data import BatchPlan
    from .options import Options
    from .setup import Run

SUMMARY = "summary.json"


def identity_of(opts: Options, plan: BatchPlan, source_identity: dict, val: list[int], total: int) -> dict:
    return {"store": source_identity, "plan": asdict(plan), "ttt_length": opts.ttt_length,
            "epochs": opts.epochs, "steps": opts.steps, "total_steps": total,
            "val_samples": len(val), "val_digest": _digest(val)}


def _digest(positions: list[int]) -> str:
    return hashlib.sha256(",".join(map(str, positions)).encode()).hexdigest()[:16]


def check_resume(saved: dict, now: dict, folder: Path) -> None:
    for section in ("store", "plan"):
        keys = set(now[section]) | ({"source"} if section == "store" else set())
        for key in sorted(keys):
            value = now[section].get(key)
            if saved[section].get(key) != value:
                raise BadInput(f"{folder}: was trained with {section} {key}={saved[section].get(key)!r}, this run has "
                               f"{value!r}; resume with the same {'data' if section == 'store' else 'batch'} "
                               "settings (--store or --data, and the batch flags), or pass --overwrite")
    if saved.get("ttt_length") != now["ttt_length"]:
        raise BadInput(f"{folder}: was trained with ttt_length={saved.get('ttt_length')!r}, this run has "
                       f"{now['ttt_length']!r}; resume with the same --ttt-length, or pass --overwrite")
    if saved.get("val_samples", 0) != now["val_samples"] or saved.get("val_digest", now["val_digest"]) != now["val_digest"]:
        raise BadInput(f"{folder}: was trained holding out {saved.get('val_samples', 0)} validation samples, this run "
                       f"holds out {now['val_samples']}{' others' if saved.get('val_samples') == now['val_samples'] else ''}"
                       "; resume with the same --val-share/--val-samples and --seed (--val-samples "
                       f"{saved.get('val_samples', 0)}), or pass --overwrite")


def restore(run: Run) -> dict | None:
    """Put the checkpoint's optimiser, schedule, RNG and counters back; returns the run's last
    summary instead when the checkpoint is already its last step (nothing left to train)."""
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
            return json.loads((run.out / SUMMARY).read_text())
        except (OSError, ValueError):
            n = run.opts.ttt_length
            return {"steps": start, "total_steps": total, "checkpoint": str(run.existing), "loss": float("nan"),
                    "acc": [float("nan")] * n, "history": run.history, "tokens": run.tokens_total}
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

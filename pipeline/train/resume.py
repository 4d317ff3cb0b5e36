"""What a checkpoint must agree with to be resumed (setup.restore puts its state back).

The run's identity (source, batch plan, TTT length, held-out slice) is saved in every
checkpoint; a resume that differs in any of them would train other batches than the
interrupted run, so it is refused with the flag to change. A resume with another
--steps/--epochs extends (or shortens) the run: the learning rate follows the new total's
schedule from the resumed step.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.train.errors import BadInput

if TYPE_CHECKING:
    from pipeline.train.data import BatchPlan
    from pipeline.train.options import Options

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

"""Training checkpoints: complete or absent, never half written, and enough to continue exactly.

    <run>/checkpoints/step_00001200/
        config.json          the drafter's SGLang config (pipeline.drafter.DrafterConfig.to_sglang())
        model.safetensors    the drafter's weights under SGLang's names (pipeline.drafter.EXPORT_KEYS)
        train_state.pt       optimiser, scheduler, step, data position, RNG states, run identity
    <run>/checkpoints/latest a file holding the name of the newest complete checkpoint

A checkpoint is written into a hidden temp folder, every file fsynced, then renamed into
place (and the parent fsynced); only then is `latest` replaced (temp + fsync + rename). A
kill at any moment leaves `latest` naming a complete checkpoint. `--keep-last K` deletes
older ones after the new one is in place. Export reads `latest_checkpoint(run)` and the two
model files with `pipeline.drafter.load_drafter(folder)`.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import torch

from ..atomicfile import fsync_dir, write_bytes_atomic
from ..drafter.model import CONFIG_FILE, WEIGHTS_FILE, Eagle3Drafter, save_drafter
from .errors import BadInput

DIR = "checkpoints"
LATEST = "latest"
STATE_FILE = "train_state.pt"
PREFIX = "step_"


def step_name(step: int) -> str:
    return f"{PREFIX}{step:08d}"


def rng_state() -> dict:
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_tree(folder: Path) -> None:
    for p in folder.iterdir():
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fsync_dir(folder)


def save(run: Path, drafter: Eagle3Drafter, state: dict, keep_last: int | None = None) -> Path:
    """Write checkpoint `state["step"]` atomically, point `latest` at it, prune old ones."""
    root = Path(run) / DIR
    root.mkdir(parents=True, exist_ok=True)
    name = step_name(int(state["step"]))
    final = root / name
    tmp = root / f".{name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    save_drafter(drafter, tmp)
    torch.save(state, tmp / STATE_FILE)
    _fsync_tree(tmp)
    if final.exists():  # the same step saved again (a resume that stopped at once)
        shutil.rmtree(final)
    os.replace(tmp, final)
    fsync_dir(root)
    write_bytes_atomic(root / LATEST, (name + "\n").encode())
    if keep_last:
        older = sorted(p for p in root.glob(f"{PREFIX}*") if p.is_dir() and p.name != name)
        for old in older[:max(0, len(older) - (keep_last - 1))]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(run: Path) -> Path | None:
    """The newest complete checkpoint of a run, or None when there is none."""
    root = Path(run) / DIR
    try:
        name = (root / LATEST).read_text().strip()
    except FileNotFoundError:
        return None
    folder = root / name
    if not name.startswith(PREFIX) or "/" in name or not all((folder / f).exists()
                                                              for f in (CONFIG_FILE, WEIGHTS_FILE, STATE_FILE)):
        raise BadInput(f"{root / LATEST}: names {name!r}, which is not a complete checkpoint; "
                       "point it at an existing step_* folder or start a new --out")
    return folder


def load_state(folder: Path) -> dict:
    try:
        return torch.load(Path(folder) / STATE_FILE, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - a corrupt file is an operator-facing refusal
        raise BadInput(f"{Path(folder) / STATE_FILE}: cannot be read ({type(e).__name__}: {e})") from None

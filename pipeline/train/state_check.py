"""What a checkpoint's train_state.pt must hold before a resume trusts it.

The state comes from the disk: a folder renamed by hand, a state copied from another run, a
file edited or crafted. Each part a resume uses is checked against the checkpoint's own
folder before anything is built from it: the step (a whole number, the one the folder is
named for), the weights (a whole safetensors file of the shapes config.json gives), the
optimiser (one slot per trainable parameter, each tensor of that parameter's shape) and the
random states (each part checked where the state has it). A mismatch is BadInput (exit 2) naming the file and the key, where it would
otherwise be a traceback type at the first step or a `latest` moved back to step 0."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import torch

from pipeline.bounded_read import open_regular, read_text
from pipeline.drafter.config import DrafterConfig, DrafterConfigError
from pipeline.drafter.model import CONFIG_FILE, WEIGHTS_FILE, Eagle3Drafter
from pipeline.train.errors import BadInput

PARTS = ("optimizer", "scheduler", "rng", "identity")
ADVICE = "resume from another checkpoint (point checkpoints/latest at it) or pass --overwrite"


def check_state(folder: Path, state: object, state_file: str) -> None:
    path = folder / state_file
    if not isinstance(state, dict):
        raise BadInput(f"{path}: holds a {type(state).__name__}, not a training state; {ADVICE}")
    step = state.get("step")
    if type(step) is not int or step < 0 or folder.name != f"step_{step:08d}":
        raise BadInput(f"{path}: step is {step!r}, but the checkpoint's folder is {folder.name}; {ADVICE}")
    for key in PARTS:
        if key in state and not isinstance(state[key], dict):
            raise BadInput(f"{path}: '{key}' is not a mapping; {ADVICE}")
    shapes = trainable_shapes(folder)
    if "optimizer" in state:
        _check_optimizer(path, state["optimizer"], shapes)
    if "rng" in state:
        _check_rng(path, state["rng"])


def trainable_shapes(folder: Path) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of the drafter's trainable parameters in the optimiser's order, after
    checking that the weights file is whole and holds every tensor in the config's shape."""
    cfg_path = folder / CONFIG_FILE
    try:
        cfg = DrafterConfig.from_sglang(json.loads(read_text(cfg_path, 1 << 20)), where=str(cfg_path))
    except DrafterConfigError as e:
        raise BadInput(f"{e}; {ADVICE}") from None
    except (OSError, ValueError) as e:
        raise BadInput(f"{cfg_path}: cannot be read ({e}); {ADVICE}") from None
    with torch.device("meta"):
        model = Eagle3Drafter(cfg)
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    have = _weight_shapes(folder / WEIGHTS_FILE)
    for key, shape in want.items():
        if have.get(key) != shape:
            got = "missing" if key not in have else f"of shape {list(have[key])}"
            raise BadInput(f"{folder / WEIGHTS_FILE}: {key} is {got}; {cfg_path} makes it {list(shape)}; {ADVICE}")
    return [(n, tuple(p.shape)) for n, p in model.named_parameters() if p.requires_grad]


def _weight_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    from safetensors import SafetensorError, safe_open

    try:
        os.close(open_regular(path))  # a FIFO or device is refused before safetensors maps it
        with safe_open(str(path), framework="pt", device="cpu") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 (safe_open is not iterable)
    except (SafetensorError, OSError, ValueError) as e:
        raise BadInput(f"{path}: not a whole safetensors file ({e}); {ADVICE}") from None


def _check_optimizer(path: Path, opt: dict, params: list[tuple[str, tuple[int, ...]]]) -> None:
    groups, slots = opt.get("param_groups"), opt.get("state")
    if not isinstance(groups, list) or not isinstance(slots, dict) \
            or not all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups):
        raise BadInput(f"{path}: 'optimizer' lacks its 'state' and 'param_groups'; {ADVICE}")
    ids = [i for g in groups for i in g["params"]]
    if ids != list(range(len(params))):
        raise BadInput(f"{path}: the optimizer covers {len(ids)} parameters, the drafter has {len(params)}; {ADVICE}")
    for i, slot in slots.items():
        if type(i) is not int or not 0 <= i < len(params) or not isinstance(slot, dict):
            raise BadInput(f"{path}: optimizer state {i!r} names no parameter of the drafter; {ADVICE}")
        name, shape = params[i]
        for key, value in slot.items():
            if not isinstance(value, torch.Tensor):
                raise BadInput(f"{path}: optimizer {key} of {name} is not a tensor; {ADVICE}")
            if key == "step" and value.numel() == 1:
                continue
            if tuple(value.shape) != shape:
                raise BadInput(f"{path}: optimizer {key} of {name} has shape {list(value.shape)}, the parameter "
                               f"{list(shape)}; {ADVICE}")


def _check_rng(path: Path, rng: dict) -> None:
    try:
        random.Random().setstate(rng["python"])
        torch.Generator().set_state(rng["torch"])
    except Exception as e:  # noqa: BLE001 - whatever a bad state raises, the answer is the same
        raise BadInput(f"{path}: 'rng' does not hold usable random states ({type(e).__name__}: {e}); {ADVICE}") from None

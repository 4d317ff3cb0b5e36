"""The trained checkpoint export reads: the folder a training run's `latest` pointer names,
its drafter config and weights under SGLang's names, each tensor checked against the shape the
config implies, and the target fingerprint its training store recorded."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.drafter.config import EXPORT_KEYS, DrafterConfig
from pipeline.export.folder import CONFIG_FILE, WEIGHTS_FILE
from pipeline.jsonfile import read_object
from pipeline.program_edge import BadInput
from pipeline.torch_state import load_state_file

if TYPE_CHECKING:  # it loads torch, which export loads only once it gets to work
    import torch

LATEST = "latest"
CHECKPOINTS = "checkpoints"
STATE_FILE = "train_state.pt"


def resolve_checkpoint(path: Path) -> Path:
    """A checkpoint folder: `path` itself, or what the `latest` pointer of a training run
    (`path/checkpoints/latest`) or of its checkpoints folder (`path/latest`) names."""
    path = Path(path)
    if not path.is_dir():
        raise BadInput(f"--checkpoint {path} is not a folder; pass a training output folder or a checkpoint folder")
    for pointer in (path / CHECKPOINTS / LATEST, path / LATEST):
        if not pointer.is_file():
            continue
        name = pointer.read_text().strip()
        if not name or "/" in name or "\n" in name or len(name) > 255:
            raise BadInput(f"{pointer}: expected one checkpoint folder name, got {name[:80]!r}")
        if not (pointer.parent / name).is_dir():
            raise BadInput(f"{pointer} names {name!r}, which is not a folder; was the checkpoint deleted?")
        return pointer.parent / name
    if not (path / WEIGHTS_FILE).exists():
        raise BadInput(f"--checkpoint {path} has no {CHECKPOINTS}/{LATEST} pointer and no {WEIGHTS_FILE}; "
                       "has training written a checkpoint yet?")
    return path


def _normalize(name: str) -> str:
    for prefix in ("module.", "_orig_mod.", "draft_model.", "model."):
        while name.startswith(prefix):
            name = name[len(prefix):]
    return name


def load_checkpoint(ckpt: Path) -> tuple[DrafterConfig, dict[str, torch.Tensor]]:
    """(DrafterConfig, {name: tensor}) from a checkpoint folder written by pipeline.train."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    cfg_path = ckpt / CONFIG_FILE
    raw = read_object(cfg_path, f"{cfg_path}: missing; the checkpoint folder must hold the drafter's config")
    cfg = DrafterConfig.from_sglang(raw, where=str(cfg_path))
    weights = ckpt / WEIGHTS_FILE
    if not weights.exists():
        raise BadInput(f"{weights}: missing; the checkpoint folder must hold the drafter's weights")
    try:
        raw = load_file(str(weights), device="cpu")
    except (SafetensorError, OSError, ValueError) as e:
        raise BadInput(f"{weights}: not a readable safetensors file ({e})") from None
    return cfg, {_normalize(k): v for k, v in raw.items()}


def check_tensors(cfg: DrafterConfig, state: dict, where: str) -> dict:
    """Exactly the required tensors, each of the shape the config implies, finite."""
    import torch

    from pipeline.drafter.model import Eagle3Drafter

    missing = [k for k in EXPORT_KEYS if k not in state]
    if missing:
        hint = (" (SGLang would keep a randomly initialised lm_head and accept no drafts)"
                if "lm_head.weight" in missing else "")
        raise BadInput(f"{where}: lacks {', '.join(missing)}{hint}; refusing to export an incomplete drafter")
    expected = Eagle3Drafter(cfg).state_dict()
    out = {}
    for key in EXPORT_KEYS:
        t, want = state[key], expected[key]
        if tuple(t.shape) != tuple(want.shape):
            raise BadInput(f"{where}: {key} has shape {tuple(t.shape)}, the config implies {tuple(want.shape)}")
        if key == "d2t" and t.dtype != torch.int64:
            raise BadInput(f"{where}: d2t must be int64 offsets, got {t.dtype}")
        if key == "t2d" and t.dtype != torch.bool:
            raise BadInput(f"{where}: t2d must be bool, got {t.dtype}")
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise BadInput(f"{where}: {key} holds NaN or Inf; export an earlier checkpoint")
        out[key] = t.detach().cpu().contiguous()
    ids = torch.arange(cfg.draft_vocab_size) + out["d2t"]
    if int(ids.min()) < 0 or int(ids.max()) >= cfg.vocab_size or not bool(out["t2d"][ids].all()) \
            or int(out["t2d"].sum()) != cfg.draft_vocab_size:
        raise BadInput(f"{where}: d2t and t2d disagree (draft id i must map to a target id i + d2t[i] that t2d marks)")
    return out


def trained_target_fingerprint(ckpt: Path) -> str | None:
    """The target weight fingerprint of the store the checkpoint was trained on (train_state.pt's
    identity), or None for a checkpoint that does not record one."""
    path = Path(ckpt) / STATE_FILE
    if not path.is_file():
        return None
    state = load_state_file(path, "export another checkpoint", mmap=True)
    ident = state.get("identity") if isinstance(state, dict) else None
    store = ident.get("store") if isinstance(ident, dict) else None
    fp = store.get("target_fingerprint") if isinstance(store, dict) else None
    return fp if isinstance(fp, str) and fp else None

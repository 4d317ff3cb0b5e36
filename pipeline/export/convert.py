"""The conversion itself: a checked checkpoint written as the folder SGLang serves, its config
in SGLang's spelling with the target's positions and rope, its weights in the target's dtype,
built beside --out, read back by verify.py and exchanged into place."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline import output_guard
from pipeline.atomic_io import write_json_atomic
from pipeline.drafter.config import DrafterConfig
from pipeline.events import EventWriter, warn
from pipeline.export.checkpoint import (
    STATE_FILE,
    check_tensors,
    load_checkpoint,
    resolve_checkpoint,
    trained_target_fingerprint,
)
from pipeline.export.folder import (
    ARCHITECTURE,
    CONFIG_FILE,
    MANIFEST_FILE,
    ROPE_KEYS,
    SAFETENSORS_DTYPES,
    WEIGHTS_FILE,
    WRITER,
    file_entry,
    fingerprint_or_none,
    safetensors_layout,
    target_text_config,
)
from pipeline.export.verify import verify_folder
from pipeline.program_edge import BadInput, StageError
from pipeline.target.config import read_config, sglang_layer_ids, text_config
from pipeline.target.weights import FingerprintError, weight_files

FLOAT_DTYPES = ("bfloat16", "float16", "float32")
DEFAULT_MODE = 0o644


class ExportError(StageError):
    """A failure of the export; str() is the one line an operator reads. Refusals are the
    edge's BadInput (exit 2)."""


def sglang_config(cfg: DrafterConfig, target_cfg: dict) -> dict:
    """SGLang's config.json: the drafter's shape, the target's positions and rope as spelled."""
    d = {k: v for k, v in cfg.to_sglang().items() if k not in ROPE_KEYS}
    for key in ROPE_KEYS:
        if target_cfg.get(key) is not None:
            d[key] = target_cfg[key]
    if not any(k in d for k in ROPE_KEYS):
        d["rope_theta"] = 10000.0  # what transformers and SGLang assume for a config without rope keys
    if target_cfg.get("max_position_embeddings") is not None:
        d["max_position_embeddings"] = target_cfg["max_position_embeddings"]
    layers = target_cfg.get("num_hidden_layers")
    if not isinstance(layers, int):
        raise BadInput(f"target config.json: key 'num_hidden_layers' must be an integer, got {layers!r}")
    d["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": sglang_layer_ids(layers), "use_aux_hidden_state": True}
    return d


def check_target(cfg: DrafterConfig, target_cfg: dict, where: str) -> None:
    for ours, theirs in (("vocab_size", cfg.vocab_size), ("hidden_size", cfg.input_hidden_size)):
        if target_cfg.get(ours) != theirs:
            raise BadInput(f"{where} was trained for a target with {ours} {theirs}, but --target has "
                           f"{target_cfg.get(ours)!r}; export with the target the store was extracted from")


def check_target_identity(ckpt: Path, target: Path, warn: Callable[[str], None]) -> str | None:
    """The target's weight fingerprint, refused when the checkpoint was trained on another's."""
    want = trained_target_fingerprint(ckpt)
    have, why = fingerprint_or_none(target)
    if want is not None and have is None:
        raise BadInput(f"{ckpt / STATE_FILE} was trained on the weights {want}, and --target {target} has none to "
                       f"compare ({why}); pass the target model folder the store was extracted from")
    if want is not None and want != have:
        raise BadInput(f"{ckpt / STATE_FILE} was trained on hidden states of the target weights {want}, but "
                       f"--target {target} holds {have} (another model, depth or revision); export with the target "
                       "the store was extracted from")
    if want is None:
        warn(f"{ckpt} records no target fingerprint; export cannot check that --target is the model it was "
             "trained for")
    return have


def target_dtype(target: Path) -> str | None:
    """The target's floating dtype: its config's torch_dtype (transformers 5: dtype), else the
    first floating tensor of its first safetensors file; None when neither says."""
    cfg = read_config(target, "--target")
    for c in (text_config(cfg), cfg):
        for key in ("torch_dtype", "dtype"):
            if c.get(key) in FLOAT_DTYPES:
                return c[key]
    try:
        files = [f for f in weight_files(target) if f.suffix == ".safetensors"][:1]
    except FingerprintError:
        return None
    for f in files:
        header, _, _ = safetensors_layout(f)
        for entry in header.values():
            name = SAFETENSORS_DTYPES.get(str(entry.get("dtype"))) if isinstance(entry, dict) else None
            if name in FLOAT_DTYPES:
                return name
    return None


def write_folder(out: Path, config: dict, tensors: dict, dtype: str | None, mode: int = DEFAULT_MODE,
                 target: Path | None = None, identity: dict | None = None) -> int:
    """Built in a temporary folder (every file fsynced, checksummed, read back by verify_folder)
    and exchanged into place; returns the bytes written."""
    import torch
    from safetensors.torch import save_file

    out = Path(out)
    if dtype is not None:
        want = getattr(torch, dtype)
        tensors = {k: (v.to(want) if v.is_floating_point() else v) for k, v in tensors.items()}
        config = {**config, "torch_dtype": dtype}
    else:
        floats = {str(v.dtype).removeprefix("torch.") for v in tensors.values() if v.is_floating_point()}
        if len(floats) == 1:
            config = {**config, "torch_dtype": floats.pop()}
    need = sum(t.numel() * t.element_size() for t in tensors.values()) + (1 << 16)
    with output_guard.staged_folder(out, WRITER, "exporting the drafter", need) as tmp:
        save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        fd = os.open(tmp / WEIGHTS_FILE, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        write_json_atomic(tmp / CONFIG_FILE, config)
        files = {name: file_entry(tmp / name) for name in (WEIGHTS_FILE, CONFIG_FILE)}
        write_json_atomic(tmp / MANIFEST_FILE, {"format": 1, "writer": WRITER, "files": files,
                                                "dtype": config.get("torch_dtype"), **(identity or {})})
        for f in tmp.iterdir():
            os.chmod(f, mode)
        os.chmod(tmp, mode | ((mode & 0o444) >> 2))  # a folder readable where its files are
        problems = verify_folder(tmp, target)
        if problems:  # what was just written must read back complete, before it replaces anything
            raise ExportError(problems[0])
        size = sum(f.stat().st_size for f in tmp.iterdir())
    return size


def adopt_legacy(out: Path) -> None:
    """A drafter folder an earlier export wrote (exactly config.json naming the EAGLE-3
    architecture and model.safetensors, no marker) is still export's: mark it as such."""
    try:
        if out.is_symlink() or not out.is_dir() or output_guard.writer_of(out) is not None:
            return
        if sorted(p.name for p in out.iterdir()) != [CONFIG_FILE, WEIGHTS_FILE]:
            return
        if json.loads((out / CONFIG_FILE).read_text()).get("architectures") == [ARCHITECTURE]:
            output_guard.mark(out, WRITER)
    except (OSError, ValueError, AttributeError):
        return


@dataclass(frozen=True)
class Exported:
    """What an export wrote, for its last line."""

    checkpoint: Path
    out: Path
    bytes: int
    keys: int
    draft_vocab_size: int
    dtype: str
    aux_layer_ids: list[int]

    def line(self) -> str:
        return (f"export: {self.checkpoint} -> {self.out}: {self.keys} weights, {self.bytes} bytes, {self.dtype}, "
                f"draft vocab {self.draft_vocab_size}, aux layer ids {self.aux_layer_ids}")


def export(checkpoint: Path, target: Path, out: Path, dtype: str | None, events: EventWriter,
           mode: int = DEFAULT_MODE) -> Exported:
    out = Path(out)
    output_guard.refuse_overlap(out, [checkpoint, target])
    adopt_legacy(out)
    output_guard.refuse_foreign(out, WRITER)
    ckpt = resolve_checkpoint(checkpoint)
    output_guard.refuse_overlap(out, [ckpt])

    def warning(text: str) -> None:
        warn("export", text, events)

    cfg, state = load_checkpoint(ckpt)
    tcfg = target_text_config(target)
    check_target(cfg, tcfg, str(ckpt))
    fingerprint = check_target_identity(ckpt, target, warning)
    tensors = check_tensors(cfg, state, str(ckpt / WEIGHTS_FILE))
    config = sglang_config(cfg, tcfg)
    if dtype == "target":
        dtype = target_dtype(target)
        if dtype is None:
            warning(f"--target {target} names no dtype (config.json torch_dtype) and has no safetensors weights; "
                 "keeping the checkpoint's dtype (pass --dtype bf16|fp16|fp32 to choose)")
    size = write_folder(out, config, tensors, dtype, mode, target,
                        {"target_fingerprint": fingerprint, "checkpoint": str(ckpt)})
    events.artifact(str(out), bytes=size)
    return Exported(checkpoint=ckpt, out=out, bytes=size, keys=len(tensors), draft_vocab_size=cfg.draft_vocab_size,
                    dtype=dtype or "as trained",
                    aux_layer_ids=config["eagle_config"]["eagle_aux_hidden_state_layer_ids"])

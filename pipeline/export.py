"""`python -m pipeline.export`: a trained drafter checkpoint as a folder SGLang serves.

    python -m pipeline.export --checkpoint TRAIN_OUT|CKPT --target TARGET --out DRAFTER [--dtype keep]
    python -m pipeline.export --verify DRAFTER [--target TARGET]

Writes DRAFTER/config.json and DRAFTER/model.safetensors as DESIGN.md "Drafter checkpoint"
fixes them: SGLang's `LlamaForCausalLMEagle3` config with one layer, the target's
`max_position_embeddings` and rope keys copied as the target spells them, and
`eagle_config.eagle_aux_hidden_state_layer_ids = [1, L//2-1, L-4]` (SGLang adds 1: the
inputs of layers 2, L//2, L-3, where extraction captured). The weights carry exactly the
names SGLang's loader maps (pipeline.drafter.EXPORT_KEYS; a test checks them against
llama_eagle3.py of the sglang wheel). SGLang silently keeps a random tensor for a name it
does not find (a missing `lm_head.weight` serves at acceptance 1.00), so a checkpoint that
lacks any of them, or holds one of the wrong shape, is refused before anything is written.
The folder is written under a temporary name and renamed into place.

--checkpoint takes a training run folder (pipeline.train --out: its checkpoints/latest
pointer names the checkpoint) or one checkpoint folder. --verify reads DRAFTER's safetensors header and config.json
without torch and checks every required key; with --target, that the capture layers and
shapes fit that target.

Exit codes: 0 written (--verify: the folder is complete), 2 bad input (a missing or
misshapen key, a checkpoint for another target, bad arguments), 1 anything else (--verify:
the folder has problems, each printed on one line).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
from pathlib import Path

from pipeline.atomicfile import swap_folder_in
from pipeline.events import EventWriter, fsync_dir
from pipeline.program_edge import run_program

PROG = "python -m pipeline.export"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
LATEST = "latest"
CHECKPOINTS = "checkpoints"
ARCHITECTURE = "LlamaForCausalLMEagle3"
ROPE_KEYS = ("rope_parameters", "rope_scaling", "rope_theta")
# Keys SGLang reads from the draft's config.json (checked against the wheel in tests).
CONFIG_KEYS = ("architectures", "model_type", "num_hidden_layers", "hidden_size", "intermediate_size",
               "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size", "draft_vocab_size",
               "rms_norm_eps", "hidden_act", "tie_word_embeddings", "max_position_embeddings", "eagle_config")
DTYPES = {"keep": None, "bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
MAX_HEADER_BYTES = 100 << 20
MIN_TARGET_LAYERS = 7


class ExportError(Exception):
    """A refusal or failure; str() is the one line an operator reads."""

    exit_code = 1


class BadInput(ExportError):
    exit_code = 2


def required_keys() -> tuple[str, ...]:
    from pipeline.drafter import EXPORT_KEYS

    return tuple(EXPORT_KEYS)


def aux_layer_ids(num_layers: int) -> list[int]:
    """SGLang's ids for the inputs of decoder layers 2, L//2, L-3 (DESIGN.md section 2)."""
    if num_layers < MIN_TARGET_LAYERS:
        raise BadInput(f"target has {num_layers} decoder layers; EAGLE-3 needs at least {MIN_TARGET_LAYERS} "
                       "for three distinct capture layers")
    return [1, num_layers // 2 - 1, num_layers - 4]


def _read_json(path: Path, what: str) -> dict:
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError:
        raise BadInput(f"{path}: missing; {what}") from None
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: unreadable or not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise BadInput(f"{path}: expected a JSON object")
    return obj


def target_text_config(target: Path) -> dict:
    cfg = _read_json(Path(target) / CONFIG_FILE, "--target must be the target's save_pretrained folder")
    inner = cfg.get("text_config")
    return inner if isinstance(inner, dict) else cfg


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


def load_checkpoint(ckpt: Path):
    """(DrafterConfig, {name: tensor}) from a checkpoint folder written by pipeline.train."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from pipeline.drafter import DrafterConfig, DrafterConfigError

    cfg_path = ckpt / CONFIG_FILE
    try:
        cfg = DrafterConfig.from_sglang(_read_json(cfg_path, "the checkpoint folder must hold the drafter's config"),
                                        where=str(cfg_path))
    except DrafterConfigError as e:
        raise BadInput(str(e)) from None
    weights = ckpt / WEIGHTS_FILE
    if not weights.exists():
        raise BadInput(f"{weights}: missing; the checkpoint folder must hold the drafter's weights")
    try:
        raw = load_file(str(weights), device="cpu")
    except (SafetensorError, OSError, ValueError) as e:
        raise BadInput(f"{weights}: not a readable safetensors file ({e})") from None
    return cfg, {_normalize(k): v for k, v in raw.items()}


def check_tensors(cfg, state: dict, where: str) -> dict:
    """Exactly the required tensors, each of the shape the config implies, finite."""
    import torch

    from pipeline.drafter import Eagle3Drafter

    missing = [k for k in required_keys() if k not in state]
    if missing:
        hint = (" (SGLang would keep a randomly initialised lm_head and accept no drafts)"
                if "lm_head.weight" in missing else "")
        raise BadInput(f"{where}: lacks {', '.join(missing)}{hint}; refusing to export an incomplete drafter")
    expected = Eagle3Drafter(cfg).state_dict()
    out = {}
    for key in required_keys():
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


def sglang_config(cfg, target_cfg: dict) -> dict:
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
    d["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": aux_layer_ids(layers), "use_aux_hidden_state": True}
    return d


def check_target(cfg, target_cfg: dict, where: str) -> None:
    for ours, theirs in (("vocab_size", cfg.vocab_size), ("hidden_size", cfg.input_hidden_size)):
        if target_cfg.get(ours) != theirs:
            raise BadInput(f"{where} was trained for a target with {ours} {theirs}, but --target has "
                           f"{target_cfg.get(ours)!r}; export with the target the store was extracted from")


def write_folder(out: Path, config: dict, tensors: dict, dtype: str | None) -> int:
    """Temp folder, fsynced files, rename; returns the bytes written."""
    import torch
    from safetensors.torch import save_file

    from pipeline.atomicfile import write_json_atomic

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    if dtype is not None:
        want = getattr(torch, dtype)
        tensors = {k: (v.to(want) if v.is_floating_point() else v) for k, v in tensors.items()}
        config = {**config, "torch_dtype": dtype}
    else:
        floats = {str(v.dtype).removeprefix("torch.") for v in tensors.values() if v.is_floating_point()}
        if len(floats) == 1:
            config = {**config, "torch_dtype": floats.pop()}
    save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
    fd = os.open(tmp / WEIGHTS_FILE, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    write_json_atomic(tmp / CONFIG_FILE, config)
    size = sum(f.stat().st_size for f in tmp.iterdir())
    swap_folder_in(tmp, out)
    fsync_dir(out.parent)
    return size


def safetensors_header(path: Path) -> dict:
    """The JSON header of a safetensors file (names, dtypes, shapes) without reading tensors."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise BadInput(f"{path}: too short to be a safetensors file")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES:
                raise BadInput(f"{path}: header of {n} bytes is not plausible; the file is damaged")
            header = json.loads(f.read(n))
    except FileNotFoundError:
        raise BadInput(f"{path}: missing") from None
    except ValueError as e:
        raise BadInput(f"{path}: header is not JSON ({e}); the file is damaged") from None
    if not isinstance(header, dict):
        raise BadInput(f"{path}: header is not a JSON object; the file is damaged")
    header.pop("__metadata__", None)
    return header


def verify_folder(folder: Path, target: Path | None = None) -> list[str]:
    """Problems of an exported folder, one line each (empty: SGLang can load it)."""
    folder = Path(folder)
    problems: list[str] = []
    try:
        header = safetensors_header(folder / WEIGHTS_FILE)
        cfg = _read_json(folder / CONFIG_FILE, "not an exported drafter folder")
    except BadInput as e:
        return [str(e)]
    missing = [k for k in required_keys() if k not in header]
    if missing:
        problems.append(f"{folder / WEIGHTS_FILE}: lacks {', '.join(missing)}")
    extra = sorted(set(header) - set(required_keys()))
    if extra:
        problems.append(f"{folder / WEIGHTS_FILE}: names SGLang's loader does not map: {', '.join(extra[:8])}")
    if cfg.get("architectures") != [ARCHITECTURE]:
        problems.append(f"{folder / CONFIG_FILE}: architectures is {cfg.get('architectures')!r}, not [{ARCHITECTURE!r}]")
    if cfg.get("num_hidden_layers") != 1:
        problems.append(f"{folder / CONFIG_FILE}: num_hidden_layers is {cfg.get('num_hidden_layers')!r}, not 1")
    absent = [k for k in CONFIG_KEYS if k not in cfg]
    if absent:
        problems.append(f"{folder / CONFIG_FILE}: lacks {', '.join(absent)}")
    if not any(k in cfg for k in ROPE_KEYS):
        problems.append(f"{folder / CONFIG_FILE}: no rope setting ({', '.join(ROPE_KEYS)})")
    lm = header.get("lm_head.weight", {}).get("shape")
    if lm and lm[0] != cfg.get("draft_vocab_size"):
        problems.append(f"{folder / WEIGHTS_FILE}: lm_head.weight has {lm[0]} rows, draft_vocab_size is "
                        f"{cfg.get('draft_vocab_size')!r}")
    if target is not None:
        try:
            t = target_text_config(target)
            want = aux_layer_ids(int(t.get("num_hidden_layers") or 0))
        except BadInput as e:
            return problems + [str(e)]
        got = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        if got != want:
            problems.append(f"{folder / CONFIG_FILE}: eagle_aux_hidden_state_layer_ids is {got!r}; the target's "
                            f"{t.get('num_hidden_layers')} layers need {want}")
        for key in ("vocab_size", "max_position_embeddings", *ROPE_KEYS):
            if t.get(key) is not None and cfg.get(key) != t.get(key):
                problems.append(f"{folder / CONFIG_FILE}: {key} is {cfg.get(key)!r}, the target's is {t.get(key)!r}")
    return problems


def export(checkpoint: Path, target: Path, out: Path, dtype: str | None, events: EventWriter) -> dict:
    ckpt = resolve_checkpoint(checkpoint)
    cfg, state = load_checkpoint(ckpt)
    tcfg = target_text_config(target)
    check_target(cfg, tcfg, str(ckpt))
    tensors = check_tensors(cfg, state, str(ckpt / WEIGHTS_FILE))
    config = sglang_config(cfg, tcfg)
    size = write_folder(out, config, tensors, dtype)
    problems = verify_folder(out, target)
    if problems:  # what was just written must read back complete
        raise ExportError(problems[0])
    events.artifact(str(out), bytes=size)
    return {"checkpoint": str(ckpt), "out": str(out), "bytes": size, "keys": len(tensors),
            "draft_vocab_size": cfg.draft_vocab_size,
            "eagle_aux_hidden_state_layer_ids": config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Write a trained EAGLE-3 drafter as a folder SGLang loads.")
    p.add_argument("--checkpoint", type=Path, help="training output folder (its 'latest' pointer) or a checkpoint folder")
    p.add_argument("--target", type=Path, help="the target model folder (config.json: rope, positions, layer count)")
    p.add_argument("--out", type=Path, help="drafter folder to write (replaced atomically)")
    p.add_argument("--dtype", default="keep", choices=sorted(DTYPES), help="weights dtype (default keep: as trained)")
    p.add_argument("--verify", type=Path, metavar="DRAFTER", help="check an exported folder and exit")
    return p


def _run(args: argparse.Namespace) -> int:
    if args.verify is not None:
        problems = verify_folder(args.verify, args.target)
        for line in problems:
            print(f"export: {line}", file=sys.stderr)
        if not problems:
            print(f"export: {args.verify} is complete: {len(required_keys())} weights, config for SGLang")
        return 1 if problems else 0
    missing = [f"--{n}" for n in ("checkpoint", "target", "out") if getattr(args, n) is None]
    if missing:
        raise BadInput(f"missing {', '.join(missing)}; see {PROG} --help")
    with EventWriter.from_env() as events:
        info = export(args.checkpoint, args.target, args.out, DTYPES[args.dtype], events)
    print(f"export: {info['checkpoint']} -> {info['out']}: {info['keys']} weights, {info['bytes']} bytes, "
          f"draft vocab {info['draft_vocab_size']}, aux layer ids {info['eagle_aux_hidden_state_layer_ids']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_program("export", lambda: _run(args), ExportError)

if __name__ == "__main__":
    sys.exit(main())

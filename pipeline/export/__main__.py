"""`python -m pipeline.export`: a trained drafter checkpoint as a folder SGLang serves.

    python -m pipeline.export --checkpoint TRAIN_OUT|CKPT --target TARGET --out DRAFTER [--dtype target]
    python -m pipeline.export --verify DRAFTER [--target TARGET]

Writes DRAFTER/config.json and DRAFTER/model.safetensors as docs/internals.md "Drafter checkpoint"
fixes them: SGLang's `LlamaForCausalLMEagle3` config with one layer, the target's
`max_position_embeddings` and rope keys copied as the target spells them, and
`eagle_config.eagle_aux_hidden_state_layer_ids = [1, L//2-1, L-4]` (SGLang adds 1: the
inputs of layers 2, L//2, L-3, where extraction captured). The weights carry exactly the
names SGLang's loader maps (pipeline.drafter.EXPORT_KEYS; a test checks them against
llama_eagle3.py of the sglang wheel). SGLang silently keeps a random tensor for a name it
does not find (a missing `lm_head.weight` serves at acceptance 1.00), so a checkpoint that
lacks any of them, or holds one of the wrong shape, is refused before anything is written.
The weights take the target's dtype unless --dtype says otherwise (SGLang's `--dtype auto`
reads a float32 drafter as float16, not the target's bf16); files are 0644 (--mode).
Beside them, `eagle3-export.json` holds every file's size and xxh3 checksum and the
target's weight fingerprint. A checkpoint whose training store names another target's
fingerprint than --target's weights (another depth, a fine-tune, another revision) is refused.

The folder is built under a temporary name and exchanged into place (pipeline.output_guard):
an existing --out is replaced only when an earlier export wrote it (its `.eagle3-writer`
marker); any other existing path, or an --out that is, holds or sits inside the checkpoint
or the target, is refused before anything is touched. A failure leaves no temporary.

--checkpoint takes a training run folder (pipeline.train --out: its checkpoints/latest
pointer names the checkpoint) or one checkpoint folder. --verify reads DRAFTER's bytes:
every required key, the safetensors data offsets tiling the file to its size, every tensor
finite, the checksum manifest; with --target, that the capture layers and shapes fit that
target and that its weight fingerprint is the one the drafter was exported for.

Exit codes: 0 written (--verify: the folder is complete), 2 bad input (a missing or
misshapen key, a checkpoint for another target, an --out that is not export's own, bad
arguments), 3 the disk filled (the volume and the bytes needed are named), 1 anything else
(--verify: the folder has problems, each printed on one line), 130 interrupted, 143 stopped by
SIGTERM (the temporary folder is removed; pipeline/program_edge.py).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline import output_guard
from pipeline.events import EventWriter
from pipeline.jsonfile import read_object
from pipeline.program_edge import BadInput, StageError, on_sigterm, run_program

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
MANIFEST_FILE = "eagle3-export.json"
STATE_FILE = "train_state.pt"
WRITER = "pipeline.export"
DTYPES = {"target": "target", "keep": None, "bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
FLOAT_DTYPES = ("bfloat16", "float16", "float32")
SAFETENSORS_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64",
                      "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
DEFAULT_MODE = 0o644
MAX_HEADER_BYTES = 100 << 20


class ExportError(StageError):
    """A failure of the export; str() is the one line an operator reads. Refusals are the
    edge's BadInput (exit 2)."""


@dataclass(frozen=True)
class ExportOptions:
    """What an export was asked for: the command line's flags, checked by `_run`."""

    checkpoint: Path | None = None
    target: Path | None = None
    out: Path | None = None
    dtype: str = "target"
    mode: int = DEFAULT_MODE
    verify: Path | None = None


def required_keys() -> tuple[str, ...]:
    from pipeline.drafter import EXPORT_KEYS

    return tuple(EXPORT_KEYS)


def aux_layer_ids(num_layers: int) -> list[int]:
    """SGLang's ids for the capture layers (pipeline.target.sglang_layer_ids)."""
    from pipeline.target.config import sglang_layer_ids

    return sglang_layer_ids(num_layers)


def target_text_config(target: Path) -> dict:
    from pipeline.target.config import read_config, text_config

    return text_config(read_config(target, "--target"))


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

    from pipeline.drafter import DrafterConfig

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


def trained_target_fingerprint(ckpt: Path) -> str | None:
    """The target weight fingerprint of the store the checkpoint was trained on (train_state.pt's
    identity), or None for a checkpoint that does not record one."""
    path = Path(ckpt) / STATE_FILE
    if not path.is_file():
        return None
    from pipeline.torch_state import load_state_file

    state = load_state_file(path, "export another checkpoint", mmap=True)
    ident = state.get("identity") if isinstance(state, dict) else None
    store = ident.get("store") if isinstance(ident, dict) else None
    fp = store.get("target_fingerprint") if isinstance(store, dict) else None
    return fp if isinstance(fp, str) and fp else None


def _fingerprint_or_none(target: Path) -> tuple[str | None, str]:
    from pipeline.target.weights import FingerprintError, target_fingerprint

    try:
        return target_fingerprint(target), ""
    except FingerprintError as e:
        return None, str(e)


def check_target_identity(ckpt: Path, target: Path, warn) -> str | None:
    """The target's weight fingerprint, refused when the checkpoint was trained on another's."""
    want = trained_target_fingerprint(ckpt)
    have, why = _fingerprint_or_none(target)
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
    from pipeline.target.config import read_config, text_config
    from pipeline.target.weights import FingerprintError, weight_files

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
            name = SAFETENSORS_DTYPES.get(entry.get("dtype")) if isinstance(entry, dict) else None
            if name in FLOAT_DTYPES:
                return name
    return None


def _file_entry(path: Path) -> dict:
    from pipeline.checksum import ALGO, file_checksum

    return {"bytes": path.stat().st_size, ALGO: file_checksum(path)}


def write_folder(out: Path, config: dict, tensors: dict, dtype: str | None, mode: int = DEFAULT_MODE,
                 target: Path | None = None, identity: dict | None = None) -> int:
    """Built in a temporary folder (every file fsynced, checksummed, read back by verify_folder)
    and exchanged into place; returns the bytes written."""
    import torch
    from safetensors.torch import save_file

    from pipeline.atomic_io import write_json_atomic

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
        files = {name: _file_entry(tmp / name) for name in (WEIGHTS_FILE, CONFIG_FILE)}
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


def safetensors_layout(path: Path) -> tuple[dict, int, int]:
    """(header without __metadata__, data start, file size) of a safetensors file, tensors unread."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) != 8:
                raise BadInput(f"{path}: too short to be a safetensors file")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES or 8 + n > size:
                raise BadInput(f"{path}: header of {n} bytes does not fit the file's {size} bytes; the file is damaged")
            header = json.loads(f.read(n))
    except FileNotFoundError:
        raise BadInput(f"{path}: missing") from None
    except ValueError as e:
        raise BadInput(f"{path}: header is not JSON ({e}); the file is damaged") from None
    except OSError as e:
        raise BadInput(f"{path}: cannot be read ({e.strerror or e})") from None
    if not isinstance(header, dict):
        raise BadInput(f"{path}: header is not a JSON object; the file is damaged")
    header.pop("__metadata__", None)
    return header, 8 + n, size


def safetensors_header(path: Path) -> dict:
    """The JSON header of a safetensors file (names, dtypes, shapes) without reading tensors."""
    return safetensors_layout(path)[0]


def tiling_problems(path: Path, header: dict, start: int, size: int) -> list[str]:
    """The tensors' data offsets must cover the data section exactly, each span its shape's
    bytes: a cut or padded file fails here before any tensor is read."""
    spans = []
    for name, e in header.items():
        try:
            b, end = (int(x) for x in e["data_offsets"])
            numel = 1
            for d in e["shape"]:
                numel *= int(d)
            width = DTYPE_BYTES[e["dtype"]]
        except (KeyError, TypeError, ValueError):
            return [f"{path}: {name} has no usable dtype, shape and data_offsets; the file is damaged"]
        if end - b != numel * width:
            return [f"{path}: {name} spans {end - b} bytes, its shape and dtype need {numel * width}"]
        spans.append((b, end, name))
    pos = 0
    for b, end, name in sorted(spans):
        if b != pos:
            return [f"{path}: {name} starts at data byte {b}, expected {pos} (a gap or an overlap); the file is damaged"]
        pos = end
    if start + pos != size:
        return [f"{path}: is {size} bytes, its header describes {start + pos}; the file is cut or padded "
                "(export it again)"]
    return []


def nonfinite_problems(path: Path) -> list[str]:
    """Every floating tensor read, one at a time (memory: the largest tensor), and checked finite."""
    import torch
    from safetensors import SafetensorError, safe_open

    bad = []
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            for name in f.keys():
                t = f.get_tensor(name)
                if t.is_floating_point():
                    n = int((~torch.isfinite(t)).sum())
                    if n:
                        bad.append(f"{path}: {name} holds {n} NaN or Inf values; export an earlier checkpoint")
    except (SafetensorError, OSError, ValueError) as e:
        return [f"{path}: tensors cannot be read ({e})"]
    return bad


def manifest_problems(folder: Path) -> tuple[list[str], dict | None]:
    from pipeline.checksum import ALGO

    path = folder / MANIFEST_FILE
    try:
        manifest = read_object(path, f"{path}: missing; no checksum manifest: the folder was not written by this "
                                     "export; export again")
    except BadInput as e:
        return [str(e)], None
    files = manifest.get("files")
    if not isinstance(files, dict) or WEIGHTS_FILE not in files or CONFIG_FILE not in files:
        return [f"{path}: does not list {WEIGHTS_FILE} and {CONFIG_FILE}; export again"], manifest
    problems = []
    for name, want in files.items():
        if not isinstance(name, str) or "/" in name or not isinstance(want, dict):
            problems.append(f"{path}: entry {name!r} is not a file of this folder")
            continue
        f = folder / name
        try:
            have = _file_entry(f)
        except OSError as e:
            problems.append(f"{f}: cannot be read ({e.strerror or e})")
            continue
        if have["bytes"] != want.get("bytes"):
            problems.append(f"{f}: is {have['bytes']} bytes, the manifest recorded {want.get('bytes')!r}")
        elif have[ALGO] != want.get(ALGO):
            problems.append(f"{f}: checksum {have[ALGO]} differs from the manifest's {want.get(ALGO)!r}; "
                            "the file changed after export")
    return problems, manifest


def verify_folder(folder: Path, target: Path | None = None) -> list[str]:
    """Problems of an exported folder, one line each (empty: SGLang can load it)."""
    folder = Path(folder)
    problems: list[str] = []
    weights = folder / WEIGHTS_FILE
    try:
        header, start, size = safetensors_layout(weights)
        cfg_path = folder / CONFIG_FILE
        cfg = read_object(cfg_path, f"{cfg_path}: missing; not an exported drafter folder")
    except BadInput as e:
        return [str(e)]
    tiling = tiling_problems(weights, header, start, size)
    problems += tiling
    missing = [k for k in required_keys() if k not in header]
    if missing:
        problems.append(f"{weights}: lacks {', '.join(missing)}")
    extra = sorted(set(header) - set(required_keys()))
    if extra:
        problems.append(f"{weights}: names SGLang's loader does not map: {', '.join(extra[:8])}")
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
        problems.append(f"{weights}: lm_head.weight has {lm[0]} rows, draft_vocab_size is "
                        f"{cfg.get('draft_vocab_size')!r}")
    if not tiling:
        problems += nonfinite_problems(weights)
    found, manifest = manifest_problems(folder)
    problems += found
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
        recorded = (manifest or {}).get("target_fingerprint")
        if recorded:
            have, why = _fingerprint_or_none(target)
            if have != recorded:
                problems.append(f"{folder / MANIFEST_FILE}: exported for the target weights {recorded}, but "
                                f"--target {target} holds {have or 'none (' + why + ')'}; export for this target")
    return problems


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


def export(checkpoint: Path, target: Path, out: Path, dtype: str | None, events: EventWriter,
           mode: int = DEFAULT_MODE) -> dict:
    out = Path(out)
    output_guard.refuse_overlap(out, [checkpoint, target])
    adopt_legacy(out)
    output_guard.refuse_foreign(out, WRITER)
    ckpt = resolve_checkpoint(checkpoint)
    output_guard.refuse_overlap(out, [ckpt])

    def warn(text: str) -> None:
        print(f"export: warning: {text}", file=sys.stderr)
        events.message(text, level="warning")

    cfg, state = load_checkpoint(ckpt)
    tcfg = target_text_config(target)
    check_target(cfg, tcfg, str(ckpt))
    fingerprint = check_target_identity(ckpt, target, warn)
    tensors = check_tensors(cfg, state, str(ckpt / WEIGHTS_FILE))
    config = sglang_config(cfg, tcfg)
    if dtype == "target":
        dtype = target_dtype(target)
        if dtype is None:
            warn(f"--target {target} names no dtype (config.json torch_dtype) and has no safetensors weights; "
                 "keeping the checkpoint's dtype (pass --dtype bf16|fp16|fp32 to choose)")
    size = write_folder(out, config, tensors, dtype, mode, target,
                        {"target_fingerprint": fingerprint, "checkpoint": str(ckpt)})
    events.artifact(str(out), bytes=size)
    return {"checkpoint": str(ckpt), "out": str(out), "bytes": size, "keys": len(tensors),
            "draft_vocab_size": cfg.draft_vocab_size, "dtype": dtype or "as trained",
            "eagle_aux_hidden_state_layer_ids": config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]}


def _mode(text: str) -> int:
    try:
        mode = int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an octal file mode like 0644") from None
    if not 0 <= mode <= 0o777 or not mode & 0o400:
        raise argparse.ArgumentTypeError(f"{text!r}: a mode from 0400 to 0777 that the owner can read")
    return mode


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Write a trained EAGLE-3 drafter as a folder SGLang loads.")
    p.add_argument("--checkpoint", type=Path, help="training output folder (its 'latest' pointer) or a checkpoint folder")
    p.add_argument("--target", type=Path, help="the target model folder (config.json: rope, positions, layer count)")
    p.add_argument("--out", type=Path, help="drafter folder to write: new, or one an earlier export wrote "
                   "(replaced atomically)")
    p.add_argument("--dtype", default="target", choices=sorted(DTYPES),
                   help="weights dtype (default target: the target's, e.g. bf16; keep: as trained)")
    p.add_argument("--mode", type=_mode, default=DEFAULT_MODE, metavar="OCTAL",
                   help="permissions of the written files (default 0644: a server of another user can read them)")
    p.add_argument("--verify", type=Path, metavar="DRAFTER", help="check an exported folder and exit")
    return p


def _run(args: ExportOptions) -> int:
    if args.verify is not None:
        problems = verify_folder(args.verify, args.target)
        for line in problems:
            print(f"export: {line}", file=sys.stderr)
        if not problems:
            print(f"export: {args.verify} is complete: {len(required_keys())} weights, all finite, checksums "
                  f"match{', for this target' if args.target else ''}; config for SGLang")
        return 1 if problems else 0
    missing = [f"--{n}" for n in ("checkpoint", "target", "out") if getattr(args, n) is None]
    if missing:
        raise BadInput(f"missing {', '.join(missing)}; see {PROG} --help")
    with EventWriter.from_env() as events:
        info = export(args.checkpoint, args.target, args.out, DTYPES[args.dtype], events, args.mode)
    print(f"export: {info['checkpoint']} -> {info['out']}: {info['keys']} weights, {info['bytes']} bytes, "
          f"{info['dtype']}, draft vocab {info['draft_vocab_size']}, "
          f"aux layer ids {info['eagle_aux_hidden_state_layer_ids']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    opts = ExportOptions(**vars(build_parser().parse_args(argv)))
    # a stop unwinds through the folder swap, which removes its temporary
    with on_sigterm():
        return run_program("export", lambda: _run(opts))


if __name__ == "__main__":
    sys.exit(main())

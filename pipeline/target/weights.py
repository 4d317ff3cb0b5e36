"""The target's weights, read one way for every stage: the files that hold them and their
fingerprint.

- `weight_map(model_dir)`: tensor name -> shard file, from the safetensors index (INDEX);
  `weight_files(model_dir)`: every file that holds weights.
- `target_fingerprint(model_dir)`: the target's identity by its weights, not its path.
- `check_weights(model_dir, cfg)`: the config's layers, hidden size and vocabulary against
  what the weights' safetensors headers hold, and every file as long as its header says.

A store must never mix hidden states of two targets, and the same path can hold other
weights tomorrow (a fine-tune saved in place, a re-download of another revision). The
fingerprint reads, for every weight file (the shards the safetensors index names, else
every `*.safetensors`, else `*.bin`/`*.pt`): its name, its size, its safetensors header
(8-byte length + JSON: every tensor's name, dtype, shape and offsets) and 16 blocks of
4 KiB spread evenly over its data. That is about 64 KiB of reads per shard, cheap even for
a 1T model of hundreds of shards, and it changes when the weights are re-saved, retrained
or swapped. It is not a full-content hash: an in-place edit of a few bytes that no sampled
block covers goes unseen. Value: "wfp1:" + 32 hex digits (sha256, cut).

Errors are `FingerprintError` (a `TargetError`: the edge's `BadInput`, exit 2) naming the file
and what to do; stages let them through to their edge as they are.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from pathlib import Path
from typing import BinaryIO

from pipeline.target.config import CONFIG, TargetError, read_config, text_config

INDEX = "model.safetensors.index.json"
PREFIX = "wfp1:"
MAX_HEADER = 100 * 2**20  # safetensors itself refuses headers over 100 MB
BLOCKS = 16
BLOCK = 4096


class FingerprintError(TargetError):
    """The target folder has no readable weights; the text names the file."""


def weight_map(model_dir: Path | str) -> dict[str, str] | None:
    """Tensor name -> shard file name from the safetensors index; None when the target has
    no index (one file, or not safetensors)."""
    index = Path(model_dir) / INDEX
    if not index.is_file():
        return None
    try:
        wm = json.loads(index.read_text())["weight_map"]
        return {str(k): str(v) for k, v in wm.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise FingerprintError(f"{index}: no usable weight_map ({type(e).__name__}: {e})") from None


def weight_files(model_dir: Path) -> list[Path]:
    """The files that hold the weights, in a stable order."""
    d = Path(model_dir)
    if not d.is_dir():
        raise FingerprintError(f"target {d} is not a folder; point it at a save_pretrained folder")
    index = d / INDEX
    wm = weight_map(d)
    if wm is not None:
        files = [d / n for n in sorted(set(wm.values()))]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise FingerprintError(f"{index} names {missing[0]}, which does not exist; the download is incomplete")
        return files
    for pattern in ("*.safetensors", "*.bin", "*.pt"):
        files = sorted(p for p in d.glob(pattern) if p.is_file())
        if files:
            return files
    raise FingerprintError(f"target {d} has no weight files (*.safetensors, *.bin, *.pt)")


def _header(f: BinaryIO, path: Path, size: int) -> tuple[bytes, int]:
    """(header bytes, data start) of a safetensors file."""
    raw = f.read(8)
    if len(raw) < 8:
        raise FingerprintError(f"{path}: {size} bytes, too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw)
    if n > MAX_HEADER or 8 + n > size:
        raise FingerprintError(f"{path}: safetensors header length {n} does not fit the file's {size} bytes; "
                               "the file is torn or not safetensors")
    return f.read(n), 8 + n


def _file_digest(h: hashlib._Hash, path: Path) -> None:
    size = path.stat().st_size
    h.update(f"{path.name}\0{size}\0".encode())
    with open(path, "rb") as f:
        start = 0
        if path.suffix == ".safetensors":
            head, start = _header(f, path, size)
            h.update(head)
        span = size - start
        offsets = sorted({start + (span - BLOCK) * k // (BLOCKS - 1) for k in range(BLOCKS)}) if span > BLOCK else [start]
        for off in offsets:
            h.update(os.pread(f.fileno(), BLOCK, max(start, off)))


def target_fingerprint(model_dir: Path | str) -> str:
    """'wfp1:<32 hex>' for the weights under `model_dir` (see the module docstring)."""
    h = hashlib.sha256(b"wfp1\0")
    for path in weight_files(Path(model_dir)):
        try:
            _file_digest(h, path)
        except OSError as e:
            raise FingerprintError(f"cannot read {path}: {e.strerror or e}") from None
    return PREFIX + h.hexdigest()[:32]


def _headers(files: list[Path]) -> dict[str, list[int]]:
    """Every tensor's shape across the safetensors files; a file shorter or longer than its
    header says (a cut download) is refused naming it."""
    shapes: dict[str, list[int]] = {}
    for path in files:
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                head, start = _header(f, path, size)
            header = json.loads(head)
            ends = [int(e["data_offsets"][1]) for k, e in header.items() if k != "__metadata__"]
            shapes.update({k: [int(d) for d in e["shape"]] for k, e in header.items() if k != "__metadata__"})
        except OSError as e:
            raise FingerprintError(f"cannot read {path}: {e.strerror or e}") from None
        except (ValueError, KeyError, TypeError, AttributeError):
            raise FingerprintError(f"{path}: its safetensors header is not readable; the file is damaged") from None
        if start + max(ends, default=0) != size:
            raise FingerprintError(f"{path}: {size:,} bytes, its header describes {start + max(ends, default=0):,}; "
                                   "the file is cut or padded (an interrupted download?): fetch it again")
    return shapes


def _model_shape(shapes: dict[str, list[int]]) -> tuple[str, int, int, int] | None:
    """(the embedding's name, its rows, its width, the decoder layers beside it) as the
    weights hold them, or None when no `*embed_tokens.weight` names the language model."""
    for name, shape in shapes.items():
        if not name.endswith("embed_tokens.weight") or len(shape) != 2:
            continue
        prefix = re.escape(name[: -len("embed_tokens.weight")])
        layer = re.compile(rf"^{prefix}layers\.(\d+)\.")
        ids = {int(m.group(1)) for k in shapes if (m := layer.match(k))}
        if ids:
            return name, shape[0], shape[1], max(ids) + 1
    return None


def check_weights(model_dir: Path | str, flag: str = "the target") -> None:
    """The target's config.json against its weights, before anything loads them: the decoder
    layers, hidden size and vocabulary it claims must be what the safetensors headers hold
    (a config that claims 12 layers for 8 stored would load with 4 random ones), and every
    weight file as long as its header says. Weights that are not safetensors are not read.
    TargetError (exit 2) names the file and the key."""
    d = Path(model_dir)
    files = [f for f in weight_files(d) if f.suffix == ".safetensors"]
    shapes = _headers(files)
    found = _model_shape(shapes)
    if found is None:
        return
    cfg = text_config(read_config(d, flag))
    name, rows, width, layers = found
    extra = cfg.get("num_nextn_predict_layers") or 0  # DeepSeek's MTP layers are stored after the decoder's
    held = {"num_hidden_layers": layers, "hidden_size": width, "vocab_size": rows}
    why = {"num_hidden_layers": f"layers 0..{layers - 1} beside {name}",
           "hidden_size": f"{name} is {rows} x {width}", "vocab_size": f"{name} is {rows} x {width}"}
    for key, have in held.items():
        claim = cfg.get(key)
        ok = claim in (have, have - extra) if key == "num_hidden_layers" else claim == have
        if not ok:
            raise TargetError(f"{d / CONFIG}: {key} is {claim!r}, but the weights hold {have} ({why[key]}); the "
                              f"config does not describe these weights ({flag}): restore the model's own config.json")

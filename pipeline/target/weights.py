"""The target's weights, read one way for every stage: the files that hold them and their
fingerprint.

- `weight_map(model_dir)`: tensor name -> shard file, from the safetensors index (INDEX);
  `weight_files(model_dir)`: every file that holds weights.
- `target_fingerprint(model_dir)`: the target's identity by its weights, not its path.

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
import struct
from pathlib import Path

from pipeline.target.config import TargetError

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


def _header(f, path: Path, size: int) -> tuple[bytes, int]:
    """(header bytes, data start) of a safetensors file."""
    raw = f.read(8)
    if len(raw) < 8:
        raise FingerprintError(f"{path}: {size} bytes, too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw)
    if n > MAX_HEADER or 8 + n > size:
        raise FingerprintError(f"{path}: safetensors header length {n} does not fit the file's {size} bytes; "
                               "the file is torn or not safetensors")
    return f.read(n), 8 + n


def _file_digest(h, path: Path) -> None:
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

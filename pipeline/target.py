"""A target model's identity by its weights, not its path: `target_fingerprint(model_dir)`.

A store must never mix hidden states of two targets, and the same path can hold other
weights tomorrow (a fine-tune saved in place, a re-download of another revision). The
fingerprint reads, for every weight file (the shards the safetensors index names, else
every `*.safetensors`, else `*.bin`/`*.pt`): its name, its size, its safetensors header
(8-byte length + JSON: every tensor's name, dtype, shape and offsets) and 16 blocks of
4 KiB spread evenly over its data. That is about 64 KiB of reads per shard, cheap even for
a 1T model of hundreds of shards, and it changes when the weights are re-saved, retrained
or swapped. It is not a full-content hash: an in-place edit of a few bytes that no sampled
block covers goes unseen.

Torch-free, so the extractor, the SGLang client, the trainer and `--verify` all call it.
Errors are `FingerprintError` (a ValueError) naming the file and what to do.

Value: "wfp1:" + 32 hex digits (sha256, cut).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

PREFIX = "wfp1:"
INDEX = "model.safetensors.index.json"
MAX_HEADER = 100 * 2**20  # safetensors itself refuses headers over 100 MB
BLOCKS = 16
BLOCK = 4096


class FingerprintError(ValueError):
    """The target folder has no readable weights; the text names the file."""


def weight_files(model_dir: Path) -> list[Path]:
    """The files that hold the weights, in a stable order."""
    d = Path(model_dir)
    if not d.is_dir():
        raise FingerprintError(f"target {d} is not a folder; point it at a save_pretrained folder")
    index = d / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            names = sorted(set(weight_map.values()))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise FingerprintError(f"{index}: no usable weight_map ({type(e).__name__}: {e})") from None
        files = [d / n for n in names]
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

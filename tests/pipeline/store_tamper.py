"""A sample of a hidden-state store changed as someone with write access would change it: the
file rewritten and its manifest line resealed (size and xxh3 recomputed), so that the bytes
check out and only a check of what the sample means can tell."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

from pipeline.checksum import ALGO, file_checksum

NUMPY = {"F8_E4M3": np.uint8, "BF16": np.uint16, "F16": np.uint16, "F32": np.float32, "I64": np.int64,
         "U8": np.uint8}
E4M3_NAN = 0x7F


def entries(store: Path) -> list[dict]:
    return [json.loads(line) for line in (store / "manifest.jsonl").read_text().splitlines() if line.strip()]


def read_file(path: Path) -> tuple[dict, bytearray]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), bytearray(raw[8 + n:])


def write_file(path: Path, header: dict, data: bytes) -> None:
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-(len(js) + 8) % 8)
    path.write_bytes(struct.pack("<Q", len(js)) + js + bytes(data))


def tensors(header: dict, data: bytearray) -> dict[str, np.ndarray]:
    """Writable views of every tensor of a sample, by name, in its raw codes (e4m3 as uint8,
    bf16 as uint16)."""
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        out[name] = np.frombuffer(memoryview(data)[begin:end], dtype=NUMPY[e["dtype"]]).reshape(e["shape"])
    return out


def reseal(store: Path, index: int) -> None:
    """Recompute the manifest line of sample `index` from its file, as a careful forger would."""
    lines = entries(store)
    for e in lines:
        if e["index"] == index:
            path = store / e["file"]
            e["bytes"], e[ALGO] = path.stat().st_size, file_checksum(path)
    (store / "manifest.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))


def tamper(store: Path, position: int, edit: Callable[[dict, dict[str, np.ndarray]], None],
           sealed: bool = True) -> Path:
    """Apply `edit(header, tensors)` to the sample at manifest line `position` and (by default)
    reseal it; returns the sample file's path."""
    e = entries(store)[position]
    path = store / e["file"]
    header, data = read_file(path)
    edit(header, tensors(header, data))
    write_file(path, header, data)
    if sealed:
        reseal(store, e["index"])
    return path


def rot_header_byte(store: Path, position: int) -> Path:
    """One byte of the sample's safetensors header changed (a digit of a shape), its checksum not
    resealed: what disk rot does and what the sampled checksums may miss."""
    path = store / entries(store)[position]["file"]
    raw = bytearray(path.read_bytes())
    at = raw.index(b'"shape":[') + len(b'"shape":[')
    raw[at] = ord("9") if raw[at] != ord("9") else ord("8")
    path.write_bytes(bytes(raw))
    return path

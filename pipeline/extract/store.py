"""One sample file of the hidden-state store, written so a crash never leaves a bad one.

`<out>/rows_<k>/<index>.safetensors` (k = index // 1000) holds `input_ids [T] int64`,
`hidden_state [T,H]`, `aux_hidden_state [T,3H]` and `loss_mask [T] uint8`. The file is
written to a temp name, fsynced and renamed only after its shapes, finiteness and size
check out, so a reader never sees a partial sample under a final name. The safetensors
header comes from `layout.header` and the tensor bytes go to the file straight from the
(pinned) host buffers with os.write, skipping the serialise-to-bytes copy that
`safetensors.torch.save` makes; `safetensors.safe_open` reads these files like any other.
The xxh3 checksum (pipeline/checksum.py) is taken over those same buffers on the way out.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..atomicfile import write_all
from ..checksum import ALGO, Checksum
from .errors import ExtractError
from .layout import header, relpath, temp_relpath

WRITE_DELAY_ENV = "EAGLE3_EXTRACT_WRITE_DELAY"
"""Test hook: seconds each writer sleeps between fsync and rename, so a kill test can land
while files are in flight. Unset in real runs."""

TORCH_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


@dataclass(frozen=True)
class Sample:
    index: int
    id: str
    input_ids: torch.Tensor  # [T] int64
    loss_mask: torch.Tensor  # [T] uint8
    hidden_state: torch.Tensor  # [T,H]
    aux_hidden_state: torch.Tensor  # [T,3H]


class InvalidSample(ExtractError):
    pass


def validate(s: Sample, hidden: int, dtype: torch.dtype, finite: bool) -> None:
    t = s.input_ids.shape[0] if s.input_ids.dim() == 1 else -1
    where = f"sample {s.index} (id {s.id!r})"
    expect = {
        "input_ids": ((t,), torch.int64),
        "loss_mask": ((t,), torch.uint8),
        "hidden_state": ((t, hidden), dtype),
        "aux_hidden_state": ((t, 3 * hidden), dtype),
    }
    for name, (shape, dt) in expect.items():
        x = getattr(s, name)
        if t <= 0 or tuple(x.shape) != shape or x.dtype != dt or not x.is_contiguous():
            raise InvalidSample(
                f"{where}: {name} has shape {tuple(x.shape)} {x.dtype}, expected {shape} {dt}; nothing written for it"
            )
    if not finite:
        raise InvalidSample(
            f"{where}: the target produced NaN or Inf hidden states; nothing written for it. "
            "Check the target weights and dtype (bf16 overflow), then rerun to resume"
        )


def _bytes_of(x: torch.Tensor) -> memoryview:
    return memoryview(x.reshape(-1).view(torch.uint8).numpy())


def write_sample(out: Path, s: Sample, hidden: int, finite: bool = True) -> dict:
    """Write one sample atomically; returns its manifest line as a dict:
    {"index", "id", "tokens", "bytes", "file" (relative to `out`), "xxh3"}.

    Every writer of the store (this HF backend, the SGLang client) calls this and appends
    the returned dict to the manifest unchanged, so their lines are identical. The checksum
    is computed over the same buffers as they go to the file: no extra copy, no re-read."""
    dtype = s.hidden_state.dtype
    validate(s, hidden, dtype, finite)
    t = s.input_ids.shape[0]
    head = header(t, hidden, TORCH_DTYPES[dtype])
    expected = len(head) + t * (9 + 4 * hidden * s.hidden_state.element_size())
    rel = relpath(s.index)
    final, tmp = out / rel, out / temp_relpath(s.index)
    final.parent.mkdir(parents=True, exist_ok=True)
    digest = Checksum()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        for part in (head, _bytes_of(s.input_ids), _bytes_of(s.hidden_state),
                     _bytes_of(s.aux_hidden_state), _bytes_of(s.loss_mask)):
            digest.update(part)
            write_all(fd, part)
        os.fsync(fd)
        size = os.fstat(fd).st_size
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    if size != expected:
        raise InvalidSample(f"{tmp}: wrote {size} bytes, expected {expected}; not renamed")
    delay = os.environ.get(WRITE_DELAY_ENV)
    if delay:
        time.sleep(float(delay))
    os.replace(tmp, final)
    return {"index": s.index, "id": s.id, "tokens": t, "bytes": size, "file": rel, ALGO: digest.hexdigest()}

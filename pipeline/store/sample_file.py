"""One sample file of the hidden-state store, written so a crash never leaves a bad one.

`<out>/rows_<k>/<index>.safetensors` (k = index // 1000) holds `input_ids [T] int64`,
`hidden_state [T,H]`, `aux_hidden_state [T,3H]` and `loss_mask [T] uint8`. One routine,
`write_parts`, writes every sample file: to a temp name, fsynced, its size checked, then
renamed, so a reader never sees a partial sample under a final name. The safetensors
header comes from `layout.header`; the tensor bytes go to the file with os.write straight
from the caller's buffers, skipping the serialise-to-bytes copy that
`safetensors.torch.save` makes; `safetensors.safe_open` reads these files like any other.
The xxh3 checksum (pipeline/checksum.py) is taken over those same buffers on the way out.
Two callers: `write_sample` (the HF backend: tensors in pinned host memory, shapes and
finiteness checked first) and the SGLang client, which streams a dump through one reused
buffer (dumps.DumpFile.chunks) and whose finiteness check may still fail mid-file.
With `fp8=True` both quantize the states on the way (pipeline/store/fp8.py, after the
checks on the states as captured) and the file holds e4m3 values and their float32 scales
(layout.py gives the order).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import torch

from pipeline.atomic_io import write_all
from pipeline.checksum import ALGO, Checksum
from pipeline.program_edge import StageError
from pipeline.store.fp8 import TORCH_FP8, quantize_state
from pipeline.store.layout import header, relpath, sample_bytes, temp_relpath

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
    hidden_state_scale: torch.Tensor | None = None  # [T] float32, when the states are already e4m3
    aux_hidden_state_scale: torch.Tensor | None = None  # [T,3] float32


class InvalidSample(StageError):
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
    if dtype == TORCH_FP8:
        expect.update(hidden_state_scale=((t,), torch.float32), aux_hidden_state_scale=((t, 3), torch.float32))
    for name, (shape, dt) in expect.items():
        x = getattr(s, name)
        if x is None:
            raise InvalidSample(f"{where}: {name} is missing, expected {shape} {dt}; nothing written for it")
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
    return x.reshape(-1).view(torch.uint8).numpy().data


def write_sample(out: Path, s: Sample, hidden: int, finite: bool = True, fp8: bool = False,
                 captured: str | None = None) -> dict:
    """Write one sample from tensors in memory atomically; returns its manifest line (write_parts).
    With `fp8` the states, checked as captured, are stored as e4m3 with their scales. A Sample
    whose states are e4m3 already, with their scales (the HF engine quantizes on the device),
    is stored as it is; `captured` names the dtype they were captured in (the file's metadata)."""
    dtype = s.hidden_state.dtype
    validate(s, hidden, dtype, finite)
    states: tuple[torch.Tensor, ...]
    if dtype == TORCH_FP8:
        if captured is None or captured not in TORCH_DTYPES.values():
            raise ValueError(f"an e4m3 sample needs the dtype it was captured in, not {captured!r}")
        if s.hidden_state_scale is None or s.aux_hidden_state_scale is None:
            raise ValueError("an e4m3 sample needs its states' scales")
        fp8, name = True, captured
        states = (s.hidden_state, s.aux_hidden_state, s.hidden_state_scale, s.aux_hidden_state_scale)
    elif fp8:
        name = TORCH_DTYPES[dtype]
        (final, final_scale), (aux, aux_scale) = (quantize_state("hidden_state", s.hidden_state),
                                                  quantize_state("aux_hidden_state", s.aux_hidden_state))
        states = (final, aux, final_scale, aux_scale)
    else:
        name, states = TORCH_DTYPES[dtype], (s.hidden_state, s.aux_hidden_state)
    parts = (_bytes_of(s.input_ids), *map(_bytes_of, states), _bytes_of(s.loss_mask))
    return write_parts(out, s.index, s.id, s.input_ids.shape[0], hidden, name, parts, fp8=fp8)


def write_parts(out: Path, index: int, id: str, tokens: int, hidden: int, dtype: str, parts: Iterable,
                fp8: bool = False) -> dict:
    """Write one sample file atomically from `parts`, the raw bytes of input_ids, hidden_state,
    aux_hidden_state and loss_mask in that order (fp8: input_ids, the two states' e4m3 values,
    their scales, loss_mask; layout.entries), in as many buffers as the caller likes (a
    generator may hand out one reused buffer: each is checksummed and written before the next
    is asked for). Returns its manifest line as a dict:
    {"index", "id", "tokens", "bytes", "file" (relative to `out`), "xxh3"}.

    Every writer of the store (the HF backend through write_sample, the SGLang client streaming
    from a dump) ends here and appends the returned dict to the manifest unchanged, so their
    files and lines are identical. The checksum is computed over the same buffers as they go
    to the file: no extra copy, no re-read. Any exception (one raised by `parts` included)
    removes the temp file; the final name is only ever the whole, fsynced, right-sized file."""
    head = header(tokens, hidden, dtype, fp8)
    expected = sample_bytes(tokens, hidden, dtype, fp8)
    rel = relpath(index)
    final, tmp = out / rel, out / temp_relpath(index)
    final.parent.mkdir(parents=True, exist_ok=True)
    digest = Checksum()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        try:
            for part in chain((head,), parts):
                digest.update(part)
                write_all(fd, part)
            os.fsync(fd)
            size = os.fstat(fd).st_size
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        if size != expected:
            raise InvalidSample(f"{tmp}: wrote {size} bytes, expected {expected}; removed, not renamed")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    delay = os.environ.get(WRITE_DELAY_ENV)
    if delay:
        time.sleep(float(delay))
    os.replace(tmp, final)
    return {"index": index, "id": id, "tokens": tokens, "bytes": size, "file": rel, ALGO: digest.hexdigest()}

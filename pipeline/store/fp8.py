"""The fp8 store's arithmetic: states as float8 e4m3 with float32 scales, and back.

`--store-dtype fp8` halves the store (1 byte a value instead of bf16's 2, plus 16 bytes of
scales a token) so that twice the samples fit on the same disk; the issue that asked for it
measured a 5,000-sample SmolLM2 store at 33 GB. Every writer (the HF engine quantizes each
batch on the device before its copy to the host, extract/engine.py quantize_to_host;
`sample_file.write_sample(fp8=True)`; the SGLang client through `quantize_stream`) and every
reader (`as_captured`, under pipeline/train/data.py's `read_sample`) goes through this
module, so the files have one meaning, byte for byte whichever writer (tests/pipeline/
test_store_fp8.py, test_extract_sglang.py).

Scaling: one scale per token for `hidden_state` ([T] float32) and one per token per capture
layer for `aux_hidden_state` ([T,3] float32): each row (or each layer's third of an aux
row) is divided by amax/448, e4m3's largest finite value, so its largest element lands on
448 and the rest keep e4m3's 3 mantissa bits (a relative rounding error of at most 2^-4).
Per layer for aux, because the three capture layers' magnitudes differ: one scale per
token is set by the deepest layer, and the shallow layers' values fall down e4m3's range.
Measured on SmolLM2-135M-Instruct (bf16 from the GGUF, 12 ShareGPT chats, 4,157 tokens;
capture layers 2, 15, 27 with mean token norms 67, 248, 628), relative round-trip error
||x - x'|| / ||x|| per token and capture layer, mean / p99 / max:
    one scale per token:            layer 2 0.027 / 0.042 / 0.052, layer 15 0.026 / 0.038 / 0.044
    one per token per capture layer: layer 2 0.022 / 0.029 / 0.032, layer 15 0.022 / 0.029 / 0.032
(layer 27 0.020 / 0.029 / 0.031 either way; the final state 0.022 / 0.029 / 0.034). Per layer
gives every layer the final state's error, for 8 more bytes a token out of 2,329 (hidden
576; measured by bench/fp8_store.py, bench/results/fp8-store-h200.txt). The final
state is one layer: one scale per token.

The scales are computed in float32 from the states as the target produced them and stored
as computed (amax / 448, no rounding to a power of two, never below float32's smallest
normal); a row of zeros gets scale 0 and reads back as zeros. Readers dequantize to the dtype the states were captured in (the
file's `__metadata__` "dtype"), so training sees tensors of the same shape and dtype as
from a bf16 store.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import torch

from pipeline.store.layout import SCALE_COLUMNS, scale_name

E4M3_MAX = 448.0
_FLOAT32_TINY = torch.finfo(torch.float32).tiny  # a smaller scale's inverse would be inf
TORCH_FP8 = torch.float8_e4m3fn
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def quantize(x: torch.Tensor, columns: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values [T, C*H] e4m3, scales [T] or [T, C] float32) of `x` [T, C*H], one scale for each
    of the C equal parts of every row (C = 1: one per row)."""
    t = x.shape[0]
    parts = x.reshape(t, columns, -1)
    amax = parts.abs().amax(dim=-1).float()  # exact in the input's dtype; no float copy of x for it
    scale = torch.where(amax > 0, (amax / E4M3_MAX).clamp_min(_FLOAT32_TINY), torch.zeros_like(amax))
    inverse = torch.where(scale > 0, 1.0 / scale, torch.zeros_like(scale)).unsqueeze(-1)
    # one multiply in float32 (a 16-bit x promotes): half the time of a float copy then a divide,
    # which matters on the extraction's writer threads
    q = (parts * inverse).clamp_(-E4M3_MAX, E4M3_MAX).to(TORCH_FP8).reshape(t, -1)
    return q, (scale.reshape(t) if columns == 1 else scale)


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`q` [T, C*H] e4m3 times its scales ([T] or [T, C]), as `dtype`.

    This runs in the trainer's DataLoader workers, one thread each, for every token of every
    step, so it is built for speed there: torch's e4m3 conversion on the CPU goes value by
    value (about 160 ms for 1,024 tokens of SmolLM2's states on one loaded core), a lookup of
    the 256 codes in a table of `dtype` about a quarter of that, and the multiply by the scale
    is then one vectorised pass in `dtype`. Every e4m3 value is exact in bf16, so the only
    rounding beyond fp32 arithmetic is the scale's to bf16 (2^-9 relative, against e4m3's 2^-4)."""
    t = q.shape[0]
    columns = 1 if scale.dim() == 1 else scale.shape[1]
    table = _TABLES[dtype]
    values = torch.from_numpy(table[q.contiguous().view(torch.uint8).numpy()])
    x = values.view(dtype).reshape(t, columns, q.shape[1] // columns) * scale.reshape(t, columns, 1).to(dtype)
    return x.reshape(t, -1)


def _table(dtype: torch.dtype) -> np.ndarray:
    """The value of each of the 256 e4m3 codes in `dtype`, as raw bits (numpy has no bf16)."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(TORCH_FP8).to(dtype)
    return codes.view({2: torch.int16, 4: torch.int32}[codes.element_size()]).numpy()


_TABLES = {dtype: _table(dtype) for dtype in _DTYPES.values()}


def quantize_state(name: str, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """quantize() with the store's scaling of `name` (hidden_state or aux_hidden_state)."""
    return quantize(x, SCALE_COLUMNS[name])


def as_captured(tensors: dict[str, torch.Tensor], captured: str) -> dict[str, torch.Tensor]:
    """An fp8 sample's tensors (as read from its file, checked by pipeline/store/meaning.py)
    as the target computed them: the states dequantized to `captured`, their scales dropped."""
    dtype = _DTYPES[captured]
    out = {"input_ids": tensors["input_ids"], "loss_mask": tensors["loss_mask"]}
    for name in SCALE_COLUMNS:
        out[name] = dequantize(tensors[name], tensors[scale_name(name)], dtype)
    return out


def quantize_stream(dtype: str, hidden: int,
                    states: Iterable[tuple[str, Iterable[memoryview]]]) -> Iterator[memoryview]:
    """The fp8 bytes of states that arrive as raw `dtype` bytes in pieces of whole rows (the
    SGLang client streams a dump through one reused buffer, dumps.DumpFile.state_chunks):
    each piece's e4m3 values as it comes, then the scales of every state in the order the
    states came; what `sample_file.write_parts(..., fp8=True)` takes between input_ids and
    loss_mask. Each piece is quantized before the next is asked for."""
    torch_dtype = _DTYPES[dtype]
    scales: list[torch.Tensor] = []
    for name, pieces in states:
        width = SCALE_COLUMNS[name] * hidden
        for piece in pieces:
            x = torch.frombuffer(piece, dtype=torch_dtype).view(-1, width)
            q, scale = quantize_state(name, x)
            scales.append(scale.contiguous())
            yield _raw(q)
    for s in scales:
        yield _raw(s)


def _raw(x: torch.Tensor) -> memoryview:
    return x.reshape(-1).view(torch.uint8).numpy().data

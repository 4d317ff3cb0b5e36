"""Where things live in a hidden-state store and how big they are; no torch needed.

The estimate (run by the console's free_space check before any GPU is touched) and the
writer share this module, so the estimate's per-sample size is the writer's exact size.

A sample file holds its tensors in this order: input_ids, hidden_state, aux_hidden_state,
loss_mask. An fp8 store (`fp8=True`, pipeline/store/fp8.py) writes the two states as
F8_E4M3 and puts their float32 scales after them, `hidden_state_scale [T]` then
`aux_hidden_state_scale [T,3]`, before loss_mask: after the 1-byte values, where their
offset (8T + 4TH) is a multiple of 4 whatever T and H, and last, so a writer streaming the
values can emit the scales it gathered on the way. Its safetensors `__metadata__` says
{"store_dtype": "float8_e4m3fn", "dtype": <the dtype the states were captured in>}, which
readers dequantize to.
"""

from __future__ import annotations

import json
import struct

from pipeline.atomic_io import TEMP_SUFFIX

ROWS_PER_DIR = 1000
META = "meta.json"

# dtype name -> (safetensors code, bytes per element)
DTYPES = {"bfloat16": ("BF16", 2), "float16": ("F16", 2), "float32": ("F32", 4)}
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}


FP8 = "float8_e4m3fn"
FP8_CODE = "F8_E4M3"
SCALE_COLUMNS = {"hidden_state": 1, "aux_hidden_state": 3}
"""Scales per token of each state in an fp8 store: one per row, one per capture layer."""
SCALING = {"hidden_state": "per-token", "aux_hidden_state": "per-token-per-layer", "scale_dtype": "float32",
           "format": "e4m3fn values; value = fp8 * scale, scale = amax / 448"}
"""What meta.json's "scaling" says of an fp8 store."""
SCALE_BYTES = 4 * sum(SCALE_COLUMNS.values())  # float32 scales per token


def scale_name(state: str) -> str:
    return f"{state}_scale"


def dtype_name(text: str) -> str:
    name = DTYPE_ALIASES.get(text.lower(), text.lower())
    if name not in DTYPES:
        raise ValueError(f"dtype {text!r} is not one of bf16, fp16, fp32")
    return name


def relpath(index: int) -> str:
    return f"rows_{index // ROWS_PER_DIR}/{index}.safetensors"


def temp_relpath(index: int) -> str:
    return f"rows_{index // ROWS_PER_DIR}/.{index}.safetensors{TEMP_SUFFIX}"


def entries(tokens: int, hidden: int, dtype: str, fp8: bool = False) -> list[tuple[str, str, list[int], int]]:
    """(name, safetensors dtype, shape, bytes) of each tensor of a sample file, in file order."""
    code, size = (FP8_CODE, 1) if fp8 else DTYPES[dtype]
    states = [("hidden_state", code, [tokens, hidden], tokens * hidden * size),
              ("aux_hidden_state", code, [tokens, 3 * hidden], tokens * 3 * hidden * size)]
    if fp8:
        for name, columns in SCALE_COLUMNS.items():
            shape = [tokens] if columns == 1 else [tokens, columns]
            states.append((scale_name(name), "F32", shape, 4 * tokens * columns))
    return [("input_ids", "I64", [tokens], 8 * tokens), *states, ("loss_mask", "U8", [tokens], tokens)]


def header(tokens: int, hidden: int, dtype: str, fp8: bool = False) -> bytes:
    """The safetensors header of one sample: 8-byte length, JSON, space padding to 8 bytes."""
    meta: dict = {"__metadata__": {"store_dtype": FP8, "dtype": dtype}} if fp8 else {}
    offset = 0
    for name, c, shape, n in entries(tokens, hidden, dtype, fp8):
        meta[name] = {"dtype": c, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    js = json.dumps(meta, separators=(",", ":")).encode()
    js += b" " * (-(len(js) + 8) % 8)
    return struct.pack("<Q", len(js)) + js


def token_bytes(hidden: int, dtype: str, fp8: bool = False) -> int:
    """Bytes each token adds to a sample file: its id, mask, states and (fp8) their scales."""
    return 9 + (4 * hidden + SCALE_BYTES if fp8 else 4 * hidden * DTYPES[dtype][1])


def sample_bytes(tokens: int, hidden: int, dtype: str, fp8: bool = False) -> int:
    """Exact size of one sample file of `tokens` tokens."""
    return len(header(tokens, hidden, dtype, fp8)) + tokens * token_bytes(hidden, dtype, fp8)



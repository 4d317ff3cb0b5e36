"""Where things live in a hidden-state store and how big they are; no torch needed.

The estimate (run by the console's free_space check before any GPU is touched) and the
writer share this module, so the estimate's per-sample size is the writer's exact size.
"""

from __future__ import annotations

import json
import struct

from ..atomic_io import TEMP_SUFFIX

ROWS_PER_DIR = 1000
META = "meta.json"

# dtype name -> (safetensors code, bytes per element)
DTYPES = {"bfloat16": ("BF16", 2), "float16": ("F16", 2), "float32": ("F32", 4)}
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}


def dtype_name(text: str) -> str:
    name = DTYPE_ALIASES.get(text.lower(), text.lower())
    if name not in DTYPES:
        raise ValueError(f"dtype {text!r} is not one of bf16, fp16, fp32")
    return name


def relpath(index: int) -> str:
    return f"rows_{index // ROWS_PER_DIR}/{index}.safetensors"


def temp_relpath(index: int) -> str:
    return f"rows_{index // ROWS_PER_DIR}/.{index}.safetensors{TEMP_SUFFIX}"


def header(tokens: int, hidden: int, dtype: str) -> bytes:
    """The safetensors header of one sample: 8-byte length, JSON, space padding to 8 bytes."""
    code, size = DTYPES[dtype]
    entries = (
        ("input_ids", "I64", [tokens], 8 * tokens),
        ("hidden_state", code, [tokens, hidden], tokens * hidden * size),
        ("aux_hidden_state", code, [tokens, 3 * hidden], tokens * 3 * hidden * size),
        ("loss_mask", "U8", [tokens], tokens),
    )
    meta, offset = {}, 0
    for name, c, shape, n in entries:
        meta[name] = {"dtype": c, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    js = json.dumps(meta, separators=(",", ":")).encode()
    js += b" " * (-(len(js) + 8) % 8)
    return struct.pack("<Q", len(js)) + js


def sample_bytes(tokens: int, hidden: int, dtype: str) -> int:
    """Exact size of one sample file of `tokens` tokens."""
    return len(header(tokens, hidden, dtype)) + tokens * (9 + 4 * hidden * DTYPES[dtype][1])



"""What a sample file must mean, beyond the bytes its checksum covers. Torch-free (numpy).

A checksum proves that the bytes are the ones written, not that they mean hidden states:
whoever can rewrite a sample can rewrite its manifest line too, and rot in a header that the
sampled checksums skip reaches the reader as it is. Scales of 0 trained at loss 0.0000 on
every step, negated scales on sign-flipped states, a header without `store_dtype` read raw
e4m3 codes as states, and a header that safetensors refuses stopped a loader worker. So
`--verify` and the trainer's read of every sample ask the same two questions here:

- `header_problem`: the file holds exactly the tensors the store declares for this sample
  (layout.entries for the manifest's token count and meta.json's hidden size and dtypes:
  each name's dtype, shape and place) and, in an fp8 store, the metadata naming the dtype the
  states were captured in.
- `rows_problem`: what the values say. States finite on every row, masked rows included (a
  bf16 or fp16 exponent of all ones, an e4m3 NaN code). An fp8 scale finite and >= 0, at
  least float32's smallest normal when not 0 (fp8.quantize never writes less), at most the
  capture dtype's largest value / 448 (so 448 x scale is finite where training reads it);
  a scale of 0 only on a row of zero codes, and on any other row a largest code of 448
  (the quantizer puts each row's largest element there) unless the scale is that smallest
  normal. `input_ids` inside the target's vocabulary, `loss_mask` 0 or 1.

Each problem is one line that names the key (`key hidden_state_scale: ...`); callers add the
file and the sample. `LayoutOf.of_meta(meta)` is what meta.json declares; `read_header`
reads a header bounded, `check_header` compares it; `check_file` reads a whole file (np.memmap)
for `--verify`.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.bounded_read import open_regular
from pipeline.program_edge import BadInput
from pipeline.store.layout import DTYPES, FP8, FP8_CODE, SCALE_COLUMNS, entries, scale_name

MAX_HEADER = 64 << 10  # a sample's header is under 1 KiB
E4M3_MAX_CODE = 0x7E  # 448, e4m3fn's largest finite magnitude
E4M3_NAN_CODE = 0x7F
FLOAT32_TINY = float(np.finfo(np.float32).tiny)
LARGEST = {"bfloat16": 3.3895313892515355e38, "float16": 65504.0, "float32": float(np.finfo(np.float32).max)}
_RAW = {"F8_E4M3": np.uint8, "BF16": np.uint16, "F16": np.uint16, "F32": np.float32, "I64": np.int64, "U8": np.uint8}
_INF_BITS = {"BF16": 0x7F80, "F16": 0x7C00}  # exponent bits that mean NaN or Inf
STATES = ("hidden_state", "aux_hidden_state")


class Meaningless(BadInput):
    """A sample file that cannot mean what the store declares: `<file> (sample N): <what>`."""

    def __init__(self, path: Path, what: str, sample: int | None = None) -> None:
        self.what = what
        super().__init__(f"{path}{'' if sample is None else f' (sample {sample})'}: {what}")


@dataclass(frozen=True)
class LayoutOf:
    """What a store's meta.json declares every sample file holds."""

    hidden: int
    dtype: str  # the dtype the states were captured in
    fp8: bool
    vocab: int | None

    @classmethod
    def of_meta(cls, meta: dict, where: object = "meta.json") -> LayoutOf:
        hidden, dtype, stored = meta.get("hidden_size"), meta.get("dtype"), meta.get("store_dtype")
        if not isinstance(hidden, int) or isinstance(hidden, bool) or hidden <= 0:
            raise BadInput(f"{where}: hidden_size {hidden!r} is not a positive integer; the store's meta is damaged")
        if dtype not in DTYPES:
            raise BadInput(f"{where}: dtype {dtype!r} is not one of {', '.join(DTYPES)}; the store's meta is damaged")
        if stored not in (None, FP8):
            raise BadInput(f"{where}: store_dtype {stored!r} is not one this version reads ({FP8!r}, or none)")
        vocab = meta.get("vocab_size")
        return cls(hidden, dtype, stored == FP8, vocab if isinstance(vocab, int) and vocab > 0 else None)

    def tensors(self, tokens: int) -> dict[str, dict]:
        """The header a sample of `tokens` tokens must have, without its metadata."""
        out, offset = {}, 0
        for name, code, shape, n in entries(tokens, self.hidden, self.dtype, self.fp8):
            out[name] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + n]}
            offset += n
        return out

    def metadata(self) -> dict | None:
        return {"store_dtype": FP8, "dtype": self.dtype} if self.fp8 else None

    def describe(self) -> str:
        return f"{FP8} states captured as {self.dtype}" if self.fp8 else f"{self.dtype} states"


def read_header(path: Path, sample: int | None = None) -> tuple[object, int]:
    """(the parsed safetensors header, where its data starts); a path that is not a regular
    file, too short or whose header is not JSON is `Meaningless`."""
    try:
        fd = open_regular(path)
    except OSError as e:
        raise Meaningless(path, f"cannot be read ({getattr(e, 'why', None) or e.strerror or e})", sample) from None
    with os.fdopen(fd, "rb") as f:
        raw = f.read(8)
        n = struct.unpack("<Q", raw)[0] if len(raw) == 8 else -1
        if not 0 < n <= MAX_HEADER:
            raise Meaningless(path, f"no safetensors header (its length reads {n}); the file is damaged", sample)
        text = f.read(n)
    try:
        return json.loads(text), 8 + n
    except (ValueError, RecursionError) as e:
        raise Meaningless(path, f"its safetensors header is not JSON ({e}); the file is damaged", sample) from None


def header_problem(header: object, tokens: int, layout: LayoutOf) -> str | None:
    """What differs between a sample's header and what the store declares, or None."""
    if not isinstance(header, dict):
        return "the safetensors header is not a JSON object"
    meta, want = header.get("__metadata__"), layout.metadata()
    if meta != want and not (want is None and meta in ({}, None)):
        return (f"key __metadata__ is {meta!r}, the store ({layout.describe()}) declares {want!r}; the sample was "
                "written for another store or changed")
    expected = layout.tensors(tokens)
    names = set(header) - {"__metadata__"}
    if names != set(expected):
        odd = sorted(names ^ set(expected))
        return f"keys {', '.join(odd)} differ from the store's {', '.join(expected)}"
    for name, e in expected.items():
        got = header[name]
        if got != e:
            return (f"key {name} is {got!r}, the store ({layout.describe()}, {tokens} tokens) declares "
                    f"dtype {e['dtype']}, shape {e['shape']} at data bytes {e['data_offsets']}")
    return None


def rows_problem(arrays: dict[str, np.ndarray], layout: LayoutOf, first_row: int = 0) -> str | None:
    """What the values of a sample's rows say that no sample can mean, or None. `arrays`
    holds each tensor's rows in its raw codes (layout.py's names; e4m3 as uint8, 16-bit
    floats as uint16); `first_row` numbers the rows in the messages."""
    ids, mask = arrays["input_ids"], arrays["loss_mask"]
    if ids.size and (int(ids.min()) < 0 or (layout.vocab is not None and int(ids.max()) >= layout.vocab)):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        return f"key input_ids holds token {bad}, outside the target's vocabulary of {layout.vocab}"
    if mask.size and int(mask.max()) > 1:
        return f"key loss_mask holds {int(mask.max())}, not 0 or 1"
    code = FP8_CODE if layout.fp8 else DTYPES[layout.dtype][0]
    for name in STATES:
        problem = _state_problem(name, arrays[name], code, first_row)
        if problem is None and layout.fp8:
            problem = _scale_problem(name, arrays[name], arrays[scale_name(name)], layout.dtype, first_row)
        if problem:
            return problem
    return None


def _first(mask: np.ndarray, first_row: int) -> int:
    return first_row + int(np.argwhere(mask)[0][0])


def _state_problem(name: str, values: np.ndarray, code: str, first_row: int) -> str | None:
    if code == FP8_CODE:
        bad = (values & 0x7F) == E4M3_NAN_CODE
    elif code in _INF_BITS:
        bad = (values & _INF_BITS[code]) == _INF_BITS[code]
    else:
        bad = ~np.isfinite(values)
    rows = bad.any(axis=-1)
    if rows.any():
        return (f"key {name} holds {int(bad.sum())} NaN or Inf values (first at row {_first(rows, first_row)}; masked "
                "rows are checked too): no target computes them")
    return None


def _scale_problem(name: str, codes: np.ndarray, scales: np.ndarray, captured: str, first_row: int) -> str | None:
    key, columns = scale_name(name), SCALE_COLUMNS[name]
    scales = scales.reshape(scales.shape[0], columns)
    top = LARGEST[captured] / 448.0
    odd = ~np.isfinite(scales) | (scales < 0) | (scales > top) | ((scales > 0) & (scales < FLOAT32_TINY))
    if odd.any():
        at = np.argwhere(odd)[0]
        return (f"key {key} holds {float(scales[tuple(at)])!r} at row {first_row + int(at[0])}: a scale is finite, "
                f"0 or from {FLOAT32_TINY:.3g} to {top:.3g} ({captured}'s largest value / 448)")
    magnitude = (codes & 0x7F).reshape(codes.shape[0], columns, -1).max(axis=-1)
    zero_scale_with_values = (scales == 0) & (magnitude > 0)
    if zero_scale_with_values.any():
        return (f"key {key} is 0 at row {_first(zero_scale_with_values.any(axis=-1), first_row)}, whose values are "
                "not zeros: the states would read as zeros")
    off_top = (scales > FLOAT32_TINY) & (magnitude != E4M3_MAX_CODE)
    if off_top.any():
        return (f"key {name} at row {_first(off_top.any(axis=-1), first_row)}: its largest value is not e4m3's 448, "
                f"where the quantizer puts every row's largest element; the codes or {key} changed after writing")
    return None


def check_header(path: Path, tokens: int, layout: LayoutOf, sample: int | None = None) -> int:
    """Where the data of a sample whose header is the store's starts; `Meaningless` otherwise."""
    header, start = read_header(path, sample)
    problem = header_problem(header, tokens, layout)
    if problem:
        raise Meaningless(path, problem, sample)
    return start


def check_file(path: Path, tokens: int, layout: LayoutOf, sample: int | None = None) -> None:
    """Header and every value of one sample file (what `--verify` reads); `Meaningless` otherwise."""
    start = check_header(path, tokens, layout, sample)
    try:
        data = np.memmap(path, dtype=np.uint8, mode="r", offset=start)
    except (OSError, ValueError) as e:
        raise Meaningless(path, f"cannot be read ({e})", sample) from None
    expected = layout.tensors(tokens)
    end = max(spec["data_offsets"][1] for spec in expected.values())
    if data.size != end:
        raise Meaningless(path, f"holds {data.size} data bytes, its header declares {end}; the file is cut or padded",
                          sample)
    arrays = {name: data[b:e].view(_RAW[spec["dtype"]]).reshape(spec["shape"])
              for name, spec in expected.items() for b, e in [spec["data_offsets"]]}
    problem = rows_problem(arrays, layout)
    if problem:
        raise Meaningless(path, problem, sample)

"""The client side of the SGLang dump folder: request keys, reading and validating a dump,
and the folder's occupancy.

The patched server (pipeline/patch/sglang_dump.py) writes one `<KEY>.safetensors` per request into
the dump folder, atomically (`.<KEY>.safetensors.tmp`, then rename), or `<KEY>.error` holding
one line of reason. KEY is computed by the client from the request alone, so a resumed run
finds a dump a killed run left behind and a retry never confuses two samples:
`e3-<index>-<first 16 hex of sha256(input ids as little-endian int64)>`. The names, the key
and the room rules are pipeline/dump_protocol.py, which the server reads too.

A dump is trusted only once it is read whole. Before anything moves, its safetensors header
(at most the protocol's HEADER_ALLOWANCE bytes; tensor names, dtypes, shapes, data offsets that tile the
file to its last byte) and its token ids are checked against the request (`DumpFolder.open`,
a few small preads; nothing is mapped). Its states are then streamed through one reused
buffer straight into the store (`DumpFile.chunks`), each chunk checked for NaN and Inf on
its raw bits as it passes. Anything wrong, found up front or mid-stream, is a `BadDump`,
which the client treats like a failed request (the dump deleted, the store's temp file
removed, the sample retried).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from pipeline.dump_protocol import (
    DUMP_SUFFIX,
    ERROR_ROOM,
    ERROR_SUFFIX,
    HEADER_ALLOWANCE,
    KEY_PREFIX,
    LOCK_NAME,
    dump_name,
    error_name,
)
from pipeline.store.layout import DTYPES

CHUNK_BYTES = 4 << 20
"""Size of the buffer a dump streams through into the store. Each chunk costs a handful of
calls that let go of the GIL and take it back (read, the finiteness check, the checksum,
write); with a dozen writer threads those hand-overs, not the work, set the pace, so fewer and
larger chunks scale further: on the 16-core H200 host the check and checksum on 12 threads
moved 26 GB/s through 1 MB chunks and 58 GB/s through 4 MB ones (`bench/results/
extract-sglang-h200box-16core-pinned.txt`)."""
STATES = ("hidden_state", "aux_hidden_state")


class BadDump(Exception):
    """A dump that cannot go into the store; str() names the file and what is wrong."""


_SIGN_BOUNDS = {
    "bfloat16": (np.int16, np.uint16, 0x7F80, 0xFF80),
    "float16": (np.int16, np.uint16, 0x7C00, 0xFC00),
    "float32": (np.int32, np.uint32, 0x7F800000, 0xFF800000),
}
"""Per dtype: the signed and unsigned integers of its width, and the smallest bit pattern of a
NaN or Inf with the sign bit clear and set (the exponent field all ones)."""
_TORCH_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def _finite(raw: np.ndarray, dtype: str) -> bool:
    """No NaN or Inf among the `dtype` values whose bytes are `raw` (uint8, a whole number of
    values). Read as signed integers, the positive NaNs and Infs are exactly the values at or
    above the all-ones exponent; read as unsigned, the negative ones are. So two reductions
    decide it, with no temporary: each is one numpy call that runs without the GIL, which is
    what lets the SGLang client's writer threads check dumps side by side (a masked copy
    through a scratch took eight calls a megabyte and stopped scaling past one thread)."""
    if raw.size == 0:
        return True
    signed, unsigned, positive, negative = _SIGN_BOUNDS[dtype]
    return int(raw.view(signed).max()) < positive and int(raw.view(unsigned).max()) < negative


def all_finite(x: torch.Tensor) -> bool:
    """No NaN or Inf in `x`: its exponent bits are never all ones. On the raw bits this is
    tens of times faster on CPU than torch.isfinite on bf16."""
    if x.dtype not in _TORCH_NAMES:
        return bool(torch.isfinite(x).all())
    raw = x.contiguous().reshape(-1).view(torch.uint8).numpy()
    return _finite(raw, _TORCH_NAMES[x.dtype])


class ChunkBuffer:
    """The reused buffer a dump streams through (CHUNK_BYTES). One per concurrent store write,
    kept for the whole run: no allocation, no page faults and no unmapping per dump."""

    def __init__(self, nbytes: int | None = None) -> None:
        nbytes = CHUNK_BYTES if nbytes is None else nbytes
        if nbytes <= 0 or nbytes % 8:
            raise ValueError(f"a chunk buffer takes a positive multiple of 8 bytes, not {nbytes}")
        self.data = bytearray(nbytes)
        self.view = memoryview(self.data)
        self._raw = np.frombuffer(self.data, dtype=np.uint8)

    def finite(self, n: int, dtype: str) -> bool:
        """The first `n` bytes hold no NaN or Inf of `dtype`."""
        return _finite(self._raw[:n], dtype)


def _read_into(path: Path, fd: int, view: memoryview, offset: int) -> None:
    """Fill `view` from `fd` at `offset`; BadDump when the file ends first or cannot be read."""
    done = 0
    while done < len(view):
        try:
            n = os.preadv(fd, [view[done:]], offset + done)
        except OSError as e:
            raise BadDump(f"{path}: cannot read it: {e.strerror or e}") from None
        if n <= 0:
            raise BadDump(f"{path}: ends at byte {offset + done}, before the end its header gives (cut while read?)")
        done += n


class DumpFile:
    """An open dump whose header and token ids match its request (DumpFolder.open); close it
    (or use it as a context manager) when done."""

    def __init__(self, path: Path, fd: int, dtype: str, input_ids: bytes, states: list[tuple[str, int, int]]) -> None:
        self.path, self.fd, self.dtype = path, fd, dtype
        self.input_ids = input_ids  # the request's token ids as the store holds them (int64 LE)
        self.states = states  # (name, file offset, bytes) of hidden_state, then aux_hidden_state

    def chunks(self, buf: ChunkBuffer) -> Iterator[memoryview]:
        """hidden_state's bytes then aux_hidden_state's, read piece by piece into `buf`, each
        piece checked finite before it is handed out and overwritten by the next: consume
        each before asking for the next. Raises BadDump (NaN/Inf, a short or failed read)."""
        for name, _start, _length in self.states:
            yield from self.state_chunks(name, buf)

    def state_chunks(self, name: str, buf: ChunkBuffer, whole_rows: bool = False) -> Iterator[memoryview]:
        """chunks() of one state; with `whole_rows` each piece ends on a token's row, as the
        fp8 store's per-token quantization needs (pipeline/store/fp8.py, quantize_stream)."""
        _name, start, length = next(s for s in self.states if s[0] == name)
        step = len(buf.view)
        if whole_rows:
            row = length // max(len(self.input_ids) // 8, 1)  # check_dump: length is tokens x row
            step -= step % row if row else 0
            if step <= 0:
                raise BadDump(f"{self.path}: a row of {name} takes {row} bytes, more than the {len(buf.view)}-byte "
                              "buffer it streams through")
        offset, end = start, start + length
        while offset < end:
            view = buf.view[: min(step, end - offset)]
            _read_into(self.path, self.fd, view, offset)
            if not buf.finite(len(view), self.dtype):
                raise BadDump(f"{self.path}: {name} holds NaN or Inf (in its bytes "
                              f"{offset - start}..{offset - start + len(view)})")
            yield view
            offset += len(view)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> DumpFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_dump(path: Path, fd: int, input_ids: list[int], hidden: int, dtype: str) -> DumpFile:
    """The header and token ids of the dump open on `fd`, checked against the request: the
    DumpFile to stream its states from. Raises BadDump naming `path` and what is wrong."""
    size = os.fstat(fd).st_size
    if size < 8:
        raise BadDump(f"{path}: {size} bytes, too short for a safetensors file")
    prefix = bytearray(8)
    _read_into(path, fd, memoryview(prefix), 0)
    n = struct.unpack("<Q", prefix)[0]
    if n > HEADER_ALLOWANCE:
        raise BadDump(f"{path}: its safetensors header takes {n} bytes, more than the {HEADER_ALLOWANCE} a dump's "
                      "may: not a dump written by pipeline.patch.sglang_dump")
    if 8 + n > size:
        raise BadDump(f"{path}: truncated: {size} bytes, less than its {n}-byte header needs")
    raw = bytearray(n)
    _read_into(path, fd, memoryview(raw), 8)
    try:
        meta = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        meta = None
    if not isinstance(meta, dict):
        raise BadDump(f"{path}: its safetensors header is not a JSON object")
    t = len(input_ids)
    code, width = DTYPES[dtype]
    expect = {"input_ids": ([t], "I64", 8 * t), "hidden_state": ([t, hidden], code, t * hidden * width),
              "aux_hidden_state": ([t, 3 * hidden], code, 3 * t * hidden * width)}
    names = set(meta) - {"__metadata__"}
    if names != set(expect):
        raise BadDump(f"{path}: holds tensors {sorted(names)}, expected {sorted(expect)}")
    begins = {}
    for name, (shape, dt, nbytes) in expect.items():
        entry = meta[name] if isinstance(meta[name], dict) else {}
        got_shape, got_dt = entry.get("shape"), entry.get("dtype")
        if got_shape != shape or got_dt != dt:
            shown = tuple(got_shape) if isinstance(got_shape, list) else got_shape
            raise BadDump(f"{path}: {name} is {shown} {got_dt}, expected {tuple(shape)} {dt} "
                          f"(request of {t} tokens, hidden size {hidden})")
        offsets = entry.get("data_offsets")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(type(o) is int for o in offsets) or offsets[1] - offsets[0] != nbytes):
            raise BadDump(f"{path}: {name} has data_offsets {offsets}, expected [begin, begin + {nbytes}]")
        begins[name] = offsets[0]
    end = 0
    for name in sorted(begins, key=begins.__getitem__):
        if begins[name] != end:
            raise BadDump(f"{path}: its tensors' data_offsets overlap or leave a gap ({name} begins at byte "
                          f"{begins[name]} of the data, not {end})")
        end += expect[name][2]
    whole = 8 + n + end
    if size != whole:
        raise BadDump(f"{path}: truncated: {size} bytes, its header says {whole}" if size < whole else
                      f"{path}: {size} bytes, {size - whole} more than its header says")
    ids = bytearray(8 * t)
    _read_into(path, fd, memoryview(ids), 8 + n + begins["input_ids"])
    want = struct.pack(f"<{t}q", *input_ids)
    if ids != want:
        got, exp = np.frombuffer(ids, "<i8"), np.frombuffer(want, "<i8")
        first = int(np.flatnonzero(got != exp)[0])
        raise BadDump(f"{path}: input_ids differ from the request's at position {first} "
                      f"({int(got[first])} instead of {int(exp[first])})")
    states = [(name, 8 + n + begins[name], expect[name][2]) for name in STATES]
    return DumpFile(path, fd, dtype, want, states)


class DumpFolder:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def dump_path(self, key: str) -> Path:
        return self.path / dump_name(key)

    def error_path(self, key: str) -> Path:
        return self.path / error_name(key)

    def take_error(self, key: str) -> str | None:
        """The reason in `<KEY>.error`, deleting the file; None when there is none."""
        p = self.error_path(key)
        try:
            with open(p, "rb") as f:
                text = f.read(ERROR_ROOM).decode("utf-8", "replace").strip()
        except FileNotFoundError:
            return None
        p.unlink(missing_ok=True)
        return text.splitlines()[0] if text else "the server wrote an empty .error file"

    def discard(self, key: str) -> None:
        self.dump_path(key).unlink(missing_ok=True)
        self.error_path(key).unlink(missing_ok=True)

    def occupancy(self) -> tuple[int, int]:
        """(files, bytes) in the folder now, temp files of writes in progress included."""
        files = total = 0
        try:
            with os.scandir(self.path) as it:
                for entry in it:
                    try:
                        if entry.is_file(follow_symlinks=False) and entry.name != LOCK_NAME:  # always empty
                            files += 1
                            total += entry.stat(follow_symlinks=False).st_size
                    except OSError:
                        continue  # deleted while we looked
        except FileNotFoundError:
            pass
        return files, total

    def dump_keys(self) -> list[str]:
        """Keys of the finished dumps of ours in the folder."""
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return []
        return [n[: -len(DUMP_SUFFIX)] for n in names if n.startswith(KEY_PREFIX) and n.endswith(DUMP_SUFFIX)]

    def sweep(self, keep: set[str]) -> tuple[int, int]:
        """Delete dumps of ours (KEY prefix) whose key is not in `keep`, and every .error
        file of ours: a killed run's leftovers would otherwise hold the budget forever (a kept
        dump is reused by the next attempt for its key). Temp files of writes in progress are
        the server's and stay. Returns (files, bytes) deleted."""
        files = total = 0
        try:
            entries = list(os.scandir(self.path))
        except FileNotFoundError:
            return 0, 0
        for entry in entries:
            name = entry.name
            if not name.startswith(KEY_PREFIX):
                continue
            for suffix in (DUMP_SUFFIX, ERROR_SUFFIX):
                if name.endswith(suffix) and (suffix == ERROR_SUFFIX or name[: -len(suffix)] not in keep):
                    try:
                        size = entry.stat(follow_symlinks=False).st_size
                        os.unlink(entry.path)
                    except FileNotFoundError:
                        continue
                    files += 1
                    total += size
        return files, total

    def open(self, key: str, input_ids: list[int], hidden: int, dtype: str) -> DumpFile:
        """The dump of `key`, its header and token ids checked against the request (check_dump),
        open for streaming; raises BadDump (FileNotFoundError when absent)."""
        path = self.dump_path(key)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return check_dump(path, fd, input_ids, hidden, dtype)
        except BaseException:
            os.close(fd)
            raise

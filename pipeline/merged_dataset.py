"""The merged dataset as extraction and online training read it: one pass to index, then
records by offset.

A production dataset holds millions of 2k-token records, far more than fits in memory as
Python lists, so the first pass keeps only each record's byte offset and token count (and
hashes the file on the way, so the store can name exactly what it was built from); the
loader then reads the few records of the next batches back by offset.

Offsets are only true of the file they were taken from. A merge that rewrote the file in
place mid-run used to hand training whatever the old offsets then held, then a worker's
traceback. So the index pins the file: its size and modification time (`check_unchanged`,
which a reader asks before each read window) and a crc32 of every indexed line, which
`RecordReader.read` checks before it parses one. Either change is a BadInput naming the file,
never a record read from stale offsets.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pipeline.program_edge import BadInput


@dataclass(frozen=True)
class Record:
    index: int
    id: str
    input_ids: list[int]
    loss_mask: list[int]


@dataclass
class DatasetIndex:
    path: Path
    offsets: array  # byte offset of record i
    lengths: array  # tokens of record i after --max-len truncation
    sha256: str
    max_len: int | None
    crcs: array  # crc32 of record i's line as indexed
    pin: tuple[int, int, int]  # (size, mtime_ns, inode) of the file as indexed

    def __len__(self) -> int:
        return len(self.offsets)

    def check_unchanged(self) -> None:
        """BadInput naming the file when it is not the file indexed: its size, modification
        time or inode differ (rewritten, appended to, replaced)."""
        try:
            now = _pin(os.stat(self.path))
        except OSError as e:
            raise BadInput(f"{self.path}: cannot be read any more ({e.strerror}); it was indexed at the start of this "
                           "run and must stay until the run ends") from None
        if now != self.pin:
            changed = ", ".join(f"{what} {a} -> {b}" for what, a, b in zip(("size", "mtime_ns", "inode"), self.pin, now)
                                if a != b)
            raise _changed(self.path, changed)

    @property
    def total_tokens(self) -> int:
        return sum(self.lengths)

    def open(self) -> RecordReader:
        return RecordReader(self)


def _pin(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_size, st.st_mtime_ns, st.st_ino


def _changed(path: Path, what: str) -> BadInput:
    return BadInput(f"{path}: changed since this run indexed it ({what}); its records are no longer where the "
                    "index says, so nothing more is read from it: let the stage that rewrites it finish, then rerun "
                    "(a run with --resume continues from its last checkpoint)")


def _bad(path: Path, line: int, what: str) -> BadInput:
    return BadInput(f"{path}:{line}: {what}; rerun pipeline.merge or fix the record")


def _check(obj: object, path: Path, line: int, vocab_size: int | None) -> tuple[str, int]:
    if not isinstance(obj, dict):
        raise _bad(path, line, "record is not a JSON object")
    rid = obj.get("id")
    if not isinstance(rid, str):
        raise _bad(path, line, f"key 'id' must be a string, got {rid!r:.40}")
    ids = obj.get("input_ids")
    mask = obj.get("loss_mask")
    if not isinstance(ids, list) or not ids:
        raise _bad(path, line, "key 'input_ids' must be a non-empty list of token ids")
    if not isinstance(mask, list) or len(mask) != len(ids):
        n = len(mask) if isinstance(mask, list) else type(mask).__name__
        raise _bad(path, line, f"key 'loss_mask' must be a list as long as input_ids ({len(ids)}), got {n}")
    if not all(type(v) is int for v in ids):
        raise _bad(path, line, "key 'input_ids' holds a value that is not an integer")
    lo, hi = min(ids), max(ids)
    if lo < 0 or (vocab_size is not None and hi >= vocab_size):
        bad = lo if lo < 0 else hi
        raise _bad(path, line, f"key 'input_ids' holds token {bad}, outside the target's vocabulary of {vocab_size}")
    if not set(mask) <= {0, 1}:
        raise _bad(path, line, "key 'loss_mask' must hold only 0 and 1")
    return rid, len(ids)


MAX_LINE_BYTES = 64 << 20  # a record of a million tokens is about 12 MB; past this it is not merge's


def _refuse_not_a_file(path: Path) -> None:
    if path.is_dir():
        raise BadInput(f"dataset {path} is a folder, not pipeline.merge's JSONL file (--data); "
                       "a hidden-state store is passed as --store")
    if not path.exists():
        raise BadInput(f"dataset {path} does not exist (--data); run pipeline.merge first")
    if not path.is_file():
        raise BadInput(f"dataset {path} is not a regular file (a FIFO or a device?) (--data); "
                       "pass the JSONL file pipeline.merge wrote")


def index_dataset(path: Path, max_len: int | None = None, vocab_size: int | None = None) -> DatasetIndex:
    """Validate every record and index it; BadInput names the file, line and key at fault."""
    path = Path(path)
    _refuse_not_a_file(path)
    offsets, lengths, crcs = array("q"), array("l"), array("I")
    digest = hashlib.sha256()
    offset = 0
    with open(path, "rb") as f:
        pin = _pin(os.fstat(f.fileno()))
        for lineno, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), start=1):
            if len(raw) > MAX_LINE_BYTES:
                raise _bad(path, lineno, f"a line longer than {MAX_LINE_BYTES >> 20} MiB: not a record merge writes")
            digest.update(raw)
            if raw.strip():
                try:
                    obj = json.loads(raw)
                except json.JSONDecodeError as e:
                    raise _bad(path, lineno, f"not valid JSON ({e.msg})") from None
                _, n = _check(obj, path, lineno, vocab_size)
                offsets.append(offset)
                lengths.append(min(n, max_len) if max_len else n)
                crcs.append(zlib.crc32(raw))
            offset += len(raw)
    if not offsets:
        raise BadInput(f"dataset {path} holds no records (--data); run pipeline.merge first")
    index = DatasetIndex(path=path, offsets=offsets, lengths=lengths, sha256=digest.hexdigest(), max_len=max_len,
                         crcs=crcs, pin=pin)
    index.check_unchanged()  # not written to while it was read
    return index


class RecordReader:
    """Reads records back by index, each checked against its line's crc32 as indexed; one per
    loader thread (a file handle is not shareable)."""

    def __init__(self, index: DatasetIndex) -> None:
        self._index = index
        self._f: BinaryIO = open(index.path, "rb")  # noqa: SIM115 - the reader's for its life (close())

    def read(self, i: int) -> Record:
        self._f.seek(self._index.offsets[i])
        raw = self._f.readline(MAX_LINE_BYTES + 1)
        if zlib.crc32(raw) != self._index.crcs[i]:
            raise _changed(self._index.path, f"record {i} at byte {self._index.offsets[i]} is not the line indexed")
        obj = json.loads(raw)
        n = self._index.lengths[i]
        return Record(index=i, id=obj["id"], input_ids=obj["input_ids"][:n], loss_mask=obj["loss_mask"][:n])

    def close(self) -> None:
        self._f.close()

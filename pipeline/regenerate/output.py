"""The output file: whole lines only, and what a rerun finds already done.

Lines are appended with one write() and one fsync per flush, so a kill leaves at most one
torn last line; the next run cuts it off before reading the ids it holds. A record is in
the output only once: resume never regenerates an id that is there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pipeline.atomic_io import write_all

from .errors import BadInput, StoppedShort

MAX_LINE = 64 * 1024 * 1024  # one output record; past it the file is not ours
_BLOCK = 1 << 20


def repair_tail(path: Path) -> int:
    """Cut a torn last line (no newline) off `path`; the bytes removed."""
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        pos = size
        while pos > 0:
            step = min(_BLOCK, pos)
            f.seek(pos - step)
            block = f.read(step)
            nl = block.rfind(b"\n")
            if nl >= 0:
                keep = pos - step + nl + 1
                break
            pos -= step
        else:
            keep = 0
        if keep < size:
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())
        return size - keep


def done_ids(path: Path) -> tuple[set[str], int]:
    """(the ids already in `path`, its line count), read line by line."""
    ids: set[str] = set()
    lines = 0
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if len(raw) > MAX_LINE:
                raise BadInput(f"{path}:{n}: a line of {len(raw)} bytes; this is not a regenerate output "
                               "(choose another --out)")
            try:
                rid = json.loads(raw)["id"]
            except (ValueError, KeyError, TypeError):
                raise BadInput(f"{path}:{n}: not a regenerate record (no JSON object with an 'id'); "
                               "choose another --out or delete this file") from None
            if not isinstance(rid, str):
                raise BadInput(f"{path}:{n}: field 'id' must be a string, got {rid!r}")
            if rid in ids:
                raise BadInput(f"{path}:{n}: id {rid!r} is there twice; this file was not written by one "
                               "regenerate run; choose another --out")
            ids.add(rid)
            lines = n
    return ids, lines


class Appender:
    """Appends whole records; `flush` makes them durable with one write and one fsync.

    A SIGTERM raises in the main thread wherever it is, inside a flush too (between the write and
    the fsync, say), and the stage's `finally` flushes once more. So a flush works out from the
    file's size what an interrupted call already wrote and writes only the rest: a record is
    never written twice."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._pending: list[bytes] = []
        self._size = os.fstat(self._fd).st_size  # bytes of records already counted
        self.records = 0
        self.bytes = 0

    def add(self, record: dict) -> None:
        self._pending.append((json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode())

    @property
    def pending(self) -> int:
        return len(self._pending)

    def flush(self) -> int:
        if not self._pending:
            return 0
        data = b"".join(self._pending)
        try:
            on_disk = os.fstat(self._fd).st_size - self._size
            if on_disk < len(data):
                write_all(self._fd, data[max(on_disk, 0):])
            os.fsync(self._fd)
        except OSError as e:
            if e.errno in (28, 122):  # ENOSPC, EDQUOT
                raise StoppedShort(f"the disk holding {self.path} is full ({e.strerror}); the records written "
                                   "so far are kept; free space and rerun the same command to resume") from None
            raise
        n = len(self._pending)
        # one statement without calls: a signal handler cannot run between its stores
        self._pending, self._size, self.records, self.bytes = [], self._size + len(data), self.records + n, \
            self.bytes + len(data)
        return n

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

"""The output file: whole lines only, and what a rerun finds already done.

Lines are appended with one write() and one fsync per flush, so a kill leaves at most one
torn last line; the next run cuts it off before reading the ids it holds. A record is in
the output only once: resume never regenerates an id that is there. Everything here works on
the one descriptor the stage opened (pipeline.output_guard.open_output: no symlink followed),
never on the path again, so a path swapped while the stage waited is never cut or appended
to; and a record line is never longer than the resume reads back (MAX_LINE).
"""

from __future__ import annotations

import json
import math
import os
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path

from pipeline.atomic_io import write_all, write_bytes_atomic
from pipeline.output_guard import open_output, refuse_foreign_stats, refuse_replaced
from pipeline.regenerate.errors import BadInput, Failure, StoppedShort

MAX_LINE = 64 * 1024 * 1024  # one output record; past it the file is not ours
_BLOCK = 1 << 20


class TooLarge(Failure):
    """A record whose line would be longer than a resume reads back."""

    def __init__(self, size: int) -> None:
        super().__init__("record_too_large", f"a record of {size} bytes, more than the {MAX_LINE} a line may hold")


def repair_tail(fd: int) -> int:
    """Cut a torn last line (no newline) off the file open on `fd`; the bytes removed."""
    size = os.fstat(fd).st_size
    pos = size
    keep = 0
    while pos > 0:
        step = min(_BLOCK, pos)
        block = os.pread(fd, step, pos - step)
        nl = block.rfind(b"\n")
        if nl >= 0:
            keep = pos - step + nl + 1
            break
        pos -= step
    if keep < size:
        os.ftruncate(fd, keep)
        os.fsync(fd)
    return size - keep


def done_ids(fd: int, path: Path, each: Callable[[int, dict], None] | None = None) -> tuple[set[str], int]:
    """(the ids already in the file open on `fd`, its line count), read line by line; `path` names it.
    `each(line, record)` sees every record read."""
    ids: set[str] = set()
    lines = 0
    with os.fdopen(os.dup(fd), "rb") as f:
        f.seek(0)
        for n, raw in enumerate(iter(lambda: f.readline(MAX_LINE + 1), b""), 1):
            if len(raw) > MAX_LINE:
                raise BadInput(f"{path}:{n}: a line of {len(raw)} bytes; this is not a regenerate output "
                               "(choose another --out)")
            try:
                rec = json.loads(raw)
                rid = rec["id"]
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
            if each is not None:
                each(n, rec)
    return ids, lines


class Appender:
    """Appends whole records; `flush` makes them durable with one write and one fsync.

    A SIGTERM raises in the main thread wherever it is, inside a flush too (between the write and
    the fsync, say), and the stage's `finally` flushes once more. So a flush works out from the
    file's size what an interrupted call already wrote and writes only the rest: a record is
    never written twice."""

    def __init__(self, path: Path, fd: int | None = None) -> None:
        """`fd`: the output, opened once by output_guard.open_output (default: opened here the
        same way); the Appender closes it."""
        self.path = path
        if fd is None:
            fd = open_output(path, create=False)
        self._fd = fd if fd is not None else open_output(path, create=True)
        self._pending: list[bytes] = []
        self._size = os.fstat(self._fd).st_size  # bytes of records already counted
        self.records = 0
        self.bytes = 0

    def add(self, record: dict) -> None:
        """Queue one record; TooLarge (the record's failure) when its line would pass MAX_LINE."""
        try:
            line = (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        except UnicodeEncodeError:
            raise Failure("bad_text", "the record holds a lone surrogate: not UTF-8 text") from None
        if len(line) > MAX_LINE:
            raise TooLarge(len(line))
        self._pending.append(line)

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

    def keep_input_order(self, input_ids: Iterable[str]) -> int:
        """Put the flushed output back in input order when a rerun appended a record that comes
        before records already there (one that failed last time and was retried); the number of
        lines that moved (0: in order, untouched). Whole lines move, none changes; ids the input
        no longer holds (a smaller --limit) keep their order after the rest. Written to a temp
        file and renamed over the path, never through a link: a kill leaves the old file or the new."""
        index: list[tuple[str, int, int]] = []  # (id, offset, length) in file order
        with os.fdopen(os.dup(self._fd), "rb") as f:
            f.seek(0)
            offset = 0
            for raw in iter(lambda: f.readline(MAX_LINE + 1), b""):
                index.append((json.loads(raw)["id"], offset, len(raw)))
                offset += len(raw)
        where: dict[str, float] = dict.fromkeys((rid for rid, _, _ in index), math.inf)
        for i, rid in enumerate(input_ids):
            if where.get(rid) == math.inf:
                where[rid] = i
        keys = [(where[rid], k) for k, (rid, _, _) in enumerate(index)]
        order = sorted(range(len(index)), key=keys.__getitem__)
        moved = sum(k != i for i, k in enumerate(order))
        if moved:
            refuse_replaced(self._fd, self.path)
            write_bytes_atomic(self.path, (os.pread(self._fd, index[k][2], index[k][1]) for k in order),
                               tag=f".{os.getpid()}.{secrets.token_hex(3)}")
        return moved

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def open_appender(out: Path, stats: Path, fd: int | None, stats_keys: tuple[str, ...], writer: str) -> Appender:
    """The output ready to append to, once the target has loaded: created (with its and the
    stats' folders) if it was absent, refused if its path was swapped meanwhile or the stats
    file is no longer the writer's own (the target may take minutes to load)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    stats.parent.mkdir(parents=True, exist_ok=True)
    if fd is None:
        fd = open_output(out, create=True)
    refuse_replaced(fd, out)
    refuse_foreign_stats(stats, stats_keys, writer)
    return Appender(out, fd)

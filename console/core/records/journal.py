"""The record of what happened and who decided it: `<state>/journal.jsonl`.

Several processes append to it (the console, the CLI, every launcher), and any of them
may be killed mid-write. Each record is one line sent with a single write() on an
O_APPEND descriptor and fsynced before `append` returns, so a record that was reported
written survives a crash, records never interleave, and the worst a crash leaves is a
torn last line, which readers skip.

Reading trusts nothing: the journal is read from its end backwards by offsets (the newest
records of a 1 GB journal cost what they weigh), within a byte budget unless the caller
asks for all of it, from a regular file only; a line whose fields have the wrong types (a
text `t`, a `t` of 1e308, `results: ["x"]`) is skipped and counted, never handed to a view.
"""

from __future__ import annotations

import getpass
import json
import math
import os
import socket
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

from console.core.text.terminal_text import strip_format
from pipeline.bounded_read import open_regular

FILE = "journal.jsonl"
TAIL_BYTES = 16 << 20  # what a bounded read looks at: the newest records, never the whole history
MAX_LINE = 1 << 20  # a longer line is not a record the core wrote
MAX_T = 1e11  # a record time past the year 5000 is not a time
_BLOCK = 1 << 20

# Events the core writes; others are allowed, these are the ones readers can rely on.
EVENTS = ("run_started", "run_ended", "checks", "override", "stop", "confirm", "verify")


def user_name() -> str:
    """Who ran it, for the journal and a run's record: the login name, else the uid (a
    container's user often has no passwd entry)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Create the state dir (and parents) owner-only: it holds commands, environments and
    evidence. An existing state dir of ours (one that already holds a journal, runs or locks)
    is tightened to 0700; any other existing folder (`state_dir: /tmp`) is left as it is."""
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        st = p.stat()
        ours = (p / FILE).exists() or (p / "runs").is_dir() or (p / "locks").is_dir()
        if ours and st.st_uid == os.getuid() and st.st_mode & 0o077 and not st.st_mode & stat.S_ISVTX:
            os.chmod(p, 0o700)
    except OSError:
        pass
    return p


def _readable(value: Any) -> Any:
    """A record with its text stripped of Unicode format characters (bidi overrides):
    an override reason must read the same in every view as in the file."""
    if isinstance(value, str):
        return strip_format(value)
    if isinstance(value, dict):
        return {k: _readable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_readable(v) for v in value]
    return value


class Journal:
    def __init__(self, state_dir: str | os.PathLike[str], redactor: Any = None) -> None:
        """`redactor` (redaction.Redactor) hides `${env:...}` values in every record."""
        self.state_dir = Path(state_dir)
        self.redactor = redactor

    @property
    def path(self) -> Path:
        return self.state_dir / FILE

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        """Write one record durably and return it. `t` is set here; `user` and `host` are
        filled in unless the caller names them (an override records who gave it)."""
        rec: dict[str, Any] = {"t": round(time.time(), 3), "event": event}
        rec.update((k, v) for k, v in fields.items() if k != "t")
        if self.redactor:
            rec = self.redactor.obj(rec)
        rec.setdefault("user", user_name())
        rec.setdefault("host", socket.gethostname())
        line = json.dumps(rec, separators=(",", ":"), default=str, ensure_ascii=False) + "\n"
        data = line.encode("utf-8")
        private_dir(self.state_dir)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                # A writer died mid-line: start on a fresh line so this record stays whole.
                data = b"\n" + data
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        return rec

    def read(self, phase: str | None = None, limit: int | None = None,
             events: set[str] | None = None, max_bytes: int | None = TAIL_BYTES) -> list[dict[str, Any]]:
        """Records oldest first, optionally only one phase's or some events', at most the
        last `limit`, from the last `max_bytes` of the file (None: all of it). A line that
        is not a record (a torn write, a field of the wrong type) is skipped."""
        return self.scan(phase, limit, events, max_bytes).records

    def scan(self, phase: str | None = None, limit: int | None = None,
             events: set[str] | None = None, max_bytes: int | None = TAIL_BYTES) -> Scan:
        """`read`, and how many lines were skipped. Reads from the end backwards and stops at
        `limit` matches, so the newest records of a 1 GB journal cost what they weigh."""
        out = Scan()
        if limit is not None and limit <= 0:
            return out
        try:
            fd = open_regular(self.path)
        except FileNotFoundError:
            return out
        try:
            size = os.fstat(fd).st_size
            budget = size if max_bytes is None else min(size, max_bytes)
            match = _matcher(phase, events, out)
            for _, line in _lines_backward(fd, size, budget, out):
                rec = match(line)
                if rec is not None:
                    out.records.append(rec)
                    if limit is not None and len(out.records) >= limit:
                        break
        finally:
            os.close(fd)
        out.records.reverse()
        return out

    def stream(self, phase: str | None = None, limit: int | None = None, events: set[str] | None = None,
               counts: Scan | None = None) -> Iterator[dict[str, Any]]:
        """Every record (or the last `limit`) oldest first, one at a time, up to the size the file
        had when reading began: memory is a block and a line whatever the journal weighs, so
        `eagle3 journal` prints a 1 GB journal as it reads it. With `limit`, a backward pass
        that only counts finds where the last `limit` matches begin. `counts.skipped` counts
        the lines that are not records."""
        counts = counts if counts is not None else Scan()
        if limit is not None and limit <= 0:
            return
        try:
            fd = open_regular(self.path)
        except FileNotFoundError:
            return
        try:
            size = os.fstat(fd).st_size
            start = 0
            if limit is not None:
                start = _start_of_last(fd, size, limit, _matcher(phase, events, Scan()))
            yield from filter(None, map(_matcher(phase, events, counts), _lines_forward(fd, start, size, counts)))
        finally:
            os.close(fd)


@dataclass
class Scan:
    records: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0  # lines that are not records: torn, over-long, or fields of the wrong type
    cut: bool = False  # the read stopped at its byte budget before the start of the file


def _matcher(phase: str | None, events: set[str] | None, scan: Scan) -> Callable[[bytes], dict[str, Any] | None]:
    """The record a line holds when it is one of `phase`'s and `events`' (None otherwise); a
    line that could match but is not a record counts in `scan.skipped`. Byte tests first, so
    most lines of other phases are never parsed."""
    keys = [phase.encode()] if phase is not None else []
    wanted = [e.encode() for e in events] if events is not None else None

    def match(line: bytes) -> dict[str, Any] | None:
        if not line.strip() or any(k not in line for k in keys) \
                or (wanted is not None and not any(w in line for w in wanted)):
            return None
        rec = _record(line)
        if rec is None:
            scan.skipped += 1
            return None
        if (phase is not None and rec.get("phase") != phase) or (events is not None and rec["event"] not in events):
            return None
        return rec

    return match


def _start_of_last(fd: int, size: int, limit: int, match: Callable[[bytes], dict[str, Any] | None]) -> int:
    """The offset of the first of the last `limit` lines `match` accepts (0 when there are fewer)."""
    found = 0
    for offset, line in _lines_backward(fd, size, size, Scan()):
        if match(line) is not None:
            found += 1
            if found == limit:
                return offset
    return 0


def _lines_forward(fd: int, start: int, end: int, scan: Scan) -> Iterator[bytes]:
    """The complete lines between `start` (a line start) and `end`, oldest first; a last line
    still being written is left out, and a line over MAX_LINE is skipped and counted."""
    pos, head, skipping = start, b"", False
    while pos < end:
        block = os.pread(fd, min(_BLOCK, end - pos), pos)
        if not block:
            return  # cut short under us
        pos += len(block)
        parts = block.split(b"\n")
        for part in parts[:-1]:
            if not skipping:
                line = head + part
                if len(line) <= MAX_LINE:
                    yield line
                else:
                    scan.skipped += 1
            head, skipping = b"", False
        if not skipping:
            head += parts[-1]
            if len(head) > MAX_LINE:
                scan.skipped += 1
                head, skipping = b"", True


def _lines_backward(fd: int, size: int, budget: int, scan: Scan) -> Iterator[tuple[int, bytes]]:
    """(offset, line) for the complete lines of the last `budget` bytes, newest first; a last
    line still being written (no newline yet) is left out, and a line over MAX_LINE is skipped
    and counted."""
    pos, tail, skipping = size, b"", False
    if size and os.pread(fd, 1, size - 1) != b"\n":
        skipping = True  # the line in flight: not a record yet
    while pos > size - budget:
        n = min(_BLOCK, pos - (size - budget))
        pos -= n
        parts = os.pread(fd, n, pos).split(b"\n")
        if len(parts) > 1:
            starts = list(accumulate((len(p) + 1 for p in parts[:-1]), initial=pos))
            if not skipping:
                yield starts[-1], parts[-1] + tail
            skipping = False
            yield from zip(reversed(starts[1:-1]), reversed(parts[1:-1]))
            tail = parts[0]
        elif not skipping:
            tail = parts[0] + tail
        if len(tail) > MAX_LINE and not skipping:
            scan.skipped += 1
            tail, skipping = b"", True
    if pos == 0 and not skipping:
        yield 0, tail
    scan.cut = pos > 0


def _record(line: bytes) -> dict[str, Any] | None:
    """The record a line holds, or None when it is not one a reader can trust."""
    try:
        rec = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(rec, dict) or "t" not in rec or "event" not in rec \
            or not all(_FIELDS[k](v) for k, v in rec.items() if k in _FIELDS):
        return None
    # Only a line with non-ASCII bytes or a \u escape can hold a format character.
    return rec if line.isascii() and b"\\u" not in line else _readable(rec)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _int_or_none(x: Any) -> bool:
    return x is None or (isinstance(x, int) and not isinstance(x, bool))


def _text_or_none(x: Any) -> bool:
    return x is None or isinstance(x, str)


# The fields readers use, and what each must be: a record with any other shape is skipped.
_FIELDS: dict[str, Callable[[Any], bool]] = {
    "t": lambda x: _number(x) and 0 <= x < MAX_T,
    "event": lambda x: isinstance(x, str),
    "phase": _text_or_none,
    "run_id": _text_or_none,
    **dict.fromkeys(("user", "host", "check", "reason", "message", "summary", "text", "state", "error", "verify"),
                    _text_or_none),
    **dict.fromkeys(("code", "exit_code", "signal"), _int_or_none),
    **dict.fromkeys(("duration_s", "silent_s"), lambda x: x is None or _number(x)),
    "results": lambda x: isinstance(x, list) and all(isinstance(r, dict) and isinstance(r.get("name"), str)
                                                     and isinstance(r.get("status", ""), str) for r in x),
    "set": lambda x: isinstance(x, dict) and all(isinstance(v, str) for v in x.values()),
    "cleared": lambda x: isinstance(x, list) and all(isinstance(v, str) for v in x),
}

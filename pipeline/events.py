"""The events protocol between a phase and the console (docs/internals.md, "Events protocol").

A phase appends one JSON object per line to the file named by $EAGLE3_EVENTS; with the
variable unset it writes nothing, so a stage run by hand pays nothing. A missing folder on
that path is created; where the file cannot be opened or written (a parent that is a file,
no permission, a full disk) the stage says so once on stderr and goes on without events:
progress reporting never fails the work it reports on. Each line is
written with a single write() on an O_APPEND descriptor so concurrent writers (ranks of
a sharded run) never interleave within a line. The console imports this module to read
the same format back; it is the only module of `pipeline` the console may import.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Iterator, Sequence

ENV_VAR = "EAGLE3_EVENTS"
KINDS = ("progress", "metric", "artifact", "message")
MAX_LINE = 64 * 1024          # bytes in one event line; longer ones are skipped
MAX_READ = 1024 * 1024        # bytes parsed per read_events call (one console poll)
_SKIP_LIMIT = 64 * 1024 * 1024  # bytes scanned per call to get past an over-long line
_SKIP_BLOCK = 1024 * 1024


# -- Sizes -----------------------------------------------------------------------------
# Byte sizes as operators write them (configs, --reserve) and as both sides print them
# (artifact bytes, the console's panels, a stage's progress line). They live here, in the
# one module both sides may import, so `1.001GB` means the same bytes everywhere.
# Units follow GNU coreutils: a unit ending in "B" after a letter is SI (KB = 1000,
# GB = 10**9), a unit with "i" is IEC (KiB = 1024; "Gi" as Kubernetes writes it too), and
# a bare letter is IEC (512M = 512 MiB, as dd and docker read it); case-insensitive; a bare
# number is bytes. Printed sizes are SI with one decimal ("412.3 GB"), as `df -H` shows.

_SIZE_PREFIXES = "kmgtpe"

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)

SIZE_HINT = "use a number of bytes or a number with a unit: 500GB, 1.5TiB, 512M"


def _multiplier(unit: str) -> int | None:
    u = unit.lower()
    if u in ("", "b"):
        return 1
    p = u[0]
    if p not in _SIZE_PREFIXES:
        return None
    power = _SIZE_PREFIXES.index(p) + 1
    rest = u[1:]
    if rest == "b":
        return 1000**power
    if rest in ("", "i", "ib"):
        return 1024**power
    return None


def parse_size(s: str | int | float) -> int:
    """Bytes for "500GB", "1.5TB", "10GiB", "512M", 1024 or "0"; ValueError otherwise."""
    if isinstance(s, bool):
        raise ValueError(f"{s!r} is not a size: {SIZE_HINT}")
    if isinstance(s, int):
        if s < 0:
            raise ValueError(f"size {s} is negative: {SIZE_HINT}")
        return s
    if isinstance(s, float):
        if not math.isfinite(s) or s < 0:
            raise ValueError(f"size {s} is not a non-negative number: {SIZE_HINT}")
        return int(Decimal(repr(s)).to_integral_value(ROUND_HALF_UP))
    if not isinstance(s, str):
        raise ValueError(f"{s!r} is not a size ({type(s).__name__}): {SIZE_HINT}")
    if s.strip().startswith("-"):
        raise ValueError(f"size {s!r} is negative: {SIZE_HINT}")
    m = _SIZE_RE.match(s)
    mult = _multiplier(m.group(2)) if m else None
    if m is None or mult is None:
        raise ValueError(f"{s!r} is not a size: {SIZE_HINT}")
    try:
        value = Decimal(m.group(1)) * mult
    except InvalidOperation as e:  # pragma: no cover - the regex admits only decimals
        raise ValueError(f"{s!r} is not a size: {SIZE_HINT}") from e
    return int(value.to_integral_value(ROUND_HALF_UP))


_SIZE_UNITS = ("B", "KB", "MB", "GB", "TB", "PB", "EB")


def format_bytes(n: int | float, digits: int = 1, compact: bool = False) -> str:
    """SI: 0 B, 512 B, 1.5 KB, 412.3 GB, 1.2 TB; `compact` for narrow panels: 512B, 1.5K, 1.2T."""
    sign = "-" if n < 0 else ""
    v = float(abs(n))
    if v < 1000:
        return f"{sign}{int(round(v))}{'' if compact else ' '}B"
    i = 0
    carry = 1000 - 0.5 * 10.0 ** -digits  # rounds up to the next unit: 999.96 KB prints as 1.0 MB
    while v >= carry and i < len(_SIZE_UNITS) - 1:
        v /= 1000
        i += 1
    unit = _SIZE_UNITS[i][0] if compact else " " + _SIZE_UNITS[i]
    return f"{sign}{v:.{digits}f}{unit}"


# -- Crash-safe files ----------------------------------------------------------------------
# One writer for every file that must be found whole after a kill or a power cut (the
# console's run files and records, a stage's stats, manifests and checkpoints' pointers):
# temp file, fsync, rename, fsync the folder. Here for the same reason as the sizes: the
# console may import only this module of the pipeline.

TEMP_SUFFIX = ".tmp"


def write_all(fd: int, buf: memoryview | bytes) -> None:
    view = memoryview(buf)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename (or a create, or an unlink) in `path` durable. Some filesystems cannot
    fsync a folder; the rename itself is still atomic there, so that is not an error."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes | Sequence[bytes | memoryview], tag: str = "",
                       mode: int = 0o644) -> None:
    """Temp + fsync + rename + folder fsync: a reader sees the old file or the complete new
    one. `data` may be a list of buffers, written in order, so a caller with large tensors
    never joins them into one copy. `tag` keeps concurrent writers (ranks, threads) off each
    other's temp file; a failed write removes its temp file."""
    parts = (data,) if isinstance(data, (bytes, bytearray, memoryview)) else data
    path = os.fspath(path)
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}{tag}{TEMP_SUFFIX}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        try:
            for part in parts:
                write_all(fd, part)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(folder or ".")


class EventWriter:
    """Appends events to a file; a no-op when constructed with no path."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self._fd: int | None = None
        self._path = os.fspath(path) if path else None
        if self._path:
            try:
                folder = os.path.dirname(self._path)
                if folder:
                    os.makedirs(folder, exist_ok=True)
                self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as e:
                self._give_up(e)

    def _give_up(self, e: OSError) -> None:
        print(f"warning: cannot write events to {self._path} (${ENV_VAR}): {e.strerror or e}; "
              "continuing without them", file=sys.stderr, flush=True)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @classmethod
    def from_env(cls) -> "EventWriter":
        return cls(os.environ.get(ENV_VAR) or None)

    @property
    def enabled(self) -> bool:
        return self._fd is not None

    def emit(self, kind: str, **fields: Any) -> None:
        if self._fd is None:
            return
        rec = {"t": round(time.time(), 3), "kind": kind, **fields}
        line = (json.dumps(rec, separators=(",", ":"), default=str) + "\n").encode()
        if len(line) > MAX_LINE:  # readers skip such a line: say so instead of vanishing
            line = (json.dumps({"t": rec["t"], "kind": "message", "level": "warning",
                                "text": f"a {kind} event of {len(line)} bytes was dropped (limit {MAX_LINE})"},
                               separators=(",", ":")) + "\n").encode()
        try:
            os.write(self._fd, line)
        except OSError as e:
            self._give_up(e)

    def progress(self, done: int | float, total: int | float | None, unit: str = "samples", **extra: Any) -> None:
        self.emit("progress", done=done, total=total, unit=unit, **extra)

    def metric(self, name: str, value: float, step: int | None = None, **extra: Any) -> None:
        self.emit("metric", name=name, value=value, step=step, **extra)

    def artifact(self, path: str, bytes: int | None = None, **extra: Any) -> None:  # noqa: A002
        self.emit("artifact", path=str(path), bytes=bytes, **extra)

    def message(self, text: str, level: str = "info", **extra: Any) -> None:
        self.emit("message", level=level, text=text, **extra)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "EventWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Event:
    t: float
    kind: str
    data: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


def parse_line(line: str | bytes) -> Event | None:
    """One line back into an Event; None for a torn, blank, over-long or foreign line.
    Never raises: a hostile line (200,000 `[`) must not stop a console's live stats."""
    if len(line) > MAX_LINE:
        return None
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError, MemoryError):
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("kind"), str):
        return None
    t = obj.pop("t", 0.0)
    kind = obj.pop("kind")
    try:
        t = float(t)
    except (TypeError, ValueError, OverflowError):
        t = 0.0
    return Event(t=t, kind=kind, data=obj)


def _skip_to_line_start(f: BinaryIO, offset: int, limit: int) -> int | None:
    """From inside a line, the offset just past its end, scanning at most `limit` bytes in
    blocks (nothing is kept); None when no newline is there yet."""
    pos = offset
    while pos - offset < limit:
        block = f.read(min(_SKIP_BLOCK, limit - (pos - offset)))
        if not block:
            return None
        nl = block.find(b"\n")
        if nl >= 0:
            return pos + nl + 1
        pos += len(block)
    return None


def read_events(path: str | os.PathLike[str], offset: int = 0,
                max_bytes: int = MAX_READ) -> tuple[list[Event], int]:
    """Events from byte `offset` up to the last complete line within `max_bytes`, and the
    offset to resume from: a line still being written is left for the next call.

    Bounded: at most `max_bytes` are parsed per call. A line longer than MAX_LINE is
    skipped, even while it is still being written: the returned offset may then fall inside
    it, and a call whose offset is not at a line start first skips to the next line (so 400
    MB written with no newline are scanned once, never re-read on every poll)."""
    want = max(int(max_bytes), MAX_LINE + 1)
    try:
        with open(path, "rb") as f:
            if offset > 0:
                f.seek(offset - 1)
                if f.read(1) != b"\n":
                    size = os.fstat(f.fileno()).st_size
                    resume = _skip_to_line_start(f, offset, _SKIP_LIMIT)
                    if resume is None:
                        return [], min(size, offset + _SKIP_LIMIT)
                    offset = resume
                    f.seek(offset)
            chunk = f.read(want)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return [], offset
    end = chunk.rfind(b"\n")
    if end < 0:
        # No complete line: an over-long one is skipped, a short one waits for its end.
        return [], (offset + len(chunk)) if len(chunk) > MAX_LINE else offset
    events = [e for e in (parse_line(ln) for ln in chunk[: end + 1].splitlines()) if e is not None]
    rest = len(chunk) - (end + 1)
    return events, offset + (len(chunk) if rest > MAX_LINE else end + 1)


def iter_events(path: str | os.PathLike[str]) -> Iterator[Event]:
    """Every event of a finished file, read in bounded steps."""
    offset = 0
    while True:
        events, nxt = read_events(path, offset)
        yield from events
        if nxt == offset:
            return
        offset = nxt

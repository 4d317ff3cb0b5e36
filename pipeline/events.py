"""The events protocol between a phase and the console (docs/internals.md, "Events protocol").

A phase appends one JSON object per line to the file named by $EAGLE3_EVENTS; with the
variable unset it writes nothing, so a stage run by hand pays nothing. A missing folder on
that path is created; where the file cannot be opened or written (a parent that is a file,
no permission, a full disk) the stage says so once on stderr and goes on without events:
progress reporting never fails the work it reports on. Each line is
written with a single write() on an O_APPEND descriptor so concurrent writers (ranks of
a sharded run) never interleave within a line. The console imports this module to read
the same format back. Beside it the console may import only `pipeline.sizes` and
`pipeline.atomic_io`, stdlib-only modules like this one.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

ENV_VAR = "EAGLE3_EVENTS"
KINDS = ("progress", "metric", "artifact", "message")
MAX_LINE = 64 * 1024          # bytes in one event line; longer ones are skipped
MAX_READ = 1024 * 1024        # bytes parsed per read_events call (one console poll)
_SKIP_LIMIT = 64 * 1024 * 1024  # bytes scanned per call to get past an over-long line
_SKIP_BLOCK = 1024 * 1024


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
    def from_env(cls) -> EventWriter:
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

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# A log line that is a warning: the one `warn` prints (`<stage>: warning: ...`), this module's
# own `warning: ...`, and Python's `warnings` (`file.py:12: UserWarning: ...`). The console
# marks these lines in a phase's log.
WARNING_LINE = re.compile(r"^(?:[\w.-]+: )?warning: |^\S+:\d+: \w*Warning: ")


def is_warning_line(line: str) -> bool:
    return WARNING_LINE.match(line) is not None


def warn(stage: str, text: str, events: EventWriter | None = None, *,
         log: Callable[[str], None] | None = None, **extra: Any) -> None:
    """A stage's warning: the line `<stage>: warning: <text>` in its log (stdout, or the stage's
    own `log`), and a `message` event of level `warning` that the console counts, to `events`,
    else to $EAGLE3_EVENTS for this one line. A torchrun rank other than 0 (RANK) writes no
    event of its own: a warning every rank meets is one warning, not one per GPU."""
    line = f"{stage}: warning: {text}"
    if log is not None:
        log(line)
    else:
        print(line, flush=True)
    if events is not None:
        events.message(text, level="warning", **extra)
    elif os.environ.get("RANK", "0") == "0":
        with EventWriter.from_env() as own:
            own.message(text, level="warning", **extra)


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

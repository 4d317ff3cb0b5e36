"""A project's deadline (`eagle3 run --until`, the console's `d`): the wall-clock time at which
every phase live at it gets the console's graceful stop (SIGTERM to its group, SIGKILL after the
grace), keeps its checkpoint, and reads `stopped` at the deadline, which the next `run --all`
resumes.

It is a file in the state dir, not a value held by the process that set it. Each run's launcher
looks at it while its phase runs and stops its own phase: so a deadline outlives the CLI or
console that set it (an SSH drop, a closed laptop), every console and CLI of the project sees
the same one, and each run is stopped once, by one process (a second SIGTERM from a second
watcher is "quit now, skip the cleanup" to many programs). A run that starts after the deadline
has passed is not its business: an operator's later start runs as it always did."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from console.core.files.atomicfile import atomic_write_json
from console.core.text.durations import MAX_DURATION, parse_duration
from console.core.text.errors import Eagle3Error
from pipeline.bounded_read import read_text

FILE = "deadline.json"
MAX_BYTES = 4096
MAX_GRACE = 3600.0
_CLOCK = re.compile(r"^\s*(\d{1,2}):(\d{2})(?::(\d{2}))?\s*$")


class DeadlineError(Eagle3Error, ValueError):
    """A deadline an operator typed that is not one, or a deadline file that cannot be read."""


@dataclass(frozen=True)
class Deadline:
    at: float  # unix time
    grace: float  # seconds from SIGTERM to SIGKILL, as a stop's
    set_at: float
    by: str  # who set it (user name)
    how: str  # what set it, as typed: `eagle3 run --until 8m30s`, `console: 14:05`

    def passed(self, now: float) -> bool:
        return now >= self.at

    def left(self, now: float) -> float:
        return max(0.0, self.at - now)

    def covers(self, started_at: float | None) -> bool:
        """Whether a run that started then is stopped at this deadline: one that began before
        it is; one that began after it had passed is not (a start of its own, later)."""
        return started_at is None or started_at < self.at

    def clock(self) -> str:
        """The deadline as an operator reads it: `14:05:00`, with the date when not today."""
        when = time.localtime(self.at)
        same_day = time.strftime("%Y%m%d", when) == time.strftime("%Y%m%d", time.localtime())
        return time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S", when)

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "grace": self.grace, "set_at": self.set_at, "by": self.by, "how": self.how}

    @classmethod
    def from_json(cls, d: Any) -> Deadline:
        if not isinstance(d, dict):
            raise DeadlineError("not a JSON object")
        try:
            out = cls(at=float(d["at"]), grace=float(d["grace"]), set_at=float(d.get("set_at", 0.0)),
                      by=str(d.get("by", "?")), how=str(d.get("how", "")))
        except (KeyError, TypeError, ValueError) as e:
            raise DeadlineError(f"missing or wrong field: {e}") from None
        if not 0 <= out.grace <= MAX_GRACE or out.at != out.at:
            raise DeadlineError(f"grace {out.grace} outside 0..{MAX_GRACE:.0f} s, or no time")
        return out


def path_of(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / FILE


def read(state_dir: str | os.PathLike[str]) -> Deadline | None:
    """The project's deadline, passed or not; None when none is set. Raises DeadlineError
    naming the file when it holds something else (a hand edit, a torn disk)."""
    path = path_of(state_dir)
    try:
        text = read_text(path, MAX_BYTES)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise DeadlineError(f"cannot read the deadline: {e}; set it again or delete the file") from None
    try:
        return Deadline.from_json(json.loads(text))
    except (json.JSONDecodeError, DeadlineError) as e:
        raise DeadlineError(f"{path}: not a deadline ({e}); set it again or delete the file") from None


def write(state_dir: str | os.PathLike[str], deadline: Deadline) -> None:
    atomic_write_json(path_of(state_dir), deadline.to_json())


def clear(state_dir: str | os.PathLike[str]) -> bool:
    """Remove the deadline; False when there was none."""
    try:
        path_of(state_dir).unlink()
    except FileNotFoundError:
        return False
    return True


def parse_until(text: str, now: float) -> float:
    """The unix time `--until` means: a duration from now (`8m30s`, `2h`), or a local clock
    time (`14:05`, `14:05:30`), the next one to come (tomorrow's when today's has passed).
    Raises DeadlineError saying what was expected."""
    m = _CLOCK.match(text)
    if m:
        hour, minute, second = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
        if hour > 23 or minute > 59 or second > 59:
            raise DeadlineError(f"--until {text}: not a time of day (HH:MM or HH:MM:SS, 24-hour)")
        base = dt.datetime.fromtimestamp(now)
        at = base.replace(hour=hour, minute=minute, second=second, microsecond=0)
        if at.timestamp() <= now:
            at += dt.timedelta(days=1)
        return at.timestamp()
    try:
        secs = parse_duration(text)
    except ValueError as e:
        raise DeadlineError(f"--until {text}: {e}, or a time of day like 14:05") from None
    if secs <= 0:
        raise DeadlineError(f"--until {text}: a deadline must be in the future (up to {MAX_DURATION / 86400:.0f}d)")
    return now + secs

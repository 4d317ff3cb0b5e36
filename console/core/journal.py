"""The record of what happened and who decided it: `<state>/journal.jsonl`.

Several processes append to it (the console, the CLI, every launcher), and any of them
may be killed mid-write. Each record is one line sent with a single write() on an
O_APPEND descriptor and fsynced before `append` returns, so a record that was reported
written survives a crash, records never interleave, and the worst a crash leaves is a
torn last line, which readers skip.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import stat
import time
from pathlib import Path
from typing import Any

from console.core.terminal_text import strip_format

FILE = "journal.jsonl"

# Events the core writes; others are allowed, these are the ones readers can rely on.
EVENTS = ("run_started", "run_ended", "checks", "override", "stop", "confirm", "verify")


def _user() -> str:
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
        rec.setdefault("user", _user())
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
             events: set[str] | None = None) -> list[dict[str, Any]]:
        """Records oldest first, optionally only one phase's or some events', at most the
        last `limit`. A line that does not parse (a torn write) is skipped."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return []
        out: list[dict[str, Any]] = []
        for line in raw.split(b"\n"):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (ValueError, UnicodeDecodeError):
                continue
            if not isinstance(rec, dict):
                continue
            if phase is not None and rec.get("phase") != phase:
                continue
            if events is not None and rec.get("event") not in events:
                continue
            # Only a line with non-ASCII bytes or a \u escape can hold a format character.
            out.append(rec if line.isascii() and b"\\u" not in line else _readable(rec))
        if limit is not None:
            out = out[-limit:] if limit > 0 else []
        return out

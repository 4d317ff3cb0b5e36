"""One running instance per phase, enforced by the kernel rather than by a pid file.

The spawner takes an flock on `<state>/locks/<phase>.lock` and hands the descriptor to the
launcher, which keeps it open until the run has ended and been verified. The lock goes
away with the last descriptor, so a launcher that is killed outright never leaves a stale
lock behind and nobody has to guess whether an old pid still means anything.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from console.core.text.errors import PhaseError

START_LOCK = "_start.lock"  # `_` never begins a phase id: no phase's lock has this name


@contextmanager
def start_lock(state_dir: str | os.PathLike[str]) -> Iterator[None]:
    """Held by a start from its live and needs checks until its run exists, so two starts
    in one project (a rerun of `a` beside a start of `b`, which needs it) are one after the
    other: the second sees the first's run. Blocking: a start waits for another's checks."""
    path = Path(state_dir) / "locks" / START_LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def lock_path(state_dir: str | os.PathLike[str], phase_id: str) -> Path:
    return Path(state_dir) / "locks" / f"{phase_id}.lock"


class PhaseLock:
    """A non-blocking exclusive lock on one phase; `acquire()` raises PhaseError when
    another holder has it."""

    def __init__(self, state_dir: str | os.PathLike[str], phase_id: str) -> None:
        self.phase_id = phase_id
        self.path = lock_path(state_dir, phase_id)
        self.fd: int | None = None

    def acquire(self, note: dict[str, Any] | None = None) -> PhaseLock:
        """Take the lock and write `note` (who holds it) into the file for error messages."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise PhaseError(f"phase {self.phase_id} is already running ({self.holder_text()}); "
                             "stop it first or wait") from None
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        self.write_note({"pid": os.getpid(), "at": time.time(), **(note or {})})
        return self

    def write_note(self, note: dict[str, Any]) -> None:
        """Replace the holder note (the spawner adds the launcher's pid once it exists)."""
        assert self.fd is not None, "write_note needs the lock held"
        body = json.dumps(note, default=str).encode() + b"\n"
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, body, 0)

    def holder(self) -> dict[str, Any] | None:
        """The note the current holder wrote, if readable."""
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def holder_text(self) -> str:
        h = self.holder() or {}
        pid = h.get("launcher_pid") or h.get("pid") or "?"
        at = h.get("at")
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if isinstance(at, (int, float)) else "?"
        return f"pid {pid}, since {since}"

    @property
    def held(self) -> bool:
        return self.fd is not None

    def release(self) -> None:
        """Close our descriptor; a launcher that inherited it keeps the lock held."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> PhaseLock:
        return self.acquire() if self.fd is None else self

    def __exit__(self, *exc: object) -> None:
        self.release()

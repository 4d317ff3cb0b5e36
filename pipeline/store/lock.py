"""One extraction per store: `StoreLock(out, rank, world_size).acquire()`.

Two runs appending to one store would write the same samples twice and interleave their
manifests. Each process that writes to a store holds an exclusive `flock` on
`<out>/.extract.rank<r>.lock` for its whole life (the kernel drops it when the process dies,
even by SIGKILL, so a crash never leaves a stale lock), with its pid, rank and world size
written inside. The ranks of one sharded run take different files; a second run is refused
because its rank's file is held, or because a held file belongs to another world size.

A refusal raises `StoreInUse` (a BadInput: exit code 2) whose text starts
"store <out> in use by pid N". Other writers of the store (the SGLang client) use the
same class:

    lock = StoreLock(out, rank=0, world_size=1).acquire()   # raises StoreInUse
    ...
    lock.release()                                          # or let the process end
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

from pipeline.program_edge import BadInput

PATTERN = ".extract.rank*.lock"


class StoreInUse(BadInput):
    """Another process writes this store now."""


def lock_path(out: Path, rank: int) -> Path:
    return Path(out) / f".extract.rank{rank}.lock"


def _holder(path: Path) -> dict:
    try:
        data = json.loads(path.read_text() or "{}")
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _held(path: Path) -> bool:
    """Whether another process holds `path`'s lock (tested with a non-blocking try)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _refusal(out: Path, info: dict) -> StoreInUse:
    pid = info.get("pid", "unknown")
    who = f" (rank {info['rank']} of {info['world_size']})" if "rank" in info and info.get("world_size", 1) > 1 else ""
    return StoreInUse(f"store {out} in use by pid {pid}{who}: another extraction writes to it; wait for it to end "
                      f"or stop it, then rerun (two runs on one store would write the same samples twice)")


class StoreLock:
    def __init__(self, out: Path | str, rank: int = 0, world_size: int = 1) -> None:
        self.out = Path(out)
        self.rank, self.world_size = rank, world_size
        self.path = lock_path(self.out, rank)
        self._fd = -1

    def acquire(self) -> StoreLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            info = {}
            for _ in range(20):  # the holder writes its pid right after it locks
                info = _holder(self.path)
                if info:
                    break
                time.sleep(0.01)
            raise _refusal(self.out, info) from None
        self._fd = fd
        for other in self.out.glob(PATTERN):
            if other == self.path:
                continue
            info = _holder(other)
            if info.get("world_size") != self.world_size and _held(other):
                self.release()
                raise _refusal(self.out, info)
        data = json.dumps({"pid": os.getpid(), "rank": self.rank, "world_size": self.world_size,
                           "since": round(time.time(), 3)}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        return self

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing drops the flock; the file stays (unlinking would race)
            self._fd = -1

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def __enter__(self) -> StoreLock:
        return self.acquire() if not self.held else self

    def __exit__(self, *exc: object) -> None:
        self.release()

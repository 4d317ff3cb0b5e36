"""The disk reserve: stop cleanly before extraction fills the output volume.

A run that fills the disk at hour 5 corrupts whatever else lives there and leaves torn
files; stopping while `--reserve` bytes are still free keeps the store consistent and lets
the operator free space and rerun the same command to resume.

Test hook: with `EAGLE3_EXTRACT_FAKE_FREE=<bytes>` set, the guard believes the volume had
that many bytes free when the run started, less what this process has written since, so a
test can hit the reserve after a few samples without filling a real disk.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from pipeline.extract.errors import ReserveStop
from pipeline.output_guard import DISK_FULL_ERRNOS, volume_of  # the one reading of a full disk's errno and volume
from pipeline.program_edge import BadInput

# One size syntax and one printed form for the whole project (`1.001GB` is the same number
# in a config check and in --reserve): see pipeline/events.py.
from pipeline.sizes import format_bytes, parse_size

__all__ = ["DiskGuard", "disk_full", "format_bytes", "is_disk_full", "parse_size", "volume_of"]

FAKE_FREE_ENV = "EAGLE3_EXTRACT_FAKE_FREE"


class DiskGuard:
    def __init__(self, path: Path, reserve: int) -> None:
        self.path = Path(path)
        self.reserve = reserve
        self._written = 0
        self._lock = threading.Lock()
        fake = os.environ.get(FAKE_FREE_ENV)
        try:
            self._fake = int(fake) if fake else None
        except ValueError:
            raise BadInput(f"{FAKE_FREE_ENV}={fake!r} is not a number of bytes") from None

    def note_written(self, nbytes: int) -> None:
        with self._lock:
            self._written += nbytes

    def free(self) -> int:
        if self._fake is not None:
            with self._lock:
                return self._fake - self._written
        p = self.path
        while not p.exists():
            p = p.parent
        st = os.statvfs(p)
        return st.f_bavail * st.f_frsize

    def check(self, need: int, done: int | None = None, total: int | None = None) -> None:
        """Raise ReserveStop when writing `need` more bytes would leave less than the reserve."""
        free = self.free()
        if free - need >= self.reserve:
            return
        raise ReserveStop(self.stop_message(free, need, done, total))

    def stop_message(self, free: int, need: int = 0, done: int | None = None, total: int | None = None) -> str:
        progress = f" ({done} of {total} samples are done)" if done is not None and total is not None else ""
        return (
            f"extract stopped by the disk reserve: {volume_of(self.path)} has {format_bytes(free)} free "
            f"({free} bytes), the next writes need about {format_bytes(need)} and the reserve is "
            f"{format_bytes(self.reserve)} (--reserve); free space on {volume_of(self.path)} and rerun "
            f"the same command to resume{progress}"
        )


def is_disk_full(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS


def disk_full(e: OSError, doing: str, out: Path | str | None) -> ReserveStop:
    """The exit-3 stop for a write that failed with ENOSPC/EDQUOT, wherever it happened."""
    where = f" {e.filename}" if e.filename else ""
    vol = f" on {volume_of(Path(out))}" if out is not None else ""
    return ReserveStop(
        f"extract stopped: the disk is full ({e.strerror or os.strerror(e.errno or 0)}) while {doing}{where}; the "
        f"samples listed in the manifest are kept; free space{vol} (or raise --reserve) and rerun the same command "
        "to resume"
    )

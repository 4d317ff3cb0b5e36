"""/dev/shm usage and the size of a dump folder in it (hidden states staged in shared memory).

The panel polls every couple of seconds, and a dump folder can hold millions of files, so the
folder scan stops after a fixed number of entries and says so rather than stalling the poll.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from console.core.telemetry.samples import ShmReading

MAX_ENTRIES = 200_000


def scan_folder(path: str | os.PathLike[str], max_entries: int = MAX_ENTRIES) -> tuple[int, int, bool]:
    """(regular files, their bytes, truncated) under `path`, recursively, without following
    symlinks, looking at no more than `max_entries` directory entries. Raises OSError when
    `path` itself cannot be listed."""
    files = 0
    total = 0
    seen = 0
    stack = [os.fspath(path)]
    first = True
    while stack:
        folder = stack.pop()
        try:
            it = os.scandir(folder)
        except OSError:
            if first:
                raise
            continue
        first = False
        with it:
            for entry in it:
                seen += 1
                if seen > max_entries:
                    return files, total, True
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        files += 1
                        total += entry.stat(follow_symlinks=False).st_size
                except OSError:
                    continue  # removed while we looked: a live dump folder churns
    return files, total, False


class ShmSource:
    """Reads the shared-memory filesystem and, optionally, a dump folder on it.

    Contract: `read() -> ShmReading` never raises and is thread-safe. Sizes are those of the
    filesystem holding `path`; an unreadable `path` gives None sizes and `error`. With `dump`
    set, `dump_files`/`dump_bytes` count regular files below it (recursively); when the scan
    hit `max_entries` they are lower bounds and `dump_truncated` is True; a missing or
    unreadable dump folder gives None counts and `dump_error`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = "/dev/shm",
        dump: str | os.PathLike[str] | None = None,
        max_entries: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = os.fspath(path)
        self.dump = os.fspath(dump) if dump is not None else None
        self.max_entries = max_entries
        self._clock = clock

    def read(self) -> ShmReading:
        t = self._clock()
        total = used = free = None
        error = None
        try:
            st = os.statvfs(self.path)
            total = st.f_blocks * st.f_frsize
            used = (st.f_blocks - st.f_bfree) * st.f_frsize
            free = st.f_bavail * st.f_frsize
        except OSError as exc:
            error = f"{self.path}: cannot read ({exc.strerror or exc})"
        except Exception as exc:  # noqa: BLE001
            error = f"{self.path}: cannot read ({exc})"
        files = nbytes = None
        truncated = False
        dump_error = None
        if self.dump is not None:
            try:
                if not Path(self.dump).is_dir():
                    dump_error = f"{self.dump}: no such folder (yet)"
                else:
                    files, nbytes, truncated = scan_folder(self.dump, self.max_entries)
            except OSError as exc:
                dump_error = f"{self.dump}: cannot list ({exc.strerror or exc})"
            except Exception as exc:  # noqa: BLE001
                dump_error = f"{self.dump}: cannot list ({exc})"
        return ShmReading(
            t=t,
            total=total,
            used=used,
            free=free,
            dump_path=self.dump,
            dump_files=files,
            dump_bytes=nbytes,
            error=error,
            dump_truncated=truncated,
            dump_error=dump_error,
        )

"""Used/free/total of the configured volumes (the disk panel, and the write-rate forecast).

A volume in the config is usually a folder a phase has not created yet (the workdir on a
fresh box), so it is measured on its nearest existing parent: the filesystem it will live on.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from console.core.telemetry.samples import DiskReading, VolumeSample


def nearest_existing(path: Path) -> Path | None:
    """`path` or its closest ancestor that exists; None if not even the root does."""
    p = Path(os.path.abspath(path))
    while True:
        if p.exists():
            return p
        if p.parent == p:
            return None
        p = p.parent


def measure(path: str | os.PathLike[str]) -> VolumeSample:
    """One volume; never raises. Sizes as `df` shows them: used counts reserved blocks out,
    free is what an unprivileged writer can still use."""
    name = os.fspath(path)
    try:
        target = nearest_existing(Path(name))
        if target is None:
            return VolumeSample(name, None, None, None, error=f"{name}: no part of this path exists")
        st = os.statvfs(target)
    except OSError as exc:
        return VolumeSample(name, None, None, None, error=f"{name}: cannot read ({exc.strerror or exc})")
    except Exception as exc:  # noqa: BLE001 - a panel never crashes
        return VolumeSample(name, None, None, None, error=f"{name}: cannot read ({exc})")
    total = st.f_blocks * st.f_frsize
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    free = st.f_bavail * st.f_frsize
    measured = None if str(target) == os.path.abspath(name) else str(target)
    return VolumeSample(name, total, used, free, measured_path=measured)


class DiskSource:
    """Reads every configured volume with `os.statvfs`.

    Contract: `read() -> DiskReading` never raises and is thread-safe (no shared mutable
    state). Each `VolumeSample.path` is the configured path as given; `measured_path` names
    the existing parent that was measured when the path itself does not exist yet; an
    unreadable volume has None sizes and an `error` line naming the path and the reason.
    statvfs on a hung network mount can block: call `read()` from a worker thread.
    """

    def __init__(self, volumes: Sequence[str | os.PathLike[str]], clock: Callable[[], float] = time.time) -> None:
        self.volumes = tuple(os.fspath(v) for v in volumes)
        self._clock = clock

    def read(self) -> DiskReading:
        return DiskReading(t=self._clock(), volumes=tuple(measure(v) for v in self.volumes))

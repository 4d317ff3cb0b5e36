"""The merged dataset written from the workers' part files: shuffled by position, copied into
a temporary file and renamed over --out, and what killed merges left behind removed."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
from collections import OrderedDict
from pathlib import Path

from pipeline import output_guard
from pipeline.atomic_io import fsync_dir
from pipeline.merge.chunks import ChunkResult
from pipeline.process_alive import pid_alive
from pipeline.records import merge_stats


class _PartReader:
    """Random reads from many part files with a bounded number of open descriptors."""

    def __init__(self, limit: int = 128) -> None:
        self._fds: OrderedDict[str, int] = OrderedDict()
        self._limit = limit

    def read(self, path: str, offset: int, length: int) -> bytes:
        fd = self._fds.pop(path, None)
        if fd is None:
            if len(self._fds) >= self._limit:
                os.close(self._fds.popitem(last=False)[1])
            fd = os.open(path, os.O_RDONLY)
        self._fds[path] = fd
        return os.pread(fd, length, offset)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def shuffled_entries(results: list[ChunkResult], seed: int) -> list[tuple[str, int, int]]:
    entries = [(r.part, off, n) for r in results for off, n in r.entries]
    random.Random(seed).shuffle(entries)
    return entries


def write_merged(out: Path, entries: list[tuple[str, int, int]], stats_path: Path) -> str:
    """Writes the dataset and returns its sha256. The old stats go first: a kill before
    the new stats land leaves a dataset without stats, never one with the wrong ones."""
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    digest = hashlib.sha256()
    reader = _PartReader()
    try:
        with os.fdopen(output_guard.open_output(tmp, create=True), "wb") as f:  # never through a planted link
            for part, off, n in entries:
                blob = reader.read(part, off, n)
                digest.update(blob)
                f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        stats_path.unlink(missing_ok=True)
        fsync_dir(stats_path.parent)  # the old stats are gone for good before the new dataset lands
        os.replace(tmp, out)
        fsync_dir(out.parent)
    finally:
        reader.close()
        if tmp.exists():
            tmp.unlink()
    return digest.hexdigest()


def default_stats_path(out: Path) -> Path:
    return merge_stats.beside(out)


def remove_stale_leftovers(out: Path) -> list[Path]:
    """Part folders and temporary datasets of merges into `out` whose process is gone
    (a SIGKILL, an OOM kill, a lost machine): they are named for their pid."""
    removed: list[Path] = []
    for pattern in (f".{out.name}.parts-*", f".{out.name}.tmp-*"):
        for path in out.parent.glob(pattern):
            pid = path.name.rsplit("-", 1)[-1]
            if not pid.isdigit() or int(pid) == os.getpid() or pid_alive(int(pid)):
                continue
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return removed

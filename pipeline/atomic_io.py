"""Crash-safe writes, one writer for every file that must be found whole after a kill or a
power cut: the console's run files and records, a stage's stats, manifests and checkpoints'
pointers. Temp file, fsync, rename, fsync the folder: a reader sees the old file or the complete
new one, never half of each, so a killed merge or extraction never leaves a file that looks
finished.

The console writes its run files with this same code, which is why it may import this module
(stdlib only, like `pipeline.events` and `pipeline.sizes`). Folders are swapped in by
`pipeline.output_guard`, which also decides which existing folder a stage may replace."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterable
from pathlib import Path

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


def _open_temp(tmp: str, mode: int) -> int:
    """The temp file, never through a symlink planted at its predictable name (O_TRUNC would
    cut whatever the link names): a link there is removed, not followed."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(tmp, flags, mode)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
    os.unlink(tmp)
    return os.open(tmp, flags | os.O_EXCL, mode)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes | Iterable[bytes | memoryview], tag: str = "",
                       mode: int = 0o644) -> None:
    """Temp + fsync + rename + folder fsync: a reader sees the old file or the complete new
    one. `data` may be a list (or a generator) of buffers, written in order, so a caller with
    large tensors, or a file's lines, never joins them into one copy. `tag` keeps concurrent writers (ranks, threads) off each
    other's temp file; a failed write removes its temp file."""
    parts = (data,) if isinstance(data, (bytes, bytearray, memoryview)) else data
    path = os.fspath(path)
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}{tag}{TEMP_SUFFIX}")
    fd = _open_temp(tmp, mode)
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


def write_json_atomic(path: Path, obj: object, tag: str = "") -> None:
    """Temp + fsync + rename; `tag` keeps concurrent writers (ranks) off each other's temp."""
    write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode(), tag)

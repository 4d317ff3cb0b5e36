"""Crash-safe writes for every stage: a file is either the old one or the complete new one,
never half of each, so a killed merge or extraction never leaves a file that looks finished."""

from __future__ import annotations

import json
import os
from pathlib import Path

TEMP_SUFFIX = ".tmp"


def write_all(fd: int, buf: memoryview | bytes) -> None:
    view = memoryview(buf)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, obj: object, tag: str = "") -> None:
    """Temp + fsync + rename; `tag` keeps concurrent writers (ranks) off each other's temp."""
    write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode(), tag)


def write_bytes_atomic(path: Path, data: bytes, tag: str = "") -> None:
    tmp = path.with_name(f".{path.name}{tag}{TEMP_SUFFIX}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)

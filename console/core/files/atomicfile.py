"""Crash-safe JSON files: the run directory, provenance records and anything else the
console must find whole after a power cut or a `kill -9`. The write itself is the
pipeline's (`pipeline.events.write_bytes_atomic`: temp, fsync, rename, fsync the folder);
the console's files are the owner's only (0600) and may be written by several threads and
processes at once, so each writer gets its own temp name."""

from __future__ import annotations

import json
import os
import secrets
import threading
from pathlib import Path
from typing import Any

from pipeline.atomic_io import fsync_dir, write_bytes_atomic

__all__ = ["atomic_write_json", "fsync_dir"]


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """JSON to `path` so that a crash leaves either the previous file or the complete new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(obj, indent=1, default=str) + "\n").encode("utf-8")
    tag = f".{os.getpid()}.{threading.get_ident() % 100000}.{secrets.token_hex(3)}"
    write_bytes_atomic(path, data, tag=tag, mode=0o600)
